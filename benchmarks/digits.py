"""The digits study in its own networks, the MLP and the CNN (model=cnn), against the same
training written by hand (benchmarks/digits_bare.py): the same data, batch size, loss, update
and validation passes; reluexp adds its stream of metrics (every 10 steps, as the digits preset
has it, or every step), its checkpoints and its records.

    python -m benchmarks.digits [--repetitions 9] [--steps 600] [--processes 7]

In-process: seconds per step of each loop, alternating, as paired ratios (each round's time over
the bare loop's of the same network in the same round). Whole process: `python -m reluexp
model=cnn data=digits activation=relu device=cpu steps=S` against `python
benchmarks/digits_bare.py cnn S`, alternating.
"""

import argparse
import statistics
import sys
from pathlib import Path

from benchmarks.common import (
    alternate,
    machine,
    paired_ratio,
    process,
    reluexp_loop,
    summarize,
    write_section,
)
from benchmarks.digits_bare import train

REPO_ROOT = Path(__file__).resolve().parent.parent
OVERRIDES = ["data=digits", "activation=relu", "device=cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--processes", type=int, default=7)
    args = parser.parse_args()
    candidates = {}
    for model in ("mlp", "cnn"):
        candidates |= {
            f"{model}: bare loop": lambda model=model: train(model, args.steps),
            f"{model}: reluexp, metrics every 10 steps (the preset's)": (
                lambda model=model: reluexp_loop([*OVERRIDES, f"model={model}"], args.steps)
            ),
            f"{model}: reluexp, every step streamed": (
                lambda model=model: reluexp_loop([*OVERRIDES, f"model={model}"], args.steps, 1)
            ),
        }
    per_step = alternate(candidates, args.repetitions)
    bare_script = str(REPO_ROOT / "benchmarks" / "digits_bare.py")
    commands = {
        f"`python benchmarks/digits_bare.py cnn {args.steps}`": [
            sys.executable,
            bare_script,
            "cnn",
            str(args.steps),
        ],
        f"`python -m reluexp model=cnn {' '.join(OVERRIDES)} steps={args.steps}`": [
            sys.executable,
            "-m",
            "reluexp",
            "model=cnn",
            *OVERRIDES,
            f"steps={args.steps}",
        ],
    }
    whole = alternate(
        {name: lambda command=command: process(*command) for name, command in commands.items()},
        args.processes,
    )
    lines = [
        "## Your own model: the digits study's MLP and CNN against loops written by hand",
        "",
        f"`python -m benchmarks.digits`: {machine()}. `{' '.join(OVERRIDES)}`: batches of 128 "
        "of the 1,437 training images, cross-entropy, the manual update at lr 0.1, a validation "
        "pass every 10 steps; the MLP 64-100-10 (model=mlp), the CNN of 3x3 convolutions of 16 "
        f"and 32 channels and a linear layer (model=cnn). Medians (min–max) over "
        f"{args.repetitions} alternating repetitions of {args.steps} steps; a paired ratio is a "
        "round's time over the bare loop's of the same network in the same round.",
        "",
        "| loop | µs per step | paired ratio to the bare loop, median (quartiles) |",
        "| --- | --- | --- |",
    ]
    for name, samples in per_step.items():
        bare = per_step[f"{name.split(':')[0]}: bare loop"]
        lines.append(f"| {name} | {summarize(samples, 1e6)} | {paired_ratio(samples, bare)} |")
    bare_name, reluexp_name = commands
    lines += [
        "",
        f"Whole processes, {args.processes} alternating pairs:",
        "",
        "| process | seconds | paired ratio to the bare script, median (quartiles) |",
        "| --- | --- | --- |",
        f"| {bare_name} | {summarize(whole[bare_name])} | 1 |",
        f"| {reluexp_name} | {summarize(whole[reluexp_name])} | "
        f"{paired_ratio(whole[reluexp_name], whole[bare_name])} |",
    ]
    write_section("digits", "\n".join(lines))
    print("\n".join(lines))
    print(
        f"(the medians: {statistics.median(whole[reluexp_name]):.2f} s against "
        f"{statistics.median(whole[bare_name]):.2f} s)"
    )


if __name__ == "__main__":
    main()
