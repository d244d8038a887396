"""The article's network: plain weight matrices drawn from the run's generator in the article's
order (seed-exact), an activation Module after each hidden layer."""

import math

import torch
from torch import nn

from reluexp.functions.targets import ActivationFactory


def init_weights(
    sizes: list[int], generator: torch.Generator, init: str = "randn"
) -> list[torch.Tensor]:
    """One float32 matrix per layer, (sizes[i], sizes[i + 1]), in layer order: standard normal
    (the seed's), or `scaled` by sqrt(2 / fan_in) (He et al.), the same draws either way.

    With `randn` every layer multiplies the activations' scale by about sqrt(fan_in): a deeper
    MLP's second hidden layer starts saturated, and one large update kills it."""
    weights = [
        torch.randn(d_in, d_out, generator=generator) for d_in, d_out in zip(sizes, sizes[1:])
    ]
    if init == "scaled":
        weights = [w * math.sqrt(2 / w.shape[0]) for w in weights]
    return weights


class MLP(nn.Module):
    """The article's network: y = act(x @ w1) @ w2 with plain weight matrices w1 (d_in, h),
    w2 (h, d_out) (more hidden layers: w3, ...), biases b1, b2, ... when given (each layer's
    addmm: the same kernel call), an activation Module per hidden layer (act1, act2, ...).
    Inputs of any shape are flattened after the batch dimension."""

    def __init__(
        self,
        weights: list[torch.Tensor],
        biases: list[torch.Tensor],
        activation: ActivationFactory,
    ):
        super().__init__()
        self.layers = len(weights)
        for i, w in enumerate(weights, 1):
            self.register_parameter(f"w{i}", nn.Parameter(w))
        for i, b in enumerate(biases, 1):
            self.register_parameter(f"b{i}", nn.Parameter(b))
        self.biased = bool(biases)
        for i in range(1, self.layers):
            self.add_module(f"act{i}", activation())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for i in range(1, self.layers + 1):
            w = getattr(self, f"w{i}")
            h = torch.addmm(getattr(self, f"b{i}"), h, w) if self.biased else h.mm(w)
            if i < self.layers:
                h = getattr(self, f"act{i}")(h)
        return h
