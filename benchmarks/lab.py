"""The Function lab's default check as a whole process, against `python -c "import torch,
reluexp.lab"` (the floor every check starts from), alternating, one run: for the corpus's
median Function (by in-process check time over tests/corpus.py's correct Functions), with the
seconds of each stage of the check (check.json's `seconds`).

    python -m benchmarks.lab [--processes 7] [--compare /path/to/other/python]
"""

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import alternate, machine, summarize, write_section
from reluexp.lab import check_function
from reluexp.lab.command import main as check
from tests import corpus

FLOOR = ["-c", "import torch, reluexp.lab"]
# What an in-process check (check_function(..., training=False), as a user's test calls it) of
# an elementwise Function may take.
IN_PROCESS_BUDGET = 0.5


def in_process_seconds(repetitions: int) -> dict[str, list[float]]:
    """check_function(Swish, training=False) in this process, alternating with torch's own
    gradcheck and gradgradcheck of the same Function on the lab's (4, 5) float64 input (the
    baseline a user would otherwise write)."""
    x = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def lab() -> float:
        start = time.perf_counter()
        check_function(corpus.Swish, training=False)
        return time.perf_counter() - start

    def gradchecks() -> float:
        leaf = x.clone().requires_grad_()
        start = time.perf_counter()
        torch.autograd.gradcheck(corpus.Swish.apply, (leaf,))
        torch.autograd.gradgradcheck(corpus.Swish.apply, (leaf,))
        return time.perf_counter() - start

    lab()  # the first call imports and compiles what later ones reuse
    return alternate(
        {"`check_function(Swish, training=False)`": lab, "gradcheck + gradgradcheck": gradchecks},
        repetitions,
    )


def median_function() -> tuple[str, list[str], dict[str, float]]:
    """The correct corpus Function whose in-process check takes the median time, and every
    Function's time."""
    seconds = {}
    with tempfile.TemporaryDirectory() as directory, contextlib.redirect_stdout(io.StringIO()):
        for name, overrides in corpus.CORRECT.items():
            start = time.perf_counter()
            check([*overrides, f"hydra.run.dir={directory}/{name}"])
            seconds[name] = time.perf_counter() - start
    ordered = sorted(seconds, key=seconds.get)
    name = ordered[len(ordered) // 2]
    return name, corpus.CORRECT[name], seconds


def process(command: list[str], stages: list[dict[str, float]] | None = None) -> float:
    # From the repository root, where tests.corpus imports; the report in a temporary directory.
    with tempfile.TemporaryDirectory() as directory:
        start = time.perf_counter()
        subprocess.run(
            [*command, f"hydra.run.dir={directory}/check"],
            cwd=Path(__file__).resolve().parent.parent,
            check=True,
            capture_output=True,
        )
        elapsed = time.perf_counter() - start
        report = Path(directory) / "check" / "check.json"
        if stages is not None and report.exists():
            stages.append(json.loads(report.read_text())["seconds"])
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=7)
    parser.add_argument("--compare", help="another installation's python, measured beside")
    args = parser.parse_args()
    name, overrides, in_process = median_function()
    check_command = ["-m", "reluexp.check", *overrides]
    stages: list[dict[str, float]] = []
    candidates = {
        f"`python -m reluexp.check` of {name}, this tree": lambda: process(
            [sys.executable, *check_command], stages
        ),
        '`python -c "import torch, reluexp.lab"`': lambda: process([sys.executable, *FLOOR]),
    }
    if args.compare:
        candidates[f"the same check, {args.compare}"] = lambda: process(
            [args.compare, *check_command]
        )
    samples = alternate(candidates, args.processes)
    check_seconds, floor_seconds = (statistics.median(v) for v in list(samples.values())[:2])
    lines = [
        "## The Function lab's default check",
        "",
        f"`python -m benchmarks.lab`: {machine()}. The corpus's median Function by in-process "
        f"check time ({len(in_process)} correct Functions, "
        f"{min(in_process.values()):.2f}–{max(in_process.values()):.2f} s each, median "
        f"{statistics.median(in_process.values()):.2f} s): `{name}`. Medians (min–max) over "
        f"{args.processes} alternating whole processes.",
        "",
        "| process | seconds | ratio to the floor |",
        "| --- | --- | --- |",
    ]
    for label, values in samples.items():
        ratio = statistics.median(values) / floor_seconds
        lines.append(f"| {label} | {summarize(values)} | {ratio:.2f} |")
    lines += [
        "",
        f"The check is **{check_seconds / floor_seconds:.2f}x** the floor. Its stages, in the "
        "check process (medians):",
        "",
        "| stage | seconds |",
        "| --- | --- |",
    ]
    for stage in stages[0] if stages else []:
        lines.append(f"| {stage} | {statistics.median(s[stage] for s in stages):.3f} |")
    quick = in_process_seconds(args.processes)
    lab_seconds, baseline_seconds = (statistics.median(v) for v in quick.values())
    lines += [
        "",
        f"In process, {args.processes} alternating repetitions (the first call left out):",
        "",
        "| call | seconds |",
        "| --- | --- |",
        *(f"| {label} | {summarize(values)} |" for label, values in quick.items()),
        "",
        f"The in-process check is **{lab_seconds / IN_PROCESS_BUDGET:.2f}x** its "
        f"{IN_PROCESS_BUDGET} s budget and {lab_seconds / baseline_seconds:.1f}x torch's "
        "gradcheck + gradgradcheck of the same Function.",
    ]
    write_section("lab", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
