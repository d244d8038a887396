"""What a sweep costs: jobs in one process against one process per job; joblib against basic.

    python -m benchmarks.sweep [--repetitions 3]

(1) A 12-job sweep (activation=myrelu,relu x seed=0..5, reference size, 500 steps) through
Hydra's basic launcher in one process, against the same 12 jobs as 12 `python -m reluexp`
processes. (2) 4 jobs of 4000 reference-size steps through `hydra/launcher=joblib` with 2
workers (1 thread each), against the basic launcher (torch's default threads). Whole
commands, alternating, medians.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import alternate, machine, summarize, write_section

GRID = ["activation=myrelu,relu", "seed=0,1,2,3,4,5", "device=cpu", "quiet=true"]
JOBS = [(a, s) for a in ("myrelu", "relu") for s in range(6)]
PARALLEL = ["seed=0,1,2,3", "steps=4000", "device=cpu", "quiet=true"]


def timed(*commands: list[str]) -> float:
    with tempfile.TemporaryDirectory() as cwd:
        start = time.perf_counter()
        for command in commands:
            subprocess.run(
                [sys.executable, "-m", "reluexp", *command],
                cwd=cwd,
                check=True,
                capture_output=True,
            )
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    samples = alternate(
        {
            "12 jobs, one process (basic launcher)": lambda: timed(["-m", *GRID]),
            "12 processes, one job each": lambda: timed(
                *[[f"activation={a}", f"seed={s}", "device=cpu", "quiet=true"] for a, s in JOBS]
            ),
            "4 long jobs, basic launcher": lambda: timed(["-m", *PARALLEL]),
            "4 long jobs, joblib, 2 workers": lambda: timed(
                ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *PARALLEL]
            ),
        },
        args.repetitions,
    )
    median = {name: statistics.median(times) for name, times in samples.items()}
    in_process = (
        median["12 processes, one job each"] / median["12 jobs, one process (basic launcher)"]
    )
    parallel = median["4 long jobs, basic launcher"] / median["4 long jobs, joblib, 2 workers"]
    lines = [
        "## Sweeps: in-process jobs and parallel workers",
        "",
        f"`python -m benchmarks.sweep`: {machine()}. Whole commands, medians (min–max) over "
        f"{args.repetitions} alternating repetitions.",
        "",
        "| command | seconds |",
        "| --- | --- |",
        *(f"| {name} | {summarize(times)} |" for name, times in samples.items()),
        "",
        f"The 12-job sweep in one process is {in_process:.2f}x faster than 12 processes (Python, "
        f"torch and Hydra start once). joblib with 2 single-thread workers is {parallel:.2f}x "
        "the basic launcher's speed on 4 jobs of 4000 reference-size steps.",
    ]
    write_section("sweep", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
