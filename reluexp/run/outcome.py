"""What a run's recorded steps mean for it, decided here only: the loss it has reached,
divergence (a non-finite loss, gradient or weight), its validation numbers, and the warnings of a
run that stopped learning, with their likely causes. Host numbers in, decisions out: nothing
here computes on a device or writes a file."""

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from reluexp.config import Config
from reluexp.options import Optimizer
from reluexp.record import tags
from reluexp.record.block import Block
from reluexp.run.precision import scaled
from reluexp.run.schedule import learning_rate

# A completed run whose loss moved by less than this fraction, over at least this many steps,
# gets a warning: it trained in name only.
STALL_FRACTION = 0.01
STALL_STEPS = 2
# Where an optimizer's lr usually lies: said beside its steps' size when the lr is below it.
USUAL_LR = {Optimizer.adam: (1e-4, 1e-2)}
# A run whose recorded steps fp16's gradient scaler skipped at least this fraction of never
# trained: its gradients overflow float16 whatever the scale. It ends diverged.
NEARLY_ALL_SKIPPED = 0.9
# Steps that together move the weights by less than this fraction of their norm: a warning, with
# their size (a manual or SGD step's size depends on the data and the loss, so it is measured).
SMALL_MOVE = 1e-2


def watched_columns(streamed: list[str], gradients: bool = True) -> list[tuple[int, str]]:
    """What a row says is non-finite, by column, in the order a step computes it: its loss,
    then each weight's gradient norm (before the update; not with `gradients` False: under a
    gradient scaler an overflowed gradient is a skipped step), then each weight's norm (after
    it)."""
    columns = [(streamed.index(tags.LOSS), "loss")]
    for index, name in enumerate(streamed) if gradients else ():
        if name.startswith(tags.GRAD_NORM_PREFIX) and name != tags.GRAD_NORM_TOTAL:
            columns.append((index, f"gradient norm of {name.removeprefix(tags.GRAD_NORM_PREFIX)}"))
    for index, name in enumerate(streamed):
        if name.startswith(tags.WEIGHT_NORM_PREFIX):
            columns.append((index, f"norm of {name.removeprefix(tags.WEIGHT_NORM_PREFIX)}"))
    return columns


@dataclass
class Outcome:
    """A run's numbers and verdicts so far (checkpointed with it): the loss of its first, last
    and lowest recorded step, where it diverged and on what, its last validation numbers, and
    its warnings (summary.json's list: each kind once, resumed runs too)."""

    min_loss: float = math.inf
    final_loss: float = math.nan
    first_loss: float = math.nan
    diverged_at: int | None = None
    diverged_on: str | None = None
    # With a validation split: the last pass's loss and accuracy, the best accuracy and its
    # step, the last recorded training accuracy (summary.json's fields of the same names).
    evaluation: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # The largest relative step of the update recorded (take_step_sizes).
    largest_step: float = 0.0
    # Recorded steps, and those of them that fp16's gradient scaler skipped (gradients that
    # overflowed float16: non-finite once unscaled).
    recorded_steps: int = 0
    skipped_steps: int = 0
    # The last recorded step's row (for the size of a step), not checkpointed.
    last_row: dict[str, float] = field(default_factory=dict, repr=False)

    def state_dict(self) -> dict[str, Any]:
        values = asdict(self)
        del values["last_row"]
        return values

    def stopped(self, config: Config) -> bool:
        """The run has diverged and stops there (stop_on_divergence)."""
        return self.diverged_at is not None and config.stop_on_divergence

    def update(self, block: Block, config: Config) -> Block:
        """A flushed block's meaning: the losses reached, divergence, warnings, validation
        numbers. Returns the rows the run keeps: with stop_on_divergence, none after the step
        that diverged (they trained on non-finite values)."""
        self.take_evaluations(block)
        if not len(block.rows):
            return block
        watched = watched_columns(block.tags, not scaled(config))
        finite = np.isfinite(block.rows[:, [at for at, _ in watched]])
        broken = np.flatnonzero(~finite.all(axis=1))
        if len(broken) and self.diverged_at is None:
            first = int(broken[0])
            self.diverged_at = block.steps[first]
            # What the step computed first that is not finite.
            self.diverged_on = watched[finite[first].argmin()][1]
            if config.stop_on_divergence:
                block = block.first(first + 1)
        self.warn_of_dead_parts(block)
        losses = block.column(tags.LOSS)
        reached = losses[np.isfinite(losses)]
        if len(reached):
            self.min_loss = min(self.min_loss, float(reached.min()))
        block = self.count_skipped(block, scaled(config))
        self.final_loss = float(losses[-1])
        self.take_step_sizes(block, config)
        self.last_row = dict(zip(block.tags, block.rows[-1].tolist()))
        if block.steps[0] == 0:
            self.first_loss = float(losses[0])
        return block

    def warn_of_dead_parts(self, block: Block) -> None:
        """A warning for a total gradient norm of exactly 0 and for each site whose every
        unit is 0 on the whole batch, at the first step it happens, in the order the rows
        show them."""
        found = np.concatenate(
            [(block.column(tags.GRAD_NORM_TOTAL) == 0)[:, None], block.live_units == 0], axis=1
        )
        at = found.argmax(axis=0)
        for kind in sorted(np.flatnonzero(found.any(axis=0)), key=lambda kind: (at[kind], kind)):
            step = block.steps[at[kind]]
            if kind == 0:
                self.warn(
                    "gradients vanished", step, "total gradient norm exactly 0, no weight moves"
                )
            else:
                self.warn(
                    f"activation {block.sites[kind - 1]} dead",
                    step,
                    "every unit is 0 on the whole batch, no gradient passes it",
                )

    def count_skipped(self, block: Block, fp16: bool) -> Block:
        """Counts the block's recorded steps and, under fp16, those its gradient scaler skipped
        (a non-finite gradient once unscaled: the scaler's own rule), streamed as their running
        count."""
        self.recorded_steps += len(block.rows)
        if not fp16:
            return block
        skipped = ~np.isfinite(block.column(tags.GRAD_NORM_TOTAL))
        counts = self.skipped_steps + np.cumsum(skipped)
        self.skipped_steps = int(counts[-1])
        return block.with_column(tags.SKIPPED_STEPS, counts)

    def check_skipped(self, last_step: int) -> None:
        """A run whose recorded steps fp16's gradient scaler (nearly) all skipped has not
        trained: it diverged, at its last step."""
        if (
            self.diverged_at is None
            and self.recorded_steps
            and self.skipped_steps >= NEARLY_ALL_SKIPPED * self.recorded_steps
        ):
            self.diverged_at, self.diverged_on = last_step, "gradients in float16"

    def take_evaluations(self, block: Block) -> None:
        """The block's validation passes: the last values and the best accuracy."""
        found = self.evaluation
        for step, (loss, accuracy, train_accuracy) in zip(
            block.evaluation_steps, block.evaluations
        ):
            found["val_loss"], found["val_accuracy"] = loss, accuracy
            if math.isfinite(train_accuracy):
                found["train_accuracy"] = train_accuracy
            if math.isfinite(accuracy) and accuracy > found.get("best_val_accuracy", -1.0):
                found["best_val_accuracy"], found["best_val_accuracy_step"] = accuracy, step

    def warn(self, kind: str, step: int, consequence: str) -> None:
        """A warning of this kind, once per run."""
        if not any(warning.startswith(kind) for warning in self.warnings):
            self.warnings.append(f"{kind} from step {step}: {consequence}")

    def check_progress(self, config: Config, steps_done: int, parameters: int) -> None:
        """A completed run that barely learnt looks `completed`: warn when its loss barely moved
        or its steps were too small to move its `parameters` weights, with the likely cause."""
        if steps_done < STALL_STEPS:
            return
        small_steps = self.small_steps(config, steps_done, parameters)
        first, last = self.first_loss, self.final_loss
        moved = (last - first) / abs(first) if first else math.inf
        if not (math.isfinite(moved) and abs(moved) < STALL_FRACTION):
            if small_steps:
                self.warn("steps too small", 0, small_steps)
            return
        consequence = f"{first:.4g} to {last:.4g} ({moved:+.2%}) in {steps_done} steps"
        self.warn("loss barely moved", 0, consequence + (f"; {small_steps}" if small_steps else ""))

    def small_steps(self, config: Config, steps_done: int, parameters: int) -> str:
        """The lr's advice, in terms of the step the optimizer takes: where the largest step
        recorded, times the steps, moves the weights by under SMALL_MOVE of their norm, how
        far (and, for an optimizer with a usual lr range, that range); else ''."""
        optimizer = config.optimizer.name
        if optimizer == Optimizer.adam:
            # Adam's step is about lr per weight whatever the gradient: lr x sqrt(n) in norm.
            step = config.lr * math.sqrt(parameters) / weight_norm(self.last_row)
            how = f"adam's step, lr x sqrt({parameters} weights) / weight norm"
        else:
            step = self.largest_step
            how = "lr x gradient norm / weight norm, the largest step recorded"
        if not math.isfinite(step) or step * steps_done >= SMALL_MOVE:
            return ""
        advice = (
            f"a step moves the weights by ~{step:.1g} of their norm (lr={config.lr:g}: {how}), "
            f"~{step * steps_done:.1g} in {steps_done} steps: a larger lr moves them more"
        )
        usual = USUAL_LR.get(optimizer)
        if usual is not None and config.lr < usual[0]:
            advice += f" ({optimizer.value}'s usual lr: {usual[0]:g} to {usual[1]:g})"
        return advice

    def take_step_sizes(self, block: Block, config: Config) -> None:
        """The largest relative step of the update so far: the step's lr (the schedule's) x
        total gradient norm / total weight norm, for the lr advice (small_steps)."""
        weights = [i for i, tag in enumerate(block.tags) if tag.startswith(tags.WEIGHT_NORM_PREFIX)]
        norm = np.sqrt(np.square(block.rows[:, weights]).sum(axis=1))
        lr = np.array([learning_rate(config, step) for step in block.steps])
        with np.errstate(divide="ignore", invalid="ignore"):
            step = lr * block.column(tags.GRAD_NORM_TOTAL) / np.where(norm > 0, norm, np.nan)
        step = step[np.isfinite(step)]
        if len(step):
            self.largest_step = max(self.largest_step, float(step.max()))


def weight_norm(row: dict[str, float]) -> float:
    """The norm of every weight together, from a row's norm per weight (NaN without any)."""
    squares = [v**2 for tag, v in row.items() if tag.startswith(tags.WEIGHT_NORM_PREFIX)]
    total = math.sqrt(sum(squares))
    return total if total > 0 else math.nan
