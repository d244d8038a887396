"""A bias-free MLP of plain weight tensors, as in the seed."""

import torch

from reluexp.activations import Activation


def init_weights(sizes: list[int], generator: torch.Generator) -> list[torch.Tensor]:
    """One standard-normal float32 matrix per layer, (sizes[i], sizes[i + 1]), in layer order."""
    return [torch.randn(d_in, d_out, generator=generator) for d_in, d_out in zip(sizes, sizes[1:])]


def forward(
    x: torch.Tensor, weights: list[torch.Tensor], activation: Activation
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The prediction and each hidden layer's (pre-activation, activation), both (N, H)."""
    hidden = []
    h = x
    for w in weights[:-1]:
        pre = h.mm(w)
        h = activation(pre)
        hidden.append((pre, h))
    return h.mm(weights[-1]), hidden
