"""Central finite differences of a forward in float64, the lab's one way of taking them: the
input's vector-Jacobian product (a five-point stencil, its step refined where two steps
disagree) and each parameter's gradient, an element at a time; and the constants they use."""

from collections.abc import Callable, Sequence

import torch

from reluexp.lab.cases import Kink
from reluexp.lab.shape import Dependence, Structure
from reluexp.lab.subject import Subject

# Finite differences: a five-point stencil with steps of this size relative to the input
# (between 1 and 10), ~1e-12 of a smooth derivative; the checks keep inputs 0.05 from kinks.
FD_STEP = 1e-3
FD_RELATIVE_FROM = 1e6
# What finite differences are trusted to, relative to the inputs' scale, of a forward computed
# in float64; of one that rounds to float32 inside (and casts back), FD_ROUNDING units of its
# rounding over the step.
FD_ERROR = 1e-9
FD_ROUNDING = 8
# A parameter's step, relative to its size (at least 1).
FD_PARAM_STEP = 1e-6
# Parameters of more elements than this are not differenced element by element.
FD_MAX_PARAM_ELEMENTS = 256
# Finite differences of a Function whose outputs each depend on every input move its elements
# one at a time, for inputs of this many elements at most; beyond, they are not taken.
FD_MAX_ELEMENTS = 256
# How many times finite differences halve their step where two steps disagree.
FD_REFINEMENTS = 4
# The smallest step finite differences are trusted with: a kink closer than four of them (an
# input of every binade beside a kink at 0) leaves a stencil whose change is rounding of the
# forward's value (or, among subnormals, a few units of granularity): the truth is unknown.
FD_SMALLEST_STEP = 1e-10


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


# The five-point rule's points, in steps from x, and the change it gives per unit of the step
# from the forward's values there (f: indexable by the points' order).
FIVE_POINTS = (-2, -1, 1, 2)


def five_point_change(f: Sequence[torch.Tensor] | torch.Tensor) -> torch.Tensor:
    return (f[0] - 8 * f[1] + 8 * f[2] - f[3]) / 12


def stencil(
    forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, h: torch.Tensor
) -> torch.Tensor:
    """d forward / dx element by element (forward elementwise), five points, float64."""
    with torch.no_grad():
        f = [forward(x + k * h).double() for k in FIVE_POINTS]
    return five_point_change(f) / h


def vjp_by_differences(
    forward: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    grad_output: torch.Tensor,
    h: torch.Tensor,
    structure: Structure,
    only: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """The vector-Jacobian product grad_output^T J by five-point finite differences, float64:
    elementwise, every element moved at once; a row's function on an input of one or two
    dimensions, every row's elements in one batch (rows_vjp; `only`: the elements wanted);
    otherwise one element at a time, every output's change credited to it (None past
    FD_MAX_ELEMENTS elements)."""
    if structure.elementwise:
        return grad_output * stencil(forward, x, h)
    if structure.kind == Dependence.ROWS and x.dim() in (1, 2):
        return rows_vjp(forward, x, grad_output, h, structure.dim, only)
    if x.numel() > FD_MAX_ELEMENTS:
        return None
    vjp = torch.zeros(x.numel(), dtype=torch.float64)
    for i in range(x.numel()):
        step = torch.zeros(x.numel(), dtype=torch.float64)
        step[i] = h.reshape(-1)[i]
        with torch.no_grad():
            f = [forward(x + k * step.reshape(x.shape)).double() for k in FIVE_POINTS]
        vjp[i] = (grad_output * five_point_change(f)).sum() / step[i]
    return vjp.reshape(x.shape)


def rows_vjp(
    forward: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    grad_output: torch.Tensor,
    h: torch.Tensor,
    dim: int,
    only: torch.Tensor | None = None,
) -> torch.Tensor:
    """vjp_by_differences for a row's function (dim -1 or 0 of an input of at most two
    dimensions), all stencil points in one call: each row with its j-th element moved is a row
    of one batch (the function treats rows apart), laid out along the function's own dim.
    `only`: the elements to compute (the rest are 0)."""
    axis = dim % x.dim()
    last, g, step = (t.movedim(axis, -1).double() for t in (x, grad_output, h))
    n = last.shape[-1]
    rows, g, step = (t.reshape(-1, n) for t in (last, g, step))
    wanted = torch.ones_like(rows, dtype=torch.bool) if only is None else only
    row, element = wanted.movedim(axis, -1).reshape(-1, n).nonzero(as_tuple=True)
    moves = torch.zeros(len(row), n, dtype=torch.float64)
    moves[torch.arange(len(row)), element] = step[row, element]
    points = torch.stack([rows[row] + k * moves for k in FIVE_POINTS]).reshape(-1, n)
    with torch.no_grad():
        out = forward(points) if dim == -1 else forward(points.T).T
    f = out.double().reshape(len(FIVE_POINTS), len(row), n)
    vjp = torch.zeros_like(rows)
    vjp[row, element] = (g[row] * five_point_change(f)).sum(-1) / step[row, element]
    return vjp.reshape(last.shape).movedim(-1, axis)


def finite_differences(
    forward: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    grad_output: torch.Tensor,
    kinks: list[Kink],
    structure: Structure,
    error: float = FD_ERROR,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The vector-Jacobian product by finite differences, with the step and with half of it:
    where the two agree the stretch is smooth and resolved. Where they do not (a kink the
    stencil straddles: where a sparsemax's support changes, unknown in advance), the step is
    halved again there, up to FD_REFINEMENTS times; agreeing to `error` (fd_error's). None
    where they are not taken."""
    h = steps_for(x, kinks)
    whole = vjp_by_differences(forward, x, grad_output, h, structure)
    if whole is None:
        return None
    halved = vjp_by_differences(forward, x, grad_output, h / 2, structure)
    for _ in range(FD_REFINEMENTS):
        unresolved = ~resolved(whole, halved, x, grad_output, error)
        if not unresolved.any():
            break
        h = torch.where(unresolved, h / 2, h)
        whole = torch.where(unresolved, halved, whole)
        again = vjp_by_differences(forward, x, grad_output, h / 2, structure, unresolved)
        halved = torch.where(unresolved, again, halved)
    return whole, halved


def fd_error(computed_in: torch.dtype) -> float:
    """What finite differences of a forward computing in this dtype are trusted to."""
    return max(FD_ERROR, FD_ROUNDING * torch.finfo(computed_in).eps / FD_STEP)


def resolved(
    whole: torch.Tensor,
    halved: torch.Tensor,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    error: float = FD_ERROR,
) -> torch.Tensor:
    """Where finite differences with a step and with half of it agree, to `error` of the
    scale: no kink within the stencil."""
    scale = whole.abs() + grad_output.abs() * x.abs().clamp(min=1.0)
    return ((whole - halved).abs() <= error * scale) | ~x.isfinite()


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
                return subject.call(x, *changed) * grad_output

            at = param.detach().reshape(-1)[j : j + 1].double()
            # A small step: a parameter moves every element, some of them near a kink.
            step = FD_PARAM_STEP * at.abs().clamp(min=1.0)
            # Each output's change, then their sum: an output the element does not move (a
            # per-channel slope's other channels, 1e37 of them) changes by exactly 0.
            grad.view(-1)[j] = stencil(moved, at, step).sum()
        grads.append(grad)
    return grads
