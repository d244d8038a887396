"""A run's summary.json: one schema, and every write of it, here; everyone reads it through it."""

import json
import logging
import math
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, get_type_hints

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

import reluexp
from reluexp.record import tags
from reluexp.record.events import read_scalars
from reluexp.record.whole import write_json

SUMMARY_NAME = "summary.json"
log = logging.getLogger("reluexp")


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
    # The machine's load (runnable processes, the minute before the run ended) and its cores:
    # steps/s compare runs only on a machine that was not busier than its cores.
    load_average: float | None = None
    cores: int | None = None
    # Steps whose metrics were recorded (every log_every-th, the print steps and the last),
    # and under precision=fp16 those of them the gradient scaler skipped (gradients that
    # overflowed float16); null otherwise.
    recorded_steps: int | None = None
    skipped_steps: int | None = None
    diverged_at_step: int | None = None
    # What became non-finite there: `loss`, `gradient norm of w1`, `norm of w2`, ...
    diverged_on: str | None = None
    # With a validation split: the last pass's loss and accuracy (null for regression), the best
    # accuracy and its step; classification: the last recorded batch's accuracy.
    val_loss: float | None = None
    val_accuracy: float | None = None
    best_val_accuracy: float | None = None
    best_val_accuracy_step: int | None = None
    train_accuracy: float | None = None
    signal: str | None = None
    error: str | None = None
    # What the run saw that its status does not say (gradients that vanished, dead layers).
    warnings: list[str] = field(default_factory=list)
    resumes: int = 0

    def write(self, run_dir: Path) -> None:
        write_json(run_dir / SUMMARY_NAME, asdict(self))

    @classmethod
    def read(cls, run_dir: Path) -> "RunSummary":
        path = run_dir / SUMMARY_NAME
        try:
            values = json.loads(path.read_text())
        except FileNotFoundError:
            raise SummaryError(f"{run_dir}: not a run directory (no {SUMMARY_NAME})") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise SummaryError(f"{path}: unreadable ({error})") from None
        if not isinstance(values, dict) or "status" not in values:
            raise SummaryError(f"{path}: not a reluexp summary")
        known = {k: v for k, v in values.items() if k in {f.name for f in fields(cls)}}
        # Its types checked as every config's are: by OmegaConf, against the dataclass.
        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(cls), known))
        except OmegaConfBaseException as error:
            key = error.full_key
            hint = get_type_hints(cls).get(key, "")
            raise SummaryError(f"{path}: {key} is {known.get(key)!r}, not a {hint}") from None

    @property
    def outcome_text(self) -> str:
        """`final loss 639.53...`, or why there is none (summary.json holds null for NaN/inf),
        and a classifier's held-out accuracy: `, validation accuracy 95.0% (best 95.8% at step
        280)`."""
        text = (
            "no finite final loss" if self.final_loss is None else f"final loss {self.final_loss!r}"
        )
        if self.val_accuracy is not None:
            text += f", validation accuracy {self.val_accuracy:.1%}"
            best = self.best_val_accuracy
            if best is not None and best > self.val_accuracy:
                text += f" (best {best:.1%} at step {self.best_val_accuracy_step})"
        return text

    @property
    def ended(self) -> bool:
        """Nothing is left to train: the run completed or diverged."""
        return self.status in ("completed", "diverged")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@cache
def versions() -> dict[str, str | None]:
    """Versions that decide a run's numbers."""
    import torch  # imported by any run already; the report reads summaries without it

    def dist_version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(reluexp.__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hydra": dist_version("hydra-core"),
        "reluexp": reluexp.__version__,
        "git_commit": commit or None,
    }


def record_start(run_dir: Path | None, summary: RunSummary, **facts: Any) -> None:
    """The run has started (or resumed) with these facts (device, dtype, threads, ...); a run
    without a directory keeps its summary in memory only."""
    summary.status = "running"
    summary.versions = versions()
    for key, value in facts.items():
        setattr(summary, key, value)
    if run_dir is not None:
        summary.write(run_dir)


def record_end(run_dir: Path | None, summary: RunSummary, status: str, **facts: Any) -> None:
    """The run's outcome and its numbers. Recording a failure must not hide it: a summary that
    cannot be written then (a full disk) is only logged."""
    summary.status = status
    summary.ended_at = now()
    summary.load_average, summary.cores = os.getloadavg()[0], os.cpu_count()
    for key, value in facts.items():
        setattr(summary, key, value)
    if summary.min_loss is not None and not math.isfinite(summary.min_loss):
        summary.min_loss = math.nan
    if run_dir is None:
        return
    try:
        summary.write(run_dir)
    except OSError as error:
        if status != "failed":
            raise
        log.error("%s: could not record the failure (%s)", run_dir / SUMMARY_NAME, error.strerror)


def record_failure(run_dir: Path, overrides: list[str], error: BaseException) -> RunSummary:
    """A run that raised: `failed` with the error, unless it recorded its failure itself."""
    try:
        summary = RunSummary.read(run_dir)
    except SummaryError:
        summary = RunSummary(overrides=overrides)
    if summary.status != "failed":
        summary.error = f"{type(error).__name__}: {error}"
        record_end(run_dir, summary, "failed")
    return summary


def record_lost(
    run_dir: Path, overrides: list[str], reason: str, slurm_job_id: str | None
) -> RunSummary | None:
    """A job its scheduler ended without a result (killed, out of memory): its run, if it had
    started and not ended, is `failed` with the reason and the steps its event files show it
    trained; None when there is no such run."""
    try:
        summary = RunSummary.read(run_dir)
    except SummaryError:
        return None
    if summary.overrides != overrides or summary.ended:
        return None
    summary.error = reason
    trained = read_scalars(run_dir, [tags.LOSS])[tags.LOSS]
    if trained:
        summary.steps_done = max(trained) + 1
    summary.slurm_job_id = slurm_job_id or summary.slurm_job_id
    record_end(run_dir, summary, "failed")
    return summary
