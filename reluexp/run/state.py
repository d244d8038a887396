"""A run's state: built from its config, or restored from its checkpoint, and saved to it."""

import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from reluexp.config import Config, ConfigError, config_dict
from reluexp.functions.targets import Activation
from reluexp.run.checkpoint import save_checkpoint
from reluexp.run.data import Dataset, load_data
from reluexp.run.model import init_weights
from reluexp.run.outcome import Outcome
from reluexp.run.update import WeightUpdate

# What a checkpoint's fields are: a checkpoint of another format is refused, not misread.
CHECKPOINT_FORMAT = 2

log = logging.getLogger("reluexp")


@dataclass
class RunState:
    """What a run needs to go on: the weights, the activation's own parameters (a Module's,
    trained with them), their update, and what the run has seen so far."""

    weights: list[torch.Tensor]
    # One per layer with model.bias, else none.
    biases: list[torch.Tensor]
    activation_params: dict[str, torch.Tensor]
    update: WeightUpdate
    step: int = 0
    # What its recorded steps mean: its losses, divergence, warnings (run/outcome.py).
    outcome: Outcome = field(default_factory=Outcome)
    # What its recorder counts across a resume (Recorder.state_dict), from its checkpoint.
    recorded: dict[str, Any] = field(default_factory=dict)
    # Wall time of the run's earlier segments (before an interruption), and this one's start.
    earlier_wall_time_s: float = 0.0
    segment_start: float = 0.0

    @property
    def wall_time_s(self) -> float:
        return self.earlier_wall_time_s + time.perf_counter() - self.segment_start


def seeded_data(
    config: Config, arrays: list[torch.Tensor] | None
) -> tuple[Dataset, torch.Generator]:
    """The run's data (real data's checked arrays, or None for the random data), and the
    generator that goes on to draw its weights: one CPU generator in the seed's order (x, y,
    w1, w2, ...), so CPU and GPU runs start identical."""
    generator = torch.Generator("cpu").manual_seed(config.seed)
    return load_data(config, arrays, generator), generator


def build_state(
    config: Config,
    device: torch.device,
    seeded: tuple[Dataset, torch.Generator],
    checkpoint: dict[str, Any] | None,
    activation: Activation | None = None,
) -> tuple[Dataset, RunState]:
    """The data and the run's state, fresh or from a checkpoint (already checked), on the
    device; an activation Module is moved there too, its parameters trained with the weights."""
    data, generator = seeded
    weights = init_weights(
        data.layer_sizes(config.model.hidden), generator, config.model.init.value
    )
    biases = [torch.zeros(w.shape[1]) for w in weights] if config.model.bias else []
    if checkpoint is not None:
        weights, biases = checkpoint["weights"], checkpoint.get("biases", [])
    dtype = getattr(torch, config.dtype.value)
    data = data.to(device, dtype)
    weights = [w.to(device, dtype).requires_grad_() for w in weights]
    biases = [b.to(device, dtype).requires_grad_() for b in biases]
    activation_params: dict[str, torch.Tensor] = {}
    if isinstance(activation, nn.Module):
        activation.to(device, dtype)
        if checkpoint is not None:
            activation.load_state_dict(checkpoint.get("activation", {}))
        activation_params = dict(activation.named_parameters())
    update = WeightUpdate(config, weights, biases, list(activation_params.values()))
    state = RunState(weights, biases, activation_params, update, segment_start=time.perf_counter())
    if checkpoint is not None:
        state.step = checkpoint["step"]
        state.outcome = Outcome(**checkpoint["outcome"])
        state.recorded = checkpoint["recorded"]
        state.earlier_wall_time_s = checkpoint["wall_time_s"]
        state.update.load_state_dict(checkpoint["optimizer"])
        torch.set_rng_state(checkpoint["rng_cpu"])
        if torch.cuda.is_available() and checkpoint["rng_cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng_cuda"])
    return data, state


def save_state(run_dir: Path, config: Config, state: RunState, recorded: dict[str, Any]) -> None:
    """The run's checkpoint; `recorded`: its recorder's counts (Recorder.state_dict)."""
    log.debug("checkpoint at step %d", state.step)
    save_checkpoint(
        run_dir,
        {
            "format": CHECKPOINT_FORMAT,
            "step": state.step,
            "weights": [w.detach() for w in state.weights],
            "biases": [b.detach() for b in state.biases],
            "activation": {name: p.detach() for name, p in state.activation_params.items()},
            "optimizer": state.update.state_dict(),
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "config": config_dict(config),
            "outcome": state.outcome.state_dict(),
            "recorded": recorded,
            "wall_time_s": state.wall_time_s,
        },
    )


def check_checkpoint(
    checkpoint: dict[str, Any], config: Config, sizes: list[int], where: str
) -> None:
    """Every field of a checkpoint (bytes already verified) makes sense for its config before
    anything trains from it; otherwise one line naming the field."""

    def refuse(name: str, why: str) -> None:
        raise ConfigError(f"{where}: checkpoint.pt's {name} {why}")

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    def whole(value: Any, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    if checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise ConfigError(
            f"{where}: checkpoint.pt was written by another version of reluexp (format "
            f"{checkpoint.get('format', 1)!r}, this one reads {CHECKPOINT_FORMAT}); resume it "
            "with that version"
        )
    step = checkpoint.get("step")
    if not whole(step, 0, config.steps):
        refuse("step", f"is {step!r}: must be a whole number from 0 to {config.steps}")
    outcome = checkpoint.get("outcome")
    if not isinstance(outcome, dict) or set(outcome) != set(Outcome().state_dict()):
        refuse("outcome", "is not a run's outcome")
    for name in ("min_loss", "final_loss", "first_loss"):
        if not number(outcome[name]):
            refuse(f"outcome's {name}", f"is {outcome[name]!r}: must be a number")
    diverged = (outcome["diverged_at"], outcome["diverged_on"])
    if diverged != (None, None) and not (
        whole(diverged[0], 0, step) and isinstance(diverged[1], str)
    ):
        refuse("outcome's divergence", f"is {diverged!r}: must be a step and what diverged")
    if not isinstance(outcome["warnings"], list) or not all(
        isinstance(w, str) for w in outcome["warnings"]
    ):
        refuse("outcome's warnings", "are not a list of lines")
    if not isinstance(outcome["evaluation"], dict) or not all(
        map(number, outcome["evaluation"].values())
    ):
        refuse("outcome's evaluation", "is not a dict of numbers")
    zeros = checkpoint.get("recorded", {}).get("steps_with_exact_zeros")
    if not whole(zeros, 0, step):
        refuse("steps_with_exact_zeros", f"is {zeros!r}: must be a whole number from 0 to {step}")
    wall_time = checkpoint.get("wall_time_s")
    if not number(wall_time) or not math.isfinite(wall_time) or wall_time < 0:
        refuse("wall_time_s", f"is {wall_time!r}: must be a finite number >= 0")
    weights = checkpoint.get("weights")
    expected = list(zip(sizes, sizes[1:]))
    if not isinstance(weights, list) or not all(
        isinstance(w, torch.Tensor) and w.is_floating_point() for w in weights
    ):
        refuse("weights", "are not a list of floating-point tensors")
    shapes = [tuple(w.shape) for w in weights]
    if shapes != expected:
        refuse("weights", f"have the shapes {shapes}; the config's layers are {expected}")
    biases = checkpoint.get("biases", [])
    if [tuple(b.shape) if isinstance(b, torch.Tensor) else b for b in biases] != (
        [(d_out,) for _, d_out in expected] if config.model.bias else []
    ):
        refuse("biases", "do not fit the config's layers (model.bias)")
    activation = checkpoint.get("activation", {})
    if not isinstance(activation, dict) or not all(
        isinstance(p, torch.Tensor) for p in activation.values()
    ):
        refuse("activation", "is not a dict of tensors")
    rng = checkpoint.get("rng_cpu")
    if not isinstance(rng, torch.Tensor) or rng.dtype != torch.uint8:
        refuse("rng_cpu", "is not a torch RNG state (a uint8 tensor)")
    if not isinstance(checkpoint.get("optimizer", {}), dict):
        refuse("optimizer", "is not an optimizer state")
