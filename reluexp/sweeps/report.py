"""Sweep summaries: a table per group of jobs that differ only in seed, and their loss curves.

    python -m reluexp.report outputs/multirun/<sweep>

Works on any sweep directory, finished, interrupted or still running: every job the sweep
planned is listed with its status (`not started` included), and the losses aggregate the
completed runs only. Writes summary.csv, summary.md and loss_curves.png into it.
"""

import csv
import io
import itertools
import math
import re
import statistics
import sys
import textwrap
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from omegaconf import OmegaConf

from reluexp.record.events import Layout, read_scalars, write_derived, write_loss_difference
from reluexp.record.summary import SUMMARY_NAME, RunSummary, SummaryError
from reluexp.record.tags import IDENTICAL_LOG10, LAYOUT, LOSS, loss_band, loss_gap
from reluexp.run.rundir import CHECKPOINT_NAME

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
    # The group of the built-in runs these jobs imitate (same config and seeds), if swept.
    reference: "Group | None" = None
    # step -> the losses of its jobs at that step (finite and positive ones).
    losses: dict[int, list[float]] = field(default_factory=dict)
    # step -> the mean over its jobs of |loss - reference loss| / reference loss.
    gap: dict[int, float] = field(default_factory=dict)
    # Each job with its reference job (same config and seed), for the paired comparison, and
    # that job's |loss - reference loss| / reference loss per step.
    pairs: list[tuple[Job, Job]] = field(default_factory=list)
    job_gaps: list[dict[int, float]] = field(default_factory=list)

    def parts_at(self) -> int | None:
        """The first step where any job's loss differs from its reference job's; None while
        they are identical."""
        return next((step for step in sorted(self.gap) if self.gap[step] > 0), None)

    @property
    def completed(self) -> list[Job]:
        return [job for job in self.jobs if job.summary.status == "completed"]

    def values(self, key: str) -> list[float]:
        """A summary field of the completed jobs: runs stopped early would bias the mean."""
        values = [getattr(job.summary, key) for job in self.completed]
        return [v for v in values if isinstance(v, int | float) and math.isfinite(v)]


def read_job(run_dir: Path) -> Job:
    """A job directory as a Job: its summary.json; without one, the overrides Hydra saved for
    it. What cannot be read is `unreadable` with the reason."""
    if (run_dir / SUMMARY_NAME).is_file():
        try:
            return Job(run_dir, RunSummary.read(run_dir))
        except SummaryError as error:
            return Job(run_dir, RunSummary(status=UNREADABLE, error=str(error)))
    try:
        overrides = [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")]
    except FileNotFoundError:
        overrides = []
    except Exception as error:  # binary garbage, wrong YAML: this job only
        reason = f".hydra/overrides.yaml: {type(error).__name__}"
        return Job(run_dir, RunSummary(status=UNREADABLE, error=reason))
    if (run_dir / CHECKPOINT_NAME).is_file() or any(run_dir.glob("events.out.tfevents.*")):
        reason = f"no {SUMMARY_NAME}, but it trained (events or checkpoint present)"
        return Job(run_dir, RunSummary(status=UNREADABLE, overrides=overrides, error=reason))
    return Job(run_dir, RunSummary(status="not started", overrides=overrides))


def planned_jobs(sweep_dir: Path) -> list[list[str]] | int | None:
    """The overrides of every job, in job order, as Hydra's basic sweeper makes them; for a
    sweeper that chooses as it goes (Optuna), only how many; None without a readable
    multirun.yaml (plan_problem says why)."""
    try:
        hydra_config = OmegaConf.load(sweep_dir / "multirun.yaml").hydra
        if "n_trials" in hydra_config.sweeper:
            return int(hydra_config.sweeper.n_trials)
        # The preset's params, then the command line: BasicSweeper's own order and merge.
        params = [f"{k}={v}" for k, v in (hydra_config.sweeper.get("params") or {}).items()]
        task = list(hydra_config.overrides.task)
        return grid(OverridesParser.create().parse_overrides(params + task))
    except Exception:  # missing, or not what Hydra writes: plan_problem says which
        return None


def plan_problem(sweep_dir: Path) -> str | None:
    """Why the sweep's plan cannot be read, or None when it can."""
    try:
        if planned_jobs(sweep_dir) is not None:
            return None
        OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task  # noqa: B018
    except FileNotFoundError:
        return "no multirun.yaml"
    except Exception as error:
        return f"multirun.yaml is unreadable ({type(error).__name__})"
    return "multirun.yaml does not say the sweep's jobs"


def grid(overrides: list[Override]) -> list[list[str]]:
    """The jobs of a grid sweep, as Hydra's basic sweeper orders them: a key given twice keeps
    its last value, in its first place; the product runs over the keys in that order."""
    choices: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


def job_number(run_dir: Path) -> tuple[int, str]:
    """Job directories start with the job number: `10_...` after `9_...`."""
    number = re.match(r"\d+", run_dir.name)
    return (int(number.group()) if number else math.inf, run_dir.name)


def find_jobs(sweep_dir: Path) -> list[Job]:
    """Every job of the sweep in job order: its directory's state, or `not started`. A job's
    directory is found by its number (`003_...` is the fourth job), whatever it holds."""
    dirs = sorted((p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()), key=job_number)
    found = [(job_number(run_dir)[0], read_job(run_dir)) for run_dir in dirs]
    by_number = {number: job for number, job in found if number != math.inf}
    unnumbered = [job for number, job in found if number == math.inf]
    planned = planned_jobs(sweep_dir)
    if planned is None:
        return [job for _, job in found]
    if isinstance(planned, int):
        planned = [[f"(trial {number})"] for number in range(planned)]
    jobs = []
    for number, overrides in enumerate(planned):
        job = by_number.pop(number, None) or Job(
            None, RunSummary(status="not started", overrides=overrides)
        )
        if not job.summary.overrides:  # unreadable: the plan still says what it was
            job.summary.overrides = overrides
        jobs.append(job)
    # Directories the plan does not number are listed all the same.
    return jobs + list(by_number.values()) + unnumbered


def reference_job(job: Job, jobs: list[Job]) -> Job | None:
    """The built-in run a custom job imitates: the same config and seed, with the activation's
    reference as its target (and the same params). None for a built-in itself."""
    config = job.summary.config
    if config is None or job.run_dir is None:
        return None
    activation = config["activation"]
    if activation["reference"] in (None, activation["target"]):
        return None
    rest = {key: value for key, value in config.items() if key != "activation"}
    for other in jobs:
        other_config = other.summary.config
        if other is job or other_config is None or other.run_dir is None:
            continue
        other_activation = other_config["activation"]
        if (
            other_activation["target"] == activation["reference"]
            and other_activation["params"] == activation["params"]
            and {key: value for key, value in other_config.items() if key != "activation"} == rest
        ):
            return other
    return None


def natural_key(label: str) -> list[tuple[int, float, str]]:
    """Sort `lr=1e-06` before `lr=1e-05` and `seed=2` before `seed=10`: numbers as numbers."""
    key = []
    for part in re.split(r"([=, ])", label):
        try:
            key.append((0, float(part), ""))
        except ValueError:
            key.append((1, 0.0, part))
    return key


def loss_by_step(jobs: list[Job]) -> dict[int, list[float]]:
    by_step: dict[int, list[float]] = defaultdict(list)
    for job in jobs:
        if job.run_dir is None or job.summary.status == UNREADABLE:
            continue
        for step, value in read_scalars(job.run_dir, [LOSS])[LOSS].items():
            if math.isfinite(value) and value > 0:
                by_step[step].append(value)
    return dict(by_step)


def group_jobs(jobs: list[Job]) -> list[Group]:
    """Groups of jobs that differ only in seed, each custom group with its reference group and
    its losses read; ordered by final loss, each custom group right after its reference. Each
    custom job's loss difference to its reference job is written into its run on the way
    (events.write_loss_difference), and its magnitude averaged into the group's `gap`."""
    by_label: dict[str, Group] = {}
    for job in jobs:
        by_label.setdefault(job.group, Group(job.group)).jobs.append(job)
    group_of = {id(job): group for group in by_label.values() for job in group.jobs}
    for job in jobs:
        reference = reference_job(job, jobs)
        if reference is None:
            continue
        group = group_of[id(job)]
        group.reference = group_of[id(reference)]
        group.pairs.append((job, reference))
        difference = write_loss_difference(job.run_dir, reference.run_dir, job.group)
        group.job_gaps.append({step: abs(value) for step, value in difference.items()})
    for group in by_label.values():
        group.losses = loss_by_step(group.jobs)
        by_step: dict[int, list[float]] = defaultdict(list)
        for gaps in group.job_gaps:
            for step, gap in gaps.items():
                by_step[step].append(gap)
        group.gap = {step: statistics.mean(gaps) for step, gaps in sorted(by_step.items())}

    def by_value(group: Group) -> tuple:
        final = group.values("final_loss")
        return (statistics.mean(final) if final else math.inf, natural_key(group.label))

    ordered: list[Group] = []
    for group in sorted(by_label.values(), key=by_value):
        if group.reference is None or group.reference.label not in by_label:
            ordered.append(group)
            imitators = [g for g in by_label.values() if g.reference is group]
            ordered += sorted(imitators, key=by_value)
    return ordered


def write_group_runs(sweep_dir: Path, groups: list[Group]) -> None:
    """One TensorBoard run per group, `groups/<label>`: the log10 of its jobs' mean, min and
    max loss per step (tags.loss_band), which Custom Scalars' margin chart draws as a line and
    a band, one per group."""
    for group in groups:
        if not group.losses:
            continue
        steps = sorted(group.losses)
        series = {
            tag: {step: math.log10(reduce(group.losses[step])) for step in steps}
            for tag, reduce in zip(loss_band(group.label), (statistics.mean, min, max))
        }
        name = group.label.replace(" ", ",").replace("/", "_")
        write_derived(sweep_dir / "groups" / name, "group", series)


def own_parts(label: str, other: str) -> str:
    """`activation=relu`: what a group's label says that another's does not."""
    theirs = set(other.split())
    return " ".join(part for part in label.split() if part not in theirs) or label


def pair_name(group: Group) -> str:
    """`activation=myrelu vs activation=relu`: a custom group against its reference, by what
    tells them apart."""
    assert group.reference is not None
    reference = group.reference.label
    return f"{own_parts(group.label, reference)} vs {own_parts(reference, group.label)}"


def parting(step: int | None) -> str:
    """Where a custom group first parts from its reference (Group.parts_at), in words."""
    return "identical" if step is None else f"parts at step {step}"


def pair_png(group: Group) -> bytes:
    """A custom group against its reference, for TensorBoard's Images tab (which shows images
    about 300 pixels wide): each seed's |relative loss gap| on a log axis under a title that
    says where they part, large enough to read there."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.4))
    axes = figure.subplots()
    parted = group.parts_at()
    if parted is None:  # nothing to draw on a log axis: say so instead of a flat line at 0
        axes.text(0.5, 0.5, "identical at every step", ha="center", fontsize=18)
        axes.set_axis_off()
    else:
        for (job, _), gaps in zip(group.pairs, group.job_gaps):
            steps = sorted(gaps)
            gap = [gaps[s] for s in steps]
            axes.plot(steps, gap, linewidth=1.2, label=f"seed {job.summary.seed}")
        axes.set_yscale("log")
        axes.axvline(parted, color="gray", linestyle="--", linewidth=1)
        axes.legend(fontsize=11)
        axes.set_xlabel("step", fontsize=13)
        axes.set_ylabel("|relative loss gap|", fontsize=13)
        axes.tick_params(labelsize=12)
        axes.grid(True, which="major", alpha=0.3)
    figure.suptitle(textwrap.fill(f"{pair_name(group)}: {parting(parted)}", 36), fontsize=18)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def report_layout(groups: list[Group]) -> Layout:
    """The sweep's Custom Scalars tab: its `loss` category (first, as the report's run sorts
    first) adds the band per group and a chart per custom/reference pair, its seeds the lines."""
    bands = [loss_band(group.label) for group in groups if group.losses]
    pairs = {
        f"log10 |relative loss gap|: {pair_name(group)} ({IDENTICAL_LOG10:g}: identical)": [
            re.escape(loss_gap(group.label))
        ]
        for group in groups
        if group.reference is not None
    }
    loss = {**LAYOUT["loss"], "log10 loss per group: mean over seeds, min-max band": bands}
    return {**LAYOUT, "loss": loss | pairs}


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
        for key in ("final_loss", "min_loss", "val_accuracy"):
            for stat, value in statistics_of(group.values(key)).items():
                row[f"{key}_{stat}"] = value
        row["reference_group"] = group.reference.label if group.reference else ""
        row["final_loss_vs_reference"] = relative_gap(group)
        # Empty where the group has no reference, or is identical to it at every step.
        row["parts_at_step"] = group.parts_at() if group.reference else None
        comparison = paired(group)
        row["paired_metric"] = comparison.metric if comparison else ""
        row["paired_seeds"] = len(comparison.differences) if comparison else 0
        row["paired_mean"] = comparison.mean if comparison else None
        row["paired_half_width_95"] = comparison.half_width if comparison else None
        row["paired_verdict"] = comparison.verdict if comparison else ""
        row["steps_per_s"] = statistics.mean(steps_per_s) if steps_per_s else None
        for status in (*STATUSES, UNREADABLE):
            row[status.replace(" ", "_")] = statuses.get(status, 0)
        warned = [job.summary.warnings for job in group.jobs if job.summary.warnings]
        row["jobs_with_warnings"] = len(warned)
        row["warning"] = warned[0][0] if warned else ""
        row["error"] = errors[0] if errors else ""
        rows.append(row)
    return rows


# Student's t, 97.5% quantile, by degrees of freedom (two-sided 95% interval); the normal's
# 1.96 beyond 30.
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179]
T_975 += [2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064]
T_975 += [2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


@dataclass
class Paired:
    """A custom group against its reference group, seed by seed: what is compared, each
    seed's difference (custom - reference), their mean and a 95% t interval's half-width."""

    metric: str
    differences: list[float]
    mean: float
    half_width: float | None

    @property
    def verdict(self) -> str:
        n = len(self.differences)
        accuracy = self.metric == "val_accuracy"
        scale, unit = (100, "% accuracy") if accuracy else (100, "% final loss")
        if self.half_width is None:
            return f"{n} seed: {self.mean * scale:+.2g}{unit}, no interval"
        if abs(self.mean) <= self.half_width:
            return f"no difference detected over {n} seeds"
        # Lower accuracy, or higher loss, is worse.
        worse = (self.mean < 0) == accuracy
        return (
            f"custom {'worse' if worse else 'better'} by {abs(self.mean) * scale:.2g}% "
            f"± {self.half_width * scale:.2g}%{unit.removeprefix('%')} over {n} seeds"
        )


def paired(group: Group) -> Paired | None:
    """The group's completed jobs against their reference jobs of the same seed: validation
    accuracy where the runs have it (absolute difference), else the final loss (relative)."""
    pairs = [
        (job.summary, reference.summary)
        for job, reference in group.pairs
        if job.summary.status == reference.summary.status == "completed"
    ]
    if not pairs:
        return None
    accuracy = all(s.val_accuracy is not None and math.isfinite(s.val_accuracy) for s, _ in pairs)
    if accuracy:
        differences = [s.val_accuracy - r.val_accuracy for s, r in pairs]
    else:
        differences = [(s.final_loss - r.final_loss) / abs(r.final_loss) for s, r in pairs]
    mean = statistics.mean(differences)
    n = len(differences)
    half_width = None
    if n > 1:
        t = T_975[n - 2] if n - 1 <= len(T_975) else 1.96
        half_width = t * statistics.stdev(differences) / math.sqrt(n)
    return Paired("val_accuracy" if accuracy else "final_loss", differences, mean, half_width)


def relative_gap(group: Group) -> float | None:
    """(mean final loss - the reference group's) / the reference group's."""
    if group.reference is None:
        return None
    final, reference = group.values("final_loss"), group.reference.values("final_loss")
    if not final or not reference or statistics.mean(reference) == 0:
        return None
    return (statistics.mean(final) - statistics.mean(reference)) / statistics.mean(reference)


def number(value: object, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def accuracy_text(row: dict[str, object]) -> str:
    if row["val_accuracy_mean"] is None:
        return ""
    return f"{row['val_accuracy_mean']:.2%} ± {row['val_accuracy_std']:.2%}"


def gap_text(row: dict[str, object]) -> str:
    """`+1.2e-04 vs activation=relu`: the relative gap, naming what the reference changes."""
    gap = row["final_loss_vs_reference"]
    if gap is None:
        return ""
    parted = row["parts_at_step"]
    return (
        f"{gap:+.2e} vs {own_parts(str(row['reference_group']), str(row['group']))} "
        f"({parting(parted)})"
    )


def markdown(rows: list[dict[str, object]]) -> str:
    """The table, without the optional columns no group fills (validation accuracy, for
    regression; warnings and errors, when there are none)."""
    table_rows = []
    for row in rows:
        statuses = [
            f"{status}: {row[status.replace(' ', '_')]}"
            for status in (*STATUSES, UNREADABLE)
            if row[status.replace(" ", "_")]
        ]
        table_rows.append(
            {
                "group": str(row["group"]),
                "jobs": str(row["jobs"]),
                "final loss": f"{number(row['final_loss_mean'])} ± "
                f"{number(row['final_loss_std'], 2)}",
                "val accuracy": accuracy_text(row),
                "vs reference": gap_text(row),
                "paired vs reference (95%, t)": str(row["paired_verdict"]),
                "min loss": f"{number(row['min_loss_mean'])} ± {number(row['min_loss_std'], 2)}",
                "steps/s": number(row["steps_per_s"], 4),
                "status": ", ".join(statuses),
                "warnings": f"{row['jobs_with_warnings']}: {row['warning']}"
                if row["warning"]
                else "",
                "error": str(row["error"]),
            }
        )
    optional = {"val accuracy", "paired vs reference (95%, t)", "warnings", "error"}
    columns = [
        column
        for column in (table_rows[0] if table_rows else {"group": ""})
        if column not in optional or any(row[column] for row in table_rows)
    ]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in table_rows:
        cells = [row[column].replace("|", "\\|") for column in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(groups: list[Group], path: Path) -> None:
    """Top: each group's mean loss over steps with its min-max band across seeds, log scale.
    Bottom: how far each custom group's runs are from their reference runs, log scale."""
    # Imported here, and without pyplot (no GUI backend to pick): only sweeps draw.
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    drawn = [group for group in groups if group.losses]
    # The gap panel needs a gap to draw on its log axis (runs identical so far have none).
    customs = [group for group in drawn if any(gap > 0 for gap in group.gap.values())]
    figure = Figure(figsize=(10, 8 if customs else 5.5))
    loss_axes, *difference_axes = figure.subplots(2 if customs else 1, 1, squeeze=False)[:, 0]
    colors = colormaps["tab10" if len(drawn) <= 10 else "tab20"]
    for index, group in enumerate(drawn):
        color = colors(index % colors.N)
        steps = sorted(group.losses)
        mean = [statistics.mean(group.losses[s]) for s in steps]
        label = f"{group.label} (n={len(group.jobs)})"
        loss_axes.plot(steps, mean, color=color, label=label, linewidth=1.4)
        lows = [min(group.losses[s]) for s in steps]
        highs = [max(group.losses[s]) for s in steps]
        loss_axes.fill_between(steps, lows, highs, color=color, alpha=0.08, linewidth=0)
        if group.gap and difference_axes:
            # Where the gap is exactly 0 the log axis draws nothing: the line starts where the
            # runs part.
            steps = sorted(group.gap)
            gaps = [group.gap[s] for s in steps]
            label = f"{pair_name(group)}: {parting(group.parts_at())}"
            difference_axes[0].plot(steps, gaps, color=color, linewidth=1.2, label=label)
    loss_axes.set_yscale("log")
    loss_axes.set_xlabel("step")
    loss_axes.set_ylabel(f"{LOSS}: mean, min–max band over seeds")
    loss_axes.grid(True, which="major", alpha=0.3)
    if drawn:
        loss_axes.legend(fontsize="small", ncol=2 if len(drawn) > 6 else 1)
    if difference_axes:
        axes = difference_axes[0]
        axes.set_yscale("log")
        axes.set_xlim(loss_axes.get_xlim())
        axes.set_xlabel("step")
        axes.set_ylabel("|loss - reference loss| / reference loss\n(mean over seeds)")
        axes.grid(True, which="major", alpha=0.3)
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def write_report(sweep_dir: Path) -> list[Job]:
    """summary.csv, summary.md and loss_curves.png for sweep_dir, and TensorBoard's view of
    them; returns its jobs."""
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
    problem = plan_problem(sweep_dir)
    header = (
        f"# Sweep {sweep_dir.name}\n\n{len(jobs)} jobs: "
        + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
        + f". Losses aggregate the {completed} completed runs"
        + (f" ({len(jobs) - completed} left out)." if completed < len(jobs) else ".")
        + (f" {problem[0].upper()}{problem[1:]}: the jobs are those found." if problem else "")
    )
    summary_md = f"{header}\n\n{markdown(rows)}"
    (sweep_dir / "summary.md").write_text(summary_md)
    write_group_runs(sweep_dir, groups)
    plot(groups, sweep_dir / "loss_curves.png")
    # The same figure and table in TensorBoard, in the sweep directory's own run: it sorts
    # before its jobs, so its layout leads the Custom Scalars tab.
    write_derived(
        sweep_dir,
        "report",
        layout=report_layout(groups),
        images={
            "report/loss_curves": (sweep_dir / "loss_curves.png").read_bytes(),
            **{
                f"report/pair: {pair_name(group)}": pair_png(group)
                for group in groups
                if group.reference is not None
            },
        },
        texts={"report/summary": summary_md},
    )
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
