"""The Function lab's default check, `python -m reluexp.check activation=myrelu`, as a whole
process: this tree against another installation's (--compare), alternating, same machine, one
run; and `python -c "import torch"`, the floor every check starts from.

    python -m benchmarks.lab [--processes 7] [--compare /path/to/other/python]
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import alternate, machine, summarize, write_section

CHECK = ["-m", "reluexp.check", "activation=myrelu"]


def process(command: list[str]) -> float:
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        subprocess.run(
            [*command, f"hydra.run.dir={cwd}/check"], cwd=cwd, check=True, capture_output=True
        )
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=7)
    parser.add_argument("--compare", help="another installation's python, measured beside")
    args = parser.parse_args()
    commands = {"`python -m reluexp.check activation=myrelu`, this tree": [sys.executable, *CHECK]}
    if args.compare:
        commands[f"the same, {args.compare}"] = [args.compare, *CHECK]
    candidates = {
        name: (lambda command=command: process(command)) for name, command in commands.items()
    }
    # The floor: torch's import (the hydra.run.dir argument is ignored by python -c).
    candidates['`python -c "import torch"`'] = lambda: process(
        [sys.executable, "-c", "import torch"]
    )
    samples = alternate(candidates, args.processes)
    base = statistics.median(next(iter(samples.values())))
    lines = [
        "## The Function lab's default check",
        "",
        f"`python -m benchmarks.lab`: {machine()}. Medians (min–max) over {args.processes} "
        "alternating whole processes.",
        "",
        "| process | seconds | ratio to this tree's check |",
        "| --- | --- | --- |",
    ]
    for name, values in samples.items():
        lines.append(f"| {name} | {summarize(values)} | {statistics.median(values) / base:.3f} |")
    write_section("lab", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
