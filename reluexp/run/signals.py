"""The signals that stop a run at a step boundary (StopSignals) and the rest of the process
where it is not training (Interrupts): the mechanisms of the entry point's policy. No
torch here: the command line imports it before a run starts."""

import os
import signal
import sys
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


class Interrupts:
    """SIGINT and SIGTERM outside training (whose StopSignals take over while it runs), the
    first recorded as `signum`. They raise nowhere by default: a library interrupted mid-call
    swallows the KeyboardInterrupt or is left broken (Hydra's grammar parser turned one into
    "'NoneType' object has no attribute 'stop'"; a half-imported matplotlib had no rcParams),
    so the command ends at its next `check()`, a point of its own code. Within `raising()`,
    code that must end at once (a user's Function that never returns, a report's writing) gets
    the KeyboardInterrupt where it is. A second signal ends the process at once, with
    `line`."""

    def __init__(self, line: str) -> None:
        self.line = line
        self.signum: int | None = None
        self.raises = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            print(self.line, file=sys.stderr, flush=True)
            os._exit(128 + signum)
        self.signum = signum
        if self.raises:
            raise KeyboardInterrupt

    def check(self) -> None:
        """KeyboardInterrupt if a stop came."""
        if self.signum is not None:
            raise KeyboardInterrupt

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    @contextmanager
    def raising(self) -> Iterator[None]:
        self.check()
        self.raises = True
        try:
            yield
        finally:
            self.raises = False

    def hold(self) -> None:
        """From here on, until __exit__ (or the process's end)."""
        self.signum = None
        self._previous = {signum: set_handler(signum, self._handle) for signum in STOPS}

    def __enter__(self) -> "Interrupts":
        self.hold()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        for signum, handler in self._previous.items():
            set_handler(signum, handler)
