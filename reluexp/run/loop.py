"""The training loop, seed-exact: forward, loss, backward, the update, the metrics of every
logged step, checkpoints; until the last step, a divergence or a stop signal."""

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from reluexp.config import Config
from reluexp.record.block import Block
from reluexp.record.metrics import MetricStream
from reluexp.record.progress import Progress
from reluexp.record.recorder import Recorder
from reluexp.run.batches import Batches
from reluexp.run.data import Dataset
from reluexp.run.losses import objective
from reluexp.run.rundir import DiskReserve
from reluexp.run.state import RunState, save_state

log = logging.getLogger("reluexp")


class Stop(Protocol):
    """What asks a run to stop at its next step boundary: the signal that came, None till one
    does (the entry point's: reluexp.shell.stops.StopSignals)."""

    signum: int | None


@dataclass
class Training:
    """What the loop reads and changes: the run's data, state, and where its steps go (no
    directory: nothing is written, and no signal stops it)."""

    config: Config
    run_dir: Path | None
    data: Dataset
    state: RunState
    stream: MetricStream
    recorder: Recorder
    stop: Stop | None
    progress: Progress
    reserve: DiskReserve | None
    start_step: int  # where this process started: a resumed run's checkpoint

    @property
    def stop_signal(self) -> int | None:
        return None if self.stop is None else self.stop.signum

    @property
    def stopped(self) -> bool:
        return self.state.outcome.stopped(self.config)

    def collect(self) -> Block:
        """The steps recorded on the device so far, on the host, with what they mean for the
        run (its outcome, new warnings said); nothing written yet."""
        outcome = self.state.outcome
        said = len(outcome.warnings)
        block = outcome.update(self.stream.flush(), self.config)
        for warning in outcome.warnings[said:]:
            log.warning("warning: %s", warning)
        return block

    def flush(self) -> None:
        self.recorder.write(self.collect())

    def checkpoint(self) -> None:
        save_state(self.run_dir, self.config, self.state, self.recorder.state_dict())


class CompileFailed(Exception):
    """compile=true failed where eager runs: one line naming the activation and torch's first
    line (its whole report, with the traceback, is in the run's log)."""

    def __init__(self, target: str, error: Exception):
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        super().__init__(
            f"torch.compile (compile=true) of the model with activation.target={target} "
            f"failed: {type(error).__name__}: {first}"
        )


def evaluation(
    loss: torch.Tensor,
    logits: torch.Tensor | None,
    y: torch.Tensor,
    batch_logits: torch.Tensor | None,
    batch_y: torch.Tensor,
) -> torch.Tensor:
    """A validation pass's [loss, accuracy, the step's batch accuracy] on the device, float64;
    the accuracies NaN for regression."""
    values = [loss.double()]
    for found, wanted in ((logits, y), (batch_logits, batch_y)):
        values.append(
            (found.argmax(1) == wanted).double().mean()
            if found is not None
            else torch.tensor(math.nan, dtype=torch.float64, device=loss.device)
        )
    return torch.stack(values)


def train_loop(training: Training) -> None:
    """Train from the state's step to config.steps, a divergence, or a stop signal; metrics
    flushed."""
    config, state, stream = training.config, training.state, training.stream
    data = training.data
    loss_of = objective(config, data)
    # compile=true: forward and loss, and through AOTAutograd their backward, as compiled kernels.
    compute_loss = torch.compile(loss_of) if config.compile else loss_of
    augment = getattr(config.data, "augment", False)  # data=random has no images
    batches = Batches(data, config.data.batch_size, config.seed, augment)
    model, capture = state.model, state.capture
    while state.step < config.steps and not training.stopped and training.stop_signal is None:
        step = state.step
        last = step == config.steps - 1
        recording = config.streams_at(step)
        if recording:  # the activation's inputs and outputs, seen by its forward hooks
            capture.start()
        x, y = batches.at(step)
        try:
            loss, logits = compute_loss(model, x, y)
        except Exception as error:
            if not config.compile:
                raise
            # The eager forward ran in the pre-flight's probe: what fails here is the compile.
            raise CompileFailed(config.activation.target, error) from error
        state.update.backward(loss)
        with torch.no_grad():
            if recording:
                stream.start_row(step)
                stream.record_activations(loss, capture.take())
            # Held-out data, with the weights the step's loss saw (before its update), beside
            # the accuracy on the step's batch.
            if data.x_val is not None and (step % config.eval_every == 0 or last):
                model.eval()  # dropout off, normalization's running statistics left alone
                val_loss, val_logits = loss_of(model, data.inputs(data.x_val), data.y_val)
                model.train()
                stream.record_evaluation(
                    step, evaluation(val_loss, val_logits, data.y_val, logits, y)
                )
            state.update(stream if recording else None, step)
            if recording:
                stream.end_row()
        state.step += 1
        if stream.due:
            training.flush()
        training.progress.update(state.step)
        if (
            training.run_dir is not None
            and config.checkpoint_every
            and state.step % config.checkpoint_every == 0
        ):
            training.flush()  # so the checkpoint's min/final loss cover every step before it
            # A divergence that flush found ends the run: the steps since trained on
            # non-finite values, and the last checkpoint stays the last good one.
            if not training.stopped:
                training.checkpoint()
    training.flush()
