"""A command's session: what its process shares from start-up to its closing line. The owner of
its stops and their phases, its start-up, the single run it checked before Hydra made a
directory, the sweep it runs. One per command, current while the command runs and gone when
it ends, however it ends: an in-process caller, a test, the next command in the same process
start from none. Hydra makes the objects that reach it (its callbacks, its launchers), so they
find it as the current session."""

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from reluexp.shell.stops import STOPPED_AT_START_UP, Exiting, Interrupts, Phase, StopOwner

# The session of the command running in this context (the main thread's, where signals land).
CURRENT: contextvars.ContextVar["Session"] = contextvars.ContextVar("reluexp session")


class Session:
    """One command's process state. `start_up` takes stops from the session's start until a
    later phase does (a run's training, a sweep's); `started` is the single run the pre-flight
    checked (shell.preflight.Started); `sweep` the sweep's own stop (shell.sweepstop.SweepStop);
    `prepared` each sweep job the pre-flight built, by its overrides, for the job to use."""

    def __init__(self, stopped_line: str = STOPPED_AT_START_UP) -> None:
        self.owner = StopOwner()
        self.start_up = Interrupts(stopped_line)
        self.started: Any = None
        self.sweep: Any = None
        self.prepared: dict[tuple[str, ...], Any] = {}
        self._scope: Any = None
        self._token: contextvars.Token | None = None

    @staticmethod
    def current() -> "Session | None":
        return CURRENT.get(None)

    @classmethod
    @contextmanager
    def joined(cls, stopped_line: str = STOPPED_AT_START_UP) -> Iterator["Session"]:
        """The current session, or one of its own for the block (a command called in process,
        a sweep's job in a worker process)."""
        session = cls.current()
        if session is not None:
            yield session
            return
        with cls(stopped_line) as session:
            yield session

    def holding(self, phase: Phase) -> Any:
        """The phase takes the stops while the block runs."""
        return self.owner.holding(phase)

    def exiting(self, line: str) -> None:
        """From here to the process's end (the command has said how it ended): a stop changes
        nothing, a second ends the process at once."""
        self.owner.push(Exiting(line))

    def __enter__(self) -> "Session":
        self._token = CURRENT.set(self)
        self._scope = self.owner.scope()
        self._scope.__enter__()
        self.owner.push(self.start_up)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self.sweep is not None:
            self.sweep.close()
        self._scope.__exit__(kind, error, traceback)
        CURRENT.reset(self._token)
        self.sweep, self.started = None, None
        self.prepared.clear()
