"""Bad input, signals, divergence and resume: nothing lost, nothing silent."""

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import fields

import pytest
import torch

import reluexp
from reluexp.config import OPTION_GROUPS, Config, ConfigError, config_from_dict
from reluexp.record.metrics import squared_norm
from reluexp.record.whole import write_whole
from reluexp.run import loop, runner
from reluexp.run.checkpoint import CHECKPOINT_NAME
from tests import stops
from tests.helpers import (
    REPO_ROOT,
    SMALL,
    RaisesAtStep50,
    interrupted_run,
    plugin_scalars,
    run_cli,
    scalars,
    small_config,
    summary,
)

BAD_INPUTS = [
    (["lr=0"], "reluexp: error: lr=0.0: must be finite and > 0"),
    (["lr=-1e-3"], "reluexp: error: lr=-0.001: must be finite and > 0"),
    (["lr=nan"], "reluexp: error: lr=nan: must be finite and > 0"),
    (["steps=-5"], "reluexp: error: steps=-5: must be >= 0"),
    (["data.n=0"], "reluexp: error: data.n=0: must be >= 1"),
    (["model.hidden=[10,0]"], "reluexp: error: model.hidden=[10, 0]: every width must be >= 1"),
    (
        ["model.hidden=wide"],
        "reluexp: error: model.hidden='wide': expected an int or a list of ints",
    ),
    (["log_every=0"], "reluexp: error: log_every=0: must be >= 1"),
    (["checkpoint_every=-1"], "reluexp: error: checkpoint_every=-1: must be >= 0"),
    (["threads=0"], "reluexp: error: threads=0: must be >= 1 (or null)"),
    (["device=cuda"], "reluexp: error: device='cuda': CUDA is not available on this machine"),
    (["device=mps"], "reluexp: error: device='mps': MPS is not available on this machine"),
    (["device=tpu"], "reluexp: error: device='tpu': expected auto, cpu, cuda, cuda:N or mps"),
    (
        ["activation.target=no.such.Thing"],
        "reluexp: error: activation.target=no.such.Thing: no module named 'no' was found",
    ),
    (  # 47.5: it has the form; what is missing is the module
        ["activation=custom", "activation.target=nu_functionz.Softplus"],
        "reluexp: error: activation.target=nu_functionz.Softplus: no module named "
        "'nu_functionz' was found (neither installed nor a nu_functionz.py or nu_functionz/ "
        "package in the working directory",
    ),
    (
        ["activation=custom", "activation.target=relu"],
        "reluexp: error: activation.target=relu: not a dotted path (expected pkg.module.Name)",
    ),
    (
        ["activation.target=torch.nope"],
        "reluexp: error: activation.target=torch.nope: module 'torch' has no 'nope'",
    ),
    (["hydra.run.dir=/proc/reluexp"], "reluexp: error: hydra.run.dir=/proc/reluexp: cannot write"),
    (
        [f"hydra.run.dir=outputs/{'x' * 300}"],
        f"reluexp: error: hydra.run.dir=outputs/{'x' * 300}: cannot write there "
        "(File name too long)",
    ),
    # Errors that Hydra would turn into warnings if they were raised in its callbacks.
    (
        ["activation.target=broken_syntax.Relu"],
        "reluexp: error: activation.target=broken_syntax.Relu: importing broken_syntax raised "
        "SyntaxError: '(' was never closed (",
    ),
    (
        ["activation.target=raises_on_import.Relu"],
        "reluexp: error: activation.target=raises_on_import.Relu: importing raises_on_import "
        "raised RuntimeError: no CUDA driver here (",
    ),
    (
        ["seed=${oc.env:HOME}"],
        "reluexp: error: seed: While dereferencing interpolation '${oc.env:HOME}': Value",
    ),
    (["resume=/nonexistent"], "reluexp: error: resume=/nonexistent: not a run directory"),
    (
        ["resume=done", "lr=1"],
        "reluexp: error: resume=done: a resumed run keeps its own config; drop lr=1",
    ),
    # Type and key errors come from Hydra's composition, folded into one line.
    (
        ["dtype=float16"],
        "reluexp: error: Error merging override dtype=float16: "
        "Invalid value 'float16', expected one of [float32, float64]",
    ),
    (
        ["lr=fast"],
        "reluexp: error: Error merging override lr=fast: "
        "Value 'fast' of type 'str' could not be converted to Float",
    ),
    # 47.2: the key it most likely meant first; Hydra's `+` only where a new key means something.
    (["stepz=3"], "reluexp: error: stepz: no such key; did you mean steps?"),
    (["data.width=3"], "reluexp: error: data.width: no such key"),
    (["activaton=relu"], "reluexp: error: activaton: no such key; did you mean activation?\n"),
    (
        ["activation=leaky_relu", "activation.params.negative_slop=0.2"],
        "reluexp: error: activation.params.negative_slop: no such key; did you mean "
        "activation.params.negative_slope? (a new key is added with a +: "
        "+activation.params.negative_slop=0.2)",
    ),
    # 47.2: a key added with `+` that nothing reads once trained the default.
    (
        ["+activaton=relu"],
        "reluexp: error: activaton: no such key, so nothing would read it; did you mean "
        "activation? (only activation.params and activation.reference_params take new keys)",
    ),
    (
        ["+model.hiden=[5]"],
        "reluexp: error: model.hiden: no such key, so nothing would read it; "
        "did you mean model.hidden?",
    ),
    (["-m", "+activaton=relu,myrelu"], "did you mean activation?"),
    # 61.5: each model option has its own keys; another option's is refused, naming its owner.
    (
        ["model=mlp", "model.depth=56"],
        "reluexp: error: model.depth: no such key for model=mlp (only model=resnet has it)\n",
    ),
    (
        ["model=cnn", "model.init=scaled"],
        "reluexp: error: model.init: no such key for model=cnn (only model=mlp has it)\n",
    ),
    (
        ["model=resnet", "model.bias=true"],
        "reluexp: error: model.bias: no such key for model=resnet (only model=mlp has it)\n",
    ),
    # 75.2: so has each optimizer and schedule option.
    (
        ["schedule=cosine", "schedule.gamma=0.5"],
        "reluexp: error: schedule.gamma: no such key for schedule=cosine (only schedule=step has "
        "it)\n",
    ),
    (
        ["schedule=constant", "schedule.milestones=[10]"],
        "reluexp: error: schedule.milestones: no such key for schedule=constant (only "
        "schedule=step has it)\n",
    ),
    (
        ["optimizer=adam", "optimizer.momentum=0.9"],
        "reluexp: error: optimizer.momentum: no such key for optimizer=adam (only optimizer=sgd "
        "has it)\n",
    ),
    (
        ["optimizer.weight_decay=1e-4"],
        "reluexp: error: optimizer.weight_decay: no such key for optimizer=manual (only "
        "optimizer=sgd, optimizer=adam have it)\n",
    ),
    (
        ["optimizer=adam", "optimizer.decay_all=true"],
        "reluexp: error: optimizer.decay_all=True: decays nothing without weight decay: "
        "optimizer.weight_decay=1e-4, say\n",
    ),
    (
        ["model=resnet", "model.dept=56"],
        "reluexp: error: model.dept: no such key for model=resnet; did you mean model.depth?\n",
    ),
    (
        ["activation=nope"],
        "reluexp: error: In 'config': Could not find 'activation/nope'; "
        "available: builtin_leaky_relu, builtin_prelu, builtin_silu, custom, leaky_relu",
    ),
]


@pytest.fixture(scope="module")
def bad_inputs_dir(tmp_path_factory):
    """What the bad inputs name: a run that is done, modules that do not import."""
    directory = tmp_path_factory.mktemp("bad_inputs")
    (directory / "done").mkdir()
    (directory / "done" / "summary.json").write_text('{"status": "completed"}')
    (directory / "broken_syntax.py").write_text("import torch\ndef Relu(x:\n    return x\n")
    (directory / "raises_on_import.py").write_text(
        "import torch\nraise RuntimeError('no CUDA driver here')\n"
    )
    return directory


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_inputs_exit_2_with_one_line_and_no_directory(
    bad_inputs_dir, monkeypatch, args, message
):
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("the device cases assume a CPU-only machine")
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    result = run_cli(*args, cwd=bad_inputs_dir, check=False)
    assert result.returncode == 2, (args, result.stderr)
    assert message in result.stderr, (args, result.stderr)
    assert "Traceback" not in result.stderr, (args, result.stderr)
    assert result.stderr.strip() == result.stderr.strip().splitlines()[0], (
        "more than one line",
        args,
    )
    # Nothing trained, and no run directory was made.
    assert not list(bad_inputs_dir.glob("outputs/runs/*"))
    assert not list(bad_inputs_dir.glob("outputs/multirun/*"))


# A run streaming every step, checkpointed every 200, whose activation stops its own process
# (tests/stops.py): at a known step, whatever the machine's load.
STOPPED_RUN = ["steps=1000", "log_every=1", "checkpoint_every=200", *SMALL]


def train_until_it_stops(run_dir, signals: str, step: int) -> int:
    """`python -m reluexp` of STOPPED_RUN whose activation sends its own process `signals` in
    step `step`; its exit status."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "reluexp",
            "activation=custom",
            stops.TARGET,
            *STOPPED_RUN,
            f"hydra.run.dir={run_dir}",
        ],
        env=stops.stopping(signals, step),
        capture_output=True,
        timeout=300,
    ).returncode


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_then_resume_equals_an_uninterrupted_run(tmp_path, signum, code):
    run_dir = tmp_path / "interrupted"
    assert train_until_it_stops(run_dir, signal.Signals(signum).name, 650) == code
    stopped = summary(run_dir)
    # It stops at the step boundary after the signal, checkpointed there.
    assert (stopped["status"], stopped["steps_done"]) == ("interrupted", 651)
    assert stopped["signal"] == signal.Signals(signum).name
    stopped_losses = scalars(run_dir)["loss/train"]
    assert [s for s, _ in stopped_losses] == list(range(651))

    run_cli(f"resume={run_dir}", stops.TARGET, cwd=tmp_path)
    resumed = summary(run_dir)
    assert resumed["status"] == "completed" and resumed["steps_done"] == 1000
    assert resumed["resumes"] == 1 and resumed["signal"] is None

    reference_dir = tmp_path / "uninterrupted"
    config = config_from_dict(stopped["config"])
    final_loss = runner.run(config, reference_dir).final_loss
    assert scalars(run_dir)["loss/train"] == scalars(reference_dir)["loss/train"]
    assert resumed["final_loss"] == final_loss
    weights = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)["model"]
    reference = torch.load(reference_dir / CHECKPOINT_NAME, weights_only=True)["model"]
    assert weights.keys() == reference.keys()
    assert all(torch.equal(weights[name], reference[name]) for name in weights)


@pytest.mark.slow
def test_second_signal_exits_at_once_and_leaves_files_readable(tmp_path):
    run_dir = tmp_path / "run"
    assert train_until_it_stops(run_dir, "SIGTERM,SIGTERM", 650) == 143
    # Gone at the second, before the first's step boundary: its last checkpoint is step 600's.
    assert summary(run_dir)["status"] == "running"
    assert torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)["step"] == 600
    assert scalars(run_dir)["loss/train"]


@pytest.mark.slow
def test_sigkill_leaves_the_run_marked_running_and_resumable(tmp_path):
    run_dir = tmp_path / "run"
    # Past the checkpoint of step 600: the steps logged after it are lost and logged again.
    assert train_until_it_stops(run_dir, "SIGKILL", 650) == -signal.SIGKILL
    assert summary(run_dir)["status"] == "running"
    run_cli(f"resume={run_dir}", stops.TARGET, "hydra.job_logging.root.level=ERROR", cwd=tmp_path)
    assert summary(run_dir)["status"] == "completed"
    # Steps logged after the last checkpoint were purged on resume: each step appears once,
    # as TensorBoard's scalars plugin loads it (31.7).
    assert [step for step, _ in scalars(run_dir)["loss/train"]] == list(range(1000))
    assert list(plugin_scalars(run_dir, "loss/train")) == list(range(1000))


@pytest.mark.skipif(sys.platform != "linux", reason="a descriptor's path in /proc")
def test_a_file_written_whole_is_flushed_to_the_disk_before_and_after_its_rename(
    tmp_path, monkeypatch
):
    """75.4: write_whole renamed a file it had not flushed (resume.md promises a power cut
    leaves the old file or the new one) and wrote text in the locale's encoding."""
    synced, fsync = [], os.fsync

    def recorded(descriptor):
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recorded)
    write_whole(tmp_path / "summary.md", "loss 1.0 ± 0.1")
    assert synced == [str(tmp_path / ".summary.md.tmp"), str(tmp_path)]
    assert (tmp_path / "summary.md").read_bytes() == "loss 1.0 ± 0.1".encode()


def test_divergence_stops_the_run_and_keeps_its_events(tmp_path):
    final_loss = runner.run(small_config(steps=500, lr=10.0), tmp_path).final_loss
    result = summary(tmp_path)
    assert result["status"] == "diverged"
    step = result["diverged_at_step"]
    assert result["steps_done"] == step + 1 < 500
    # The first non-finite value of the step (an exploding run's gradient norm overflows
    # before its loss does) is named, and the steps before it were finite.
    on = result["diverged_on"]
    tag = {"loss": "loss/train"}.get(on) or on.replace("gradient norm of ", "norm/grad_")
    logged = scalars(tmp_path)[tag.replace("norm of ", "norm/weight_")]
    assert [s for s, _ in logged] == list(range(step + 1))
    assert not math.isfinite(logged[-1][1])
    assert all(math.isfinite(v) for _, v in logged[:-1])
    assert math.isfinite(final_loss) == (on != "loss")


def test_a_divergence_leaves_the_last_checkpoint_before_it(tmp_path):
    """A flush that finds the divergence at a periodic checkpoint wrote that checkpoint
    anyway: non-finite weights over the last good ones."""
    runner.run(small_config(steps=500, lr=10.0, checkpoint_every=1), tmp_path)
    diverged_at = summary(tmp_path)["diverged_at_step"]
    checkpoint = torch.load(tmp_path / CHECKPOINT_NAME, weights_only=True)
    # The state before the step that diverged: its weights are those every finite step made.
    assert checkpoint["step"] == diverged_at > 0
    assert checkpoint["outcome"]["diverged_at"] is None
    assert all(torch.isfinite(w).all() for w in checkpoint["model"].values())


def test_a_stop_after_a_divergence_ends_the_command_with_the_run_diverged(tmp_path):
    """A Ctrl-C between a divergence and the flush that sees it once recorded the run as
    interrupted, said 'checkpoint written' (none was: the run had diverged) and offered a
    resume that would diverge again."""
    run_dir = tmp_path / "run"
    result = run_cli(
        "activation=custom",
        "activation.target=tests.helpers.DivergesAsItIsStopped",
        "steps=1000",
        f"hydra.run.dir={run_dir}",
        *SMALL,
        cwd=REPO_ROOT,
        check=False,
    )
    assert result.returncode == 130, result.stderr
    state = summary(run_dir)
    assert (state["status"], state["diverged_at_step"], state["signal"]) == (
        "diverged",
        2,
        "SIGINT",
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "reluexp: diverged after 3 steps (non-finite gradient norm of w1 at step 2)"
    ), result.stderr
    assert "checkpoint written" not in result.stderr and "Resume:" not in last
    assert not (run_dir / CHECKPOINT_NAME).exists()


def test_a_finite_gradient_streams_its_norm_however_large_and_the_run_goes_on(tmp_path):
    """42.1: at step 1 of this run w1's gradient norm is ~7.8e20, finite; its square overflows
    float32, which once streamed inf and called the run diverged."""
    config = Config(device="cpu", lr=1e-5, steps=60)
    config.model.hidden = [256, 128]
    result = runner.run(config, tmp_path)
    # An independent float64 reading of the same two steps.
    generator = torch.Generator("cpu").manual_seed(42)
    x, y = torch.randn(64, 1000, generator=generator), torch.randn(64, 10, generator=generator)
    weights = [
        torch.randn(a, b, generator=generator, requires_grad=True)
        for a, b in [(1000, 256), (256, 128), (128, 10)]
    ]
    for _ in range(2):
        h = x
        for w in weights[:-1]:
            h = h.mm(w).clamp(min=0)
        (h.mm(weights[-1]) - y).pow(2).sum().backward()
        norms = [w.grad.double().norm().item() for w in weights]
        with torch.no_grad():
            for w in weights:
                w -= 1e-5 * w.grad
                w.grad = None
    streamed = scalars(tmp_path)
    assert norms[0] > 1e20 and all(math.isfinite(n) for n in norms)
    for i, norm in enumerate(norms, 1):
        assert streamed[f"norm/grad_w{i}"][1][1] == pytest.approx(norm, rel=1e-5)
    assert streamed["norm/grad_total"][1][1] == pytest.approx(math.hypot(*norms), rel=1e-5)
    # What really happened: the step killed the network, which trains on as a dead one.
    assert result.status == "completed" and result.steps_done == 60
    warnings = summary(tmp_path)["warnings"]
    assert any(w.startswith("gradients vanished from step 2") for w in warnings)


def test_a_squared_norm_leaves_float32s_range_only_where_the_norm_does():
    big = torch.full((1000,), 3e19)
    tiny = torch.full((1000,), 1e-25)
    for vector in (big, tiny, torch.zeros(3), torch.tensor([3.0, 4.0])):
        assert squared_norm(vector).item() == pytest.approx(vector.double().pow(2).sum().item())
    assert squared_norm(torch.tensor([3e38, math.inf])).item() == math.inf


def test_a_zero_vectors_square_is_not_redone_in_float64(monkeypatch):
    """75.4: a dead unit's zero gradient was copied to float64 and squared again each time
    (against host_square's docstring: only a nonzero norm whose square leaves the range)."""
    widened = []
    double = torch.Tensor.double

    def recorded(tensor, *args, **kwargs):
        widened.append(tensor.numel())
        return double(tensor, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "double", recorded)
    assert squared_norm(torch.zeros(1000)).item() == 0.0
    assert widened == []
    assert squared_norm(torch.full((1000,), 1e-25)).item() == pytest.approx(1000 * 1e-50)
    assert widened == [1000]


def test_non_finite_gradients_diverge_naming_the_tensor(tmp_path):
    """31.4: a backward whose gradients are NaN while the loss stays finite."""
    config = small_config(steps=30, lr=1e-4)
    config.model.init = "scaled"
    config.activation.target = "tests.helpers.NanGradientRelu"
    result = runner.run(config, tmp_path)
    state = summary(tmp_path)
    assert (result.status, state["diverged_at_step"], state["diverged_on"]) == (
        "diverged",
        0,
        "gradient norm of w1",
    )
    assert math.isfinite(result.final_loss)


def test_divergence_can_be_recorded_and_trained_through(tmp_path):
    runner.run(small_config(steps=100, lr=10.0, stop_on_divergence=False), tmp_path)
    result = summary(tmp_path)
    assert result["status"] == "diverged" and result["steps_done"] == 100
    assert len(scalars(tmp_path)["loss/train"]) == 100


def test_diverged_run_exits_zero(tmp_path):
    result = run_cli("lr=10", "steps=200", f"hydra.run.dir={tmp_path}", *SMALL, cwd=tmp_path)
    assert result.returncode == 0
    assert re.search(
        r"diverged: non-finite (loss|gradient norm of w\d|norm of w\d) at step \d+",
        result.stdout + result.stderr,
    )


def test_an_activation_that_breaks_the_model_is_one_line_at_start_up(tmp_path):
    """41: the model's probe forward at start-up meets it, before any directory is made."""
    config = small_config(steps=10)
    config.activation.target = "torch.Tensor.nonzero"  # wrong shape: the second matmul raises
    with pytest.raises(ConfigError) as refused:
        runner.run(config, tmp_path / "run")
    assert str(refused.value).startswith(
        "activation.target=torch.Tensor.nonzero in model=mlp: the forward of the data's first "
        "inputs, of shape (2, 50), raised RuntimeError: mat1 and mat2 shapes cannot be "
        "multiplied"
    )
    assert not (tmp_path / "run").exists()


def test_a_raising_activation_is_recorded_as_failed(tmp_path, monkeypatch):
    monkeypatch.setattr(RaisesAtStep50, "calls", 0)
    config = small_config(steps=60)
    config.activation.target = "tests.helpers.RaisesAtStep50"
    with pytest.raises(RuntimeError):
        runner.run(config, tmp_path)
    result = summary(tmp_path)
    assert result["status"] == "failed" and result["error"].startswith("RuntimeError:")
    assert result["steps_done"] == 50


class Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_checkpoint_with_code_is_refused_and_nothing_runs(tmp_path):
    run_dir = interrupted_run(tmp_path / "run")
    marker = tmp_path / "pwned"
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    checkpoint["payload"] = Payload(marker)
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    with pytest.raises(ConfigError) as refused:
        runner.resume(run_dir)
    assert not marker.exists()
    assert str(refused.value) == (
        f"resume={run_dir}: checkpoint.pt refused: it names code (posix.system); nothing in it ran"
    )
    # torch's own message suggests weights_only=False: never passed on.
    assert "weights_only" not in str(refused.value)


# What the checkpoints this code writes say wrote them.
VERSION = f"reluexp {reluexp.__version__}"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (["step"], -50, "'s step is -50: must be a whole number from 0 to 20"),
        (["step"], 10**9, "'s step is 1000000000: must be a whole number from 0 to 20"),
        (["outcome", "min_loss"], "x", "'s outcome's min_loss is 'x': must be a number"),
        (["outcome", "diverged_at"], 3, "'s outcome's divergence is (3, None): must be a step"),
        (["wall_time_s"], math.nan, "'s wall_time_s is nan: must be a finite number >= 0"),
        (
            ["recorded", "steps_with_exact_zeros"],
            10**9,
            "'s steps_with_exact_zeros is 1000000000",
        ),
        (
            ["model", "w1"],
            torch.zeros(3, 3),
            "'s model has w1 of shape (3, 3); the config's model has (50, 20)",
        ),
        (["model"], [torch.zeros(3, 3)], "'s model is not a model's state (a dict of tensors)"),
        (  # 51.4: it said `shape None` for the parameter it lacks
            ["model"],
            {"w1": torch.zeros(50, 20)},
            "'s model lacks w2 (the config's model has it, of shape (20, 10))",
        ),
        (
            ["model", "w3"],
            torch.zeros(1),
            "'s model has w3, which the config's model lacks",
        ),
        (["rng_cpu"], torch.zeros(3), "'s rng_cpu is not a torch RNG state"),
        (  # an fp32 run keeps no gradient scaler
            ["scaler"],
            {"scale": 1024.0},
            "'s scaler is not the gradient scaler's state precision=fp16 keeps (none else)",
        ),
        (["format"], 1, f" was written by {VERSION} (format 1); {VERSION} reads format 8"),
        # A format is a whole number: 6.0 is none a release wrote (it was taken as 6).
        (["format"], 6.0, f" was written by {VERSION} (format 6.0); {VERSION} reads"),
        (["format"], 9, f" was written by {VERSION} (format 9); {VERSION} reads format 8"),
    ],
)
def test_a_checkpoint_that_makes_no_sense_is_refused_before_training(
    tmp_path, field, value, message
):
    run_dir = interrupted_run(tmp_path / "run")
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    *parents, key = field
    holder = checkpoint
    for parent in parents:
        holder = holder[parent]
    holder[key] = value
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    before = summary(run_dir)
    with pytest.raises(ConfigError, match=re.escape(f"checkpoint.pt{message}")):
        runner.resume(run_dir)
    assert summary(run_dir) == before


def test_truncated_checkpoint_is_refused(tmp_path):
    run_dir = interrupted_run(tmp_path / "run")
    path = run_dir / CHECKPOINT_NAME
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ConfigError, match="checkpoint.pt is unreadable, truncated or corrupt"):
        runner.resume(run_dir)


def test_checkpoint_of_another_config_is_refused(tmp_path):
    run_dir = interrupted_run(tmp_path / "run")
    other = tmp_path / "other"
    runner.run(small_config(steps=20, lr=1e-5), other)
    (other / CHECKPOINT_NAME).replace(run_dir / CHECKPOINT_NAME)
    with pytest.raises(ConfigError, match="checkpoint.pt was written by another config"):
        runner.resume(run_dir)


def test_resuming_a_completed_run_does_nothing(tmp_path):
    final_loss = runner.run(small_config(steps=5), tmp_path).final_loss
    before = (tmp_path / "summary.json").read_text()
    assert runner.resume(tmp_path).final_loss == final_loss
    assert (tmp_path / "summary.json").read_text() == before


def test_summary_is_written_before_the_first_step(tmp_path, monkeypatch):
    seen = {}

    def objective_spy(*args):
        seen.setdefault("status", summary(tmp_path)["status"])
        return original(*args)

    original = loop.objective
    monkeypatch.setattr(loop, "objective", objective_spy)
    runner.run(small_config(steps=2), tmp_path)
    assert seen["status"] == "running"


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="a read-only bind mount")
def test_resuming_into_a_read_only_directory_is_one_line(tmp_path):
    run_dir = interrupted_run(tmp_path / "writable" / "run")
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    # Root writes through a directory's permissions: the directory is mounted read-only.
    mounted = subprocess.run(["mount", "--bind", str(run_dir.parent), str(read_only)])
    if mounted.returncode != 0:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(read_only)], check=True)
        before = sorted(p.name for p in (read_only / "run").rglob("*"))
        result = run_cli(f"resume={read_only / 'run'}", cwd=tmp_path, check=False)
        after = sorted(p.name for p in (read_only / "run").rglob("*"))
    finally:
        subprocess.run(["umount", str(read_only)], check=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"reluexp: error: hydra.run.dir={read_only / 'run'}: cannot write there "
        "(Read-only file system)"
    )
    assert after == before


@pytest.mark.parametrize(
    ("written", "version", "what"),
    [
        (3, "0.1.0", "adam, model.bias=true: one optimizer group, regrouped"),
        (4, "0.2.0", "the article's manual update; `optimizer` a name"),
        (5, "0.2.0", "sgd with momentum, Nesterov, weight decay, a cosine schedule's warmup"),
        (6, "0.2.0", "fp16 with sgd: the gradient scaler's state"),
        (7, "0.5.5", "adam with weight decay, a cosine schedule's warmup: every option's keys"),
    ],
)
def test_a_run_an_earlier_format_interrupted_resumes_to_the_uninterrupted_loss(
    tmp_path, written, version, what
):
    """tests/checkpoints/formatN: a run of 40 steps that the version that landed format N
    wrote, stopped by SIGTERM at step 20. Upgraded format by format, it resumes and ends where
    a run that was never interrupted ends (bit for bit on the machine that wrote it, against
    that version's own uninterrupted run; elsewhere the first 20 steps' float32 rounding
    depends on the CPU's instruction set, so within rounding here)."""
    run_dir = shutil.copytree(
        REPO_ROOT / "tests" / "checkpoints" / f"format{written}", tmp_path / "run"
    )
    before = summary(run_dir)
    assert (before["status"], before["steps_done"], before["versions"]["reluexp"]) == (
        "interrupted",
        20,
        version,
    )
    assert torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)["format"] == written
    resumed = runner.resume(run_dir)
    after = summary(run_dir)
    fresh = runner.run(config_from_dict(after["config"]), tmp_path / "fresh")
    assert (resumed.status, resumed.steps_done) == ("completed", 40)
    assert resumed.final_loss == pytest.approx(fresh.final_loss, rel=1e-3)
    assert resumed.final_loss != before["final_loss"]
    # The summary holds the upgraded config, as its new checkpoint does: it resumes again.
    assert after["config"] == torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)["config"]
    # Counted from the resume on: formats before 7 kept no count.
    assert resumed.summary.recorded_steps == (40 if written >= 7 else 20)
    # Format 8: each group holds its option's own keys, no other option's.
    config = config_from_dict(after["config"])
    for group in OPTION_GROUPS:
        option_keys = {field.name for field in fields(getattr(config, group))}
        assert set(after["config"][group]) == option_keys, group


@pytest.mark.parametrize(
    ("written", "altered", "said"),
    [
        (6, ["outcome"], "(format 6) has no outcome: its upgrade to format 7 cannot take it"),
        (4, ["config", "optimizer"], "(format 4) has no config.optimizer: its upgrade to"),
    ],
)
def test_an_old_checkpoint_without_a_field_its_upgrade_reads_is_one_line_naming_it(
    tmp_path, written, altered, said
):
    """74.3: it was `reluexp: error: KeyError: 'outcome'`, naming no file, field or format."""
    run_dir = shutil.copytree(
        REPO_ROOT / "tests" / "checkpoints" / f"format{written}", tmp_path / "run"
    )
    payload = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    holder = payload
    for key in altered[:-1]:
        holder = holder[key]
    del holder[altered[-1]]
    torch.save(payload, run_dir / CHECKPOINT_NAME)
    if altered[0] == "config":  # the summary holds the checkpoint's config
        record = json.loads((run_dir / "summary.json").read_text())
        record["config"] = payload["config"]
        (run_dir / "summary.json").write_text(json.dumps(record))
    done = run_cli(f"resume={run_dir}", cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"reluexp: error: resume={run_dir}: {CHECKPOINT_NAME} {said}")
    assert len(done.stderr.splitlines()) == 1


def test_a_resume_refused_after_hydra_started_leaves_nothing_beside_the_run(tmp_path):
    """74.3: a refusal found once the job ran (a checkpoint field that makes no sense) left
    Hydra's `.hydra/resume_<time>/` in the run directory."""
    run_dir = interrupted_run(tmp_path / "run")
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    checkpoint["step"] = -50
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    done = run_cli(f"resume={run_dir}", cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert "checkpoint.pt's step is -50: must be a whole number" in done.stderr
    # The attempt's lines stay in the run's log; Hydra's files of the attempt do not.
    assert not list(run_dir.glob(".hydra/resume_*"))


def test_a_checkpoint_without_a_format_says_so(tmp_path):
    """74.3: it read `(format 1)`, a format it never named."""
    run_dir = interrupted_run(tmp_path / "run")
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    del checkpoint["format"]
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    with pytest.raises(
        ConfigError, match=re.escape(f"{CHECKPOINT_NAME} was written by ")
    ) as raised:
        runner.resume(run_dir)
    assert f"(no format field); {VERSION} reads format 8" in str(raised.value)


def test_a_later_checkpoint_relabelled_an_older_format_is_refused_not_upgraded(tmp_path):
    """74.3: a format-8 checkpoint whose format said 5 was upgraded silently, its gradient
    scaler's state and its step counts replaced."""
    run_dir = interrupted_run(tmp_path / "run")
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    checkpoint["format"] = 5
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    with pytest.raises(ConfigError) as raised:
        runner.resume(run_dir)
    assert str(raised.value).endswith(
        f"{CHECKPOINT_NAME} (format 5) has scaler, which no format 5 checkpoint has: its "
        "upgrade to format 6 cannot take it"
    )


def test_a_stored_config_key_no_option_has_is_refused_naming_the_checkpoint(tmp_path):
    """74.3: an unknown model key in a stored config was dropped silently and the run resumed
    without it (an older format's keys of another option are still read and dropped)."""
    run_dir = interrupted_run(tmp_path / "run")
    checkpoint = torch.load(run_dir / CHECKPOINT_NAME, weights_only=True)
    checkpoint["config"]["model"]["widht"] = 3
    torch.save(checkpoint, run_dir / CHECKPOINT_NAME)
    record = json.loads((run_dir / "summary.json").read_text())
    record["config"] = checkpoint["config"]
    (run_dir / "summary.json").write_text(json.dumps(record))
    done = run_cli(f"resume={run_dir}", cwd=tmp_path, check=False)
    assert (done.returncode, done.stderr) == (
        2,
        f"reluexp: error: resume={run_dir}: {CHECKPOINT_NAME}'s config: model.widht: no model "
        "option has it\n",
    )
