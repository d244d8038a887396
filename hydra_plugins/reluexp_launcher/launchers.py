"""The launchers behind `hydra/launcher=submitit_local`, `submitit_slurm` and `slurm`:
hydra-submitit-launcher's, launching through reluexp.sweeps.launcher (each job followed to its
end); and behind `hydra/launcher=joblib`, hydra-joblib-launcher's, whose wait a stop may end
at once."""

import contextlib
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.core.utils import JobReturn

try:
    from hydra_plugins.hydra_submitit_launcher import config, submitit_launcher
except ImportError:  # the `sweeps` extra is not installed: no submitit launchers to offer
    config = submitit_launcher = None
try:
    from hydra_plugins.hydra_joblib_launcher import config as joblib_config
    from hydra_plugins.hydra_joblib_launcher import joblib_launcher
except ImportError:
    joblib_config = joblib_launcher = None


def waiting_on_jobs() -> AbstractContextManager[None]:
    """A launcher's wait on its jobs, where the sweep's own stop ends it at once
    (reluexp.shell.sweepstop.SweepStop): the sweep of the command's session."""
    from reluexp.shell.session import Session

    session = Session.current()
    if session is None or session.sweep is None:
        return contextlib.nullcontext()
    return session.sweep.waiting()


def launch(
    launcher: Any, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
) -> list[JobReturn]:
    """Submit the jobs and follow each to its end (reluexp.sweeps.launcher)."""
    from reluexp.sweeps import (
        launcher as launching,  # imported by a sweep only: plugin scans stay fast
    )

    overrides = [list(o) for o in job_overrides]
    return launching.launch(launcher, overrides, initial_job_idx, waiting_on_jobs)


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


if joblib_launcher is not None:

    class JoblibLauncher(joblib_launcher.JoblibLauncher):
        """hydra-joblib-launcher's, its wait on the workers marked as where a stop ends the
        sweep at once (reluexp.shell.sweepstop.SweepStop)."""

        def launch(
            self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
        ) -> Sequence[JobReturn]:
            with waiting_on_jobs():
                return super().launch(job_overrides, initial_job_idx)

    @dataclass
    class JoblibConf(joblib_config.JobLibLauncherConf):
        _target_: str = f"{JoblibLauncher.__module__}.JoblibLauncher"


def register(plugins: Plugins) -> None:
    """Make these launchers Hydra's `submitit_local`, `submitit_slurm` and `joblib`: the
    classes known to Hydra, and their configs stored under those names in place of the
    plugins' own.
    Called once Hydra has scanned its plugins (which stores theirs)."""
    launchers = {}
    if submitit_launcher is not None:
        launchers |= {"submitit_local": (LocalLauncher, LocalConf)}
        launchers |= {"submitit_slurm": (SlurmLauncher, SlurmConf)}
    if joblib_launcher is not None:
        launchers["joblib"] = (JoblibLauncher, JoblibConf)
    for name, (launcher, node) in launchers.items():
        plugins.register(launcher)
        ConfigStore.instance().store(
            group="hydra/launcher", name=name, node=node, provider="reluexp"
        )
