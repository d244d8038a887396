"""`python -m reluexp`: the Hydra app. Compose the typed config, run it in its run dir, and say
in one line on stderr how it ended."""

import functools
import logging
import math
import os
import shlex
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from reluexp import report, train
from reluexp.activations import resolve_activation
from reluexp.config import Config, ConfigError, validate
from reluexp.environment import (
    check_memory,
    child_processes,
    command_line,
    exit_without_teardown,
    resolve_device,
    slurm_job_id,
    stop_processes,
)
from reluexp.hydra_glue import CONFIG_PATH, one_line, task_config
from reluexp.slurm import SubmititWatch, check_slurm_resources
from reluexp.summary import SUMMARY_NAME, RunSummary, SummaryError

log = logging.getLogger("reluexp")
# A failed run's traceback: into the run's log file only (conf/config.yaml), never the terminal.
traceback_log = logging.getLogger("reluexp.traceback")


def exit_with(error: ConfigError) -> None:
    """A user's mistake: one line on stderr and exit 2, no traceback."""
    print(f"reluexp: error: {error}", file=sys.stderr)
    sys.exit(2)


def check_writable(key: str, directory: str) -> None:
    """The directory takes files: a read-only place or a full disk is one line before Hydra
    writes anything there (the probe is the size of a run's first files)."""
    path = Path(directory)
    created = not path.exists()
    probe = path / ".reluexp_write_probe"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(bytes(64 * 1024))
    except OSError as error:
        probe.unlink(missing_ok=True)
        if created and path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        exit_with(ConfigError(f"{key}={directory}: cannot write there ({error.strerror})"))
    probe.unlink()


def check_job_name(name: str) -> None:
    """hydra.job.name names the log file: it must be one valid file name."""
    if not name or "/" in name or "\0" in name or name in (".", "..") or len(name.encode()) > 250:
        raise ConfigError(f"hydra.job.name={name!r}: must be a valid file name (no '/')")


class Lifecycle(Callback):
    """Checks before Hydra creates a single directory; the summary after a sweep."""

    watch: SubmititWatch | None = None

    def __getstate__(self) -> dict[str, Any]:
        # The submitit launcher pickles the callbacks into every job; the watch stays here.
        return {key: value for key, value in vars(self).items() if key != "watch"}

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
            check_job_name(config.hydra.job.name)
            typed = task_config(config)
            validate(typed)
            check_memory(typed, resolve_device(typed.device))
            if config.resume is None:  # a resumed run imports its own, stored target
                resolve_activation(typed.activation.target, typed.activation.params)
        except ConfigError as error:
            exit_with(error)
        check_writable("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        launcher = str(config.hydra.launcher.get("_target_", ""))
        try:
            check_job_name(config.hydra.job.name)
            if "SlurmLauncher" in launcher:
                check_slurm_resources(config.hydra.launcher)
        except ConfigError as error:
            exit_with(error)
        check_writable("hydra.sweep.dir", config.hydra.sweep.dir)
        if in_worker_processes(config.hydra):
            stop_workers_on_signals(Path(config.hydra.sweep.dir))
        if "submitit" in launcher:
            # The jobs run elsewhere; their lines reach this terminal through the watch.
            # multirun.yaml, which says how many jobs there are, is written after this call.
            total = functools.cache(lambda: count_jobs(config))

            def line(number: int, summary: RunSummary) -> str:
                return job_line(number, total(), summary)

            self.watch = SubmititWatch(
                Path(config.hydra.sweep.dir),
                str(config.hydra.launcher.submitit_folder),
                on_slurm="SlurmLauncher" in launcher,
                job_line=None if config.quiet else line,
            )
            self.watch.start()

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """In a sweep, one line per finished job: [3/12] activation=relu seed=1 completed ..."""
        if HydraConfig.get().mode != RunMode.MULTIRUN or config.quiet:
            return
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        try:
            summary = RunSummary.read(run_dir)
        except SummaryError:
            summary = RunSummary(status="failed", overrides=list(job_return.overrides))
        print(job_line(config.hydra.job.num, count_jobs(config), summary), file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep's summary; failed jobs make the sweep exit non-zero, after all have run."""
        lost = 0
        if self.watch is not None:
            self.watch.stop()
            lost = self.watch.lost
        jobs = write_sweep_summary(Path(config.hydra.sweep.dir))
        if lost or any(job.summary.status == "failed" for job in jobs):
            sys.exit(1)


def job_line(number: int, total: int | None, summary: RunSummary) -> str:
    """A finished sweep job in one line: [3/12] activation=relu seed=1 completed loss=... ."""
    line = f"[{number + 1}/{total or '?'}] {' '.join(summary.overrides)} {summary.status}"
    if summary.error:
        line += f": {summary.error}"
    else:
        final_loss = math.nan if summary.final_loss is None else summary.final_loss
        wall_time = math.nan if summary.wall_time_s is None else summary.wall_time_s
        line += f" loss={final_loss:.4g} in {wall_time:.1f} s"
    if summary.slurm_job_id:
        line += f" (SLURM job {summary.slurm_job_id})"
    return line


def write_sweep_summary(sweep_dir: Path) -> list[report.Job]:
    jobs = report.write_report(sweep_dir)
    failed = [job for job in jobs if job.summary.status == "failed"]
    log.info("Sweep summary: %s", sweep_dir / "summary.md")
    if failed:
        log.error("%d of %d jobs failed; see %s", len(failed), len(jobs), sweep_dir / "summary.md")
    return jobs


def count_jobs(job_config: DictConfig) -> int | None:
    """How many jobs the sweep launches: Optuna's n_trials, or the size of the grid."""
    planned = report.planned_jobs(Path(job_config.hydra.sweep.dir))
    return planned if planned is None or isinstance(planned, int) else len(planned)


def in_worker_processes(hydra_config: DictConfig) -> bool:
    """Jobs run in joblib's local worker processes, not in the process that launched them."""
    return "joblib" in str(hydra_config.launcher.get("_target_", ""))


def stop_workers_on_signals(sweep_dir: Path) -> None:
    """SIGINT/SIGTERM to a parallel sweep reach its workers: each job stops at a step boundary
    (checkpoint, `interrupted`); then the sweep summary is written and the sweep exits."""

    def stop(signum: int, frame: Any) -> None:
        signal.signal(signum, signal.SIG_IGN)  # one stop at a time
        # loky's resource tracker ends by itself once the workers are gone (signalled, it
        # prints a traceback); the workers stop at a step boundary.
        workers = [pid for pid in child_processes() if "resource_tracker" not in command_line(pid)]
        stop_processes(workers, signum)
        write_sweep_summary(sweep_dir)
        # Exit now: the launcher would only wait on workers that are gone.
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


def threads_for(hydra_config: DictConfig) -> int | None:
    """Parallel local jobs share the cores: each gets its slice, so none oversubscribes."""
    launcher = hydra_config.launcher
    if not in_worker_processes(hydra_config):
        return None
    cores = os.cpu_count() or 1
    n_jobs = launcher.n_jobs if launcher.n_jobs > 0 else cores
    return max(1, cores // min(n_jobs, cores))


def closing_line(run_dir: Path, summary: RunSummary | None = None) -> str:
    """The run's outcome in one line: its directory, how to resume it, how to see it."""
    summary = summary or RunSummary.read(run_dir)
    shown = Path(os.path.relpath(run_dir)) if run_dir.is_relative_to(Path.cwd()) else run_dir
    quoted = shlex.quote(str(shown))
    line = f"reluexp: {summary.status}"
    if summary.steps_done is not None:
        line += f" after {summary.steps_done} steps"
    if summary.status == "failed":
        line += f": {summary.error}. Run dir: {shown} (traceback in {shown / 'reluexp.log'})."
    else:
        line += f", final loss {summary.final_loss!r}. Run dir: {shown}."
    if summary.warnings:
        line += f" Warnings: {'; '.join(summary.warnings)}."
    if summary.status == "interrupted":
        line += f" Resume: python -m reluexp resume={quoted}."
    return f"{line} Dashboard: tensorboard --logdir {quoted}"


def hydra_quoted_resume(arg: str) -> str:
    """`resume=<dir>` as a user pastes it, quoted for Hydra: job directories hold `=` and `,`."""
    value = arg.removeprefix("resume=")
    if not arg.startswith("resume=") or value == "null" or value[:1] in ("'", '"'):
        return arg
    return "resume='" + value.replace("'", "\\'") + "'"


def main() -> None:
    """The console script and `python -m reluexp`; the process ends as soon as the app has."""
    for name in ("stdout", "stderr"):
        # Started with it closed (`2>&-`, a daemon): what reluexp says there is dropped.
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (the process's to the end)
    try:
        app()
    except SystemExit as stop:
        exit_without_teardown(stop.code)
    exit_without_teardown(0)


def app() -> None:
    """The Hydra app, with a composition error as one line and exit 2."""
    sys.argv[1:] = [hydra_quoted_resume(arg) for arg in sys.argv[1:]]
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        task()  # the user asked for Hydra's full trace
        return
    # Hydra then raises composition errors to us instead of printing them over several lines.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # A log file on a full disk: its handler's failure is not the user's traceback to read.
    logging.raiseExceptions = False
    try:
        task()
    except (HydraException, OmegaConfBaseException) as error:
        print(f"reluexp: error: {one_line(error)}", file=sys.stderr)
        sys.exit(2)
    except OSError as error:  # Hydra writing the run's own files (a full or read-only disk)
        where = f" {error.filename}" if error.filename else ""
        print(
            f"reluexp: error: cannot write the run's files{where}: {error.strerror}",
            file=sys.stderr,
        )
        sys.exit(1)
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
    """One run or sweep job. Its outcome reaches stderr in one line (a sweep's job lines come
    from Lifecycle); a failure in a sweep is a result, recorded, and the other jobs run."""
    run_dir = Path(hydra_config.runtime.output_dir)
    overrides = list(hydra_config.overrides.task)
    single = hydra_config.mode != RunMode.MULTIRUN
    try:
        if config.resume is not None or requeued(run_dir):
            final_loss = train.resume(run_dir)
        else:
            final_loss = train.run(config, run_dir, overrides=overrides)
    except train.Interrupted as interrupted:
        print(closing_line(run_dir), file=sys.stderr)
        if interrupted.signum == signal.SIGUSR2:
            # SLURM's warning before a time limit or preemption: the run is checkpointed;
            # submitit's own handler (back in place) requeues the job, which resumes it.
            signal.raise_signal(signal.SIGUSR2)
        if slurm_job_id() is not None and not single:
            # A SLURM job stopped by scancel (SIGTERM) is a result of its sweep, recorded and
            # returned to the launcher, which would otherwise take it for a crash.
            return math.nan
        if in_worker_processes(hydra_config):
            # A worker stopped by its sweep ends here rather than take the next queued job; the
            # sweep's parent writes the summary once every worker has stopped.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + interrupted.signum)
        if not single:
            # The jobs after this one will not start: the summary lists them so.
            write_sweep_summary(Path(hydra_config.sweep.dir))
        sys.exit(128 + interrupted.signum)
    except Exception as error:
        if single and isinstance(error, ConfigError):
            exit_with(error)
        traceback_log.error("%s failed", run_dir, exc_info=error)
        summary = record_failure(run_dir, overrides, error)
        if single:
            print(closing_line(run_dir, summary), file=sys.stderr)
            sys.exit(1)
        log.error("job failed: %s: %s", type(error).__name__, error)
        return math.nan
    if single:
        print(closing_line(run_dir), file=sys.stderr)
    return final_loss


def requeued(run_dir: Path) -> bool:
    """A SLURM job started again (requeued after a time limit or preemption) continues the run
    its first start left in the same directory."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    return restarts > 0 and (run_dir / SUMMARY_NAME).is_file()


def record_failure(run_dir: Path, overrides: list[str], error: Exception) -> RunSummary:
    """The failed run's summary; written here when the run could not write it itself."""
    try:
        summary = RunSummary.read(run_dir)
    except SummaryError:
        summary = RunSummary(overrides=overrides)
    if summary.status != "failed":
        summary.status, summary.error = "failed", f"{type(error).__name__}: {error}"
        try:
            summary.write(run_dir)
        except OSError as write_error:
            log.error("%s: could not record the failure (%s)", run_dir, write_error.strerror)
    return summary
