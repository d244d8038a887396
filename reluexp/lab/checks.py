"""The checks of question (a), is the backward the derivative of this forward (or of the
declared surrogate)? What the Function returns, gradcheck and every element, double backward,
every dtype, the kinks, the edge cases and large inputs; this alone decides `wrong`. Each
function makes a stage's checks from the context; the stage runner runs them."""

import math
from dataclasses import replace

import torch

from reluexp.functions.targets import changes_its_input
from reluexp.lab.calls import UserError, computed_in, forward_backward, users_code
from reluexp.lab.cases import Edge, Kink, edge_cases, large_values, upstream
from reluexp.lab.compare import compare
from reluexp.lab.context import Check, Context, Learned, Learnt, Probe
from reluexp.lab.differences import FD_MAX_ELEMENTS, FD_STEP
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.judge import LOW_PRECISION, dtype_name
from reluexp.lab.oracle import OracleKind
from reluexp.lab.shape import Dependence
from reluexp.lab.subject import Subject


def compared(
    group: Group,
    name: str,
    context: Context,
    x: torch.Tensor,
    grad_output: torch.Tensor | None = None,
    convention: torch.Tensor | None = None,
    kinks: list[Kink] | None = None,
) -> Finding:
    """compare() as a finding: a random upstream gradient unless one is given. A Function that
    is not elementwise is judged on inputs of at most two dimensions: how its outputs depend on
    its inputs was learnt on 2-D ones (a row of dim -1 of a 3-D input is another question)."""
    if not context.structure.elementwise and x.dim() > 2:
        detail = (
            f"not judged: a {x.dim()}-D input; how this Function's outputs depend on its inputs "
            "was learnt on 2-D ones"
        )
        return Finding(group, name, Status.UNSUPPORTED, detail)
    g = upstream(x) if grad_output is None else grad_output
    lifted = context.probe.lifted
    x = lifted(x.detach()).requires_grad_(x.requires_grad)
    g, convention = lifted(g), None if convention is None else lifted(convention)
    kinks = list(context.kinks) if kinks is None else kinks
    verdict = compare(context.subject, context.oracle, x, g, kinks, convention)
    return Finding(group, name, verdict.status, verdict.detail, verdict.at)


def rounded_to_float32(y: torch.Tensor) -> bool:
    """Whether float64 results are all float32 values (and not all float16 ones, as a step's 0
    and 1 are): a forward that computes in float32 and casts back (a quantizer's scale in
    float32)."""
    finite = y.detach()[y.detach().isfinite()]
    in_float32 = bool((finite.float().double() == finite).all())
    in_float16 = bool((finite.half().double() == finite).all())
    return finite.numel() > 0 and in_float32 and not in_float16


def width_taken(context: Context) -> int | None:
    """The one last dimension the forward takes, where it refuses the lab's (4, 5) input and
    takes (4, n) for n one of its parameters' sizes (a per-channel quantizer's 100 learnt
    scales); None where it takes (4, 5) or none of those."""
    subject = context.subject
    sizes = sorted({n for p in subject.params.values() for n in p.shape if n > 1} - {5})
    for width in (5, *sizes):
        try:
            with users_code(subject):
                subject.forward(context.sample((4, width), torch.Generator().manual_seed(6)))
        except UserError:
            continue
        return None if width == 5 else width
    return None


def returns_checks(context: Context) -> list[Check]:
    """What every other check relies on: the forward leaves its input alone (an in-place forward
    corrupts training) and returns a floating tensor of the input's shape; the backward returns
    a gradient for the input; a declared surrogate returns one value per input. What autograd
    does with another dtype is said (info), as is a forward that is random, and one that takes
    inputs of one width only (the checks' inputs are laid out in rows of it)."""
    subject = context.subject
    group, name = Group.RETURNS, "returns"

    def check() -> Learnt:
        with users_code(subject):
            in_place = changes_its_input(lambda x: subject.call(x, *subject.inputs(x)))
        if in_place:
            raise UserError("forward changed its input in place (x.op_() or x[...] = ...)")
        notes, constants = [], frozenset()
        # What changes how the Function is checked, said in the terminal too.
        said: list[str] = []
        width = width_taken(context)
        probe = Probe(width=width)
        probing = replace(context, probe=probe)
        if width is not None:
            said.append(
                f"takes inputs whose last dimension is {width} only (the size of its parameters): "
                f"checked on those, other inputs laid out in rows of {width}"
            )
        ranks, refused = ranks_taken(probing)
        if refused:
            said.append(refused)
        for dtype in (torch.float32, torch.float64):
            x = probing.sample((4, 5), torch.Generator().manual_seed(6)).to(dtype)
            x.requires_grad_()
            y, grads, raw = forward_backward(subject, subject.call, x, upstream(x))
            # An input the backward gives None is one it declares needs no gradient.
            constants = frozenset(n for n, g in zip(subject.params, grads[1:]) if g is None)
            if not y.is_floating_point() or y.shape != x.shape:
                raise UserError(
                    f"forward returned {dtype_name(y.dtype)} {tuple(y.shape)} for a "
                    f"{dtype_name(dtype)} {tuple(x.shape)} input: an activation returns floating "
                    "values of its input's shape"
                )
            returned = [y.dtype] + ([raw.dtype] if isinstance(raw, torch.Tensor) else [])
            if y.dtype != dtype:
                notes.append(
                    f"forward returns {dtype_name(y.dtype)} for a {dtype_name(dtype)} input "
                    "(training casts it back; judged at the precision it computes in)"
                )
            if isinstance(raw, torch.Tensor) and raw.dtype != dtype:
                notes.append(
                    f"{subject.name}.backward returns {dtype_name(raw.dtype)} for a "
                    f"{dtype_name(dtype)} input: autograd casts it to {dtype_name(dtype)}"
                )
            if dtype == torch.float64:
                with users_code(subject):
                    again = subject.forward(x)
                random = not torch.equal(again.nan_to_num(), y.nan_to_num())
                narrowed = [torch.float32] if rounded_to_float32(y) else []
                probe = Probe(computed_in(dtype, *returned, *narrowed), random, ranks, width)
                if random:
                    said.append(
                        "its forward is random (two calls on one input differ): checked with "
                        "torch's generator seeded alike at every call, the same draws for the "
                        "forward, its backward and its finite differences"
                    )
                if subject.surrogate is not None:
                    with users_code(subject):
                        derivative = subject.surrogate(x.detach())
                    if not isinstance(derivative, torch.Tensor) or derivative.shape != x.shape:
                        raise UserError(
                            f"the declared surrogate returned {describe_value(derivative)} for a "
                            f"{tuple(x.shape)} input: it must return the derivative per element"
                        )
        if constants:
            said.append(
                f"{subject.name}.backward returns None for {', '.join(sorted(constants))}: "
                "taken as needing no gradient (not checked; the others are)"
            )
        notes = [*said, *dict.fromkeys(notes)]
        finding = Finding(group, name, Status.INFO if notes else Status.PASS, "; ".join(notes))
        checked = replace(subject, constants=constants)
        written = backward_writes(checked.fixed() if probe.random else checked, probing)
        if written:
            raise UserError(written)
        return Learnt(
            [finding],
            Learned(subject=checked.fixed() if probe.random else checked, probe=probe),
            notes=[f"info: {line}" for line in said],
        )

    return [Check(group, name, check, needed=True)]


def backward_writes(subject: Subject, context: Context) -> str:
    """What the backward writes into in place of the tensors autograd hands it, which PyTorch
    forbids and gradcheck does not catch: its incoming gradient (a dense one's values change:
    the caller's tensor; the one `y.sum()` passes, one value expanded to every position, makes
    every gradient what a masked write left in the value they share) or the input the forward
    saved; '' where it writes into none."""
    x = context.sample((4, 5), torch.Generator().manual_seed(7)).double().requires_grad_()
    given = x.detach().clone()
    dense = torch.ones_like(given)
    _, dense_grads, _ = forward_backward(subject, subject.call, x, dense)
    if not torch.equal(dense, torch.ones_like(given)):
        return (
            f"{subject.name}.backward changed its incoming gradient in place (grad_output[...] "
            "= ... or grad_output.op_()): the caller's tensor, and under y.sum().backward() "
            "every gradient; write into a copy (grad_output.clone()) or compute a new tensor"
        )
    if not torch.equal(x.detach(), given):
        return (
            f"{subject.name}.backward changed the forward's input in place (a tensor it saved): "
            "the layer's input, which the layers before it may still read; write into a copy"
        )
    summed = torch.ones((), dtype=given.dtype).expand_as(given)
    _, summed_grads, _ = forward_backward(subject, subject.call, x, summed)
    for wanted, (dense_grad, summed_grad) in zip(
        ("the input", *subject.params), zip(dense_grads, summed_grads)
    ):
        # Within rounding: a kernel may reduce a stride-0 tensor in another order.
        if dense_grad is not None and not torch.allclose(
            dense_grad, summed_grad, rtol=1e-10, atol=0.0, equal_nan=True
        ):
            return (
                f"{subject.name}.backward's gradient for {wanted} under y.sum().backward() (its "
                "incoming gradient one value expanded to every position) is not the same as "
                "under a dense upstream of ones: it writes into its incoming gradient in place; "
                "write into a copy (grad_output.clone())"
            )
    return ""


# An input of each rank the returns check tries (its own (4, 5) input is the rank-2 one).
RANK_SHAPES = {0: (), 1: (5,), 3: (2, 3, 5)}


def ranks_taken(context: Context) -> tuple[tuple[int, ...], str]:
    """The ranks of input the forward takes (2 always: the returns check's own input is 2-D),
    and, where it refuses some, the line that says so."""
    subject, taken, refusals = context.subject, [2], {}
    for rank, shape in RANK_SHAPES.items():
        if rank == 1 and context.probe.width is not None:
            continue  # a 1-D input is laid out in rows of its width
        x = context.sample(shape, torch.Generator().manual_seed(6))
        try:
            with users_code(subject):
                subject.forward(x)
            taken.append(rank)
        except UserError as error:
            refusals[rank] = str(error)
    if not refusals:
        return tuple(sorted(taken)), ""
    refused = ", ".join(f"{rank}-D ({why})" for rank, why in refusals.items())
    line = (
        f"takes inputs of {' and '.join(map(str, sorted(taken)))} dimensions, not {refused}: "
        "checked on those (a 1-D input as one row)"
    )
    return tuple(sorted(taken)), line


def describe_value(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} tensor"
    return f"a {type(value).__name__}"


def gradient_checks(context: Context) -> list[Check]:
    """The backward against the oracle in float64, off the kinks: gradcheck on a (4, 5) input
    and every tensor input (not for a declared surrogate, which is not the forward's
    derivative), then every element of a (64, 100) input with a random upstream gradient
    (gradcheck's tolerance lets a slightly wrong constant through; this does not)."""
    subject, oracle, group = context.subject, context.oracle, Group.GRADIENTS
    x = context.sample((4, 5), torch.Generator().manual_seed(0)).requires_grad_()

    def first_order() -> Finding:
        inputs = (x, *subject.inputs(x))
        # A forward that computes in float32 inside is differenced over a step its rounding
        # does not swamp, to what such differences are trusted to.
        rounding = {}
        if context.probe.float64_computed_in != torch.float64:
            rounding = {"eps": FD_STEP, "atol": oracle.fd_error, "rtol": oracle.fd_error}
        with users_code(subject):
            passed = torch.autograd.gradcheck(
                subject.call, inputs, raise_exception=False, **rounding
            )
        if passed:
            return Finding(group, "gradcheck (4, 5)", Status.PASS)
        # Ones read as the derivative; a random upstream gradient finds a backward that
        # ignores it.
        verdict = compare(subject, oracle, x, torch.ones_like(x), list(context.kinks))
        if verdict.status == Status.PASS:
            verdict = compare(subject, oracle, x, upstream(x), list(context.kinks))
        detail = verdict.detail or "the Jacobian differs from finite differences"
        return Finding(group, "gradcheck (4, 5)", Status.WRONG, detail, verdict.at)

    name = "derivative (64, 100) every element"
    big = context.sample((64, 100), torch.Generator().manual_seed(3)).requires_grad_()
    too_many = oracle.structure.kind == Dependence.GENERAL and big.numel() > FD_MAX_ELEMENTS

    def every_element() -> Finding:
        if oracle.kind == OracleKind.FINITE_DIFFERENCES and too_many:
            detail = (
                "each output depends on inputs beyond its row: finite differences of every "
                "input one at a time are not taken (gradcheck (4, 5) decides)"
            )
            return Finding(group, name, Status.UNSUPPORTED, detail)
        return compared(group, name, context, big)

    if subject.surrogate is not None:
        surrogate = Finding(group, "gradcheck", Status.INFO, oracle.reason)
        checks = [Check(group, "gradcheck", lambda: surrogate)]
    else:
        checks = [Check(group, "gradcheck (4, 5)", first_order)]
    return [*checks, Check(group, name, every_element)]


def double_backward_checks(context: Context) -> list[Check]:
    """gradgradcheck: is the backward itself differentiable, correctly? It matters only to a
    double backward (gradient penalties, Hessians): its own finding."""
    subject, group, name = context.subject, Group.DOUBLE_BACKWARD, "gradgradcheck (4, 5)"
    x = context.sample((4, 5), torch.Generator().manual_seed(0)).requires_grad_()
    computes_in = context.probe.float64_computed_in

    def check() -> Finding:
        if computes_in != torch.float64:
            detail = (
                f"not checked: for a float64 input it computes in {dtype_name(computes_in)}, "
                "and gradgradcheck's finite differences need float64"
            )
            return Finding(group, name, Status.UNSUPPORTED, detail)
        try:
            with users_code(subject):
                passed = torch.autograd.gradgradcheck(
                    subject.call, (x, *subject.inputs(x)), raise_exception=False
                )
        except UserError as error:
            return Finding(
                group,
                name,
                Status.DOUBLE_BACKWARD,
                f"its backward is not differentiable ({error}); a double backward would fail",
            )
        if passed:
            return Finding(group, name, Status.PASS)
        return Finding(
            group,
            name,
            Status.DOUBLE_BACKWARD,
            "the backward's own derivative differs from its finite differences: a double "
            "backward (a gradient penalty, a Hessian) would be wrong; first derivatives are "
            "unaffected",
        )

    return [Check(group, name, check)]


def parity_checks(context: Context) -> list[Check]:
    """Forward and backward on random inputs off the kinks in every floating dtype; a Function
    that cannot run in half precision (or, not elementwise the same way everywhere, in another
    shape) is reported, not failed."""
    generator = torch.Generator().manual_seed(1)
    checks = []
    for dtype in context.options.dtypes:
        x = context.sample((64, 100), generator).to(dtype).requires_grad_()
        name = f"parity {dtype_name(dtype)}"
        checks.append(
            Check(
                Group.PARITY,
                name,
                lambda name=name, x=x: compared(Group.PARITY, name, context, x),
                Status.UNSUPPORTED if dtype in LOW_PRECISION else Status.WRONG,
            )
        )
    x = context.sample((2, 3, 50), generator).float().requires_grad_()
    name = "parity (2, 3, 50) float32"
    other_shape = Status.WRONG if context.structure.pointwise else Status.UNSUPPORTED
    checks.append(
        Check(Group.PARITY, name, lambda: compared(Group.PARITY, name, context, x), other_shape)
    )
    return checks


def kink_checks(context: Context) -> list[Check]:
    """Each kink on its own: at it, a different value is a convention, reported with the
    forward's one-sided derivatives; just beside it, the backward must be the oracle's."""

    def at(kink: Kink) -> Finding:
        name = f"kink at x={kink.x:g}"
        for dtype in (torch.float64, torch.float32):
            beside = 1e-3 * max(1.0, abs(kink.x))
            x = torch.tensor([kink.x, kink.x - beside, kink.x + beside], dtype=dtype)
            x.requires_grad_()
            finding = compared(Group.KINKS, name, context, x, torch.ones_like(x), kinks=[kink])
            if finding.status == Status.CONVENTION:
                if kink.step:
                    finding.detail += (
                        f" (the forward steps from {kink.left:.6g} to {kink.right:.6g})"
                    )
                else:
                    finding.detail += (
                        f" (the forward's derivative is {kink.left:.6g} from the left, "
                        f"{kink.right:.6g} from the right)"
                    )
            if finding.status != Status.PASS:
                break
        return finding

    return [
        Check(Group.KINKS, f"kink at x={kink.x:g}", lambda kink=kink: at(kink))
        for kink in context.kinks
    ]


def edge_checks(context: Context) -> list[Check]:
    """Exact zeros, non-finite values, empty and 0-dim tensors, strides, no grad, devices: a
    Function that raises on one has a limit, reported. For a Function whose kinks cannot be
    looked for (elementwise, but not the same at every position), an exact 0 is taken as one:
    its backward there is a convention."""

    def convention(edge: Edge) -> torch.Tensor | None:
        if context.structure.kind != Dependence.ELEMENTWISE or not edge.ones:
            return edge.convention
        zeros = edge.x.detach() == 0
        return zeros if edge.convention is None else edge.convention | zeros

    return [
        Check(
            Group.EDGES,
            edge.name,
            lambda edge=edge: compared(
                Group.EDGES,
                edge.name,
                context,
                edge.x,
                torch.ones_like(edge.x) if edge.ones else None,
                convention(edge),
            ),
            Status.UNSUPPORTED,
        )
        for edge in edge_cases(list(context.kinks), context.domain)
    ]


def range_checks(context: Context) -> list[Check]:
    """Large finite inputs per dtype and the experiment's own pre-activations: a result that
    turns non-finite where the float64 truth is finite fails at large inputs."""
    dtypes = context.options.dtypes
    cases = [(f"large inputs {dtype_name(d)}", large_values(d)) for d in dtypes]
    cases += [(f"experiment's pre-activations, {at}", x) for at, x in context.reached.items()]

    def check(name: str, x: torch.Tensor) -> Finding:
        x = x.detach().requires_grad_()
        finding = compared(Group.LARGE_INPUTS, name, context, x, torch.ones_like(x))
        if finding.status == Status.LARGE and finding.at is not None:
            if context.structure.pointwise:
                finding.detail += overflow_note(context.subject, x, finding)
            else:  # the element shows what its row, or its input as a whole, made of it
                finding.detail += f" (its input reaches |x| = {x.detach().abs().max().item():g})"
        return finding

    return [
        Check(
            Group.LARGE_INPUTS,
            name,
            lambda name=name, x=x: check(name, x),
            Status.UNSUPPORTED if x.dtype in LOW_PRECISION else Status.WRONG,
        )
        for name, x in cases
    ]


def overflow_note(subject: Subject, x: torch.Tensor, finding: Finding) -> str:
    """Where the forward first turns non-finite (bisected from 0), and, when exp overflows at
    the input that showed it, the formula that avoids it."""
    if finding.at.what != "forward":
        return ""
    bad, dtype = finding.at.input, x.dtype
    exp_overflows_at = math.log(torch.finfo(dtype).max)

    def finite(v: float) -> bool:
        with users_code(subject):
            return bool(subject.forward(torch.tensor([v], dtype=dtype)).isfinite().all())

    good = 0.0
    if not finite(good):
        return ""
    for _ in range(60):
        middle = (good + bad) / 2
        good, bad = (middle, bad) if finite(middle) else (good, middle)
    note = f"; non-finite from x={bad:.7g} on"
    # Within 2%: torch 2.3's float32 exp gives inf from 87.5, not log(max) = 88.7.
    if abs(abs(bad) - exp_overflows_at) < 0.02 * exp_overflows_at:
        note += (
            f", where exp(x) overflows {dtype_name(dtype)}: rewrite so that exp only sees "
            "x <= 0 (log1p(exp(x)) = relu(x) + log1p(exp(-|x|)), or "
            "torch.nn.functional.softplus)"
        )
    return note
