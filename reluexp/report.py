"""Sweep summaries: a table per group of jobs that differ only in seed, and their loss curves.

    python -m reluexp.report outputs/multirun/<sweep>

Works on any sweep directory, finished, interrupted or still running: every job the sweep
planned is listed with its status (`not started` included), and the losses aggregate the
completed runs only. Writes summary.csv, summary.md and loss_curves.png into it.
"""

import csv
import io
import math
import re
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from reluexp.checkpoint import CHECKPOINT_NAME
from reluexp.events import read_scalars
from reluexp.summary import SUMMARY_NAME, RunSummary, SummaryError

STATUSES = ("completed", "diverged", "interrupted", "failed", "running", "not started")
UNREADABLE = "unreadable"


@dataclass
class Job:
    # None: the sweep planned the job but never made its directory.
    run_dir: Path | None
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

    @property
    def completed(self) -> list[Job]:
        return [job for job in self.jobs if job.summary.status == "completed"]

    def values(self, key: str) -> list[float]:
        """A summary field of the completed jobs: runs stopped early would bias the mean."""
        values = [getattr(job.summary, key) for job in self.completed]
        return [v for v in values if isinstance(v, int | float) and math.isfinite(v)]


def read_job(run_dir: Path) -> Job:
    """A job directory as a Job; what cannot be read is `unreadable` with the reason."""
    overrides_yaml = run_dir / ".hydra" / "overrides.yaml"
    overrides: list[str] = []
    try:
        if overrides_yaml.exists():
            overrides = [str(o) for o in OmegaConf.load(overrides_yaml)]
    except Exception as error:  # binary garbage, wrong YAML: this job only
        reason = f".hydra/overrides.yaml: {type(error).__name__}"
        return Job(run_dir, RunSummary(status=UNREADABLE, error=reason))
    if (run_dir / SUMMARY_NAME).is_file():
        try:
            return Job(run_dir, RunSummary.read(run_dir))
        except SummaryError as error:
            summary = RunSummary(status=UNREADABLE, overrides=overrides, error=str(error))
            return Job(run_dir, summary)
    if (run_dir / CHECKPOINT_NAME).is_file() or any(run_dir.glob("events.out.tfevents.*")):
        reason = f"no {SUMMARY_NAME}, but it trained (events or checkpoint present)"
        return Job(run_dir, RunSummary(status=UNREADABLE, overrides=overrides, error=reason))
    return Job(run_dir, RunSummary(status="not started", overrides=overrides))


def planned_jobs(sweep_dir: Path) -> list[list[str]] | int | None:
    """The overrides of every job, in job order, as Hydra's basic sweeper makes them; for a
    sweeper that chooses as it goes (Optuna), only how many; None without multirun.yaml."""
    multirun_yaml = sweep_dir / "multirun.yaml"
    if not multirun_yaml.is_file():
        return None
    hydra_config = OmegaConf.load(multirun_yaml).hydra
    if "n_trials" in hydra_config.sweeper:
        return int(hydra_config.sweeper.n_trials)
    # The preset's params, then the command line: BasicSweeper's own order and merge.
    params = [f"{k}={v}" for k, v in (hydra_config.sweeper.get("params") or {}).items()]
    overrides = OverridesParser.create().parse_overrides(params + list(hydra_config.overrides.task))
    return BasicSweeper.split_arguments(overrides, None)[0]


def job_number(run_dir: Path) -> tuple[int, str]:
    """Job directories start with the job number: `10_...` after `9_...`."""
    number = re.match(r"\d+", run_dir.name)
    return (int(number.group()) if number else math.inf, run_dir.name)


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job of the sweep in job order: its directory's state, or `not started`."""
    dirs = sorted((p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()), key=job_number)
    found = [read_job(run_dir) for run_dir in dirs]
    planned = planned_jobs(sweep_dir)
    if isinstance(planned, int):
        missing = max(planned - len(found), 0)
        never = [f"(trial {len(found) + i})" for i in range(missing)]
        return found + [Job(None, RunSummary(status="not started", overrides=[o])) for o in never]
    if planned is None:
        return found
    unmatched = list(found)
    jobs = []
    for overrides in planned:
        job = next((job for job in unmatched if job.summary.overrides == overrides), None)
        if job is None:
            job = Job(None, RunSummary(status="not started", overrides=overrides))
        else:
            unmatched.remove(job)
        jobs.append(job)
    # Directories the plan does not name (a damaged overrides.yaml) are listed all the same.
    return jobs + unmatched


def group_jobs(jobs: list[Job]) -> list[Group]:
    groups: dict[str, Group] = {}
    for job in jobs:
        groups.setdefault(job.group, Group(job.group)).jobs.append(job)
    return sorted(groups.values(), key=lambda group: group.label)


def statistics_of(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.mean(values), "std": std, "min": min(values), "max": max(values)}


def table(groups: list[Group]) -> list[dict[str, object]]:
    """One row of numbers per group (the CSV); the Markdown table formats them."""
    rows = []
    for group in groups:
        statuses = Counter(job.summary.status for job in group.jobs)
        errors = [job.summary.error for job in group.jobs if job.summary.error]
        steps_per_s = group.values("steps_per_s")
        row: dict[str, object] = {"group": group.label, "jobs": len(group.jobs)}
        for key in ("final_loss", "min_loss"):
            for stat, value in statistics_of(group.values(key)).items():
                row[f"{key}_{stat}"] = value
        row["steps_per_s"] = statistics.mean(steps_per_s) if steps_per_s else None
        for status in (*STATUSES, UNREADABLE):
            row[status.replace(" ", "_")] = statuses.get(status, 0)
        warned = [job.summary.warnings for job in group.jobs if job.summary.warnings]
        row["jobs_with_warnings"] = len(warned)
        row["warning"] = warned[0][0] if warned else ""
        row["error"] = errors[0] if errors else ""
        rows.append(row)
    return rows


def number(value: object, digits: int = 5) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def markdown(rows: list[dict[str, object]]) -> str:
    columns = ["group", "jobs", "final loss", "min loss", "steps/s", "status", "warnings", "error"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        statuses = [
            f"{status}: {row[status.replace(' ', '_')]}"
            for status in (*STATUSES, UNREADABLE)
            if row[status.replace(" ", "_")]
        ]
        cells = [
            str(row["group"]),
            str(row["jobs"]),
            f"{number(row['final_loss_mean'])} ± {number(row['final_loss_std'], 2)}",
            f"{number(row['min_loss_mean'])} ± {number(row['min_loss_std'], 2)}",
            number(row["steps_per_s"], 4),
            ", ".join(statuses),
            f"{row['jobs_with_warnings']}: {row['warning']}" if row["warning"] else "",
            str(row["error"]),
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
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
            if job.run_dir is None or job.summary.status == UNREADABLE:
                continue
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
    completed = statuses["completed"]
    header = (
        f"# Sweep {sweep_dir.name}\n\n{len(jobs)} jobs: "
        + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
        + f". Losses aggregate the {completed} completed runs"
        + (f" ({len(jobs) - completed} left out)." if completed < len(jobs) else ".")
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
    if not any((p / ".hydra").is_dir() for p in sweep_dir.iterdir()):
        print(f"reluexp.report: error: {sweep_dir}: no job directories in it", file=sys.stderr)
        return 2
    try:
        write_report(sweep_dir)
    except OSError as error:
        where = error.filename or sweep_dir
        print(f"reluexp.report: error: {where}: cannot write ({error.strerror})", file=sys.stderr)
        return 2
    print((sweep_dir / "summary.md").read_text())
    print(f"Wrote {sweep_dir / 'summary.csv'}, summary.md and loss_curves.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
