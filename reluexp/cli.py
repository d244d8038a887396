"""The Hydra app: compose the typed config, find the run dir, call train.run()."""

import copy
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from reluexp import train
from reluexp.config import ConfigError, validate

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
EXPERIMENTS_DIR = REPO_ROOT / "experiments"


def run_id() -> str:
    """A directory name unique across processes and below one second: time, microseconds, pid."""
    return f"{datetime.now():%Y-%m-%d_%H-%M-%S.%f}_{os.getpid()}"


# Cached, like Hydra's own `now`, so every read of hydra.run.dir gives the same name.
OmegaConf.register_new_resolver("run_id", run_id, use_cache=True)
# `resume=<dir>` continues in that directory; Hydra's own files for it go beside the first ones.
OmegaConf.register_new_resolver(
    "run_dir", lambda resume: resume or f"outputs/runs/{run_id()}", use_cache=True
)
OmegaConf.register_new_resolver(
    "hydra_subdir",
    lambda resume: f".hydra/resume_{run_id()}" if resume else ".hydra",
    use_cache=True,
)

# Named studies live at the top level, outside conf/; each becomes an option of `experiment=`.
for preset in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
    ConfigStore.instance().store(
        group="experiment", name=preset.stem, node=OmegaConf.load(preset), package="_global_"
    )


def exit_with(error: ConfigError) -> None:
    """A user's mistake: one line on stderr and exit 2, no traceback."""
    print(f"reluexp: error: {error}", file=sys.stderr)
    sys.exit(2)


def check_writable(key: str, directory: str) -> None:
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".reluexp_write_probe"
        probe.touch()
        probe.unlink()
    except OSError as error:
        exit_with(ConfigError(f"{key}={directory}: cannot write there ({error.strerror})"))


class Preflight(Callback):
    """Checks that need no training, before Hydra creates a single directory."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.resume is not None and not Path(config.resume, "summary.json").is_file():
            exit_with(ConfigError(f"resume={config.resume}: not a run directory (no summary.json)"))
        task_config = copy.deepcopy(config)
        with read_write(task_config), open_dict(task_config):
            del task_config["hydra"]
        try:
            task_config = OmegaConf.to_object(task_config)
            validate(task_config)
            train.resolve_device(task_config.device)
        except ConfigError as error:
            exit_with(error)
        check_writable("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_writable("hydra.sweep.dir", config.hydra.sweep.dir)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    config = OmegaConf.to_object(cfg)
    hydra_config = HydraConfig.get()
    run_dir = Path(hydra_config.runtime.output_dir)
    try:
        if config.resume is not None:
            return train.resume(run_dir)
        return train.run(config, run_dir, overrides=hydra_config.overrides.task)
    except ConfigError as error:
        exit_with(error)
    except train.Interrupted as interrupted:
        sys.exit(128 + interrupted.signum)
