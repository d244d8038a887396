"""A parallel sweep's worker processes (joblib's): stopped by the sweep on a signal, each at a
step boundary, and waited for by their jobs' records, not by their exits.

Why not by their exits: joblib's executor takes a worker that exits for a crash and kills the
others at once, so a worker that stopped first would cost a slower one its checkpoint. A stopped
worker therefore waits for its sweep to end (exit_when_the_sweep_ends), and the sweep waits
until no job of it is still `running`."""

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from omegaconf import DictConfig

from reluexp.record.summary import RunSummary, SummaryError
from reluexp.run.signals import STOPS, set_handler

# How long the stopped jobs get to reach a step boundary and checkpoint before their workers
# are killed.
STOP_TIMEOUT_S = 120.0
POLL_S = 0.1


def in_worker_processes(hydra_config: DictConfig) -> bool:
    """Jobs run in joblib's local worker processes, not in the process that launched them."""
    return "joblib" in str(hydra_config.launcher.get("_target_", ""))


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


def stop_workers(sweep_dir: Path, signum: int, timeout: float = STOP_TIMEOUT_S) -> None:
    """Pass the signal on to this process's workers and wait until none of the sweep's jobs is
    `running` (each recorded `interrupted` at a step boundary); kill the workers then, and any
    that has not recorded its job by the timeout. loky's resource tracker is left alone: it ends
    by itself once the workers are gone (signalled, it prints a traceback)."""

    def is_worker(child: psutil.Process) -> bool:
        try:
            return not any("resource_tracker" in part for part in child.cmdline())
        except psutil.Error:  # gone already, or not ours to read
            return False

    workers = [child for child in psutil.Process().children() if is_worker(child)]
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signum)
    deadline = time.monotonic() + timeout
    while running_jobs(sweep_dir) and time.monotonic() < deadline:
        if not any(worker.is_running() for worker in workers):
            break  # nobody left to record them
        time.sleep(POLL_S)
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.kill()
    psutil.wait_procs(workers, timeout=timeout)


def stop_sweep_on_signals(sweep_dir: Path, end_sweep: Callable[[], object], parallel: bool) -> None:
    """SIGINT/SIGTERM to a sweep's own process, outside a job's training (which stops at a step
    boundary): the sweep ends there, `end_sweep` says so (the summary) and the process exits
    with 128 + the signal. A parallel sweep first passes the signal on to its workers, each
    job stopping at a step boundary (checkpoint, `interrupted`), and ignores the stop's other
    copies (a terminal's Ctrl-C reaches it and its workers alike); otherwise a second signal,
    while the summary is written, ends the process at once."""

    def stop(signum: int, frame: Any) -> None:
        if parallel:
            signal.signal(signum, signal.SIG_IGN)  # one stop at a time
            stop_workers(sweep_dir, signum)
        else:
            for stop_signum in STOPS:
                set_handler(stop_signum, signal.SIG_DFL)
        end_sweep()
        # Raised where the launcher waits: Hydra and joblib unwind, joblib releasing its
        # executor's semaphores and memmapping folders (an os._exit here left them to loky's
        # resource tracker, which warned of them after the closing line).
        raise SystemExit(128 + signum)

    for signum in STOPS:
        set_handler(signum, stop)


def exit_when_the_sweep_ends(code: int) -> None:
    """A stopped worker's end: it takes no further job, and exits once its sweep has (or is
    killed by it), so that joblib never sees it exit first (module docstring)."""
    sweep = os.getppid()
    while os.getppid() == sweep:
        time.sleep(POLL_S)
    os._exit(code)
