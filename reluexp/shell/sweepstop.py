"""A sweep's own stop: SIGINT or SIGTERM to the sweep's process outside a job's training (which
stops at a step boundary). A parallel sweep's workers are stopped by it, each at a step
boundary, and waited for by their jobs' records, not by their exits.

Why not by their exits: joblib's executor takes a worker that exits for a crash and kills the
others at once, so a worker that stopped first would cost a slower one its checkpoint. A stopped
worker therefore waits for its sweep to end (exit_when_the_sweep_ends), and the sweep waits
until no job of it is still `running`."""

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from reluexp.run.rundir import shown_path
from reluexp.shell.stops import STOPS, Phase
from reluexp.sweeps.workers import running_jobs, signal_workers

# How long the stopped jobs get to reach a step boundary and checkpoint before their workers
# are killed.
STOP_TIMEOUT_S = 120.0
POLL_S = 0.1
# The signal a watcher wakes the sweep's main thread with, where the launcher waits.
WAKE = signal.SIGALRM


class Stopping:
    """A parallel sweep's stopped workers, watched from a thread of their own (a signal's
    handler never waits or reads a file): done once none of the sweep's jobs is `running`
    (each recorded `interrupted` at a step boundary), none of the workers is left to record
    them, or the timeout has passed; then the workers are killed and the main thread is woken
    (WAKE) in case the launcher waits there."""

    def __init__(self, workers: list[psutil.Process], sweep_dir: Path):
        self.workers, self.sweep_dir = workers, sweep_dir
        self.deadline = time.monotonic() + STOP_TIMEOUT_S
        self.done = threading.Event()
        self.watcher = threading.Thread(target=self.watch, name="reluexp sweep stop", daemon=True)
        self.watcher.start()

    def watch(self) -> None:
        while (
            running_jobs(self.sweep_dir)
            and any(worker.is_running() for worker in self.workers)
            and time.monotonic() < self.deadline
        ):
            time.sleep(POLL_S)
        for worker in self.workers:
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
        self.done.set()
        signal.pthread_kill(threading.main_thread().ident, WAKE)


class SweepStopped(BaseException):
    """Raised by a stop's handler where the launcher waits on its jobs (SweepStop.waiting),
    which ends the sweep once it is out of the handler. A BaseException, as KeyboardInterrupt:
    no `except Exception` on its way takes it for a job's error."""


class SweepStop(Phase):
    """The sweep ends, `end_sweep` says so (its summary) and the process exits with 128 + the
    signal: at once while the launcher waits on its jobs (`waiting()`); elsewhere (Hydra
    composing the next job, the report being written) at the sweep's next `check()`. A parallel
    sweep first passes the stop on to its workers and ends only once they have recorded
    (Stopping): joblib aborts its pool, killing the workers, on any exception out of its wait,
    so their jobs must have recorded before the sweep's end is raised there."""

    def __init__(self, sweep_dir: Path, end_sweep: Callable[[], object], parallel: bool):
        super().__init__()
        self.sweep_dir, self.end_sweep, self.parallel = sweep_dir, end_sweep, parallel
        self.waits = False
        self.stopping: Stopping | None = None
        # A parallel sweep's watcher wakes it with WAKE.
        self.signals = (*STOPS, WAKE) if parallel else STOPS
        self.line = (
            "reluexp: sweep stopped at once by a second signal; its summary: "
            f"python -m reluexp.report {shown_path(sweep_dir)}"
        )

    def meaning(self) -> str:
        if self.parallel:
            return "parallel sweep"
        return "sweep, waiting on its jobs" if self.waits else "sweep"

    def stopped(self, signum: int) -> None:
        if self.parallel:
            self.stopping = Stopping(signal_workers(signum), self.sweep_dir)

    def raised(self) -> BaseException:
        return SweepStopped()

    def woken(self, signum: int) -> None:
        if self.waits and self.workers_done():
            raise SweepStopped

    def workers_done(self) -> bool:
        return self.stopping is None or self.stopping.done.is_set()

    def end(self) -> None:
        """The summary, then the exit (out of any handler: `waiting()` or a `check()`)."""
        self.waits = False
        self.end_sweep()
        raise SystemExit(self.exit_code)

    def close(self) -> None:
        """Before the phase is gone: its watcher's wake-up lands while it still takes WAKE."""
        if self.stopping is not None:
            self.stopping.watcher.join()

    def check(self) -> None:
        """The sweep ends here if a stop came (and its workers, if any, have recorded: this
        waits for them)."""
        if self.signum is None:
            return
        if self.stopping is not None:
            self.stopping.done.wait()
        self.end()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """The launcher waits on its jobs: a stop ends the sweep at once."""
        self.check()
        self.waits = True
        try:
            yield
        except SweepStopped:
            # Raised out of the launcher's wait: Hydra and joblib have unwound, joblib releasing
            # its executor's semaphores and memmapping folders (an os._exit in the handler left
            # them to loky's resource tracker, which warned of them after the closing line).
            self.end()
        finally:
            self.waits = False


def exit_when_the_sweep_ends(code: int) -> None:
    """A stopped worker's end: it takes no further job, and exits once its sweep has (or is
    killed by it), so that joblib never sees it exit first (module docstring)."""
    sweep = os.getppid()
    while os.getppid() == sweep:
        time.sleep(POLL_S)
    os._exit(code)
