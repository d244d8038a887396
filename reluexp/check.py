"""The Function lab: is an activation's backward right? Checked against the built-in it imitates
(or against the derivative it declares as its surrogate).

    python -m reluexp.check [--compile] [--large] activation=<name> [overrides...]

Verdicts: `wrong` and `fails at large inputs` exit 1; `precision`, `convention` and `info` are
reported and exit 0; 2 is a usage error. README.md, "Check your own Function", says what each
means.
"""

import argparse
import copy
import functools
import logging
import math
import re
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from reluexp import tags, train
from reluexp._compat import import_dynamo_outside_vmap
from reluexp.activations import (
    as_activation,
    changes_its_input,
    checked_params,
    import_object,
    is_function,
    is_module,
)
from reluexp.checkpoint import load_checkpoint
from reluexp.config import Config, ConfigError, Dtype, config_dict, validate
from reluexp.events import read_scalars, write_derived, write_loss_difference
from reluexp.hydra_glue import COMPOSITION_ERRORS, compose_config, one_line, task_config
from reluexp.summary import write_json_atomic

# Verdicts, worst first. The first two exit 1.
WRONG, LARGE, PRECISION, CONVENTION = "wrong", "fails at large inputs", "precision", "convention"
INFO, UNSUPPORTED, PASS = "info", "unsupported", "pass"
SEVERITY = [WRONG, LARGE, PRECISION, CONVENTION, INFO, UNSUPPORTED, PASS]
FAILING = (WRONG, LARGE)
# What the terminal leaves to check.md (or to verbose=true's table).
QUIET = (PASS, INFO, UNSUPPORTED)

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
LOW_PRECISION = (torch.float16, torch.bfloat16)
# A result within this many units of its dtype (scaled by the inputs' magnitude) beyond the
# reference's own error is right; within PRECISION_UNITS, right but less precise (rounding of a
# formula with cancellation, as 1 - y^2 near saturation); beyond, not rounding at all.
ROUNDING_UNITS = 4
PRECISION_UNITS = 64
# Where kinks are looked for, and how far random inputs keep from them.
KINK_RANGE = 10.0
KINK_MARGIN = 0.05
# Inputs past this magnitude are large: a non-finite result there fails at large inputs.
LARGE_INPUT = 10.0
# Training parity: float64 runs that first part by this much (relative) are not rounding apart.
FLOAT64_PARTING = 1e-10


@dataclass
class Result:
    group: str
    check: str
    status: str
    detail: str = ""


class Wrong(Exception):
    """What the Function did cannot be right (a bad return, an error it raised)."""


@dataclass
class Subject:
    """The activation and its reference as functions of the input and the activation's tensor
    parameters (a Module's, passed explicitly), and what the lab needs to say about them."""

    name: str
    fn: Callable[..., torch.Tensor]
    reference: Callable[..., torch.Tensor]
    params: list[torch.Tensor]
    param_names: list[str]
    # The declared derivative of the backward, when it is a surrogate: g(x) -> dy/dx.
    surrogate: Callable[[torch.Tensor], torch.Tensor] | None = None
    # A Function's backward output as it returned it, before autograd casts it.
    raw_grads: list[Any] = field(default_factory=list)
    # The user's object, unwrapped (torch.compile and vmap are tried on it as written).
    plain: Callable[..., torch.Tensor] | None = None
    # The reference's kinks (find_kinks): an input exactly on one is a matter of convention.
    kinks: list["Kink"] = field(default_factory=list)

    def inputs(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The parameters, in x's dtype and device, as leaves that want gradients."""
        return [p.detach().to(x.device, x.dtype).requires_grad_() for p in self.params]


def recording(function: type[torch.autograd.Function], raw_grads: list[Any]) -> type:
    """The Function with a backward that records what it returns. Made under the Function's own
    name, so autograd's messages name the user's class (`MyReLUBackward`), not a wrapper."""

    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> Any:
        grads = function.backward(ctx, *grad_outputs)
        raw_grads.append(grads[0] if isinstance(grads, tuple) else grads)
        return grads

    namespace = {"backward": staticmethod(backward), "__module__": function.__module__}
    return type(function.__name__, (function,), namespace)


def as_function(
    obj: object, params: dict[str, Any], path: str
) -> tuple[Callable[..., torch.Tensor], dict[str, torch.Tensor]]:
    """obj as f(x, *tensors), with the named tensor parameters that follow x: a Module's own
    (through torch.func.functional_call); none for a Function or a function."""
    if is_module(obj):
        checked_params(obj, params, path)
        module = obj(**params)
        named = dict(module.named_parameters())

        def call(x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(module, dict(zip(named, tensors)), (x,))

        return call, {name: p.detach().clone() for name, p in named.items()}
    return as_activation(obj, params, path), {}


def make_subject(config: Config) -> Subject:
    activation = config.activation
    if activation.reference is None:
        raise ConfigError(
            f"activation.reference=None: {activation.name} needs a reference to check against"
        )
    target = import_object(activation.target)
    raw_grads: list[Any] = []
    spied = target
    if is_function(target):
        spied = recording(target, raw_grads)
    fn, named = as_function(spied, activation.params, activation.target)
    plain, _ = as_function(target, activation.params, activation.target)
    reference_obj = import_object(activation.reference, "activation.reference")
    reference, reference_named = as_function(reference_obj, activation.params, activation.reference)
    if len(reference_named) != len(named):
        raise ConfigError(
            f"activation.reference={activation.reference}: has {len(reference_named)} tensor "
            f"parameter(s), the target {len(named)}: they cannot be compared"
        )
    surrogate = None
    if activation.surrogate is not None:
        surrogate_fn = import_object(activation.surrogate, "activation.surrogate")
        surrogate = functools.partial(surrogate_fn, **activation.params)
    name = getattr(target, "__name__", activation.target)
    return Subject(
        name, fn, reference, list(named.values()), list(named), surrogate, raw_grads, plain
    )


# -- running a Function -------------------------------------------------------------------------


def describe(value: object) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"


def autograd_message(message: str, name: str) -> str:
    """autograd's words for the user's backward (`Function MyReLUBackward returned ...`) as the
    user wrote it (`MyReLU.backward returned ...`); compile's node is the user's Function too."""
    message = re.sub(r"(?:[Ff]unction )?(\w+)Backward\b", r"\1.backward", message)
    return re.sub(r"ApplyTemplate\.backward", f"{name}.backward", message)


def forward_backward(
    subject: Subject, fn: Callable[..., torch.Tensor], x: torch.Tensor, grad_output: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """fn(x, *params) and its gradients with respect to x and the params, for upstream
    gradient grad_output. A return that cannot be right raises Wrong."""
    # detach() keeps x's strides: a non-contiguous input stays non-contiguous.
    leaf = x.detach().requires_grad_(x.requires_grad)
    params = subject.inputs(x)
    y = fn(leaf, *params)
    if not isinstance(y, torch.Tensor):
        raise Wrong(f"forward returned {describe(y)}, not a tensor")
    wanted = [t for t in (leaf, *params) if t.requires_grad]
    if not y.requires_grad or not wanted:
        return y.detach(), [None] * (1 + len(params))
    grads = torch.autograd.grad(y, wanted, grad_output, allow_unused=True)
    if x.requires_grad and grads[0] is None:
        raise Wrong("backward returned None for the input")
    grads = list(grads) if x.requires_grad else [None, *grads]
    return y.detach(), grads


def guarded(group: str, name: str, subject: Subject, check: Callable[[], Result]) -> Result:
    """A Function that raises, or returns what cannot be right, is `wrong`, in one line naming
    the user's code; torch's warnings about it stay out of the terminal."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return check()
    except Wrong as error:
        return Result(group, name, WRONG, autograd_message(str(error), subject.name))
    except Exception as error:
        return Result(group, name, WRONG, autograd_message(raised(error), subject.name))


def raised(error: BaseException) -> str:
    """The error in one line: its first sentence, and the lines it introduces with ':', down
    to the innermost cause (torch.compile wraps the user's error in its own)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = lines[0] if lines else ""
    for line in lines[1:]:
        if not message.endswith((":", ",")):
            break
        message = f"{message} {line}"
    text = f"raised {type(error).__name__}: {message}"
    cause = error.__cause__ or error.__context__
    if cause is not None and message.endswith(":"):
        return f"{text} {raised(cause)}"
    return text.rstrip(": ")


# -- judging numbers ----------------------------------------------------------------------------


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class Verdict:
    status: str
    detail: str = ""


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    return min(verdicts, key=lambda v: SEVERITY.index(v.status), default=Verdict(PASS))


def resolution(dtype: torch.dtype) -> float:
    """The relative rounding of one operation in dtype. In float64, 1e-7 over four operations:
    some built-ins' float64 kernels use float32 constants (hardsigmoid's 1/6), so the float64
    reference is no truer than that."""
    return 2.5e-8 if dtype == torch.float64 else torch.finfo(dtype).eps


def judge(
    what: str,
    where: tuple[str, torch.Tensor],
    actual: torch.Tensor,
    reference: torch.Tensor,
    truth: torch.Tensor,
    scale: torch.Tensor,
    convention: torch.Tensor,
    truth_name: str = "float64 truth",
) -> Verdict:
    """actual (the Function's, in its dtype) against the reference's result in the same dtype
    and the float64 truth, element by element: the worst finding, at an element of `where` (the
    input) that shows it.

    Right: equal to either, or no further from the truth than the reference plus rounding:
    ROUNDING_UNITS of the dtype, relative to the inputs' scale in float32 and float64 and to
    the truth in half precision (whose built-ins compute in float32). Right but less precise:
    within PRECISION_UNITS of the inputs' scale. Non-finite where the reference is finite:
    fails at large inputs, or is wrong at an ordinary input; in half precision, near the
    dtype's range, it is precision. Anything at a `convention` element (a kink, a non-finite
    input) is a convention."""
    label, x = where
    info = torch.finfo(actual.dtype)
    low_precision = actual.dtype in LOW_PRECISION
    eps = resolution(actual.dtype)
    a, r = actual.detach().double(), reference.detach().double()
    same = (a == truth) | (a == r) | (a.isnan() & (truth.isnan() | r.isnan()))
    nonfinite = ~a.isfinite() & r.isfinite()
    err = (a - truth).abs()
    ref_err = (r - truth).abs().nan_to_num(nan=math.inf)
    magnitude = truth.abs().nan_to_num(nan=0.0, posinf=0.0)
    strict = eps * magnitude + info.smallest_normal
    lax = eps * (magnitude + scale)
    precise = err <= ref_err + ROUNDING_UNITS * (strict if low_precision else lax)
    close = err <= ref_err + PRECISION_UNITS * lax
    size = x.detach().abs().double()
    large, near_range = size >= LARGE_INPUT, size > info.max / 1024
    off = ~same & ~convention
    less_precise = off & ~nonfinite & truth.isfinite() & close & ~precise
    findings = [
        (WRONG, off & (nonfinite & ~large & ~near_range | ~nonfinite & truth.isfinite() & ~close)),
        (LARGE, off & nonfinite & large & ~(near_range & low_precision)),
        (PRECISION, less_precise | off & nonfinite & near_range & low_precision),
        (CONVENTION, ~same & convention),
    ]
    for status, mask in findings:
        if not mask.any():
            continue
        precision_loss = status == PRECISION and bool(less_precise.any())
        if precision_loss:  # where it shows most
            excess = ((err - ref_err) / lax).nan_to_num(nan=-math.inf)
            flat = int(torch.where(less_precise, excess, -math.inf).argmax())
        else:
            flat = int(mask.flatten().nonzero()[0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))
        line = (
            f"{what} at {label}{list(index)}={x[index].item()!r} ({dtype_name(x.dtype)}): "
            f"got {actual[index].item()!r}, reference {reference[index].item()!r}"
        )
        if actual.dtype != torch.float64 or truth_name != "float64 truth":
            line += f", {truth_name} {truth[index].item()!r}"
        if precision_loss:
            units = ((err - ref_err) / strict)[index].item()
            line += (
                f": {units:.0f} units in the last place beyond the reference's own error there "
                f"({int(less_precise.sum())} of {mask.numel()} elements less precise)"
            )
            if low_precision:
                line += "; the built-in computes in float32: compute in float32, cast back"
        return Verdict(status, line)
    return Verdict(PASS)


def compare(
    subject: Subject,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    convention: torch.Tensor | None = None,
) -> Verdict:
    """Forward and backward on x against the reference in x's dtype and the float64 truth (the
    reference on the same rounded x; the declared surrogate for the backward, if any)."""
    on_kinks = at_kinks(x, subject.kinks)
    convention = on_kinks if convention is None else convention | on_kinks
    subject.raw_grads.clear()
    y, grads = forward_backward(subject, subject.fn, x, grad_output)
    raw = subject.raw_grads[-1] if subject.raw_grads else grads[0]
    y_ref, ref_grads = forward_backward(subject, subject.reference, x, grad_output)
    x64, g64 = x.detach().double().requires_grad_(x.requires_grad), grad_output.double()
    y_true, true_grads = forward_backward(subject, subject.reference, x64, g64)
    if (y.dtype, y.shape, y.device) != (y_ref.dtype, y_ref.shape, y_ref.device):
        raise Wrong(
            f"forward returned {dtype_name(y.dtype)} {tuple(y.shape)} on {y.device} for a "
            f"{dtype_name(x.dtype)} {tuple(x.shape)} input, the reference "
            f"{dtype_name(y_ref.dtype)} {tuple(y_ref.shape)}"
        )
    scale = x64.detach().abs().clamp(min=1.0)
    verdicts = [judge("forward", ("x", x), y, y_ref, y_true, scale, convention)]
    if grads[0] is None:
        return worst(verdicts)
    if isinstance(raw, torch.Tensor) and (raw.dtype != x.dtype or raw.shape != x.shape):
        raise Wrong(
            f"{subject.name}.backward returned {dtype_name(raw.dtype)} {tuple(raw.shape)} for a "
            f"{dtype_name(x.dtype)} {tuple(x.shape)} input (autograd would cast it silently)"
        )
    truth, truth_name = true_grads[0], "float64 truth"
    if subject.surrogate is not None:
        truth, truth_name = g64 * subject.surrogate(x64.detach()), "declared surrogate"
    grad_scale = g64.abs() * scale
    verdicts.append(
        judge(
            "backward", ("x", x), grads[0], ref_grads[0], truth, grad_scale, convention, truth_name
        )
    )
    # A parameter's gradient sums over every element: its rounding scales with the terms' sum.
    terms = (grad_scale * x64.detach().abs()).sum()
    for name, param, grad, ref_grad, true_grad in zip(
        subject.param_names, subject.params, grads[1:], ref_grads[1:], true_grads[1:]
    ):
        if grad is None:
            raise Wrong(f"backward returned None for the parameter {name}")
        no_kink = torch.zeros_like(grad, dtype=torch.bool)
        verdicts.append(
            judge(f"gradient of {name}", (name, param), grad, ref_grad, true_grad, terms, no_kink)
        )
    return worst(verdicts)


# -- kinks --------------------------------------------------------------------------------------


@dataclass
class Kink:
    """A point where the reference's derivative jumps (or the reference itself: a step)."""

    x: float
    left: float  # the reference's derivative just left of it
    right: float  # and just right of it
    step: bool = False


def value_and_derivative(
    subject: Subject, fn: Callable[..., torch.Tensor], x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """fn(x) and its elementwise derivative, in float64."""
    leaf = x.detach().double().requires_grad_()
    y = fn(leaf, *subject.inputs(leaf))
    (d,) = torch.autograd.grad(y, leaf, torch.ones_like(y), allow_unused=True)
    return y.detach(), torch.zeros_like(leaf) if d is None else d


def spikes(series: torch.Tensor) -> list[int]:
    """Intervals i (between points i and i + 1) where the series jumps far more than on either
    side: a smooth series changes little from one grid step to the next."""
    diffs = (series[1:] - series[:-1]).abs().nan_to_num(nan=0.0)
    around = torch.maximum(
        torch.nn.functional.pad(diffs[:-1], (1, 0)), torch.nn.functional.pad(diffs[1:], (0, 1))
    )
    floor = 1e-9 * (1 + series[1:].abs())
    return (diffs > torch.maximum(10 * around, floor)).nonzero().flatten().tolist()


def refine(value: Callable[[float], float], a: float, b: float) -> float:
    """The point in [a, b] where value() goes from value(a) to value(b), by bisection; snapped to
    a round number within 1e-6 (the kinks of activations sit at 0, ±1, ±3, 6, ...; a float64
    built-in may place one a float32 rounding off: hardswish's at -3 + 1.2e-7)."""
    left, right = value(a), value(b)
    for _ in range(60):
        middle = (a + b) / 2
        if middle in (a, b):
            break
        v = value(middle)
        if abs(v - left) <= abs(v - right):
            a = middle
        else:
            b = middle
    rounded = round(b, 6)
    return rounded if abs(rounded - b) < 1e-6 * max(1.0, abs(b)) else b


def find_kinks(subject: Subject) -> list[Kink]:
    """The reference's kinks in [-KINK_RANGE, KINK_RANGE]: jumps of its float64 derivative (or
    of itself) between neighbouring points of a fine grid, refined by bisection."""
    grid = torch.linspace(-KINK_RANGE, KINK_RANGE, 20001, dtype=torch.float64)
    y, d = value_and_derivative(subject, subject.reference, grid)

    def at(x: float, derivative: bool = True) -> float:
        y, d = value_and_derivative(
            subject, subject.reference, torch.tensor([x], dtype=torch.float64)
        )
        return (d if derivative else y).item()

    kinks: list[Kink] = []
    for series, step in ((d, False), (y, True)):
        for i in spikes(series):
            # From a grid point beyond each side: at the kink itself a built-in's scalar and
            # vectorized kernels may disagree (torch 2.3's hardswish at 3).
            left, right = grid[max(i - 1, 0)].item(), grid[min(i + 2, len(grid) - 1)].item()
            x = refine(lambda v, step=step: at(v, not step), left, right)
            if all(abs(x - k.x) > 2e-3 for k in kinks):
                kinks.append(Kink(x, at(x - 1e-6), at(x + 1e-6), step))
    return sorted(kinks, key=lambda k: k.x)


def sample(
    shape: tuple[int, ...], generator: torch.Generator, kinks: list[Kink], spread: float = 3.0
) -> torch.Tensor:
    """float64 normal samples times `spread`, pushed at least KINK_MARGIN away from every kink
    (finite differences and dtype rounding never straddle one)."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64) * spread
    for kink in kinks:
        offset = x - kink.x
        near = offset.abs() < KINK_MARGIN
        x = torch.where(near, x + KINK_MARGIN * torch.where(offset >= 0, 1.0, -1.0), x)
    return x


def at_kinks(x: torch.Tensor, kinks: list[Kink]) -> torch.Tensor:
    """Where x sits exactly on a kink (after rounding to its dtype)."""
    mask = torch.zeros_like(x, dtype=torch.bool)
    for kink in kinks:
        mask |= x.detach().double() == torch.tensor(kink.x, dtype=x.dtype).double()
    return mask


def upstream(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """A random upstream gradient: a backward that ignores it is caught."""
    return torch.randn(x.shape, generator=torch.Generator().manual_seed(seed)).to(x)


# -- the checks ---------------------------------------------------------------------------------


def returns_check(subject: Subject) -> Result:
    """What every other check relies on: the forward leaves its input alone (an in-place forward
    corrupts training) and returns a tensor of the reference's shape and dtype; the backward
    returns a gradient of the input's shape and dtype for each input."""
    name = "returns a tensor, leaves its input alone"

    def check() -> Result:
        if changes_its_input(lambda x: subject.fn(x, *subject.inputs(x))):
            raise Wrong("forward changed its input in place (x.op_() or x[...] = ...)")
        x = sample((4, 5), torch.Generator().manual_seed(6), []).float().requires_grad_()
        compare(subject, x, upstream(x))  # raises Wrong for what cannot be right
        return Result("returns", name, PASS)

    return guarded("returns", name, subject, check)


def gradient_checks(subject: Subject, kinks: list[Kink]) -> list[Result]:
    """The backward against the forward's own derivative, in float64, off the kinks: gradcheck
    and gradgradcheck on a (4, 5) input and every parameter, and every element of a (64, 100)
    input against central finite differences (gradcheck's tolerance lets a slightly wrong
    constant through; this does not). A declared surrogate is not the forward's derivative:
    parity checks it against its declaration instead."""
    group = "gradients"
    if subject.surrogate is not None:
        detail = (
            "the backward is a declared surrogate, not the forward's derivative: parity checks "
            "it against its declaration"
        )
        return [Result(group, "gradcheck", INFO, detail)]
    x = sample((4, 5), torch.Generator().manual_seed(0), kinks).requires_grad_()
    inputs = (x, *subject.inputs(x))

    def first_order() -> Result:
        if torch.autograd.gradcheck(subject.fn, inputs, raise_exception=False):
            return Result(group, "gradcheck (4, 5)", PASS)
        detail = first_jacobian_offender(subject, x)
        if not detail and subject.params:
            detail = (
                f"the gradient of {', '.join(subject.param_names)} differs from finite "
                "differences of the forward"
            )
        detail = detail or "the Jacobian differs from finite differences (not elementwise)"
        return Result(group, "gradcheck (4, 5)", WRONG, detail)

    def second_order() -> Result:
        try:
            ok = torch.autograd.gradgradcheck(subject.fn, inputs, raise_exception=False)
        except RuntimeError as error:
            if "does not require grad" in str(error) or "not differentiable" in str(error):
                return Result(
                    group,
                    "gradgradcheck (4, 5)",
                    UNSUPPORTED,
                    "the backward is not differentiable (no double backward)",
                )
            raise
        if ok:
            return Result(group, "gradgradcheck (4, 5)", PASS)
        return Result(
            group,
            "gradgradcheck (4, 5)",
            WRONG,
            "the second derivative differs from finite differences of the backward",
        )

    results = [
        guarded(group, "gradcheck (4, 5)", subject, first_order),
        guarded(group, "gradgradcheck (4, 5)", subject, second_order),
    ]
    if results[0].status == PASS:
        results.append(
            guarded(
                group,
                "derivative (64, 100) every element",
                subject,
                lambda: derivative_check(subject, kinks),
            )
        )
    return results


def first_jacobian_offender(subject: Subject, x: torch.Tensor) -> str:
    """Elementwise fn: the first x whose derivative disagrees with central finite differences."""
    step = 1e-6
    x = x.detach()
    with torch.no_grad():
        params = subject.inputs(x)
        numeric = (subject.fn(x + step, *params) - subject.fn(x - step, *params)) / (2 * step)
    _, (analytic, *_) = forward_backward(
        subject, subject.fn, x.requires_grad_(), torch.ones_like(x)
    )
    wrong = ~torch.isclose(analytic, numeric, rtol=1e-7, atol=1e-7)
    if not wrong.any():
        return ""
    index = tuple(int(i) for i in wrong.nonzero()[0])
    return (
        f"backward at x{list(index)}={x[index].item()!r} (float64): got "
        f"{analytic[index].item()!r}, finite differences {numeric[index].item()!r}"
    )


def derivative_check(subject: Subject, kinks: list[Kink]) -> Result:
    group, name = "gradients", "derivative (64, 100) every element"
    x = sample((64, 100), torch.Generator().manual_seed(3), kinks)
    with torch.no_grad():
        y = subject.fn(x, *subject.inputs(x))
        nudged = x.clone()
        nudged[0, 0] += 1.0
        elementwise = y.shape == x.shape and torch.equal(
            subject.fn(nudged, *subject.inputs(x))[1:], y[1:]
        )
    if not elementwise:
        return Result(group, name, UNSUPPORTED, "the Function is not elementwise")
    detail = first_jacobian_offender(subject, x)
    return Result(group, name, WRONG if detail else PASS, detail)


def compared(
    group: str,
    name: str,
    subject: Subject,
    x: torch.Tensor,
    convention: torch.Tensor | None = None,
    grad_output: torch.Tensor | None = None,
) -> Result:
    def check() -> Result:
        g = upstream(x) if grad_output is None else grad_output
        verdict = compare(subject, x, g, convention)
        return Result(group, name, verdict.status, verdict.detail)

    return guarded(group, name, subject, check)


def unsupported_if_raised(result: Result) -> Result:
    """A Function that raises on an edge case or in half precision has a limit (reported), not
    a wrong gradient."""
    if result.status == WRONG and result.detail.startswith("raised"):
        result.status = UNSUPPORTED
    return result


def parity_checks(subject: Subject, kinks: list[Kink]) -> list[Result]:
    """Forward and backward against the reference and the float64 truth on random inputs off the
    kinks, in every floating dtype; a Function that cannot run in half precision is reported,
    not failed."""
    generator = torch.Generator().manual_seed(1)
    results = []
    for dtype in FLOATS:
        x = sample((64, 100), generator, kinks).to(dtype).requires_grad_()
        result = compared("parity", f"parity {dtype_name(dtype)}", subject, x)
        results.append(unsupported_if_raised(result) if dtype in LOW_PRECISION else result)
    x = sample((2, 3, 50), generator, kinks).float().requires_grad_()
    results.append(compared("parity", "parity (2, 3, 50) float32", subject, x))
    return results


def kink_checks(subject: Subject, kinks: list[Kink]) -> list[Result]:
    """Each kink on its own: at it, a different value or gradient is a convention, reported with
    the two subgradients; just beside it, the Function must agree with the reference."""
    results = []
    for kink in kinks:
        name = f"kink at x={kink.x:g}"
        for dtype in (torch.float64, torch.float32):
            beside = 1e-3 * max(1.0, abs(kink.x))
            x = torch.tensor([kink.x, kink.x - beside, kink.x + beside], dtype=dtype)
            convention = at_kinks(x, [kink])
            result = compared(
                "kinks", name, subject, x.requires_grad_(), convention, torch.ones_like(x)
            )
            if result.status == CONVENTION:
                side = "steps" if kink.step else "has the subgradients"
                result.detail += (
                    f" (the reference {side} {kink.left!r} from the left, {kink.right!r} from "
                    "the right)"
                )
            if result.status != PASS:
                break
        results.append(result)
    return results


def edge_checks(subject: Subject, kinks: list[Kink]) -> list[Result]:
    """Exact zeros, non-finite values, empty and 0-dim tensors, strides, no grad, devices."""
    generator = torch.Generator().manual_seed(2)

    def randn(*shape: int, **kwargs: Any) -> torch.Tensor:
        return sample(shape, generator, kinks).float().to(**kwargs)

    zeros = torch.tensor([0.0, -0.0, 1.5, -1.5])
    non_finite = torch.tensor([math.inf, -math.inf, math.nan, 2.0])
    cases = [
        ("edge 0 and -0.0", zeros.requires_grad_(), None),
        # The derivative at ±inf or NaN is a limit or undefined: differences are conventions.
        ("edge ±inf and NaN", non_finite.requires_grad_(), ~non_finite.isfinite()),
        ("edge empty (0, 5)", torch.empty(0, 5).requires_grad_(), None),
        ("edge 0-dim", torch.tensor(-0.7).requires_grad_(), None),
        ("edge non-contiguous", randn(20, 30).t().requires_grad_(), None),
        ("edge input without grad", randn(8), None),
    ]
    if torch.cuda.is_available():
        cases.append(("edge device cuda", randn(64, 100, device="cuda").requires_grad_(), None))
    ones = {"edge 0 and -0.0", "edge ±inf and NaN"}  # reported gradients read as derivatives
    return [
        unsupported_if_raised(
            compared(
                "edges", name, subject, x, convention, torch.ones_like(x) if name in ones else None
            )
        )
        for name, x, convention in cases
    ]


def large_values(dtype: torch.dtype) -> torch.Tensor:
    """±10, ±100, ±1e4 and a quarter of the dtype's largest value, as far as it holds them."""
    info = torch.finfo(dtype)
    magnitudes = [m for m in (10.0, 100.0, 1e4) if m < info.max / 4] + [info.max / 4]
    return torch.tensor([s * m for m in magnitudes for s in (1, -1)], dtype=torch.float64).to(dtype)


def overflow_note(subject: Subject, x: torch.Tensor, detail: str) -> str:
    """Where the forward first turns non-finite (bisected from 0), and, when exp overflows at
    the input that showed it, the formula that avoids it."""
    match = re.search(r"^forward at x(\[[\d, ]+\])=", detail)
    if not match:
        return ""
    index = tuple(int(i) for i in match.group(1).strip("[]").split(","))
    bad = x[index].item()

    def finite(v: float) -> bool:
        x = torch.tensor([v], dtype=x_dtype)
        with torch.no_grad():
            return bool(subject.fn(x, *subject.inputs(x)).isfinite().all())

    x_dtype, good = x.dtype, 0.0
    if not finite(good):
        return ""
    for _ in range(60):
        middle = (good + bad) / 2
        good, bad = (middle, bad) if finite(middle) else (good, middle)
    note = f"; non-finite from x={bad:.7g} on"
    if not torch.exp(x.detach())[index].isfinite():
        note += (
            f", where exp(x) overflows {dtype_name(x.dtype)}: rewrite so that exp only sees "
            "x <= 0 (log1p(exp(x)) = relu(x) + log1p(exp(-|x|)), or "
            "torch.nn.functional.softplus)"
        )
    return note


def range_checks(subject: Subject, preactivations: dict[str, torch.Tensor]) -> list[Result]:
    """Large finite inputs per dtype and the experiment's own pre-activations: a result that
    turns non-finite where the reference's does not fails at large inputs."""
    cases = [(f"large inputs {dtype_name(d)}", large_values(d)) for d in FLOATS]
    cases += [(f"experiment's pre-activations, {where}", x) for where, x in preactivations.items()]
    results = []
    for name, x in cases:
        result = compared(
            "large inputs", name, subject, x.requires_grad_(), None, torch.ones_like(x)
        )
        if result.status == LARGE:
            result.detail += overflow_note(subject, x, result.detail)
        results.append(unsupported_if_raised(result) if x.dtype in LOW_PRECISION else result)
    return results


def saved_bytes(
    fn: Callable[..., torch.Tensor], subject: Subject, x: torch.Tensor
) -> tuple[float, float]:
    """Bytes per input element that fn saves for backward: all, and beyond its own output.

    The output is kept alive by the next layer's matmul anyway, so only the rest costs memory.
    """
    packed: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = fn(x.detach().requires_grad_(), *subject.inputs(x))
    if not isinstance(y, torch.Tensor):
        raise Wrong(f"forward returned {describe(y)}, not a tensor")
    output_storage = y.untyped_storage().data_ptr()
    total = sum(t.nbytes for t in packed)
    extra = sum(t.nbytes for t in packed if t.untyped_storage().data_ptr() != output_storage)
    return total / x.numel(), extra / x.numel()


def transform_checks(subject: Subject, compile_too: bool) -> list[Result]:
    """torch.func.vmap (torch.compile too with --compile) and saved bytes: never fatal."""
    x = torch.randn(64, 100, generator=torch.Generator().manual_seed(5))
    plain = subject.plain or subject.fn

    def agreement(name: str, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Result:
        for actual, expected in pairs:
            if not torch.allclose(actual, expected, rtol=1.3e-6, atol=1e-5, equal_nan=True):
                difference = (actual - expected).abs().max().item()
                return Result(
                    "transforms",
                    name,
                    INFO,
                    f"runs, but differs from eager by up to {difference:.3g}",
                )
        return Result("transforms", name, PASS)

    def vmapped() -> Result:
        import_dynamo_outside_vmap()
        params = subject.inputs(x)
        batched = torch.func.vmap(lambda row: plain(row, *params))(x)
        grads = torch.func.vmap(torch.func.grad(lambda row: plain(row, *params).sum()))(x)
        y, (grad, *_) = forward_backward(subject, plain, x.requires_grad_(), torch.ones_like(x))
        return agreement("torch.func.vmap", [(batched, y), (grads, grad)])

    def compiled() -> Result:
        torch.compiler.reset()
        # aot_eager traces forward and backward as inductor would, without compiling kernels.
        fn = torch.compile(plain, fullgraph=True, backend="aot_eager")
        y, (grad, *_) = forward_backward(subject, fn, x.requires_grad_(), torch.ones_like(x))
        y_eager, (grad_eager, *_) = forward_backward(subject, plain, x, torch.ones_like(x))
        return agreement("torch.compile fullgraph", [(y, y_eager), (grad, grad_eager)])

    checks = [("torch.func.vmap", vmapped)] + (
        [("torch.compile fullgraph", compiled)] if compile_too else []
    )
    results = []
    for name, check in checks:
        result = guarded("transforms", name, subject, check)
        if result.status == WRONG:  # raised: the transform does not support this Function
            result.status = UNSUPPORTED
        results.append(result)

    def memory() -> Result:
        total, extra = saved_bytes(subject.fn, subject, x)
        total_ref, extra_ref = saved_bytes(subject.reference, subject, x)
        verdict = "no more than" if extra <= extra_ref else "more than"
        return Result(
            "memory",
            "saved bytes per element",
            INFO,
            f"{total:g} saved, {extra:g} beyond the output; reference {total_ref:g}, "
            f"{extra_ref:g} beyond the output ({verdict} the reference)",
        )

    results.append(guarded("memory", "saved bytes per element", subject, memory))
    return results


# -- cost ---------------------------------------------------------------------------------------


def step_time(
    fn: Callable[..., torch.Tensor], subject: Subject, x: torch.Tensor, calls: int
) -> float:
    """Seconds per forward + backward of fn on x."""
    leaf = x.detach().requires_grad_()
    params = subject.inputs(x)
    grad_output = torch.ones_like(x)
    start = time.perf_counter()
    for _ in range(calls):
        fn(leaf, *params).backward(grad_output)
    return (time.perf_counter() - start) / calls


def cost(subject: Subject, large: bool, repetitions: int = 5) -> tuple[Result, dict[str, Any]]:
    """Forward + backward time against the reference, alternating repetitions, medians: at one
    element (what a call costs beyond its kernels), at the experiment's hidden layer, and with
    --large at (2048, 2048). A spread over half the median is flagged as noise."""
    sizes = {"(1,)": (1,), "(64, 100)": (64, 100)} | (
        {"(2048, 2048)": (2048, 2048)} if large else {}
    )
    generator = torch.Generator().manual_seed(4)
    report: dict[str, Any] = {}
    for label, shape in sizes.items():
        x = torch.randn(shape, generator=generator)
        # About 10 ms of calls per repetition, whatever the size.
        once = max(step_time(subject.reference, subject, x, 1), 1e-6)
        calls = max(1, min(1000, int(0.01 / once)))
        times: dict[str, list[float]] = {"function": [], "reference": []}
        for _ in range(repetitions):
            times["function"].append(step_time(subject.fn, subject, x, calls))
            times["reference"].append(step_time(subject.reference, subject, x, calls))
        fn_us, ref_us = (statistics.median(t) * 1e6 for t in times.values())
        spread = max((max(t) - min(t)) / statistics.median(t) for t in times.values())
        report[label] = {
            "function_us": fn_us,
            "reference_us": ref_us,
            "ratio": fn_us / ref_us,
            "spread": spread,
        }
    parts = []
    for size, v in report.items():
        if size == "(1,)":
            continue
        noisy = f", noisy: spread {v['spread']:.0%}" if v["spread"] > 0.5 else ""
        times = f"{v['function_us']:.3g} vs {v['reference_us']:.3g} us{noisy}"
        parts.append(f"{v['ratio']:.2f}x at {size} ({times})")
    detail = "forward+backward: " + ", ".join(parts).replace("x at", "x the reference's time at", 1)
    per_call = report["(1,)"]["function_us"] - report["(1,)"]["reference_us"]
    if per_call > 0:
        # At one element the kernels cost nothing: what is left is per-call overhead.
        detail += f"; {per_call:.1f} us more per call (Python and autograd.Function overhead)"
    return Result("cost", "cost: forward+backward time", INFO, detail), report


# -- training parity ----------------------------------------------------------------------------


@dataclass
class Series:
    """One training run of the check: its loss and exact-zero counts per step."""

    losses: list[float]
    zeros: list[float]
    diverged_at: int | None


def train_side(config: Config, run_dir: Path, target: str, dtype: str) -> Series:
    side = copy.deepcopy(config)
    side.activation.target, side.dtype, side.log_every = target, Dtype(dtype), 1
    side.quiet = True
    train.run(side, run_dir)
    scalars = read_scalars(run_dir, [tags.LOSS, tags.EXACT_ZEROS])
    losses = list(scalars[tags.LOSS].values())
    diverged = next((t for t, v in enumerate(losses) if not math.isfinite(v)), None)
    return Series(losses, list(scalars[tags.EXACT_ZEROS].values()), diverged)


def parting(target: Series, reference: Series) -> dict[str, Any]:
    """Where two finite loss series part, whether an exact zero came just before, how far apart
    they get (relative)."""
    parted = next(
        (t for t, (a, b) in enumerate(zip(target.losses, reference.losses)) if a != b), None
    )
    relative = [
        abs(a - b) / abs(b)
        for a, b in zip(target.losses, reference.losses)
        if b != 0 and math.isfinite(a - b)
    ]
    at_parting = None
    if parted is not None and reference.losses[parted] != 0:
        at_parting = abs(target.losses[parted] - reference.losses[parted]) / abs(
            reference.losses[parted]
        )
    return {
        "steps": len(target.losses),
        "first_parting_step": parted,
        "relative_difference_at_parting": at_parting,
        "exact_zeros_before_parting": int(target.zeros[parted - 1]) if parted else None,
        "steps_with_exact_zeros": sum(z > 0 for z in target.zeros),
        "max_relative_difference": max(relative, default=0.0),
        "final_loss": target.losses[-1] if target.losses else None,
        "reference_final_loss": reference.losses[-1] if reference.losses else None,
    }


def settings_that_train(config: Config, check_dir: Path) -> str:
    """The first of a few gentler settings under which the reference trains without diverging."""
    for init, factor in (("scaled", 1.0), ("scaled", 0.1), ("scaled", 0.01)):
        gentle = copy.deepcopy(config)
        gentle.model.init, gentle.lr = init, config.lr * factor
        series = train_side(
            gentle, check_dir / f"train_gentle_{factor:g}", config.activation.reference, "float64"
        )
        if series.diverged_at is None:
            return f"model.init={init} lr={gentle.lr:g}"
    return ""


def reference_follows_surrogate(subject: Subject) -> bool:
    """The reference's own gradient is the declared surrogate (a straight-through reference):
    then the two train alike, and training parity compares them."""
    grid = torch.linspace(-KINK_RANGE, KINK_RANGE, 2001, dtype=torch.float64)
    _, derivative = value_and_derivative(subject, subject.reference, grid)
    return torch.allclose(derivative, subject.surrogate(grid), rtol=1e-6, atol=1e-9)


def training_parity(
    config: Config, check_dir: Path, subject: Subject, kinks: list[Kink]
) -> tuple[Result, dict[str, Any]]:
    """The experiment trained with the activation and with its reference, same seed: right vs
    wrong decided on the float64 pair, where rounding drifts ~1e-10; the float32 pair's drift
    shown as information. Non-finite losses first."""
    runs = {
        (dtype, side): train_side(config, check_dir / f"train_{dtype}_{side}", target, dtype)
        for dtype in ("float64", "float32")
        for side, target in (
            ("target", config.activation.target),
            ("reference", config.activation.reference),
        )
    }
    write_loss_difference(
        check_dir / "train_float32_target",
        check_dir / "train_float32_reference",
        config.activation.name,
    )
    report: dict[str, Any] = {
        dtype: {
            "target_diverged_at": runs[dtype, "target"].diverged_at,
            "reference_diverged_at": runs[dtype, "reference"].diverged_at,
        }
        for dtype in ("float64", "float32")
    }
    verdict = non_finite_parity(config, check_dir, runs)
    if (
        verdict is None
        and subject.surrogate is not None
        and not reference_follows_surrogate(subject)
    ):
        losses = runs["float32", "target"].losses
        verdict = (
            INFO,
            f"trains from {losses[0]:.4g} to {losses[-1]:.4g} in {len(losses)} steps; not "
            "compared with the reference, whose gradient is not the declared surrogate",
        )
    if verdict is None:
        for dtype in ("float64", "float32"):
            report[dtype] |= parting(runs[dtype, "target"], runs[dtype, "reference"])
        verdict = finite_parity(report["float64"], report["float32"], kinks)
    status, detail = verdict
    return Result("training", "training parity", status, detail), report


def non_finite_parity(
    config: Config, check_dir: Path, runs: dict[tuple[str, str], Series]
) -> tuple[str, str] | None:
    """The verdict when a run's loss is non-finite: the activation's alone fails; both is the
    experiment's settings, with settings under which the reference trains."""
    for dtype in ("float64", "float32"):
        target, reference = runs[dtype, "target"], runs[dtype, "reference"]
        if target.diverged_at is not None and reference.diverged_at is None:
            return LARGE, (
                f"in {dtype} the loss is non-finite from step {target.diverged_at} while the "
                f"reference trains (final loss {reference.losses[-1]:.4g})"
            )
    if all(runs[dtype, "target"].diverged_at is None for dtype in ("float64", "float32")):
        return None
    gentler = settings_that_train(config, check_dir)
    hint = f"; {gentler} trains the reference" if gentler else ""
    return INFO, (
        "both runs diverge: the experiment's settings are too large for this activation, "
        f"not a fault of the Function{hint}"
    )


def finite_parity(
    exact64: dict[str, Any], exact32: dict[str, Any], kinks: list[Kink]
) -> tuple[str, str]:
    """Right vs wrong from where the float64 pair parts; the float32 pair's drift, and exact
    zeros before parting (a convention at the kink), as information."""
    first, at_parting = exact64["first_parting_step"], exact64["relative_difference_at_parting"]
    # Rounding shows where two float64 runs first part as a difference of ~1e-16 (however far
    # a chaotic network carries it later); a gradient that is not the reference's, as one far
    # larger. Through a step (a spiking neuron) rounding moves the loss only once it carries a
    # pre-activation across the step, then by much: there only the first update can tell.
    steps = any(kink.step for kink in kinks)
    if (
        first is not None
        and not exact64["exact_zeros_before_parting"]
        and (at_parting is None or at_parting > FLOAT64_PARTING)
        and (first == 1 or not steps)
    ):
        return WRONG, (
            f"the float64 runs part at step {first} by {at_parting or math.inf:.3g} (relative), "
            f"far beyond rounding (~1e-16), and end up {exact64['max_relative_difference']:.3g} "
            "apart: the Function does not train like its reference"
        )
    if first is None:
        detail = f"float64 runs identical over {exact64['steps']} steps"
    else:
        cause = "a pre-activation crossing the step" if steps else "rounding"
        detail = (
            f"float64 runs part at step {first} by {at_parting:.2g} ({cause}) and end up "
            f"{exact64['max_relative_difference']:.2g} apart by step {exact64['steps'] - 1}"
        )
    for dtype, pair in (("float64", exact64), ("float32", exact32)):
        zeros = pair["exact_zeros_before_parting"]
        if zeros:
            return CONVENTION, detail + (
                f"; in {dtype} they part at step {pair['first_parting_step']}, after {zeros} "
                f"exact-zero pre-activation(s) at step {pair['first_parting_step'] - 1} "
                f"({pair['steps_with_exact_zeros']} steps had exact zeros; max relative "
                f"difference {pair['max_relative_difference']:.3g})"
            )
    if exact32["first_parting_step"] is None:
        return PASS, detail + "; float32 runs identical too"
    return PASS, detail + (
        f"; in float32 they part at step {exact32['first_parting_step']} and drift "
        f"{exact32['max_relative_difference']:.2g} by step {exact32['steps'] - 1} from "
        "rounding alone"
    )


def guarded_training(
    config: Config, check_dir: Path, subject: Subject, kinks: list[Kink]
) -> tuple[Result, dict[str, Any]]:
    """training_parity, with the runs' own log lines (a divergence warning) kept to their
    logs, and an error in them a wrong result in one line."""
    logger = logging.getLogger("reluexp")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        return training_parity(config, check_dir, subject, kinks)
    except Exception as error:
        detail = autograd_message(raised(error), subject.name)
        return Result("training", "training parity", WRONG, detail), {"error": detail}
    finally:
        logger.setLevel(level)


def preactivations(config: Config, check_dir: Path) -> dict[str, torch.Tensor]:
    """The first hidden layer's pre-activations of the experiment at its first step and at the
    float64 reference run's last, in float32 (the experiment's dtype)."""
    from reluexp.state import build_state, seeded_data

    first = copy.deepcopy(config)
    first.dtype = Dtype.float64
    data, state = build_state(first, torch.device("cpu"), seeded_data(first), None)
    found = {"first step": (data.x @ state.weights[0].detach()).float()}
    run_dir = check_dir / "train_float64_reference"
    if (run_dir / "checkpoint.pt").is_file():
        last = load_checkpoint(run_dir)["weights"][0].double()
        found["last step"] = (data.x @ last).float()
    return found


# -- the report ---------------------------------------------------------------------------------


def overall(results: list[Result]) -> str:
    return worst([Verdict(r.status) for r in results]).status


def verdict_line(name: str, results: list[Result]) -> str:
    counts = {s: sum(r.status == s for r in results) for s in (PRECISION, CONVENTION)}
    status = overall(results)
    if status == WRONG:
        return f"{name}: WRONG"
    if status == LARGE:
        return f"{name}: FAILS AT LARGE INPUTS"
    notes = [f"{n} {s} difference(s)" for s, n in counts.items() if n]
    return f"{name}: gradients correct" + (f"; {', '.join(notes)}" if notes else "")


def summary_lines(results: list[Result]) -> list[str]:
    """One line per group whose worst result is not a pass: its status, check and detail."""
    lines = []
    for group in dict.fromkeys(r.group for r in results):
        members = [r for r in results if r.group == group and r.status not in QUIET]
        if members:
            first = min(members, key=lambda r: SEVERITY.index(r.status))
            lines.append(f"{first.status.upper()} {first.check}: {first.detail}")
    return lines


def table(results: list[Result]) -> list[str]:
    width = max(len(r.check) for r in results)
    return [f"{r.check:<{width}}  {r.status.upper():<21}  {r.detail}" for r in results]


def markdown(name: str, results: list[Result]) -> str:
    rows = ["| group | check | verdict | detail |", "| --- | --- | --- | --- |"]
    for r in results:
        detail = r.detail.replace("|", "\\|")
        rows.append(f"| {r.group} | {r.check} | {r.status} | {detail} |")
    return f"# Function lab: {name}\n\n{verdict_line(name, results)}\n\n" + "\n".join(rows) + "\n"


def plot(subject: Subject, kinks: list[Kink], verdict: str, path: Path) -> None:
    """The Function and its reference over the tested range: forward above, backward below
    (the declared surrogate beside it when there is one), kinks as dotted lines and the largest
    backward difference marked."""
    from matplotlib.figure import Figure

    reach = max([6.0, *(1.5 * abs(k.x) for k in kinks)])
    grid = torch.linspace(
        -min(reach, KINK_RANGE), min(reach, KINK_RANGE), 2001, dtype=torch.float64
    )
    y, d = value_and_derivative(subject, subject.fn, grid)
    y_ref, d_ref = value_and_derivative(subject, subject.reference, grid)
    figure = Figure(figsize=(8, 6.5))
    top, bottom = figure.subplots(2, 1, sharex=True)
    top.plot(grid, y_ref, color="tab:gray", linewidth=3, alpha=0.5, label="reference")
    top.plot(grid, y, color="tab:blue", linewidth=1.2, label=subject.name)
    bottom.plot(
        grid, d_ref, color="tab:gray", linewidth=3, alpha=0.5, label="reference's derivative"
    )
    if subject.surrogate is not None:
        bottom.plot(
            grid,
            subject.surrogate(grid),
            color="tab:green",
            linewidth=3,
            alpha=0.4,
            label="declared surrogate",
        )
        d_ref = subject.surrogate(grid)
    bottom.plot(grid, d, color="tab:blue", linewidth=1.2, label=f"{subject.name}.backward")
    away = torch.ones_like(grid, dtype=torch.bool)
    for kink in kinks:
        away &= (grid - kink.x).abs() > 2 * (grid[1] - grid[0])
        for axes in (top, bottom):
            axes.axvline(kink.x, color="tab:red", linestyle=":", linewidth=1)
    difference = ((d - d_ref).abs() * away).nan_to_num(nan=0.0)
    if difference.max() > 0:
        i = int(difference.argmax())
        bottom.plot(
            [grid[i]],
            [d[i]],
            "o",
            color="tab:red",
            label=f"largest difference: {difference[i].item():.3g} at x={grid[i].item():.3g}",
        )
    top.set_title(
        f"{verdict}  (kinks: {', '.join(f'{k.x:g}' for k in kinks) or 'none'})", fontsize="medium"
    )
    top.set_ylabel("forward")
    bottom.set_ylabel("backward (dy/dx)")
    bottom.set_xlabel("x (float64)")
    for axes in (top, bottom):
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


@dataclass
class Options:
    compile: bool = False
    large: bool = False


def check(config: Config, check_dir: Path, options: Options | None = None) -> int:
    """Run every check, write check.json, check.md and check.png, print the findings; return
    the exit code."""
    options = options or Options()
    validate(config)
    subject = make_subject(config)
    results = [returns_check(subject)]
    kinks: list[Kink] = []
    training_report: dict[str, Any] = {}
    cost_report: dict[str, Any] = {}
    # A Function that returns what cannot be right is reported in that one line.
    if results[0].status == PASS:
        kinks = subject.kinks = find_kinks(subject)
        results += gradient_checks(subject, kinks) + parity_checks(subject, kinks)
        results += kink_checks(subject, kinks) + edge_checks(subject, kinks)
        training_result, training_report = guarded_training(config, check_dir, subject, kinks)
        results += range_checks(subject, preactivations(config, check_dir))
        results += transform_checks(subject, options.compile)
        try:
            cost_result, cost_report = cost(subject, options.large)
        except Exception as error:
            detail = autograd_message(raised(error), subject.name)
            cost_result = Result("cost", "cost: forward+backward time", UNSUPPORTED, detail)
        results += [cost_result, training_result]
    line = verdict_line(subject.name, results)
    write_json_atomic(
        check_dir / "check.json",
        {
            "activation": config_dict(config)["activation"],
            "verdict": overall(results),
            "passed": overall(results) not in FAILING,
            "kinks": [asdict(k) for k in kinks],
            "checks": [asdict(r) for r in results],
            "training": training_report,
            "cost": cost_report,
        },
    )
    report = markdown(subject.name, results)
    (check_dir / "check.md").write_text(report)
    images = {}
    try:
        plot(subject, kinks, line, check_dir / "check.png")
        images["check/functions"] = (check_dir / "check.png").read_bytes()
    except Exception as error:  # a Function the plot cannot evaluate: the report stands
        print(f"(no check.png: {autograd_message(raised(error), subject.name)})")
    # The picture and the table in TensorBoard too, in the check directory's own run.
    write_derived(check_dir, "check", images=images, texts={"check/report": report})
    if config.verbose:
        print("\n".join(table(results)))
    for text in summary_lines(results):
        print(text)
    print(f"{line}. Report: {check_dir / 'check.md'}")
    return 1 if overall(results) in FAILING else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reluexp.check",
        description="Verify an activation's backward against its reference.",
    )
    parser.add_argument("--compile", action="store_true", help="also try torch.compile (slow)")
    parser.add_argument("--large", action="store_true", help="also time a (2048, 2048) input")
    parser.add_argument("overrides", nargs="*", help="config overrides, as for python -m reluexp")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        # The same config tree and overrides as `python -m reluexp`; the dir from hydra.run.dir.
        cfg = compose_config(args.overrides)
        config, check_dir = task_config(cfg), Path(cfg.hydra.run.dir)
        check_dir.mkdir(parents=True, exist_ok=True)
        return check(config, check_dir, Options(args.compile, args.large))
    except (ConfigError, *COMPOSITION_ERRORS) as error:
        print(f"reluexp.check: error: {one_line(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
