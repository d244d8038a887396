"""The signals that stop a run at a step boundary (StopSignals) and the rest of the process
where it is not training (InterruptSignals): the mechanisms of the entry point's policy. No
torch here: the command line imports it before a run starts."""

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# What stops a process, from a terminal or a scheduler.
STOPS = (signal.SIGINT, signal.SIGTERM)
# The stops this process was started ignoring (a shell's background job ignores SIGINT; nohup,
# SIGHUP): Python leaves them ignored, and so does every handler set here.
INHERITED_IGNORES = frozenset(s for s in STOPS if signal.getsignal(s) is signal.SIG_IGN)
# The closing line of a command stopped before anything trained.
STOPPED_AT_START_UP = "reluexp: interrupted during start-up; nothing was trained"


def set_handler(signum: int, handler: Any) -> Any:
    """signal.signal, except for a stop the process inherited as ignored, which stays so;
    returns the handler that was in place."""
    if signum in INHERITED_IGNORES:
        return signal.SIG_IGN
    return signal.signal(signum, handler)


def slurm_job_id() -> str | None:
    """This process's SLURM job (`<array job>_<task>` for an array task), None outside SLURM."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def stop_signals() -> tuple[int, ...]:
    """The signals that stop a run at a step boundary: SIGINT, SIGTERM, and in a SLURM job
    SIGUSR2, which SLURM sends before a time limit or preemption (submitit's protocol)."""
    if slurm_job_id() is None:
        return STOPS
    return (*STOPS, signal.SIGUSR2)


@contextmanager
def handlers_kept() -> Iterator[None]:
    """The stops' handlers as they were when it ends, whatever was set inside (an in-process
    caller of a sweep gets its own back)."""
    previous = {signum: signal.getsignal(signum) for signum in STOPS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


class StopSignals:
    """While active, stop_signals() ask the loop to stop at the next step; a second one exits
    now (every file is written by rename, so exiting at once cannot leave a half-written one),
    unless `second_exits` is off: a parallel sweep's worker gets a Ctrl-C twice, from the
    terminal's process group and from its sweep, and still stops at the step boundary."""

    def __init__(self, second_exits: bool = True) -> None:
        self.signum: int | None = None
        self.second_exits = second_exits
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and self.second_exits:
            os._exit(128 + signum)
        self.signum = self.signum or signum

    def __enter__(self) -> "StopSignals":
        # Handlers can only be set from the main thread (a threaded launcher runs jobs elsewhere).
        if threading.current_thread() is threading.main_thread():
            for signum in stop_signals():
                self._previous[signum] = set_handler(signum, self._handle)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.signum is not None and not self.second_exits:
            # A worker that stopped may still get the stop's other copy: it keeps this handler,
            # which only records it, until it exits (the default one would end it before its
            # closing line).
            return
        for signum, handler in self._previous.items():
            set_handler(signum, handler)


class InterruptSignals:
    """While active, SIGTERM interrupts as Ctrl-C does (a KeyboardInterrupt wherever the code
    is), for the code outside training, whose StopSignals take over while it runs; `signum`
    is the signal that came."""

    def __init__(self) -> None:
        self.signum = signal.SIGINT
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.signum = signum
        raise KeyboardInterrupt

    @contextmanager
    def next_one_kills(self) -> Iterator[None]:
        """Within it, a SIGINT or SIGTERM ends the process at once (the first one is being
        answered)."""
        previous = {signum: set_handler(signum, signal.SIG_DFL) for signum in STOPS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                set_handler(signum, handler)

    def __enter__(self) -> "InterruptSignals":
        self._previous = set_handler(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        set_handler(signal.SIGTERM, self._previous)
