"""Model factories as users write them (model=custom model.target=tests.models.<name>), right
and wrong: a timm-style `activation` argument, a model with its own nn.ReLU to replace, and the
mistakes a factory makes."""

import torch
from torch import nn


def two_layer(activation, d_in, d_out):
    """The way timm takes act_layer: a fresh activation Module wherever one goes."""
    return nn.Sequential(
        nn.Linear(d_in, 16), activation(), nn.Linear(16, 16), activation(), nn.Linear(16, d_out)
    )


def placing_the_module(activation, d_in, d_out):
    """The way most users write it: `activation` placed as a Module, one instance called at
    both places (two sites)."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(d_in, 16), activation, nn.Linear(16, 16), activation,
        nn.Linear(16, d_out),
    )  # fmt: skip


def without_flatten(activation, d_in, d_out):
    """Linear layers on image inputs, without nn.Flatten()."""
    return nn.Sequential(nn.Linear(d_in, 16), activation(), nn.Linear(16, d_out))


def with_relus(d_in, d_out):
    """An existing architecture with nn.ReLU written in (model.replace=torch.nn.ReLU)."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(d_in, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
        nn.Linear(16, d_out),
    )  # fmt: skip


def with_relus_and_dropout(d_in, d_out):
    """A model whose training forward draws random numbers (dropout): its runs are still the
    seed's, and resume bit for bit."""
    return nn.Sequential(
        nn.Flatten(), nn.Linear(d_in, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, d_out)
    )


def one_activation_twice(activation, d_in, d_out):
    """One activation Module called twice, as user code often does: two sites."""

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = nn.Linear(d_in, 8), nn.Linear(8, d_out)
            self.act = activation()

        def forward(self, x):
            return self.second(self.act(self.act(self.first(x))))

    return Twice()


def raising(activation, d_in, d_out):
    raise ValueError("no such architecture")


def not_a_module(activation, d_in, d_out):
    return [nn.Linear(d_in, d_out)]


def without_parameters(activation, d_in, d_out):
    return nn.Sequential(activation())


def ignoring_the_activation(d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, 8), nn.Tanh(), nn.Linear(8, d_out))


def wrong_output(activation, d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, 8), activation(), nn.Linear(8, d_out + 3))


def image_input(activation, input_shape, d_out):
    """A factory that takes the input's shape (channels, height, width)."""
    channels = input_shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, 4, 3, padding=1), activation(), nn.Flatten(),
        nn.Linear(4 * input_shape[1] * input_shape[2], d_out),
    )  # fmt: skip


class WithATotal(nn.Module):
    """A parameter named `total`: its gradient norm's tag would be the total's."""

    def __init__(self, activation, d_in, d_out):
        super().__init__()
        self.total = nn.Parameter(torch.zeros(d_out))
        self.layer, self.act = nn.Linear(d_in, d_out), activation()

    def forward(self, x):
        return self.act(self.layer(x)) + self.total
