"""A run's summary.json: one schema, written atomically by the run, read through it by everyone."""

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SUMMARY_NAME = "summary.json"


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON to a temp file and rename it over `path`, so readers never see half a file;
    a failed write (a full disk) leaves the old file and no temp file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(payload, indent=2, allow_nan=True) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class SummaryError(ValueError):
    """summary.json is missing, not JSON, or not a reluexp summary; the message says which."""


@dataclass
class RunSummary:
    """What a run records about itself; `status` is running, completed, diverged, interrupted
    or failed. Fields a run has not reached yet are None."""

    status: str = "running"
    overrides: list[str] = field(default_factory=list)
    # The full config as plain values (reluexp.config.config_dict); None when the run failed
    # before its config was known.
    config: dict[str, Any] | None = None
    seed: int | None = None
    started_at: str | None = None
    ended_at: str | None = None
    device: str | None = None
    dtype: str | None = None
    threads: int | None = None
    # `<array job>_<task>` when the run is a SLURM job.
    slurm_job_id: str | None = None
    versions: dict[str, str | None] | None = None
    steps_done: int | None = None
    final_loss: float | None = None
    min_loss: float | None = None
    wall_time_s: float | None = None
    steps_per_s: float | None = None
    diverged_at_step: int | None = None
    signal: str | None = None
    error: str | None = None
    # What the run saw that its status does not say (gradients that vanished, dead layers).
    warnings: list[str] = field(default_factory=list)
    resumes: int = 0

    def write(self, run_dir: Path) -> None:
        write_json_atomic(run_dir / SUMMARY_NAME, asdict(self))

    @classmethod
    def read(cls, run_dir: Path) -> "RunSummary":
        path = run_dir / SUMMARY_NAME
        try:
            values = json.loads(path.read_text())
        except FileNotFoundError:
            raise SummaryError(f"{run_dir}: not a run directory (no {SUMMARY_NAME})") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise SummaryError(f"{path}: unreadable ({error})") from None
        known = {f.name for f in fields(cls)}
        if not isinstance(values, dict) or "status" not in values:
            raise SummaryError(f"{path}: not a reluexp summary")
        return cls(**{k: v for k, v in values.items() if k in known})

    @property
    def ended(self) -> bool:
        """Nothing is left to train: the run completed or diverged."""
        return self.status in ("completed", "diverged")
