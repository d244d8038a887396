"""The update of each step: the optimizer's settings and the schedule's lr, against torch's
own schedulers and an update written by hand."""

import copy
import math

import numpy as np
import pytest
import torch

from reluexp.config import Config, ConfigError
from reluexp.record import tags
from reluexp.record.block import Block
from reluexp.record.events import read_scalars
from reluexp.record.tags import LR
from reluexp.run import runner
from reluexp.run.outcome import Outcome
from reluexp.run.schedule import lr_factor
from reluexp.shell.lifecycle import closing_line
from reluexp.validation import validate
from tests.helpers import scalars

pytestmark = pytest.mark.compat


def torch_lrs(scheduler_of, steps: int) -> list[float]:
    """The lr torch's scheduler gives each step, stepped once a step after the update."""
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    scheduler = scheduler_of(optimizer)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize(
    ("schedule", "scheduler_of"),
    [
        (["schedule=cosine"], lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 40)),
        (
            ["schedule=step", "schedule.milestones=[10,25]", "schedule.gamma=0.5"],
            lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [10, 25], gamma=0.5),
        ),
        (["schedule=constant"], lambda o: torch.optim.lr_scheduler.ConstantLR(o, 1.0)),
    ],
)
def test_the_schedule_is_torchs(composed, schedule, scheduler_of):
    config = composed("lr=0.1", "steps=40", *schedule)
    ours = [config.lr * lr_factor(config, step) for step in range(40)]
    assert ours == pytest.approx(torch_lrs(scheduler_of, 40), rel=1e-12)


def test_a_warmup_rises_to_the_lr_then_the_schedule_starts(composed):
    config = composed("lr=0.1", "steps=14", "schedule=cosine", "schedule.warmup=4")
    lrs = [config.lr * lr_factor(config, step) for step in range(14)]
    assert lrs[:4] == pytest.approx([0.025, 0.05, 0.075, 0.1])
    cosine = torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10), 10)
    assert lrs[4:] == pytest.approx(cosine, rel=1e-12)


def test_a_scheduled_lr_streams_as_torchs_scheduler_gives_it(composed, tmp_path):
    config = composed("lr=1e-6", "steps=14", "schedule=cosine", "schedule.warmup=4", "log_every=3")
    runner.run(config, tmp_path / "cosine")
    streamed = read_scalars(tmp_path / "cosine", [LR])[LR]
    logged = [0, 3, 6, 9, 12, 13]  # every log_every steps, and the last
    cosine = torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10), 10)
    expected = [1e-5 * lr for lr in [0.025, 0.05, 0.075, 0.1, *cosine]]
    assert list(streamed) == logged
    # Event files hold float32.
    assert list(streamed.values()) == pytest.approx([expected[s] for s in logged], rel=1e-7)
    # A constant lr adds no chart.
    runner.run(composed("steps=3"), tmp_path / "constant")
    assert LR not in scalars(tmp_path / "constant")


def test_the_sgd_recipe_is_the_update_written_by_hand(composed, tmp_path):
    # Momentum, Nesterov's, weight decay on the weights only (not on the activation's own
    # slopes), the step schedule: the run's weights against the same SGD written out.
    steps, lr, momentum, decay = 6, 1e-5, 0.9, 0.1
    config = composed(
        "activation=prelu",
        "model.hidden=[7]",
        "model.init=scaled",
        "optimizer=sgd",
        f"optimizer.momentum={momentum}",
        "optimizer.nesterov=true",
        f"optimizer.weight_decay={decay}",
        "schedule=step",
        "schedule.milestones=[3]",
        "schedule.gamma=0.5",
        f"lr={lr}",
        f"steps={steps}",
    )
    prepared = runner.prepare(config)
    model = copy.deepcopy(prepared.built.model)
    result = runner.run(config, tmp_path, prepared=prepared)
    assert result.status == "completed"
    x, y = prepared.data.x, prepared.data.y
    params = dict(model.named_parameters())
    velocity = {name: torch.zeros_like(p) for name, p in params.items()}
    for step in range(steps):
        loss = (model(x) - y).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            for name, p in params.items():
                g = p.grad + (decay * p if name.startswith("w") else 0)
                velocity[name] = momentum * velocity[name] + g if step else g.clone()
                p -= lr * (0.5 if step >= 3 else 1.0) * (g + momentum * velocity[name])
                p.grad = None
    trained = dict(result.state.model.named_parameters())
    assert set(trained) == set(params) == {"w1", "w2", "act1.weight"}
    for name, p in params.items():
        torch.testing.assert_close(trained[name], p, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["optimizer=sgd", "optimizer.momentum=1.0"], "optimizer.momentum=1.0: must be in [0, 1)"),
        (
            ["optimizer=sgd", "optimizer.nesterov=true"],
            "optimizer.nesterov=True: needs optimizer.momentum > 0",
        ),
        (
            ["optimizer=adam", "optimizer.decay_all=true"],
            "optimizer.decay_all=True: decays nothing without weight decay",
        ),
        (
            ["optimizer=sgd", "optimizer.weight_decay=-1e-4"],
            "optimizer.weight_decay=-0.0001: must be finite and >= 0",
        ),
        (
            ["schedule=step", "schedule.milestones=[300,200]"],
            "schedule.milestones=[300, 200]: must be increasing steps from 1 on",
        ),
        (["schedule.warmup=500"], "schedule.warmup=500: must be from 0 to steps - 1 (499)"),
        (["schedule=step", "schedule.gamma=2.0"], "schedule.gamma=2.0: must be in (0, 1]"),
        (
            ["precision=fp16"],
            "precision=fp16: its gradient scaler steps a torch optimizer: optimizer=sgd or "
            "optimizer=adam",
        ),
    ],
)
def test_an_update_setting_that_cannot_be_is_one_line(composed, overrides, message):
    with pytest.raises(ConfigError) as raised:
        validate(composed(*overrides))
    assert str(raised.value).startswith(message), str(raised.value)


def test_an_optimizer_given_by_name_is_its_settings():
    assert Config(optimizer="adam").optimizer.name.value == "adam"
    assert Config(schedule="cosine").schedule.name.value == "cosine"


def test_the_lr_advice_measures_each_step_at_the_schedules_lr(composed):
    # Step 5's gradient is 5x step 0's, but its lr a tenth: the largest step is step 0's.
    config = composed("lr=0.1", "steps=10", "schedule=step", "schedule.milestones=[2]")
    streamed = tags.streamed(["w"], [])
    rows = []
    for gradient in (1.0, 5.0):
        values = {tags.GRAD_NORM_TOTAL: gradient, tags.WEIGHT_NORM_PREFIX + "w": 10.0}
        rows.append([values.get(tag, 1.0) for tag in streamed])
    block = Block(streamed, [], steps=[0, 5], times=[0.0, 0.0], rows=np.array(rows))
    outcome = Outcome()
    outcome.take_step_sizes(block, config)
    assert outcome.largest_step == pytest.approx(0.1 * 1.0 / 10.0)


def test_fp16_skips_the_steps_whose_gradients_overflow_and_streams_the_true_norms(
    composed, tmp_path
):
    # The article's summed loss has gradients of ~1e6: scaled by the scaler's first 65536 they
    # overflow float16, so the first steps are skipped while the scale comes down.
    config = composed("precision=fp16", "optimizer=sgd", "steps=30", "log_every=1")
    prepared = runner.prepare(config)
    start = copy.deepcopy(prepared.built.model)
    result = runner.run(config, tmp_path, prepared=prepared)
    assert result.status == "completed"  # an overflowed gradient is no divergence
    assert result.state.update.scaling.scaler.get_scale() < 65536
    streamed = read_scalars(tmp_path, ["norm/grad_w1", "norm/weight_w1", "loss/train"])
    grads, weights = list(streamed["norm/grad_w1"].values()), streamed["norm/weight_w1"]
    taken = next(step for step, norm in enumerate(grads) if math.isfinite(norm))
    assert taken > 0
    # A skipped step leaves the weights as they were.
    assert {weights[step] for step in range(taken)} == {weights[0]}
    assert weights[0] == pytest.approx(start.w1.norm().item(), rel=1e-6)
    # The first step taken still starts from the initial weights: its gradient norm, unscaled,
    # is float32's of the same loss (within float16's rounding of the forward).
    loss = (start(prepared.data.x) - prepared.data.y).pow(2).sum()
    loss.backward()
    assert grads[taken] == pytest.approx(start.w1.grad.norm().item(), rel=1e-2)
    assert all(math.isfinite(v) for v in streamed["loss/train"].values())
    # Every skipped step counted: the summary, and the running count as a tag.
    totals = read_scalars(tmp_path, [tags.GRAD_NORM_TOTAL])[tags.GRAD_NORM_TOTAL]
    skipped = [not math.isfinite(totals[step]) for step in range(30)]
    assert (result.summary.skipped_steps, result.summary.recorded_steps) == (sum(skipped), 30)
    counts = read_scalars(tmp_path, [tags.SKIPPED_STEPS])[tags.SKIPPED_STEPS]
    assert [counts[step] for step in range(30)] == [sum(skipped[: s + 1]) for s in range(30)]


@pytest.mark.parametrize("target", ["reluexp.functions.MyReLU", "tests.helpers.NanGradientRelu"])
def test_an_fp16_run_whose_steps_were_all_skipped_diverged_and_says_so(composed, tmp_path, target):
    """58: the article's gradients overflow float16 at any scale the scaler reaches in 20 steps
    (and a NaN backward's always do): no step was taken, so no `completed` and no lr advice."""
    config = composed("precision=fp16", "optimizer=sgd", "steps=20")
    config.activation.target = target
    result = runner.run(config, tmp_path)
    summary = result.summary
    assert (result.status, summary.diverged_on, summary.diverged_at_step) == (
        "diverged",
        "gradients in float16",
        19,
    )
    assert (summary.skipped_steps, summary.recorded_steps, summary.steps_done) == (20, 20, 20)
    assert not any("lr" in warning for warning in summary.warnings)
    counts = read_scalars(tmp_path, [tags.SKIPPED_STEPS])[tags.SKIPPED_STEPS]
    assert list(counts.items()) == [(step, step + 1) for step in range(20)]
    assert closing_line(tmp_path).startswith(
        "reluexp: diverged after 20 steps (non-finite gradients in float16 at step 19; fp16's "
        "gradient scaler skipped 20 of 20 recorded steps), final loss "
    )


def test_fp32_records_no_skipped_steps(composed, tmp_path):
    result = runner.run(composed("steps=5", "data.d_in=50"), tmp_path)
    assert (result.summary.skipped_steps, result.summary.recorded_steps) == (None, 5)
    assert tags.SKIPPED_STEPS not in scalars(tmp_path)
