"""What a sweep through Hydra's submitit launcher needs beyond it: nodes that can take its
jobs, a line per job in the launching terminal as each ends, and a result for a job that SLURM
ended without one (killed, out of memory, node failure), so the sweep never waits forever."""

import logging
import math
import re
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig

from reluexp.config import ConfigError
from reluexp.hydra_glue import job_number
from reluexp.summary import RunSummary, SummaryError

log = logging.getLogger("reluexp")
POLL_SECONDS = 2.0
GONE = "(no longer known to SLURM)"
# Job states after which SLURM runs nothing more for the job (squeue --states=all).
ENDED_STATES = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "TIMEOUT",
}


def check_slurm_resources(launcher: DictConfig) -> None:
    """A job asking for more CPUs or memory than any node of its partition has is never
    scheduled, and SLURM says nothing: say it before submitting."""
    partition = launcher.get("partition")
    where = f"partition {partition}" if partition else "the default partition"
    command = ["sinfo", "-h", "-o", "%c %m", *(["-p", partition] if partition else [])]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ConfigError(
            f"hydra/launcher=slurm: cannot ask SLURM for its nodes ({error})"
        ) from None
    # One line per group of nodes: CPUs and memory (MB), e.g. "2 24105".
    fields = [re.findall(r"\d+", line)[:2] for line in answer.stdout.splitlines()]
    nodes = [(int(pair[0]), int(pair[1])) for pair in fields if len(pair) == 2]
    if answer.returncode != 0 or not nodes:
        reason = (answer.stderr.strip().splitlines() or ["sinfo lists no nodes"])[-1]
        key = f"hydra.launcher.partition={partition}" if partition else "hydra/launcher"
        raise ConfigError(f"{key}: SLURM has no nodes in {where} here ({reason})")
    most_cpus, most_memory_mb = max(c for c, _ in nodes), max(m for _, m in nodes)
    cpus = launcher.get("cpus_per_task") or 1
    if cpus * (launcher.get("tasks_per_node") or 1) > most_cpus:
        raise ConfigError(
            f"hydra.launcher.cpus_per_task={cpus}: the nodes of {where} have at most "
            f"{most_cpus} CPUs; such a job would never be scheduled"
        )
    memory_gb = launcher.get("mem_gb")
    if memory_gb and memory_gb * 1024 > most_memory_mb:
        raise ConfigError(
            f"hydra.launcher.mem_gb={memory_gb}: the nodes of {where} have at most "
            f"{most_memory_mb / 1024:.3g} GB; such a job would never be scheduled"
        )


def slurm_states(job_ids: list[str]) -> dict[str, str] | None:
    """`state (reason)` of each job SLURM still knows, by job id (`<array>_<task>`); None when
    SLURM could not be asked (its controller may be back next time)."""
    arrays = sorted({job_id.split("_")[0] for job_id in job_ids})
    command = ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "-j", ",".join(arrays)]
    try:
        answer = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if answer.returncode != 0:
        # Jobs ended long ago (MinJobAge) are forgotten: known to have ended, not how.
        return {} if "Invalid job id" in answer.stderr else None
    states = {}
    for line in answer.stdout.splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        states[job_id] = state if reason in ("", "None") else f"{state} ({reason})"
    return states


class WithoutSacctWarnings(logging.Filter):
    """submitit asks `sacct` on every poll and, where SLURM keeps no accounting, warns each
    time; the watch follows the jobs through `squeue` instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Bypassing sacct error" not in record.getMessage()


class SubmititWatch:
    """In the launching process, beside Hydra's submitit launcher (which blocks until every
    job has a result pickle): prints each job's line as its result appears, and writes the
    result of a job that SLURM ended without one, marking its run `failed` with SLURM's
    reason, so the launcher returns and the sweep summary reports it."""

    def __init__(
        self,
        sweep_dir: Path,
        submitit_folder: str,
        on_slurm: bool,
        job_line: Callable[[int, RunSummary], str] | None,
    ) -> None:
        self.sweep_dir = sweep_dir
        # submitit's folder has `%j` for the job id: one directory per job (array task).
        self.job_dirs = Path(submitit_folder.replace("%j", "*"))
        self.on_slurm = on_slurm
        self.job_line = job_line
        self.finished: set[str] = set()
        # Jobs SLURM said had ended, without a result, at the previous poll.
        self.seen_ended: set[str] = set()
        self.lost = 0  # jobs SLURM ended without a result
        self.quiet_sacct = WithoutSacctWarnings()
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self.poll_until_stopped, name="reluexp-submitit", daemon=True
        )

    def start(self) -> None:
        if self.on_slurm:
            logging.getLogger("submitit").addFilter(self.quiet_sacct)
        self.thread.start()

    def stop(self) -> None:
        """A last look, so every finished job has its line before the sweep summary."""
        self.stopping.set()
        self.thread.join()
        self.poll()
        logging.getLogger("submitit").removeFilter(self.quiet_sacct)

    def poll_until_stopped(self) -> None:
        said = None
        while not self.stopping.wait(POLL_SECONDS):
            try:
                self.poll()
            except Exception as error:  # a watch that died would leave the sweep waiting
                message = f"watching the SLURM jobs: {type(error).__name__}: {error}"
                if message != said:  # once, not every poll
                    log.warning(message)
                said = message

    def poll(self) -> None:
        waiting = {}
        for submitted in sorted(self.job_dirs.parent.glob(f"{self.job_dirs.name}/*_submitted.pkl")):
            job_id = submitted.name.removesuffix("_submitted.pkl")
            if job_id in self.finished:
                continue
            result = submitted.parent / f"{job_id}_0_result.pkl"
            if result.exists():
                self.report(job_id, result)
            else:
                waiting[job_id] = submitted
        if not (self.on_slurm and waiting):
            return
        states = slurm_states(list(waiting))
        if states is None:
            return
        ended = {}
        for job_id in waiting:
            state = states.get(job_id, GONE)
            if state == GONE or state.split()[0] in ENDED_STATES:
                ended[job_id] = state
        for job_id, state in ended.items():
            result = waiting[job_id].parent / f"{job_id}_0_result.pkl"
            # Twice in a row, and still no result: not a job between a requeue's two states.
            if job_id in self.seen_ended and not result.exists():
                self.record_lost(job_id, state, waiting[job_id], result)
        self.seen_ended = set(ended)

    def report(self, job_id: str, result: Path) -> None:
        from submitit.core.utils import pickle_load

        self.finished.add(job_id)
        outcome, job_return = pickle_load(result)
        if outcome != "success" or not isinstance(job_return, JobReturn):
            return  # submitit's own error result: the launcher raises it
        hydra = job_return.hydra_cfg.hydra if job_return.hydra_cfg else None
        if hydra is None or self.job_line is None:
            return
        try:
            summary = RunSummary.read(Path(hydra.runtime.output_dir))
        except SummaryError:
            summary = RunSummary(status="failed", overrides=list(job_return.overrides))
        print(self.job_line(int(hydra.job.num), summary), file=sys.stderr, flush=True)

    def record_lost(self, job_id: str, state: str, submitted: Path, result: Path) -> None:
        """The result the job would have returned as a failed run: the launcher returns, the
        run's summary says why (if the run had started), the terminal gets the job's line."""
        from submitit.core.utils import DelayedSubmission, cloudpickle_dump, temporary_save_path

        self.finished.add(job_id)
        self.lost += 1
        # The launcher's call for this job: (overrides, sweep dir key, job number, ...).
        overrides, _, number, *_ = DelayedSubmission.load(submitted).args
        reason = f"SLURM ended the job {state} before it returned a result"
        summary = mark_failed(self.sweep_dir, int(number), list(overrides), job_id, reason)
        job_return = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
        job_return.return_value = math.nan
        with temporary_save_path(result) as tmp:
            cloudpickle_dump(("success", job_return), tmp)
        if self.job_line is not None:
            print(self.job_line(int(number), summary), file=sys.stderr, flush=True)


def mark_failed(
    sweep_dir: Path, number: int, overrides: list[str], job_id: str, reason: str
) -> RunSummary:
    """The job's run recorded as failed with the reason; a job that never started (cancelled
    while pending) has no run to record: the sweep summary lists it as not started."""
    for run_dir in sweep_dir.glob(f"{job_number(number)}_*"):
        try:
            summary = RunSummary.read(run_dir)
        except SummaryError:
            continue
        if summary.overrides == overrides and not summary.ended:
            summary.status, summary.error, summary.slurm_job_id = "failed", reason, job_id
            summary.write(run_dir)
            return summary
    return RunSummary(status="not started", overrides=overrides, error=reason, slurm_job_id=job_id)
