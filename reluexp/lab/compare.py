"""One input through the Function, judged: (a) its backward against the oracle, its forward
against its own float64 self; (b) with a reference, its precision against the built-in's own
rounding, and what differs from the built-in at a kink. The checks are made of these."""

import torch

from reluexp.lab.calls import (
    ReferenceFailed,
    UserError,
    computed_in,
    forward_backward,
    the_reference,
    users_code,
)
from reluexp.lab.cases import Kink, at_kinks
from reluexp.lab.findings import Status
from reluexp.lab.judge import Ground, Judged, Truth, Verdict, judge, worst
from reluexp.lab.oracle import Oracle
from reluexp.lab.subject import Subject

# How many units of x's dtype, beside the largest input reaching it, a forward's value may be
# and still have been moved onto a piece that is 0 by rounding (a row's sum rounds in each term).
FLIP_UNITS = 1024
PRECISION_ONLY = frozenset({Status.PRECISION})
CONVENTION_ONLY = frozenset({Status.CONVENTION})


def compare(
    subject: Subject,
    oracle: Oracle,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    kinks: list[Kink],
    convention: torch.Tensor | None = None,
) -> Verdict:
    """The Function's forward and backward on x: (a) the backward against the oracle (the
    float64 truth at the rounded x, and the same formula in x's dtype for its rounding), the
    forward against its own float64 self for turning non-finite; (b) with a reference, the
    precision of both against the built-in's own rounding, and conventions at kinks. A
    non-finite input, and a step's jump, are conventions: the derivative there is a limit, or
    undefined."""
    given = torch.zeros_like(x, dtype=torch.bool) if convention is None else convention
    # Where the function is undefined: at a non-finite input and off the domain, and through a
    # non-elementwise Function wherever such an input reaches.
    undefined = oracle.structure.spread(
        ~x.detach().isfinite() | ~oracle.domain.contains(x.detach())
    )
    given = oracle.structure.spread(given) | undefined
    forward_convention = given | at_kinks(x, kinks)
    # A surrogate is defined at the step, except at the jump itself (which side a backward
    # takes there is a convention, as at a kink).
    backward_convention = (
        given | at_kinks(x, [k for k in kinks if k.step])
        if subject.surrogate is not None
        else forward_convention
    )
    y, grads, raw = forward_backward(subject, subject.call, x, grad_output)
    dtypes = [x.dtype, y.dtype] + ([raw.dtype] if isinstance(raw, torch.Tensor) else [])
    dtype = computed_in(*dtypes)
    x64, g64 = x.detach().double(), grad_output.double()
    params64 = [p.double() for p in subject.inputs(x64)]
    with users_code(subject):
        y64 = subject.forward(x64).double()
        truth, replaced, uncertainty = oracle.true_gradients(x64, g64, params64)
    # Where rounding in x's dtype put the forward on the other side of the edge of a piece that
    # is exactly 0 (a sparsemax's support, a ReLU's kink moved by rounding), its backward takes
    # that piece's: a convention, through a row for a row's function. Rounding moves an input
    # by a unit of its own size, so only a true value that small beside the inputs was moved
    # there: a modulus of tiny neighbours whose square underflows is 0 by underflow, as a value
    # too small for the dtype is, not by changing pieces.
    rounded = y.detach().double()
    tiny, eps = (
        (torch.finfo(y.dtype).tiny, torch.finfo(x.dtype).eps) if y.is_floating_point() else (0, 0)
    )
    moved = y64.abs() <= FLIP_UNITS * eps * oracle.structure.largest(x64.abs())
    flipped = ((rounded == 0) & (y64.abs() >= tiny) & moved) | ((rounded != 0) & (y64 == 0))
    backward_convention = backward_convention | oracle.structure.spread(flipped)
    own = own_grads(subject, oracle, x, grad_output, truth)
    if grads[0] is not None and truth[0] is not None and subject.surrogate is None:
        truth[0], at_kink = nearest_subgradient(grads[0], truth[0], x, g64, kinks)
        replaced |= at_kink
    if own[0] is not None and truth[0] is not None:
        # Where the truth is not the oracle's own formula, that formula's rounding is no guide.
        own[0] = torch.where(replaced, truth[0].to(own[0].dtype), own[0])
    scale = x64.abs().clamp(min=1.0)
    grad_scale = g64.abs() * scale
    size = oracle.structure.largest(x64.abs())
    forward_ground = Ground(scale, size, forward_convention, undefined)
    backward_ground = Ground(grad_scale, size, backward_convention, undefined)
    verdicts = [
        judge(
            Judged("forward", "x", x, y, dtype),
            Truth(y64, "float64 forward", []),
            forward_ground,
            finite_deviations=False,
        )
    ]
    if grads[0] is not None and truth[0] is not None:
        exact = [own[0]] if own[0] is not None else []
        allowance = uncertainty
        if own[0] is not None:
            # A formula that is not finite where the truth is (its square underflowed, then
            # 0/0) excuses nothing there.
            own_rounding = (own[0].double() - truth[0]).abs()
            allowance = torch.maximum(allowance, own_rounding.nan_to_num(0.0, 0.0, 0.0))
        backward_truth = Truth(
            truth[0], oracle.expected_as, exact, allowance, oracle.error, oracle.formula
        )
        verdicts.append(
            judge(
                Judged("backward", "x", x, grads[0], dtype),
                backward_truth,
                backward_ground,
            )
        )
    # A parameter's gradient sums over every element: its rounding scales with the terms' sum,
    # its input is as large as the largest, and an input on a kink makes it a convention.
    terms = (grad_scale * x64.abs()).sum()
    on_kink, off_domain = bool(forward_convention.any()), bool(undefined.any())
    for (name, param), grad, true in zip(subject.params.items(), grads[1:], truth[1:]):
        if name in subject.constants or true is None:
            continue
        if grad is None:
            raise UserError(f"backward returned None for the parameter {name}")
        peak = size.nan_to_num(nan=0.0).max().item() if size.numel() else 0.0
        largest = torch.full_like(grad, peak, dtype=torch.float64)
        kinked = torch.full_like(grad, on_kink, dtype=torch.bool)
        unknown = torch.full_like(grad, off_domain, dtype=torch.bool)
        verdicts.append(
            judge(
                Judged(f"gradient of {name}", name, param.detach().to(x.dtype), grad, dtype),
                Truth(true, oracle.expected_as, [], error=oracle.error),
                Ground(terms, largest, kinked, unknown),
            )
        )
    if subject.reference is not None:
        verdicts += against_reference(
            subject,
            oracle,
            x,
            grad_output,
            Judged("forward", "x", x, y, dtype),
            grads,
            y64,
            truth,
            (forward_ground, backward_ground),
        )
    return worst(verdicts)


def nearest_subgradient(
    grad: torch.Tensor,
    truth: torch.Tensor,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    kinks: list[Kink],
) -> tuple[torch.Tensor, torch.Tensor]:
    """At a kink any subgradient is right (between the forward's one-sided derivatives, times
    the upstream gradient): the truth there is the one nearest the result. And where x sits
    on a kink."""
    x64, got = x.detach().double(), grad.detach().double()
    on_any = torch.zeros_like(x64, dtype=torch.bool)
    for kink in kinks:
        if kink.step:
            continue
        on = x64 == torch.tensor(kink.x, dtype=x.dtype).double()
        ends = grad_output * kink.left, grad_output * kink.right
        # The one-sided derivatives are estimates, to about 1e-7.
        slack = 1e-6 * grad_output.abs() * max(1.0, abs(kink.left), abs(kink.right))
        low, high = torch.minimum(*ends) - slack, torch.maximum(*ends) + slack
        truth = torch.where(on, torch.minimum(torch.maximum(got, low), high), truth)
        on_any |= on
    return truth, on_any


def own_grads(
    subject: Subject,
    oracle: Oracle,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    truth: list[torch.Tensor | None],
) -> list[torch.Tensor | None]:
    """The oracle's formula in x's own dtype: the rounding a result there may carry. None
    where it has none: the user's forward that it differentiates may not run in that dtype
    (half precision on a CPU), and then no rounding in it is known."""
    if x.dtype == torch.float64:
        return list(truth)
    try:
        with users_code(subject):
            return oracle.grads(x, grad_output, subject.inputs(x))
    except UserError:
        return [None] * len(truth)


def against_reference(
    subject: Subject,
    oracle: Oracle,
    x: torch.Tensor,
    grad_output: torch.Tensor,
    forward: Judged,
    grads: list[torch.Tensor | None],
    y64: torch.Tensor,
    truth: list[torch.Tensor | None],
    grounds: tuple[Ground, Ground],
) -> list[Verdict]:
    """(b): precision against the built-in's own rounding in x's dtype, and what differs from
    it at a kink or a non-finite input (a convention). A declared surrogate's backward is not
    the reference's business; an input the reference refuses is not compared, and said."""
    forward_ground, backward_ground = grounds
    try:
        with the_reference(subject):
            ref_y, ref_grads, _ = forward_backward(subject, subject.reference, x, grad_output)
            ref64_y, ref64_grads, _ = forward_backward(
                subject,
                subject.reference,
                x.detach().double().requires_grad_(x.requires_grad),
                grad_output.double(),
            )
    except ReferenceFailed as error:
        return [Verdict(Status.INFO, note=f"not compared with the reference: {error}")]
    rounding = (ref_y.double() - ref64_y.double()).abs()
    verdicts = [
        judge(
            forward,
            Truth(y64, "float64 forward", [ref_y], rounding, rounding_of="the reference"),
            forward_ground,
            PRECISION_ONLY,
        ),
        judge(forward, Truth(ref_y, "reference", []), forward_ground, CONVENTION_ONLY),
    ]
    if subject.surrogate is not None or grads[0] is None or truth[0] is None:
        return verdicts
    backward = Judged("backward", "x", x, grads[0], forward.computed_in)
    rounding = (ref_grads[0].double() - ref64_grads[0].double()).abs()
    return verdicts + [
        judge(
            backward,
            Truth(
                truth[0], oracle.expected_as, [ref_grads[0]], rounding, rounding_of="the reference"
            ),
            backward_ground,
            PRECISION_ONLY,
        ),
        judge(backward, Truth(ref_grads[0], "reference", []), backward_ground, CONVENTION_ONLY),
    ]
