"""How the parameters move each step, built in one place: the seed's `w -= lr * w.grad`, or a
torch.optim optimizer."""

from typing import Any

import torch

from reluexp.config import Config, Optimizer
from reluexp.record.metrics import MetricRow, flat


class WeightUpdate:
    """A step's update of every trained parameter of the model (weights, biases, the
    activation Modules' own). A recorded step's gradient norms are taken before it (it
    consumes the gradients) and its parameters' norms after it."""

    def __init__(
        self,
        config: Config,
        params: dict[str, torch.Tensor],
        activation_params: list[torch.Tensor],
    ):
        self.params = list(params.values())
        # Views that follow the in-place updates: the parameters' norms without a reshape a step.
        self.flat_params = [flat(p) for p in self.params]
        # The activation Modules' own parameters: their values stream too.
        self.activation_params = activation_params
        self.lr = config.lr
        # None: the seed's manual update, applied here.
        self.optimizer: torch.optim.Optimizer | None = None
        if config.optimizer == Optimizer.sgd:
            self.optimizer = torch.optim.SGD(self.params, lr=config.lr)
        elif config.optimizer == Optimizer.adam:
            self.optimizer = torch.optim.Adam(self.params, lr=config.lr)

    def __call__(self, row: MetricRow | None) -> None:
        if row is not None:
            row.record_grad_norms(self.params)
        if self.optimizer is None:
            self.seed_update(self.params)
        else:
            self.optimizer.step()
            self.optimizer.zero_grad()
        if row is not None:
            row.record_weight_norms(self.flat_params)
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

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict() if self.optimizer is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.optimizer is not None:
            self.optimizer.load_state_dict(state)
