"""A stopped sweep run again into its own directory, by the command its closing line gives: each
job continues where it stopped, a finished one is left as it is. A directory holds one sweep: a
command whose jobs, or whose jobs' configs, are not the directory's is refused before anything
runs."""

import shlex
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from reluexp.config import ConfigError, config_dict
from reluexp.run.rundir import shown_path
from reluexp.sweeps.report.discovery import find_jobs, jobs_in, plan_problem, planned_jobs
from reluexp.sweeps.workers import threads_per_job
from reluexp.validation import task_config

# Job statuses a finish command continues.
UNFINISHED = ("interrupted", "not started", "running")


def finish_command(sweep_dir: Path) -> str | None:
    """The command that finishes a stopped sweep: the sweep's own command line (multirun.yaml's
    overrides) into its own directory. None without a readable multirun.yaml, or for a sweeper
    that chose its jobs as it went (run again, it would choose others)."""
    if not isinstance(planned_jobs(sweep_dir), list):
        return None
    overrides = OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides
    arguments = [*overrides.hydra, *overrides.task]
    kept = [a for a in arguments if not a.startswith(("hydra.sweep.dir=", "hydra.mode="))]
    return shlex.join(["python", "-m", "reluexp", "-m", *kept, f"hydra.sweep.dir={sweep_dir}"])


def paired_command(sweep_dir: Path, targets: list[str]) -> str | None:
    """The sweep's command training each of `targets` (its own activation targets and the
    references they lack) as activation.target: the report pairs each custom job with its
    reference's job of the same seed. None without a readable multirun.yaml (or for a sweeper
    that chose its jobs as it went)."""
    if not isinstance(planned_jobs(sweep_dir), list):
        return None
    task = OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task
    kept = [a for a in task if not a.startswith("activation.target=")]
    swept = f"activation.target={','.join(targets)}"
    return shlex.join(["python", "-m", "reluexp", "-m", *kept, swept])


def check_same_sweep(config: DictConfig) -> None:
    """A sweep into a directory that already holds one (multirun.yaml) finishes that sweep: its
    jobs must be the directory's, in the same order, and each job that ran must compose to the
    config it ran with (a config file edited since would train the rest differently). Otherwise
    a ConfigError names what differs."""
    sweep_dir = Path(config.hydra.sweep.dir)
    if not (sweep_dir / "multirun.yaml").is_file():
        return
    where = f"hydra.sweep.dir={shown_path(sweep_dir)} holds another sweep"
    before, now = planned_jobs(sweep_dir), jobs_in(config.hydra)
    if before is None:
        raise ConfigError(
            f"hydra.sweep.dir={shown_path(sweep_dir)}: {plan_problem(sweep_dir)}: not a sweep "
            "this command can finish; sweep into a new directory"
        )
    if not isinstance(before, list) or not isinstance(now, list):
        raise ConfigError(
            f"hydra.sweep.dir={shown_path(sweep_dir)}: a sweeper that chooses its jobs as it goes "
            "(Optuna) cannot finish a sweep; sweep into a new directory"
        )
    advice = f"sweep into a new directory, or finish it with: {finish_command(sweep_dir)}"
    if before != now:
        raise ConfigError(f"{where}: {jobs_difference(before, now)}; {advice}")
    loader = GlobalHydra.instance().config_loader()
    for job in find_jobs(sweep_dir):
        if job.summary.config is None or job.run_dir is None:
            continue
        job_config = task_config(loader.load_sweep_config(config, job.summary.overrides))
        if job_config.threads is None:
            job_config.threads = threads_per_job(config.hydra)
        differs = first_difference(job.summary.config, config_dict(job_config))
        if differs is not None:
            key, ran, composed = differs
            raise ConfigError(
                f"{where}: its job {job.run_dir.name} ran with {key}={ran!r}, this command "
                f"composes {key}={composed!r} for it (a config file changed since?); {advice}"
            )


def jobs_difference(before: list[list[str]], now: list[list[str]]) -> str:
    """What tells two sweeps' job lists apart, in words."""
    seen_before = {o for job in before for o in job}
    seen_now = {o for job in now for o in job}
    if seen_before != seen_now:
        return (
            f"its jobs have {' '.join(sorted(seen_before - seen_now)) or 'no other override'}, "
            f"this command's {' '.join(sorted(seen_now - seen_before)) or 'no other override'}"
        )
    if len(before) != len(now):
        return f"it has {len(before)} jobs, this command {len(now)}"
    number = next(i for i, (a, b) in enumerate(zip(before, now)) if a != b)
    return f"its job {number} is {' '.join(before[number])}, this command's {' '.join(now[number])}"


def first_difference(a: Any, b: Any, key: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted key whose value differs between two configs as plain values."""
    if isinstance(a, dict) and isinstance(b, dict):
        for name in dict.fromkeys([*a, *b]):
            found = first_difference(a.get(name), b.get(name), f"{key}.{name}" if key else name)
            if found is not None:
                return found
        return None
    return None if a == b else (key, a, b)
