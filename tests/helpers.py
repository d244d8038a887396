"""Shared helpers: an independent copy of the seed's loop, the CLI run as a user runs it, small
runs, fake sweeps, and the one way events are read back."""

import contextlib
import io
import json
import logging
import math
import os
import pickle
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


class SeedRelu(torch.autograd.Function):
    """The seed article's Function, copied here so the tests do not trust reluexp's."""

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        (input,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input < 0] = 0
        return grad_input


def seed_loop(relu=SeedRelu.apply, steps=500, seed=42, lr=1e-6):
    """The article's script, step for step; per step: loss, grad norms, the updated weight's
    norm, exact zeros, dead units."""
    generator = torch.Generator("cpu").manual_seed(seed)
    N, D_in, H, D_out = 64, 1000, 100, 10
    x = torch.randn(N, D_in, generator=generator)
    y = torch.randn(N, D_out, generator=generator)
    w1 = torch.randn(D_in, H, requires_grad=True, generator=generator)
    w2 = torch.randn(H, D_out, requires_grad=True, generator=generator)
    records = []
    for _ in range(steps):
        pre = x.mm(w1)
        post = relu(pre)
        loss = (post.mm(w2) - y).pow(2).sum()
        loss.backward()
        records.append(
            {
                "loss": loss.item(),
                "grad_w1": w1.grad.norm().item(),
                "grad_w2": w2.grad.norm().item(),
                "exact_zeros": int((pre == 0).sum()),
                "dead_fraction": float((post == 0).all(dim=0).float().mean()),
            }
        )
        with torch.no_grad():
            w1 -= lr * w1.grad
            w2 -= lr * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
        records[-1]["weight_w1"] = w1.detach().norm().item()
    return records


@dataclass(frozen=True)
class Done:
    """What a command left: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str


def entry_point(module: str) -> Callable[[list[str]], int | None]:
    """What `python -m MODULE` calls once imported, with the command line's arguments (the
    process's own ending, which only a process has, left out)."""
    if module == "reluexp":
        from reluexp.cli import main

        return lambda argv: main()
    if module == "reluexp.check":
        from reluexp.lab.command import main as check

        return check
    if module == "reluexp.report":
        from reluexp.report import run as report

        return lambda argv: report()
    raise ValueError(f"no entry point {module}")


def run_cli(*args: str, cwd: Path, check: bool = True, module: str = "reluexp") -> Done:
    """`python -m MODULE ARGS` as a user types it in `cwd`, run in this process: its exit
    status, stdout and stderr. What a process would start afresh is put back after it: the
    working directory, sys.path, the modules it imported from `cwd` (a user's Function), the
    loggers Hydra configured, a parallel sweep's worker processes. Tests of what only a
    process has (signals from outside, the interpreter's exit, closed streams) use
    run_process."""
    main = entry_point(module)
    stdout, stderr = io.StringIO(), io.StringIO()
    modules, loggers = set(sys.modules), logger_settings()
    previous_cwd, previous_path, argv = os.getcwd(), list(sys.path), list(sys.argv)
    code: int | str | None = 0
    try:
        os.chdir(cwd)
        # `python -m` puts the working directory first on sys.path.
        sys.path.insert(0, str(Path(cwd).resolve()))
        sys.argv[:] = [module, *args]
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main(list(args))
            except SystemExit as exit:
                code = exit.code
    finally:
        os.chdir(previous_cwd)
        sys.path[:], sys.argv[:] = previous_path, argv
        for name in set(sys.modules) - modules:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if Path(origin).resolve().is_relative_to(Path(cwd).resolve()):
                del sys.modules[name]
        restore_loggers(loggers)
        if "joblib" in sys.modules:
            # A parallel sweep's worker processes outlive it, in the directory they started in.
            from joblib.externals.loky import get_reusable_executor

            get_reusable_executor().shutdown(wait=True)
    if isinstance(code, str):  # sys.exit("message"): printed, status 1
        stderr.write(code + "\n")
        code = 1
    done = Done(code or 0, stdout.getvalue(), stderr.getvalue())
    if check and done.returncode != 0:
        pytest.fail(f"{module} {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done


def logger_settings() -> dict[logging.Logger, tuple]:
    """Every logger's handlers, level, propagation and state (Hydra configures them per run)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    return {
        logger: (list(logger.handlers), logger.level, logger.propagate, logger.disabled)
        for logger in loggers
        if isinstance(logger, logging.Logger)
    }


def restore_loggers(saved: dict[logging.Logger, tuple]) -> None:
    """The loggers as they were: handlers a run added (its log file, its captured streams)
    closed and removed."""
    for logger in logger_settings():
        handlers, level, propagate, disabled = saved.get(logger, ([], logging.NOTSET, True, False))
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers[:] = handlers
        logger.setLevel(level)
        logger.propagate, logger.disabled = propagate, disabled


def run_process(
    *args: str, cwd: Path, check: bool = True, module: str = "reluexp", timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python -m MODULE ARGS` in a process of its own: for what only a process has."""
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        pytest.fail(f"{module} {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


class RaisesAtStep50(SeedRelu):
    """The seed's ReLU, whose backward raises on its 51st call (step 50 of a run with one hidden
    layer)."""

    calls = 0

    @staticmethod
    def backward(ctx, grad_output):
        RaisesAtStep50.calls += 1
        if RaisesAtStep50.calls > 50:
            raise RuntimeError("planted failure at step 50")
        return SeedRelu.backward(ctx, grad_output)


class DivergesAsItIsStopped(SeedRelu):
    """The seed's ReLU whose backward on its 3rd call (step 2 of a run with one hidden layer)
    returns NaN and sends its process a SIGINT: the stop lands after the divergence, before
    any flush has seen it."""

    calls = 0

    @staticmethod
    def backward(ctx, grad_output):
        DivergesAsItIsStopped.calls += 1
        if DivergesAsItIsStopped.calls == 3:
            os.kill(os.getpid(), signal.SIGINT)
            return torch.full_like(grad_output, float("nan"))
        return SeedRelu.backward(ctx, grad_output)


# A Function whose backward raises at once, as a module a user keeps beside their command
# (its forward is fine: start-up's probes pass, step 0's backward fails).
RAISING_FUNCTION = """import torch


class Raises(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad_output):
        raise RuntimeError("planted failure in the backward")
"""


class DoubledGradientRelu(SeedRelu):
    """The seed's ReLU whose backward passes twice the gradient: WRONG, and it trains like the
    built-in at twice the lr."""

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * SeedRelu.backward(ctx, grad_output)


class NanGradientRelu(SeedRelu):
    """The seed's ReLU whose backward returns NaN: the loss stays finite, every gradient is
    NaN."""

    @staticmethod
    def backward(ctx, grad_output):
        return torch.full_like(grad_output, float("nan"))


# -- shared by several test modules --------------------------------------------------------------

SHIPPED_ACTIVATIONS = sorted(
    p.stem for p in (REPO_ROOT / "conf" / "activation").glob("*.yaml") if p.stem != "custom"
)
EXPERIMENTS = sorted(p.stem for p in (REPO_ROOT / "experiments").glob("*.yaml"))

# Small enough for thousands of steps a second, so a signal lands mid-run.
SMALL = ["data.d_in=50", "model.hidden=20", "device=cpu", "print_every=1000000"]
STEPS = 20_000


def small_config(**fields):
    """SMALL as a Config, for runs in this process."""
    from reluexp.config import Config

    config = Config(device="cpu", print_every=10**6, **fields)
    config.data.d_in, config.model.hidden = 50, 20
    return config


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def interrupted_run(run_dir: Path) -> Path:
    """A run dir as a SIGINT leaves it: stopped before its last step, checkpoint written."""
    from reluexp.run import runner

    runner.run(small_config(steps=20, checkpoint_every=10), run_dir)
    state = summary(run_dir)
    state["status"] = "interrupted"
    (run_dir / "summary.json").write_text(json.dumps(state))
    return run_dir


def fake_sweep(sweep_dir: Path, jobs: dict) -> None:
    """Job directories as Hydra lays them out, each of its overrides (separated by spaces) ->
    Config trained in-process (None: never trained)."""
    from reluexp.run import runner

    for number, (overrides, config) in enumerate(jobs.items()):
        listed = overrides.split()
        job_dir = sweep_dir / f"{number:03d}_{','.join(listed)}"
        (job_dir / ".hydra").mkdir(parents=True)
        (job_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in listed))
        (job_dir / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  job:\n    num: {number}\n")
        if config is not None:
            runner.run(config, job_dir, overrides=listed)


def tensorboard(run_dir: Path):
    """A run directory as TensorBoard's own reader loads it, every event kept: the one way the
    tests read events back."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    everything = {"scalars": 0, "images": 0, "tensors": 0}
    events = EventAccumulator(str(run_dir), size_guidance=everything)
    events.Reload()
    return events


def plugin_scalars(run_dir: Path, tag: str) -> dict[int, float]:
    """step -> value of one scalar tag as TensorBoard's plugin reader loads it (what its
    Python data path, `--load_fast=false`, shows), asserting that no step has two values (a
    tag's first point is there twice, as its described tensor and as a simple_value)."""
    return dict(scalars(run_dir)[tag])


def scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of every scalar tag as TensorBoard's scalars plugin loads it,
    one point per step (a tag's first point, written as the scalars tensor that carries its
    description and as a simple_value, is one point), asserting that no step has two values."""
    from tensorboard.backend.event_processing import plugin_event_accumulator
    from tensorboard.util import tensor_util

    events = plugin_event_accumulator.EventAccumulator(str(run_dir), size_guidance={"tensors": 0})
    events.Reload()
    found = {}
    for tag in events.Tags()["tensors"]:
        if events.SummaryMetadata(tag).plugin_data.plugin_name != "scalars":
            continue
        points: dict[int, float] = {}
        for event in events.Tensors(tag):
            value = tensor_util.make_ndarray(event.tensor_proto).item()
            assert points.setdefault(event.step, value) == value or math.isnan(value), (
                f"{tag}: step {event.step} has two values"
            )
        found[tag] = list(points.items())
    return found


def descendants(pid: int) -> list:
    """Every process below pid (psutil's, so a test sees only its own process tree)."""
    import psutil

    return psutil.Process(pid).children(recursive=True)


def cifar_images(n: int, seed: int, classes: int) -> tuple[np.ndarray, list[int]]:
    generator = np.random.default_rng(seed)
    images = generator.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)
    return images, generator.integers(0, classes, size=n).tolist()


def write_cifar(root: Path, layout, binary: bool, per_batch: int = 40) -> None:
    """A small directory in the authors' layout: the binary version's records, or the python
    version's pickled dicts (as Python 2 wrote them: bytes keys)."""
    root.mkdir(parents=True)
    for seed, name in enumerate([*layout.train, layout.test]):
        images, labels = cifar_images(per_batch, seed, layout.classes)
        if binary:
            label_bytes = np.array(labels, dtype=np.uint8).reshape(-1, 1)
            if layout.label_bytes == 2:  # coarse label first, then the fine one
                label_bytes = np.concatenate([label_bytes // 5, label_bytes], axis=1)
            (root / f"{name}.bin").write_bytes(
                np.concatenate([label_bytes, images], axis=1).tobytes()
            )
        else:
            batch = {b"data": images, layout.label_key: labels, b"batch_label": name.encode()}
            (root / name).write_bytes(pickle.dumps(batch, protocol=2))


def write_readme_cifar(directory: Path, command: str) -> None:
    """A small CIFAR-10 where a README command names `data.root=cifar-10-batches-bin`."""
    if "data.root=cifar-10-batches-bin" in command:
        from reluexp.run.cifar import CIFAR10

        write_cifar(directory / "cifar-10-batches-bin", CIFAR10, binary=True, per_batch=64)


def run_stopped_at(config, run_dir: Path, step: int, monkeypatch) -> None:
    """runner.run of the config into run_dir, stopped as by SIGTERM right after its checkpoint
    at `step`: it raises Interrupted there, and the directory resumes."""
    from reluexp.run import loop, runner

    checkpoint = loop.Training.checkpoint

    def stop_after(training):
        checkpoint(training)
        if training.state.step == step:
            training.stop.signum = signal.SIGTERM

    class Stop:
        signum = None

    monkeypatch.setattr(loop.Training, "checkpoint", stop_after)
    with pytest.raises(runner.Interrupted):
        runner.run(config, run_dir, stop=Stop())
    monkeypatch.undo()


def command_after(label: str, line: str) -> str:
    """The command a closing line gives after `label: `, between the backticks that keep the
    sentence after it out of a copy (74.5: `Finish it: ... hydra.sweep.dir=<dir>.` copied with
    its period named another directory)."""
    found = re.search(rf"{re.escape(label)}: `([^`]+)`", line)
    assert found, (label, line)
    return found.group(1)
