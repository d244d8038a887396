"""A parallel sweep's worker processes (joblib's): found through /proc, stopped by the sweep."""

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig


def in_worker_processes(hydra_config: DictConfig) -> bool:
    """Jobs run in joblib's local worker processes, not in the process that launched them."""
    return "joblib" in str(hydra_config.launcher.get("_target_", ""))


def process_state(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid from /proc/PID/stat; None once it is gone."""
    try:
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        state, ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[:2]
    except (OSError, IndexError, ValueError):
        return None
    return state, int(ppid)


def child_processes() -> list[int]:
    """The pids of this process's children (a parallel launcher's workers), from /proc."""
    pids = [int(path.name) for path in Path("/proc").iterdir() if path.name.isdigit()]
    return [pid for pid in pids if (process_state(pid) or ("", 0))[1] == os.getpid()]


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def stop_processes(pids: list[int], signum: int, timeout: float = 120.0) -> None:
    """Pass the signal on and wait for each process to end; kill what outlives the timeout."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        # A zombie has ended: its parent (init, here) has not reaped it yet.
        alive = [pid for pid in alive if (process_state(pid) or ("Z", 0))[0] != "Z"]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def stop_workers_on_signals(write_summary: Callable[[], object]) -> None:
    """SIGINT/SIGTERM to a parallel sweep reach its workers: each job stops at a step boundary
    (checkpoint, `interrupted`); then the sweep summary is written and the sweep exits."""

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_IGN)  # one stop at a time
        # loky's resource tracker ends by itself once the workers are gone (signalled, it
        # prints a traceback); the workers stop at a step boundary.
        workers = [pid for pid in child_processes() if "resource_tracker" not in command_line(pid)]
        stop_processes(workers, signum)
        write_summary()
        # Exit now: the launcher would only wait on workers that are gone.
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)
