"""What a sweep's report writes: summary.csv and summary.md, loss_curves.png, each custom job's
gap to its reference job, and the group view (groups/): a TensorBoard run per group and the
report's own run (the figures as images, the table as text, the Custom Scalars layout)."""

import csv
import io
import math
import re
import statistics
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import struct_pb2

from reluexp.record.events import Layout, Session, loss_gap_series, read_declared, write_derived
from reluexp.record.figures import colormap, new_figure, png
from reluexp.record.hparams import values_of
from reluexp.record.tags import (
    HPARAM_METRICS,
    IDENTICAL_LOG10,
    LOSS,
    LOSS_LOG10,
    dashboard_command,
    layout,
    loss_band,
    loss_gap,
    quoted,
)
from reluexp.record.whole import write_whole
from reluexp.sweeps.finish import paired_command
from reluexp.sweeps.report.discovery import STATUSES, UNREADABLE, Job, find_jobs, plan_problem
from reluexp.sweeps.report.statistics import (
    Group,
    busy_machine,
    finite,
    group_jobs,
    summary_rows,
    unpaired_references,
)
from reluexp.sweeps.report.verdicts import LAB_DIR, FunctionCheck, lab_verdicts

# Groups per card in TensorBoard's Text tab (summary_texts): its box shows about five rows.
GROUPS_PER_TEXT = 4
# The sweep directory's group view: the report's run and a run per group. TensorBoard ticks
# every run of a logdir by itself only up to MAX_TICKED_RUNS (40); a sweep of more jobs opens
# on blank charts, its group view does not.
GROUP_VIEW = "groups"
# summary.md's columns that a table has only where a group fills them.
OPTIONAL_COLUMNS = (
    "val accuracy",
    "paired vs reference (95%, t)",
    "lab check",
    "warnings",
    "error",
)
MAX_TICKED_RUNS = 40


def write_group_runs(view: Path, groups: list[Group], rows: list[dict[str, object]]) -> None:
    """The group view: one TensorBoard run per group, `<view>/<label>`, as a job's run over
    its seeds: its jobs' mean loss (loss/train and its log10), the log10 of their mean, min
    and max (tags.loss_band, Custom Scalars' line and band per group), a custom group's mean
    |relative gap| to its reference under the pair's gap tag, and an HParams session of the
    group's own (GROUP_VIEW)."""
    for group, row in zip(groups, rows):
        if not group.losses:
            continue
        steps = sorted(group.losses)
        means = {step: statistics.mean(group.losses[step]) for step in steps}
        series = {LOSS: means, LOSS_LOG10: {step: math.log10(v) for step, v in means.items()}}
        for tag, reduce in zip(loss_band(group.label), (statistics.mean, min, max)):
            series[tag] = {step: math.log10(reduce(group.losses[step])) for step in steps}
        if group.reference is not None and group.gap:
            series[loss_gap(group.label)] = loss_gap_series(group.label, group.gap)[
                loss_gap(group.label)
            ]
        name = group.label.replace(" ", ",").replace("/", "_")
        session = group_session(group, row, steps[-1], view.parent.name)
        write_derived(view / name, "group", series, session=session)


def group_session(group: Group, row: dict[str, object], step: int, sweep: str) -> Session | None:
    """A group's HParams session: its first job's hyperparameters, its seeds as `mean of 0, 1,
    2`, and the table's numbers as the metrics; None where no job declared any. Its trial is
    named as a job's is (hparams.trial_name): the values that tell it from the sweep's other
    groups first, `myrelu (mean, 2026-12-06_09-25-38_910)`."""
    declared = next(
        (found for job in group.jobs if job.run_dir and (found := read_declared(job.run_dir))),
        None,
    )
    if declared is None:
        return None
    experiment, start = declared
    hparams = dict(start.session_start_info.hparams)
    seeds = sorted(job.summary.seed for job in group.jobs if job.summary.seed is not None)
    hparams["seed"] = struct_pb2.Value(string_value=f"mean of {', '.join(map(str, seeds))}")
    metrics = {
        tag: row[key]
        for tag, key in zip(
            HPARAM_METRICS, ("final_loss_mean", "min_loss_mean", "final_loss_vs_reference")
        )
        if finite(row[key])
    }
    trial = f"{values_of(group.label.split(' '))} (mean, {sweep})"
    return Session(experiment, hparams, step, metrics, trial=trial)


def write_job_gaps(groups: list[Group]) -> None:
    """In each custom job's run, its loss gap to its reference job (events.loss_gap_series), in
    an event file of its own, rewritten whole."""
    for group in groups:
        for (job, _), difference in zip(group.pairs, group.differences):
            write_derived(job.run_dir, "difference", loss_gap_series(job.group, difference))


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


def parting_text(step: int | None, identical_until: int | None) -> str:
    """Where a custom group first parts from its reference (Group.parts_at), in words: at a
    step, or between two logged steps (Group.identical_until) where steps between were not
    logged."""
    if step is None:
        return "identical"
    if identical_until is not None and identical_until < step - 1:
        return f"parts between steps {identical_until} and {step}"
    return f"parts at step {step}"


def pair_png(group: Group) -> bytes:
    """A custom group against its reference, for TensorBoard's Images tab (which shows images
    about 300 pixels wide): each seed's |relative loss gap| on a log axis under a title that
    says where they part, large enough to read there."""
    figure = new_figure(figsize=(6.4, 4.4))
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
    title = f"{pair_name(group)}: {parting_text(parted, group.identical_until())}"
    figure.suptitle(textwrap.fill(title, 36), fontsize=18)
    return png(figure, dpi=100)


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
    loss = {**layout([], [])["loss"], "log10 loss per group: mean over seeds, min-max band": bands}
    # TensorBoard merges every run's layout by category: the runs bring their own charts.
    return {"loss": loss | pairs}


def number(value: object, digits: int = 4) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def spread(row: dict[str, object], key: str) -> str:
    """`0.1982 ± 0.021`: a mean and standard deviation over seeds; `–` where no run has one."""
    if row[f"{key}_mean"] is None:
        return "–"
    return f"{number(row[f'{key}_mean'])} ± {number(row[f'{key}_std'], 2)}"


def over_text(row: dict[str, object], key: str) -> str:
    """` (over 2 of 3 completed jobs)` where a mean leaves completed jobs out (no finite value)."""
    if row[f"{key}_jobs"] == row["completed"]:
        return ""
    return f" (over {row[f'{key}_jobs']} of {row['completed']} completed jobs)"


def min_loss_over(row: dict[str, object]) -> str:
    """` (over 3 jobs, diverged included)` where the min loss counts runs that diverged: what
    they reached before."""
    if row["min_loss_jobs"] == row["completed"]:
        return ""
    jobs = row["min_loss_jobs"]
    return f" (over {jobs} job{'s' if jobs != 1 else ''}, diverged included)"


def busy_text(row: dict[str, object]) -> str:
    """` (2 of 5 on a busy machine)`: jobs whose steps/s a busy machine slowed."""
    if not row["jobs_on_a_busy_machine"]:
        return ""
    return f" ({row['jobs_on_a_busy_machine']} of {row['jobs']} on a busy machine)"


def accuracy_text(row: dict[str, object]) -> str:
    if row["val_accuracy_mean"] is None:
        return ""
    text = f"{row['val_accuracy_mean']:.2%} ± {row['val_accuracy_std']:.2%}"
    return text + over_text(row, "val_accuracy")


def gap_text(row: dict[str, object]) -> str:
    """`+1.2e-04 vs activation=relu`: the relative gap, naming what the reference changes, and
    the seeds it pairs where they are fewer than the runs the means beside it are over."""
    gap = row["final_loss_vs_reference"]
    if gap is None:
        return ""
    parted = row["parts_at_step"]
    seeds = row["final_loss_vs_reference_seeds"]
    over = "" if seeds is None else f" over the {seeds} seed{'s' * (seeds != 1)} both completed"
    return (
        f"{gap:+.2e} vs {own_parts(str(row['reference_group']), str(row['group']))}{over} "
        f"({parting_text(parted, row['identical_until_step'])})"
    )


def lab_text(row: dict[str, object]) -> str:
    """The lab's verdict on the group's Function, with its report where it is not correct."""
    verdict, report = str(row["lab_verdict"]), str(row["lab_report"])
    return f"{verdict}: {report}" if report and verdict != "gradients correct" else verdict


def markdown_tables(rows: list[dict[str, object]], per_table: int | None = None) -> list[str]:
    """The table, without the optional columns no group fills (validation accuracy, for
    regression; warnings and errors, when there are none); with per_table, cut into tables of
    that many rows, each with the same columns."""
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
                "final loss": spread(row, "final_loss") + over_text(row, "final_loss"),
                "val accuracy": accuracy_text(row),
                "vs reference": gap_text(row),
                "paired vs reference (95%, t)": str(row["paired_verdict"]),
                "lab check": lab_text(row),
                "min loss": spread(row, "min_loss") + min_loss_over(row),
                "steps/s": number(row["steps_per_s"], 4) + busy_text(row),
                "status": ", ".join(statuses),
                "warnings": f"{row['jobs_with_warnings']}: {row['warning']}"
                if row["warning"]
                else "",
                "error": str(row["error"]),
            }
        )
    columns = [
        column
        for column in (table_rows[0] if table_rows else {"group": ""})
        if column not in OPTIONAL_COLUMNS or any(row[column] for row in table_rows)
    ]
    head = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    body = []
    for row in table_rows:
        # A cell is one line of the table: a message's own line breaks become spaces.
        cells = [" ".join(row[column].replace("|", "\\|").split("\n")) for column in columns]
        body.append("| " + " | ".join(cells) + " |")
    size = per_table or max(len(body), 1)
    return ["\n".join(head + body[i : i + size]) + "\n" for i in range(0, max(len(body), 1), size)]


def markdown_table(rows: list[dict[str, object]]) -> str:
    """The whole table, as summary.md holds it."""
    return markdown_tables(rows)[0]


def summary_texts(header: str, rows: list[dict[str, object]]) -> dict[str, str]:
    """summary.md for TensorBoard's Text tab, which shows a text in a box of about five table
    rows with its scroll bar hidden: the header and the first groups as `report/summary`, the
    rest in cards of as many, named by the groups they hold, with the same columns."""
    tables = markdown_tables(rows, GROUPS_PER_TEXT)
    texts = {"report/summary": f"{header}\n\n{tables[0]}"}
    width = len(str(len(rows)))
    for number, table in enumerate(tables[1:], 1):
        first = number * GROUPS_PER_TEXT + 1
        last = min(first + GROUPS_PER_TEXT - 1, len(rows))
        texts[f"report/summary, groups {first:0{width}d}-{last:0{width}d}"] = table
    return texts


def plot_loss_curves(groups: list[Group]) -> bytes:
    """Top: each group's mean loss over steps with its min-max band across seeds, log scale.
    Bottom: how far each custom group's runs are from their reference runs, log scale. A PNG."""
    drawn = [group for group in groups if group.losses]
    # The gap panel needs a gap to draw on its log axis (runs identical so far have none).
    customs = [group for group in drawn if any(gap > 0 for gap in group.gap.values())]
    figure = new_figure(figsize=(10, 8 if customs else 5.5))
    loss_axes, *difference_axes = figure.subplots(2 if customs else 1, 1, squeeze=False)[:, 0]
    colors = colormap("tab10" if len(drawn) <= 10 else "tab20")
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
            parting = parting_text(group.parts_at(), group.identical_until())
            label = f"{pair_name(group)}: {parting}"
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
    return png(figure, dpi=110)


@dataclass
class Written:
    """A sweep's report: its jobs, and the files it wrote into the sweep directory, with what
    it could not draw and why."""

    jobs: list[Job]
    files: list[str]
    # TensorBoard runs below the sweep directory (jobs with events, the groups, the report's)
    # and in its group view alone.
    runs: int = 0
    view_runs: int = 0
    undrawn: str = ""
    # The sweep's command with the references its custom jobs lack trained beside them.
    paired: str | None = None
    # The Functions the lab does not find correct: `MyGELU WRONG (lab/.../check.md)`.
    not_correct: list[str] = field(default_factory=list)

    def dashboard(self, sweep_dir: str) -> str:
        """The tensorboard command whose page fills by itself, quoted: the sweep's every run
        where TensorBoard ticks them all (MAX_TICKED_RUNS), else its group view, the jobs'."""
        rows = max((job.summary.recorded_steps or 0 for job in self.jobs), default=0)
        if self.runs <= MAX_TICKED_RUNS:
            return quoted(dashboard_command(sweep_dir, rows))
        beyond = f"more than the {MAX_TICKED_RUNS} TensorBoard ticks by itself"
        view = "one run per group"
        if self.view_runs > MAX_TICKED_RUNS:
            view += f", {self.view_runs} runs, {beyond}: tick them in its run list"
        return (
            f"{quoted(dashboard_command(f'{sweep_dir}/{GROUP_VIEW}', rows))} ({view}; every "
            f"job: {quoted(dashboard_command(sweep_dir, rows))}, {self.runs} runs, {beyond})"
        )

    @property
    def listing(self) -> str:
        """`summary.md, summary.csv, loss_curves.png`, or why a file is missing."""
        return ", ".join(self.files) + (f"; {self.undrawn}" if self.undrawn else "")


def write_report(sweep_dir: Path, check: FunctionCheck | None = None) -> Written:
    """summary.csv, summary.md and loss_curves.png for sweep_dir, and TensorBoard's view of
    them; each custom group's Function checked by `check` (the lab's) where no report of an
    earlier check is there. Without matplotlib (a broken environment) the table and the
    numbers stand, without the figures."""
    jobs = find_jobs(sweep_dir)
    groups = group_jobs(jobs)
    verdicts = lab_verdicts(sweep_dir, {group.label: group.jobs for group in groups}, check)
    rows = summary_rows(groups, verdicts)
    not_correct = {
        f"{verdict.name} {verdict.text} ({verdict.report})"
        for verdict in verdicts.values()
        if verdict.passed is False and verdict.report
    }
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["group"])
    writer.writeheader()
    writer.writerows(rows)
    write_whole(sweep_dir / "summary.csv", buffer.getvalue())
    statuses = Counter(job.summary.status for job in jobs)
    completed = statuses["completed"]
    aggregated = sum(
        job.summary.status == "completed" and finite(job.summary.final_loss) for job in jobs
    )
    left_out = [
        f"{n} {why}"
        for n, why in (
            (len(jobs) - completed, "not completed"),
            (completed - aggregated, "completed without one"),
        )
        if n
    ]
    problem = plan_problem(sweep_dir)
    header = (
        f"# Sweep {sweep_dir.name}\n\n{len(jobs)} jobs: "
        + ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
        + f". Losses aggregate the {aggregated} completed runs with a finite final loss"
        + (f" (left out: {', '.join(left_out)})." if left_out else ".")
        + (f" {problem[0].upper()}{problem[1:]}: the jobs are those found." if problem else "")
    )
    busy = [job.summary for job in jobs if busy_machine(job.summary)]
    if busy:
        peak = max(busy, key=lambda summary: summary.load_average / summary.cores)
        header += (
            f" {len(busy)} of {len(jobs)} jobs ended on a busy machine (load up to "
            f"{peak.load_average:.1f} on {peak.cores} cores): their steps/s do not compare."
        )
    constant = jobs[0].constant if jobs else frozenset()
    if constant:
        header += f" Every job: {' '.join(sorted(constant))}."
    paired = None
    unpaired = unpaired_references(jobs)
    if unpaired:
        trained = [job.summary.config["activation"]["target"] for job in jobs if job.summary.config]
        paired = paired_command(sweep_dir, list(dict.fromkeys([*trained, *unpaired])))
        header += (
            f" No job trained {', '.join(unpaired)}, the reference"
            f"{'s' if len(unpaired) > 1 else ''} its custom jobs name, so none has a vs "
            "reference" + (f"; to train it beside them: {quoted(paired)}." if paired else ".")
        )
    if not_correct:
        header += (
            f" The lab finds {', '.join(sorted(not_correct))}: read its report before these "
            "numbers (training like the built-in does not make a backward right)."
        )
    summary_md = f"{header}\n\n{markdown_table(rows)}"
    write_whole(sweep_dir / "summary.md", summary_md)
    view = sweep_dir / GROUP_VIEW
    write_group_runs(view, groups, rows)
    write_job_gaps(groups)
    view_runs = 1 + sum(1 for group in groups if group.losses)
    job_runs = sum(
        1 for job in jobs if job.run_dir and any(job.run_dir.glob("events.out.tfevents.*"))
    )
    job_runs += len(list((sweep_dir / LAB_DIR).glob("*/events.out.tfevents.*")))  # the checks'
    written = Written(
        jobs,
        ["summary.md", "summary.csv"],
        job_runs + view_runs,
        view_runs,
        paired=paired,
        not_correct=sorted(not_correct),
    )
    try:
        images = {
            "report/loss_curves": plot_loss_curves(groups),
            **{
                f"report/pair: {pair_name(group)}": pair_png(group)
                for group in groups
                if group.reference is not None
            },
        }
    except ImportError as error:
        images, written.undrawn = {}, f"no loss_curves.png: {error}"
    else:
        write_whole(sweep_dir / "loss_curves.png", images["report/loss_curves"])
        written.files.append("loss_curves.png")
    # The same figures and table in TensorBoard, in the group view's own run: it sorts before
    # the groups, so its layout leads the Custom Scalars tab. (Reports before the group view
    # wrote it into the sweep directory's own run.)
    (sweep_dir / "events.out.tfevents.reluexp-report").unlink(missing_ok=True)
    write_derived(
        view,
        "report",
        layout=report_layout(groups),
        images=images,
        texts=summary_texts(header, rows),
    )
    return written
