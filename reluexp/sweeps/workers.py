"""A parallel sweep's worker processes (joblib's): stopped by the sweep on a signal, each at a
step boundary, and waited for by their jobs' records, not by their exits.

Why not by their exits: joblib's executor takes a worker that exits for a crash and kills the
others at once, so a worker that stopped first would cost a slower one its checkpoint. A stopped
worker therefore waits for its sweep to end (exit_when_the_sweep_ends), and the sweep waits
until no job of it is still `running`."""

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from omegaconf import DictConfig

from reluexp.record.summary import RunSummary, SummaryError
from reluexp.run.rundir import shown_path
from reluexp.run.signals import OWNER, STOPS

# How long the stopped jobs get to reach a step boundary and checkpoint before their workers
# are killed.
STOP_TIMEOUT_S = 120.0
POLL_S = 0.1


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


class Stopping:
    """A parallel sweep's stopped workers, looked at on each tick of a timer (SIGALRM every
    POLL_S, so that no handler waits): done once none of the sweep's jobs is `running` (each
    recorded `interrupted` at a step boundary), none of the workers is left to record them, or
    the timeout has passed; then the workers are killed."""

    def __init__(self, workers: list[psutil.Process], sweep_dir: Path):
        self.workers, self.sweep_dir = workers, sweep_dir
        self.deadline = time.monotonic() + STOP_TIMEOUT_S
        self.done = False
        signal.setitimer(signal.ITIMER_REAL, POLL_S, POLL_S)

    def look(self) -> bool:
        """One quick look (a tick): whether the workers are done now."""
        if not self.done and (
            not running_jobs(self.sweep_dir)
            or not any(worker.is_running() for worker in self.workers)
            or time.monotonic() >= self.deadline
        ):
            signal.setitimer(signal.ITIMER_REAL, 0)
            for worker in self.workers:
                with contextlib.suppress(psutil.NoSuchProcess):
                    worker.kill()
            self.done = True
        return self.done


class SweepStopped(BaseException):
    """Raised by a stop's handler where the launcher waits on its jobs (SweepStop.waiting),
    which ends the sweep once it is out of the handler. A BaseException, as KeyboardInterrupt:
    no `except Exception` on its way takes it for a job's error."""


class SweepStop:
    """SIGINT/SIGTERM to a sweep's own process outside a job's training (which stops at a step
    boundary): the sweep ends, `end_sweep` says so (the summary) and the process exits with 128
    + the signal. At once while the launcher waits on its jobs (`waiting()`); elsewhere (Hydra
    composing the next job, the report being written) at the sweep's next `check()`, as
    signals.Interrupts says why. A parallel sweep first passes the signal on to its workers,
    each job stopping at a step boundary (checkpoint, `interrupted`), and ends only once they
    have recorded (Stopping, looked at on a timer's ticks): joblib aborts its pool, killing the
    workers, on any exception out of its wait, so their jobs must have recorded before the
    sweep's end is raised there. It ignores the stop's other copies (a terminal's Ctrl-C
    reaches it and its workers alike); otherwise a second signal ends the process at once. A
    phase of signals.OWNER from its start to the command's end (cli.main's OWNER.scope())."""

    def __init__(self, sweep_dir: Path, end_sweep: Callable[[], object], parallel: bool):
        self.sweep_dir, self.end_sweep, self.parallel = sweep_dir, end_sweep, parallel
        self.signum: int | None = None
        self.waits = False
        self.stopping: Stopping | None = None
        # A parallel sweep's timer ticks (Stopping) are this phase's too.
        self.signals = (*STOPS, signal.SIGALRM) if parallel else STOPS
        OWNER.push(self)

    def handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGALRM:
            if self.stopping is not None and self.stopping.look() and self.waits:
                raise SweepStopped
            return
        if self.signum is not None:
            if self.parallel:
                return
            print(
                "reluexp: sweep stopped at once by a second signal; its summary: "
                f"python -m reluexp.report {shown_path(self.sweep_dir)}",
                file=sys.stderr,
                flush=True,
            )
            os._exit(128 + signum)
        self.signum = signum
        if self.parallel:
            self.stopping = Stopping(signal_workers(signum), self.sweep_dir)
        elif self.waits:
            raise SweepStopped

    def end(self) -> None:
        """The summary, then the exit (out of any handler: `waiting()` or a `check()`)."""
        self.waits = False
        self.end_sweep()
        raise SystemExit(128 + (self.signum or signal.SIGINT))

    def check(self) -> None:
        """The sweep ends here if a stop came (and its workers, if any, have recorded)."""
        if self.signum is not None and (self.stopping is None or self.stopping.look()):
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


# The sweep this process runs, from its start (cli.Lifecycle.on_multirun_start) to its end.
current_stop: SweepStop | None = None


@contextmanager
def waiting_on_jobs() -> Iterator[None]:
    """A launcher's wait on its jobs, where the sweep's stop ends it at once (SweepStop)."""
    with current_stop.waiting() if current_stop is not None else contextlib.nullcontext():
        yield


def exit_when_the_sweep_ends(code: int) -> None:
    """A stopped worker's end: it takes no further job, and exits once its sweep has (or is
    killed by it), so that joblib never sees it exit first (module docstring)."""
    sweep = os.getppid()
    while os.getppid() == sweep:
        time.sleep(POLL_S)
    os._exit(code)
