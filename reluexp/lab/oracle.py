"""What the backward is judged against, in float64: the Function's own forward differentiated by
autograd (its forward called outside apply, with a context that records what it saves), the
declared surrogate, or central finite differences of the forward where autograd cannot follow
it (numpy inside, non-differentiable ops, a Module or function that hides its Function)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from reluexp.lab.cases import Kink, at_kinks
from reluexp.lab.subject import Subject, Tensors

# Finite differences: a five-point stencil with steps of this size relative to the input
# (between 1 and 10), ~1e-12 of a smooth derivative; the checks keep inputs 0.05 from kinks.
FD_STEP = 1e-3
FD_RELATIVE_FROM = 1e6
# What finite differences are trusted to, relative to the inputs' scale.
FD_ERROR = 1e-9
# A parameter's step, relative to its size (at least 1).
FD_PARAM_STEP = 1e-6
# Parameters of more elements than this are not differenced element by element.
FD_MAX_PARAM_ELEMENTS = 256


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
    forward(x, *extra) with setup_context, else forward(ctx, x, *extra)."""
    separate_context = function.setup_context is not torch.autograd.Function.setup_context

    def twin(x: torch.Tensor) -> torch.Tensor:
        if separate_context:
            return function.forward(x, *extra)
        return function.forward(RecordingContext(1 + len(extra)), x, *extra)

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


def steps_for(x: torch.Tensor, kinks: list[Kink]) -> torch.Tensor:
    """Finite-difference steps: FD_STEP of the input's size (between 1 and 10; relative past
    FD_RELATIVE_FROM, where a fixed step would vanish in rounding), and under a quarter of the
    distance to the nearest kink, so that no stencil straddles one."""
    size = x.abs()
    h = torch.where(size < FD_RELATIVE_FROM, FD_STEP * size.clamp(1.0, 10.0), 1e-8 * size)
    for kink in kinks:
        distance = (x - kink.x).abs()
        h = torch.where(distance > 0, torch.minimum(h, distance / 4), h)
    return h


def stencil(
    forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, h: torch.Tensor
) -> torch.Tensor:
    """d forward / dx element by element (forward elementwise), five points, float64."""
    with torch.no_grad():
        f = [forward(x + k * h).double() for k in (-2, -1, 1, 2)]
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / (12 * h)


def finite_differences(
    forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, kinks: list[Kink]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The derivative by finite differences, with the step and with half of it: where the two
    agree the stretch is smooth and resolved."""
    h = steps_for(x, kinks)
    return stencil(forward, x, h), stencil(forward, x, h / 2)


@dataclass
class Oracle:
    """The float64 truth of the backward, and the same formula in a result's own dtype (its
    rounding), where there is one."""

    kind: str  # autograd, surrogate, finite differences
    expected_as: str  # how messages name its numbers
    reason: str  # why this oracle, for the report
    # The oracle as an activation for training (None: no twin to train beside).
    twin: Tensors | None
    subject: Subject
    kinks: list[Kink]
    elementwise: bool = True

    @property
    def error(self) -> float:
        return FD_ERROR if self.kind == "finite differences" else 0.0

    @property
    def formula(self) -> str:
        """What the oracle computes in a result's own dtype, whose rounding a result may share."""
        return {"autograd": "its forward's autograd derivative", "surrogate": "the surrogate"}.get(
            self.kind, ""
        )

    def forward(self, params: list[torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda v: self.subject.call(v, *params)

    def grads(
        self, x: torch.Tensor, grad_output: torch.Tensor, params: list[torch.Tensor]
    ) -> list[torch.Tensor | None]:
        """The input's and the params' gradients for upstream grad_output in x's dtype, by
        this oracle's formula; None where it has none (finite differences below float64)."""
        if self.kind == "surrogate":
            derivative = self.subject.surrogate(x.detach())
            return [grad_output * derivative.to(grad_output.dtype), *([None] * len(params))]
        if self.kind == "autograd":
            leaf = x.detach().requires_grad_()
            y = self.twin(leaf)
            (grad,) = torch.autograd.grad(y, leaf, grad_output.to(y.dtype), allow_unused=True)
            return [torch.zeros_like(leaf) if grad is None else grad.to(x.dtype)]
        if not self.elementwise or x.dtype != torch.float64:
            return [None] * (1 + len(params))
        derivative, _ = finite_differences(self.forward(params), x.detach(), self.kinks)
        grad = grad_output * derivative
        return [grad, *finite_difference_params(self.subject, x.detach(), grad_output, params)]

    def truth(
        self, x: torch.Tensor, grad_output: torch.Tensor, params: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor | None], torch.Tensor, torch.Tensor]:
        """The float64 gradients at x, where autograd's were replaced, and how far the input's
        truth may be off (finite differences that halving the step moves: a kink too small to
        find nearby).

        autograd follows the formula: at a point where a piece of it bends (abs or clamp at 0
        inside a smooth softplus) it gives that piece's convention, not the function's
        derivative; where finite differences are resolved and disagree, they are the truth."""
        grads = self.grads(x, grad_output, params)
        replaced = torch.zeros_like(x, dtype=torch.bool)
        uncertainty = torch.zeros_like(x)
        if self.kind in ("autograd", "finite differences") and grads[0] is not None:
            derivative, halved = finite_differences(self.forward(params), x.detach(), self.kinks)
            by_differences = grad_output * derivative
            unresolved = (grad_output * (derivative - halved)).abs().nan_to_num(nan=0.0)
            if self.kind == "finite differences":
                return grads, replaced, unresolved
            scale = by_differences.abs() + grad_output.abs() * x.abs().clamp(min=1.0)
            trusted = (unresolved <= FD_ERROR * scale) & x.isfinite()
            replaced = (
                trusted
                & ~at_kinks(x, self.kinks)
                & ((grads[0] - by_differences).abs() > 1e-6 * scale)
            )
            grads[0] = torch.where(replaced, by_differences, grads[0])
        return grads, replaced, uncertainty


def finite_difference_params(
    subject: Subject, x: torch.Tensor, grad_output: torch.Tensor, params: list[torch.Tensor]
) -> list[torch.Tensor | None]:
    """Each parameter's gradient for upstream grad_output, an element at a time, five points."""
    grads: list[torch.Tensor | None] = []
    for i, param in enumerate(params):
        if param.numel() > FD_MAX_PARAM_ELEMENTS:
            grads.append(None)
            continue
        grad = torch.zeros_like(param, dtype=torch.float64)
        for j in range(param.numel()):

            def moved(value: torch.Tensor, i: int = i, j: int = j) -> torch.Tensor:
                changed = [p.detach().clone() for p in params]
                changed[i].view(-1)[j] = value.reshape(())
                return (subject.call(x, *changed) * grad_output).sum()

            at = param.detach().reshape(-1)[j : j + 1].double()
            # A small step: a parameter moves every element, some of them near a kink.
            step = FD_PARAM_STEP * at.abs().clamp(min=1.0)
            grad.view(-1)[j] = stencil(moved, at, step).reshape(())
        grads.append(grad)
    return grads


def elementwise(subject: Subject, x: torch.Tensor) -> bool:
    """Each output element depends on its input element alone (a nudge to one moves no other)."""
    y = subject.forward(x)
    nudged = x.clone()
    nudged.view(-1)[0] += 1.0
    moved = subject.forward(nudged)
    return y.shape == x.shape and torch.equal(moved.view(-1)[1:], y.view(-1)[1:])


def choose_oracle(subject: Subject, x: torch.Tensor, kinks: list[Kink]) -> Oracle:
    """The surrogate where one is declared; else autograd through a Function's forward where
    that is the same function and autograd follows it there (its derivative passes gradcheck
    on x, float64 off the kinks); else finite differences."""
    if subject.surrogate is not None:
        twin = surrogate_twin(subject) if not subject.params else None
        return Oracle(
            "surrogate",
            "declared surrogate",
            "the backward is a declared surrogate, judged against it (not the forward's "
            "derivative)",
            twin,
            subject,
            kinks,
        )
    fallback = "finite differences of the forward"
    if subject.function is None:
        why = f"a {subject.kind}: the lab differentiates a Function's own forward only"
    else:
        twin = forward_outside_apply(subject.function, subject.extra_args)
        why = autograd_follows(subject, twin, x)
        if not why:
            return Oracle(
                "autograd",
                "derivative of the forward",
                "the forward, differentiated by autograd in float64",
                twin,
                subject,
                kinks,
            )
    return Oracle(
        "finite differences",
        fallback,
        f"finite differences of the forward in float64 ({why})",
        None,
        subject,
        kinks,
        elementwise(subject, x.detach()),
    )


def autograd_follows(subject: Subject, twin: Tensors, x: torch.Tensor) -> str:
    """Why autograd cannot stand for the forward's derivative (empty: it can)."""
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
    return ""
