"""What a flushed block of a run's metric rows means: its events, its series, the article's
loss lines, the min and final loss, divergence and the warnings of a run that stopped
learning. Each rule is here once."""

import logging
import math
import time
from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from reluexp.config import Config, Optimizer, hidden_sizes
from reluexp.record import tags
from reluexp.record.events import EventWriter
from reluexp.record.metrics import MetricRows, MetricStream

if TYPE_CHECKING:  # the state is the run's; the recorder only reads and updates its numbers
    from reluexp.run.state import RunState

log = logging.getLogger("reluexp")
# The article's `step loss` lines: the only lines on stdout (conf/config.yaml).
loss_log = logging.getLogger("reluexp.losses")

# A completed run whose loss moved by less than this fraction, over at least this many steps,
# gets a warning: it trained in name only.
STALL_FRACTION = 0.01
STALL_STEPS = 2
# Where an optimizer's lr usually lies: an lr ten times below gets named as the likely cause.
USUAL_LR = {Optimizer.adam: (1e-4, 1e-2)}
# Manual or SGD steps that together move the weights by less than this fraction of their norm:
# named as the likely cause (a step's size depends on the data and the loss, so it is measured,
# not a range).
SMALL_MOVE = 1e-2


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
    divergence (a non-finite loss, gradient or weight) and warnings (gradients that vanished).
    Each rule is here once."""

    def __init__(
        self,
        config: Config,
        state: "RunState",
        events: EventWriter | None,
        warnings: list[str],
        batch: int,
    ):
        self.config = config
        self.state = state
        self.events = events
        self.series = Series()
        sizes = {name: p.numel() for name, p in state.activation_params.items()}
        self.stream = MetricStream(
            batch, hidden_sizes(config.model.hidden), len(state.weights), sizes
        )
        streamed = self.stream.tags
        self.total_grad_norm = streamed.index(tags.GRAD_NORM_TOTAL)
        self.exact_zeros = streamed.index(tags.EXACT_ZEROS)
        self.tags = [*streamed, *tags.DERIVED]
        self.diverged_at: int | None = None
        self.diverged_on: str | None = None
        # What a step's row says is non-finite, by index: its loss, then each weight's gradient
        # (before the update), then each weight (after it).
        self.watched = [(0, "loss")] + [
            (
                index,
                name.replace("norm/grad_", "gradient norm of ").replace("norm/weight_", "norm of "),
            )
            for index, name in enumerate(streamed)
            if name.startswith(("norm/grad_", "norm/weight_"))
        ]
        self.weight_norms = [
            i for i, name in enumerate(streamed) if name.startswith("norm/weight_")
        ]
        self.last_row: list[float] | None = None
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
        step = self.relative_step()
        if usual is not None and config.lr < usual[0] / 10:
            name = Optimizer(config.optimizer).value
            consequence += (
                f"; lr={config.lr:g} is far below {name}'s usual range ({usual[0]:g} to "
                f"{usual[1]:g})"
            )
        elif step is not None and step * state.step < SMALL_MOVE:
            consequence += (
                f"; a step moves the weights by ~{step:.1g} of their norm (lr={config.lr:g} x "
                f"gradient norm / weight norm), ~{step * state.step:.1g} in {state.step} steps: "
                "a larger lr moves them more"
            )
        self.warn("loss barely moved", 0, consequence)

    def relative_step(self) -> float | None:
        """How far the last recorded manual or SGD step moved the weights, as a fraction of
        their norm: lr x total gradient norm / total weight norm (None for adam, whose step
        does not scale with the gradient, or without a finite row)."""
        row = self.last_row
        if row is None or Optimizer(self.config.optimizer) == Optimizer.adam:
            return None
        weights = math.sqrt(sum(row[i] ** 2 for i in self.weight_norms))
        step = self.config.lr * row[self.total_grad_norm] / weights if weights > 0 else math.nan
        return step if math.isfinite(step) else None

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
            non_finite = next(
                (what for at, what in self.watched if not math.isfinite(row[at])), None
            )
            if non_finite is not None and self.diverged_at is None:
                self.diverged_at, self.diverged_on = step, non_finite
                if self.config.stop_on_divergence:
                    del rows[i + 1 :]  # the steps after it trained on non-finite values
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
        self.last_row = rows[-1]
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
