"""A parallel sweep's worker processes (joblib's): found through psutil, stopped by the sweep."""

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

# How long the stopped workers get to reach a step boundary and checkpoint before they are
# killed.
STOP_TIMEOUT_S = 120.0


def in_worker_processes(hydra_config: DictConfig) -> bool:
    """Jobs run in joblib's local worker processes, not in the process that launched them."""
    return "joblib" in str(hydra_config.launcher.get("_target_", ""))


def stop_workers(signum: int, timeout: float = STOP_TIMEOUT_S) -> None:
    """Pass the signal on to this process's worker processes and wait for each to end; kill what
    outlives the timeout. loky's resource tracker is left alone: it ends by itself once the
    workers are gone (signalled, it prints a traceback)."""
    import psutil  # the `sweeps` extra's, as joblib is

    def is_worker(child: psutil.Process) -> bool:
        try:
            return not any("resource_tracker" in part for part in child.cmdline())
        except psutil.Error:  # gone already, or not ours to read
            return False

    workers = [child for child in psutil.Process().children() if is_worker(child)]
    for worker in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.send_signal(signum)
    _, alive = psutil.wait_procs(workers, timeout=timeout)
    for worker in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            worker.kill()


def stop_workers_on_signals(write_summary: Callable[[], object]) -> None:
    """SIGINT/SIGTERM to a parallel sweep reach its workers: each job stops at a step boundary
    (checkpoint, `interrupted`); then the sweep summary is written and the sweep exits."""

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_IGN)  # one stop at a time
        stop_workers(signum)
        write_summary()
        # Exit now: the launcher would only wait on workers that are gone.
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
