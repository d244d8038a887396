"""Which run a command continues, decided once: `resume=DIR` as a user pastes it, a requeued
SLURM job, a sweep's job run again into its own directory. What it may import beyond reluexp's
and torch's only once the user names it again; a command that would change its config is
refused."""

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from reluexp.config import OPTION_GROUPS, Config, ConfigError, config_from_dict
from reluexp.functions.targets import is_own
from reluexp.options import DataName, ModelName
from reluexp.record.summary import SUMMARY_NAME, RunSummary, SummaryError
from reluexp.run.checkpoint import load_checkpoint
from reluexp.run.rundir import CHECKPOINT_NAME


def imported_paths(config: Config) -> dict[str, str]:
    """The config's dotted paths that a run imports, by key."""
    paths = {"activation.target": config.activation.target}
    if isinstance(config.activation.surrogate, str):
        paths["activation.surrogate"] = config.activation.surrogate
    if config.data.name == DataName.callable and config.data.loader is not None:
        paths["data.loader"] = config.data.loader
    if config.model.name == ModelName.custom and config.model.target is not None:
        paths["model.target"] = config.model.target
    if config.model.replace is not None:
        paths["model.replace"] = config.model.replace
    return paths


def stored_value(stored: DictConfig, key: str) -> Any:
    """A stored config's value of a key as a command line names it: a group by its option."""
    value = OmegaConf.select(stored, key)
    return value.get("name") if isinstance(value, DictConfig) else value


# What `resume=DIR key=path` may name to confirm a stored dotted path (imported_paths).
CONFIRMABLE = (
    "activation.target",
    "activation.surrogate",
    "data.loader",
    "model.target",
    "model.replace",
)


@dataclass(frozen=True)
class ResumePlan:
    """A run to continue: its directory and summary, and unless it already ended (then there
    is nothing to resume) its checkpoint and the config it continues with."""

    run_dir: Path
    summary: RunSummary
    checkpoint: dict[str, Any] | None = None
    config: Config | None = None

    @property
    def ended(self) -> bool:
        return self.checkpoint is None


def plan_resume(
    run_dir: Path, named: Mapping[str, str] = {}, confirmed: Collection[str] = ()
) -> ResumePlan:
    """The run in run_dir, to continue with its own config. `named`: the command line's other
    keys (key -> value, as Hydra reads them): a dotted path the stored config holds as it is
    confirms it, anything else would change the config and is refused. A dotted path outside
    reluexp and torch is imported only when named or `confirmed` (`key=path`, a job's own
    config's); otherwise nothing is imported. Every refusal is a ConfigError in one line."""
    where = f"resume={run_dir}"
    try:
        summary = RunSummary.read(run_dir)
    except SummaryError as error:
        raise ConfigError(f"resume={error}") from None
    stored = OmegaConf.create(summary.config or {})
    changed = [
        f"{key}={value}"
        for key, value in named.items()
        # A group's option may be named (its keys compose only under it: `model=custom
        # model.target=...`); it must be the run's own.
        if not (key in CONFIRMABLE or key in OPTION_GROUPS) or stored_value(stored, key) != value
    ]
    if changed:
        raise ConfigError(f"{where}: a resumed run keeps its own config; drop {' '.join(changed)}")
    if summary.config is None:
        raise ConfigError(f"{where}: the run failed before it started; nothing to resume")
    if summary.ended:
        return ResumePlan(run_dir, summary)
    checkpoint = load_checkpoint(run_dir, summary.config)
    try:
        config = config_from_dict(checkpoint["config"])
    except (ConfigError, OmegaConfBaseException) as error:  # a stored config nothing wrote
        said = str(error).splitlines()[0]
        raise ConfigError(f"{where}: {CHECKPOINT_NAME}'s config: {said}") from None
    confirmations = {*confirmed, *(f"{key}={value}" for key, value in named.items())}
    unconfirmed = confirmations_needed(config, confirmations)
    if unconfirmed:
        raise ConfigError(
            f"{where}: its config names {' '.join(unconfirmed)}, which is not reluexp's or "
            "torch's; nothing was imported. If you trust it, name it again: "
            f"python -m reluexp resume={run_dir} {' '.join(unconfirmed)}"
        )
    return ResumePlan(run_dir, summary, checkpoint, config)


def confirmations_needed(config: Config, given: Collection[str] = ()) -> list[str]:
    """What a resume of a run of this config names again, beyond `given`: each dotted path it
    imports outside reluexp and torch (`key=path`), a key of one option after its option."""
    needed = [
        f"{key}={path}"
        for key, path in imported_paths(config).items()
        if not is_own(path) and f"{key}={path}" not in given
    ]
    # A key of one option is said after its option (the command line composes it there).
    for key, option in (("data.loader", config.data.name), ("model.target", config.model.name)):
        if any(said.startswith(f"{key}=") for said in needed):
            needed.insert(0, f"{key.partition('.')[0]}={option.value}")
    return needed


def continues(run_dir: Path, multirun: bool) -> bool:
    """A job started where a run of it already is continues that run: a SLURM job started
    again (requeued after a time limit or preemption), or a sweep's job run again into its own
    directory (the sweep's finish command, checked to be the same sweep: sweeps.finish)."""
    if not (run_dir / SUMMARY_NAME).is_file():
        return False
    return multirun or int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0
