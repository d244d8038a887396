"""What a sweep tells its terminal: a line per finished job, and its summary once it ends."""

import logging
import math
from pathlib import Path

from omegaconf import DictConfig

from reluexp import report
from reluexp.summary import RunSummary

log = logging.getLogger("reluexp")


def job_line(number: int, total: int | None, summary: RunSummary) -> str:
    """A finished sweep job in one line: [3/12] activation=relu seed=1 completed loss=... ."""
    line = f"[{number + 1}/{total or '?'}] {' '.join(summary.overrides)} {summary.status}"
    if summary.error:
        line += f": {summary.error}"
    else:
        final_loss = math.nan if summary.final_loss is None else summary.final_loss
        wall_time = math.nan if summary.wall_time_s is None else summary.wall_time_s
        line += f" loss={final_loss:.4g} in {wall_time:.1f} s"
    if summary.slurm_job_id:
        line += f" (SLURM job {summary.slurm_job_id})"
    return line


def count_jobs(job_config: DictConfig) -> int | None:
    """How many jobs the sweep launches: Optuna's n_trials, or the size of the grid."""
    planned = report.planned_jobs(Path(job_config.hydra.sweep.dir))
    return planned if planned is None or isinstance(planned, int) else len(planned)


def write_sweep_summary(sweep_dir: Path) -> list[report.Job]:
    jobs = report.write_report(sweep_dir)
    failed = [job for job in jobs if job.summary.status == "failed"]
    log.info("Sweep summary: %s", sweep_dir / "summary.md")
    if failed:
        log.error("%d of %d jobs failed; see %s", len(failed), len(jobs), sweep_dir / "summary.md")
    return jobs
