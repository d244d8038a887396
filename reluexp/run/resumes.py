"""Which run a command continues, and what it may import: `resume=DIR` as a user pastes it,
a requeued SLURM job, a sweep's job run again into its own directory; the dotted paths a
resume imports beyond reluexp's and torch's only once the user names them again."""

import os
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from reluexp.config import Config, DataName
from reluexp.record.summary import SUMMARY_NAME


def imported_paths(config: Config) -> dict[str, str]:
    """The config's dotted paths that a run imports, by key."""
    paths = {"activation.target": config.activation.target}
    if isinstance(config.activation.surrogate, str):
        paths["activation.surrogate"] = config.activation.surrogate
    if config.data.name == DataName.callable and config.data.loader is not None:
        paths["data.loader"] = config.data.loader
    return paths


# What `resume=DIR key=path` may name to confirm a stored dotted path (imported_paths).
CONFIRMABLE = ("activation.target", "activation.surrogate", "data.loader")


def unquoted(override: str) -> str:
    """`key=value` as Hydra reads the override: `data.loader='my.loader'` is
    `data.loader=my.loader`."""
    parsed = OverridesParser.create().parse_override(override)
    return f"{parsed.get_key_element()}={parsed.value()}"


def is_confirmation(override: str, stored: DictConfig) -> bool:
    """`key=path` for a dotted path the stored config holds as it is (quoted or not)."""
    key, _, value = unquoted(override).partition("=")
    return key in CONFIRMABLE and OmegaConf.select(stored, key) == value


def confirmed_paths(config: Config, hydra_config: DictConfig) -> list[str]:
    """The dotted paths a resume may import beyond reluexp's and torch's, as `key=path`: those
    named again on this command line; for a requeued SLURM job or a finished sweep's job, its
    own config's (the config that started it)."""
    if config.resume is not None:
        named = [unquoted(o) for o in hydra_config.overrides.task]
        return [o for o in named if o.partition("=")[0] in CONFIRMABLE]
    return [f"{key}={path}" for key, path in imported_paths(config).items()]


def hydra_quoted_resume(arg: str) -> str:
    """`resume=<dir>` as a user pastes it, quoted for Hydra: job directories hold `=` and `,`."""
    value = arg.removeprefix("resume=")
    if not arg.startswith("resume=") or value == "null" or value[:1] in ("'", '"'):
        return arg
    return "resume='" + value.replace("'", "\\'") + "'"


def requeued(run_dir: Path) -> bool:
    """A SLURM job started again (requeued after a time limit or preemption) continues the run
    its first start left in the same directory."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    return restarts > 0 and (run_dir / SUMMARY_NAME).is_file()
