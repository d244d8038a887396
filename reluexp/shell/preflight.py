"""Pre-flight: everything checked before Hydra makes a directory, where a mistake is one line.
A single run's start (Started: its config checked and prepared, or the run it resumes), and a
sweep's (its jobs, each distinct one checked once and prepared for the job that runs it; the
directory's own sweep, if it has one).
torch is imported only once a run's start is checked: `--help` and a mistyped key answer
without it."""

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from reluexp.config import ConfigError, config_dict
from reluexp.hydra_glue import SEARCH_SPACE
from reluexp.run.rundir import RESERVE_BYTES
from reluexp.sweeps.finish import check_same_sweep
from reluexp.sweeps.report.discovery import jobs_in
from reluexp.sweeps.slurm import check_slurm_resources
from reluexp.validation import OPEN_KEYS, TOP_GROUPS, close_match, config_keys, task_config

# What Hydra writes into a run's directory before the run starts (.hydra/'s three files, the
# log), with room to spare: about six pages of a file system.
START_FILES_BYTES = 64 * 1024
# What a resume command may say besides the run it continues: how much it prints.
SAID_ON_RESUME = ("resume", "quiet", "verbose")


def check_writable(key: str, directory: str) -> None:
    """The directory takes files: a read-only place or a full disk is one line before Hydra
    writes anything there. The probe is the size of what a run writes before it trains: Hydra's
    files and the log (a few pages) and the run's disk reserve (run.rundir.DiskReserve)."""
    path = Path(directory)
    probe = path / ".reluexp_write_probe"
    created = False
    try:
        created = not path.exists()
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(bytes(START_FILES_BYTES + RESERVE_BYTES))
        probe.unlink()
    except OSError as error:
        with contextlib.suppress(OSError):
            probe.unlink(missing_ok=True)
            if created and path.is_dir() and not any(path.iterdir()):
                path.rmdir()
        raise ConfigError(f"{key}={directory}: cannot write there ({error.strerror})") from None


def check_job_name(name: str) -> None:
    """hydra.job.name names the log file: it must be one valid file name."""
    if not name or "/" in name or "\0" in name or name in (".", "..") or len(name.encode()) > 250:
        raise ConfigError(f"hydra.job.name={name!r}: must be a valid file name (no '/')")


@dataclass(frozen=True)
class Started:
    """A single run's checked start: a fresh run's checked and prepared config
    (run.runner.Prepared), or the run it resumes (run.resumes.ResumePlan: ended, when there is
    nothing to resume)."""

    prepared: Any = None
    resume: Any = None


def named_keys(overrides: Iterable[str]) -> dict[str, str]:
    """A command line's overrides as Hydra reads them, key -> value (`data.loader='my.load'`
    is data.loader -> my.load), but those a resume may say (SAID_ON_RESUME)."""
    parser = OverridesParser.create()
    named = {}
    for override in overrides:
        parsed = parser.parse_override(override)
        if parsed.get_key_element() not in SAID_ON_RESUME:
            named[parsed.get_key_element()] = str(parsed.value())
    return named


def start_run(config: DictConfig) -> Started:
    """A single run's pre-flight: its job name, its config (checked and prepared: the device,
    the data read, the activation resolved) or the run it resumes (nothing of its config
    changed, what it imports confirmed), and room for its files."""
    from reluexp.run.resumes import plan_resume
    from reluexp.run.runner import prepare

    check_job_name(config.hydra.job.name)
    if config.resume is not None:
        started = Started(
            resume=plan_resume(Path(config.resume), named_keys(config.hydra.overrides.task))
        )
        if started.resume.ended:  # nothing will be written
            return started
    else:
        started = Started(prepared=prepare(task_config(config)))
    check_writable("hydra.run.dir", config.hydra.run.dir)
    return started


def start_sweep(config: DictConfig) -> dict[tuple[str, ...], Any]:
    """A sweep's pre-flight: its job name, what SLURM can schedule, the directory's own sweep
    when it has one (sweeps.finish), each distinct job (all its overrides but the seed)
    checked as a single run's start is, and room for its files. A mistake every such job
    would make (a param its activation does not take, a data file that is not there) is one
    line before any job runs, not a failed job directory each; a sweeper that chooses as it
    goes (Optuna) is checked job by job. Returns what each checked job was prepared with, by
    its overrides: a job the sweep runs in this process starts from it (its model is not built
    twice)."""
    from reluexp.run.runner import prepare

    check_job_name(config.hydra.job.name)
    if "SlurmLauncher" in str(config.hydra.launcher.get("_target_", "")):
        check_slurm_resources(config.hydra.launcher)
    check_same_sweep(config)
    planned = jobs_in(config.hydra)
    # Jobs in other processes (joblib's workers, submitit's) prepare their own.
    in_this_process = str(config.hydra.launcher.get("_target_", "")).endswith(".BasicLauncher")
    prepared: dict[tuple[str, ...], Any] = {}
    if isinstance(planned, list):
        loader = GlobalHydra.instance().config_loader()
        checked: set[tuple[str, ...]] = set()
        for number, job in enumerate(planned):
            distinct = tuple(o for o in job if not o.startswith("seed="))
            if distinct in checked:
                continue
            checked.add(distinct)
            try:
                job_config = task_config(loader.load_sweep_config(config, job))
                made = prepare(job_config)
                if in_this_process:
                    prepared[tuple(job)] = PreparedJob(config_dict(job_config), made)
            except ConfigError as error:
                raise ConfigError(f"job {number} ({' '.join(job)}): {error}") from None
    else:
        check_search_space(config)
    check_writable("hydra.sweep.dir", config.hydra.sweep.dir)
    return prepared


@dataclass(frozen=True)
class PreparedJob:
    """A sweep job the pre-flight prepared: its config (as a dict) and what run.runner.prepare
    made of it."""

    config: dict[str, Any]
    prepared: Any


def check_search_space(config: DictConfig) -> None:
    """A sweeper that chooses as it goes (Optuna) searches keys of the task's config: its
    params and the command line's search-space overrides. A key that is none is one line
    before the study starts, with the key it most likely meant (a key added with `+` under
    OPEN_KEYS is the activation's own)."""
    task = OmegaConf.to_container(config, resolve=False)
    del task["hydra"]
    keys = {*config_keys(task), *TOP_GROUPS}
    searched = [(SEARCH_SPACE + str(key), str(key)) for key in config.hydra.sweeper.params or {}]
    for override in OverridesParser.create().parse_overrides(list(config.hydra.overrides.task)):
        key = override.key_or_group
        if override.is_sweep_override() and not (override.is_add() and key.startswith(OPEN_KEYS)):
            searched.append((key, key))
    for shown, key in searched:
        if key not in keys:
            match = close_match(key, keys)
            raise ConfigError(
                f"{shown}: no such key to search" + (f"; did you mean {match}?" if match else "")
            )
