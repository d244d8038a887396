"""`python -m reluexp`: the Hydra app. Compose the typed config, run it in its run dir, and say
in one line on stderr how it ended.

torch is imported where a run starts, not here: `--help` and a mistyped key answer without it
(importing torch takes about a second)."""

import contextlib
import logging
import math
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from reluexp.config import Config, ConfigError
from reluexp.hydra_glue import (
    COMPOSITION_ERRORS,
    CONFIG_PATH,
    one_line,
    raised_by_hydra,
    task_config,
    versions_line,
)
from reluexp.record.summary import SUMMARY_NAME, RunSummary, SummaryError, record_failure
from reluexp.run.resumes import (
    confirmed_paths,
    hydra_quoted_resume,
    is_confirmation,
    requeued,
)
from reluexp.run.rundir import RESERVE_BYTES, shown_path
from reluexp.run.signals import (
    STOPPED_AT_START_UP,
    InterruptSignals,
    StopSignals,
    slurm_job_id,
)
from reluexp.sweeps.finish import check_same_sweep
from reluexp.sweeps.report.discovery import find_jobs, jobs_in
from reluexp.sweeps.slurm import check_slurm_resources
from reluexp.sweeps.terminal import (
    Plan,
    job_line,
    loss_lines_labelled,
    say_sweep_start,
    sweep_plan,
    write_sweep_summary,
)
from reluexp.sweeps.workers import (
    exit_when_the_sweep_ends,
    in_worker_processes,
    stop_workers_on_signals,
    threads_per_job,
)

log = logging.getLogger("reluexp")
# A failed run's traceback: into the run's log file only (conf/config.yaml), never the terminal.
file_log = logging.getLogger("reluexp.logfile")
# What Hydra writes into a run's directory before the run starts (.hydra/'s three files, the
# log), with room to spare: about six pages of a file system.
START_FILES_BYTES = 64 * 1024


def exit_with(error: ConfigError) -> None:
    """A user's mistake: one line on stderr and exit 2, no traceback."""
    print(f"reluexp: error: {error}", file=sys.stderr)
    sys.exit(2)


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


@contextmanager
def start_up_checks() -> Iterator[None]:
    """Hydra turns an exception raised in a callback into a warning and runs on: here every
    error of a check before the run ends the command with one line and exit 2, before Hydra
    makes a directory."""
    try:
        yield
    except ConfigError as error:
        exit_with(error)
    except COMPOSITION_ERRORS as error:
        exit_with(ConfigError(one_line(error)))
    except OSError as error:
        where = f" {error.filename}" if error.filename else ""
        exit_with(ConfigError(f"cannot use{where}: {error.strerror or error}"))
    except Exception as error:
        exit_with(ConfigError(f"{type(error).__name__}: {one_line(error)}"))


# A single run's checked start (run.runner.Prepared): made by Lifecycle.on_run_start before
# Hydra makes the run's directory, taken by the run itself. (Hydra passes nothing from its
# callbacks to its task.)
STARTED: list[Any] = []
# The directory of the sweep this process launches, once Hydra has made it: a Ctrl-C between
# its jobs still writes its summary (app).
SWEEPS: list[Path] = []


class Lifecycle(Callback):
    """Checks before Hydra creates a single run's or a sweep's directory; the sweep's summary
    after its jobs."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from reluexp.run.runner import prepare

        with start_up_checks():
            check_job_name(config.hydra.job.name)
            if config.resume is not None:
                check_resume(config)
            if config.resume is None:  # a resumed run prepares from its own, stored config
                STARTED.append(prepare(task_config(config)))
            check_writable("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        with start_up_checks():
            check_job_name(config.hydra.job.name)
            if "SlurmLauncher" in str(config.hydra.launcher.get("_target_", "")):
                check_slurm_resources(config.hydra.launcher)
            check_same_sweep(config)
            check_sweep_jobs(config)
            check_writable("hydra.sweep.dir", config.hydra.sweep.dir)
        SWEEPS.append(Path(config.hydra.sweep.dir))
        if not config.quiet:
            say_sweep_start(config.hydra, SWEEPS[-1])
        if in_worker_processes(config.hydra):
            sweep_dir = Path(config.hydra.sweep.dir)
            stop_workers_on_signals(sweep_dir, lambda: stopped_sweep_end(sweep_dir))

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """In a sweep run in this process or its workers, one line per finished job:
        [3/12] activation=relu seed=1 completed ... (submitit's launcher prints its own)."""
        hydra_config = HydraConfig.get()
        launcher = str(hydra_config.launcher.get("_target_", ""))
        if hydra_config.mode != RunMode.MULTIRUN or config.quiet or "submitit" in launcher:
            return
        run_dir = Path(hydra_config.runtime.output_dir)
        try:
            summary = RunSummary.read(run_dir)
        except SummaryError:
            summary = RunSummary(status="failed", overrides=list(job_return.overrides))
        plan = sweep_plan(Path(config.hydra.sweep.dir))
        print(job_line(config.hydra.job.num, plan, summary), file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep's summary and closing line. A job that failed, or never ran, makes the
        sweep exit 1 once every job has ended."""
        jobs = write_sweep_summary(Path(config.hydra.sweep.dir))
        if any(job.summary.status in ("failed", "not started", "unreadable") for job in jobs):
            sys.exit(1)


def check_sweep_jobs(config: DictConfig) -> None:
    """Each distinct job of a grid sweep (its overrides but the seed) composed and checked as a
    single run is at its start: a mistake every such job would make (a param its activation
    does not take, a data file that is not there) is one line before any job runs, not a failed
    job directory each. A sweeper that chooses as it goes is checked job by job."""
    from reluexp.run.runner import prepare

    planned = jobs_in(config.hydra)
    if not isinstance(planned, list):
        return
    loader = GlobalHydra.instance().config_loader()
    checked: set[tuple[str, ...]] = set()
    for number, job in enumerate(planned):
        distinct = tuple(o for o in job if not o.startswith("seed="))
        if distinct in checked:
            continue
        checked.add(distinct)
        try:
            prepare(task_config(loader.load_sweep_config(config, job)))
        except ConfigError as error:
            raise ConfigError(f"job {number} ({' '.join(job)}): {error}") from None


def stopped_sweep_end(sweep_dir: Path) -> None:
    """A parallel sweep stopped by a signal, its workers gone: each interrupted job's closing
    line (a worker may be stopped before its own reaches the terminal), then the summary."""
    for job in find_jobs(sweep_dir):
        if job.summary.status == "interrupted" and job.run_dir is not None:
            print(closing_line(job.run_dir, job.summary), file=sys.stderr)
    write_sweep_summary(sweep_dir)


def check_resume(config: DictConfig) -> None:
    """The run directory to resume is one, the command changes nothing of its config, and
    there is something left to train: a run that already ended is said so, and the command
    ends here, before Hydra writes anything into the directory."""
    try:
        summary = RunSummary.read(Path(config.resume))
    except SummaryError as error:
        raise ConfigError(f"resume={error}") from None
    # A resumed run keeps its own config; silently ignoring a changed value would mislead. A
    # dotted path it imports may be named again, as it stands, to confirm it (runner.resume).
    stored = OmegaConf.create(summary.config or {})
    changed = [
        o
        for o in config.hydra.overrides.task
        if not o.startswith(("resume=", "quiet=", "verbose=")) and not is_confirmation(o, stored)
    ]
    if changed:
        raise ConfigError(
            f"resume={config.resume}: a resumed run keeps its own config; drop {' '.join(changed)}"
        )
    if summary.ended:
        print(
            f"reluexp: {config.resume} already {summary.status} after {summary.steps_done} "
            f"steps, {final_loss_text(summary)}; nothing to resume",
            file=sys.stderr,
        )
        sys.exit(0)


def say_closing(line: str) -> None:
    """A run's closing line: on stderr, and kept in its reluexp.log."""
    print(line, file=sys.stderr)
    file_log.info(line)


def final_loss_text(summary: RunSummary) -> str:
    """`final loss 639.53...`, or why there is none (summary.json holds null for NaN/inf)."""
    if summary.final_loss is None:
        return "no finite final loss"
    return f"final loss {summary.final_loss!r}"


def closing_line(run_dir: Path, summary: RunSummary | None = None) -> str:
    """The run's outcome in one line: its directory, how to resume it, how to see it."""
    summary = summary or RunSummary.read(run_dir)
    shown = shown_path(run_dir)
    line = f"reluexp: {summary.status}"
    if summary.steps_done is not None:
        line += f" after {summary.steps_done} steps"
    if summary.status == "failed":
        log_file = shown_path(run_dir / "reluexp.log")
        line += f": {summary.error}. Run dir: {shown} (traceback in {log_file})."
    else:
        if summary.status == "diverged" and summary.diverged_on:
            line += f" (non-finite {summary.diverged_on} at step {summary.diverged_at_step})"
        line += f", {final_loss_text(summary)}. Run dir: {shown}."
    if summary.warnings:
        line += f" Warnings: {'; '.join(summary.warnings)}."
    if summary.status == "interrupted":
        line += f" Resume: python -m reluexp resume={shown}."
    return f"{line} Dashboard: tensorboard --logdir {shown}"


def main() -> None:
    """The console script and `python -m reluexp`. Ends as the app ends: by returning, or
    with SystemExit carrying the exit status."""
    for name in ("stdout", "stderr"):
        # Started with it closed (`2>&-`, a daemon): what reluexp says there is dropped.
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (the process's to the end)
    app()


def app() -> None:
    """The Hydra app, with a composition error as one line and exit 2."""
    if "--version" in sys.argv[1:]:  # Hydra's own names Hydra only
        print(versions_line())
        return
    sys.argv[1:] = [hydra_quoted_resume(arg) for arg in sys.argv[1:]]
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        task()  # the user asked for Hydra's full trace
        return
    # Hydra then raises composition errors to us instead of printing them over several lines.
    os.environ["HYDRA_FULL_ERROR"] = "1"
    # A log file on a full disk: its handler's failure is not the user's traceback to read.
    logging.raiseExceptions = False
    # SIGTERM outside a run's training stops as Ctrl-C does there.
    interrupts = InterruptSignals()
    try:
        with interrupts:
            task()
    except KeyboardInterrupt:
        # Stopped outside a job's training (which stops at a step boundary): during start-up,
        # between a sweep's jobs or in its report. Nothing is lost; say where things stand, as
        # a job would. A second signal ends the process at once.
        with interrupts.next_one_kills():
            if SWEEPS and (SWEEPS[-1] / "multirun.yaml").is_file():
                write_sweep_summary(SWEEPS[-1])
            else:
                print(STOPPED_AT_START_UP, file=sys.stderr)
        sys.exit(128 + interrupts.signum)
    except COMPOSITION_ERRORS as error:
        print(f"reluexp: error: {one_line(error)}", file=sys.stderr)
        sys.exit(2)
    except ValueError as error:
        if not raised_by_hydra(error):
            raise
        print(f"reluexp: error: {error}", file=sys.stderr)  # `-m --cfg job`
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
        SWEEPS.clear()


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
        config.threads = threads_per_job(hydra_config)
    if hydra_config.mode != RunMode.MULTIRUN:
        with log_level(config):
            return run_job(config, hydra_config)
    plan = sweep_plan(Path(hydra_config.sweep.dir))
    with log_level(config), loss_lines_labelled(hydra_config.job.num, plan):
        return run_job(config, hydra_config, plan)


def run_job(config: Config, hydra_config: DictConfig, plan: Plan | None = None) -> float:
    """One run, or a job of the sweep `plan` describes. Its outcome reaches stderr in one line
    (a sweep's job lines come from Lifecycle); a failure in a sweep is a result, recorded, and
    the other jobs run. The stop policy is this entry point's: the first SIGINT or SIGTERM ends
    the run at a step boundary, checkpointed; a second exits at once, except in a parallel
    sweep's worker, which gets each stop twice (from the terminal's group and from its sweep)."""
    from reluexp.run import runner

    run_dir = Path(hydra_config.runtime.output_dir)
    overrides = list(hydra_config.overrides.task)
    single = hydra_config.mode != RunMode.MULTIRUN
    worker = in_worker_processes(hydra_config)
    # A sweep run again into its own directory (its finish command, checked to be the same
    # sweep: sweeps.finish): each job continues where it stopped; a finished one is left as
    # it is.
    continued = not single and (run_dir / SUMMARY_NAME).is_file()
    try:
        with StopSignals(second_exits=not worker) as stop:
            if config.resume is not None or requeued(run_dir) or continued:
                result = runner.resume(
                    run_dir, stop=stop, confirmed=confirmed_paths(config, hydra_config)
                )
            else:
                result = runner.run(
                    config,
                    run_dir,
                    overrides=overrides,
                    prepared=STARTED.pop() if STARTED else None,
                    stop=stop,
                    varying=(plan and plan.varying) or frozenset(),
                )
    except runner.Interrupted as interrupted:
        if worker:  # its sweep says it, once every worker has stopped (stopped_sweep_end)
            file_log.info(closing_line(run_dir))
        else:
            say_closing(closing_line(run_dir))
        if interrupted.signum == signal.SIGUSR2:
            # SLURM's warning before a time limit or preemption: the run is checkpointed;
            # submitit's own handler (back in place) requeues the job, which resumes it.
            signal.raise_signal(signal.SIGUSR2)
        if slurm_job_id() is not None and not single:
            # A SLURM job stopped by scancel (SIGTERM) is a result of its sweep, recorded and
            # returned to the launcher, which would otherwise take it for a crash.
            return math.nan
        if worker:
            # A worker stopped by its sweep takes no next queued job; the sweep's parent writes
            # the summary once no job is running (sweeps/workers.py).
            sys.stdout.flush()
            sys.stderr.flush()
            exit_when_the_sweep_ends(128 + interrupted.signum)
        if not single:
            # The jobs after this one will not start: the summary lists them so.
            write_sweep_summary(Path(hydra_config.sweep.dir))
        sys.exit(128 + interrupted.signum)
    except Exception as error:
        if single and isinstance(error, ConfigError):
            exit_with(error)
        file_log.error("%s failed", run_dir, exc_info=error)
        summary = record_failure(run_dir, overrides, error)
        if single:
            say_closing(closing_line(run_dir, summary))
            sys.exit(1)
        log.error("job failed: %s: %s", type(error).__name__, error)
        return math.nan
    if single:
        say_closing(closing_line(run_dir))
    return result.final_loss
