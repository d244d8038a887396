"""Shared by the benchmark scripts: medians over alternating repetitions, and RESULTS.md."""

import os
import platform
import re
import statistics
import subprocess
from collections.abc import Callable
from pathlib import Path

import torch

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


def machine() -> str:
    """Where a benchmark ran, as every table of RESULTS.md says it: float32 results and their
    speed depend on the CPU's vector instructions (AVX2 and AVX-512 kernels round differently)
    and on the thread count, not only on the code."""
    blas = "MKL" if torch.backends.mkl.is_available() else "no MKL"
    return (
        f"{cpu_model()}, {os.cpu_count()} logical cores, vector ISA "
        f"{torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__} ({blas}), Python {platform.python_version()}, reluexp "
        f"commit {commit()}"
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
