"""Every use reluexp makes of a dependency's non-public names, in one place. Each says what it
relies on and falls back to the public path (or a copy) when a name is missing or has changed
shape; tests/test_compat.py fails, naming the dependency's version, when one has.

Hydra's basic sweeper orders a grid sweep's jobs in BasicSweeper.split_arguments
(hydra/_internal/core_plugins/basic_sweeper.py, a static method of a class Hydra does not
export): a sweep's report and its finish command list the jobs as Hydra made them through it;
grid() is a copy for a Hydra where it is gone.

torch.autograd.Function.apply, for a Function with setup_context, binds forward's signature
with inspect on every call (to fill in default arguments: about 12 us a call, most of
lean_relu's gap to torch.relu at the reference size). With positional tensors only there is
nothing to fill in. What apply then does (torch 2.3 to 2.13, torch/autograd/function.py):
outside functorch transforms (vmap, grad), unwrap dead functorch wrappers and call the C++
apply of the Function's base class; inside them, its own path. That needs two internals:
`torch._C._are_functorch_transforms_active` and `torch._functorch.utils.unwrap_dead_wrappers`.

A torch.library custom op is the CustomOpDef that torch.library.custom_op returns (torch/_library/
custom_ops.py), or an OpOverload(Packet) under torch.ops: torch exports neither class, and
torch.library.opcheck takes only these. custom_op_types() names them; with them gone, no target
is taken for a custom op (the compile group still compiles it as any Function). Its arguments
are its schema's (`_schema`, a CustomOpDef's through `_opoverload`): op_arguments() reads which
are Tensors, so a number given for one becomes a tensor, as for a Function. vmap_fallback()
uses torch._C._functorch's switches for vmap's fallback (an op without a batching rule): the lab
tells such an op apart, and keeps torch's C++ warning about it off the terminal.

torch._foreach_norm (torch/_foreach ops, what torch.nn.utils.clip_grad_norm_ calls) takes a list
of tensors and, with dtype=torch.float64, accumulates each one's norm in float64 (the CUDA
kernel's partial sums are of the output's type): on an accelerator one multi-tensor launch for
every parameter instead of a float64 copy and a dot product each. float64_norms() falls back to
torch.linalg.vector_norm with the same dtype, one per tensor.
"""

import importlib
import itertools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
from hydra.core.override_parser.types import Override


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


def foreach_float64_norm() -> Callable[..., list[torch.Tensor]] | None:
    """torch._foreach_norm, if it takes a dtype and accumulates in it: a tensor whose squares
    overflow float32 keeps its finite norm."""
    try:
        probe = torch.full((2,), 3e19)
        (norm,) = torch._foreach_norm([probe], 2, dtype=torch.float64)
    except (AttributeError, TypeError, RuntimeError):
        return None
    fits = norm.dtype == torch.float64 and math.isclose(
        norm.item(), probe[0].item() * math.sqrt(2), rel_tol=1e-12
    )
    return torch._foreach_norm if fits else None


FOREACH_FLOAT64_NORM = foreach_float64_norm()


def float64_norms(vectors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's 2-norm accumulated in float64 (finite wherever the norm is), 0-d float64
    tensors on the tensors' device, read by nothing on the host."""
    if FOREACH_FLOAT64_NORM is None:
        return [torch.linalg.vector_norm(v, dtype=torch.float64) for v in vectors]
    return list(FOREACH_FLOAT64_NORM(vectors, 2, dtype=torch.float64))


def import_dynamo_outside_vmap() -> None:
    """torch 2.3: the first torch.func.vmap of an autograd.Function imports torch._dynamo, whose
    import draws random numbers, which vmap's default randomness mode refuses (and leaves
    torch._dynamo half-imported for the rest of the process); imported beforehand, the vmap
    works. torch 2.13's vmap does not import it (a second of import spared); the versions
    between were not tried, so they import it too."""
    if torch.__version__ < (2, 13):
        importlib.import_module("torch._dynamo")


def grid(overrides: list[Override]) -> list[list[str]]:
    """The jobs of a grid sweep as Hydra 1.3's basic sweeper orders them (a copy of its
    split_arguments): a key given twice keeps its last value, in its first place; the product
    runs over the keys in that order."""
    choices: dict[str, list[str]] = {}
    for override in overrides:
        key = override.get_key_element()
        if override.is_sweep_override():
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


def hydra_split_arguments() -> Callable[[list[Override], Any], list[list[list[str]]]] | None:
    """Hydra's own BasicSweeper.split_arguments, if it is there and takes what it took."""
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        split = BasicSweeper.split_arguments
        split([], None)
    except (ImportError, AttributeError, TypeError):
        return None
    return split


HYDRA_SPLIT_ARGUMENTS = hydra_split_arguments()


def grid_jobs(overrides: list[Override]) -> list[list[str]]:
    """A grid sweep's jobs, in order, as Hydra's basic sweeper makes them (its own code where it
    has it, else grid())."""
    if HYDRA_SPLIT_ARGUMENTS is None:
        return grid(overrides)
    (batch,) = HYDRA_SPLIT_ARGUMENTS(overrides, None)
    return [list(job) for job in batch]


def custom_op_types() -> tuple[type, ...]:
    """The classes a torch.library custom op is an instance of (what opcheck takes); () where
    torch has moved them."""
    found = []
    for module, name in (
        ("torch._library.custom_ops", "CustomOpDef"),
        ("torch._ops", "OpOverload"),
        ("torch._ops", "OpOverloadPacket"),
    ):
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:  # torch before 2.4 has no torch.library.custom_op
            continue
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


CUSTOM_OP_TYPES = custom_op_types()


# What vmap raises, after the op's name, for an op without a batching rule when its fallback
# is refused.
VMAP_FALLBACK_REFUSED = " hit the vmap fallback which is currently disabled"


@contextmanager
def vmap_fallback(allowed: bool) -> Iterator[None]:
    """torch.func.vmap's fallback for an op without a batching rule (a custom op without
    register_vmap: a loop over the batch) allowed but silent (its C++ warning is printed to
    stderr, past Python's warnings), or refused (such an op then raises, naming itself, ending
    VMAP_FALLBACK_REFUSED). torch._C._functorch's switches; as torch has it where they are gone."""
    functorch = getattr(torch._C, "_functorch", None)
    switches = [
        getattr(functorch, name, None)
        for name in (
            "_is_vmap_fallback_enabled",
            "_set_vmap_fallback_enabled",
            "_set_vmap_fallback_warning_enabled",
        )
    ]
    if None in switches:
        yield
        return
    is_enabled, set_enabled, set_warning = switches
    before = is_enabled()
    set_enabled(allowed)
    set_warning(False)
    try:
        yield
    finally:
        set_enabled(before)
        set_warning(True)


class OpArgument(NamedTuple):
    """One argument of a custom op's schema: its name, whether it is a Tensor, its default."""

    name: str
    tensor: bool
    default: Any


NO_DEFAULT = object()


def op_arguments(op: object) -> list[OpArgument] | None:
    """A custom op's arguments from its schema (`mylib::numpy_mul(Tensor x, Tensor y)`): an
    OpOverload's `_schema`, a packet's default overload's, a CustomOpDef's `_opoverload`'s;
    None where torch has moved them (its numbers then go to the op as they are)."""
    overload = getattr(op, "_opoverload", None) or getattr(op, "default", None) or op
    schema = getattr(overload, "_schema", None)
    try:
        return [
            OpArgument(
                a.name,
                str(a.type) == "Tensor",
                a.default_value if a.has_default_value() else NO_DEFAULT,
            )
            for a in schema.arguments
        ]
    except AttributeError:
        return None
