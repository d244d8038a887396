"""What compile=true gains, and how far it moves the numbers.

    python -m benchmarks.compile [--repetitions 5]

Per-step time of reluexp's loop (every step streamed) with compile=false and compile=true, at
the reference size and a large one, alternating, medians, after a warm-up run that pays for the
compilation (its time is reported too); and the reference experiment's loss series under both,
compared step by step.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import alternate, machine, summarize, write_section
from reluexp import train
from reluexp.config import Config
from reluexp.events import read_scalars

SIZES = {"reference": (64, 1000, 100, 500), "large": (4096, 1024, 4096, 3)}


def config(size: str, compiled: bool, steps: int | None = None) -> Config:
    n, d_in, hidden, default_steps = SIZES[size]
    result = Config(device="cpu", steps=steps or default_steps, compile=compiled, quiet=True)
    result.data.n, result.data.d_in, result.model.hidden = n, d_in, hidden
    return result


def per_step(size: str, compiled: bool) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        train.run(config(size, compiled), Path(run_dir))
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        return 1 / summary["steps_per_s"]


def losses(compiled: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as run_dir:
        train.run(Config(device="cpu", compile=compiled, quiet=True), Path(run_dir))
        by_step = read_scalars(Path(run_dir), ["loss/train"])["loss/train"]
        return [by_step[step] for step in sorted(by_step)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    lines = [
        "## compile=true",
        "",
        f"`python -m benchmarks.compile`: {machine()}. reluexp's loop with every step streamed; "
        f"medians (min–max) over {args.repetitions} alternating repetitions after a warm-up.",
        "",
        "| size | compile=false ms/step | compile=true ms/step | ratio | first (compiling) run |",
        "| --- | --- | --- | --- | --- |",
    ]
    for size in SIZES:
        start = time.perf_counter()
        per_step(size, compiled=True)  # pays for the compilation
        warm_up = time.perf_counter() - start
        samples = alternate(
            {flag: (lambda flag=flag, size=size: per_step(size, flag)) for flag in (False, True)},
            args.repetitions,
        )
        ratio = statistics.median(samples[True]) / statistics.median(samples[False])
        lines.append(
            f"| {size} | {summarize(samples[False], 1e3)} | {summarize(samples[True], 1e3)} "
            f"| {ratio:.3f} | {warm_up:.1f} s |"
        )
    eager, compiled = losses(False), losses(True)
    relative = [abs(a - b) / abs(a) for a, b in zip(eager, compiled)]
    first = next((t for t, (a, b) in enumerate(zip(eager, compiled)) if a != b), None)
    lines += [
        "",
        f"The reference experiment (500 steps) under compile=true: first step that differs from "
        f"eager: {first}; largest relative loss difference {max(relative):.2e}; final loss "
        f"{compiled[-1]!r} against eager {eager[-1]!r}.",
    ]
    write_section("compile", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
