"""What a person waits for, each against its baseline measured in the same run (alternating
rounds, medians, paired ratios), quiet or beside CPU hogs (a shared machine):

- start-up: `python -m reluexp device=cpu steps=1` against the article's script for one step;
- `--help`: its CPU time against `import torch`'s, and whether it imports torch;
- the lab in a user's pytest: four check_function tests in one pytest process against the same
  four checks as commands (CPU), and the threads it leaves;
- a sweep's lab checks: the headline sweep and the custom-vs-built-in study with their lab
  checks against the same sweeps with none (lab_seconds=0).

    python -m benchmarks.waits [--rounds 5] [--hogs 0] [--study-rounds 3]
"""

import argparse
import contextlib
import multiprocessing
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.common import alternate, machine, summarize, write_section

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# The four Functions of the pytest comparison: shipped activations, each with its reference.
FOUR = ["myrelu", "lean_relu", "leaky_relu", "silu"]
HEADLINE = ["-m", "activation=myrelu,relu", "seed=0,1,2"]
STUDY = ["-m", "experiment=custom_vs_builtin", "device=cpu"]


def timed(command: list[str], cwd: Path | None = None) -> tuple[float, float]:
    """A command's wall and CPU seconds (its process and its children's), in a fresh directory
    unless `cwd`."""
    with tempfile.TemporaryDirectory() as directory:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(command, cwd=cwd or directory, check=True, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def wall(command: list[str]) -> float:
    return timed(command)[0]


def cpu(command: list[str], cwd: Path | None = None) -> float:
    return timed(command, cwd)[1]


def paired(samples: list[float], baseline: list[float]) -> str:
    ratios = [a / b for a, b in zip(samples, baseline)]
    return f"{statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f})"


def pytest_file(directory: Path) -> Path:
    """Four tests as a user writes them: check_function of four Functions, one each, asserting
    the verdict and that the caller's threads are left as they were."""
    tests = directory / "test_my_functions.py"
    tests.write_text(
        textwrap.dedent(
            f"""
            import pytest
            import torch

            from reluexp.hydra_glue import compose_config
            from reluexp.lab import check_function
            from reluexp.validation import task_config


            @pytest.mark.parametrize("name", {FOUR!r})
            def test_my_function(name):
                a = task_config(compose_config([f"activation={{name}}"])).activation
                threads = torch.get_num_threads()
                report = check_function(
                    a.target, a.reference, params=a.params or None,
                    reference_params=a.reference_params or None,
                )
                assert report.ok, str(report)
                assert torch.get_num_threads() == threads
            """
        )
    )
    return tests


def commands_cpu() -> float:
    """The four checks as commands, one after another: their CPU seconds together."""
    return sum(cpu([PYTHON, "-m", "reluexp.check", f"activation={name}"]) for name in FOUR)


@contextlib.contextmanager
def hogs(count: int) -> Iterator[None]:
    """`count` processes that keep a core busy each, for as long as the block runs."""
    running = [multiprocessing.Process(target=spin, daemon=True) for _ in range(count)]
    for process in running:
        process.start()
    try:
        yield
    finally:
        for process in running:
            process.terminate()


def spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--study-rounds", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=0, help="busy processes beside (0: quiet)")
    args = parser.parse_args()
    with hogs(args.hogs), tempfile.TemporaryDirectory() as directory:
        start_up = alternate(
            {
                "`python benchmarks/article.py 1`": lambda: wall(
                    [PYTHON, str(ROOT / "benchmarks" / "article.py"), "1"]
                ),
                "`python -m reluexp device=cpu steps=1`": lambda: wall(
                    [PYTHON, "-m", "reluexp", "device=cpu", "steps=1"]
                ),
            },
            args.rounds,
        )
        helps = alternate(
            {
                '`python -c "import torch"`': lambda: cpu([PYTHON, "-c", "import torch"]),
                "`python -m reluexp --help`": lambda: cpu([PYTHON, "-m", "reluexp", "--help"]),
            },
            args.rounds,
        )
        help_imports = subprocess.run(
            [PYTHON, "-X", "importtime", "-m", "reluexp", "--help"],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
        imports_torch = any(line.rstrip().endswith("| torch") for line in help_imports.splitlines())
        tests = pytest_file(Path(directory))
        pytests = alternate(
            {
                "the four checks as commands": commands_cpu,
                "four check_function tests in one pytest": lambda: cpu(
                    [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                    cwd=Path(directory),
                ),
            },
            max(1, args.rounds // 2),
        )
        headline = alternate(
            {
                "headline sweep, lab_seconds=0": lambda: wall(
                    [PYTHON, "-m", "reluexp", *HEADLINE, "lab_seconds=0"]
                ),
                "headline sweep, its lab check": lambda: wall([PYTHON, "-m", "reluexp", *HEADLINE]),
            },
            args.rounds,
        )
        study = alternate(
            {
                "custom_vs_builtin, lab_seconds=0": lambda: wall(
                    [PYTHON, "-m", "reluexp", *STUDY, "lab_seconds=0"]
                ),
                "custom_vs_builtin, its lab checks": lambda: wall(
                    [PYTHON, "-m", "reluexp", *STUDY]
                ),
            },
            args.study_rounds,
        )
    lines = [
        "## Waits: what a person waits for, against its baseline",
        "",
        f"`python -m benchmarks.waits --hogs {args.hogs}`: {machine()}; "
        + ("quiet" if not args.hogs else f"beside {args.hogs} busy processes")
        + f". Medians (min–max) over {args.rounds} alternating rounds "
        f"({args.study_rounds} for the study), paired ratios per round.",
        "",
        "| wait | baseline | seconds | baseline seconds | paired ratio | difference, s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]

    def row(wait: str, samples: list[float], base: str, baseline: list[float]) -> str:
        difference = statistics.median(samples) - statistics.median(baseline)
        return (
            f"| {wait} | {base} | {summarize(samples)} | {summarize(baseline)} | "
            f"{paired(samples, baseline)} | {difference:+.2f} |"
        )

    (article, article_s), (reluexp, reluexp_s) = start_up.items()
    lines.append(row(f"{reluexp} (wall)", reluexp_s, article, article_s))
    (torch_label, torch_s), (help_label, help_s) = helps.items()
    lines.append(row(f"{help_label} (CPU)", help_s, torch_label, torch_s))
    (commands, commands_s), (pytest, pytest_s) = pytests.items()
    lines.append(row(f"{pytest} (CPU)", pytest_s, commands, commands_s))
    for sweeps in (headline, study):
        (_, none_s), (label, with_s) = sweeps.items()
        lines.append(row(f"{label} (wall)", with_s, "the same, lab_seconds=0", none_s))
    lines += [
        "",
        f"`--help` imports torch: {'yes' if imports_torch else 'no'}. The pytest file: "
        f"check_function of {', '.join(FOUR)} against their references, each asserting the "
        "caller's torch threads unchanged.",
    ]
    write_section("waits" if not args.hogs else "waits-busy", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
