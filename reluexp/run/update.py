"""How the parameters move each step, built in one place: the seed's `w -= lr * w.grad`, or a
torch.optim optimizer, at the schedule's lr for the step."""

from typing import Any

import torch

from reluexp.config import Config
from reluexp.options import AdamConfig, Optimizer, SGDConfig
from reluexp.record.metrics import MetricStream, flat
from reluexp.run.precision import GradientScaling, fused
from reluexp.run.schedule import learning_rate


def parameter_groups(
    params: dict[str, torch.Tensor],
    activation_params: list[torch.Tensor],
    settings: SGDConfig | AdamConfig,
) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: weight decay on the weights (tensors of two or more
    dimensions: linear and convolution weights), none on biases, normalization layers and the
    activation's own parameters, as the usual recipes have it; on all with decay_all."""
    own = {id(p) for p in activation_params}

    def decayed(p: torch.Tensor) -> bool:
        return settings.decay_all or (p.dim() >= 2 and id(p) not in own)

    groups = [
        {
            "params": [p for p in params.values() if decayed(p)],
            "weight_decay": settings.weight_decay,
        },
        {"params": [p for p in params.values() if not decayed(p)], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


class WeightUpdate:
    """A step's update of every trained parameter of the model (weights, biases, the
    activation Modules' own), and the backward that makes its gradients. A recorded step's
    gradient norms are taken before it (it consumes the gradients) and its parameters' norms
    after it. Under precision=fp16 a gradient scaler scales the loss for the backward and
    unscales the gradients before anything reads them: the streamed norms are the true
    gradients', and a step whose gradients overflowed float16 (inf or NaN, by design while
    the scale settles) is skipped by the scaler, not taken."""

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
        self.config = config
        # None: the seed's manual update, applied here.
        self.optimizer: torch.optim.Optimizer | None = None
        settings = config.optimizer
        if settings.name != Optimizer.manual:
            groups = parameter_groups(params, activation_params, settings)
            if settings.name == Optimizer.sgd:
                self.optimizer = torch.optim.SGD(
                    groups,
                    lr=config.lr,
                    momentum=settings.momentum,
                    nesterov=settings.nesterov,
                    fused=fused(config, self.params[0].device),
                )
            else:
                self.optimizer = torch.optim.Adam(
                    groups, lr=config.lr, fused=fused(config, self.params[0].device)
                )
        self.scaling = GradientScaling(config, self.params[0].device)

    def backward(self, loss: torch.Tensor) -> None:
        self.scaling.backward(loss)

    def __call__(self, stream: MetricStream | None, step: int) -> None:
        """The update of training step `step` (its lr the schedule's); its norms recorded in
        the stream's row where the step is recorded."""
        lr = learning_rate(self.config, step)
        self.scaling.unscale(self.optimizer)
        if stream is not None:
            stream.record_grad_norms(self.params)
        if self.optimizer is None:
            self.seed_update(self.params, lr)
        else:
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            self.scaling.step(self.optimizer)
            self.optimizer.zero_grad()
        if stream is not None:
            stream.record_weight_norms(self.flat_params)
            stream.record_activation_params(self.activation_params)

    def seed_update(self, tensors: list[torch.Tensor], lr: float) -> None:
        for w in tensors:
            if w.grad is None:  # a parameter the loss does not reach
                continue
            # The seed's `w -= lr * w.grad`, with lr * w.grad computed in place in the
            # gradient, which is then dropped instead of zeroed: the same values, without a
            # temporary, a fill and an accumulate per weight.
            w -= w.grad.mul_(lr)
            w.grad = None

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict() if self.optimizer is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.optimizer is not None:
            self.optimizer.load_state_dict(regrouped(state, self.optimizer, self.params))


def regrouped(
    state: dict[str, Any], optimizer: torch.optim.Optimizer, params: list[torch.Tensor]
) -> dict[str, Any]:
    """An optimizer state of one parameter group, every parameter in `params`' order (format
    4 and before: no weight decay, so no group without it), as the state of `optimizer`'s
    groups (parameter_groups), each parameter's state under its new index; any other state
    as it is."""
    groups = state["param_groups"]
    if len(groups) != 1 or len(optimizer.param_groups) == 1:
        return state
    position = {id(p): i for i, p in enumerate(params)}
    order = [position[id(p)] for group in optimizer.param_groups for p in group["params"]]
    new_index = {old: new for new, old in enumerate(order)}
    start = 0
    new_groups = []
    for group in optimizer.param_groups:
        ids = list(range(start, start + len(group["params"])))
        new_groups.append({**groups[0], "weight_decay": group["weight_decay"], "params": ids})
        start += len(ids)
    return {
        "state": {new_index[old]: value for old, value in state["state"].items()},
        "param_groups": new_groups,
    }
