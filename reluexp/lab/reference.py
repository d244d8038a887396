"""Question (b), is it the same function as the built-in it imitates? Asked only with a
reference: the forwards in float64 (beyond float32 rounding, another function), and how far
the backwards differ (information: whether the Function's is right is question (a)'s)."""

import torch

from reluexp.lab.calls import forward_backward
from reluexp.lab.cases import at_kinks, large_values
from reluexp.lab.context import Check, Context
from reluexp.lab.findings import Finding, Group, Status

# A forward further from its reference than this many float32 units of the scale is another
# function; within it, in float64, a built-in's own approximation (a float32 constant in its
# float64 kernel, a threshold past which it is linear).
DIFFERS_UNITS = 8


def largest_difference(
    x: torch.Tensor, got: torch.Tensor, reference: torch.Tensor, counted: torch.Tensor
) -> tuple[float, str]:
    """The largest difference where counted, relative to the reference's value and the input's
    size, and where it is."""
    got, reference = got.detach().double(), reference.detach().double()
    counted = counted & got.isfinite() & reference.isfinite()
    difference = torch.where(counted, (got - reference).abs(), 0.0)
    scale = reference.abs().nan_to_num(nan=0.0, posinf=0.0) + x.abs().clamp(min=1.0)
    relative = difference / scale
    i = int(relative.argmax())
    where = f"at x={x[i].item()!r}: got {got[i].item()!r}, reference {reference[i].item()!r}"
    return relative[i].item(), where


def reference_checks(context: Context) -> list[Check]:
    """(b) Is the forward the reference's function? In float64 over [-10, 10], random and large
    inputs (a (64, 100) random input, for a Function not the same at every element), on its
    domain: beyond DIFFERS_UNITS of float32 rounding it differs (exit 1: the user said it
    imitates that built-in); within it, a difference is the size of a built-in's own
    approximations, said as information, as are differences of the two backwards (whether the
    Function's is right is (a)'s to say). At a kink or a non-finite input, only conventions."""
    group, name = Group.REFERENCE, "same function as the reference (float64)"
    subject, kinks, domain = context.subject, list(context.kinks), context.domain
    if subject.reference is None:
        return []

    def check() -> Finding:
        generator = torch.Generator().manual_seed(7)
        if context.structure.pointwise:
            x = torch.cat(
                [
                    torch.linspace(-10.0, 10.0, 2001, dtype=torch.float64),
                    context.sample((6400,), generator, spread=30.0),
                    large_values(torch.float64),
                ]
            )
        else:
            x = context.sample((64, 100), generator, spread=3.0)
        x.requires_grad_()
        ones = torch.ones_like(x)
        y, (grad, *_), _ = forward_backward(subject, subject.call, x, ones)
        r, (ref_grad, *_), _ = forward_backward(subject, subject.reference, x, ones)
        counted = context.structure.spread(~domain.contains(x.detach()) | at_kinks(x, kinks))
        counted = ~counted
        x, y, r = x.detach().flatten(), y.flatten(), r.flatten()
        grad, ref_grad, counted = grad.flatten(), ref_grad.flatten(), counted.flatten()
        largest, where = largest_difference(x, y, r, counted)
        float32_units = DIFFERS_UNITS * torch.finfo(torch.float32).eps
        if largest > float32_units:
            return Finding(
                group,
                name,
                Status.DIFFERS,
                f"forward {where}, {largest:.3g} of the scale apart: beyond float32 rounding, "
                "so not the function of the reference (a backward right for this forward is "
                "right for another function)",
            )
        notes = []
        if largest > 4 * torch.finfo(torch.float64).eps:
            notes.append(
                f"the forward differs by up to {largest:.2g} of the scale ({where}): within "
                "float32 rounding, the size of a built-in's own approximations (float32 "
                "constants in a float64 kernel, a threshold past which it is linear)"
            )
        if subject.surrogate is None:
            backward, where = largest_difference(x, grad, ref_grad, counted)
            if backward > float32_units:
                notes.append(
                    f"the backwards differ by up to {backward:.2g} of the scale ({where}): the "
                    "reference's gradient is not this forward's derivative there"
                )
            elif backward > 4 * torch.finfo(torch.float64).eps:
                notes.append(
                    f"the backwards differ by up to {backward:.2g} of the scale ({where}): the "
                    "size of a built-in's own approximations"
                )
        if notes:
            return Finding(group, name, Status.INFO, "in float64 " + "; ".join(notes))
        return Finding(group, name, Status.PASS)

    return [Check(group, name, check)]
