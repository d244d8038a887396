"""The training loop, seed-exact: forward, loss, backward, the update, the metrics of every
logged step, checkpoints; until the last step, a divergence or a stop signal."""

from dataclasses import dataclass
from pathlib import Path

import torch

from reluexp.config import Config
from reluexp.functions.targets import Activation
from reluexp.record.progress import Progress
from reluexp.record.recorder import Recorder
from reluexp.run.batches import Batches
from reluexp.run.data import Dataset
from reluexp.run.losses import objective
from reluexp.run.rundir import DiskReserve
from reluexp.run.signals import StopSignals
from reluexp.run.state import RunState, save_state


@dataclass
class Training:
    """What the loop reads and changes: the run's data, state, and where its steps go (no
    directory: nothing is written, and no signal stops it)."""

    config: Config
    run_dir: Path | None
    data: Dataset
    state: RunState
    activation: Activation
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
            row = stream.new_row() if recording else None
            if row is not None:
                row.record_activations(loss, hidden)
            # Held-out data, with the weights the step's loss saw (before its update), beside
            # the accuracy on the step's batch.
            if data.x_val is not None and (step % config.eval_every == 0 or last):
                val_loss, _, val_logits = loss_of(
                    data.x_val, data.y_val, state.weights, training.activation, state.biases
                )
                recorder.record_evaluation(step, val_loss, val_logits, data.y_val, logits, y)
            state.update(row)
            if row is not None:
                stream.end_row(step, row)
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
