"""CUDA paths: device placement and no host sync between metric flushes (skipped without CUDA)."""

import contextlib
import json

import pytest
import torch

from reluexp.config import Config
from reluexp.options import SGDConfig
from reluexp.record import metrics
from reluexp.run import loop, runner
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


@pytest.mark.parametrize(
    ("activation", "precision"), [("relu", "fp32"), ("lean_relu", "fp32"), ("relu", "fp16")]
)
def test_steps_between_flushes_never_sync(tmp_path, monkeypatch, activation, precision):
    """Every step runs with sync debug mode 'error' (a sync raises); only flushes and
    checkpoints may sync. Under fp16 the gradient scaler's overflow flag stays on the device
    (a fused optimizer takes it there)."""
    make_objective, train_loop = loop.objective, runner.train_loop

    def strict_objective(config, data):
        loss_of = make_objective(config, data)

        def strict(*args):
            torch.cuda.set_sync_debug_mode("error")  # from the first step on
            return loss_of(*args)

        return strict

    def allowed(method):
        def wrapped(*args, **kwargs):
            with syncs_allowed():
                return method(*args, **kwargs)

        return wrapped

    def strict_train_loop(training):
        try:
            train_loop(training)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(loop, "objective", strict_objective)
    monkeypatch.setattr(loop.Training, "flush", allowed(loop.Training.flush))
    monkeypatch.setattr(loop.Training, "checkpoint", allowed(loop.Training.checkpoint))
    monkeypatch.setattr(runner, "train_loop", strict_train_loop)
    config = Config(device="cuda", steps=300, checkpoint_every=100, precision=precision)
    if precision == "fp16":  # the scaler steps an optimizer
        config.optimizer = SGDConfig()
    config.activation.name = activation
    config.activation.target = {"relu": "torch.relu", "lean_relu": "reluexp.functions.LeanReLU"}[
        activation
    ]
    result = runner.run(config, tmp_path)
    assert (result.status, result.final_loss < 1e3) == ("completed", True)


def test_accelerator_norms_are_true_beyond_float32_squares():
    """A float32 tensor whose squares overflow float32 (and one whose squares underflow) has
    the same squared norm on the accelerator as on the CPU, in float64."""
    big = torch.full((1000,), 1e20)
    small = torch.full((1000,), 1e-25)
    on_cpu = metrics.squared_norms([big, small])
    on_cuda = metrics.squared_norms([big.cuda(), small.cuda()]).cpu()
    assert on_cpu.tolist() == pytest.approx([1e43, 1e-47], rel=1e-6)
    assert on_cuda.tolist() == pytest.approx(on_cpu.tolist(), rel=1e-6)


def test_cuda_run_starts_from_the_cpu_draw(tmp_path):
    """Data and weights are drawn on the CPU and moved: step 0's loss matches the CPU's closely."""
    runner.run(Config(device="cuda", steps=1), tmp_path)
    summary = (tmp_path / "summary.json").read_text()
    assert '"device": "cuda' in summary
    cpu_first = seed_loop(steps=1)[0]["loss"]
    assert json.loads(summary)["final_loss"] == pytest.approx(cpu_first, rel=1e-4)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_on_cuda(tmp_path, composed, precision):
    """The CNN on digits under CUDA autocast (fp16 with its gradient scaler on the device):
    completed, the weights float32, the loss down."""
    config = composed(
        "model=cnn",
        "data=digits",
        f"precision={precision}",
        "optimizer=sgd",
        "lr=0.1",
        "model.init=scaled",
        "steps=60",
        "device=cuda",
    )
    result = runner.run(config, tmp_path)
    assert result.status == "completed"
    assert {p.dtype for p in result.state.model.parameters()} == {torch.float32}
    outcome = result.state.outcome
    assert outcome.final_loss < outcome.first_loss
