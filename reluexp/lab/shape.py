"""What the lab learns of a Function before it checks it: how its outputs depend on its inputs
(each on its own input, the same way at every position; each on its own input, by position;
each row along a dim on the whole row; or each on all), and the domain where its forward is
finite. The checks judge a Function as what it is: an elementwise one element by element, any
other by its whole vector-Jacobian product, on its domain."""

import math
from dataclasses import dataclass
from enum import StrEnum

import torch

from reluexp.lab.calls import UserError, users_code
from reluexp.lab.subject import Subject

# The probe's input: rows and columns (two-dimensional, as a hidden layer's activations).
PROBE_SHAPE = (4, 6)
# Where the domain is looked for, and how finely.
DOMAIN_RANGE = 10.0
DOMAIN_POINTS = 20001
# Samples keep this far inside a domain's bound (finite differences straddle no bound).
DOMAIN_MARGIN = 0.05


class Dependence(StrEnum):
    """How an output depends on the inputs (Structure says each in full)."""

    POINTWISE = "pointwise"
    ELEMENTWISE = "elementwise"
    ROWS = "rows"
    GENERAL = "general"


@dataclass(frozen=True)
class Structure:
    """How the outputs depend on the inputs: `pointwise` (each on its own input, the same
    function at every position: what 1-D grids of inputs can probe), `elementwise` (each on
    its own input, but the function depends on the position), `rows` (each output on the
    whole row of its input along `dim`: a softmax, an entmax), `general` (on all of them)."""

    kind: Dependence = Dependence.POINTWISE
    dim: int | None = None

    @property
    def pointwise(self) -> bool:
        return self.kind == Dependence.POINTWISE

    @property
    def elementwise(self) -> bool:
        return self.kind in (Dependence.POINTWISE, Dependence.ELEMENTWISE)

    def describe(self) -> str:
        if self.kind == Dependence.ELEMENTWISE:
            return (
                "elementwise, but not the same function at every position (a unit's rule "
                "depends on where it is): judged at the experiment's shape, no 1-D grids"
            )
        if self.kind == Dependence.ROWS:
            return (
                f"not elementwise: each row of dim {self.dim} depends on the whole row; judged "
                "by its vector-Jacobian product with random upstream gradients"
            )
        return (
            "not elementwise: an output depends on inputs beyond its row; judged by its "
            "vector-Jacobian product with random upstream gradients"
        )

    def spread(self, mask: torch.Tensor) -> torch.Tensor:
        """Where an input marked in `mask` reaches: its own output elementwise, its row along
        dim, everything otherwise (a NaN in a softmax's row makes the whole row NaN)."""
        if self.elementwise or mask.dim() == 0:
            return mask
        if self.kind == Dependence.ROWS:
            return mask.any(dim=self.dim % mask.dim(), keepdim=True).expand_as(mask)
        return mask.any().expand_as(mask)

    def largest(self, sizes: torch.Tensor) -> torch.Tensor:
        """The largest of `sizes` reaching each output: its own elementwise, its row's along
        dim, all of them otherwise (a huge neighbour makes a modulus's output large)."""
        if self.elementwise or sizes.dim() == 0 or sizes.numel() == 0:
            return sizes
        if self.kind == Dependence.ROWS:
            return sizes.amax(dim=self.dim % sizes.dim(), keepdim=True).expand_as(sizes)
        return sizes.max().expand_as(sizes)


# Results of one function at other positions agree to this (relative), or to SAME_UNITS of the
# dtype it computes in (a float32 kernel inside a float64 call): vectorized kernels round a
# tensor's body and its tail differently.
SAME_FUNCTION = 1e-12
SAME_UNITS = 64


def differ(a: torch.Tensor, b: torch.Tensor, tolerance: float = 0.0) -> torch.Tensor:
    """Where two results differ by more than `tolerance` of their size, NaN equal to NaN (a
    forward that is NaN off its domain)."""
    unequal = (a != b) & ~(a.isnan() & b.isnan())
    close = a.isfinite() & b.isfinite() & ((a - b).abs() <= tolerance * (a.abs() + b.abs() + 1))
    return unequal & ~close


def moved_by(subject: Subject, x: torch.Tensor, index: tuple[int, ...]) -> torch.Tensor:
    """The outputs that move when one input element does: nudged, and made the largest of
    all (a piecewise-constant Function of a row, an argmax, moves its others only then)."""
    y = subject.forward(x)
    moved = torch.zeros_like(y, dtype=torch.bool)
    for value in (x[index] + 1e-3 * max(1.0, abs(x[index].item())), 2 * x.abs().max() + 1):
        changed = x.clone()
        changed[index] = value
        moved |= differ(subject.forward(changed), y)
    return moved


def structure_of(
    subject: Subject, samples: list[torch.Tensor], computed_in: torch.dtype = torch.float64
) -> Structure:
    """How the Function's outputs depend on its inputs, probed on (4, 6) float64 samples: one
    input element moved at a time, which other outputs move (its row's only, along dim -1 or
    0, or any); then, for an elementwise one, whether it is the same function at every
    position (its rows and columns shuffled, and its input flattened, its output shuffles and
    flattens alike, within the rounding of the dtype it computes in)."""
    same = max(SAME_FUNCTION, SAME_UNITS * torch.finfo(computed_in).eps)
    coupled, same_row, same_column = False, True, True
    for x in samples:
        for index in [(0, 0), (1, 3), (2, 5), (3, 2)]:
            moved = moved_by(subject, x, index)
            moved[index] = False
            others = moved.nonzero().tolist()
            if not others:
                continue
            coupled = True
            same_row &= all(i == index[0] for i, _ in others)
            same_column &= all(j == index[1] for _, j in others)
    if coupled:
        if same_row:
            return Structure(Dependence.ROWS, -1)
        if same_column:
            return Structure(Dependence.ROWS, 0)
        return Structure(Dependence.GENERAL)
    generator = torch.Generator().manual_seed(0)
    for x in samples:
        y = subject.forward(x)
        row_order = torch.randperm(x.shape[0], generator=generator)
        column_order = torch.randperm(x.shape[1], generator=generator)
        shuffled = subject.forward(x[row_order][:, column_order])
        if differ(shuffled, y[row_order][:, column_order], same).any():
            return Structure(Dependence.ELEMENTWISE)
        try:  # a forward that indexes rows and columns cannot take a flat input
            with users_code(subject):
                flattened = subject.forward(x.flatten())
        except UserError:
            return Structure(Dependence.ELEMENTWISE)
        if flattened.shape != y.flatten().shape:
            return Structure(Dependence.ELEMENTWISE)
        if differ(flattened, y.flatten(), same).any():
            return Structure(Dependence.ELEMENTWISE)
    return Structure(Dependence.POINTWISE)


@dataclass(frozen=True)
class Domain:
    """Where the Function is checked: an interval of the real line (its bounds included or
    not), found where its forward is finite or stated by the user (activation.domain)."""

    low: float = -math.inf
    high: float = math.inf
    low_closed: bool = False
    high_closed: bool = False
    stated: bool = False

    @property
    def whole(self) -> bool:
        return self.low == -math.inf and self.high == math.inf

    def contains(self, x: torch.Tensor) -> torch.Tensor:
        x = x.double()  # a bound compared in bfloat16 rounds (-0.999 to -1.0)
        above = x >= self.low if self.low_closed else x > self.low
        below = x <= self.high if self.high_closed else x < self.high
        return above & below

    def place(self, z: torch.Tensor, spread: float = 3.0) -> torch.Tensor:
        """Standard normal draws as inputs inside the domain, DOMAIN_MARGIN inside its bounds:
        the draws times `spread` on the whole line; from a bound, its distance outward; between
        two, a logistic squash into them."""
        if self.whole:
            return z * spread
        low, high = self.low + DOMAIN_MARGIN, self.high - DOMAIN_MARGIN
        if self.high == math.inf:
            return low + (z * spread).abs()
        if self.low == -math.inf:
            return high - (z * spread).abs()
        return low + (high - low) * torch.sigmoid(z)

    def inner(self, reach: float) -> tuple[float, float]:
        """[-reach, reach] kept DOMAIN_MARGIN inside the domain's bounds: where grids go."""
        return max(-reach, self.low + DOMAIN_MARGIN), min(reach, self.high - DOMAIN_MARGIN)

    def describe(self) -> str:
        def bound(value: float) -> str:
            return f"{value:g}"

        low = (
            f"{bound(self.low)} {'<=' if self.low_closed else '<'} " if self.low > -math.inf else ""
        )
        high = (
            f" {'<=' if self.high_closed else '<'} {bound(self.high)}"
            if self.high < math.inf
            else ""
        )
        if not low:
            return f"x{high}"
        if not high:
            return f"x {'>=' if self.low_closed else '>'} {bound(self.low)}"
        return f"{low}x{high}"


WHOLE_LINE = Domain()


def stated_domain(bounds: tuple[float, float]) -> Domain:
    """activation.domain=[low, high]: both bounds included where finite."""
    low, high = bounds
    return Domain(low, high, math.isfinite(low), math.isfinite(high), stated=True)


def domain_of(subject: Subject) -> Domain:
    """Where the forward is finite on [-DOMAIN_RANGE, DOMAIN_RANGE]: the whole line when it is
    finite throughout; else the longest stretch where it is, its bounds bisected to the
    point where it stops being (snapped to a round number within 1e-9) and included when the
    forward is finite there. None finite at all is the user's error."""
    grid = torch.linspace(-DOMAIN_RANGE, DOMAIN_RANGE, DOMAIN_POINTS, dtype=torch.float64)
    finite = subject.forward(grid).isfinite()
    if bool(finite.all()):
        return Domain()
    if not bool(finite.any()):
        raise UserError(f"forward is not finite anywhere on [-{DOMAIN_RANGE:g}, {DOMAIN_RANGE:g}]")
    # The longest run of finite points.
    best, start = (0, 0), None
    for i, ok in enumerate([*finite.tolist(), False]):
        if ok and start is None:
            start = i
        elif not ok and start is not None:
            if i - start > best[1] - best[0]:
                best = (start, i)
            start = None
    first, end = best

    def finite_at(v: float) -> bool:
        return bool(subject.forward(torch.tensor([v], dtype=torch.float64)).isfinite().all())

    def boundary(inside: float, outside: float) -> float:
        for _ in range(80):
            middle = (inside + outside) / 2
            if middle in (inside, outside):
                break
            inside, outside = (middle, outside) if finite_at(middle) else (inside, middle)
        rounded = round(outside, 9) + 0.0  # -0.0 as 0
        return rounded if abs(rounded - outside) < 1e-9 * max(1.0, abs(outside)) else outside

    low, high, low_closed, high_closed = -math.inf, math.inf, False, False
    if first > 0:
        low = boundary(grid[first].item(), grid[first - 1].item())
        low_closed = finite_at(low)
    if end < DOMAIN_POINTS:
        high = boundary(grid[end - 1].item(), grid[end].item())
        high_closed = finite_at(high)
    return Domain(low, high, low_closed, high_closed)
