"""The Hydra app: compose the typed config, find the run dir, call train.run()."""

import copy
import json
import logging
import math
import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from reluexp import report, train
from reluexp.config import Config, ConfigError, validate
from reluexp.sink import record_failure

log = logging.getLogger("reluexp")

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


def task_config(cfg: DictConfig) -> Config:
    """The typed task config: the composed config without its `hydra` node."""
    cfg = copy.deepcopy(cfg)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_object(cfg)


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
            if not Path(config.resume, "summary.json").is_file():
                exit_with(
                    ConfigError(f"resume={config.resume}: not a run directory (no summary.json)")
                )
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
            train.resolve_device(typed.device)
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
        summary_path = run_dir / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        total = count_jobs(config)
        print(
            f"[{config.hydra.job.num + 1}/{total or '?'}] {' '.join(job_return.overrides)} "
            f"{summary.get('status', 'failed')} loss={summary.get('final_loss', math.nan):.4g} "
            f"in {summary.get('wall_time_s', math.nan):.1f} s",
            file=sys.stderr,
        )

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep's summary; failed jobs make the sweep exit non-zero, after all have run."""
        sweep_dir = Path(config.hydra.sweep.dir)
        jobs = report.write_report(sweep_dir)
        failed = [job for job in jobs if job.summary.get("status") == "failed"]
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
    summary = json.loads((run_dir / "summary.json").read_text())
    run_dir = Path(os.path.relpath(run_dir)) if run_dir.is_relative_to(Path.cwd()) else run_dir
    return (
        f"reluexp: {summary['status']} after {summary['steps_done']} steps, final loss "
        f"{summary['final_loss']!r}. Run dir: {run_dir}. Dashboard: tensorboard --logdir {run_dir}"
    )


def one_line(error: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line composition errors, as one line."""
    text = str(error).strip()
    line = text.splitlines()[0] if text else type(error).__name__
    cause = str(error.__cause__).strip() if error.__cause__ is not None else ""
    if cause:
        line = f"{line.rstrip('.')}: {cause.splitlines()[0]}"
    # A missing group option comes with the available ones, one per tab-indented line.
    options = re.findall(r"^\t(\S+)$", text, flags=re.M)
    if options:
        line += f"; available: {', '.join(options)}"
    return line


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


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def task(cfg: DictConfig) -> float:
    config = OmegaConf.to_object(cfg)
    hydra_config = HydraConfig.get()
    run_dir = Path(hydra_config.runtime.output_dir)
    overrides = hydra_config.overrides.task
    if config.threads is None:
        config.threads = threads_for(hydra_config)
    log.setLevel(
        logging.DEBUG if config.verbose else logging.WARNING if config.quiet else logging.INFO
    )
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
        if not (run_dir / "summary.json").is_file():
            record_failure(run_dir, overrides, error)
        log.error("job failed: %s: %s", type(error).__name__, error)
        return math.nan
