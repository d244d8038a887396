"""A parallel sweep's worker processes (joblib's): which launchers run jobs in them, the cores
each job gets, which of their jobs still run, and a stop passed on to them (the sweep's stop
itself is the process shell's: shell/sweepstop.py)."""

import contextlib
import os
from pathlib import Path

import psutil
from omegaconf import DictConfig

from reluexp.record.summary import RunSummary, SummaryError


def in_worker_processes(hydra_config: DictConfig) -> bool:
    """Jobs run in joblib's local worker processes, not in the process that launched them."""
    return "joblib" in str(hydra_config.launcher.get("_target_", "")).lower()


def threads_per_job(hydra_config: DictConfig) -> int | None:
    """Parallel local jobs share the cores: each gets its slice, so none oversubscribes (None:
    the jobs run one at a time, with torch's default)."""
    if not in_worker_processes(hydra_config):
        return None
    cores = os.cpu_count() or 1
    n_jobs = hydra_config.launcher.n_jobs if hydra_config.launcher.n_jobs > 0 else cores
    return max(1, cores // min(n_jobs, cores))


def running_jobs(sweep_dir: Path) -> list[Path]:
    """The sweep's job directories whose run still says `running`."""
    found = []
    for summary in sweep_dir.glob("*/summary.json"):
        try:
            if RunSummary.read(summary.parent).status == "running":
                found.append(summary.parent)
        except SummaryError:  # being rewritten this instant: look again
            found.append(summary.parent)
    return found


def signal_workers(signum: int) -> list[psutil.Process]:
    """Pass the signal on to this process's workers (each stops its job at a step boundary);
    returns them. loky's resource tracker is left alone: it ends by itself once the workers
    are gone (signalled, it prints a traceback)."""

    def is_worker(child: psutil.Process) -> bool:
        try:
            return not any("resource_tracker" in part for part in child.cmdline())
        except psutil.Error:  # gone already, or not ours to read
            return False

    workers = [child for child in psutil.Process().children() if is_worker(child)]
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signum)
    return workers
