"""A run from its config to its result: checked and prepared once, started or resumed in its
directory (or in memory), trained by the loop, its outcome recorded."""

import logging
import signal
import time
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from reluexp.config import Config, config_dict
from reluexp.functions.targets import ActivationFactory, resolve_activation, surrogate_of
from reluexp.record import summary as summaries
from reluexp.record.events import EventWriter
from reluexp.record.hparams import hparams, trial_name
from reluexp.record.metrics import MetricStream
from reluexp.record.progress import Progress
from reluexp.record.recorder import Recorder, Series
from reluexp.record.summary import RunSummary
from reluexp.record.tags import LR, layout, segments
from reluexp.run.data import Dataset, data_sizes, read_data
from reluexp.run.device import check_memory, resolve_device
from reluexp.run.loop import Stop, Training, train_loop
from reluexp.run.losses import loss_kind
from reluexp.run.model import PROBE_EXAMPLES, Built, build_model, draw_seed
from reluexp.run.precision import check_precision, scaled
from reluexp.run.process import heap_left_alone, job_environment, slurm_job_id
from reluexp.run.resumes import ResumePlan, plan_resume
from reluexp.run.rundir import DiskReserve, hold_run
from reluexp.run.schedule import learning_rate, scheduled
from reluexp.run.state import RunState, build_state, check_checkpoint, seeded_data
from reluexp.validation import validate

log = logging.getLogger("reluexp")
# Lines for the run's reluexp.log only (conf/config.yaml): the closing line says them on stderr.
file_log = logging.getLogger("reluexp.logfile")


class Interrupted(Exception):
    """The run stopped at a step boundary on a signal, checkpointed (or, had it diverged
    before the stop, recorded as diverged); exit with 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class RunResult:
    """How a run ended and what it recorded: its status, its numbers, the series of its
    recorded steps and its final state (weights, the activation's parameters)."""

    status: str
    steps_done: int
    final_loss: float
    min_loss: float
    diverged_at_step: int | None
    series: Series
    state: RunState
    summary: RunSummary


@dataclass(frozen=True)
class Prepared:
    """What a run starts from, checked once before anything is written: its device, its data
    (on the CPU, drawn or split by its seed) and its model (built on the CPU from the seed,
    the activation in place, checked by a probe forward)."""

    device: torch.device
    data: Dataset
    built: Built
    # What seeds torch's generator as training starts (dropout, a model's own draws): drawn
    # from the run's generator after the model, so the same seed is the same run.
    training_seed: int


def prepare(
    config: Config,
    *,
    run_dir: Path | None = None,
    resumed: bool = False,
    activation: ActivationFactory | None = None,
) -> Prepared:
    """Every value of the config checked, the device found, the activation resolved (unless
    given: the lab's twin), the data read and drawn, the model built and probed: a user's
    mistake is a ConfigError naming the key. Sizes that cannot fit are refused before anything
    that size is made. (The entry point calls this before Hydra makes a directory and hands
    the result to run().)"""
    validate(config)
    device = resolve_device(config.device)
    if activation is None:
        settings = config.activation
        activation = resolve_activation(
            settings.target, settings.params, run_dir=run_dir, resumed=resumed
        )
        # Training never calls the surrogate; a typo in it is still one line before a run.
        surrogate_of(settings.surrogate, settings.params, "activation.surrogate")
    arrays = read_data(config)
    sizes = None if arrays is None else data_sizes(arrays)
    stored = None if arrays is None else sum(a.numel() * a.element_size() for a in arrays)
    check_memory(
        config,
        device,
        sizes,
        input_shape=None if arrays is None else tuple(arrays[0].shape[1:]),
        data_bytes=stored,
    )
    data, generator = seeded_data(config, arrays)
    probe = data.inputs(data.x[:PROBE_EXAMPLES])
    built = build_model(config, (probe, data.d_out), activation, generator)
    # A parameter or site whose tag another value streams under is one line (tags.segments).
    segments(trained_names(built.model), [site.name for site in built.sites])
    check_memory(config, device, sizes, built, data_bytes=stored)
    check_precision(config, built.model, probe)
    return Prepared(device, data, built, draw_seed(generator))


def trained_names(model: torch.nn.Module) -> list[str]:
    """The names of the model's trained parameters, which their streamed tags carry."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def run(
    config: Config,
    run_dir: Path | None = None,
    overrides: Sequence[str] = (),
    *,
    prepared: Prepared | None = None,
    activation: ActivationFactory | None = None,
    stop: Stop | None = None,
    varying: frozenset[str] = frozenset(),
) -> RunResult:
    """Train the configured model and return the run's result; with a run_dir, stream its
    metrics, summary and checkpoints there. Without one, nothing is written.

    `prepared`: what prepare() found, else prepared here; `activation`: a factory of the
    activation Modules to train with instead of the configured target's (the lab's oracle
    twin); `stop`: the entry point's (reluexp.shell.stops.StopSignals), whose first signal
    ends the run at a step boundary, checkpointed (without one, signals are left alone);
    `varying`: the config keys that differ across this run's sweep, which its HParams show
    first."""
    prepared = prepared or prepare(config, run_dir=run_dir, activation=activation)
    summary = RunSummary(
        started_at=summaries.now(),
        seed=config.seed,
        overrides=list(overrides),
        config=config_dict(config),
    )
    return _run(config, run_dir, summary, None, prepared, stop, varying)


def resume(
    run_dir: Path,
    *,
    stop: Stop | None = None,
    confirmed: Collection[str] = (),
    plan: ResumePlan | None = None,
) -> RunResult | RunSummary:
    """Continue the run in run_dir in its own directory, from its checkpoint, with its config;
    a run that already ended is its summary, untouched. A dotted path its config names outside
    reluexp and torch is imported only when `confirmed` holds it as `key=path`
    (run.resumes.plan_resume); `plan`: what plan_resume decided already (the entry point's
    pre-flight)."""
    plan = plan or plan_resume(run_dir, confirmed=confirmed)
    summary = plan.summary
    if plan.ended:
        log.info(
            "%s already %s at step %d; nothing to resume",
            run_dir,
            summary.status,
            summary.steps_done,
        )
        return summary
    summary.ended_at = summary.signal = summary.error = None
    summary.resumes += 1
    config = plan.config
    # As its checkpoints will hold it: a config an earlier format wrote, upgraded.
    summary.config = config_dict(config)
    # The stored config is code in the way any Hydra config is: say what it will import.
    params = f" with params {config.activation.params}" if config.activation.params else ""
    log.info(
        "resuming %s: importing activation.target=%s%s", run_dir, config.activation.target, params
    )
    prepared = prepare(config, run_dir=run_dir, resumed=True)
    return _run(config, run_dir, summary, plan.checkpoint, prepared, stop)


def _run(
    config: Config,
    run_dir: Path | None,
    summary: RunSummary,
    checkpoint: dict[str, Any] | None,
    prepared: Prepared,
    stop: Stop | None,
    varying: frozenset[str] = frozenset(),
) -> RunResult:
    device, built = prepared.device, prepared.built
    with ExitStack() as held:
        reserve = None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            held.enter_context(hold_run(run_dir))
            reserve = held.enter_context(DiskReserve(run_dir))
        held.enter_context(job_environment(device, config.threads))
        if checkpoint is not None:
            check_checkpoint(checkpoint, config, built.model, f"resume={run_dir}")
        data, state = build_state(
            config, device, prepared.data, built, checkpoint, prepared.training_seed
        )
        summaries.record_start(
            run_dir,
            summary,
            device=str(device),
            dtype=config.dtype.value,
            threads=torch.get_num_threads(),
            slurm_job_id=slurm_job_id(),
        )
        params = trained_names(state.model)
        sites = [site.name for site in state.sites]
        events = None
        if run_dir is not None:
            events = EventWriter(run_dir, start_step=state.step)
            if checkpoint is None:
                examples = (len(data.x), data.x[0].numel(), data.d_out)
                loss = loss_kind(config, data).value
                events.declare(
                    hparams(config, device, examples, loss),
                    varying,
                    layout(params, sites),
                    trial_name(summary.overrides, varying, run_dir),
                )
        stream = MetricStream(
            params,
            [(site.name, site.units) for site in state.sites],
            {name: p.numel() for name, p in state.activation_params().items()},
            {LR: partial(learning_rate, config)} if scheduled(config) else None,
        )
        training = Training(
            config,
            run_dir,
            data,
            state,
            stream,
            Recorder(config, events, **state.recorded),
            stop,
            Progress(
                config.steps,
                state.step,
                lambda: state.outcome.final_loss if state.outcome.recorded_steps else None,
                not config.quiet,
                torch.get_num_threads(),
            ),
            reserve,
            start_step=state.step,
        )
        try:
            train_to_the_end(training, summary)
        finally:
            training.progress.close()
    result = record_the_end(training, summary)
    if training.stop_signal is not None:
        raise Interrupted(training.stop_signal)
    return result


def train_to_the_end(training: Training, summary: RunSummary) -> None:
    """Train, checkpoint the last step; an interruption or a failure is recorded as the run's
    outcome on its way out."""
    state, outcome = training.state, training.state.outcome
    try:
        with heap_left_alone():
            train_loop(training)
        if not training.stopped and training.run_dir is not None:
            training.checkpoint()
        if training.stop_signal is not None:
            summary.signal = signal.Signals(training.stop_signal).name
            # A run that had diverged before the stop (seen at the flush after it) ends as
            # diverged, the stop still ending the command (_run).
            if not training.stopped:
                finish(training, summary, "interrupted")
                log.warning(
                    "interrupted by %s at step %d; checkpoint written", summary.signal, state.step
                )
                raise Interrupted(training.stop_signal)
        events = training.recorder.events
        last_step = outcome.diverged_at if training.stopped else state.step - 1
        if events is not None:
            events.hparams_end(max(last_step, 0), outcome.final_loss, outcome.min_loss)
    except Interrupted:
        raise
    except Exception as error:
        # A failed run keeps its evidence: the steps recorded up to the failure reach its
        # summary and, as far as the disk allows, its events.
        summary.error = f"{type(error).__name__}: {error}"
        finish(training, summary, "failed")
        raise


def record_the_end(training: Training, summary: RunSummary) -> RunResult:
    """A run that trained to its last step, or to a divergence: its outcome, its warnings."""
    state, outcome = training.state, training.state.outcome
    outcome.check_skipped(state.step - 1)
    status = "completed" if outcome.diverged_at is None else "diverged"
    if status == "completed":
        said = len(outcome.warnings)
        outcome.check_progress(training.config, state.step, state.parameter_count)
        for warning in outcome.warnings[said:]:
            log.warning("warning: %s", warning)
    finish(training, summary, status)
    if outcome.diverged_at is not None:
        log.warning("diverged: non-finite %s at step %d", outcome.diverged_on, outcome.diverged_at)
    return RunResult(
        status,
        summary.steps_done,
        outcome.final_loss,
        outcome.min_loss,
        outcome.diverged_at,
        training.recorder.series,
        state,
        summary,
    )


def finish(training: Training, summary: RunSummary, status: str) -> None:
    """Record the run's outcome in summary.json, write the steps still waiting, close the event
    file. The disk reserve is released first: on a disk that filled up, the summary and the
    log's line fit, and the events come last, as far as they fit."""
    if training.reserve is not None:
        training.reserve.release()
    state, outcome = training.state, training.state.outcome
    unwritten = training.collect()
    segment_time = time.perf_counter() - state.segment_start
    # Steps this process ran, past a divergence too (until a flush saw it).
    executed_steps = state.step - training.start_step
    summary.diverged_at_step, summary.diverged_on = outcome.diverged_at, outcome.diverged_on
    summary.warnings = list(outcome.warnings)
    summaries.record_end(
        training.run_dir,
        summary,
        status,
        steps_done=outcome.diverged_at + 1 if training.stopped else state.step,
        final_loss=outcome.final_loss,
        min_loss=outcome.min_loss,
        wall_time_s=state.wall_time_s,
        steps_per_s=executed_steps / segment_time if segment_time > 0 else None,
        recorded_steps=outcome.recorded_steps,
        skipped_steps=outcome.skipped_steps if scaled(training.config) else None,
        **outcome.evaluation,
    )
    events = training.recorder.events
    if events is None:
        return
    if status == "failed":  # the run's log (only): before the events can fill the disk again
        file_log.error("failed at step %d: %s", state.step, summary.error)
    try:
        training.recorder.write(unwritten)
    except OSError as error:
        if status != "failed":
            raise
        log.error("%s: the last steps' events did not fit (%s)", training.run_dir, error.strerror)
    try:
        events.close()
    except OSError as error:
        if status != "failed":
            raise
        log.error("%s: could not close the event file (%s)", training.run_dir, error.strerror)
