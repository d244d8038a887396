"""A sweep job's directory name, made and read in one place: `<number>_<overrides>`, the number
zero-padded so that directories sort in job order (in ls and in TensorBoard)."""

import math
import re
from pathlib import Path


def job_prefix(number: int | str) -> str:
    """The directory prefix of job `number` (Hydra's hydra.job.num): `003`."""
    return f"{int(number):03d}"


def job_order(run_dir: Path) -> tuple[float, str]:
    """Where a job directory sorts: by its number (`10_...` after `9_...`), then its name; a
    directory without one sorts last."""
    number = re.match(r"\d+", run_dir.name)
    return (int(number.group()) if number else math.inf, run_dir.name)
