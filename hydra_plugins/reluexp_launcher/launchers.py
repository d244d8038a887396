"""The launchers behind `hydra/launcher=submitit_local`, `submitit_slurm` and `slurm`:
hydra-submitit-launcher's, launching through reluexp.sweeps.launcher (each job followed to its
end)."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn

try:
    from hydra_plugins.hydra_submitit_launcher import config, submitit_launcher
except ImportError:  # the `sweeps` extra is not installed: no submitit launchers to offer
    config = submitit_launcher = None


def launch(
    launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    """Submit the jobs and follow each to its end (reluexp.sweeps.launcher)."""
    from reluexp.sweeps import (
        launcher as launching,  # imported by a sweep only: plugin scans stay fast
    )

    return launching.launch(launcher, [list(o) for o in job_overrides], initial_job_idx)


if submitit_launcher is not None:

    class LocalLauncher(submitit_launcher.LocalLauncher):
        cluster = "local"  # submitit's executor
        launch = launch

    class SlurmLauncher(submitit_launcher.SlurmLauncher):
        cluster = "slurm"
        launch = launch

    @dataclass
    class LocalConf(config.LocalQueueConf):
        _target_: str = f"{LocalLauncher.__module__}.LocalLauncher"

    @dataclass
    class SlurmConf(config.SlurmQueueConf):
        _target_: str = f"{SlurmLauncher.__module__}.SlurmLauncher"


def register(plugins: Plugins) -> None:
    """Make these launchers Hydra's `submitit_local` and `submitit_slurm`: the classes known to
    Hydra, and their configs stored under those names in place of hydra-submitit-launcher's.
    Called once Hydra has scanned its plugins (which stores theirs)."""
    if submitit_launcher is None:
        return
    for launcher, node in [(LocalLauncher, LocalConf), (SlurmLauncher, SlurmConf)]:
        plugins.register(launcher)
        name = "submitit_local" if launcher is LocalLauncher else "submitit_slurm"
        ConfigStore.instance().store(
            group="hydra/launcher", name=name, node=node, provider="reluexp"
        )
