"""A small convolutional network for images, the digits' model."""

import torch
from torch import nn

from reluexp.functions.targets import ActivationFactory


class CNN(nn.Module):
    """A small conv net for images (C, H, W): a 3x3 convolution per channel count (stride 2
    after the first, halving the image), each followed by its own activation Module, then a
    linear layer from the flattened maps to the outputs."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        d_out: int,
        channels: list[int],
        activation: ActivationFactory,
    ):
        super().__init__()
        layers: list[nn.Module] = []
        in_channels, (height, width) = input_shape[0], input_shape[1:]
        for i, out_channels in enumerate(channels):
            stride = 1 if i == 0 else 2
            layers += [
                nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1),
                activation(),
            ]
            in_channels = out_channels
            height, width = (height - 1) // stride + 1, (width - 1) // stride + 1
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(in_channels * height * width, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))
