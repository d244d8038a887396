"""The inputs the checks use, as data: random samples kept off the kinks, upstream gradients,
the edge cases and the large values; and the kinks themselves, found on the forward."""

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from reluexp.lab.shape import WHOLE_LINE, Domain
from reluexp.lab.subject import Subject

# Where kinks are looked for, and how far random inputs keep from them.
KINK_RANGE = 10.0
KINK_MARGIN = 0.05
GRID_POINTS = 20001
# A slope change this many times the neighbouring ones is a kink (a smooth curve's changes
# by about as much from one place to the next): small kinks, as a Pade unit's |Q(x)| at 0 makes.
BEND_FACTOR = 4.0
# Units of the dtype a forward computes in (of its largest value on the grid) that a jump or a
# change of slope over the grid must pass to be a step or a kink, not rounding.
ROUNDING_SPIKE = 64


@dataclass(frozen=True)
class Kink:
    """A point where the forward's derivative jumps (or the forward itself: a step)."""

    x: float
    left: float  # the forward's derivative just left of it (its value, for a step)
    right: float  # and just right of it
    step: bool = False


def spikes(
    series: torch.Tensor, apart: int = 1, factor: float = 10.0, floor: float = 1e-9
) -> list[int]:
    """Positions where the series is `factor` times larger than `apart` places on either side,
    and above `floor` (rounding): a smooth series changes little from one grid step to the
    next."""
    size = series.abs().nan_to_num(nan=0.0)
    pad = torch.nn.functional.pad
    around = torch.maximum(pad(size[:-apart], (apart, 0)), pad(size[apart:], (0, apart)))
    return (size > (factor * around).clamp(min=floor)).nonzero().flatten().tolist()


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


def find_kinks(
    subject: Subject, domain: Domain, computed_in: torch.dtype = torch.float64
) -> list[Kink]:
    """The forward's kinks in [-KINK_RANGE, KINK_RANGE] (inside the domain), from its float64
    values on a fine grid: a step where its value jumps between neighbouring points, a kink
    where its slope does (over one or two intervals), each refined by bisection. A jump or a
    bend within ROUNDING_SPIKE units of the dtype it computes in is its rounding (a forward in
    float32 is a staircase of float32 values to a float64 grid)."""
    low, high = domain.inner(KINK_RANGE)
    grid = torch.linspace(low, high, GRID_POINTS, dtype=torch.float64)
    spacing = (grid[1] - grid[0]).item()
    y = subject.forward(grid).double()
    largest = y.abs().nan_to_num(0, 0, 0).max().item()
    rounding = ROUNDING_SPIKE * torch.finfo(computed_in).eps * largest

    def at(v: float) -> float:
        return subject.forward(torch.tensor([v], dtype=torch.float64)).double().item()

    def slope(v: float, delta: float = 1e-7) -> float:
        return (at(v + delta) - at(v - delta)) / (2 * delta)

    def limit(x: float, side: float) -> float:
        """The one-sided derivative at x (side < 0: from the left), extrapolated to x from two
        points beside it."""
        near, far = (slope(x + k * side, abs(side) / 10) for k in (1, 2))
        return 2 * near - far

    # A step inside interval i: y jumps there. A kink inside interval i: the slope changes
    # between intervals i - 1 and i + 1, which their difference two apart shows (one place, or
    # two beside each other).
    steps = spikes(y[1:] - y[:-1], floor=max(1e-9, rounding))
    slopes = (y[1:] - y[:-1]) / spacing
    bends = [
        i
        for i in spikes(
            slopes[2:] - slopes[:-2],
            apart=2,
            factor=BEND_FACTOR,
            floor=max(1e-9, rounding / spacing),
        )
        if all(abs(i - s) > 4 for s in steps)
    ]
    kinks: list[Kink] = []
    for i, step in [(i, True) for i in steps] + [(i, False) for i in bends]:
        low, high = grid[max(i - 1, 0)].item(), grid[min(i + 3, len(grid) - 1)].item()
        x = refine(at if step else slope, low, high)
        if any(abs(x - k.x) <= 2e-3 for k in kinks):
            continue
        side = 1e-6 * max(1.0, abs(x))
        if step:
            kinks.append(Kink(x, at(x - side), at(x + side), step=True))
        else:
            kinks.append(Kink(x, limit(x, -side), limit(x, side)))
    return sorted(kinks, key=lambda k: k.x)


def sample(
    shape: tuple[int, ...],
    generator: torch.Generator,
    kinks: list[Kink],
    spread: float = 3.0,
    domain: Domain = WHOLE_LINE,
) -> torch.Tensor:
    """float64 normal samples times `spread` (placed inside the domain), pushed at least
    KINK_MARGIN away from every kink (finite differences and dtype rounding never straddle
    one)."""
    x = domain.place(torch.randn(shape, generator=generator, dtype=torch.float64), spread)
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


# Points per binade [2^e, 2^(e+1)) of float32 and float64: its start and its middle.
BINADE_POINTS = (1.0, 1.5)


def exponent_range(dtype: torch.dtype) -> tuple[int, int]:
    """The exponents of the dtype's smallest subnormal and of its largest binade: 2^-149 and
    2^127 in float32, 2^-1074 and 2^1023 in float64."""
    info = torch.finfo(dtype)
    # The smallest subnormal is 2^(log2(smallest normal) + log2(eps)).
    return round(math.log2(info.smallest_normal) + math.log2(info.eps)), math.frexp(info.max)[1] - 1


def binades(dtype: torch.dtype) -> torch.Tensor:
    """float32 or float64 values at BINADE_POINTS of every binade, subnormals included, both
    signs, and 0 (1,107 float32 values, 8,393 float64)."""
    lowest, highest = exponent_range(dtype)
    # float64 exponents: torch before 2.4 computes ldexp of integer exponents in float32.
    exponents = torch.arange(lowest, highest + 1, dtype=torch.float64)
    ones = torch.ones(len(exponents), dtype=torch.float64)
    magnitudes = torch.cat([torch.ldexp(point * ones, exponents) for point in BINADE_POINTS])
    # As the dtype holds them (1.5 x the smallest subnormal does not exist; 1.5 x 2^1023 is inf).
    held = magnitudes.isfinite() & (magnitudes.to(dtype).double() == magnitudes)
    magnitudes = magnitudes[held]
    return torch.cat([torch.zeros(1, dtype=torch.float64), magnitudes, -magnitudes]).to(dtype)


def every_value(dtype: torch.dtype) -> torch.Tensor:
    """float16 and bfloat16: every finite value (each of the 65,536 bit patterns that is a
    number); float32 and float64: binades()."""
    if dtype.itemsize == 2:
        patterns = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
        return patterns[patterns.isfinite()]
    return binades(dtype)


def binade_rows(dtype: torch.dtype, width: int, generator: torch.Generator) -> torch.Tensor:
    """For a Function whose outputs depend on several inputs: rows of `width` values, each row
    one binade of the dtype, subnormals to the largest (random mantissas and signs: neighbours
    as tiny, or as huge, together as the dtype holds), then each row's odd positions in the
    reciprocal binade (tiny beside huge)."""
    info = torch.finfo(dtype)
    lowest, highest = exponent_range(dtype)
    exponents = torch.arange(lowest, highest + 1, dtype=torch.float64)[:, None]
    mantissas = 1 + torch.rand(len(exponents), width, generator=generator, dtype=torch.float64)
    signs = torch.randint(0, 2, mantissas.shape, generator=generator) * 2 - 1
    alike = signs * torch.ldexp(mantissas, exponents)
    mixed = alike.clone()
    reciprocal = (-exponents).clamp(lowest, highest)
    mixed[:, 1::2] = (signs * torch.ldexp(mantissas, reciprocal))[:, 1::2]
    # Rounding to the dtype may carry the largest binade's mantissas past its largest value.
    return torch.cat([alike, mixed]).clamp(-info.max, info.max).to(dtype)


def large_values(dtype: torch.dtype) -> torch.Tensor:
    """±10, ±100, ±1e4 and a quarter of the dtype's largest value, as far as it holds them."""
    info = torch.finfo(dtype)
    magnitudes = [m for m in (10.0, 100.0, 1e4) if m < info.max / 4] + [info.max / 4]
    return torch.tensor([s * m for m in magnitudes for s in (1, -1)], dtype=torch.float64).to(dtype)


@dataclass(frozen=True)
class Edge:
    """An edge case: its name, its input, where a difference is only a convention, and whether
    its upstream gradient is ones (so the gradients read as derivatives)."""

    name: str
    x: torch.Tensor
    convention: torch.Tensor | None = None
    ones: bool = False


def edge_cases(kinks: list[Kink], domain: Domain) -> list[Edge]:
    """Exact zeros, non-finite values, empty and 0-dim tensors, strides, no grad, devices."""
    generator = torch.Generator().manual_seed(2)

    def randn(*shape: int, **kwargs: object) -> torch.Tensor:
        return sample(shape, generator, kinks, domain=domain).float().to(**kwargs)

    non_finite = torch.tensor([math.inf, -math.inf, math.nan, 2.0])
    cases = [
        Edge(
            "edge 0, -0.0, ±1.5", torch.tensor([0.0, -0.0, 1.5, -1.5]).requires_grad_(), ones=True
        ),
        # The derivative at ±inf or NaN is a limit or undefined: differences are conventions.
        Edge("edge ±inf and NaN", non_finite.requires_grad_(), ~non_finite.isfinite(), ones=True),
        Edge("edge empty (0, 5)", torch.empty(0, 5).requires_grad_()),
        Edge("edge 0-dim", torch.tensor(-0.7).requires_grad_()),
        Edge("edge non-contiguous", randn(20, 30).t().requires_grad_()),
        Edge("edge input without grad", randn(8)),
    ]
    if torch.cuda.is_available():
        cases.append(Edge("edge device cuda", randn(64, 100, device="cuda").requires_grad_()))
    return cases
