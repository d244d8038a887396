"""The framework's loop against an independent copy of the seed's loop, number for number."""

import collections
import copy
import json
import math
import re
from unittest import mock

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from reluexp import _compat
from reluexp.config import Config, ConfigError
from reluexp.functions.targets import layers_of
from reluexp.record import metrics, tags
from reluexp.record.metrics import COUNTED_AS_IS, MetricStream, flat, nonzeros, nonzeros_of_group
from reluexp.record.tags import streamed
from reluexp.run import losses, runner
from reluexp.run.data import Dataset
from reluexp.run.model import Capture, build_model
from reluexp.run.update import WeightUpdate
from tests.helpers import REPO_ROOT, SeedRelu, run_cli, scalars, seed_loop, tensorboard

pytestmark = pytest.mark.compat


def test_default_command_prints_the_seed_losses_bit_for_bit(tmp_path, seed_steps):
    result = run_cli("device=cpu", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    expected = [f"{t} {r['loss']!r}" for t, r in enumerate(seed_steps) if t % 100 == 99]
    assert result.stdout.splitlines() == expected
    # The log keeps them too; under load a run past 30 s also logs `progress:` lines there.
    log_lines = [
        line.split(" - ", 1)[1] for line in (tmp_path / "reluexp.log").read_text().splitlines()
    ]
    kept = [line for line in log_lines if not line.startswith("progress: ")]
    assert kept[:-1] == expected
    assert kept[-1] == result.stderr.strip().splitlines()[-1]  # and the closing line


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    final_loss = runner.run(Config(device="cpu"), run_dir, overrides=["device=cpu"]).final_loss
    return run_dir, final_loss


def test_events_hold_every_step_of_the_loop(default_run, seed_steps):
    run_dir, _ = default_run
    logged = scalars(run_dir)
    assert [step for step, _ in logged["loss/train"]] == list(range(500))
    # Event files store float32 scalars; the loss is float32, so it survives exactly.
    assert [v for _, v in logged["loss/train"]] == [r["loss"] for r in seed_steps]
    assert [v for _, v in logged["units/exact_zeros"]] == [r["exact_zeros"] for r in seed_steps]
    assert [v for _, v in logged["units/dead_fraction"]] == pytest.approx(
        [r["dead_fraction"] for r in seed_steps], abs=1e-7
    )
    for tag, key in [
        ("norm/grad_w1", "grad_w1"),
        ("norm/grad_w2", "grad_w2"),
        ("norm/weight_w1", "weight_w1"),
    ]:
        torch.testing.assert_close(
            torch.tensor([v for _, v in logged[tag]]),
            torch.tensor([r[key] for r in seed_steps], dtype=torch.float32),
            rtol=1e-5,
            atol=0,
        )
    total = [math.hypot(r["grad_w1"], r["grad_w2"]) for r in seed_steps]
    assert [v for _, v in logged["norm/grad_total"]] == pytest.approx(total, rel=1e-5)


def test_exact_zero_preactivations_occur_in_the_reference(seed_steps):
    # The finding the framework exists to show: myrelu and relu disagree at these inputs.
    assert sum(r["exact_zeros"] > 0 for r in seed_steps) > 100


def test_summary_records_the_completed_run(default_run, seed_steps):
    run_dir, final_loss = default_run
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["steps_done"] == 500
    assert summary["final_loss"] == final_loss == seed_steps[-1]["loss"]
    assert summary["min_loss"] == min(r["loss"] for r in seed_steps)
    assert summary["device"] == "cpu" and summary["dtype"] == "float32" and summary["seed"] == 42
    assert summary["threads"] == torch.get_num_threads()
    assert summary["versions"]["torch"] == torch.__version__
    assert summary["overrides"] == ["device=cpu"]
    assert summary["steps_per_s"] > 0 and summary["wall_time_s"] > 0


def test_hparams_land_in_the_same_run(default_run, seed_steps):
    run_dir, _ = default_run
    events = tensorboard(run_dir)
    plugin_data = events.PluginTagToContent("hparams")
    assert set(plugin_data) == {
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    assert b"myrelu" in plugin_data["_hparams_/session_start_info"]
    final = scalars(run_dir)["summary/final_loss"]
    assert [value for _, value in final] == [seed_steps[-1]["loss"]]
    assert not [p for p in run_dir.iterdir() if p.is_dir()]  # no sub-run


def test_a_sweep_jobs_hparams_trial_is_named_by_what_tells_it_from_the_others(tmp_path):
    """62.9: the HParams tab's Trial ID column shows about 16 characters of a run's name, so a
    sweep's jobs read alike (`multirun/2026-.../000_activation=custom,activation.refe...`);
    the values that tell them apart come first (their keys are the columns beside it)."""
    from tensorboard.plugins.hparams import plugin_data_pb2

    def trial(run_dir, overrides, varying):
        runner.run(Config(device="cpu", steps=2), run_dir, overrides, varying=varying)
        start = tensorboard(run_dir).PluginTagToContent("hparams")["_hparams_/session_start_info"]
        return plugin_data_pb2.HParamsPluginData.FromString(start).session_start_info.group_name

    sweep = tmp_path / "2026-12-06_09-25-38.293936_910"
    overrides = ["activation=custom", "activation.target=my.MySoftplus", "seed=1", "steps=2"]
    job = sweep / "001_activation=custom,activation.target=my.MySoftplus,seed=1,steps=2"
    named = trial(job, overrides, frozenset({"seed", "activation.target"}))
    assert named == "my.MySoftplus 1 (2026-12-06_09-25-38.293936_910/001)"
    assert trial(tmp_path / "single", ["steps=2"], frozenset()) == ""  # the run's name


def test_builtin_relu_matches_the_seed_loop_with_torch_relu(tmp_path, seed_steps_with_torch_relu):
    steps = 60
    reference = seed_steps_with_torch_relu[:steps]
    config = Config(device="cpu", steps=steps)
    config.activation.name, config.activation.target = "relu", "torch.relu"
    runner.run(config, tmp_path)
    assert [v for _, v in scalars(tmp_path)["loss/train"]] == [r["loss"] for r in reference]


def test_myrelu_and_relu_part_after_an_exact_zero(seed_steps, seed_steps_with_torch_relu):
    builtin = seed_steps_with_torch_relu
    first_zero = next(t for t, r in enumerate(seed_steps) if r["exact_zeros"])
    first_difference = next(
        t for t, (a, b) in enumerate(zip(seed_steps, builtin)) if a["loss"] != b["loss"]
    )
    # Equal up to the step whose backward first met an exact zero; its update differs.
    assert first_difference == first_zero + 1


def test_deeper_mlp_logs_a_norm_per_weight(tmp_path):
    config = Config(device="cpu", steps=5, lr=1e-8)
    config.model.hidden = [32, 16]
    runner.run(config, tmp_path)
    tags = set(scalars(tmp_path))
    assert {"norm/grad_w1", "norm/grad_w2", "norm/grad_w3", "norm/weight_w3"} <= tags


def test_float64_starts_from_the_same_draw(tmp_path, seed_steps):
    steps = 3
    config = Config(device="cpu", steps=steps, dtype="float64")
    final64 = runner.run(config, tmp_path / "f64").final_loss
    assert final64 == pytest.approx(seed_steps[steps - 1]["loss"], rel=1e-4)
    assert final64 != seed_steps[steps - 1]["loss"]


def test_log_every_records_every_nth_step_and_the_last(tmp_path):
    config = Config(device="cpu", steps=10, log_every=4)
    runner.run(config, tmp_path)
    assert [step for step, _ in scalars(tmp_path)["loss/train"]] == [0, 4, 8, 9]


def test_missing_device_is_an_error_not_a_fallback(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    with pytest.raises(ConfigError, match="device='cuda': CUDA is not available"):
        runner.run(Config(device="cuda"), tmp_path)
    assert not (tmp_path / "summary.json").exists()


def test_seed_relu_copy_is_the_seed(seed_steps):
    assert SeedRelu.apply(torch.tensor([0.0], requires_grad=True)).item() == 0.0


def test_the_hooks_leave_the_loss_computation_detached():
    # Under compile=true an output that requires grad gets a zero gradient materialized and
    # added in the compiled backward, every step.
    x, y = torch.randn(4, 6), torch.randn(4, 2)
    config = Config()
    config.model.hidden = [5, 3]
    built = build_model(
        config, (x, 2), layers_of(torch.relu, "torch.relu", {}), torch.Generator().manual_seed(0)
    )
    assert [(site.name, site.units) for site in built.sites] == [("act1", 5), ("act2", 3)]
    loss_of = losses.objective(config, Dataset(x, y))
    built.capture.start()
    loss, _ = loss_of(built.model, x, y)
    calls = built.capture.take()
    assert loss.requires_grad
    assert [(pre.requires_grad, post.requires_grad) for pre, post in calls] == [(False, False)] * 2
    assert [tuple(post.shape) for _, post in calls] == [(4, 5), (4, 3)]
    built.model(x)
    assert built.capture.take() == []  # only while asked


@pytest.mark.parametrize(
    ("log_every", "compiled", "held"), [(10, False, False), (2, False, True), (10, True, True)]
)
def test_the_hooks_are_held_only_through_captures_unless_recording_often_or_compiled(
    log_every, compiled, held
):
    # A hooked Module's calls take torch's slower hooked path: a run streaming every Nth step
    # hooks its activation only for the steps it records.
    x = torch.randn(4, 6)
    config = Config(log_every=log_every, compile=compiled)
    config.model.hidden = [5, 3]
    hooked_calls = []

    class Counted(Capture):
        def hook(self, module, inputs, output):
            hooked_calls.append(module)
            super().hook(module, inputs, output)

    with mock.patch("reluexp.run.model.Capture", Counted):
        built = build_model(
            config, (x, 2), layers_of(torch.relu, "torch.relu", {}), torch.Generator()
        )
    hooked_calls.clear()
    built.model(x)
    assert len(hooked_calls) == (2 if held else 0)
    built.capture.start()
    built.model(x)
    assert len(built.capture.take()) == 2
    hooked_calls.clear()
    built.model(x)
    assert len(hooked_calls) == (2 if held else 0)


@pytest.mark.slow
def test_compile_keeps_the_reference_numbers_within_float_rounding(tmp_path):
    steps = 60
    runner.run(Config(device="cpu", steps=steps, compile=True), tmp_path)
    compiled = [v for _, v in scalars(tmp_path)["loss/train"]]
    eager = [r["loss"] for r in seed_loop(steps=steps)]
    # Fused kernels may sum in another order: the losses agree to float32 rounding, not bits.
    torch.testing.assert_close(torch.tensor(compiled), torch.tensor(eager), rtol=1e-5, atol=0)


def test_a_row_counts_dead_units_zeros_and_norms():
    # Units: always 0 (dead), 0 or negative (alive, as a leaky unit), mixed (alive), -0.0
    # (dead), NaN in one example (alive: a diverging run's units are not reported dead).
    nan = math.nan
    post = torch.tensor([[0.0, 0.0, 0.0, -0.0, 1.0], [0.0, -0.1, 2.0, 0.0, nan]])
    pre = torch.tensor([[0.0, -5.0, -1.0, -0.0, 1.0], [-3.0, -1.0, 2.0, -2.0, nan]])
    # A second site, of images (N, C, H, W): a unit is a channel, the second 0 throughout, the
    # first alive though one of its positions is 0 in every example.
    image = torch.tensor([[[[1.0, 0.0]], [[0.0, 0.0]]], [[[-3.0, 0.0]], [[0.0, 0.0]]]])
    w1, w2 = torch.ones(29, 7, requires_grad=True), torch.ones(5, 1, requires_grad=True)
    w1.grad, w2.grad = torch.full((29, 7), 2.0), torch.zeros(5, 1)
    stream = MetricStream(["w1", "w2"], [("act1", 5), ("conv.act", 2)], {})
    update = WeightUpdate(Config(lr=0.25), {"w1": w1, "w2": w2}, [])
    stream.start_row(0)
    # post laid out column by column (an activation may return any strides).
    stream.record_activations(torch.tensor(1.5), [(pre, post.T.contiguous().T), (image, image)])
    with torch.no_grad():
        update(stream, 0)
    stream.end_row()
    block = stream.flush()
    assert block.steps == [0] and block.sites == ["act1", "conv.act"]
    assert block.live_units.tolist() == [[3, 1]]
    row = dict(zip(streamed(["w1", "w2"], ["act1", "conv.act"]), block.rows[0]))
    assert row["loss/train"] == 1.5
    assert row["units/act1/dead_fraction"] == 0.4 and row["units/act1/exact_zeros"] == 2
    assert math.isnan(row["units/act1/output_max"])  # what a diverging run's NaN shows
    assert row["units/conv.act/dead_fraction"] == 0.5 and row["units/conv.act/exact_zeros"] == 6
    assert (row["units/conv.act/output_max"], row["units/conv.act/output_min"]) == (1.0, -3.0)
    assert row["units/dead_fraction"] == 1 - 4 / 7 and row["units/exact_zeros"] == 8
    # Squares summed in float32: exact here.
    assert row["norm/grad_w1"] == math.sqrt(4 * 203)
    assert row["norm/grad_total"] == math.sqrt(4 * 203)
    # The seed's update: 1 - 0.25 * 2 = 0.5 everywhere; the gradients are dropped.
    assert torch.equal(w1.detach(), torch.full((29, 7), 0.5))
    assert row["norm/weight_w1"] == math.sqrt(0.25 * 203)
    assert w1.grad is None and w2.grad is None
    assert stream.flush().steps == []


def test_site_statistics_are_their_definitions_however_the_sites_are_grouped():
    # Small image sites of one shape (stacked and reduced together), large ones of one shape
    # (each reduced alone: a stack would copy them) and a 2-D site, in an interleaved order;
    # the reductions go over the batch first and then a channel's positions, whose one-op
    # form was many times slower for small images. Every value is its definition per site.
    generator = torch.Generator().manual_seed(0)

    def site(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
        pre = torch.randn(*shape, generator=generator).round()  # exact zeros among them
        post = pre.clamp(min=0)
        post[:, 0] = 0  # a dead unit
        return pre, post

    small, large = (4, 3, 2, 2), (2, 4, 80, 60)
    calls = [site(*small), site(*large), site(5, 7), site(*small), site(*large), site(*small)]
    units = [post.shape[1] for _, post in calls]
    names = [f"act{i}" for i in range(len(calls))]
    stream = MetricStream(["w"], list(zip(names, units)), {})
    w = torch.ones(3)
    stream.start_row(0)
    stream.record_activations(torch.tensor(0.0), calls)
    stream.record_grad_norms([w])  # no gradient: 0
    stream.record_weight_norms([w])
    stream.end_row()
    assert stream.layout.groups == [[0, 3, 5], [1], [2], [4]]
    values = dict(zip(stream.tags, stream.flush().rows[0]))
    for name, (pre, post) in zip(names, calls):
        per_unit = post.transpose(0, 1).reshape(post.shape[1], -1)
        alive = int((per_unit != 0).any(dim=1).sum())
        assert values[f"units/{name}/dead_fraction"] == 1 - alive / post.shape[1] > 0
        assert values[f"units/{name}/exact_zeros"] == (pre == 0).sum() > 0
        assert values[f"units/{name}/output_max"] == post.max()
        assert values[f"units/{name}/output_min"] == post.min()


@pytest.mark.parametrize("size", [COUNTED_AS_IS, COUNTED_AS_IS + 1])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_nonzeros_counts_nan_and_not_negative_zero_on_either_side_of_the_direct_count(size, dtype):
    subnormal = torch.finfo(dtype).tiny / 4
    values = torch.zeros(size, dtype=dtype)
    values[:9] = torch.tensor(
        [1.0, -0.0, math.nan, -2.0, 0.0, -math.inf, subnormal, -math.nan, -0.0], dtype=dtype
    )
    assert values[6] != 0
    assert nonzeros(values).item() == 6
    assert nonzeros(values[::2]).item() == (values[::2] != 0).sum() == 3  # NaN != 0


def test_a_groups_counts_are_each_inputs_own():
    inputs = [torch.tensor([[0.0, -0.0], [math.nan, 2.0]]), torch.tensor([[1.0, 1.0], [0.0, 3.0]])]
    assert nonzeros_of_group(inputs).tolist() == [nonzeros(x).item() for x in inputs] == [2, 3]
    assert nonzeros_of_group(inputs[:1]).tolist() == [2]


def is_view(op: str) -> bool:
    """Whether an aten op the profiler names (`aten::detach`) returns a view: no kernel."""
    packet = getattr(torch.ops.aten, op.removeprefix("aten::"))
    return any(getattr(packet, overload).is_view for overload in packet.overloads())


def launches_of_a_row(depth: int) -> collections.Counter:
    """The ops of a streamed row of an MLP with `depth` hidden layers and a learnable scalar
    activation parameter per layer, on the meta device: the stream's accelerator path, shapes
    without values."""
    meta = torch.device("meta")
    params = [torch.zeros(100, 100, device=meta, requires_grad=True) for _ in range(depth + 1)]
    for p in params:
        p.grad = torch.zeros_like(p)
    slopes = [torch.zeros((), device=meta) for _ in range(depth)]
    stream = MetricStream(
        [f"w{i}" for i in range(depth + 1)],
        [(f"act{i}", 100) for i in range(depth)],
        {f"act{i}.slope": 1 for i in range(depth)},
    )
    calls = [(torch.zeros(64, 100, device=meta), torch.zeros(64, 100, device=meta))] * depth
    loss = torch.zeros((), device=meta)

    def row(step: int) -> None:
        stream.start_row(step)
        stream.record_activations(loss, calls)
        stream.record_grad_norms(params)
        stream.record_weight_norms([flat(p) for p in params])
        stream.record_activation_params(slopes)
        stream.end_row()

    row(0)  # lays the block out
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as ops:
        row(1)
    # The ops the row calls itself (not those they call), each a launch on an accelerator.
    return collections.Counter(
        op.name for op in ops.events() if op.cpu_parent is None and not is_view(op.name)
    )


def test_a_streamed_rows_launches_on_an_accelerator_do_not_grow_with_depth():
    if _compat.FOREACH_FLOAT64_NORM is None:
        pytest.skip(
            f"torch {torch.__version__}'s _foreach_norm takes no dtype: its public fallback "
            "takes a norm per tensor, a launch per layer"
        )
    rows = {depth: launches_of_a_row(depth) for depth in (2, 4, 12, 24)}
    assert rows[2]["aten::count_nonzero"] == 1  # one count for the layers' group
    assert all(ops == rows[2] for ops in rows.values()), rows


def test_a_block_of_sites_with_many_units_holds_fewer_rows_and_keeps_every_value(monkeypatch):
    # Each row's extremes take 2 x 6 x 4 bytes: a budget of 100 bytes holds two rows a block.
    monkeypatch.setattr(metrics, "EXTREMES_BYTES", 100)
    stream = MetricStream(["w"], [("act", 6)], {})
    blocks = []
    for step in range(5):
        pre = torch.arange(12.0).reshape(2, 6) - step  # one exact zero a step
        stream.start_row(step)
        stream.record_activations(torch.tensor(float(step)), [(pre, pre.clamp(min=0))])
        stream.record_grad_norms([torch.ones(1)])
        stream.record_weight_norms([torch.full((4,), float(step))])
        stream.end_row()
        if stream.due:
            blocks.append(stream.flush())
    blocks.append(stream.flush())
    assert stream.capacity == 2
    assert [block.steps for block in blocks] == [[0, 1], [2, 3], [4]]
    rows = [dict(zip(stream.tags, row)) for block in blocks for row in block.rows]
    for step, row in enumerate(rows):
        assert row["loss/train"] == step
        assert row["norm/weight_w"] == 2 * step
        assert row["units/act/exact_zeros"] == 1
        assert row["units/act/output_max"] == 11 - step


def test_a_smaller_last_batch_keeps_the_grouping_of_the_sites():
    # Two sites of 128 x 300 elements are each reduced alone (over STACKED_ELEMENTS); in a last
    # batch of 100 they are small enough to stack, but a block's rows must be grouped alike:
    # the last batch keeps the first's grouping and every value is still its definition.
    generator = torch.Generator().manual_seed(1)
    batches = [
        [(pre, pre.clamp(min=0)) for pre in torch.randn(2, n, 300, generator=generator).round()]
        for n in (128, 100)
    ]
    stream = MetricStream(["w"], [("act0", 300), ("act1", 300)], {})
    for step, calls in enumerate(batches):
        stream.start_row(step)
        stream.record_activations(torch.tensor(0.0), calls)
        stream.record_grad_norms([torch.ones(1)])
        stream.record_weight_norms([torch.ones(1)])
        stream.end_row()
    assert stream.layout.groups == [[0], [1]]
    rows = [dict(zip(stream.tags, values)) for values in stream.flush().rows]
    for values, calls in zip(rows, batches):
        for i, (pre, post) in enumerate(calls):
            assert values[f"units/act{i}/exact_zeros"] == (pre == 0).sum()
            assert values[f"units/act{i}/output_max"] == post.max()
            assert values[f"units/act{i}/output_min"] == post.min()


def recorded_row(stream: MetricStream, order: list[str]) -> dict[str, float]:
    """One row whose update's values are recorded in `order`, as {tag: value}: a gradient of
    norm 6 (sqrt(4 * 9)), a weight of norm 10 (sqrt(25 * 4)), an activation slope of 0.5:
    each value its own, so that values swapped between tags are seen."""
    parameter = torch.nn.Parameter(torch.zeros(4))
    parameter.grad = torch.full((4,), 3.0)
    recorders = {
        "grads": lambda stream: stream.record_grad_norms([parameter]),
        "weights": lambda stream: stream.record_weight_norms([torch.full((25,), 2.0)]),
        "params": lambda stream: stream.record_activation_params([torch.tensor([0.5])]),
    }
    stream.start_row(0)
    stream.record_activations(torch.tensor(7.0), [(torch.ones(2, 3), torch.ones(2, 3))])
    for name in order:
        recorders[name](stream)
    stream.end_row()
    return dict(zip(stream.tags, stream.flush().rows[0]))


@pytest.mark.parametrize("order", [["grads", "weights", "params"], ["params", "weights", "grads"]])
def test_a_rows_values_land_under_their_tags_whatever_order_they_are_recorded_in(order):
    stream = MetricStream(["w"], [("act", 3)], {"act.slope": 1})
    values = recorded_row(stream, order)
    assert values["loss/train"] == 7.0
    assert values["norm/grad_w"] == values["norm/grad_total"] == 6.0  # sqrt(4 * 9)
    assert values["norm/weight_w"] == 10.0  # sqrt(25 * 4)
    assert values["param/act.slope"] == 0.5


def test_the_rows_segments_reordered_keep_every_value_under_its_tag(monkeypatch):
    # The segments' order decides both the tags' order and the columns'.
    in_order = tags.segments

    def reversed_segments(*args, **kwargs):
        return dict(reversed(list(in_order(*args, **kwargs).items())))

    everything = ["grads", "weights", "params"]
    expected = recorded_row(MetricStream(["w"], [("act", 3)], {"act.slope": 1}), everything)
    monkeypatch.setattr(tags, "segments", reversed_segments)
    stream = MetricStream(["w"], [("act", 3)], {"act.slope": 1})
    assert stream.tags[0] != "loss/train"
    assert recorded_row(stream, everything) == expected


def test_a_segment_whose_values_and_tags_differ_in_number_is_refused():
    stream = MetricStream(["w1", "w2"], [("act", 3)], {})
    with pytest.raises(RuntimeError, match="^the stream's grad_norms segment has 1 values a row"):
        recorded_row(stream, ["grads", "weights"])


def test_a_parameter_whose_tag_is_the_totals_is_one_line(tmp_path):
    result = run_cli(
        "model=custom",
        "model.target=tests.models.WithATotal",
        "device=cpu",
        f"hydra.run.dir={tmp_path / 'run'}",
        cwd=REPO_ROOT,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "reluexp: error: two streamed values would share the tag norm/grad_total: rename the "
        "model's parameter or activation site that streams under it (a parameter named "
        "`total` is the total gradient norm's)"
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        # A third call, of another shape: the count is what changed.
        ([(3, 4), (3, 4), (3, 5)], "the model called its activation 3 times at step 1, 2 times"),
        # Two sites stacked at step 0, one of them another shape at step 1.
        ([(3, 4), (3, 5)], "the shapes the model's activation sites take changed at step 1"),
    ],
)
def test_a_forward_that_calls_its_sites_otherwise_is_refused_by_name(shapes, message):
    stream = MetricStream(["w"], [("act0", 4), ("act1", 4)], {})
    first, second = (
        [(torch.ones(shape), torch.ones(shape)) for shape in calls]
        for calls in ([(3, 4), (3, 4)], shapes)
    )
    stream.start_row(0)
    stream.record_activations(torch.tensor(0.0), first)
    stream.end_row()
    stream.start_row(1)
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}"):
        stream.record_activations(torch.tensor(0.0), second)


@pytest.mark.parametrize(
    "overrides",
    [
        # Sites of two shapes (each reduced alone), a scalar activation parameter.
        ["model.hidden=[7,5]"],
        # Sites of one shape (reduced together), a tensor activation parameter.
        ["model.hidden=[6,6]", "+activation.params.num_parameters=6"],
    ],
)
def test_every_streamed_tag_is_its_definition_on_a_small_model(tmp_path, composed, overrides):
    # The run's streamed values against each tag's definition, computed by hand from the same
    # starting model: every step logged, the activation (a learnable PReLU) updated too.
    steps, lr = 5, 1e-4
    config = composed(
        "activation=prelu",
        "model.init=scaled",
        *overrides,
        f"steps={steps}",
        "log_every=1",
        f"lr={lr}",
    )
    prepared = runner.prepare(config)
    model = copy.deepcopy(prepared.built.model)
    runner.run(config, tmp_path, prepared=prepared)
    logged = {tag: [v for _, v in values] for tag, values in scalars(tmp_path).items()}
    x, y = prepared.data.x, prepared.data.y
    params = dict(model.named_parameters())
    weights = [params[f"w{i}"] for i in range(1, model.layers + 1)]
    sites = [getattr(model, f"act{i}") for i in range(1, model.layers)]
    expected: dict[str, list[float]] = {}

    def add(tag: str, value: torch.Tensor | float) -> None:
        expected.setdefault(tag, []).append(float(torch.as_tensor(value).detach()))

    for _ in range(steps):
        h, calls = x, []
        for w, site in zip(weights, [*sites, None]):
            h = h.mm(w)
            if site is not None:
                calls.append((h.detach(), site(h).detach()))
                h = site(h)
        loss = (h - y).pow(2).sum()
        loss.backward()
        add("loss/train", loss)
        for name, p in params.items():
            add(f"norm/grad_{name}", p.grad.norm())
        add("norm/grad_total", torch.stack([p.grad.norm() for p in params.values()]).norm())
        dead = zeros = 0
        for i, (pre, post) in enumerate(calls, 1):
            site_dead = (post == 0).all(dim=0)
            dead, zeros = dead + int(site_dead.sum()), zeros + int((pre == 0).sum())
            add(f"units/act{i}/dead_fraction", site_dead.double().mean())
            add(f"units/act{i}/exact_zeros", (pre == 0).sum())
            add(f"units/act{i}/output_max", post.max())
            add(f"units/act{i}/output_min", post.min())
        add("units/dead_fraction", dead / sum(post.shape[1] for _, post in calls))
        add("units/exact_zeros", zeros)
        with torch.no_grad():
            for p in params.values():
                p -= lr * p.grad
                p.grad = None
        for name, p in params.items():
            add(f"norm/weight_{name}", p.norm())
            if name.startswith("act"):
                if p.numel() == 1:
                    add(f"param/{name}", p)
                else:
                    for statistic in ("norm", "mean", "min", "max"):
                        add(f"param/{name}_{statistic}", getattr(p, statistic)())
    assert set(expected) <= set(logged)
    for tag, values in expected.items():
        exact = tag.startswith(("loss/", "units/", "param/")) and not tag.endswith("_norm")
        torch.testing.assert_close(
            torch.tensor(logged[tag], dtype=torch.float64),
            torch.tensor(values, dtype=torch.float64),
            rtol=0 if exact else 1e-5,
            atol=0 if exact else 1e-12,
            msg=lambda m, tag=tag: f"{tag}: {m}",
        )
