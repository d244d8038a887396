"""Shared by the benchmark scripts: medians over alternating repetitions, and RESULTS.md."""

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from reluexp.hydra_glue import compose_config
from reluexp.run import runner
from reluexp.validation import task_config

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def alternate(
    candidates: dict[str, Callable[[], float]], repetitions: int
) -> dict[str, list[float]]:
    """Run every candidate once per round, round after round, so machine noise hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repetitions):
        for name, measure in candidates.items():
            samples[name].append(measure())
    return samples


def summarize(samples: list[float], scale: float = 1.0) -> str:
    return (
        f"{statistics.median(samples) * scale:.1f} "
        f"({min(samples) * scale:.1f}–{max(samples) * scale:.1f})"
    )


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=RESULTS.parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(device: str = "cpu") -> str:
    """Where a benchmark ran, as every table of RESULTS.md says it: float32 results and their
    speed depend on the CPU's vector instructions (AVX2 and AVX-512 kernels round differently)
    and on the thread count, not only on the code; on an accelerator, also on which one."""
    blas = "MKL" if torch.backends.mkl.is_available() else "no MKL"
    accelerator = (
        f"{torch.cuda.get_device_name(device)} (CUDA {torch.version.cuda}), "
        if device.startswith("cuda")
        else ""
    )
    # Without cached bytecode (PYTHONDONTWRITEBYTECODE) every process compiles reluexp's
    # modules again: a start-up or a check then pays what a user's second run does not.
    bytecode = "not cached" if sys.flags.dont_write_bytecode else "cached"
    return (
        f"{accelerator}{cpu_model()}, {os.cpu_count()} logical cores, vector ISA "
        f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__} ({blas}), Python {platform.python_version()}, bytecode "
        f"{bytecode}, reluexp commit {commit()}"
    )


def write_section(name: str, body: str) -> None:
    """Replace this benchmark's section of RESULTS.md, keeping the others."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    section = f"{start}\n{body.strip()}\n{end}"
    if start in text:
        text = re.sub(
            re.escape(start) + ".*?" + re.escape(end), lambda _: section, text, flags=re.S
        )
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    RESULTS.write_text(text)


def process(*command: str) -> float:
    """A command's wall time as a whole process, run in an empty directory of its own."""
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd, check=True, capture_output=True)
        return time.perf_counter() - start


def paired_ratio(samples: list[float], baseline: list[float]) -> str:
    """The median and quartiles of each round's ratio to the baseline measured in the same
    round: the machine's slow drifts (another job, the clock) cancel within a round, where a
    ratio of medians mixes rounds and, on a noisy machine, can be off by more than the stream
    costs."""
    ratios = [sample / base for sample, base in zip(samples, baseline)]
    low, median, high = statistics.quantiles(ratios, n=4)
    return f"{median:.3f} ({low:.3f}–{high:.3f})"


@contextmanager
def timed_train_loop() -> Iterator[list[float]]:
    """While active, each runner.train_loop's seconds (its steps and their flushes) are
    appended to the yielded list: a run's per-step time without its set-up, final checkpoint
    and summary, which summary.json's wall time includes (~13 ms a run of the 4-layer MLP of
    benchmarks/depth.py, ~2% of its 400 steps, counted against reluexp where a hand loop times
    its loop alone)."""
    seconds: list[float] = []
    train_loop = runner.train_loop

    def timed(training: Any) -> None:
        start = time.perf_counter()
        try:
            train_loop(training)
        finally:
            seconds.append(time.perf_counter() - start)

    with mock.patch.object(runner, "train_loop", timed):
        yield seconds


def reluexp_loop(overrides: list[str], steps: int, log_every: int | None = None) -> float:
    """runner.run's training loop per step (timed_train_loop) for the config the overrides
    compose, at this process's torch threads; log_every None keeps the config's. A run that
    does not complete (diverged) stops the benchmark: it would be timed over steps it never
    took."""
    threads = f"threads={torch.get_num_threads()}"
    config = task_config(compose_config([*overrides, f"steps={steps}", threads]))
    config.quiet = True
    config.log_every = log_every or config.log_every
    with tempfile.TemporaryDirectory() as run_dir, timed_train_loop() as seconds:
        runner.run(config, Path(run_dir))
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    if (summary["status"], summary["steps_done"]) != ("completed", steps):
        raise SystemExit(
            f"{' '.join(overrides)}: {summary['status']} after {summary['steps_done']}"
        )
    return seconds[0] / steps
