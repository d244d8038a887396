"""What compile=true gains, and how far it moves the numbers.

    python -m benchmarks.compile [--repetitions 5]

Per-step time of reluexp's loop (every step streamed) with compile=false and compile=true, at
the reference size and a large one, for the article's myrelu and for torch.relu, alternating,
medians, after a warm-up run that pays for the compilation (its time is reported too); what
inductor makes of myrelu's mask `input < 0` on its own; and the reference experiment's loss
series under both, compared step by step.
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import alternate, machine, summarize, write_section
from reluexp.config import Config
from reluexp.record.events import read_scalars
from reluexp.run import runner

SIZES = {"reference": (64, 1000, 100, 500), "large": (4096, 1024, 4096, 3)}
ACTIVATIONS = {"myrelu": "reluexp.functions.MyReLU", "relu": "torch.relu"}


def config(size: str, activation: str, compiled: bool) -> Config:
    n, d_in, hidden, steps = SIZES[size]
    result = Config(device="cpu", steps=steps, compile=compiled, quiet=True)
    result.data.n, result.data.d_in, result.model.hidden = n, d_in, hidden
    result.activation.name, result.activation.target = activation, ACTIVATIONS[activation]
    return result


def per_step(size: str, activation: str, compiled: bool) -> float:
    with tempfile.TemporaryDirectory() as run_dir:
        runner.run(config(size, activation, compiled), Path(run_dir))
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        return 1 / summary["steps_per_s"]


def losses(compiled: bool) -> list[float]:
    with tempfile.TemporaryDirectory() as run_dir:
        runner.run(Config(device="cpu", compile=compiled, quiet=True), Path(run_dir))
        by_step = read_scalars(Path(run_dir), ["loss/train"])["loss/train"]
        return [by_step[step] for step in sorted(by_step)]


def negative(x: torch.Tensor) -> torch.Tensor:
    return x < 0


def mask_time(compiled: bool, repetitions: int = 10) -> float:
    """Seconds for myrelu's backward mask `input < 0` on a large layer's N x H input."""
    x = torch.randn(4096, 4096)
    mask = torch.compile(negative) if compiled else negative
    mask(x)  # compiles
    start = time.perf_counter()
    for _ in range(repetitions):
        mask(x)
    return (time.perf_counter() - start) / repetitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    lines = [
        "## compile=true",
        "",
        f"`python -m benchmarks.compile`: {machine()}. reluexp's loop with every step streamed; "
        f"medians (min–max) over {args.repetitions} alternating repetitions after a warm-up "
        "(its time depends on what inductor's on-disk cache already holds).",
        "",
        "| size | activation | compile=false per step | compile=true per step | ratio "
        "| first (compiling) run |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for size in SIZES:
        unit, scale = ("µs", 1e6) if size == "reference" else ("ms", 1e3)
        for activation in ACTIVATIONS:
            start = time.perf_counter()
            per_step(size, activation, compiled=True)  # pays for the compilation
            warm_up = time.perf_counter() - start
            samples = alternate(
                {
                    flag: (lambda flag=flag, size=size, a=activation: per_step(size, a, flag))
                    for flag in (False, True)
                },
                args.repetitions,
            )
            ratio = statistics.median(samples[True]) / statistics.median(samples[False])
            lines.append(
                f"| {size} | {activation} | {summarize(samples[False], scale)} {unit} "
                f"| {summarize(samples[True], scale)} {unit} | {ratio:.3f} | {warm_up:.1f} s |"
            )
    masks = alternate({flag: lambda flag=flag: mask_time(flag) for flag in (False, True)}, 3)
    eager_mask, compiled_mask = (statistics.median(masks[flag]) for flag in (False, True))
    lines += [
        "",
        f"myrelu's backward mask `input < 0` alone, on a 4096 x 4096 input: eager "
        f"{eager_mask * 1e3:.1f} ms, compiled {compiled_mask * 1e3:.1f} ms "
        f"({compiled_mask / eager_mask:.1f}x). Inductor computes the mask in the forward and "
        "writes it as bool, through a vectorized mask store that is slower than eager here.",
    ]
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
