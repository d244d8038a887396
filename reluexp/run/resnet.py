"""The CIFAR ResNet of He et al. 2016 (section 4.2), the network activation papers report on:
a 3x3 convolution, three stages of n basic blocks at widths 16, 32, 64 (each stage after the
first halving the image), global average pooling and a linear layer; 6n + 2 layers. Each block
is conv-BN-activation-conv-BN, the shortcut added, then the activation; where a block changes
the width, the shortcut is the paper's option A (subsampled, zero channels added: no
parameters). The configured activation stands at every place the paper puts a ReLU, each its
own Module."""

import math

import torch
from torch import nn

from reluexp.functions.targets import ActivationFactory


class BasicBlock(nn.Module):
    def __init__(
        self, in_channels: int, out_channels: int, stride: int, activation: ActivationFactory
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.act1 = activation()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.act2 = activation()
        self.stride, self.added = stride, out_channels - in_channels

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        """Option A: the input, subsampled by the stride, its new channels zeros (half before
        its own, half after)."""
        if self.stride == 1 and self.added == 0:
            return x
        x = x[:, :, :: self.stride, :: self.stride]
        before = self.added // 2
        return nn.functional.pad(x, (0, 0, 0, 0, before, self.added - before))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act1(self.bn1(self.conv1(x)))
        return self.act2(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet(nn.Module):
    """depth = 6n + 2 (20, 32, 44, 56, 110), `widths` the stages' (the paper's [16, 32, 64]),
    for images (channels, height, width); the convolutions and the linear layer start as He et
    al. start them (Kaiming normal), BatchNorm at weight 1, bias 0."""

    def __init__(
        self,
        input_shape: tuple[int, ...],
        d_out: int,
        depth: int,
        widths: list[int],
        activation: ActivationFactory,
    ):
        super().__init__()
        blocks = (depth - 2) // 6
        self.stem = nn.Sequential(
            nn.Conv2d(input_shape[0], widths[0], 3, 1, 1, bias=False),
            nn.BatchNorm2d(widths[0]),
            activation(),
        )
        stages, in_channels = [], widths[0]
        for stage, width in enumerate(widths):
            for block in range(blocks):
                stride = 2 if stage > 0 and block == 0 else 1
                stages.append(BasicBlock(in_channels, width, stride, activation))
                in_channels = width
        self.stages = nn.Sequential(*stages)
        self.head = nn.Linear(in_channels, d_out)
        for module in self.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                nn.init.kaiming_normal_(module.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stages(self.stem(x))
        return self.head(features.mean(dim=(2, 3)))


def resnet_sizes(
    input_shape: tuple[int, ...], d_out: int, depth: int, widths: list[int]
) -> tuple[int, int]:
    """What ResNet(input_shape, d_out, depth, widths, ...) would hold, from its shape alone: its
    parameters, and its activations' output elements per example (the memory pre-check's
    count, before anything is built)."""
    channels, height, width = input_shape
    blocks = (depth - 2) // 6
    parameters = 9 * channels * widths[0] + 2 * widths[0]  # the stem's convolution and BN
    elements = widths[0] * height * width
    in_channels = widths[0]
    for stage, out_channels in enumerate(widths):
        for block in range(blocks):
            if stage > 0 and block == 0:  # a 3x3 convolution of stride 2, padding 1
                height, width = math.ceil(height / 2), math.ceil(width / 2)
            parameters += 9 * out_channels * (in_channels + out_channels) + 4 * out_channels
            elements += 2 * out_channels * height * width
            in_channels = out_channels
    return parameters + in_channels * d_out + d_out, elements
