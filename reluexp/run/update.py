"""How the weights move each step: the seed's `w -= lr * w.grad`, or a torch.optim optimizer."""

import torch

from reluexp.config import Config, Optimizer
from reluexp.record.metrics import MetricRow
from reluexp.run import fused


def make_optimizer(config: Config, weights: list[torch.Tensor]) -> torch.optim.Optimizer | None:
    """None for the seed's manual update, which WeightUpdate applies itself."""
    if config.optimizer == Optimizer.sgd:
        return torch.optim.SGD(weights, lr=config.lr)
    if config.optimizer == Optimizer.adam:
        return torch.optim.Adam(weights, lr=config.lr)
    return None


class WeightUpdate:
    """A step's update. A recorded step's gradient norms are taken before it (it consumes the
    gradients) and its weight norms after it; on a float32 CPU run with the fused kernel built,
    the seed's update takes both in its own pass over each weight."""

    def __init__(
        self,
        weights: list[torch.Tensor],
        optimizer: torch.optim.Optimizer | None,
        lr: float,
        activation_params: list[torch.Tensor] = (),
        kernel_blocks: fused.Blocks | None = None,
    ):
        self.weights = weights
        self.optimizer = optimizer
        self.lr = lr
        # The activation's own parameters: the same update, no norms (their values stream).
        self.activation_params = list(activation_params)
        # The fused kernel, with the metric stream's blocks it writes the norms into.
        self.fused_weights = []
        if optimizer is None and kernel_blocks is not None and fused.serves(*weights):
            self.fused_weights = [fused.Weight(w, kernel_blocks, i) for i, w in enumerate(weights)]

    def __call__(self, row: MetricRow | None) -> None:
        if self.fused_weights and row is not None:
            for weight in self.fused_weights:
                weight.update_with_norms(weight.w.grad.contiguous(), self.lr, row.index)
                weight.w.grad = None
            self.seed_update(self.activation_params)
        else:
            if row is not None:
                row.record_grad_norms(self.weights)
            if self.optimizer is None:
                self.seed_update([*self.weights, *self.activation_params])
            else:
                self.optimizer.step()
                self.optimizer.zero_grad()
            if row is not None:
                row.record_weight_norms(self.weights)
        if row is not None and self.activation_params:
            row.record_activation_params(self.activation_params)

    def seed_update(self, tensors: list[torch.Tensor]) -> None:
        for w in tensors:
            if w.grad is None:  # a parameter the loss does not reach
                continue
            # The seed's `w -= lr * w.grad`, with lr * w.grad computed in place in the
            # gradient, which is then dropped instead of zeroed: the same values, without a
            # temporary, a fill and an accumulate per weight.
            w -= w.grad.mul_(self.lr)
            w.grad = None
