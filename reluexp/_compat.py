"""Every use reluexp makes of a dependency's non-public names, in one place. Each says what it
relies on and falls back to the public path when a name is missing or has changed shape;
tests/test_compat.py fails, naming the torch version, when one has.

torch.autograd.Function.apply, for a Function with setup_context, binds forward's signature
with inspect on every call (to fill in default arguments: about 12 us a call, most of
lean_relu's gap to torch.relu at the reference size). With positional tensors only there is
nothing to fill in. What apply then does (torch 2.3 to 2.13, torch/autograd/function.py):
outside functorch transforms (vmap, grad), unwrap dead functorch wrappers and call the C++
apply of the Function's base class; inside them, its own path. That needs two internals:
`torch._C._are_functorch_transforms_active` and `torch._functorch.utils.unwrap_dead_wrappers`.
"""

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

import torch


class FunctionInternals(NamedTuple):
    transforms_active: Callable[[], bool]
    unwrap_dead_wrappers: Callable[[tuple[Any, ...]], tuple[Any, ...]]


def function_internals() -> FunctionInternals | None:
    """The internals Function.apply uses, if they are there and behave as relied on."""
    try:
        internals = FunctionInternals(
            torch._C._are_functorch_transforms_active,
            torch._functorch.utils.unwrap_dead_wrappers,
        )
        probe = (torch.zeros(1), 1)
        unwrapped = internals.unwrap_dead_wrappers(probe)
        base_apply = super(torch.autograd.Function, torch.autograd.Function).apply
    except (AttributeError, TypeError):
        return None
    fits = (
        internals.transforms_active() is False
        and isinstance(unwrapped, tuple)
        and len(unwrapped) == 2
        and unwrapped[0] is probe[0]
        and callable(base_apply)
    )
    return internals if fits else None


FUNCTION_INTERNALS = function_internals()


class ApplyWithoutBinding:
    """Mixed in before torch.autograd.Function by a Function with setup_context that takes
    tensors only: apply without the per-call signature binding, where the internals it needs
    are as relied on; torch's own apply everywhere else (and under vmap or grad)."""

    @classmethod
    def apply(cls, *args: torch.Tensor) -> torch.Tensor:
        internals = FUNCTION_INTERNALS
        if internals is None or internals.transforms_active():
            return super().apply(*args)
        args = internals.unwrap_dead_wrappers(args)
        return super(torch.autograd.Function, cls).apply(*args)


def import_dynamo_outside_vmap() -> None:
    """torch 2.3: the first torch.func.vmap of an autograd.Function imports torch._dynamo, whose
    import draws random numbers, which vmap's default randomness mode refuses (and leaves
    torch._dynamo half-imported for the rest of the process); imported beforehand, the vmap
    works. torch 2.13's vmap does not import it (a second of import spared); the versions
    between were not tried, so they import it too."""
    if torch.__version__ < (2, 13):
        importlib.import_module("torch._dynamo")
