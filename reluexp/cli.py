"""The Hydra app: compose the typed config, find the run dir, call train.run()."""

import logging
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from reluexp import report, train
from reluexp.config import Config, ConfigError, validate
from reluexp.environment import resolve_device
from reluexp.hydra_glue import CONFIG_PATH, one_line, task_config
from reluexp.summary import SUMMARY_NAME, RunSummary, SummaryError

log = logging.getLogger("reluexp")


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


class Lifecycle(Callback):
    """Checks before Hydra creates a single directory; the summary after a sweep."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.resume is not None:
            try:
                RunSummary.read(Path(config.resume))
            except SummaryError as error:
                exit_with(ConfigError(f"resume={error}"))
            # A resumed run keeps its own config; silently ignoring a changed value would mislead.
            changed = [
                o
                for o in config.hydra.overrides.task
                if not o.startswith(("resume=", "quiet=", "verbose="))
            ]
            if changed:
                exit_with(
                    ConfigError(
                        f"resume={config.resume}: a resumed run keeps its own config; "
                        f"drop {' '.join(changed)}"
                    )
                )
        try:
            typed = task_config(config)
            validate(typed)
            resolve_device(typed.device)
        except ConfigError as error:
            exit_with(error)
        check_writable("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_writable("hydra.sweep.dir", config.hydra.sweep.dir)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """In a sweep, one line per finished job: [3/12] activation=relu seed=1 completed ..."""
        if HydraConfig.get().mode != RunMode.MULTIRUN or config.quiet:
            return
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        try:
            summary = RunSummary.read(run_dir)
        except SummaryError:
            summary = RunSummary(status="failed")
        total = count_jobs(config)
        final_loss = math.nan if summary.final_loss is None else summary.final_loss
        wall_time = math.nan if summary.wall_time_s is None else summary.wall_time_s
        print(
            f"[{config.hydra.job.num + 1}/{total or '?'}] {' '.join(job_return.overrides)} "
            f"{summary.status} loss={final_loss:.4g} in {wall_time:.1f} s",
            file=sys.stderr,
        )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep's summary; failed jobs make the sweep exit non-zero, after all have run."""
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = report.write_report(sweep_dir)
        failed = [job for job in jobs if job.summary.status == "failed"]
        log.info("Sweep summary: %s", sweep_dir / "summary.md")
        if failed:
            log.error(
                "%d of %d jobs failed; see %s", len(failed), len(jobs), sweep_dir / "summary.md"
            )
            sys.exit(1)


def count_jobs(job_config: DictConfig) -> int | None:
    """How many jobs the sweep launches: Optuna's n_trials, or the size of the grid."""
    if "n_trials" in job_config.hydra.sweeper:
        return job_config.hydra.sweeper.n_trials
    # The grid's own overrides: a job's config holds only its point of the grid.
    multirun_yaml = Path(job_config.hydra.sweep.dir) / "multirun.yaml"
    if not multirun_yaml.is_file():
        return None
    hydra_config = OmegaConf.load(multirun_yaml).hydra
    # The preset's params, overridden key by key by the command line, as BasicSweeper does.
    grid = {str(k): str(v) for k, v in (hydra_config.sweeper.get("params") or {}).items()}
    for override in hydra_config.overrides.task:
        key, _, value = override.partition("=")
        grid[key] = value
    total = 1
    for parsed in OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in grid.items()]):
        if parsed.is_sweep_override():
            total *= len(list(parsed.sweep_string_iterator()))
    return total


def threads_for(hydra_config: DictConfig) -> int | None:
    """Parallel local jobs share the cores: each gets its slice, so none oversubscribes."""
    launcher = hydra_config.launcher
    if "joblib" not in str(launcher.get("_target_", "")):
        return None
    cores = os.cpu_count() or 1
    n_jobs = launcher.n_jobs if launcher.n_jobs > 0 else cores
    return max(1, cores // min(n_jobs, cores))


def closing_line(run_dir: Path) -> str:
    """The run's outcome in one line, with the command that opens its dashboard."""
    summary = RunSummary.read(run_dir)
    run_dir = Path(os.path.relpath(run_dir)) if run_dir.is_relative_to(Path.cwd()) else run_dir
    return (
        f"reluexp: {summary.status} after {summary.steps_done} steps, final loss "
        f"{summary.final_loss!r}. Run dir: {run_dir}. Dashboard: tensorboard --logdir {run_dir}"
    )


def main() -> None:
    """The console script and `python -m reluexp`: a composition error is one line, exit 2."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        task()  # the user asked for Hydra's full trace
        return
    # Hydra then raises composition errors to us instead of printing them over several lines.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        task()
    except (HydraException, OmegaConfBaseException) as error:
        print(f"reluexp: error: {one_line(error)}", file=sys.stderr)
        sys.exit(2)
    finally:
        del os.environ["HYDRA_FULL_ERROR"]


@contextmanager
def log_level(config: Config) -> Iterator[None]:
    """quiet/verbose for this job only: the next job of a sweep starts from the same level."""
    previous = log.level
    log.setLevel(
        logging.DEBUG if config.verbose else logging.WARNING if config.quiet else logging.INFO
    )
    try:
        yield
    finally:
        log.setLevel(previous)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="config")
def task(cfg: DictConfig) -> float:
    config = OmegaConf.to_object(cfg)
    hydra_config = HydraConfig.get()
    if config.threads is None:
        config.threads = threads_for(hydra_config)
    with log_level(config):
        return run_job(config, hydra_config)


def run_job(config: Config, hydra_config: DictConfig) -> float:
    """One run or sweep job; in a sweep a failure is a result, recorded, not raised."""
    run_dir = Path(hydra_config.runtime.output_dir)
    overrides = list(hydra_config.overrides.task)
    try:
        if config.resume is not None:
            final_loss = train.resume(run_dir)
        else:
            final_loss = train.run(config, run_dir, overrides=overrides)
        if hydra_config.mode != RunMode.MULTIRUN:
            print(closing_line(run_dir), file=sys.stderr)
        return final_loss
    except train.Interrupted as interrupted:
        sys.exit(128 + interrupted.signum)
    except Exception as error:
        if hydra_config.mode != RunMode.MULTIRUN:
            if isinstance(error, ConfigError):
                exit_with(error)
            raise
        # In a sweep a failure is a result: record it, let the other jobs run.
        if not (run_dir / SUMMARY_NAME).is_file():
            RunSummary(
                status="failed", overrides=overrides, error=f"{type(error).__name__}: {error}"
            ).write(run_dir)
        log.error("job failed: %s: %s", type(error).__name__, error)
        return math.nan
