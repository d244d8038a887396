"""One process at a time trains in a run directory."""

import errno
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reluexp.config import ConfigError

LOCK_NAME = ".reluexp.lock"


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
            raise ConfigError(
                f"{run_dir}: another reluexp process (pid {holder}) is training in it"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        yield
    finally:
        lock.close()
