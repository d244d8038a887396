"""Question (b), is it the same function as the built-in it imitates? Asked only with a
reference: the forwards in float64 (beyond float32 rounding, another function), and how far
the backwards differ (information: whether the Function's is right is question (a)'s)."""

import math

import torch

from reluexp.lab.calls import forward_backward, the_reference, users_code
from reluexp.lab.cases import at_kinks, binades
from reluexp.lab.context import Check, Context, Learnt
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.subject import Subject

# A forward further from its reference than this many float32 units of the reference's own
# value (absolute below 1) is another function; within it, in float64, a built-in's own
# approximation (a float32 constant in its float64 kernel, a threshold past which it is linear).
DIFFERS_UNITS = 8
FLOAT32_UNITS = DIFFERS_UNITS * torch.finfo(torch.float32).eps


def differences(got: torch.Tensor, reference: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """|got - reference| in the reference's own units where counted (relative to |reference|,
    absolute below 1: never to the input's size); inf where one is finite and the other not,
    or both non-finite and not the same."""
    got, reference = got.detach().double(), reference.detach().double()
    same = (got == reference) | (got.isnan() & reference.isnan())
    finite = got.isfinite() & reference.isfinite()
    relative = (got - reference).abs() / reference.abs().clamp(min=1.0)
    apart = torch.where(finite & ~relative.isnan(), relative, math.inf)
    return torch.where(counted & ~same, apart, 0.0)


def where_text(x: torch.Tensor, got: torch.Tensor, reference: torch.Tensor, i: int) -> str:
    return f"at x={x[i].item()!r}: got {got[i].item()!r}, reference {reference[i].item()!r}"


def same_jump(subject: Subject, x: torch.Tensor) -> torch.Tensor:
    """Where the forward and its reference both jump within float32's rounding of x (a few
    units of x): one agreeing with the other on either side of x, so the jumps are that close,
    and which side x itself falls is rounding (a quantizer rounding in float32)."""
    step = 4 * torch.finfo(torch.float32).eps * x.abs().clamp(min=torch.finfo(torch.float32).tiny)
    agree = torch.ones_like(x, dtype=torch.bool)
    for side in (x - step, x + step):
        with torch.no_grad():
            with users_code(subject):
                got = subject.call(side, *subject.inputs(side))
            with the_reference(subject):
                reference = subject.reference(side)
        agree &= differences(got, reference, torch.ones_like(agree)) <= FLOAT32_UNITS
    return agree


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
                    binades(torch.float64),
                ]
            )
        else:
            x = context.sample((64, 100), generator, spread=3.0)
        x.requires_grad_()
        ones = torch.ones_like(x)
        y, (grad, *_), _ = forward_backward(subject, subject.call, x, ones)
        with the_reference(subject):
            r, (ref_grad, *_), _ = forward_backward(subject, subject.reference, x, ones)
        # Near the largest value of the dtype it computes in, an intermediate may overflow
        # where the result would fit (x / 0.2 in float32): precision, as judge() has it.
        computes_in = context.probe.float64_computed_in
        near_range = x.detach().abs() > torch.finfo(computes_in).max / 1024
        counted = context.structure.spread(
            ~domain.contains(x.detach()) | at_kinks(x, kinks) | near_range
        )
        counted = ~counted
        x, y, r = x.detach().flatten(), y.flatten(), r.flatten()
        grad, ref_grad, counted = grad.flatten(), ref_grad.flatten(), counted.flatten()
        apart = differences(y, r, counted)
        jumps = ""
        if context.structure.pointwise and bool((apart > FLOAT32_UNITS).any()):
            beyond = (apart > FLOAT32_UNITS).nonzero().flatten()
            at_jump = same_jump(subject, x[beyond])
            if bool(at_jump.any()):
                first = int(beyond[at_jump][0])
                jumps = (
                    f"the forward and the reference jump within float32 rounding of each other "
                    f"({int(at_jump.sum())} inputs, first {where_text(x, y, r, first)}): where "
                    "an input falls beside a jump is precision"
                )
                apart[beyond[at_jump]] = 0.0
        i = int(apart.argmax())
        largest, where = apart[i].item(), where_text(x, y, r, i)
        if largest > FLOAT32_UNITS:
            if math.isinf(largest):
                how = "one is finite there and the other not"
            else:
                how = f"{largest:.3g} of the reference's value apart: beyond float32 rounding"
            return Finding(
                group,
                name,
                Status.DIFFERS,
                f"forward {where}, {how}, so not the function of the reference (a backward "
                "right for this forward is right for another function)",
            )
        notes = []
        if largest > 4 * torch.finfo(torch.float64).eps:
            notes.append(
                f"the forward differs by up to {largest:.2g} of the reference's value ({where}): "
                "within float32 rounding, the size of a built-in's own approximations (float32 "
                "constants in a float64 kernel, a threshold past which it is linear)"
            )
        if subject.surrogate is None:
            backward_apart = differences(grad, ref_grad, counted)
            j = int(backward_apart.argmax())
            backward, where = backward_apart[j].item(), where_text(x, grad, ref_grad, j)
            if backward > FLOAT32_UNITS:
                notes.append(
                    f"the backwards differ by up to {backward:.2g} of the reference's ({where}) "
                    "where the forwards agree: one of them is not the derivative there (the "
                    "gradient checks judge this Function's against its forward)"
                )
            elif backward > 4 * torch.finfo(torch.float64).eps:
                notes.append(
                    f"the backwards differ by up to {backward:.2g} of the reference's ({where}): "
                    "the size of a built-in's own approximations"
                )
        if jumps:
            return Finding(
                group, name, Status.PRECISION, "in float64 " + "; ".join([jumps, *notes])
            )
        if notes:
            return Finding(group, name, Status.INFO, "in float64 " + "; ".join(notes))
        return Finding(group, name, Status.PASS)

    checks = [Check(group, name, check)]
    if subject.reference_at:
        said = (
            f"{subject.reference_path} has no parameters: compared with {subject.name} at "
            f"{subject.reference_at}, its parameters' values as given (their own gradients are "
            "checked against its forward)"
        )
        compared_at = Finding(group, "compared at the parameters' values", Status.INFO, said)
        checks.insert(
            0,
            Check(group, compared_at.check, lambda: Learnt([compared_at], notes=[f"info: {said}"])),
        )
    return checks
