"""The only Hydra-aware entry: compose the config, find the run dir, call train.run()."""

import os
import sys
from datetime import datetime
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from reluexp import train
from reluexp.config import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
EXPERIMENTS_DIR = REPO_ROOT / "experiments"


def run_id() -> str:
    """A directory name unique across processes and below one second: time, microseconds, pid."""
    return f"{datetime.now():%Y-%m-%d_%H-%M-%S.%f}_{os.getpid()}"


# Cached, like Hydra's own `now`, so every read of hydra.run.dir gives the same name.
OmegaConf.register_new_resolver("run_id", run_id, use_cache=True)

# Named studies live at the top level, outside conf/; each becomes an option of `experiment=`.
for preset in sorted(EXPERIMENTS_DIR.glob("*.yaml")):
    ConfigStore.instance().store(
        group="experiment", name=preset.stem, node=OmegaConf.load(preset), package="_global_"
    )


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    config = OmegaConf.to_object(cfg)
    hydra_config = HydraConfig.get()
    try:
        return train.run(
            config, Path(hydra_config.runtime.output_dir), overrides=hydra_config.overrides.task
        )
    except ConfigError as error:
        sys.exit(f"reluexp: error: {error}")


if __name__ == "__main__":
    main()
