"""Synthetic data, drawn from the run's seeded generator."""

import torch


def make_data(
    n: int, d_in: int, d_out: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's random regression task: x (n, d_in) and y (n, d_out), standard normal, float32."""
    x = torch.randn(n, d_in, generator=generator)
    y = torch.randn(n, d_out, generator=generator)
    return x, y
