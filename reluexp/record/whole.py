"""Files written whole: under a temporary name beside them, flushed to the disk, then renamed
over them (the rename flushed too), so that a reader, a process killed mid-write or a power cut
leaves the old file or the new one, never half of one. Text is UTF-8, whatever the locale."""

import json
import math
import os
from pathlib import Path
from typing import Any


def write_whole(path: Path, data: bytes | str) -> None:
    """data into path, whole; a failed write (a full disk) leaves the old file and no
    temporary one (one left by a killed writer is replaced by the next write), and its error
    names the path, not the temporary name."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        sync_directory(path.parent)
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from None
    finally:
        tmp.unlink(missing_ok=True)


def sync_directory(directory: Path) -> None:
    """A rename into the directory, flushed to the disk (where the system lets a directory be
    opened: POSIX)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def strict(value: Any) -> Any:
    """value with every NaN and inf float as None: strict JSON has no NaN (a run's status says
    why a loss is missing)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [strict(item) for item in value]
    return value


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Strict JSON (non-finite numbers as null), written whole."""
    write_whole(path, json.dumps(strict(payload), indent=2, allow_nan=False) + "\n")
