"""The process's stops: one owner of SIGINT and SIGTERM (StopOwner, held by the command's
Session) and what a stop means in each phase of a command (MEANINGS), which every phase's
handler reads. No torch here: a command imports it before anything else."""

import enum
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# What stops a process, from a terminal or a scheduler.
STOPS = (signal.SIGINT, signal.SIGTERM)
# The stops this process was started ignoring (a shell's background job ignores SIGINT; nohup,
# SIGHUP): Python leaves them ignored, and so does every handler set here.
INHERITED_IGNORES = frozenset(s for s in STOPS if signal.getsignal(s) is signal.SIG_IGN)
# The closing line of a command stopped before anything trained.
STOPPED_AT_START_UP = "reluexp: interrupted during start-up; nothing was trained"


class First(enum.Enum):
    """What a phase does with the first stop."""

    RECORD = "recorded: the phase's own code ends at its next check"
    RAISE = "raised where the code is (it may never return to a check)"


class Second(enum.Enum):
    """What a phase does with a stop after the first."""

    EXIT = "ends the process at once, 128 + the signal (every file is written by rename)"
    IGNORE = "ignored: the same stop's other copy (a terminal's group and the sweep both send it)"


@dataclass(frozen=True)
class Meaning:
    first: First
    second: Second


# What a stop means, by phase: the phase on top of the owner's stack handles it as its row says.
MEANINGS = {
    # Before anything trains; a library mid-call that gets a KeyboardInterrupt swallows it or is
    # left broken (Hydra's grammar parser, a half-imported matplotlib), so it is only recorded.
    "start-up": Meaning(First.RECORD, Second.EXIT),
    # Start-up running code that may never return: a user's Function, a report being written.
    "start-up, raising": Meaning(First.RAISE, Second.EXIT),
    # A run stops at its next step boundary, checkpointed.
    "training": Meaning(First.RECORD, Second.EXIT),
    # A parallel sweep's worker gets each stop twice: the terminal's and its sweep's.
    "training in a worker": Meaning(First.RECORD, Second.IGNORE),
    # A sweep between its jobs' training: it ends at its next check, its summary written.
    "sweep": Meaning(First.RECORD, Second.EXIT),
    # ... while its launcher waits on the jobs: at once.
    "sweep, waiting on its jobs": Meaning(First.RAISE, Second.EXIT),
    # A parallel sweep passes the stop on to its workers and ends once they have recorded.
    "parallel sweep": Meaning(First.RECORD, Second.IGNORE),
    # A lab check at a sweep's end runs a user's Function, which may never return: the check
    # ends at once, not checked; the sweep's summary is written, then the command ends.
    "lab check": Meaning(First.RAISE, Second.EXIT),
    # The command has said how it ended: nothing changes.
    "exiting": Meaning(First.RECORD, Second.EXIT),
}


class Stopped(KeyboardInterrupt):
    """A stop, raised: a KeyboardInterrupt, so whatever ends on Ctrl-C ends on it. Not
    KeyboardInterrupt itself: CPython ends a process by SIGINT (status -2, whatever it
    returned) once a KeyboardInterrupt has passed through an exec() of a string, as it does
    when a stop lands while a dataclass is made (torch's import makes hundreds), however the
    program handled it."""


def set_handler(signum: int, handler: Any) -> Any:
    """signal.signal, except for a stop the process inherited as ignored, which stays so;
    returns the handler that was in place."""
    if signum in INHERITED_IGNORES:
        return signal.SIG_IGN
    return signal.signal(signum, handler)


class Phase:
    """A phase of the command that takes `signals`: a stop (SIGINT, SIGTERM, and SIGUSR2 in a
    SLURM job) is handled as MEANINGS[self.meaning()] says; any other signal it takes (a timer)
    goes to `woken`. The first stop is kept as `signum`."""

    signals: tuple[int, ...] = STOPS
    # Printed before a second stop ends the process ("" says nothing).
    line = ""

    def __init__(self) -> None:
        self.signum: int | None = None

    def meaning(self) -> str:
        raise NotImplementedError

    def handle(self, signum: int, frame: Any) -> None:
        if signum not in (*STOPS, signal.SIGUSR2):
            self.woken(signum)
            return
        meaning = MEANINGS[self.meaning()]
        if self.signum is not None:
            if meaning.second is Second.EXIT:
                if self.line:
                    print(self.line, file=sys.stderr, flush=True)
                os._exit(128 + signum)
            return
        self.signum = signum
        self.stopped(signum)
        if meaning.first is First.RAISE:
            raise self.raised()

    def stopped(self, signum: int) -> None:
        """What the phase does at its first stop, besides recording it."""

    def raised(self) -> BaseException:
        return Stopped()

    def woken(self, signum: int) -> None:
        """A signal other than a stop that the phase takes."""

    def check(self) -> None:
        """Stopped if a stop came."""
        if self.signum is not None:
            raise Stopped

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


class StopOwner:
    """The one owner of the stops' handlers: each signal goes to the phase on top of its stack
    that takes it, and a handler is in place exactly while some phase takes its signal; with
    none, the handler that was there before (Python's, or an in-process caller's). A phase's
    handler records, signals, looks at memory or raises, and never waits or reads a file."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        # signum -> the handler in place before this owner's.
        self.before: dict[int, Any] = {}

    def push(self, phase: Phase) -> None:
        self.phases.append(phase)
        self._sync()

    def pop(self, phase: Phase) -> None:
        for i in range(len(self.phases) - 1, -1, -1):
            if self.phases[i] is phase:
                del self.phases[i]
                break
        self._sync()

    @contextmanager
    def holding(self, phase: Phase) -> Iterator[Phase]:
        """The phase on top while the block runs."""
        self.push(phase)
        try:
            yield phase
        finally:
            self.pop(phase)

    @contextmanager
    def scope(self) -> Iterator[None]:
        """Every phase pushed inside it is gone when it ends, however it ends (an in-process
        caller gets its own handlers back)."""
        depth = len(self.phases)
        try:
            yield
        finally:
            del self.phases[depth:]
            self._sync()

    def dispatch(self, signum: int, frame: Any) -> None:
        """The handler of every signal a phase takes: the top phase that takes it handles it."""
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


class Interrupts(Phase):
    """A stop outside training: recorded, and the command ends at its next `check()`, a point
    of its own code; within `raising()` (code that may never return) raised where it is. A
    second ends the process at once, with `line`."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line
        self.raises = False

    def meaning(self) -> str:
        return "start-up, raising" if self.raises else "start-up"

    @contextmanager
    def raising(self) -> Iterator[None]:
        self.check()
        self.raises = True
        try:
            yield
        finally:
            self.raises = False


class Exiting(Phase):
    """From the command's last line to the process's end: a stop changes nothing, a second
    ends the process at once."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line

    def meaning(self) -> str:
        return "exiting"


class StopSignals(Phase):
    """A run's training: the first stop (`signals`) asks the loop to stop at its next step; a
    second ends the process at once, or in a parallel sweep's worker (`in_worker`) is ignored:
    it gets each stop twice, from the terminal's group and from its sweep."""

    def __init__(self, signals: tuple[int, ...] = STOPS, in_worker: bool = False) -> None:
        super().__init__()
        self.signals, self.in_worker = signals, in_worker

    def meaning(self) -> str:
        return "training in a worker" if self.in_worker else "training"
