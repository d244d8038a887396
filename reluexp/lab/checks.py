"""The checks of question (a), is the backward the derivative of this forward (or of the
declared surrogate)? What the Function returns, gradcheck and every element, double backward,
every dtype, the kinks, the edge cases and large inputs; this alone decides `wrong`."""

import math
from dataclasses import dataclass

import torch

from reluexp.functions.targets import changes_its_input
from reluexp.lab.calls import UserError, computed_in, forward_backward, guarded, users_code
from reluexp.lab.cases import Kink, edge_cases, large_values, sample, upstream
from reluexp.lab.compare import compare, compared
from reluexp.lab.findings import Finding, Status
from reluexp.lab.judge import LOW_PRECISION, dtype_name
from reluexp.lab.oracle import Oracle
from reluexp.lab.subject import Subject

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Probe:
    """What the returns check learnt: the dtype the Function computes in for a float64 input
    (a forward returning a float32 mask computes in float32), and whether its forward is
    random (then no training run can be compared step for step)."""

    float64_computed_in: torch.dtype = torch.float64
    random: bool = False


def returns_check(subject: Subject) -> tuple[Finding, Probe]:
    """What every other check relies on: the forward leaves its input alone (an in-place forward
    corrupts training) and returns a floating tensor of the input's shape; the backward returns
    a gradient for the input; a declared surrogate returns one value per input. What autograd
    does with another dtype is said (info), as is a forward that is random."""
    group = name = "returns"
    probe = Probe()

    def check() -> Finding:
        nonlocal probe
        with users_code(subject):
            in_place = changes_its_input(lambda x: subject.call(x, *subject.inputs(x)))
        if in_place:
            raise UserError("forward changed its input in place (x.op_() or x[...] = ...)")
        notes = []
        for dtype in (torch.float32, torch.float64):
            x = sample((4, 5), torch.Generator().manual_seed(6), []).to(dtype).requires_grad_()
            y, _, raw = forward_backward(subject, subject.call, x, upstream(x))
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
                random = not torch.equal(again, y)
                probe = Probe(computed_in(dtype, *returned), random)
                if random:
                    notes.append("its forward is random: two calls on one input differ")
                if subject.surrogate is not None:
                    with users_code(subject):
                        derivative = subject.surrogate(x.detach())
                    if not isinstance(derivative, torch.Tensor) or derivative.shape != x.shape:
                        raise UserError(
                            f"the declared surrogate returned {describe_value(derivative)} for a "
                            f"{tuple(x.shape)} input: it must return the derivative per element"
                        )
        if notes:
            return Finding(group, name, Status.INFO, "; ".join(dict.fromkeys(notes)))
        return Finding(group, name, Status.PASS)

    return guarded(group, name, subject, check), probe


def describe_value(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} tensor"
    return f"a {type(value).__name__}"


def gradient_checks(subject: Subject, oracle: Oracle, kinks: list[Kink]) -> list[Finding]:
    """The backward against the oracle in float64, off the kinks: gradcheck on a (4, 5) input
    and every parameter (not for a declared surrogate, which is not the forward's derivative),
    then every element of a (64, 100) input with a random upstream gradient (gradcheck's
    tolerance lets a slightly wrong constant through; this does not)."""
    group = "gradients"
    findings = []
    if subject.surrogate is not None:
        findings.append(Finding(group, "gradcheck", Status.INFO, oracle.reason))
    else:
        x = sample((4, 5), torch.Generator().manual_seed(0), kinks).requires_grad_()

        def first_order() -> Finding:
            inputs = (x, *subject.inputs(x))
            with users_code(subject):
                passed = torch.autograd.gradcheck(subject.call, inputs, raise_exception=False)
            if passed:
                return Finding(group, "gradcheck (4, 5)", Status.PASS)
            # Ones read as the derivative; a random upstream gradient finds a backward that
            # ignores it.
            verdict = compare(subject, oracle, x, torch.ones_like(x), kinks)
            if verdict.status == Status.PASS:
                verdict = compare(subject, oracle, x, upstream(x), kinks)
            detail = verdict.detail or "the Jacobian differs from finite differences"
            return Finding(group, "gradcheck (4, 5)", Status.WRONG, detail, verdict.at)

        findings.append(guarded(group, "gradcheck (4, 5)", subject, first_order))
    if findings[0].status in (Status.PASS, Status.INFO):
        name = "derivative (64, 100) every element"
        if oracle.kind == "finite differences" and not oracle.elementwise:
            findings.append(
                Finding(group, name, Status.UNSUPPORTED, "the Function is not elementwise")
            )
        else:
            x = sample((64, 100), torch.Generator().manual_seed(3), kinks).requires_grad_()
            findings.append(compared(group, name, subject, oracle, x, kinks))
    return findings


def double_backward_check(subject: Subject, kinks: list[Kink], probe: Probe) -> Finding:
    """gradgradcheck: is the backward itself differentiable, correctly? It matters only to a
    double backward (gradient penalties, Hessians): its own finding."""
    group, name = "double backward", "gradgradcheck (4, 5)"
    x = sample((4, 5), torch.Generator().manual_seed(0), kinks).requires_grad_()
    if probe.float64_computed_in != torch.float64:
        detail = (
            f"not checked: for a float64 input it computes in "
            f"{dtype_name(probe.float64_computed_in)}, and gradgradcheck's finite differences "
            "need float64"
        )
        return Finding(group, name, Status.UNSUPPORTED, detail)

    def check() -> Finding:
        try:
            passed = torch.autograd.gradgradcheck(
                subject.call, (x, *subject.inputs(x)), raise_exception=False
            )
        except Exception as error:
            return Finding(
                group,
                name,
                Status.DOUBLE_BACKWARD,
                f"its backward is not differentiable ({type(error).__name__}: "
                f"{str(error).splitlines()[0]}); a double backward would fail",
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

    return guarded(group, name, subject, check)


def parity_checks(
    subject: Subject, oracle: Oracle, kinks: list[Kink], dtypes: tuple[torch.dtype, ...]
) -> list[Finding]:
    """Forward and backward on random inputs off the kinks in every floating dtype; a Function
    that cannot run in half precision is reported, not failed."""
    generator = torch.Generator().manual_seed(1)
    findings = []
    for dtype in dtypes:
        x = sample((64, 100), generator, kinks).to(dtype).requires_grad_()
        findings.append(
            compared(
                "parity",
                f"parity {dtype_name(dtype)}",
                subject,
                oracle,
                x,
                kinks,
                limit=dtype in LOW_PRECISION,
            )
        )
    x = sample((2, 3, 50), generator, kinks).float().requires_grad_()
    findings.append(compared("parity", "parity (2, 3, 50) float32", subject, oracle, x, kinks))
    return findings


def kink_checks(subject: Subject, oracle: Oracle, kinks: list[Kink]) -> list[Finding]:
    """Each kink on its own: at it, a different value is a convention, reported with the
    forward's one-sided derivatives; just beside it, the backward must be the oracle's."""
    findings = []
    for kink in kinks:
        name = f"kink at x={kink.x:g}"
        for dtype in (torch.float64, torch.float32):
            beside = 1e-3 * max(1.0, abs(kink.x))
            x = torch.tensor([kink.x, kink.x - beside, kink.x + beside], dtype=dtype)
            finding = compared(
                "kinks",
                name,
                subject,
                oracle,
                x.requires_grad_(),
                [kink],
                grad_output=torch.ones_like(x),
            )
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
        findings.append(finding)
    return findings


def edge_checks(subject: Subject, oracle: Oracle, kinks: list[Kink]) -> list[Finding]:
    """Exact zeros, non-finite values, empty and 0-dim tensors, strides, no grad, devices: a
    Function that raises on one has a limit, reported."""
    return [
        compared(
            "edges",
            edge.name,
            subject,
            oracle,
            edge.x,
            kinks,
            edge.convention,
            torch.ones_like(edge.x) if edge.ones else None,
            limit=True,
        )
        for edge in edge_cases(kinks)
    ]


def range_checks(
    subject: Subject,
    oracle: Oracle,
    kinks: list[Kink],
    preactivations: dict[str, torch.Tensor],
    dtypes: tuple[torch.dtype, ...],
) -> list[Finding]:
    """Large finite inputs per dtype and the experiment's own pre-activations: a result that
    turns non-finite where the float64 truth is finite fails at large inputs."""
    cases = [(f"large inputs {dtype_name(d)}", large_values(d)) for d in dtypes]
    cases += [(f"experiment's pre-activations, {where}", x) for where, x in preactivations.items()]
    findings = []
    for name, x in cases:
        finding = compared(
            "large inputs",
            name,
            subject,
            oracle,
            x.requires_grad_(),
            kinks,
            grad_output=torch.ones_like(x),
            limit=x.dtype in LOW_PRECISION,
        )
        if finding.status == Status.LARGE and finding.at is not None:
            finding.detail += overflow_note(subject, x, finding)
        findings.append(finding)
    return findings


def overflow_note(subject: Subject, x: torch.Tensor, finding: Finding) -> str:
    """Where the forward first turns non-finite (bisected from 0), and, when exp overflows at
    the input that showed it, the formula that avoids it."""
    if finding.at.what != "forward":
        return ""
    bad, dtype = finding.at.input, x.dtype
    exp_overflows_at = math.log(torch.finfo(dtype).max)

    def finite(v: float) -> bool:
        return bool(subject.forward(torch.tensor([v], dtype=dtype)).isfinite().all())

    good = 0.0
    if not finite(good):
        return ""
    for _ in range(60):
        middle = (good + bad) / 2
        good, bad = (middle, bad) if finite(middle) else (good, middle)
    note = f"; non-finite from x={bad:.7g} on"
    if abs(abs(bad) - exp_overflows_at) < 0.01 * exp_overflows_at:
        note += (
            f", where exp(x) overflows {dtype_name(dtype)}: rewrite so that exp only sees "
            "x <= 0 (log1p(exp(x)) = relu(x) + log1p(exp(-|x|)), or "
            "torch.nn.functional.softplus)"
        )
    return note
