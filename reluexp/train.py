"""The training loop: a run started or resumed, the seed-exact loop, its outcome recorded."""

import json
import logging
import math
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from reluexp import summary as summaries
from reluexp import tags
from reluexp.activations import Activation, resolve_activation
from reluexp.checkpoint import load_checkpoint
from reluexp.config import (
    Config,
    ConfigError,
    Dtype,
    Init,
    Optimizer,
    config_dict,
    config_from_dict,
    hidden_sizes,
    validate,
)
from reluexp.device import check_memory, resolve_device
from reluexp.events import EventWriter
from reluexp.metrics import MetricRows, MetricStream
from reluexp.model import forward
from reluexp.process import StopSignals, job_environment, slurm_job_id
from reluexp.progress import Progress
from reluexp.rundir import DiskReserve, hold_run
from reluexp.state import RunState, build_state, check_checkpoint, save_state
from reluexp.summary import RunSummary, SummaryError
from reluexp.update import WeightUpdate

log = logging.getLogger("reluexp")
# The article's `step loss` lines: the only lines on stdout (conf/config.yaml).
loss_log = logging.getLogger("reluexp.losses")
# Lines for the run's reluexp.log only (conf/config.yaml): the closing line says them on stderr.
file_log = logging.getLogger("reluexp.logfile")


class Interrupted(Exception):
    """The run stopped at a step boundary on a signal, checkpointed; exit with 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Recorder:
    """What a flushed block of metric rows means for the run: its events, the article's loss
    lines, the min and final loss, divergence (a non-finite loss) and warnings (gradients that
    vanished). Each rule is here once."""

    def __init__(self, config: Config, state: RunState, events: EventWriter, warnings: list[str]):
        self.config = config
        self.state = state
        self.events = events
        self.stream = MetricStream(
            config.data.n, hidden_sizes(config.model.hidden), state.weights, state.activation_params
        )
        streamed = self.stream.tags
        self.total_grad_norm = streamed.index(tags.GRAD_NORM_TOTAL)
        self.exact_zeros = streamed.index(tags.EXACT_ZEROS)
        self.tags = [*streamed, *tags.DERIVED]
        self.diverged_at: int | None = None
        # The run's warnings (summary.json's list, shared): each kind once, resumed runs too.
        self.warnings = warnings

    def warn(self, kind: str, step: int, consequence: str) -> None:
        if not any(warning.startswith(kind) for warning in self.warnings):
            self.warnings.append(f"{kind} from step {step}: {consequence}")
            log.warning("warning: %s", self.warnings[-1])

    def watch(self, step: int, row: list[float], live_units: list[int]) -> None:
        """A network that stopped learning looks `completed`: say so."""
        if row[self.total_grad_norm] == 0:
            self.warn("gradients vanished", step, "total gradient norm exactly 0, no weight moves")
        for layer, live in enumerate(live_units, 1):
            if live == 0:
                self.warn(
                    f"hidden layer {layer} dead",
                    step,
                    "every unit is 0 on the whole batch, no gradient passes it",
                )

    @property
    def stopped(self) -> bool:
        return self.diverged_at is not None and self.config.stop_on_divergence

    def flush(self) -> None:
        """The rows recorded on the device so far: into the run's state, then its events."""
        self.write(self.collect())

    def collect(self) -> MetricRows:
        """The recorded rows, on the host: the run's min and final loss, divergence, warnings
        and the article's loss lines follow from them; nothing is written to disk yet."""
        block = self.stream.flush()
        rows = block.rows
        if not rows:
            return block
        for i, (step, row) in enumerate(zip(block.steps, rows)):
            self.watch(step, row, block.live_units[i])
            if math.isfinite(row[0]):
                self.state.min_loss = min(self.state.min_loss, row[0])
            elif self.diverged_at is None:
                self.diverged_at = step
                if self.config.stop_on_divergence:
                    del rows[i + 1 :]  # the steps after it trained on a non-finite loss
                    break
        for row in rows:
            self.state.steps_with_exact_zeros += row[self.exact_zeros] > 0
            row += [
                log10(row[0]),
                log10(row[self.total_grad_norm]),
                self.state.steps_with_exact_zeros,
            ]
        for step, row in zip(block.steps, rows):
            if self.config.prints_at(step):
                # The article's line (step, repr of the loss), from the flushed value: no .item().
                loss_log.info("%d %r", step, row[0])
        self.state.final_loss = rows[-1][0]
        return block

    def write(self, block: MetricRows) -> None:
        if block.rows:
            log.debug("flushed %d metric rows up to step %d", len(block.rows), block.steps[-1])
            self.events.scalars(self.tags, block.steps, block.times, block.rows)


def log10(value: float) -> float:
    """log10 for the charts: -inf at 0, NaN where the value is not finite."""
    if value > 0 and math.isfinite(value):
        return math.log10(value)
    return -math.inf if value == 0 else math.nan


def squared_error(
    x: torch.Tensor, y: torch.Tensor, weights: list[torch.Tensor], activation: Activation
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The article's loss, sum((y_pred - y)^2), and the hidden layers the metrics read.

    The hidden layers come back detached: the metrics only read them, and under compile=true
    an output that requires grad gets a gradient in the compiled backward, zeros materialized
    and added every step (at N=4096, H=4096 two 64 MiB fills and a 64 MiB copy: about a tenth
    of the step)."""
    y_pred, hidden = forward(x, weights, activation)
    return (y_pred - y).pow(2).sum(), [(pre.detach(), post.detach()) for pre, post in hidden]


@dataclass
class Training:
    """What the loop reads and changes: the run's data, state, and where its steps go."""

    config: Config
    run_dir: Path
    x: torch.Tensor
    y: torch.Tensor
    state: RunState
    activation: Activation
    update: WeightUpdate
    recorder: Recorder
    stop: StopSignals
    progress: Progress
    reserve: DiskReserve


def train_loop(training: Training) -> None:
    """Train from the state's step to config.steps, a divergence, or a stop signal; metrics
    flushed."""
    config, state, recorder = training.config, training.state, training.recorder
    # compile=true: forward and loss, and through AOTAutograd their backward, as compiled kernels.
    compute_loss = torch.compile(squared_error) if config.compile else squared_error
    stream = recorder.stream
    while state.step < config.steps and not recorder.stopped and training.stop.signum is None:
        step = state.step
        loss, hidden = compute_loss(training.x, training.y, state.weights, training.activation)
        loss.backward()
        # Print steps are recorded too: their lines come from the flushed rows.
        recording = step % config.log_every == 0 or config.prints_at(step)
        recording = recording or step == config.steps - 1
        with torch.no_grad():
            row = stream.next_row() if recording else None
            if row is not None:
                row.record_activations(loss, hidden)
            training.update(row)
            if row is not None:
                stream.end_row(step)
        state.step += 1
        if stream.due:
            recorder.flush()
        training.progress.update(state.step)
        if config.checkpoint_every and state.step % config.checkpoint_every == 0:
            recorder.flush()  # so the checkpoint's min/final loss cover every step before it
            save_state(training.run_dir, config, state)
    recorder.flush()


def hparams(config: Config, device: torch.device) -> dict[str, Any]:
    """The config values a run is compared by in TensorBoard's HParams tab."""
    return {
        "activation": config.activation.name,
        # Custom runs are told apart by what they train, not by the option's name.
        "target": config.activation.target,
        "params": json.dumps(config.activation.params, sort_keys=True),
        "hidden": str(config.model.hidden),
        "init": Init(config.model.init).value,
        "n": config.data.n,
        "d_in": config.data.d_in,
        "d_out": config.data.d_out,
        "lr": config.lr,
        "steps": config.steps,
        "seed": config.seed,
        "device": str(device),
        "dtype": Dtype(config.dtype).value,
        "optimizer": Optimizer(config.optimizer).value,
    }


def run(
    config: Config,
    run_dir: Path,
    overrides: Sequence[str] = (),
    *,
    second_signal_exits: bool = True,
) -> float:
    """Train the configured model, stream its metrics into run_dir; return the final loss. A
    stop signal ends it at a step boundary; a second one at once, unless second_signal_exits
    is off (process.StopSignals)."""
    validate(config)
    summary = RunSummary(
        started_at=summaries.now(),
        seed=config.seed,
        overrides=list(overrides),
        config=config_dict(config),
    )
    return _run(config, run_dir, summary, None, second_signal_exits)


def resume(run_dir: Path, *, second_signal_exits: bool = True) -> float:
    """Continue an interrupted run in its own directory, from its checkpoint, with its config."""
    try:
        summary = RunSummary.read(run_dir)
    except SummaryError as error:
        raise ConfigError(f"resume={error}") from None
    if summary.config is None:
        raise ConfigError(f"resume={run_dir}: the run failed before it started; nothing to resume")
    if summary.ended:
        log.info(
            "%s already %s at step %d; nothing to resume",
            run_dir,
            summary.status,
            summary.steps_done,
        )
        return summary.final_loss
    checkpoint = load_checkpoint(run_dir)
    if checkpoint["config"] != summary.config:
        raise ConfigError(f"resume={run_dir}: checkpoint.pt was written by another config")
    summary.ended_at = summary.signal = summary.error = None
    summary.resumes += 1
    config = config_from_dict(checkpoint["config"])
    validate(config)
    # The stored config is code in the way any Hydra config is: say what it will import.
    params = f" with params {config.activation.params}" if config.activation.params else ""
    log.info(
        "resuming %s: importing activation.target=%s%s", run_dir, config.activation.target, params
    )
    check_checkpoint(checkpoint, config, f"resume={run_dir}")
    return _run(config, run_dir, summary, checkpoint, second_signal_exits)


def _run(
    config: Config,
    run_dir: Path,
    summary: RunSummary,
    checkpoint: dict[str, Any] | None,
    second_signal_exits: bool,
) -> float:
    device = resolve_device(config.device)
    check_memory(config, device)
    activation = resolve_activation(
        config.activation.target,
        config.activation.params,
        run_dir=run_dir,
        resumed=checkpoint is not None,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    with (
        hold_run(run_dir),
        DiskReserve(run_dir) as reserve,
        job_environment(device, config.threads, second_signal_exits) as stop,
    ):
        x, y, state = build_state(config, device, checkpoint, activation)
        start_step = state.step
        summaries.record_start(
            run_dir,
            summary,
            device=str(device),
            dtype=Dtype(config.dtype).value,
            threads=torch.get_num_threads(),
            slurm_job_id=slurm_job_id(),
        )
        events = EventWriter(run_dir, purge_step=start_step if checkpoint is not None else None)
        if checkpoint is None:
            events.declare(hparams(config, device))
        recorder = Recorder(config, state, events, summary.warnings)
        progress = Progress(config.steps, start_step, lambda: state.final_loss, not config.quiet)
        training = Training(
            config,
            run_dir,
            x,
            y,
            state,
            activation,
            WeightUpdate(
                state.weights, state.optimizer, config.lr, list(state.activation_params.values())
            ),
            recorder,
            stop,
            progress,
            reserve,
        )
        try:
            train_loop(training)
            if not recorder.stopped:
                save_state(run_dir, config, state)
            if stop.signum is not None:
                summary.signal = signal.Signals(stop.signum).name
                finish(training, summary, start_step, "interrupted")
                log.warning(
                    "interrupted by %s at step %d; checkpoint written", summary.signal, state.step
                )
                raise Interrupted(stop.signum)
            last_step = recorder.diverged_at if recorder.stopped else state.step - 1
            events.hparams_end(max(last_step, 0), state.final_loss, state.min_loss)
        except Interrupted:
            raise
        except Exception as error:
            record_failure(training, summary, start_step, error)
            raise
        finally:
            progress.close()
    summary.diverged_at_step = recorder.diverged_at
    status = "completed" if recorder.diverged_at is None else "diverged"
    finish(training, summary, start_step, status)
    if recorder.diverged_at is not None:
        log.warning("diverged: non-finite loss at step %d", recorder.diverged_at)
    return state.final_loss


def record_failure(
    training: Training, summary: RunSummary, start_step: int, error: Exception
) -> None:
    """A failed run keeps its evidence: the steps recorded up to the failure reach its summary
    and, as far as the disk allows, its events."""
    summary.error = f"{type(error).__name__}: {error}"
    finish(training, summary, start_step, "failed")


def finish(training: Training, summary: RunSummary, start_step: int, status: str) -> None:
    """Record the run's outcome in summary.json, write the steps still waiting, close the event
    file. The disk reserve is released first: on a disk that filled up, the summary and the
    log's line fit, and the events come last, as far as they fit."""
    training.reserve.release()
    state, recorder = training.state, training.recorder
    unwritten = recorder.collect()
    segment_time = time.perf_counter() - state.segment_start
    # Steps this process ran, past a divergence too (until a flush saw it).
    executed_steps = state.step - start_step
    summaries.record_end(
        training.run_dir,
        summary,
        status,
        steps_done=recorder.diverged_at + 1 if recorder.stopped else state.step,
        final_loss=state.final_loss,
        min_loss=state.min_loss,
        wall_time_s=state.wall_time_s,
        steps_per_s=executed_steps / segment_time if segment_time > 0 else None,
    )
    if status == "failed":  # the run's log (only): before the events can fill the disk again
        file_log.error("failed after step %d: %s", state.step - 1, summary.error)
    try:
        recorder.write(unwritten)
    except OSError as error:
        if status != "failed":
            raise
        log.error("%s: the last steps' events did not fit (%s)", training.run_dir, error.strerror)
    try:
        recorder.events.close()
    except OSError as error:
        if status != "failed":
            raise
        log.error("%s: could not close the event file (%s)", training.run_dir, error.strerror)
