"""Coverage by construction: an elementwise Function at every finite float16 and bfloat16 value
and at every binade of float32 and float64 (both signs, subnormals to the largest), any other on
rows of one binade and rows of tiny beside huge, not only where random, edge and large inputs happen
to land. A NaN backward at tiny inputs is found here, and a modulus of tiny neighbours."""

import math

import torch

from reluexp.lab.calls import users_code
from reluexp.lab.cases import binade_rows, every_value
from reluexp.lab.checks import compared
from reluexp.lab.context import Check, Context
from reluexp.lab.findings import Finding, Group, Location, Status
from reluexp.lab.judge import LOW_PRECISION, dtype_name
from reluexp.lab.shape import PROBE_SHAPE, Dependence, Structure
from reluexp.lab.subject import Subject

# Past the large inputs the range checks try (up to 1e4), a result that overflows where the
# truth would fit is an intermediate's overflow (x**3 in a tanh-GELU's backward past 1e103 in
# float64): precision, said; the range checks decide `fails at large inputs`.
ORDINARY = 1e4


def overflow(finding: Finding, why: str) -> Finding:
    """A result that overflowed where its truth fits, as precision: `why`."""
    detail = f"{finding.detail} ({why}, where the result would fit)"
    return Finding(finding.group, finding.check, Status.PRECISION, detail, finding.at)


def coverage_checks(context: Context) -> list[Check]:
    """Forward and backward against the truth as everywhere else (the oracle, and a reference
    where there is one), one check per dtype: a non-finite result where the truth is finite is
    wrong at an ordinary input, tiny ones included, and fails at large ones up to ORDINARY;
    beyond it, and in half precision (whose range float32 intermediates avoid), precision. An
    elementwise Function at every value or binade (upstream ones: each element its own input;
    in rows of its width, for one that takes one only); any other on binade_rows, oriented as
    its outputs depend on its inputs (a row of one binade along the dim it reduces over), with
    a random upstream."""
    group = Group.EVERY_MAGNITUDE
    structure = context.structure

    def check(name: str, x: torch.Tensor) -> Finding:
        if structure.elementwise:
            ordinary = x.abs() <= ORDINARY
            parts = [x[ordinary], x[~ordinary]]
        else:
            ordinary = x.abs().amax(dim=1) <= ORDINARY
            parts = [oriented(x[ordinary], structure), oriented(x[~ordinary], structure)]
        found = []
        for part in parts:
            part = part.detach().requires_grad_()
            ones = torch.ones_like(part) if structure.elementwise else None
            # Kinks are looked for where the forward is the same at every element only: for
            # one that is not, an exact 0 is taken as one (as the edges take it).
            zeros = part.detach() == 0 if structure.kind == Dependence.ELEMENTWISE else None
            found.append(compared(group, name, context, part, ones, zeros))
        within, beyond = found
        if structure.pointwise and beyond.status == Status.PASS:
            beyond = overflow_jump(context.subject, name, x) or beyond
        if beyond.status == Status.LARGE:
            beyond = overflow(beyond, f"past |x| = {ORDINARY:g} an intermediate overflows")
        if within.status == Status.LARGE and x.dtype in LOW_PRECISION:
            within = overflow(within, "the built-ins compute in float32: compute in float32")
        return min(within, beyond, key=lambda finding: finding.status)

    checks = []
    generator = torch.Generator().manual_seed(11)
    for dtype in context.options.dtypes:
        if structure.elementwise:  # each element its own input: laid out as the probe takes it
            kind, values = "value" if dtype.itemsize == 2 else "binade", every_value(dtype)
        else:
            width = context.probe.shaped(PROBE_SHAPE)[1]
            kind, values = "binade", binade_rows(dtype, width, generator)
        name = f"every {kind} {dtype_name(dtype)}"
        checks.append(
            Check(
                group,
                name,
                lambda name=name, x=values: check(name, x),
                Status.UNSUPPORTED if dtype in LOW_PRECISION else Status.WRONG,
            )
        )
    return checks


def overflow_jump(subject: Subject, name: str, x: torch.Tensor) -> Finding | None:
    """Where the forward turns non-finite right past a finite value far below the dtype's
    largest, it overflowed: a continuous function does not leap from 355 to inf (asinh as
    log(x + sqrt(1 + x^2)) at 1.34e154 in float64, where no float64 truth can say so). At the
    first such input, by size, as fails at large inputs (the range checks' finding: past
    ORDINARY, coverage_checks makes it precision)."""
    with users_code(subject):
        y = subject.forward(x).double()
    far_below = math.sqrt(torch.finfo(x.dtype).max)
    for side in (x > 0, x < 0):
        where = side.nonzero().flatten()[x[side].double().abs().argsort()]
        values = y[where]
        jumps = ~values[1:].isfinite() & values[:-1].isfinite() & (values[:-1].abs() < far_below)
        if jumps.any():
            first = int(jumps.nonzero()[0])
            before, at = where[first], where[first + 1]
            location = Location(
                "forward",
                "x",
                (int(at),),
                x[at].item(),
                dtype_name(x.dtype),
                y[at].item(),
                y[before].item(),
                f"the forward's value at x={x[before].item():.6g} just below it",
            )
            return Finding(Group.EVERY_MAGNITUDE, name, Status.LARGE, location.text(), location)
    return None


def oriented(rows: torch.Tensor, structure: Structure) -> torch.Tensor:
    """Rows of one binade as the Function reduces: along dim 0 (a channel-wise quantizer's
    column), transposed."""
    if structure.kind == Dependence.ROWS and structure.dim is not None and structure.dim % 2 == 0:
        return rows.t().contiguous()
    return rows
