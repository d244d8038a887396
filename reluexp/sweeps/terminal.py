"""What a sweep tells its terminal: a line per finished job naming what varies across the
sweep, its loss lines told apart by job, and one closing line once it ends."""

import logging
import math
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from omegaconf import DictConfig

from reluexp.record.progress import duration
from reluexp.record.summary import RunSummary
from reluexp.record.tags import quoted
from reluexp.run.rundir import shown_path
from reluexp.sweeps.finish import UNFINISHED, finish_command
from reluexp.sweeps.report.discovery import Job, jobs_in, planned_jobs, searched_keys
from reluexp.sweeps.report.outputs import Written, write_report
from reluexp.sweeps.report.verdicts import FunctionCheck

loss_log = logging.getLogger("reluexp.losses")


@dataclass(frozen=True)
class Plan:
    """What multirun.yaml says of a sweep: how many jobs (None: unreadable) and the keys whose
    value differs between them (a sweeper that chooses as it goes: those it searches; None:
    unreadable)."""

    total: int | None
    varying: frozenset[str] | None

    def shown(self, overrides: list[str]) -> str:
        """A job's overrides as its lines name it: only those that vary across the sweep."""
        if self.varying is None:
            return " ".join(overrides)
        return " ".join(o for o in overrides if o.split("=", 1)[0] in self.varying)


@cache
def sweep_plan(sweep_dir: Path) -> Plan:
    """The sweep's plan, read once per process: every job's lines ask for it, and parsing
    multirun.yaml's overrides takes ~25 ms."""
    planned = planned_jobs(sweep_dir)
    if isinstance(planned, int):  # a sweeper that chooses as it goes: the keys it searches
        return Plan(planned, searched_keys(sweep_dir))
    if planned is None:
        return Plan(None, None)
    values: dict[str, set[str]] = {}
    for job in planned:
        for override in job:
            key, _, value = override.partition("=")
            values.setdefault(key, set()).add(value)
    return Plan(len(planned), frozenset(key for key, seen in values.items() if len(seen) > 1))


def say_sweep_start(hydra_config: DictConfig, sweep_dir: Path) -> None:
    """How many jobs, where: Hydra's basic sweeper composes every job's config before the
    first one starts (~0.05 s a job), which a long sweep would otherwise wait for in silence.
    (A sweeper that chooses as it goes, Optuna, composes each job as it starts.)"""
    planned = jobs_in(hydra_config)
    if isinstance(planned, list):
        print(
            f"reluexp: sweep of {len(planned)} jobs into {shown_path(sweep_dir)}; Hydra "
            "composes each job's config before the first one starts",
            file=sys.stderr,
            flush=True,
        )


def job_label(number: int, plan: Plan) -> str:
    """`[3/12]`: a job's place in its sweep, on its job line and its loss lines."""
    return f"[{number + 1}/{plan.total or '?'}]"


def job_line(number: int, plan: Plan, summary: RunSummary) -> str:
    """A finished sweep job in one line: [3/12] activation=relu seed=1 completed loss=... ;
    one another command is training (a second Finish-it): ... running in another reluexp
    command, which records it."""
    line = f"{job_label(number, plan)} {plan.shown(summary.overrides)} {summary.status}"
    if summary.status == "running":  # at its end here: another command trains it
        return f"{line} in another reluexp command, which records it"
    if summary.error:
        line += f": {summary.error}"
    else:
        final_loss = math.nan if summary.final_loss is None else summary.final_loss
        wall_time = math.nan if summary.wall_time_s is None else summary.wall_time_s
        line += f" loss={final_loss:.4g}"
        if summary.val_accuracy is not None:
            line += f" val_accuracy={summary.val_accuracy:.1%}"
        line += f" in {wall_time:.1f} s"
    if summary.slurm_job_id:
        line += f" (SLURM job {summary.slurm_job_id})"
    return line


def time_left(sweep_dir: Path, number: int, plan: Plan) -> str:
    """After job `number` ends, the sweep's jobs still to run and their time at the pace so far
    (since the sweep wrote multirun.yaml, as many jobs done as the number says: launchers run
    them in order); "" after the last or where the plan is unknown."""
    done = number + 1
    if plan.total is None or done >= plan.total:
        return ""
    try:
        elapsed = time.time() - (sweep_dir / "multirun.yaml").stat().st_mtime
    except OSError:
        return ""
    left = plan.total - done
    to_go = duration(elapsed * left / done)
    return f"; {left} job{'s' if left > 1 else ''} left, about {to_go} to go"


@contextmanager
def loss_lines_labelled(number: int, plan: Plan) -> Iterator[None]:
    """A sweep job's loss lines start with its label (`[3/12] 99 427.8...`), for this job only:
    jobs running side by side write to one stdout. A single run's stay exactly the article's."""
    label = job_label(number, plan)

    def prefix(record: logging.LogRecord) -> bool:
        record.msg = f"{label} {record.msg}"
        return True

    loss_log.addFilter(prefix)
    try:
        yield
    finally:
        loss_log.removeFilter(prefix)


def job_lines(hydra_config: DictConfig) -> bool:
    """A sweep's jobs each end with a job line (shell.lifecycle.Lifecycle.on_job_end), but under
    submitit's launchers, which print their own."""
    return "submitit" not in str(hydra_config.launcher.get("_target_", ""))


def closing_line(sweep_dir: Path, written: Written) -> str:
    """The sweep's outcome in one line, like a single run's: its jobs by status, where the
    summary is, how to see it, and for a sweep that stopped early how to finish it."""
    jobs = written.jobs
    statuses = Counter(job.summary.status for job in jobs)
    counts = ", ".join(f"{status} {n}" for status, n in sorted(statuses.items()))
    shown = shown_path(sweep_dir)
    line = (
        f"reluexp: sweep ended, {len(jobs)} jobs: {counts}. Sweep dir: {shown} "
        f"({written.listing}). Dashboard: {written.dashboard(str(shown))}"
    )
    finish = finish_command(sweep_dir)
    if finish is not None and any(status in statuses for status in UNFINISHED):
        line += f". Finish it: {quoted(finish)}"
    if written.paired is not None:
        line += (
            f". With the built-in beside (no job trained the reference): {quoted(written.paired)}"
        )
    if written.not_correct:
        line += f". The lab finds {', '.join(written.not_correct)}"
    return line


def write_sweep_summary(sweep_dir: Path, check: FunctionCheck | None = None) -> list[Job]:
    """The sweep's report (its custom Functions checked by `check`, the lab's, where given),
    and its closing line on stderr; returns its jobs."""
    written = write_report(sweep_dir, check)
    print(closing_line(sweep_dir, written), file=sys.stderr, flush=True)
    return written.jobs
