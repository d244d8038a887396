"""Mixed precision in one room: where a run's forward runs (under autocast to bfloat16 or
float16), the gradient scaler precision=fp16 steps with (the loss scaled for the backward, the
gradients unscaled before anything reads them, a step whose gradients overflowed skipped), its
state in a checkpoint, and what it changes in what a run watches."""

from typing import Any

import torch

from reluexp.config import Config, ConfigError, Precision
from reluexp.functions.targets import raised_at

# The dtype each mixed precision runs its forward's matrix products and convolutions in.
HALF = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16}


def mixed(config: Config) -> bool:
    return config.precision != Precision.fp32


def scaled(config: Config) -> bool:
    """The run steps through a gradient scaler (fp16): a step whose gradients are not finite
    once unscaled is skipped by design while the scale settles, not a divergence; the run
    counts them instead (run.outcome)."""
    return config.precision == Precision.fp16


def forward_precision(config: Config, device: torch.device) -> torch.autocast:
    """Where a mixed-precision run's forward runs: under autocast to bfloat16 or float16
    (matrix products and convolutions in it, what autocast keeps in float32 in float32; a
    custom Function gets its input as the op before it gave it)."""
    return torch.autocast(device.type, dtype=HALF[config.precision])


def check_precision(config: Config, model: torch.nn.Module, x: torch.Tensor) -> None:
    """Under mixed precision, the probe's forward again under autocast (on the CPU, where the
    model is built): an activation that cannot take the half dtype is one line naming it."""
    if not mixed(config):
        return
    try:
        with torch.no_grad(), forward_precision(config, x.device):
            model(x)
    except Exception as error:
        raise ConfigError(
            f"precision={config.precision.value}: activation.target={config.activation.target} "
            f"in model={config.model.name.value}, under autocast, {raised_at(error)} (`python "
            "-m reluexp.check` checks a Function in half precision and says why)"
        ) from None


def fused(config: Config, device: torch.device) -> bool | None:
    """The optimizer's `fused`: under the gradient scaler on an accelerator, torch's fused
    optimizers (the scaler hands them its overflow flag on the device, where with another it
    reads it on the host every step: a sync). Else None, torch's own choice: on the CPU there
    is no sync to save (and torch has fused CPU optimizers only from 2.4), and fused=False
    would turn off its foreach kernels on an accelerator."""
    return True if scaled(config) and device.type != "cpu" else None


class GradientScaling:
    """fp16's gradient scaler around a torch optimizer (validate(): fp16 has one), or without
    fp16 the plain backward and step."""

    def __init__(self, config: Config, device: torch.device):
        self.scaler = torch.amp.GradScaler(device.type) if scaled(config) else None

    def backward(self, loss: torch.Tensor) -> None:
        (loss if self.scaler is None else self.scaler.scale(loss)).backward()

    def unscale(self, optimizer: torch.optim.Optimizer | None) -> None:
        """The gradients as they are, before anything reads them (the streamed norms)."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The optimizer's step, skipped by the scaler where a gradient overflowed."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()

    def state_dict(self) -> dict[str, Any]:
        """The scaler's scale and growth count ({} without one)."""
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.scaler is not None:
            self.scaler.load_state_dict(state)


def matches_state(config: Config, state: Any) -> bool:
    """A checkpoint's scaler state is the one its config keeps: the scaler's under fp16,
    none else."""
    return isinstance(state, dict) and bool(state) == scaled(config)
