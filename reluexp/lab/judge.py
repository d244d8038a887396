"""The verdict rules: a result against its float64 truth, element by element, within the
rounding its dtype allows; the worst finding, at an element that shows it."""

import math
from dataclasses import dataclass

import torch

from reluexp.lab.findings import Location, Status

LOW_PRECISION = (torch.float16, torch.bfloat16)
# Within this many units of the dtype beyond its own rounding error a result is right; within
# PRECISION_UNITS, right but less precise (rounding of a formula with cancellation, as 1 - y^2
# near saturation); beyond, not rounding at all.
ROUNDING_UNITS = 4
PRECISION_UNITS = 64
# Inputs of this magnitude or more are large: a non-finite result there fails at large inputs.
LARGE_INPUT = 10.0


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class Verdict:
    status: Status
    at: Location | None = None
    note: str = ""

    @property
    def detail(self) -> str:
        return (self.at.text() if self.at else "") + self.note


def worst(verdicts: list[Verdict]) -> Verdict:
    return min(verdicts, key=lambda v: v.status, default=Verdict(Status.PASS))


@dataclass
class Truth:
    """What a result is judged against: the float64 value, what it is called, and the results
    that count as exactly right (the same formula in the result's own dtype)."""

    value: torch.Tensor
    expected_as: str
    exact: list[torch.Tensor]
    # Rounding error the result may carry anyway: that of its own formula (or a built-in's) in
    # its dtype, against the float64 value.
    allowance: torch.Tensor | None = None
    # The truth's own relative error (finite differences: about 1e-9 of the scale).
    error: float = 0.0
    # Whose rounding the allowance is, as the precision note names it.
    rounding_of: str = ""


@dataclass(frozen=True)
class Judged:
    """A result to judge: what it is (forward, backward, gradient of <param>), the tensor it
    came from (its name and values, for the location), its values, and the dtype it was
    computed in (the least precise it went through)."""

    what: str
    label: str
    x: torch.Tensor
    actual: torch.Tensor
    computed_in: torch.dtype


@dataclass(frozen=True)
class Ground:
    """What is known of each element's input: the scale its rounding is relative to, the
    magnitude of the largest input it came from (its row's, for a softmax), where a finite
    difference is only a convention (a kink, a step's jump, a rounding crossing), and where the
    function has no value to be right about (a non-finite input, off its domain: there any
    result is a convention)."""

    scale: torch.Tensor
    size: torch.Tensor
    convention: torch.Tensor
    undefined: torch.Tensor | None = None


def judge(
    judged: Judged,
    truth: Truth,
    ground: Ground,
    only: frozenset[Status] | None = None,
    finite_deviations: bool = True,
) -> Verdict:
    """A result against its truth, element by element; `only` keeps those statuses (a
    built-in's rounding decides precision, never wrong), and without `finite_deviations` only a
    result that turns non-finite counts (a forward judged against its own float64 self).

    Right: equal to the truth or an exact result, or no further from the truth than its own
    rounding allowance plus ROUNDING_UNITS of the dtype it was computed in, relative to the
    inputs' scale (to the truth itself in half precision, whose built-ins compute in float32).
    Right but less precise: within PRECISION_UNITS of the inputs' scale, or, for a float64
    result, within PRECISION_UNITS of float32's (a float32 constant or intermediate in float64
    math: precision, not a wrong formula). Non-finite where the truth is finite and fits the
    dtype: fails at large inputs, is wrong at an ordinary input, and near the dtype's range is
    precision (`size`: the magnitude of the largest input each element came from); where all
    of those are subnormal, a finite deviation is precision at worst. At a convention
    element a finite difference is a convention, and a non-finite result where the truth is
    finite is judged as anywhere; where the function is undefined any result is a
    convention."""
    computed_in, actual = judged.computed_in, judged.actual
    scale, size = ground.scale, ground.size
    info = torch.finfo(computed_in)
    low_precision = computed_in in LOW_PRECISION
    eps = info.eps
    a, t = actual.detach().double(), truth.value.detach().double()
    # A true value past the dtype's largest is inf there, rightly (or NaN: a sum past it, as a
    # parameter's gradient over every float16 value, meets inf - inf).
    beyond_range = t.isfinite() & (t.abs() > info.max)
    same = (
        (a == t)
        | (a.isnan() & t.isnan())
        | (beyond_range & (a.isnan() | (a == t.sign() * math.inf)))
    )
    # The same formula in the result's dtype is exact, but never a non-finite result where the
    # truth is finite (0/0 where exp(-1/x) underflows at a tiny x: a run lost, however made).
    for exact in truth.exact:
        e = exact.detach().double()
        same |= ((a == e) | (a.isnan() & e.isnan())) & (a.isfinite() | ~t.isfinite())
    nonfinite = ~a.isfinite() & t.isfinite() & ~beyond_range
    err = (a - t).abs()
    allowance = torch.zeros_like(err) if truth.allowance is None else truth.allowance
    allowance = allowance.double().nan_to_num(nan=math.inf)
    magnitude = t.abs().nan_to_num(nan=0.0, posinf=0.0)
    lax = (eps + truth.error) * (magnitude + scale)
    strict = (eps + truth.error) * magnitude + info.smallest_normal
    precise = err <= allowance + ROUNDING_UNITS * (strict if low_precision else lax)
    # What a float32 constant or intermediate can explain in float64 math.
    explainable = max(eps, torch.finfo(torch.float32).eps) + truth.error
    close = err <= allowance + PRECISION_UNITS * explainable * (magnitude + scale)
    # Subnormal inputs carry fewer digits than the dtype's precision: a ratio of them (x / y of
    # a modulus of subnormal neighbours, as torch.hypot's own backward makes it) is as coarse.
    subnormal = (size > 0) & (size < info.smallest_normal)
    close |= subnormal
    # Near the range: the input, or the true result (x**7 of a Legendre polynomial at 23.6 in
    # float16, whose result fits where x**7 does not).
    large = size >= LARGE_INPUT
    near_range = (size > info.max / 1024) | (magnitude > info.max / 1024)
    # A convention chooses among finite values: a non-finite result where the truth is finite
    # is no choice of it.
    excused = ground.convention & ~nonfinite
    if ground.undefined is not None:
        excused |= ground.undefined
    off = ~same & ~excused
    if not finite_deviations:
        precise = close = torch.ones_like(same)
    less_precise = off & ~nonfinite & t.isfinite() & close & ~precise
    # Near the dtype's range an intermediate that overflows (x * 6 / 6) is a matter of
    # precision; at large ordinary inputs (exp past 88 in float32) a failure.
    findings = [
        (
            Status.WRONG,
            off & (nonfinite & ~large & ~near_range | ~nonfinite & t.isfinite() & ~close),
        ),
        (Status.LARGE, off & nonfinite & large & ~near_range),
        (Status.PRECISION, less_precise | off & nonfinite & near_range),
        # Where a convention is free to choose, a result as close as the truth's own precision
        # (a parameter's gradient summed over a kink) chose nothing: only a difference shows one.
        (Status.CONVENTION, ~same & excused & ~precise),
    ]
    for status, mask in findings:
        if only is not None and status not in only or not mask.any():
            continue
        precision_loss = status == Status.PRECISION and bool(less_precise.any())
        if precision_loss:  # where it shows most
            excess = ((err - allowance) / lax).nan_to_num(nan=-math.inf)
            flat = int(torch.where(less_precise, excess, -math.inf).argmax())
        else:
            flat = int(mask.flatten().nonzero()[0])
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), mask.shape))
        at = Location(
            judged.what,
            judged.label,
            index,
            judged.x[index].item(),
            dtype_name(judged.x.dtype),
            actual[index].item(),
            truth.value[index].item(),
            truth.expected_as,
        )
        note = ""
        if precision_loss:
            units = ((err - allowance) / strict)[index].item()
            beyond = (
                f" beyond what {truth.rounding_of} in {dtype_name(computed_in)} is off by"
                if truth.rounding_of
                else " off"
            )
            note = (
                f": {units:.0f} units of {dtype_name(computed_in)}{beyond} there "
                f"({int(less_precise.sum())} of {mask.numel()} elements less precise)"
            )
            if subnormal[index]:
                note += "; its inputs are subnormal, with fewer digits than the dtype carries"
            elif low_precision:
                note += "; the built-ins compute in float32: compute in float32, cast back"
            elif eps < torch.finfo(torch.float32).eps and not bool(
                (err <= allowance + PRECISION_UNITS * lax)[index]
            ):
                relative = (err / (magnitude + scale))[index].item()
                note += (
                    f"; {relative:.2g} of the scale: the size of float32's rounding, as a float32 "
                    f"constant or intermediate in {dtype_name(computed_in)} math gives"
                )
        elif status == Status.PRECISION:
            note = (
                f" (near {dtype_name(computed_in)}'s largest value an intermediate overflows, "
                "where the result itself would fit)"
            )
        return Verdict(status, at, note)
    return Verdict(Status.PASS)
