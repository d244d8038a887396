"""The objective a run trains on: the article's summed squared error, or cross-entropy for
classification, chosen by the config or by what the data's targets are."""

from collections.abc import Callable
from typing import Any

import torch

from reluexp.config import Config, ConfigError, Loss
from reluexp.functions.targets import Activation
from reluexp.run.data import Dataset
from reluexp.run.model import forward

Objective = Callable[..., tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], Any]]


def detached(
    hidden: list[tuple[torch.Tensor, torch.Tensor]],
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(pre.detach(), post.detach()) for pre, post in hidden]


def squared_error(
    x: torch.Tensor,
    y: torch.Tensor,
    weights: list[torch.Tensor],
    activation: Activation,
    biases: list[torch.Tensor],
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], None]:
    """The article's loss, sum((y_pred - y)^2), and the hidden layers the metrics read.

    The hidden layers come back detached: the metrics only read them, and under compile=true
    an output that requires grad gets a gradient in the compiled backward, zeros materialized
    and added every step (at N=4096, H=4096 two 64 MiB fills and a 64 MiB copy: about a tenth
    of the step)."""
    y_pred, hidden = forward(x, weights, activation, biases)
    return (y_pred - y).pow(2).sum(), detached(hidden), None


def mean_squared_error(
    x: torch.Tensor,
    y: torch.Tensor,
    weights: list[torch.Tensor],
    activation: Activation,
    biases: list[torch.Tensor],
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], None]:
    """Regression's mean squared error over the batch and the outputs (F.mse_loss): the summed
    loss's gradient grows with the batch and the targets' scale, so the article's lr suits
    its data and not every file; the mean's does not grow."""
    y_pred, hidden = forward(x, weights, activation, biases)
    return torch.nn.functional.mse_loss(y_pred, y), detached(hidden), None


def cross_entropy(
    x: torch.Tensor,
    y: torch.Tensor,
    weights: list[torch.Tensor],
    activation: Activation,
    biases: list[torch.Tensor],
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Classification: the mean cross-entropy of the logits against class indices, the hidden
    layers (as squared_error), and the logits (detached) for the accuracy."""
    logits, hidden = forward(x, weights, activation, biases)
    loss = torch.nn.functional.cross_entropy(logits, y)
    return loss, detached(hidden), logits.detach()


def objective(config: Config, data: Dataset) -> Objective:
    """The loss the run trains on: `loss`, or with loss=auto what the data's targets say."""
    kind = Loss(config.loss)
    if kind == Loss.auto:
        kind = Loss.cross_entropy if data.classes is not None else Loss.squared_error
    if (kind == Loss.cross_entropy) != (data.classes is not None):
        targets = "class indices" if data.classes is not None else "values (regression)"
        raise ConfigError(f"loss={kind.value}: the data's targets are {targets}")
    return {
        Loss.squared_error: squared_error,
        Loss.mean_squared_error: mean_squared_error,
        Loss.cross_entropy: cross_entropy,
    }[kind]
