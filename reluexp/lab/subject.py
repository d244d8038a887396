"""The Function under check, as the lab calls it: the user's target as f(x, *tensors) (a Module's
tensor parameters passed explicitly), its declared surrogate and its optional reference, built
from objects or dotted paths. Building runs none of the user's code but its constructors and,
when params are given, its forward once on a small input (a ValueError there refuses them)."""

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import torch

from reluexp.config import ConfigError
from reluexp.functions.targets import (
    ActivationFactory,
    accepted,
    arguments_after_input,
    as_activation,
    calling,
    checked_params,
    is_custom_op,
    is_function,
    is_module,
    layers_of,
    probed_in_place,
    resolved,
    surrogate_of,
    takes_tensor_arguments,
)

Tensors = Callable[..., torch.Tensor]


@dataclass
class BackwardRecord:
    """What the Function's backward returned for the input, before autograd cast it (a
    backward that returns float32 for a float64 input is cast silently)."""

    returned: list[Any] = field(default_factory=list)

    def take(self) -> Any:
        value = self.returned[-1] if self.returned else None
        self.returned.clear()
        return value


def recording(function: type[torch.autograd.Function], record: BackwardRecord) -> type:
    """The Function with a backward that records what it returns. Made under the Function's own
    name, so autograd's messages name the user's class (`MyReLUBackward`), not a wrapper."""

    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
        grads = function.backward(ctx, *grad_outputs)
        record.returned.append(grads[0] if isinstance(grads, tuple) else grads)
        return grads

    namespace = {"backward": staticmethod(backward), "__module__": function.__module__}
    return type(function.__name__, (function,), namespace)


# The generator state a random forward starts every call from while it is checked.
FIXED_SEED = 7


def with_fixed_randomness(fn: Tensors) -> Tensors:
    """fn with torch's generators seeded alike at every call (and put back after it): a random
    forward (dropout) becomes a function of its input, the same draws for its finite
    differences as for the forward whose backward is checked."""

    def call(x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        with torch.random.fork_rng():
            torch.manual_seed(FIXED_SEED)
            return fn(x, *tensors)

    return call


def with_tensors(arguments: tuple, slots: tuple[int, ...], tensors: tuple) -> tuple:
    """A Function's arguments after its input with the tensors given put in their slots (none
    given: its own)."""
    placed = list(arguments)
    for slot, tensor in zip(slots, tensors):
        placed[slot] = tensor
    return tuple(placed)


def tensor_slots(arguments: tuple) -> tuple[int, ...]:
    return tuple(i for i, value in enumerate(arguments) if isinstance(value, torch.Tensor))


def explicit(obj: object, params: dict[str, Any], path: str) -> tuple[Tensors, dict[str, Any]]:
    """obj as f(x, *tensors) and the tensor parameters that follow x: a Module's own (through
    torch.func.functional_call), a Function's or a custom op's tensor arguments (apply(x, w,
    b): each an input whose gradient is checked), none for a function. A Module instance is
    taken as built (a copy: the caller's own is left as it is)."""
    if is_module(obj) or isinstance(obj, torch.nn.Module):
        module = instance_of(obj, params, path)
        named = dict(module.named_parameters())

        def call(x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(module, dict(zip(named, tensors)), (x,))

        return call, {name: p.detach().clone() for name, p in named.items()}
    if takes_tensor_arguments(obj):
        arguments = checked_params(obj, params, path)
        slots = tensor_slots(arguments)
        if slots:
            names = [p.name for p in arguments_after_input(obj)]
            call = calling(obj)

            def apply(x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
                return call(x, *with_tensors(arguments, slots, tensors))

            return apply, {names[i]: arguments[i].detach().clone() for i in slots}
    return as_activation(obj, params, path), {}


def instance_of(module: object, params: dict[str, Any], path: str) -> torch.nn.Module:
    """A Module class built with the params, or a copy of a Module instance (which takes none:
    it is built)."""
    if not isinstance(module, torch.nn.Module):
        checked_params(module, params, path)
        return module(**params)
    if params:
        raise ConfigError(
            f"activation.params: {path} is a {type(module).__name__} already built; pass its "
            "class to build it with them"
        )
    return copy.deepcopy(module)


class TargetKind(StrEnum):
    """What the user handed over, as messages name it."""

    FUNCTION = "Function"
    MODULE = "Module"
    CALLABLE = "function"


@dataclass
class Subject:
    """The target, its surrogate and its reference as the checks call them."""

    name: str
    kind: TargetKind
    call: Tensors  # f(x, *params), its backward recorded
    plain: Tensors  # the same, unrecorded: what vmap and compile are tried on
    params: dict[str, torch.Tensor]
    record: BackwardRecord
    make_activation: ActivationFactory  # its Modules, as a training run places them
    function: type[torch.autograd.Function] | None = None
    # The Function's arguments after the input (activation.params, in order); the tensors among
    # them are `params` too, inputs whose gradients are checked.
    extra_args: tuple[Any, ...] = ()
    # g(x): the derivative the backward declares it computes instead of the forward's.
    surrogate: Callable[[torch.Tensor], torch.Tensor] | None = None
    reference: Tensors | None = None
    reference_path: str | None = None
    # Where the target has tensor parameters and its reference none: the values at which the
    # two are compared (`beta=1`), the reference taking the input alone.
    reference_at: str | None = None
    make_reference: ActivationFactory | None = None
    # The tensor inputs that need no gradient: those the backward returns None for (the
    # returns check finds them); the others' gradients are checked.
    constants: frozenset[str] = frozenset()
    # A random forward, checked with its randomness fixed (with_fixed_randomness).
    random: bool = False
    # The target, where it is a torch.library custom op (what torch.library.opcheck tests).
    op: Any = None

    def inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The parameters, in x's dtype and device, as leaves; those that are not constants
        want gradients."""
        return [
            p.detach().to(x.device, x.dtype).requires_grad_(name not in self.constants)
            for name, p in self.params.items()
        ]

    def fixed(self) -> "Subject":
        """The same Function with its randomness fixed at every call."""
        return replace(
            self,
            call=with_fixed_randomness(self.call),
            plain=with_fixed_randomness(self.plain),
            random=True,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The target's value at x, no graph."""
        with torch.no_grad():
            return self.call(x, *self.inputs(x))


def build_subject(
    target: object,
    reference: object = None,
    surrogate: object = None,
    params: dict[str, Any] | None = None,
    reference_params: dict[str, Any] | None = None,
) -> Subject:
    """The subject for a target and its reference and surrogate, each an object or a dotted
    path; the params go to the target, and to the reference and the surrogate as they take
    them; reference_params to the reference alone. A mistake is a ConfigError naming the key."""
    params = dict(params or {})
    reference_params = dict(reference_params or {})
    obj = resolved(target, "activation.target")
    instance = isinstance(obj, torch.nn.Module)
    target_path = (
        target
        if isinstance(target, str)
        else type(obj).__name__
        if instance
        else getattr(target, "__qualname__", "target")
    )
    if not callable(obj):
        raise ConfigError(
            f"activation.target={target_path}: a {type(obj).__name__}, not a Function, Module or "
            "function"
        )
    record = BackwardRecord()
    spied = recording(obj, record) if is_function(obj) else obj
    call, named = explicit(spied, params, target_path)
    plain, _ = explicit(obj, params, target_path)
    if params:  # a param out of the range the forward accepts is the user's mistake, as in a run
        probed_in_place(lambda x: plain(x, *named.values()), target_path, params)
    subject = Subject(
        name=getattr(obj, "__name__", target_path),
        kind=TargetKind.FUNCTION
        if is_function(obj)
        else TargetKind.MODULE
        if is_module(obj) or instance
        else TargetKind.CALLABLE,
        call=call,
        plain=plain,
        params=named,
        record=record,
        make_activation=(
            (lambda: copy.deepcopy(obj))
            if instance
            else layers_of(
                obj if is_module(obj) else as_activation(obj, params, target_path),
                target_path,
                params,
            )
        ),
        function=obj if is_function(obj) else None,
        extra_args=checked_params(obj, params, target_path) if is_function(obj) else (),
        surrogate=surrogate_of(surrogate, params, "activation.surrogate"),
        op=obj if is_custom_op(obj) else None,
    )
    if reference is not None:
        reference_path = (
            reference
            if isinstance(reference, str)
            else getattr(reference, "__qualname__", repr(reference))
        )
        ref = resolved(reference, "activation.reference")
        ref_params = {**accepted(ref, params), **reference_params}
        subject.reference, ref_named = explicit(ref, ref_params, reference_path)
        if ref_named and len(ref_named) != len(named):
            raise ConfigError(
                f"activation.reference={reference_path}: has {len(ref_named)} tensor "
                f"parameter(s), the target {len(named)}: they cannot be compared"
            )
        if named and not ref_named:
            # A learnable Swish against F.silu: the same function at beta=1.
            subject.reference = ignoring_params(subject.reference)
            subject.reference_at = ", ".join(value_text(n, v) for n, v in named.items())
        subject.reference_path = reference_path
        subject.make_reference = layers_of(
            ref if is_module(ref) else as_activation(ref, ref_params, reference_path),
            reference_path,
            ref_params,
        )
    return subject


def ignoring_params(reference: Tensors) -> Tensors:
    """A reference without parameters called as the target is, with the target's: it takes
    the input alone."""

    def call(x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        return reference(x)

    return call


def value_text(name: str, value: torch.Tensor) -> str:
    """`beta=1`, or for a parameter of several elements, `weight (4 values from -1 to 1)`."""
    if value.numel() == 1:
        return f"{name}={value.item():g}"
    return f"{name} ({value.numel()} values from {value.min().item():g} to {value.max().item():g})"
