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
from reluexp.run.checkpoint import CHECKPOINT_FORMAT, save_checkpoint
from reluexp.run.data import Dataset, load_data
from reluexp.run.model import Built, Capture, Site, activation_modules
from reluexp.run.outcome import Outcome
from reluexp.run.precision import matches_state
from reluexp.run.update import WeightUpdate

log = logging.getLogger("reluexp")


@dataclass
class RunState:
    """What a run needs to go on: its model (where the activation runs, and the capture that
    sees it there), its update, and what the run has seen so far."""

    model: nn.Module
    sites: list[Site]
    capture: Capture
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

    @property
    def parameter_count(self) -> int:
        """How many numbers the update trains."""
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def activation_params(self) -> dict[str, torch.Tensor]:
        """The activation Modules' own trained parameters, by their names in the model."""
        return {
            f"{name}.{param}" if name else param: p
            for name, module in activation_modules(self.model, self.capture.instances).items()
            # recurse: an activation placed as a Module (model.Placeable) holds its own.
            for param, p in module.named_parameters()
            if p.requires_grad
        }


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
    data: Dataset,
    built: Built,
    checkpoint: dict[str, Any] | None,
    training_seed: int,
) -> tuple[Dataset, RunState]:
    """The data and the run's state on the device in the run's dtype: the built model as it
    starts, torch's generators (CPU and accelerators) seeded with training_seed, or as its
    checkpoint (already checked) left them, with its optimizer. (The caller's job_environment
    puts torch's generators back when the run ends.)"""
    dtype = getattr(torch, config.dtype.value)
    data = data.to(device, dtype)
    model = built.model.to(device=device, dtype=dtype)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    state = RunState(model, built.sites, built.capture, None, segment_start=time.perf_counter())
    state.update = WeightUpdate(config, params, list(state.activation_params().values()))
    if checkpoint is None:
        torch.manual_seed(training_seed)
    else:
        state.step = checkpoint["step"]
        state.outcome = Outcome(**checkpoint["outcome"])
        state.recorded = checkpoint["recorded"]
        state.earlier_wall_time_s = checkpoint["wall_time_s"]
        state.update.load_state_dict(checkpoint["optimizer"])
        state.update.scaling.load_state_dict(checkpoint["scaler"])
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
            "model": state.model.state_dict(),
            "optimizer": state.update.state_dict(),
            "scaler": state.update.scaling.state_dict(),
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "config": config_dict(config),
            "outcome": state.outcome.state_dict(),
            "recorded": recorded,
            "wall_time_s": state.wall_time_s,
        },
    )


def check_checkpoint(
    checkpoint: dict[str, Any], config: Config, model: nn.Module, where: str
) -> None:
    """Every field of a checkpoint (bytes already verified) makes sense for its config and the
    model it built before anything trains from it; otherwise one line naming the field."""

    def refuse(name: str, why: str) -> None:
        raise ConfigError(f"{where}: checkpoint.pt's {name} {why}")

    def number(value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)

    def whole(value: Any, low: int, high: int) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    step = checkpoint.get("step")
    if not whole(step, 0, config.steps):
        refuse("step", f"is {step!r}: must be a whole number from 0 to {config.steps}")
    outcome = checkpoint.get("outcome")
    if not isinstance(outcome, dict) or set(outcome) != set(Outcome().state_dict()):
        refuse("outcome", "is not a run's outcome")
    for name in ("min_loss", "final_loss", "first_loss", "largest_step"):
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
    saved = checkpoint.get("model")
    if not isinstance(saved, dict) or not all(isinstance(t, torch.Tensor) for t in saved.values()):
        refuse("model", "is not a model's state (a dict of tensors)")
    shapes = {name: tuple(t.shape) for name, t in saved.items()}
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    if shapes != expected:
        differs = next(
            name for name in {**expected, **shapes} if shapes.get(name) != expected.get(name)
        )
        if differs not in shapes:
            why = f"lacks {differs} (the config's model has it, of shape {expected[differs]})"
        elif differs not in expected:
            why = f"has {differs}, which the config's model lacks"
        else:
            why = f"has {differs} of shape {shapes[differs]}; the config's model has "
            why += str(expected[differs])
        refuse("model", why)
    rng = checkpoint.get("rng_cpu")
    if not isinstance(rng, torch.Tensor) or rng.dtype != torch.uint8:
        refuse("rng_cpu", "is not a torch RNG state (a uint8 tensor)")
    if not isinstance(checkpoint.get("optimizer", {}), dict):
        refuse("optimizer", "is not an optimizer state")
    scaler = checkpoint.get("scaler")
    if not matches_state(config, scaler):
        refuse("scaler", "is not the gradient scaler's state precision=fp16 keeps (none else)")
