"""What the backward is judged against, in float64: the Function's own forward differentiated by
autograd (its forward called outside apply, with a context that records what it saves), the
declared surrogate, or central finite differences of the forward where autograd cannot follow
it (numpy inside, non-differentiable ops, a Module or function that hides its Function)."""

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import torch

from reluexp.lab.cases import Kink, at_kinks
from reluexp.lab.differences import (
    FD_SMALLEST_STEP,
    fd_error,
    finite_difference_params,
    finite_differences,
    resolved,
    steps_for,
)
from reluexp.lab.shape import Dependence, Domain, Structure
from reluexp.lab.subject import Subject, Tensors, tensor_slots, with_fixed_randomness, with_tensors


class RecordingContext:
    """What a Function's forward may ask of its ctx when called outside apply: it records the
    tensors saved and the attributes set, and marks nothing."""

    def __init__(self, inputs: int):
        self.saved_tensors: tuple[torch.Tensor, ...] = ()
        self.needs_input_grad = (True,) * inputs
        self.materialize_grads = True

    def save_for_backward(self, *tensors: torch.Tensor) -> None:
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors: torch.Tensor) -> None:
        pass

    def mark_dirty(self, *tensors: torch.Tensor) -> None:
        pass

    def mark_non_differentiable(self, *tensors: torch.Tensor) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def forward_outside_apply(function: type[torch.autograd.Function], extra: tuple) -> Tensors:
    """The Function's forward as plain torch ops, so autograd differentiates the forward itself:
    forward(x, *extra) with setup_context, else forward(ctx, x, *extra); the tensors among
    extra replaced by those given after x (twin(x, *tensors))."""
    separate_context = function.setup_context is not torch.autograd.Function.setup_context
    slots = tensor_slots(extra)

    def twin(x: torch.Tensor, *tensors: torch.Tensor) -> torch.Tensor:
        arguments = with_tensors(extra, slots, tensors)
        if separate_context:
            return function.forward(x, *arguments)
        return function.forward(RecordingContext(1 + len(extra)), x, *arguments)

    return twin


def surrogate_twin(subject: Subject) -> Tensors:
    """The target's forward value with the declared surrogate as its derivative."""
    forward, derivative = subject.forward, subject.surrogate

    class DeclaredSurrogate(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return forward(x)

        @staticmethod
        def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return grad_output * derivative(x).to(grad_output.dtype)

    return DeclaredSurrogate.apply


class OracleKind(StrEnum):
    """Where the truth of the backward comes from."""

    AUTOGRAD = "autograd"
    SURROGATE = "surrogate"
    FINITE_DIFFERENCES = "finite differences"


@dataclass
class Oracle:
    """The float64 truth of the backward, and the same formula in a result's own dtype (its
    rounding), where there is one."""

    kind: OracleKind
    expected_as: str  # how messages name its numbers
    reason: str  # why this oracle, for the report
    # The oracle as an activation for training (None: no twin to train beside).
    twin: Tensors | None
    subject: Subject
    kinks: list[Kink]
    structure: Structure = Structure()
    # Where the truth is known: outside it, whatever the Function returns is a convention.
    domain: Domain = Domain()
    # The dtype its forward computes in for a float64 input (float32, cast back, for some):
    # what its finite differences carry.
    computed_in: torch.dtype = torch.float64

    @property
    def error(self) -> float:
        return fd_error(self.computed_in) if self.kind == OracleKind.FINITE_DIFFERENCES else 0.0

    @property
    def fd_error(self) -> float:
        """What its finite differences are trusted to, whichever the oracle."""
        return fd_error(self.computed_in)

    def across_zero(self, x: torch.Tensor) -> torch.Tensor:
        """Where a stencil beside 0 reaches across it in a forward whose kinks were not looked
        for (not the same at every element): 0 is the likeliest kink (a ReLU unit's)."""
        if self.structure.pointwise:
            return torch.zeros_like(x, dtype=torch.bool)
        return (x != 0) & (x.abs() <= 2 * steps_for(x, self.kinks))

    @property
    def formula(self) -> str:
        """What the oracle computes in a result's own dtype, whose rounding a result may share."""
        return {
            OracleKind.AUTOGRAD: "its forward's autograd derivative",
            OracleKind.SURROGATE: "the surrogate",
        }.get(self.kind, "")

    def forward(self, params: list[torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda v: self.subject.call(v, *params)

    def grads(
        self, x: torch.Tensor, grad_output: torch.Tensor, params: list[torch.Tensor]
    ) -> list[torch.Tensor | None]:
        """The input's and the params' gradients for upstream grad_output in x's dtype, by
        this oracle's formula; None where it has none (finite differences below float64)."""
        if self.kind == OracleKind.SURROGATE:
            derivative = self.subject.surrogate(x.detach())
            return [grad_output * derivative.to(grad_output.dtype), *([None] * len(params))]
        if self.kind == OracleKind.AUTOGRAD:
            leaves = [t.detach().requires_grad_() for t in (x, *params)]
            y = self.twin(*leaves)
            grads = torch.autograd.grad(y, leaves, grad_output.to(y.dtype), allow_unused=True)
            return [
                torch.zeros_like(leaf) if grad is None else grad.to(leaf.dtype)
                for leaf, grad in zip(leaves, grads)
            ]
        differences = (
            finite_differences(
                self.forward(params),
                x.detach(),
                grad_output,
                self.kinks,
                self.structure,
                self.fd_error,
            )
            if x.dtype == torch.float64
            else None
        )
        if differences is None:
            return [None] * (1 + len(params))
        grad = differences[0]
        return [grad, *finite_difference_params(self.subject, x.detach(), grad_output, params)]

    def true_gradients(
        self, x: torch.Tensor, grad_output: torch.Tensor, params: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor | None], torch.Tensor, torch.Tensor]:
        """The float64 gradients at x, where autograd's were replaced, and how far the input's
        truth may be off (finite differences that still disagree with half their step, a kink
        right beside the input: unknown there, infinitely uncertain).

        autograd follows the formula: at a point where a piece of it bends (abs or clamp at 0
        inside a smooth softplus) it gives that piece's convention, not the function's
        derivative; where finite differences are resolved and disagree, they are the truth (for
        an elementwise Function: through a row, a large input elsewhere in it swamps the
        differences' step in float64 rounding, and autograd stays the truth)."""
        replaced = torch.zeros_like(x, dtype=torch.bool)
        uncertainty = torch.zeros_like(x)
        if self.kind == OracleKind.SURROGATE or (
            self.kind == OracleKind.AUTOGRAD and not self.structure.elementwise
        ):
            return self.grads(x, grad_output, params), replaced, uncertainty
        differences = finite_differences(
            self.forward(params), x.detach(), grad_output, self.kinks, self.structure, self.fd_error
        )
        if self.kind == OracleKind.FINITE_DIFFERENCES:
            if differences is None:
                return [None] * (1 + len(params)), replaced, uncertainty
            by_differences, halved = differences
            unknown = ~resolved(by_differences, halved, x, grad_output, self.fd_error)
            unknown |= steps_for(x, self.kinks) < FD_SMALLEST_STEP
            unknown |= self.across_zero(x)
            noise = rounding_of_differences(self, x, grad_output, params)
            uncertainty = torch.where(unknown, math.inf, noise)
            grads = [
                by_differences,
                *finite_difference_params(self.subject, x, grad_output, params),
            ]
            return grads, replaced, uncertainty
        grads = self.grads(x, grad_output, params)
        if differences is not None:
            by_differences, halved = differences
            # A stencil of subnormal steps (a kink a few subnormals away) resolves nothing.
            normal_steps = steps_for(x, self.kinks) >= FD_SMALLEST_STEP
            normal_steps &= ~self.across_zero(x)
            trusted = resolved(by_differences, halved, x, grad_output, self.fd_error)
            trusted &= x.isfinite()
            trusted &= normal_steps
            scale = by_differences.abs() + grad_output.abs() * x.abs().clamp(min=1.0)
            # Also where autograd's formula is not finite and the differences are (0/0 where
            # exp(-1/x) underflows at a tiny x: the derivative is 0 there).
            apart = ((grads[0] - by_differences).abs() > 1e-6 * scale) | (
                ~grads[0].isfinite() & by_differences.isfinite()
            )
            replaced = trusted & ~at_kinks(x, self.kinks) & apart
            # The five-point rule's error shrinks sixteenfold with its step: extrapolated, the
            # two leave only rounding (sign(x) * log1p(...) at 0 was 3e-13 off by one step).
            extrapolated = halved + (halved - by_differences) / 15
            grads[0] = torch.where(replaced, extrapolated, grads[0])
            # Where the differences are the truth, known within their own error: what halving
            # their step changed, and the forward's rounding over the step (at a bend of a
            # stable softplus's formula, an exact sigmoid(0) = 0.5 was 87 units off them).
            error = (by_differences - halved).abs()
            error += rounding_of_differences(self, x, grad_output, params)
            uncertainty = torch.where(replaced, error, uncertainty)
        return grads, replaced, uncertainty


def rounding_of_differences(
    oracle: Oracle, x: torch.Tensor, grad_output: torch.Tensor, params: list[torch.Tensor]
) -> torch.Tensor:
    """How far float64 rounding of the forward's values can move finite differences: about
    1.5 float64 units of each output the step moves, times its upstream gradient, over the
    step; a row's outputs all move with each of its inputs (a value of 1e37 in the row swamps
    a step of 0.01 entirely), every output for a general Function."""
    with torch.no_grad():
        y = oracle.forward(params)(x).double()
    moved = 1.5 * torch.finfo(oracle.computed_in).eps * (grad_output.abs() * y.abs()).nan_to_num()
    structure = oracle.structure
    if structure.kind == Dependence.ROWS and x.dim() > 0:
        moved = moved.sum(dim=structure.dim % x.dim(), keepdim=True).expand_as(x)
    elif not structure.elementwise:
        moved = moved.sum().expand_as(x)
    return moved / steps_for(x, oracle.kinks)


def choose_oracle(
    subject: Subject,
    x: torch.Tensor,
    kinks: list[Kink],
    structure: Structure,
    domain: Domain,
    computed_in: torch.dtype = torch.float64,
) -> Oracle:
    """The surrogate where one is declared; else autograd through a Function's forward where
    that is the same function and autograd follows it there (its derivative passes gradcheck
    on x, float64 off the kinks); else finite differences."""
    if subject.surrogate is not None:
        twin = surrogate_twin(subject) if not subject.params else None
        unjudged = (
            f"; {', '.join(subject.params)}'s gradient not judged (a surrogate declares the "
            "input's)"
            if subject.params
            else ""
        )
        return Oracle(
            OracleKind.SURROGATE,
            "declared surrogate",
            "the backward is a declared surrogate, judged against it (not the forward's "
            f"derivative){unjudged}",
            twin,
            subject,
            kinks,
            structure,
            domain,
            computed_in,
        )
    fallback = "finite differences of the forward"
    if subject.function is None:
        why = f"a {subject.kind}: the lab differentiates a Function's own forward only"
    else:
        twin = forward_outside_apply(subject.function, subject.extra_args)
        if subject.random:
            twin = with_fixed_randomness(twin)
        why = why_autograd_cannot(subject, twin, x)
        if why is None:
            return Oracle(
                OracleKind.AUTOGRAD,
                "derivative of the forward",
                "the forward, differentiated by autograd in float64",
                twin,
                subject,
                kinks,
                structure,
                domain,
                computed_in,
            )
    return Oracle(
        OracleKind.FINITE_DIFFERENCES,
        fallback,
        f"finite differences of the forward in float64 ({why})",
        None,
        subject,
        kinks,
        structure,
        domain,
        computed_in,
    )


def why_autograd_cannot(subject: Subject, twin: Tensors, x: torch.Tensor) -> str | None:
    """Why autograd of the forward outside apply cannot stand for its derivative; None where
    it can."""
    leaf = x.detach().requires_grad_()
    try:
        y = twin(leaf)
    except Exception as error:
        return f"its forward does not run outside apply: {type(error).__name__}: {error}"
    if not isinstance(y, torch.Tensor) or not y.requires_grad:
        return "autograd cannot follow its forward (no graph: numpy, a mask or detached values)"
    if not torch.allclose(y.detach().double(), subject.forward(x).double(), equal_nan=True):
        return "its forward computes other values outside apply"
    try:
        follows = torch.autograd.gradcheck(twin, (leaf,), raise_exception=False)
    except Exception as error:
        return f"autograd cannot differentiate its forward: {type(error).__name__}: {error}"
    if not follows:
        return "autograd's derivative of its forward is not its finite differences"
    return None
