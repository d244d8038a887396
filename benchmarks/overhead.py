"""What streaming every step costs: reluexp's loop against the article's bare loop.

    python -m benchmarks.overhead [--repetitions 9] [--steps 1000] [--processes 7]
                                  [--compare PYTHON]

In-process per-step time (same process, alternating, both under reluexp's malloc settings), and
whole-process wall time of `python -m reluexp device=cpu` against `python benchmarks/article.py`
at the reference size: one step (start-up) and 6000 steps, and the same process ending without
the gc.freeze() of reluexp.__main__. The default 6000-step run against the same run streaming
nothing, beside its floor: the article's network by hand computing the streamed statistics bare at
the steps the default streams, against none. Where the stream's time goes: its norms taken by
torch.linalg.vector_norm instead (in float32, and in float64 as an older path did).
--compare PYTHON adds another installation's reluexp (an older commit's, say) beside this one,
in the same run: its streamed loop in a fresh process and its whole processes.
"""

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

from benchmarks.common import (
    alternate,
    machine,
    paired_ratio,
    process,
    summarize,
    timed_train_loop,
    write_section,
)
from benchmarks.depth import mlp_by_hand
from benchmarks.digits_bare import KEPT
from reluexp.config import Config
from reluexp.functions.activations import MyReLU
from reluexp.record import metrics
from reluexp.run import runner
from reluexp.run.process import keep_freed_memory

REPO_ROOT = Path(__file__).resolve().parent.parent


def article_loop(steps: int) -> float:
    """The article's loop (its zero_() included), timed per step, under the malloc settings
    reluexp's CPU runs use (glibc's defaults, put back after every reluexp run, would give the
    baseline a page fault per reallocated block)."""
    with keep_freed_memory():
        return bare_loop(steps)


def bare_loop(steps: int) -> float:
    generator = torch.Generator("cpu").manual_seed(42)
    x = torch.randn(64, 1000, generator=generator)
    y = torch.randn(64, 10, generator=generator)
    w1 = torch.randn(1000, 100, generator=generator, requires_grad=True)
    w2 = torch.randn(100, 10, generator=generator, requires_grad=True)
    start = time.perf_counter()
    for t in range(steps):
        loss = (MyReLU.apply(x.mm(w1)).mm(w2) - y).pow(2).sum()
        if t % 100 == 99:
            loss.item()
        loss.backward()
        with torch.no_grad():
            w1 -= 1e-6 * w1.grad
            w2 -= 1e-6 * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return (time.perf_counter() - start) / steps


def reluexp_loop(steps: int, log_every: int | None, variant: str = "as shipped") -> float:
    """runner.run's training loop per step (common.timed_train_loop), as shipped or in one of
    VARIANTS; log_every None streams as the default does."""
    with VARIANTS[variant](), tempfile.TemporaryDirectory() as run_dir:
        with timed_train_loop() as seconds:
            runner.run(Config(device="cpu", steps=steps, log_every=log_every), Path(run_dir))
        return seconds[0] / steps


def vector_norm_squared(vector: torch.Tensor) -> float:
    return torch.linalg.vector_norm(vector).item() ** 2


def float64_norm_squared(vector: torch.Tensor) -> float:
    return torch.linalg.vector_norm(vector, dtype=torch.float64).item() ** 2


# The streamed loop with one thing changed, to show what each part of a row costs (a CPU
# run's squared norms are metrics.host_square's).
VARIANTS = {
    "as shipped": contextlib.nullcontext,
    "norms by torch.linalg.vector_norm instead of a dot product": lambda: mock.patch.object(
        metrics, "host_square", vector_norm_squared
    ),
    "norms in float64": lambda: mock.patch.object(metrics, "host_square", float64_norm_squared),
}


# The article's network by hand (depth.mlp_by_hand: its init scaled) computing the statistics
# at the steps the default streams: what streaming at that cadence costs at least.
FLOOR_AT_THE_DEFAULT = "by hand, the streamed statistics kept at the same steps (the floor)"

# Start-up (one step), and a run long enough for the stream to show.
WHOLE_PROCESS_STEPS = (1, 6000)
# python -m reluexp without reluexp.__main__'s gc.freeze() at the end.
WITHOUT_FREEZE = "import sys; from reluexp.cli import main; main()"
# The streamed run's time per step, in a fresh process of the given python (this tree's
# layout, or an older commit's reluexp.train): summary.json's wall time, which an older commit
# also has, so its set-up and final checkpoint are included, unlike the in-process rows.
LOOP_IN_A_PROCESS = """
import json, sys, tempfile
from pathlib import Path
try:
    from reluexp.run.runner import run
except ImportError:
    from reluexp.train import run
from reluexp.config import Config
steps, run_dir = int(sys.argv[1]), tempfile.mkdtemp()
run(Config(device="cpu", steps=steps, quiet=True), Path(run_dir))
print(json.loads((Path(run_dir) / "summary.json").read_text())["wall_time_s"] / steps)
"""


def loop_in_a_process(python: str, steps: int) -> float:
    with tempfile.TemporaryDirectory() as cwd:
        command = [python, "-c", LOOP_IN_A_PROCESS, str(steps)]
        done = subprocess.run(command, cwd=cwd, check=True, capture_output=True, text=True)
        return float(done.stdout.split()[-1])


def processes(commands: dict[str, list[str]], repetitions: int) -> dict[str, list[float]]:
    """Each command's wall time as a whole process, the commands alternating."""
    return alternate(
        {name: lambda command=command: process(*command) for name, command in commands.items()},
        repetitions,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=9)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=7)
    parser.add_argument("--compare", help="another installation's python, measured beside")
    args = parser.parse_args()
    pythons = {"this tree": sys.executable} | ({args.compare: args.compare} if args.compare else {})

    per_step = alternate(
        {
            "article loop": lambda: article_loop(args.steps),
            "reluexp, every step streamed": lambda: reluexp_loop(args.steps, log_every=1),
            **{
                f"reluexp, every step streamed, {variant}": (
                    lambda variant=variant: reluexp_loop(args.steps, 1, variant)
                )
                for variant in list(VARIANTS)[1:]
            },
            "reluexp, stream off": lambda: reluexp_loop(args.steps, log_every=10**9),
            **{
                f"reluexp, every step streamed, a fresh process of {name} (its set-up included)": (
                    lambda python=python: loop_in_a_process(python, args.steps)
                )
                for name, python in pythons.items()
                if args.compare
            },
        },
        args.repetitions,
    )
    # The article's run as the default streams it (every ceil(steps / 1000)-th step) against
    # the same run streaming nothing but its print steps; and its floor: the article's network
    # by hand computing the streamed statistics bare at the same steps, against none.
    default_steps = WHOLE_PROCESS_STEPS[-1]
    streamed_by_default = Config(steps=default_steps).streams_at
    default_run = alternate(
        {
            "as the default streams": lambda: reluexp_loop(default_steps, None),
            "nothing streamed": lambda: reluexp_loop(default_steps, 10**9),
            FLOOR_AT_THE_DEFAULT: lambda: mlp_by_hand(
                1, default_steps, "cpu", KEPT, streamed_by_default
            ),
            "by hand": lambda: mlp_by_hand(1, default_steps, "cpu"),
        },
        args.repetitions,
    )
    article_script = str(REPO_ROOT / "benchmarks" / "article.py")
    # steps -> (the article's command, reluexp's), each with its argv after the interpreter.
    pairs = {
        steps: (
            (f"python benchmarks/article.py {steps}", [article_script, str(steps)]),
            (
                f"python -m reluexp device=cpu steps={steps}",
                ["-m", "reluexp", "device=cpu", f"steps={steps}"],
            ),
        )
        for steps in WHOLE_PROCESS_STEPS
    }
    commands = {name: [sys.executable, *argv] for pair in pairs.values() for name, argv in pair}
    commands["`python -m reluexp device=cpu steps=1`, ending without gc.freeze()"] = [
        sys.executable,
        "-c",
        WITHOUT_FREEZE,
        "device=cpu",
        "steps=1",
    ]
    if args.compare:
        for steps in WHOLE_PROCESS_STEPS:
            commands[f"`python -m reluexp device=cpu steps={steps}`, {args.compare}"] = [
                args.compare,
                "-m",
                "reluexp",
                "device=cpu",
                f"steps={steps}",
            ]
    whole = processes(commands, args.processes)

    # --help needs no torch: against the interpreter's own start-up.
    help_commands = {"`python -c pass`": [sys.executable, "-c", "pass"]}
    for name, python in pythons.items():
        help_commands[f"`python -m reluexp --help`, {name}"] = [python, "-m", "reluexp", "--help"]
    helps = processes(help_commands, args.processes)

    def at_threads(threads: int) -> float:
        default = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return article_loop(args.steps)
        finally:
            torch.set_num_threads(default)

    by_threads = alternate(
        {f"{n} thread{'s' * (n > 1)}": lambda n=n: at_threads(n) for n in (1, 2)}, args.repetitions
    )
    base = statistics.median(per_step["article loop"])
    lines = [
        "## Overhead of the per-step stream (reference size)",
        "",
        f"`python -m benchmarks.overhead`: {machine()}. Medians (min–max) over "
        f"{args.repetitions} alternating repetitions of {args.steps} steps, and over "
        f"{args.processes} alternating whole processes. A paired ratio is a round's time over "
        "the article loop's in the same round.",
        "",
        "| loop | µs per step | ratio of medians | paired ratio, median (quartiles) |",
        "| --- | --- | --- | --- |",
    ]
    for name, samples in per_step.items():
        lines.append(
            f"| {name} | {summarize(samples, 1e6)} | {statistics.median(samples) / base:.3f} "
            f"| {paired_ratio(samples, per_step['article loop'])} |"
        )
    lines += [
        "",
        f"The default run of {default_steps} steps (in-process, alternating, paired):",
        "",
        "| loop | µs per step | paired ratio to the same loop streaming nothing, median "
        "(quartiles) |",
        "| --- | --- | --- |",
    ]
    for name, samples in default_run.items():
        unstreamed = "by hand" if name.startswith("by hand") else "nothing streamed"
        lines.append(
            f"| {name} | {summarize(samples, 1e6)} "
            f"| {paired_ratio(samples, default_run[unstreamed])} |"
        )
    lines += [
        "",
        "| whole process | seconds | ratio to the article's script | difference, s |",
        "| --- | --- | --- | --- |",
    ]
    for (article_name, _), (reluexp_name, _) in pairs.values():
        article = statistics.median(whole[article_name])
        related = [name for name in whole if name.startswith(f"`{reluexp_name}`,")]
        for name in (article_name, reluexp_name, *related):
            median = statistics.median(whole[name])
            lines.append(
                f"| {name if name in related else f'`{name}`'} | {summarize(whole[name])} "
                f"| {median / article:.3f} "
                f"| {median - article:+.2f} |"
            )
    lines += [
        "",
        "| help | seconds | difference to `python -c pass`, s |",
        "| --- | --- | --- |",
    ]
    bare_start = statistics.median(helps["`python -c pass`"])
    for name, samples in helps.items():
        lines.append(
            f"| {name} | {summarize(samples)} | {statistics.median(samples) - bare_start:+.2f} |"
        )
    lines += [
        "",
        "Threads: the article's loop at 1 and 2 torch threads (same process, alternating).",
        "",
        "| threads | µs per step | ratio to 1 thread |",
        "| --- | --- | --- |",
    ]
    one = statistics.median(by_threads["1 thread"])
    for name, samples in by_threads.items():
        lines.append(
            f"| {name} | {summarize(samples, 1e6)} | {statistics.median(samples) / one:.3f} |"
        )
    write_section("overhead", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
