"""The optional kernel (fast/, reluexp_fast): what it streams and how it trains are those of the
torch ops, and it refuses tensors it cannot safely read or write."""

from unittest import mock

import pytest
import torch

from reluexp.config import Config
from reluexp.record import metrics
from reluexp.run import runner
from reluexp.run.update import WeightUpdate
from tests.helpers import scalars

reluexp_fast = pytest.importorskip("reluexp_fast", reason="the kernel: pip install ./fast")

# Exact in both paths: the loss, the counts and what follows from them.
EXACT_TAGS = ("loss/", "units/", "param/")


def run_both(config: Config, tmp_path) -> dict:
    """The run through the kernel, and through the torch ops (the kernel hidden), same config."""
    results = {"kernel": runner.run(config, tmp_path / "kernel")}
    with mock.patch.object(metrics, "reluexp_fast", None):
        results["torch"] = runner.run(config, tmp_path / "torch")
    return results


def configs() -> dict[str, Config]:
    deep = Config(device="cpu", steps=300, log_every=1)
    deep.model.hidden, deep.model.bias = [40, 30], True
    prelu = Config(device="cpu", steps=300, log_every=1, lr=1e-4)
    prelu.model.init = "scaled"
    prelu.activation.name, prelu.activation.target = "prelu", "reluexp.functions.PReLU"
    return {"the seed": Config(device="cpu", steps=300, log_every=1), "deep": deep, "prelu": prelu}


@pytest.mark.parametrize("name", configs())
def test_the_kernel_trains_and_streams_as_the_torch_ops_do(name, tmp_path):
    config = configs()[name]
    results = run_both(config, tmp_path)
    assert results["kernel"].state.update.kernel and not results["torch"].state.update.kernel
    # The update is bit-identical: every loss and every final weight.
    assert list(results["kernel"].series.losses) == list(results["torch"].series.losses)
    for kernel_w, torch_w in zip(results["kernel"].state.weights, results["torch"].state.weights):
        assert torch.equal(kernel_w, torch_w)
    logged = {path: scalars(tmp_path / path) for path in ("kernel", "torch")}
    assert logged["kernel"].keys() == logged["torch"].keys()
    for tag, points in logged["torch"].items():
        kernel_points = logged["kernel"][tag]
        assert [step for step, _ in kernel_points] == [step for step, _ in points]
        if tag.startswith(EXACT_TAGS):
            assert kernel_points == points, tag
        else:  # squares summed in double by the kernel, in float32 by torch's dot product
            torch.testing.assert_close(
                torch.tensor([v for _, v in kernel_points]),
                torch.tensor([v for _, v in points]),
                rtol=1e-5,
                atol=0,
                msg=tag,
            )
    # The seed's counters have something to count (dead units: test_train's row test).
    if name == "the seed":
        assert max(v for _, v in logged["kernel"]["units/exact_zeros"]) > 0


def test_the_kernel_serves_only_the_seeds_update_of_float32_cpu_weights():
    weights = [torch.ones(3, 2, requires_grad=True)]
    assert WeightUpdate(Config(), weights, [], []).kernel
    assert not WeightUpdate(Config(optimizer="adam"), weights, [], []).kernel
    assert not WeightUpdate(Config(), [torch.ones(3, 2, dtype=torch.float64)], [], []).kernel
    assert not WeightUpdate(Config(), [torch.ones(2, 3).T], [], []).kernel


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: reluexp_fast.update_and_norms(torch.ones(4), torch.ones(4).double(), 0.1),
            "reluexp_fast: grad must be a contiguous torch.float32 CPU tensor",
        ),
        (
            lambda: reluexp_fast.update_and_norms(torch.ones(2, 3).T, torch.ones(6), 0.1),
            "reluexp_fast: w must be a contiguous torch.float32 CPU tensor",
        ),
        (
            lambda: reluexp_fast.update_and_norms(torch.ones(4), torch.ones(5), 0.1),
            "reluexp_fast: grad has 5 elements, 4 expected",
        ),
        (
            lambda: (lambda w: reluexp_fast.update_and_norms(w[:4], w[2:], 0.1))(torch.ones(6)),
            "reluexp_fast: w overlaps grad",
        ),
        (
            lambda: reluexp_fast.layer_counts(torch.ones(2, 3), torch.ones(3, 2)),
            "reluexp_fast: pre and post must be one (rows, units) shape, not (2, 3) and (3, 2)",
        ),
        (
            lambda: reluexp_fast.layer_counts(torch.ones(2, 3), torch.ones(2, 3).half()),
            "reluexp_fast: post must be a contiguous torch.float32 CPU tensor",
        ),
    ],
)
def test_the_kernel_refuses_what_it_cannot_safely_read_or_write(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    assert str(raised.value) == message
