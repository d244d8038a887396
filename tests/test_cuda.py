"""CUDA paths: device placement and no host sync between metric flushes (skipped without CUDA)."""

import contextlib
import json

import pytest
import torch

from reluexp.config import Config
from reluexp.record import metrics
from reluexp.run import losses, runner, state
from tests.helpers import seed_loop

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@contextlib.contextmanager
def syncs_allowed():
    torch.cuda.set_sync_debug_mode("default")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("error")


@pytest.mark.parametrize("activation", ["relu", "lean_relu"])
def test_steps_between_flushes_never_sync(tmp_path, monkeypatch, activation):
    """Every step runs with sync debug mode 'error'; only flushes and checkpoints may sync."""
    forward, flush, save = losses.forward, metrics.MetricStream.flush, state.save_checkpoint

    def strict_forward(*args):
        torch.cuda.set_sync_debug_mode("error")  # from the first step on
        return forward(*args)

    def allowed(function):
        def wrapped(*args, **kwargs):
            with syncs_allowed():
                return function(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(losses, "forward", strict_forward)
    monkeypatch.setattr(metrics.MetricStream, "flush", allowed(flush))
    monkeypatch.setattr(state, "save_checkpoint", allowed(save))
    config = Config(device="cuda", steps=300)
    config.activation.name = activation
    config.activation.target = {"relu": "torch.relu", "lean_relu": "reluexp.functions.LeanReLU"}[
        activation
    ]
    try:
        final_loss = runner.run(config, tmp_path).final_loss
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert final_loss < 1e3


def test_cuda_run_starts_from_the_cpu_draw(tmp_path):
    """Data and weights are drawn on the CPU and moved: step 0's loss matches the CPU's closely."""
    runner.run(Config(device="cuda", steps=1), tmp_path)
    summary = (tmp_path / "summary.json").read_text()
    assert '"device": "cuda' in summary
    cpu_first = seed_loop(steps=1)[0]["loss"]
    assert json.loads(summary)["final_loss"] == pytest.approx(cpu_first, rel=1e-4)
