"""The training loop: a run started or resumed, the seed-exact loop, its outcome recorded."""

import json
import logging
import math
import signal
import time
from array import array
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from reluexp.config import (
    Config,
    ConfigError,
    DataName,
    Dtype,
    Init,
    Loss,
    Optimizer,
    config_dict,
    config_from_dict,
    hidden_sizes,
    validate,
)
from reluexp.functions.targets import Activation, resolve_activation
from reluexp.record import summary as summaries
from reluexp.record import tags
from reluexp.record.events import EventWriter
from reluexp.record.metrics import MetricRows, MetricStream
from reluexp.record.progress import Progress
from reluexp.record.summary import RunSummary, SummaryError
from reluexp.run.checkpoint import load_checkpoint
from reluexp.run.data import Dataset
from reluexp.run.device import check_memory, resolve_device
from reluexp.run.model import forward
from reluexp.run.process import StopSignals, job_environment
from reluexp.run.rundir import DiskReserve, hold_run
from reluexp.run.state import RunState, build_state, check_checkpoint, save_state, seeded_data
from reluexp.run.update import WeightUpdate
from reluexp.sweeps.slurm import slurm_job_id

log = logging.getLogger("reluexp")
# The article's `step loss` lines: the only lines on stdout (conf/config.yaml).
loss_log = logging.getLogger("reluexp.losses")
# Lines for the run's reluexp.log only (conf/config.yaml): the closing line says them on stderr.
file_log = logging.getLogger("reluexp.logfile")


# A completed run whose loss moved by less than this fraction, over at least this many steps,
# gets a warning: it trained in name only.
STALL_FRACTION = 0.01
STALL_STEPS = 2
# Where an optimizer's lr usually lies: an lr ten times below gets named as the likely cause.
USUAL_LR = {Optimizer.adam: (1e-4, 1e-2)}


class Interrupted(Exception):
    """The run stopped at a step boundary on a signal, checkpointed; exit with 128 + signum."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Collected:
    """A flush's host values: the metric rows, and the validation passes with their steps."""

    rows: MetricRows
    evaluation_steps: list[int]
    evaluations: list[list[float]]


@dataclass
class Series:
    """What a run recorded, step by step, kept in memory for its caller (the lab, a notebook):
    the recorded steps, their losses and their exact-zero pre-activation counts."""

    steps: array = field(default_factory=lambda: array("q"))
    losses: array = field(default_factory=lambda: array("d"))
    exact_zeros: array = field(default_factory=lambda: array("d"))


class Recorder:
    """What a flushed block of metric rows means for the run: its events (none for a run
    without a directory), its series, the article's loss lines, the min and final loss,
    divergence (a non-finite loss) and warnings (gradients that vanished). Each rule is here
    once."""

    def __init__(
        self,
        config: Config,
        state: RunState,
        events: EventWriter | None,
        warnings: list[str],
        batch: int,
    ):
        self.config = config
        self.state = state
        self.events = events
        self.series = Series()
        self.stream = MetricStream(
            batch, hidden_sizes(config.model.hidden), state.weights, state.activation_params
        )
        streamed = self.stream.tags
        self.total_grad_norm = streamed.index(tags.GRAD_NORM_TOTAL)
        self.exact_zeros = streamed.index(tags.EXACT_ZEROS)
        self.tags = [*streamed, *tags.DERIVED]
        self.diverged_at: int | None = None
        # The run's warnings (summary.json's list, shared): each kind once, resumed runs too.
        self.warnings = warnings
        # Validation passes waiting on the device: (step, [loss, accuracy or NaN]).
        self.evaluations: list[tuple[int, torch.Tensor]] = []

    def record_evaluation(
        self,
        step: int,
        loss: torch.Tensor,
        logits: torch.Tensor | None,
        y: torch.Tensor,
        batch_logits: torch.Tensor | None,
        batch_y: torch.Tensor,
    ) -> None:
        """A validation pass (and, for classification, the accuracy on the step's batch),
        kept on the device until the next flush (no host sync)."""
        values = [loss.double()]
        for found, wanted in ((logits, y), (batch_logits, batch_y)):
            values.append(
                (found.argmax(1) == wanted).double().mean()
                if found is not None
                else torch.tensor(math.nan, dtype=torch.float64, device=loss.device)
            )
        self.evaluations.append((step, torch.stack(values)))

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

    def check_progress(self) -> None:
        """A run whose loss barely moved looks `completed`: say so, with the likely cause."""
        state, config = self.state, self.config
        first, last = state.first_loss, state.final_loss
        if state.step < STALL_STEPS or not (math.isfinite(first) and math.isfinite(last)):
            return
        moved = (last - first) / abs(first) if first else math.inf
        if abs(moved) >= STALL_FRACTION:
            return
        consequence = f"{first:.4g} to {last:.4g} ({moved:+.2%}) in {state.step} steps"
        usual = USUAL_LR.get(Optimizer(config.optimizer))
        if usual is not None and config.lr < usual[0] / 10:
            name = Optimizer(config.optimizer).value
            consequence += (
                f"; lr={config.lr:g} is far below {name}'s usual range ({usual[0]:g} to "
                f"{usual[1]:g})"
            )
        self.warn("loss barely moved", 0, consequence)

    @property
    def stopped(self) -> bool:
        return self.diverged_at is not None and self.config.stop_on_divergence

    def flush(self) -> None:
        """The rows recorded on the device so far: into the run's state, then its events."""
        self.write(self.collect())

    def collect(self) -> Collected:
        """The recorded rows and validation passes, on the host: the run's min and final loss,
        divergence, warnings, evaluation and the article's loss lines follow from them;
        nothing is written to disk yet."""
        block = self.stream.flush()
        rows = block.rows
        evaluations = self.collect_evaluations()
        if not rows:
            return Collected(block, *evaluations)
        for i, (step, row) in enumerate(zip(block.steps, rows)):
            self.watch(step, row, block.live_units[i])
            if math.isfinite(row[0]):
                self.state.min_loss = min(self.state.min_loss, row[0])
            elif self.diverged_at is None:
                self.diverged_at = step
                if self.config.stop_on_divergence:
                    del rows[i + 1 :]  # the steps after it trained on a non-finite loss
                    break
        self.series.steps.extend(block.steps[: len(rows)])
        for row in rows:
            self.series.losses.append(row[0])
            self.series.exact_zeros.append(row[self.exact_zeros])
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
        if block.steps[0] == 0:
            self.state.first_loss = rows[0][0]
        return Collected(block, *evaluations)

    def collect_evaluations(self) -> tuple[list[int], list[list[float]]]:
        """The validation passes on the host: the last and best values into the run's state."""
        if not self.evaluations:
            return [], []
        steps = [step for step, _ in self.evaluations]
        rows = torch.stack([values for _, values in self.evaluations]).tolist()
        self.evaluations.clear()
        found = self.state.evaluation
        for step, (loss, accuracy, train_accuracy) in zip(steps, rows):
            found["val_loss"], found["val_accuracy"] = loss, accuracy
            if math.isfinite(train_accuracy):
                found["train_accuracy"] = train_accuracy
            if math.isfinite(accuracy) and accuracy > found.get("best_val_accuracy", -1.0):
                found["best_val_accuracy"], found["best_val_accuracy_step"] = accuracy, step
        return steps, rows

    def write(self, collected: Collected) -> None:
        if self.events is None:
            return
        block = collected.rows
        if block.rows:
            log.debug("flushed %d metric rows up to step %d", len(block.rows), block.steps[-1])
            self.events.scalars(self.tags, block.steps, block.times, block.rows)
        if collected.evaluation_steps:
            now = [time.time()] * len(collected.evaluation_steps)
            self.events.scalars(
                tags.VALIDATION, collected.evaluation_steps, now, collected.evaluations
            )


def log10(value: float) -> float:
    """log10 for the charts: -inf at 0, NaN where the value is not finite."""
    if value > 0 and math.isfinite(value):
        return math.log10(value)
    return -math.inf if value == 0 else math.nan


Objective = Callable[..., tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], Any]]


def detached(
    hidden: list[tuple[torch.Tensor, torch.Tensor]],
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(pre.detach(), post.detach()) for pre, post in hidden]


def squared_error(
    x: torch.Tensor,
    y: torch.Tensor,
    weights: list[torch.Tensor],
    activation: Activation,
    biases: list[torch.Tensor],
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], None]:
    """The article's loss, sum((y_pred - y)^2), and the hidden layers the metrics read.

    The hidden layers come back detached: the metrics only read them, and under compile=true
    an output that requires grad gets a gradient in the compiled backward, zeros materialized
    and added every step (at N=4096, H=4096 two 64 MiB fills and a 64 MiB copy: about a tenth
    of the step)."""
    y_pred, hidden = forward(x, weights, activation, biases)
    return (y_pred - y).pow(2).sum(), detached(hidden), None


def cross_entropy(
    x: torch.Tensor,
    y: torch.Tensor,
    weights: list[torch.Tensor],
    activation: Activation,
    biases: list[torch.Tensor],
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Classification: the mean cross-entropy of the logits against class indices, the hidden
    layers (as squared_error), and the logits (detached) for the accuracy."""
    logits, hidden = forward(x, weights, activation, biases)
    loss = torch.nn.functional.cross_entropy(logits, y)
    return loss, detached(hidden), logits.detach()


def objective(config: Config, data: Dataset) -> Objective:
    """The loss the run trains on: `loss`, or with loss=auto what the data's targets say."""
    kind = Loss(config.loss)
    if kind == Loss.auto:
        kind = Loss.cross_entropy if data.classes is not None else Loss.squared_error
    if (kind == Loss.cross_entropy) != (data.classes is not None):
        targets = "class indices" if data.classes is not None else "values (regression)"
        raise ConfigError(f"loss={kind.value}: the data's targets are {targets}")
    return cross_entropy if kind == Loss.cross_entropy else squared_error


class Batches:
    """Each step's examples: the whole training set, or data.batch_size of them, in an order
    drawn anew each epoch (a remainder smaller than a batch is left out). The order of epoch e
    depends on the seed and e only, so a resumed run sees the batches it would have seen."""

    def __init__(self, data: Dataset, batch_size: int | None, seed: int):
        self.x, self.y, self.seed = data.x, data.y, seed
        self.size = len(data.x) if batch_size is None else min(batch_size, len(data.x))
        self.per_epoch = len(data.x) // self.size
        self.epoch, self.order = -1, torch.empty(0)

    def at(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.size == len(self.x):
            return self.x, self.y
        epoch, index = divmod(step, self.per_epoch)
        if epoch != self.epoch:
            generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**63)
            self.order = torch.randperm(len(self.x), generator=generator).to(self.x.device)
            self.epoch = epoch
        chosen = self.order[index * self.size : (index + 1) * self.size]
        return self.x[chosen], self.y[chosen]


@dataclass
class Training:
    """What the loop reads and changes: the run's data, state, and where its steps go (no
    directory: nothing is written, and no signal stops it)."""

    config: Config
    run_dir: Path | None
    data: Dataset
    state: RunState
    activation: Activation
    update: WeightUpdate
    recorder: Recorder
    stop: StopSignals | None
    progress: Progress
    reserve: DiskReserve | None
    start_step: int  # where this process started: a resumed run's checkpoint

    @property
    def stop_signal(self) -> int | None:
        return None if self.stop is None else self.stop.signum


def train_loop(training: Training) -> None:
    """Train from the state's step to config.steps, a divergence, or a stop signal; metrics
    flushed."""
    config, state, recorder = training.config, training.state, training.recorder
    data = training.data
    loss_of = objective(config, data)
    # compile=true: forward and loss, and through AOTAutograd their backward, as compiled kernels.
    compute_loss = torch.compile(loss_of) if config.compile else loss_of
    batches = Batches(data, config.data.batch_size, config.seed)
    stream = recorder.stream
    while state.step < config.steps and not recorder.stopped and training.stop_signal is None:
        step = state.step
        x, y = batches.at(step)
        loss, hidden, logits = compute_loss(x, y, state.weights, training.activation, state.biases)
        loss.backward()
        last = step == config.steps - 1
        # Print steps are recorded too: their lines come from the flushed rows.
        recording = step % config.log_every == 0 or config.prints_at(step) or last
        with torch.no_grad():
            row = stream.next_row() if recording else None
            if row is not None:
                row.record_activations(loss, hidden)
            # Held-out data, with the weights the step's loss saw (before its update), beside
            # the accuracy on the step's batch.
            if data.x_val is not None and (step % config.eval_every == 0 or last):
                val_loss, _, val_logits = loss_of(
                    data.x_val, data.y_val, state.weights, training.activation, state.biases
                )
                recorder.record_evaluation(step, val_loss, val_logits, data.y_val, logits, y)
            training.update(row)
            if row is not None:
                stream.end_row(step)
        state.step += 1
        if stream.due:
            recorder.flush()
        training.progress.update(state.step)
        if (
            training.run_dir is not None
            and config.checkpoint_every
            and state.step % config.checkpoint_every == 0
        ):
            recorder.flush()  # so the checkpoint's min/final loss cover every step before it
            save_state(training.run_dir, config, state)
    recorder.flush()


def hparams(config: Config, device: torch.device, data: Dataset) -> dict[str, Any]:
    """The config values a run is compared by in TensorBoard's HParams tab, named by their
    keys (so a sweep's varying keys name them), in the order the tab shows them when none
    varies: what a comparison is usually about first."""
    return {
        "activation": config.activation.name,
        # A string: the tab shows numbers with four decimals, and filters strings by value.
        "seed": str(config.seed),
        "lr": config.lr,
        # Custom runs are told apart by what they train, not by the option's name.
        "activation.target": config.activation.target,
        "activation.params": json.dumps(config.activation.params, sort_keys=True),
        "data": DataName(config.data.name).value,
        "model.hidden": str(config.model.hidden),
        "model.init": Init(config.model.init).value,
        "model.bias": config.model.bias,
        "data.n": len(data.x),
        "data.d_in": data.x.shape[1],
        "data.d_out": data.d_out,
        "data.batch_size": config.data.batch_size or len(data.x),
        "loss": objective(config, data).__name__,
        "steps": config.steps,
        "device": str(device),
        "dtype": Dtype(config.dtype).value,
        "optimizer": Optimizer(config.optimizer).value,
    }


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


def run(
    config: Config,
    run_dir: Path | None = None,
    overrides: Sequence[str] = (),
    *,
    activation: Activation | None = None,
    varying: frozenset[str] = frozenset(),
    second_signal_exits: bool = True,
) -> RunResult:
    """Train the configured model and return the run's result; with a run_dir, stream its
    metrics, summary and checkpoints there, and stop at a step boundary on a stop signal (a
    second one exits at once, unless second_signal_exits is off: process.StopSignals). Without
    one, nothing is written and signals are left alone. `activation`: the resolved target (else
    resolved from the config); `varying`: the config keys that differ across this run's sweep,
    which its HParams show first."""
    validate(config)
    summary = RunSummary(
        started_at=summaries.now(),
        seed=config.seed,
        overrides=list(overrides),
        config=config_dict(config),
    )
    return _run(config, run_dir, summary, None, second_signal_exits, varying, activation)


def resume(run_dir: Path, *, second_signal_exits: bool = True) -> RunResult | RunSummary:
    """Continue an interrupted run in its own directory, from its checkpoint, with its config;
    a run that already ended is its summary, untouched."""
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
        return summary
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
    return _run(config, run_dir, summary, checkpoint, second_signal_exits)


def _run(
    config: Config,
    run_dir: Path | None,
    summary: RunSummary,
    checkpoint: dict[str, Any] | None,
    second_signal_exits: bool,
    varying: frozenset[str] = frozenset(),
    activation: Activation | None = None,
) -> RunResult:
    device = resolve_device(config.device)
    if config.data.name == DataName.random:  # real data's sizes are known once it is loaded
        check_memory(config, device)
    if activation is None:
        activation = resolve_activation(
            config.activation.target,
            config.activation.params,
            run_dir=run_dir,
            resumed=checkpoint is not None,
        )
    with ExitStack() as held:
        reserve = stop = None
        if run_dir is not None:
            run_dir.mkdir(parents=True, exist_ok=True)
            held.enter_context(hold_run(run_dir))
            reserve = held.enter_context(DiskReserve(run_dir))
        held.enter_context(job_environment(device, config.threads))
        if run_dir is not None:
            stop = held.enter_context(StopSignals(second_signal_exits))
        seeded = seeded_data(config)
        if checkpoint is not None:
            sizes = seeded[0].layer_sizes(config.model.hidden)
            check_checkpoint(checkpoint, config, sizes, f"resume={run_dir}")
        data, state = build_state(config, device, seeded, checkpoint, activation)
        summaries.record_start(
            run_dir,
            summary,
            device=str(device),
            dtype=Dtype(config.dtype).value,
            threads=torch.get_num_threads(),
            slurm_job_id=slurm_job_id(),
        )
        events = None
        if run_dir is not None:
            resumed_at = state.step if checkpoint is not None else None
            events = EventWriter(run_dir, purge_step=resumed_at)
            if checkpoint is None:
                events.declare(hparams(config, device, data), varying)
        batch = len(data.x) if config.data.batch_size is None else config.data.batch_size
        recorder = Recorder(config, state, events, summary.warnings, min(batch, len(data.x)))
        trained_beside = [*state.biases, *state.activation_params.values()]
        update = WeightUpdate(
            state.weights, state.optimizer, config.lr, trained_beside, recorder.stream.kernel_blocks
        )
        training = Training(
            config,
            run_dir,
            data,
            state,
            activation,
            update,
            recorder,
            stop,
            Progress(config.steps, state.step, lambda: state.final_loss, not config.quiet),
            reserve,
            start_step=state.step,
        )
        try:
            train_to_the_end(training, summary)
        finally:
            training.progress.close()
    return record_the_end(training, summary)


def train_to_the_end(training: Training, summary: RunSummary) -> None:
    """Train, checkpoint the last step; an interruption or a failure is recorded as the run's
    outcome on its way out."""
    state, recorder = training.state, training.recorder
    try:
        train_loop(training)
        if not recorder.stopped and training.run_dir is not None:
            save_state(training.run_dir, training.config, state)
        if training.stop_signal is not None:
            summary.signal = signal.Signals(training.stop_signal).name
            finish(training, summary, "interrupted")
            log.warning(
                "interrupted by %s at step %d; checkpoint written", summary.signal, state.step
            )
            raise Interrupted(training.stop_signal)
        last_step = recorder.diverged_at if recorder.stopped else state.step - 1
        if recorder.events is not None:
            recorder.events.hparams_end(max(last_step, 0), state.final_loss, state.min_loss)
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
    recorder, state = training.recorder, training.state
    summary.diverged_at_step = recorder.diverged_at
    status = "completed" if recorder.diverged_at is None else "diverged"
    if status == "completed":
        recorder.check_progress()
    finish(training, summary, status)
    if recorder.diverged_at is not None:
        log.warning("diverged: non-finite loss at step %d", recorder.diverged_at)
    return RunResult(
        status,
        summary.steps_done,
        state.final_loss,
        state.min_loss,
        recorder.diverged_at,
        recorder.series,
        state,
        summary,
    )


def finish(training: Training, summary: RunSummary, status: str) -> None:
    """Record the run's outcome in summary.json, write the steps still waiting, close the event
    file. The disk reserve is released first: on a disk that filled up, the summary and the
    log's line fit, and the events come last, as far as they fit."""
    if training.reserve is not None:
        training.reserve.release()
    state, recorder = training.state, training.recorder
    unwritten = recorder.collect()
    segment_time = time.perf_counter() - state.segment_start
    # Steps this process ran, past a divergence too (until a flush saw it).
    executed_steps = state.step - training.start_step
    summaries.record_end(
        training.run_dir,
        summary,
        status,
        steps_done=recorder.diverged_at + 1 if recorder.stopped else state.step,
        final_loss=state.final_loss,
        min_loss=state.min_loss,
        wall_time_s=state.wall_time_s,
        steps_per_s=executed_steps / segment_time if segment_time > 0 else None,
        **state.evaluation,
    )
    if recorder.events is None:
        return
    if status == "failed":  # the run's log (only): before the events can fill the disk again
        file_log.error("failed at step %d: %s", state.step, summary.error)
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
