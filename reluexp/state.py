"""A run's state: built from its config, or restored from its checkpoint, and saved to it."""

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from reluexp.activations import Activation
from reluexp.checkpoint import save_checkpoint
from reluexp.config import Config, Dtype, Init, config_dict, layer_sizes
from reluexp.data import make_data
from reluexp.model import init_weights
from reluexp.update import make_optimizer

log = logging.getLogger("reluexp")


@dataclass
class RunState:
    """What a run needs to go on: the weights, the activation's own parameters (a Module's,
    trained with them), the optimizer, and what the run has seen so far."""

    weights: list[torch.Tensor]
    activation_params: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer | None
    step: int = 0
    min_loss: float = math.inf
    final_loss: float = math.nan
    # Logged steps so far whose pre-activations held an exact 0.0.
    steps_with_exact_zeros: int = 0
    # Wall time of the run's earlier segments (before an interruption), and this one's start.
    earlier_wall_time_s: float = 0.0
    segment_start: float = 0.0

    @property
    def wall_time_s(self) -> float:
        return self.earlier_wall_time_s + time.perf_counter() - self.segment_start


def build_state(
    config: Config,
    device: torch.device,
    checkpoint: dict[str, Any] | None,
    activation: Activation | None = None,
) -> tuple[torch.Tensor, torch.Tensor, RunState]:
    """The data (x, y) and the run's state, fresh or from a checkpoint, on the device; an
    activation Module is moved there too, its parameters trained with the weights."""
    # One CPU generator in the seed's order (x, y, w1, w2, ...): CPU and GPU runs start identical.
    generator = torch.Generator("cpu").manual_seed(config.seed)
    x, y = make_data(config.data.n, config.data.d_in, config.data.d_out, generator)
    weights = init_weights(layer_sizes(config), generator, Init(config.model.init).value)
    if checkpoint is not None:
        weights = checkpoint["weights"]
    dtype = getattr(torch, Dtype(config.dtype).value)
    x, y = x.to(device, dtype), y.to(device, dtype)
    weights = [w.to(device, dtype).requires_grad_() for w in weights]
    activation_params: dict[str, torch.Tensor] = {}
    if isinstance(activation, nn.Module):
        activation.to(device, dtype)
        if checkpoint is not None:
            activation.load_state_dict(checkpoint.get("activation", {}))
        activation_params = dict(activation.named_parameters())
    optimizer = make_optimizer(config, [*weights, *activation_params.values()])
    state = RunState(weights, activation_params, optimizer, segment_start=time.perf_counter())
    if checkpoint is not None:
        state.step = checkpoint["step"]
        state.min_loss = checkpoint["min_loss"]
        state.final_loss = checkpoint["final_loss"]
        state.steps_with_exact_zeros = checkpoint.get("steps_with_exact_zeros", 0)
        state.earlier_wall_time_s = checkpoint["wall_time_s"]
        if state.optimizer is not None:
            state.optimizer.load_state_dict(checkpoint["optimizer"])
        torch.set_rng_state(checkpoint["rng_cpu"])
        if torch.cuda.is_available() and checkpoint["rng_cuda"]:
            torch.cuda.set_rng_state_all(checkpoint["rng_cuda"])
    return x, y, state


def save_state(run_dir: Path, config: Config, state: RunState) -> None:
    log.debug("checkpoint at step %d", state.step)
    save_checkpoint(
        run_dir,
        {
            "step": state.step,
            "weights": [w.detach() for w in state.weights],
            "activation": {name: p.detach() for name, p in state.activation_params.items()},
            "optimizer": state.optimizer.state_dict() if state.optimizer is not None else {},
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "config": config_dict(config),
            "min_loss": state.min_loss,
            "final_loss": state.final_loss,
            "steps_with_exact_zeros": state.steps_with_exact_zeros,
            "wall_time_s": state.wall_time_s,
        },
    )
