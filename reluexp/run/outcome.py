"""What a run's recorded steps mean for it, decided here only: the loss it has reached,
divergence (a non-finite loss, gradient or weight), its validation numbers, and the warnings of a
run that stopped learning, with their likely causes. Host numbers in, decisions out: nothing
here computes on a device or writes a file."""

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from reluexp.config import Config, Optimizer
from reluexp.record import tags
from reluexp.record.metrics import Block
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
        if not block.rows:
            return block
        streamed = block.tags
        loss, total = streamed.index(tags.LOSS), streamed.index(tags.GRAD_NORM_TOTAL)
        watched = watched_columns(streamed, not scaled(config))
        kept = len(block.rows)
        for i, (step, row) in enumerate(zip(block.steps, block.rows)):
            if row[total] == 0:
                self.warn(
                    "gradients vanished", step, "total gradient norm exactly 0, no weight moves"
                )
            for site, live in zip(block.sites, block.live_units[i]):
                if live == 0:
                    self.warn(
                        f"activation {site} dead",
                        step,
                        "every unit is 0 on the whole batch, no gradient passes it",
                    )
            if math.isfinite(row[loss]):
                self.min_loss = min(self.min_loss, row[loss])
            non_finite = next((what for at, what in watched if not math.isfinite(row[at])), None)
            if non_finite is not None and self.diverged_at is None:
                self.diverged_at, self.diverged_on = step, non_finite
                if config.stop_on_divergence:
                    kept = i + 1
                    break
        block = self.count_skipped(block.first(kept), scaled(config))
        self.final_loss = block.rows[-1][loss]
        self.take_step_sizes(block, config)
        self.last_row = dict(zip(streamed, block.rows[-1]))
        if block.steps[0] == 0:
            self.first_loss = block.rows[0][loss]
        return block

    def count_skipped(self, block: Block, fp16: bool) -> Block:
        """Counts the block's recorded steps and, under fp16, those its gradient scaler skipped
        (a non-finite gradient once unscaled: the scaler's own rule), streamed as their running
        count."""
        self.recorded_steps += len(block.rows)
        if not fp16:
            return block
        total = block.tags.index(tags.GRAD_NORM_TOTAL)
        counts = []
        for row in block.rows:
            self.skipped_steps += not math.isfinite(row[total])
            counts.append(self.skipped_steps)
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
        total = block.tags.index(tags.GRAD_NORM_TOTAL)
        weights = [i for i, tag in enumerate(block.tags) if tag.startswith(tags.WEIGHT_NORM_PREFIX)]
        for at, row in zip(block.steps, block.rows):
            norm = math.sqrt(sum(row[i] ** 2 for i in weights))
            lr = learning_rate(config, at)
            step = lr * row[total] / norm if norm > 0 else math.nan
            if math.isfinite(step):
                self.largest_step = max(self.largest_step, step)


def weight_norm(row: dict[str, float]) -> float:
    """The norm of every weight together, from a row's norm per weight (NaN without any)."""
    squares = [v**2 for tag, v in row.items() if tag.startswith(tags.WEIGHT_NORM_PREFIX)]
    total = math.sqrt(sum(squares))
    return total if total > 0 else math.nan
