"""Sweep summaries: a table per group of jobs that differ only in seed, and their loss curves.

    python -m reluexp.report outputs/multirun/<sweep>

Works on any sweep directory, finished, interrupted or still running. Writes summary.csv,
summary.md and loss_curves.png into it.
"""

import csv
import io
import math
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from reluexp.events import read_scalars
from reluexp.summary import SUMMARY_NAME, RunSummary


@dataclass
class Job:
    run_dir: Path
    summary: RunSummary

    @property
    def group(self) -> str:
        """The job's overrides without its seed (and study name): what a group shares."""
        shared = [o for o in self.summary.overrides if not o.startswith(("seed=", "experiment="))]
        return " ".join(sorted(shared)) or "(defaults)"


@dataclass
class Group:
    label: str
    jobs: list[Job] = field(default_factory=list)

    def values(self, key: str) -> list[float]:
        values = [getattr(job.summary, key) for job in self.jobs]
        return [v for v in values if isinstance(v, int | float) and math.isfinite(v)]


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job directory below sweep_dir; one without summary.json never started training."""
    jobs = []
    for run_dir in sorted(p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()):
        if (run_dir / SUMMARY_NAME).is_file():
            summary = RunSummary.read(run_dir)
        else:
            overrides = run_dir / ".hydra" / "overrides.yaml"
            summary = RunSummary(
                status="not started",
                overrides=list(OmegaConf.load(overrides)) if overrides.is_file() else [],
            )
        jobs.append(Job(run_dir, summary))
    return jobs


def group_jobs(jobs: list[Job]) -> list[Group]:
    groups: dict[str, Group] = {}
    for job in jobs:
        groups.setdefault(job.group, Group(job.group)).jobs.append(job)
    return sorted(groups.values(), key=lambda group: group.label)


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.5g}"
    return f"{statistics.mean(values):.5g} ± {statistics.stdev(values):.2g}"


def table(groups: list[Group]) -> list[dict[str, str]]:
    rows = []
    for group in groups:
        statuses = Counter(job.summary.status for job in group.jobs)
        errors = [job.summary.error for job in group.jobs if job.summary.error]
        steps_per_s = group.values("steps_per_s")
        rows.append(
            {
                "group": group.label,
                "n": str(len(group.jobs)),
                "final loss": mean_std(group.values("final_loss")),
                "min loss": mean_std(group.values("min_loss")),
                "steps/s": f"{statistics.mean(steps_per_s):.0f}" if steps_per_s else "–",
                "status": ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items())),
                "error": errors[0] if errors else "",
            }
        )
    return rows


def markdown(rows: list[dict[str, str]]) -> str:
    columns = list(rows[0]) if rows else ["group"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        cells = [row[c].replace("|", "\\|") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(groups: list[Group], path: Path) -> None:
    """Mean loss per group over steps, with a min–max band across seeds, log-scale y."""
    # Imported here, and without pyplot (no GUI backend to pick): only sweeps draw.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 5.5))
    axes = figure.subplots()
    for group in groups:
        by_step: dict[int, list[float]] = defaultdict(list)
        for job in group.jobs:
            for step, value in read_scalars(job.run_dir, ["loss/train"])["loss/train"].items():
                if math.isfinite(value) and value > 0:
                    by_step[step].append(value)
        if not by_step:
            continue
        steps = sorted(by_step)
        mean = [statistics.mean(by_step[s]) for s in steps]
        (line,) = axes.plot(
            steps, mean, label=f"{group.label} (n={len(group.jobs)})", linewidth=1.2
        )
        lows, highs = [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps]
        axes.fill_between(steps, lows, highs, color=line.get_color(), alpha=0.2, linewidth=0)
    axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel("loss/train (mean, min–max band over seeds)")
    axes.grid(True, which="major", alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def write_report(sweep_dir: Path) -> list[Job]:
    """summary.csv, summary.md and loss_curves.png for sweep_dir; returns its jobs."""
    jobs = find_jobs(sweep_dir)
    groups = group_jobs(jobs)
    rows = table(groups)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["group"])
    writer.writeheader()
    writer.writerows(rows)
    (sweep_dir / "summary.csv").write_text(buffer.getvalue())
    statuses = Counter(job.summary.status for job in jobs)
    header = f"# Sweep {sweep_dir.name}\n\n{len(jobs)} jobs: " + ", ".join(
        f"{s}: {n}" for s, n in sorted(statuses.items())
    )
    (sweep_dir / "summary.md").write_text(f"{header}\n\n{markdown(rows)}")
    plot(groups, sweep_dir / "loss_curves.png")
    return jobs


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    sweep_dir = Path(args[0])
    if not sweep_dir.is_dir():
        print(f"reluexp.report: error: {sweep_dir}: not a directory", file=sys.stderr)
        return 2
    jobs = write_report(sweep_dir)
    if not jobs:
        print(f"reluexp.report: error: {sweep_dir}: no job directories in it", file=sys.stderr)
        return 2
    print((sweep_dir / "summary.md").read_text())
    print(f"Wrote {sweep_dir / 'summary.csv'}, summary.md and loss_curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
