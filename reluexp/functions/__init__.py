"""The shipped autograd Functions (activations.py), named in configs and checkpoints as
`reluexp.functions.<Name>`, and how an activation named by a dotted path becomes a callable
(targets.py)."""

from reluexp.functions.activations import (
    LeakyReLU,
    LeanReLU,
    MyReLU,
    PReLU,
    PReLUFunction,
    SiLU,
    Spike,
    fast_sigmoid_derivative,
    spike_reference,
)

__all__ = [
    "LeakyReLU",
    "LeanReLU",
    "MyReLU",
    "PReLU",
    "PReLUFunction",
    "SiLU",
    "Spike",
    "fast_sigmoid_derivative",
    "spike_reference",
]
