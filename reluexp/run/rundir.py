"""What a run holds in its directory while it trains: the lock that keeps a second process
out, and a disk reserve that keeps room for its last records."""

import errno
import fcntl
import os
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from reluexp.config import ConfigError

LOCK_NAME = ".reluexp.lock"
CHECKPOINT_NAME = "checkpoint.pt"


def shown_path(directory: Path, base: Path | None = None) -> str:
    """A run's or a sweep's directory as its closing line shows it: relative below `base` (the
    directory the command was launched from; the working directory by default), quoted for a
    shell where it needs to be (job directories hold `=` and `,`)."""
    base = base or Path.cwd()
    if directory.is_relative_to(base):
        directory = Path(os.path.relpath(directory, base))
    return shlex.quote(str(directory))


class RunHeld(ConfigError):
    """Another reluexp process is training in the run directory."""


@contextmanager
def hold_run(run_dir: Path) -> Iterator[None]:
    """A second process on the same run directory (say, a second `resume=` of the same run) is
    refused. The lock is the kernel's: a killed process releases it."""
    lock = open(run_dir / LOCK_NAME, "a+")  # noqa: SIM115 (closed below)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise RunHeld(
                f"{run_dir}: another reluexp process (pid {holder}) is training in it"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield
    finally:
        lock.close()


RESERVE_NAME = ".reluexp.reserve"
# Enough for the run's final summary.json and log lines on a disk that filled up mid-run.
RESERVE_BYTES = 64 * 1024


class DiskReserve:
    """A file of RESERVE_BYTES written when the run starts and deleted when its outcome is
    recorded: on a disk that fills up mid-run, the room it held takes the final summary (a
    failure with its step and `No space left on device`) and the log's last lines."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / RESERVE_NAME

    def __enter__(self) -> "DiskReserve":
        try:
            self.path.write_bytes(bytes(RESERVE_BYTES))
        except OSError as error:  # a disk already too full for it: nothing is left behind
            self.release()
            raise ConfigError(
                f"{shown_path(self.path.parent)}: no room for the run's records "
                f"({error.strerror}); free some space and run again"
            ) from None
        return self

    def release(self) -> None:
        self.path.unlink(missing_ok=True)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
