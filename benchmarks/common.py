"""Shared by the benchmark scripts: medians over alternating repetitions, and RESULTS.md."""

import platform
import re
import statistics
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


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}, Python {platform.python_version()}"
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
