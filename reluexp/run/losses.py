"""The objective a run trains on: the article's summed squared error, the mean squared error,
or cross-entropy for classification, chosen by the config or by what the data's targets are."""

from collections.abc import Callable

import torch

from reluexp.config import Config, ConfigError, Loss
from reluexp.functions.targets import Activation
from reluexp.run.data import Dataset
from reluexp.run.model import forward

Hidden = list[tuple[torch.Tensor, torch.Tensor]]
Objective = Callable[..., tuple[torch.Tensor, Hidden, torch.Tensor | None]]


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
    """The loss the run trains on (loss_kind), as f(x, y, weights, activation, biases) ->
    (loss, the hidden layers the metrics read, the logits for the accuracy or None)."""
    criterion = CRITERIA[loss_kind(config, data)]
    classifies = data.classes is not None

    def loss_of(
        x: torch.Tensor,
        y: torch.Tensor,
        weights: list[torch.Tensor],
        activation: Activation,
        biases: list[torch.Tensor],
    ) -> tuple[torch.Tensor, Hidden, torch.Tensor | None]:
        # The hidden layers and logits come back detached: the metrics only read them, and
        # under compile=true an output that requires grad gets a gradient in the compiled
        # backward, zeros materialized and added every step (at N=4096, H=4096 two 64 MiB fills
        # and a 64 MiB copy: about a tenth of the step).
        output, hidden = forward(x, weights, activation, biases)
        detached = [(pre.detach(), post.detach()) for pre, post in hidden]
        return criterion(output, y), detached, output.detach() if classifies else None

    return loss_of
