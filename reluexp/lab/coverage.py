"""Coverage by construction: a pointwise Function at every finite float16 and bfloat16 value and
at every binade of float32 and float64 (both signs, subnormals to the largest), not only where
random, edge and large inputs happen to land. A NaN backward at tiny inputs is found here."""

import torch

from reluexp.lab.cases import every_value
from reluexp.lab.checks import compared
from reluexp.lab.context import Check, Context
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.judge import LOW_PRECISION, dtype_name

# Past the large inputs the range checks try (up to 1e4), a result that overflows where the
# truth would fit is an intermediate's overflow (x**3 in a tanh-GELU's backward past 1e103 in
# float64): precision, said; the range checks decide `fails at large inputs`.
ORDINARY = 1e4


def overflow(finding: Finding, why: str) -> Finding:
    """A result that overflowed where its truth fits, as precision: `why`."""
    detail = f"{finding.detail} ({why}, where the result would fit)"
    return Finding(finding.group, finding.check, Status.PRECISION, detail, finding.at)


def coverage_checks(context: Context) -> list[Check]:
    """Forward and backward (upstream ones) against the truth as everywhere else (the oracle,
    and a reference where there is one), one check per dtype: a non-finite result where the
    truth is finite is wrong at an ordinary input, tiny ones included, and fails at large
    ones up to ORDINARY; beyond it, and in half precision (whose range float32 intermediates
    avoid), precision. For a pointwise Function only (each element its own input)."""
    if not context.structure.pointwise:
        return []
    group = Group.EVERY_MAGNITUDE

    def check(name: str, x: torch.Tensor) -> Finding:
        ordinary = x.abs() <= ORDINARY
        found = []
        for part in (x[ordinary], x[~ordinary]):
            part = part.detach().requires_grad_()
            found.append(compared(group, name, context, part, torch.ones_like(part)))
        within, beyond = found
        if beyond.status == Status.LARGE:
            beyond = overflow(beyond, f"past |x| = {ORDINARY:g} an intermediate overflows")
        if within.status == Status.LARGE and x.dtype in LOW_PRECISION:
            within = overflow(within, "the built-ins compute in float32: compute in float32")
        return min(within, beyond, key=lambda finding: finding.status)

    checks = []
    for dtype in context.options.dtypes:
        name = f"every {'value' if dtype.itemsize == 2 else 'binade'} {dtype_name(dtype)}"
        values = every_value(dtype)
        checks.append(
            Check(
                group,
                name,
                lambda name=name, x=values: check(name, x),
                Status.UNSUPPORTED if dtype in LOW_PRECISION else Status.WRONG,
            )
        )
    return checks
