"""A command's life under Hydra: the pre-flight before Hydra makes a directory, each job (a run in
its directory), a job line per finished sweep job, the sweep's summary, and how a job ends: one
table (ENDINGS) from where it runs and how it ended to its closing line and exit status. Hydra
makes the callbacks and runs the jobs; both find the command's Session as the current one."""

import enum
import logging
import math
import shlex
import shutil
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from reluexp.config import Config, ConfigError, config_dict
from reluexp.hydra_glue import COMPOSITION_ERRORS, one_line
from reluexp.record.summary import RunSummary, SummaryError, record_failure
from reluexp.record.tags import dashboard_command, quoted
from reluexp.run.rundir import RunHeld, shown_path
from reluexp.shell.labcheck import BoundedCheck
from reluexp.shell.preflight import start_run, start_sweep
from reluexp.shell.session import Session
from reluexp.shell.stops import STOPS, StopSignals
from reluexp.shell.sweepstop import SweepStop, exit_when_the_sweep_ends
from reluexp.sweeps.report.discovery import UNREADABLE, find_jobs
from reluexp.sweeps.terminal import (
    Plan,
    job_line,
    job_lines,
    loss_lines_labelled,
    say_sweep_start,
    sweep_plan,
    time_left,
    write_sweep_summary,
)
from reluexp.sweeps.workers import in_worker_processes, threads_per_job

log = logging.getLogger("reluexp")
# A failed run's traceback: into the run's log file only (conf/config.yaml), never the terminal.
file_log = logging.getLogger("reluexp.logfile")


def exit_with(error: ConfigError) -> None:
    """A user's mistake: one line on stderr and exit 2, no traceback."""
    print(f"reluexp: error: {error}", file=sys.stderr)
    sys.exit(2)


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


class Job:
    """The task Hydra runs for each job: a run in its directory, in this command's session (or,
    in a worker process of a parallel sweep, one of the job's own)."""

    def __call__(self, cfg: DictConfig) -> float:
        config = OmegaConf.to_object(cfg)
        hydra_config = HydraConfig.get()
        if config.threads is None:
            config.threads = threads_per_job(hydra_config)
        with Session.joined() as session:
            if hydra_config.mode != RunMode.MULTIRUN:
                with log_level(config):
                    return run_job(config, hydra_config, session)
            plan = sweep_plan(Path(hydra_config.sweep.dir))
            with log_level(config), loss_lines_labelled(hydra_config.job.num, plan):
                return run_job(config, hydra_config, session, plan)


def session() -> Session:
    """The command's session, which every callback runs in (cli.app)."""
    current = Session.current()
    assert current is not None, "reluexp's Hydra callbacks run inside a command's session"
    return current


class Lifecycle(Callback):
    """The pre-flight before Hydra creates a single run's or a sweep's directory, a job line
    per finished sweep job, the sweep's summary after its jobs."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        # The pre-flight runs the user's code (which may never return): a stop ends it there,
        # before it makes the run's directory.
        command = session()
        import_training(command)
        with start_up_checks(), command.start_up.raising():
            command.started = start_run(config)
        resumed = command.started.resume
        if resumed is not None and resumed.ended:  # before Hydra writes into its directory
            summary = resumed.summary
            print(
                f"reluexp: {config.resume} already {summary.status} after "
                f"{summary.steps_done} steps, {summary.outcome_text}; nothing to resume",
                file=sys.stderr,
            )
            sys.exit(0)

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_stops(session(), config.hydra)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        command = session()
        import_training(command)
        with start_up_checks(), command.start_up.raising():
            command.prepared = start_sweep(config)
        sweep_dir = Path(config.hydra.sweep.dir)
        plan = sweep_dir / "multirun.yaml"
        if not plan.exists():
            # Hydra's basic sweeper writes the sweep's config there, and its report reads it;
            # a sweeper that chooses as it goes (Optuna) does not.
            OmegaConf.save(config, plan)
        if "n_trials" in config.hydra.sweeper:
            import optuna  # the Optuna sweeper's, imported by it already

            # It announces the in-memory study it makes on a handler of its own, at INFO.
            optuna.logging.set_verbosity(optuna.logging.WARNING)
        if not config.quiet:
            say_sweep_start(config.hydra, sweep_dir)
        # A signal outside the jobs' training (which stops at a step boundary): between jobs,
        # while Hydra composes them, in a parallel sweep's wait on its workers, or in the
        # report. The sweep then ends as a stopped job's sweep does.
        parallel = in_worker_processes(config.hydra)
        command.sweep = SweepStop(
            sweep_dir, lambda: stopped_sweep_end(sweep_dir, parallel), parallel
        )
        command.owner.push(command.sweep)
        command.start_up.check()  # a stop before the sweep's took over

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs: Any) -> None:
        """In a sweep run in this process or its workers, one line per finished job:
        [3/12] activation=relu seed=1 completed ... (submitit's launcher prints its own)."""
        hydra_config = HydraConfig.get()
        if hydra_config.mode != RunMode.MULTIRUN or config.quiet or not job_lines(hydra_config):
            return
        run_dir = Path(hydra_config.runtime.output_dir)
        try:
            summary = RunSummary.read(run_dir)
        except SummaryError as error:  # says which file, and what it cannot read
            overrides = list(job_return.overrides)
            summary = RunSummary(status=UNREADABLE, overrides=overrides, error=str(error))
        plan = sweep_plan(Path(config.hydra.sweep.dir))
        left = time_left(Path(config.hydra.sweep.dir), config.hydra.job.num, plan)
        print(job_line(config.hydra.job.num, plan, summary) + left, file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """The sweep's summary and closing line. A job that failed, or never ran, makes the
        sweep exit 1 once every job has ended; a stop while the summary is written, 128 + the
        signal once it is written whole."""
        command = session()
        stop, command.sweep = command.sweep, None
        if stop is not None:
            stop.check()
        check = BoundedCheck(command, config.lab_seconds, config.quiet)
        jobs = write_sweep_summary(Path(config.hydra.sweep.dir), check)
        if stop is not None:
            stop.close()
            command.owner.pop(stop)
        signum = (stop and stop.signum) or check.stopped_by
        if signum is not None:
            sys.exit(128 + signum)
        if any(job.summary.status in ("failed", "not started", "unreadable") for job in jobs):
            sys.exit(1)


def import_training(command: Session) -> None:
    """torch and what a run is made of, imported while a stop is only recorded (raised inside
    torch's import, it can abort the interpreter in a C++ initializer); a stop that came ends
    the command once they are."""
    import reluexp._compat  # noqa: F401 (the sweep's jobs are listed with it)
    import reluexp.run.runner  # noqa: F401

    command.start_up.check()


def check_stops(command: Session, hydra_config: DictConfig) -> None:
    """Before a job trains: a stop that came ends the sweep (after its jobs so far) or the
    command, before anything trained (the single run's directory goes with it)."""
    if command.sweep is not None:
        command.sweep.check()
    try:
        command.start_up.check()
    except KeyboardInterrupt:
        remove_unstarted_run_dir(hydra_config)
        raise


START_FILES = {".hydra", "reluexp.log"}  # what Hydra writes into a run's directory first


def remove_unstarted_run_dir(hydra_config: DictConfig) -> None:
    """A single run's directory that holds only Hydra's start files (a stop came before the
    run began: no resume would understand it) is removed, unless it is where the command was
    launched (hydra.run.dir=.): there only the files go."""
    output_dir = OmegaConf.select(hydra_config, "runtime.output_dir")
    if hydra_config.mode == RunMode.MULTIRUN or not output_dir:
        return
    run_dir = Path(output_dir)
    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= START_FILES:
        launched_here = run_dir.resolve() == Path(hydra_config.runtime.cwd).resolve()
        shutil.rmtree(run_dir / ".hydra" if launched_here else run_dir, ignore_errors=True)
        (run_dir / "reluexp.log").unlink(missing_ok=True)


def stopped_sweep_end(sweep_dir: Path, parallel: bool) -> None:
    """A sweep stopped by a signal: with workers, each interrupted job's closing line (a worker
    may be stopped before its own reaches the terminal); then the summary."""
    if parallel:
        for job in find_jobs(sweep_dir):
            if job.summary.status == "interrupted" and job.run_dir is not None:
                print(closing_line(job.run_dir, job.summary), file=sys.stderr)
    write_sweep_summary(sweep_dir)


def say_closing(line: str) -> None:
    """A run's closing line: on stderr, and kept in its reluexp.log."""
    print(line, file=sys.stderr)
    file_log.info(line)


def launch_dir() -> Path:
    """Where the command was launched, which its closing line's paths are relative to: with
    hydra.job.chdir=true the process works in the run's directory."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.cwd)
    return Path.cwd()


def closing_line(run_dir: Path, summary: RunSummary | None = None) -> str:
    """The run's outcome in one line: its directory, how to resume it, how to see it."""
    summary = summary or RunSummary.read(run_dir)
    launched_from = launch_dir()
    shown = shown_path(run_dir, launched_from)
    line = f"reluexp: {summary.status}"
    if summary.steps_done is not None:
        line += f" after {summary.steps_done} steps"
    notes = []
    if summary.status == "diverged" and summary.diverged_on:
        notes.append(f"non-finite {summary.diverged_on} at step {summary.diverged_at_step}")
    if summary.skipped_steps:
        notes.append(
            f"fp16's gradient scaler skipped {summary.skipped_steps} of "
            f"{summary.recorded_steps} recorded steps"
        )
    if notes:
        line += f" ({'; '.join(notes)})"
    if summary.status == "failed":
        log_file = shown_path(run_dir / "reluexp.log", launched_from)
        line += f": {summary.error}. Run dir: {shown} (traceback in {log_file})."
    else:
        line += f", {summary.outcome_text}. Run dir: {shown}."
    if summary.warnings:
        line += f" Warnings: {'; '.join(summary.warnings)}."
    if summary.status == "interrupted":
        line += f" Resume: {quoted(resume_command(shown, summary))}."
    return f"{line} Dashboard: {quoted(dashboard_command(shown, summary.recorded_steps))}"


def resume_command(shown: str, summary: RunSummary) -> str:
    """The command that resumes the run (`shown`: its directory, quoted for a shell), naming
    again what its config imports outside reluexp
    and torch (a resume imports nothing else unnamed: run.resumes.plan_resume)."""
    from reluexp.config import config_from_dict
    from reluexp.run.resumes import confirmations_needed

    named = confirmations_needed(config_from_dict(summary.config)) if summary.config else []
    return " ".join(["python -m reluexp", f"resume={shown}", *map(shlex.quote, named)])


class Where(enum.Enum):
    """Where a job runs: alone, in a sweep in this process (or a submitit process of its own),
    in a parallel sweep's joblib worker, or as a SLURM job."""

    SINGLE = "single run"
    SWEEP = "sweep job"
    WORKER = "joblib worker"
    SLURM = "SLURM job"


def where_it_runs(hydra_config: DictConfig) -> Where:
    from reluexp.run.process import slurm_job_id

    if hydra_config.mode != RunMode.MULTIRUN:
        return Where.SINGLE
    if in_worker_processes(hydra_config):
        return Where.WORKER
    return Where.SLURM if slurm_job_id() is not None else Where.SWEEP


@dataclass(frozen=True)
class Ending:
    """What a job's end does: where its closing line goes (the terminal, the run's log only,
    or neither: a sweep's job line says it), and then: return its result to Hydra, exit with
    the status, or first the sweep's summary (the jobs after it will not start), or first wait
    for the sweep (a stopped joblib worker takes no next job: shell/sweepstop.py)."""

    closing: str  # "terminal", "log", ""
    then: str  # "return", "exit", "summary, exit", "wait, exit"


# Where a job runs x how it ended -> its Ending. `interrupted` exits 128 + the signal;
# `failed` 1 (a sweep records it and runs the next job); a user's mistake in a single run is
# one line and 2 before it (exit_with).
ENDINGS = {
    (Where.SINGLE, "ended"): Ending("terminal", "return"),
    (Where.SINGLE, "interrupted"): Ending("terminal", "exit"),
    (Where.SINGLE, "failed"): Ending("terminal", "exit"),
    (Where.SWEEP, "ended"): Ending("", "return"),
    (Where.SWEEP, "interrupted"): Ending("terminal", "summary, exit"),
    (Where.SWEEP, "failed"): Ending("", "return"),
    # Its sweep says its closing line once every worker has stopped (stopped_sweep_end).
    (Where.WORKER, "ended"): Ending("", "return"),
    (Where.WORKER, "interrupted"): Ending("log", "wait, exit"),
    (Where.WORKER, "failed"): Ending("", "return"),
    # A SLURM job stopped by scancel (SIGTERM) or before a time limit (SIGUSR2) is a result
    # of its sweep, returned to the launcher, which would otherwise take it for a crash.
    (Where.SLURM, "ended"): Ending("", "return"),
    (Where.SLURM, "interrupted"): Ending("terminal", "return"),
    (Where.SLURM, "failed"): Ending("", "return"),
    # A sweep job another reluexp command is training: that command records it.
    (Where.SWEEP, "held"): Ending("", "return"),
    (Where.WORKER, "held"): Ending("", "return"),
    (Where.SLURM, "held"): Ending("", "return"),
}
EXIT_CODES = {"ended": 0, "failed": 1, "held": 0}


def prepared_for(command: Session, config: Config, hydra_config: DictConfig) -> Any:
    """What the pre-flight prepared for this job, once (a single run's, or a sweep job's whose
    config is the one it checked); None: the run prepares its own."""
    if command.started is not None:
        started, command.started = command.started, None
        return started.prepared
    checked = command.prepared.pop(tuple(hydra_config.overrides.task), None)
    return checked.prepared if checked and checked.config == config_dict(config) else None


def run_job(
    config: Config, hydra_config: DictConfig, command: Session, plan: Plan | None = None
) -> float:
    """One run, or a job of the sweep `plan` describes, and its ending (ENDINGS). Its training
    takes the stops (shell.stops.MEANINGS): the first ends the run at a step boundary,
    checkpointed; a second exits at once, except in a parallel sweep's worker, which gets each
    stop twice (from the terminal's group and from its sweep)."""
    from reluexp.run import runner
    from reluexp.run.process import slurm_job_id
    from reluexp.run.resumes import continues, imported_paths

    run_dir = Path(hydra_config.runtime.output_dir)
    overrides = list(hydra_config.overrides.task)
    where = where_it_runs(hydra_config)
    resume = command.started.resume if command.started is not None else None
    prepared = prepared_for(command, config, hydra_config)
    # In a SLURM job, SIGUSR2 too: SLURM's warning before a time limit or preemption.
    signals = (*STOPS, signal.SIGUSR2) if slurm_job_id() is not None else STOPS
    stop = StopSignals(signals, in_worker=where is Where.WORKER)
    with command.holding(stop):
        signum, summary = None, None
        try:
            check_stops(command, hydra_config)  # one that came before this job's took over
            if resume is not None:
                result = runner.resume(run_dir, stop=stop, plan=resume)
            elif continues(run_dir, multirun=where is not Where.SINGLE):
                # Its own config's paths: the config that started it, confirmed then.
                own = [f"{key}={path}" for key, path in imported_paths(config).items()]
                result = runner.resume(run_dir, stop=stop, confirmed=own)
            else:
                result = runner.run(
                    config,
                    run_dir,
                    overrides=overrides,
                    prepared=prepared,
                    stop=stop,
                    varying=(plan and plan.varying) or frozenset(),
                )
            ended, loss = "ended", result.final_loss
            # The summary the run wrote (a run that had ended is its summary): the closing line
            # need not read it back.
            summary = result.summary if isinstance(result, runner.RunResult) else result
        except runner.Interrupted as interrupted:
            ended, loss, signum = "interrupted", math.nan, interrupted.signum
        except RunHeld as held:
            if where is Where.SINGLE:
                exit_with(held)
            # Another command (a second Finish-it) trains this job and records it: its
            # directory, log and summary are that command's. The job line says so (job_line).
            ended, loss = "held", math.nan
        except Exception as error:
            if where is Where.SINGLE and isinstance(error, ConfigError):
                if resume is not None and hydra_config.output_subdir:  # nothing stays of it
                    shutil.rmtree(run_dir / hydra_config.output_subdir, ignore_errors=True)
                exit_with(error)
            file_log.error("%s failed", run_dir, exc_info=error)
            summary = record_failure(run_dir, overrides, error)
            if where is not Where.SINGLE and not job_lines(hydra_config):  # its job line says it
                log.error("job failed: %s: %s", type(error).__name__, error)
            ended, loss = "failed", math.nan
        ending = ENDINGS[where, ended]
        if ending.closing == "terminal":
            say_closing(closing_line(run_dir, summary))
        elif ending.closing == "log":
            file_log.info(closing_line(run_dir, summary))
        code = 128 + signum if signum is not None else EXIT_CODES[ended]
        if signum == signal.SIGUSR2:
            # SLURM's warning before a time limit or preemption: the run is checkpointed;
            # submitit's own handler (back in place once training's phase is gone) requeues
            # the job, which resumes it.
            command.owner.pop(stop)
            signal.raise_signal(signal.SIGUSR2)
        if ending.then == "summary, exit":
            write_sweep_summary(Path(hydra_config.sweep.dir))
        elif ending.then == "wait, exit":
            # Training's phase stays on top, ignoring the stop's other copy, till the exit.
            sys.stdout.flush()
            sys.stderr.flush()
            exit_when_the_sweep_ends(code)
        if ending.then != "return":
            sys.exit(code)
        return loss


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
