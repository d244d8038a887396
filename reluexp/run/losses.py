"""The objective a run trains on: the article's summed squared error, the mean squared error,
or cross-entropy for classification, chosen by the config or by what the data's targets are."""

from collections.abc import Callable

import torch

from reluexp.config import Config, ConfigError, Loss
from reluexp.run.data import Dataset
from reluexp.run.precision import forward_precision, mixed

Objective = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]


def summed_squared_error(output: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The article's loss, sum((y_pred - y)^2)."""
    return (output - y).pow(2).sum()


# Each loss of the model's output against the targets.
CRITERIA: dict[Loss, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    Loss.squared_error: summed_squared_error,
    # The mean over the batch and the outputs: the summed loss's gradient grows with the batch
    # and the targets' scale, so the article's lr suits its data and not every file.
    Loss.mean_squared_error: torch.nn.functional.mse_loss,
    # Class indices: the mean over the batch.
    Loss.cross_entropy: torch.nn.functional.cross_entropy,
}


def loss_kind(config: Config, data: Dataset) -> Loss:
    """`loss`, or with loss=auto what the data's targets say: cross-entropy for class indices,
    the article's summed squared error for values."""
    kind = config.loss
    if kind == Loss.auto:
        kind = Loss.cross_entropy if data.classes is not None else Loss.squared_error
    if (kind == Loss.cross_entropy) != (data.classes is not None):
        targets = "class indices" if data.classes is not None else "values (regression)"
        raise ConfigError(f"loss={kind.value}: the data's targets are {targets}")
    return kind


def objective(config: Config, data: Dataset) -> Objective:
    """The loss the run trains on (loss_kind), as f(model, x, y) -> (loss, the logits for the
    accuracy or None); under mixed precision the forward runs under autocast and the loss is
    taken of its output in float32."""
    criterion = CRITERIA[loss_kind(config, data)]
    classifies = data.classes is not None

    def loss_of(
        model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        # The logits come back detached: the accuracy only reads them, and under compile=true
        # an output that requires grad gets a gradient in the compiled backward, zeros
        # materialized and added every step.
        if mixed(config):
            with forward_precision(config, x.device):
                output = model(x).float()
        else:
            output = model(x)
        return criterion(output, y), output.detach() if classifies else None

    return loss_of
