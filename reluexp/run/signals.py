"""The process's one owner of SIGINT and SIGTERM (StopOwner) and what a stop means in each
phase (PHASES): a run's training stops at a step boundary (StopSignals), the rest of the process
at a point of its own code (Interrupts); a sweep's own phase is sweeps.workers.SweepStop. No
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


class StopOwner:
    """The process's one owner of the stops' handlers: each signal goes to the phase on top of
    its stack that takes it (PHASES says what a stop means in each), and a handler is in place
    exactly while some phase takes its signal; with none, the handler that was there before
    (Python's, or an in-process caller's). A phase's handler records, signals, looks or
    raises, and never waits: a parallel sweep's waits for its workers' checkpoints on a timer's
    ticks (sweeps.workers.SweepStop)."""

    def __init__(self) -> None:
        self.phases: list[Any] = []
        # signum -> the handler in place before this owner's.
        self.before: dict[int, Any] = {}

    def push(self, phase: Any) -> None:
        self.phases.append(phase)
        self._sync()

    def pop(self, phase: Any) -> None:
        for i in range(len(self.phases) - 1, -1, -1):
            if self.phases[i] is phase:
                del self.phases[i]
                break
        self._sync()

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Every phase pushed inside it is gone when it ends, however it ends (an in-process
        caller of a sweep gets its own handlers back)."""
        depth = len(self.phases)
        try:
            yield
        finally:
            del self.phases[depth:]
            self._sync()

    def dispatch(self, signum: int, frame: Any) -> None:
        """The handler of every stop: the top phase that takes the signal handles it."""
        for phase in reversed(self.phases):
            if signum in phase.signals:
                phase.handle(signum, frame)
                return

    def _sync(self) -> None:
        # Handlers can only be set from the main thread (a threaded launcher runs jobs elsewhere).
        if threading.current_thread() is not threading.main_thread():
            return
        taken = {signum for phase in self.phases for signum in phase.signals}
        for signum in taken - self.before.keys():
            self.before[signum] = set_handler(signum, self.dispatch)
        for signum in self.before.keys() - taken:
            previous = self.before.pop(signum)
            if previous is not None:  # None: not set from Python, nothing to put back
                set_handler(signum, previous)


# What a stop means, by phase (the stack's top decides): the process has one owner of them.
PHASES = {
    "start-up (Interrupts)": "recorded; the command ends at its next check of its own code, or "
    "at once where it runs code that may not return (raising()); one line, 128 + the signal",
    "training (StopSignals)": "the run stops at the next step boundary, checkpointed; a second "
    "stop ends the process at once (a joblib worker's waits for its sweep)",
    "a sweep outside training (sweeps.workers.SweepStop)": "a parallel sweep's workers are "
    "signalled, and looked at on a timer's ticks until they have recorded; the sweep ends where "
    "the launcher waits or at its next check: its summary, 128 + the signal",
    "exiting (Interrupts.hold)": "nothing changes; a second stop ends the process at once",
}
OWNER = StopOwner()


class StopSignals:
    """While active, stop_signals() ask the loop to stop at the next step; a second one exits
    now (every file is written by rename, so exiting at once cannot leave a half-written one),
    unless `second_exits` is off: a parallel sweep's worker gets a Ctrl-C twice, from the
    terminal's process group and from its sweep, and still stops at the step boundary."""

    def __init__(self, second_exits: bool = True) -> None:
        self.signum: int | None = None
        self.second_exits = second_exits
        self.signals = stop_signals()

    def handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None and self.second_exits:
            os._exit(128 + signum)
        self.signum = self.signum or signum

    def __enter__(self) -> "StopSignals":
        OWNER.push(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.signum is not None and not self.second_exits:
            # A worker that stopped may still get the stop's other copy: it stays the top
            # phase, which only records it, until it exits (the default handler would end it
            # before its closing line).
            return
        OWNER.pop(self)


class Interrupts:
    """SIGINT and SIGTERM outside training (whose StopSignals take over while it runs), the
    first recorded as `signum`. They raise nowhere by default: a library interrupted mid-call
    swallows the KeyboardInterrupt or is left broken (Hydra's grammar parser turned one into
    "'NoneType' object has no attribute 'stop'"; a half-imported matplotlib had no rcParams),
    so the command ends at its next `check()`, a point of its own code. Within `raising()`,
    code that must end at once (a user's Function that never returns, a report's writing) gets
    the KeyboardInterrupt where it is. A second signal ends the process at once, with
    `line`."""

    signals = STOPS

    def __init__(self, line: str) -> None:
        self.line = line
        self.signum: int | None = None
        self.raises = False

    def handle(self, signum: int, frame: Any) -> None:
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
        OWNER.push(self)

    def __enter__(self) -> "Interrupts":
        self.hold()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        OWNER.pop(self)
