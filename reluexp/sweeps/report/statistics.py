"""A sweep's numbers: its jobs grouped by everything but the seed, each custom group beside its
reference group with its per-step loss gap, the table's rows, and the paired comparison over
seeds (a 95% Student's t interval)."""

import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from reluexp.record.events import read_scalars
from reluexp.record.summary import RunSummary
from reluexp.record.tags import LOSS
from reluexp.sweeps.report.discovery import STATUSES, UNREADABLE, Job
from reluexp.sweeps.report.verdicts import Verdict


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
    differences: list[dict[int, float]] = field(default_factory=list)
    job_gaps: list[dict[int, float]] = field(default_factory=list)

    def parts_at(self) -> int | None:
        """The first step where any job's loss differs from its reference job's; None while
        they are identical."""
        return next((step for step in sorted(self.gap) if self.gap[step] > 0), None)

    def identical_until(self) -> int | None:
        """The last logged step before parts_at, where every job still equals its reference
        job: with log_every > 1 they part somewhere after it, not at parts_at itself."""
        parted = self.parts_at()
        return max((step for step in self.gap if step < parted), default=None) if parted else None

    @property
    def completed(self) -> list[Job]:
        return [job for job in self.jobs if job.summary.status == "completed"]

    def values(self, key: str) -> list[float]:
        """A summary field of the completed jobs, where it is a finite number: runs stopped
        early would bias the mean. The min loss is what every run reached, diverged too."""
        jobs = self.reached if key == "min_loss" else self.completed
        return [v for job in jobs if finite(v := getattr(job.summary, key))]

    @property
    def reached(self) -> list[Job]:
        """Jobs that ended on their own: completed or diverged."""
        return [job for job in self.jobs if job.summary.ended]

    @property
    def busy(self) -> list[Job]:
        """Jobs that ended on a machine busier than its cores: their steps/s say little."""
        return [job for job in self.jobs if busy_machine(job.summary)]


def busy_machine(summary: RunSummary) -> bool:
    """The run ended with more runnable processes than cores (its own included)."""
    load, cores = summary.load_average, summary.cores
    return finite(load) and isinstance(cores, int) and cores > 0 and load > cores


def finite(value: object) -> bool:
    """A number, not NaN or inf (a summary field may also be null, or forged)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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


def unpaired_references(jobs: list[Job]) -> list[str]:
    """The references (activation.reference) that custom jobs name and that no job of the
    sweep trained: their groups have no `vs reference`."""
    unpaired = set()
    for job in jobs:
        config = job.summary.config
        if config is None or job.run_dir is None:
            continue
        activation = config["activation"]
        # A reference with params of its own cannot be a job of the same sweep's grid.
        imitates = activation["reference"] not in (None, activation["target"]) and not (
            activation.get("reference_params")
        )
        if imitates and reference_job(job, jobs) is None:
            unpaired.add(activation["reference"])
    return sorted(unpaired)


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


def loss_difference(job: Job, reference: Job) -> dict[int, float]:
    """The job's per-step loss relative to its reference job's: (loss - ref) / |ref|."""
    loss = read_scalars(job.run_dir, [LOSS])[LOSS]
    reference_loss = read_scalars(reference.run_dir, [LOSS])[LOSS]
    return {
        step: (loss[step] - value) / abs(value)
        for step, value in reference_loss.items()
        if step in loss and value != 0 and math.isfinite(value) and math.isfinite(loss[step])
    }


def group_jobs(jobs: list[Job]) -> list[Group]:
    """Groups of jobs that differ only in seed, each custom group with its reference group and
    its losses read; ordered by final loss, each custom group right after its reference. Each
    custom job's loss difference to its reference job is kept with its group
    (Group.differences), and its magnitude averaged into the group's `gap`."""
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
        difference = loss_difference(job, reference)
        group.differences.append(difference)
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


def statistics_of(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.mean(values), "std": std, "min": min(values), "max": max(values)}


def summary_rows(
    groups: list[Group], verdicts: dict[str, Verdict] | None = None
) -> list[dict[str, object]]:
    """One row of numbers per group (the CSV), with the lab's verdict on a custom group's
    Function (`verdicts`, by group label); the Markdown table formats them."""
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
        row["final_loss_jobs"] = len(group.values("final_loss"))
        row["min_loss_jobs"] = len(group.values("min_loss"))
        row["val_accuracy_jobs"] = len(group.values("val_accuracy"))
        row["final_loss_vs_reference"] = relative_gap(group)
        row["final_loss_vs_reference_seeds"] = gap_seeds(group)
        # Empty where the group has no reference, or is identical to it at every step.
        row["parts_at_step"] = group.parts_at() if group.reference else None
        row["identical_until_step"] = group.identical_until() if group.reference else None
        comparison = paired(group)
        row["paired_metric"] = comparison.metric if comparison else ""
        row["paired_seeds"] = len(comparison.differences) if comparison else 0
        row["paired_mean"] = comparison.mean if comparison else None
        row["paired_half_width_95"] = comparison.half_width if comparison else None
        row["paired_verdict"] = comparison.verdict if comparison else ""
        verdict = (verdicts or {}).get(group.label)
        row["lab_verdict"] = verdict.text if verdict else ""
        row["lab_report"] = (verdict.report or "") if verdict else ""
        row["steps_per_s"] = statistics.mean(steps_per_s) if steps_per_s else None
        row["jobs_on_a_busy_machine"] = len(group.busy)
        for status in (*STATUSES, UNREADABLE):
            row[status.replace(" ", "_")] = statuses.get(status, 0)
        warned = [job.summary.warnings for job in group.jobs if job.summary.warnings]
        row["jobs_with_warnings"] = len(warned)
        row["warning"] = warned[0][0] if warned else ""
        row["error"] = errors[0] if errors else ""
        rows.append(row)
    return rows


# Student's t, 97.5% quantile, by degrees of freedom 1 to 30 (two-sided 95% interval).
T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179]
T_975 += [2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064]
T_975 += [2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def t_975(dof: int) -> float:
    """Student's t 97.5% quantile: the table to 30 degrees of freedom, past it the
    Cornish-Fisher expansion around the normal's 1.95996 (within 2e-4 from 30 on; the normal's
    1.96 alone is 4% short at 31)."""
    if dof <= len(T_975):
        return T_975[dof - 1]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * dof)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * dof**3)
    )


@dataclass
class Paired:
    """A custom group against its reference group, seed by seed: what is compared, each
    seed's difference (custom - reference), their mean and a 95% t interval's half-width."""

    metric: str
    differences: list[float]
    mean: float
    half_width: float | None
    # The seeds of the group's jobs left out, by why: no reference job of that seed, a pair
    # that did not both complete, or a value that is not a finite number on one side.
    left_out: dict[str, list[object]] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        n = len(self.differences)
        accuracy = self.metric == "val_accuracy"
        scale, unit = (100, "% accuracy") if accuracy else (100, "% final loss")
        left_out = ""
        if self.left_out:
            reasons = "; ".join(
                f"seed {', '.join(str(seed) for seed in seeds)}: {why}"
                for why, seeds in self.left_out.items()
            )
            left_out = f" (left out: {reasons})"
        if self.half_width is None:
            return f"{n} seed: {self.mean * scale:+.2g}{unit}, no interval{left_out}"
        if abs(self.mean) <= self.half_width:
            return f"no difference detected over {n} seeds{left_out}"
        # Lower accuracy, or higher loss, is worse.
        worse = (self.mean < 0) == accuracy
        return (
            f"custom {'worse' if worse else 'better'} by {abs(self.mean) * scale:.2g}% "
            f"± {self.half_width * scale:.2g}%{unit.removeprefix('%')} over {n} seeds{left_out}"
        )


def pairs_with(group: Group, key: str) -> list[tuple[Job, Job]]:
    """The group's jobs with their reference jobs of the same seed, where both completed and
    both have `key` as a finite number."""
    return [
        (job, reference)
        for job, reference in group.pairs
        if job.summary.status == reference.summary.status == "completed"
        and finite(getattr(job.summary, key))
        and finite(getattr(reference.summary, key))
    ]


def usable_pairs(group: Group) -> tuple[str, list[tuple[Job, Job]]]:
    """What the group is compared by, and the pairs compared: validation accuracy where every
    pair that completed has it, else the final loss."""
    completed = [
        (job, reference)
        for job, reference in group.pairs
        if job.summary.status == reference.summary.status == "completed"
    ]
    by_accuracy = pairs_with(group, "val_accuracy")
    if completed and len(by_accuracy) == len(completed):
        return "val_accuracy", by_accuracy
    by_loss = pairs_with(group, "final_loss")
    return "final_loss", [pair for pair in by_loss if pair[1].summary.final_loss != 0]


def paired(group: Group) -> Paired | None:
    """The group's jobs against their reference jobs of the same seed (usable_pairs): the
    absolute difference in validation accuracy, or the relative one in final loss."""
    metric, pairs = usable_pairs(group)
    if not pairs:
        return None
    if metric == "val_accuracy":
        differences = [s.summary.val_accuracy - r.summary.val_accuracy for s, r in pairs]
    else:
        differences = [
            (s.summary.final_loss - r.summary.final_loss) / abs(r.summary.final_loss)
            for s, r in pairs
        ]
    compared = {id(job) for job, _ in pairs}
    reference_of = {id(job): reference for job, reference in group.pairs}
    left_out: dict[str, list[object]] = {}
    for job in group.jobs:
        if id(job) in compared:
            continue
        reference = reference_of.get(id(job))
        if reference is None:
            why = "no reference run"
        elif not job.summary.status == reference.summary.status == "completed":
            why = "not both completed"
        else:
            why = f"no finite {metric.replace('_', ' ')}"
        left_out.setdefault(why, []).append(job.summary.seed)
    mean = statistics.mean(differences)
    n = len(differences)
    half_width = None
    if n > 1:
        half_width = t_975(n - 1) * statistics.stdev(differences) / math.sqrt(n)
    return Paired(metric, differences, mean, half_width, left_out)


def gap_seeds(group: Group) -> int | None:
    """How many seeds relative_gap pairs, where that leaves out completed runs of the group or
    of its reference (so the gap is not that of the means beside it); else None."""
    if group.reference is None:
        return None
    paired = len(pairs_with(group, "final_loss"))
    everyone = (len(group.values("final_loss")), len(group.reference.values("final_loss")))
    return paired if any(n != paired for n in everyone) else None


def relative_gap(group: Group) -> float | None:
    """(mean final loss - the reference's) / the reference's, over the seeds both have
    (pairs_with a final loss): a seed only one side ran would bias it."""
    pairs = pairs_with(group, "final_loss")
    if not pairs:
        return None
    final = statistics.mean(job.summary.final_loss for job, _ in pairs)
    reference = statistics.mean(reference.summary.final_loss for _, reference in pairs)
    return (final - reference) / reference if reference != 0 else None
