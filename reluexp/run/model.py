"""An MLP of plain weight tensors, bias-free as in the seed (biases optional)."""

import math

import torch

from reluexp.functions.targets import Activation


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


def forward(
    x: torch.Tensor,
    weights: list[torch.Tensor],
    activation: Activation,
    biases: list[torch.Tensor] | None = None,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """The prediction and each hidden layer's (pre-activation, activation), both (N, H); with
    biases, each layer adds its own (addmm: the same kernel call)."""
    hidden = []
    h = x
    for i, w in enumerate(weights[:-1]):
        pre = torch.addmm(biases[i], h, w) if biases else h.mm(w)
        h = activation(pre)
        if h.dtype != pre.dtype:  # a float32 mask for a float64 run (spiking libraries' spikes)
            h = h.to(pre.dtype)
        hidden.append((pre, h))
    return (torch.addmm(biases[-1], h, weights[-1]) if biases else h.mm(weights[-1])), hidden
