"""The Function lab: verify an activation against the built-in it imitates.

    python -m reluexp.check activation=<name> [overrides...]

Exit 0 when the gradients are right (convention differences, like the subgradient at 0, are
reported), 1 with the failing check and the first offending input, 2 for a usage error.
"""

import copy
import inspect
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from reluexp import tags, train
from reluexp.activations import Activation, as_activation, changes_its_input, import_object
from reluexp.config import Config, ConfigError, config_dict, validate
from reluexp.events import read_scalars, write_loss_difference
from reluexp.hydra_glue import compose_config, one_line, task_config
from reluexp.summary import write_json_atomic

# (rtol, atol) per dtype: about two units in the last place for the low-precision types.
TOLERANCES = {
    torch.float16: (2e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
# Inputs this close to 0 are pushed away from it, where ReLU-like Functions have their kink.
KINK_MARGIN = 0.1
# Loss series that part without an exact zero but stay this close are rounding apart.
ROUNDING_DRIFT = 1e-3
# Half precision is judged against the float64 truth, as PyTorch's reference tests do: a
# result may be off by the reference's own error in that dtype plus this many units of
# rounding (two formulas of one function round differently, and both are right).
LOW_PRECISION = (torch.float16, torch.bfloat16)
ROUNDING_UNITS = 2


@dataclass
class Result:
    check: str
    # pass | fail | convention (differs from the reference only at a kink) | info | unsupported
    status: str
    detail: str = ""


@dataclass
class Subject:
    """The activation under test, its reference, and a spied copy recording raw gradients."""

    fn: Activation
    reference: Activation
    # The same activation, but a Function's backward output is recorded before autograd casts it.
    spied_fn: Activation
    raw_grads: list[Any] = field(default_factory=list)


def spied(function_class: type[torch.autograd.Function], raw_grads: list[Any]) -> type:
    """A subclass recording what backward returns, before autograd casts it to the input dtype."""

    class Spy(function_class):
        @staticmethod
        def backward(ctx, *grad_outputs):
            grads = function_class.backward(ctx, *grad_outputs)
            raw_grads.append(grads[0] if isinstance(grads, tuple) else grads)
            return grads

    # Messages from autograd name the class: the user's, not this wrapper.
    Spy.__name__, Spy.__qualname__ = function_class.__name__, function_class.__qualname__
    return Spy


def make_subject(config: Config) -> Subject:
    activation = config.activation
    if activation.reference is None:
        raise ConfigError(
            f"activation.reference=None: {activation.name} needs a reference to check against"
        )
    raw_grads: list[Any] = []
    target = import_object(activation.target)
    spied_target = target
    if inspect.isclass(target) and issubclass(target, torch.autograd.Function):
        spied_target = spied(target, raw_grads)
    return Subject(
        fn=as_activation(target, activation.params, activation.target),
        reference=as_activation(
            import_object(activation.reference, "activation.reference"),
            activation.params,
            activation.reference,
        ),
        spied_fn=as_activation(spied_target, activation.params, activation.target),
        raw_grads=raw_grads,
    )


def forward_backward(
    fn: Activation, x: torch.Tensor, grad_output: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fn(x) and d(fn(x) . grad_output)/dx for a fresh leaf copy of x."""
    # detach() keeps the caller's strides: a non-contiguous input stays non-contiguous.
    leaf = x.detach().requires_grad_() if x.requires_grad else x
    y = fn(leaf)
    if not y.requires_grad:
        return y.detach(), None
    (grad,) = torch.autograd.grad(y, leaf, grad_output)
    return y.detach(), grad


def first_mismatch(
    x: torch.Tensor,
    actual: torch.Tensor,
    expected: torch.Tensor,
    truth: torch.Tensor | None = None,
) -> tuple[torch.Tensor, str] | None:
    """The mask of mismatching elements and a line naming the first of them, or None.

    With the float64 `truth` (half precision), an element mismatches when its error against
    the truth exceeds the reference's own error there plus ROUNDING_UNITS units of rounding.
    """
    if truth is None:
        rtol, atol = TOLERANCES.get(expected.dtype, (0.0, 0.0))
        wrong = ~torch.isclose(
            actual.to(expected.dtype), expected, rtol=rtol, atol=atol, equal_nan=True
        )
    else:
        info = torch.finfo(expected.dtype)
        error = (actual.double() - truth).abs()
        allowed = (expected.double() - truth).abs() + ROUNDING_UNITS * (
            info.eps * truth.abs() + info.smallest_normal
        )
        same = (actual.double() == truth) | (actual.isnan() & truth.isnan())
        wrong = ~same & ~(error <= allowed)
    if not wrong.any():
        return None
    index = tuple(int(i) for i in wrong.nonzero()[0])
    line = (
        f"x{list(index)}={x[index].item()!r} ({x.dtype}): got {actual[index].item()!r}, "
        f"reference {expected[index].item()!r}"
    )
    if truth is not None:
        line += f", float64 truth {truth[index].item()!r}"
    return wrong, line


def compare(
    name: str, subject: Subject, x: torch.Tensor, convention: tuple[str, torch.Tensor] | None = None
) -> Result:
    """Forward and backward of the subject against the reference on x.

    The upstream gradient is random (a backward that ignores it fails), except for the edge cases
    (a `convention` is given), where ones make the reported gradients read as derivatives.
    `convention` names the inputs (and their mask) where a different gradient is a choice of
    convention, such as the subgradient at a kink, rather than an error.
    """
    if convention is None:
        grad_output = torch.randn(x.shape, generator=torch.Generator().manual_seed(0)).to(x)
    else:
        grad_output = torch.ones_like(x)
    subject.raw_grads.clear()
    y, grad = forward_backward(subject.spied_fn, x, grad_output)
    y_ref, grad_ref = forward_backward(subject.reference, x, grad_output)
    y_true = grad_true = None
    if x.dtype in LOW_PRECISION:
        x64 = x.detach().double().requires_grad_(x.requires_grad)
        y_true, grad_true = forward_backward(subject.reference, x64, grad_output.double())
    if y.dtype != y_ref.dtype or y.shape != y_ref.shape or y.device != y_ref.device:
        return Result(
            name,
            "fail",
            f"forward returned {y.dtype} {tuple(y.shape)} on {y.device}, "
            f"reference {y_ref.dtype} {tuple(y_ref.shape)} on {y_ref.device}",
        )
    if (mismatch := first_mismatch(x, y, y_ref, y_true)) is not None:
        return Result(name, "fail", f"forward: {mismatch[1]}")
    if (grad is None) != (grad_ref is None):
        return Result(name, "fail", "output requires grad on one side only")
    if grad is None:
        return Result(name, "pass", "no grad requested, none produced")
    raw = subject.raw_grads[-1] if subject.raw_grads else grad
    if isinstance(raw, torch.Tensor) and (raw.dtype != x.dtype or raw.shape != x.shape):
        return Result(
            name,
            "fail",
            f"backward returned {raw.dtype} {tuple(raw.shape)} for a {x.dtype} "
            f"{tuple(x.shape)} input (autograd would cast it silently)",
        )
    if (mismatch := first_mismatch(x, grad, grad_ref, grad_true)) is not None:
        wrong, line = mismatch
        if convention is not None and not (wrong & ~convention[1]).any():
            return Result(name, "convention", f"backward differs only at {convention[0]}: {line}")
        return Result(name, "fail", f"backward: {line}")
    return Result(name, "pass")


def off_kinks(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """float64 normal samples with |x| >= KINK_MARGIN, so finite differences never straddle 0."""
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    return x + KINK_MARGIN * torch.where(x >= 0, 1.0, -1.0)


def raised(error: BaseException) -> str:
    """The error in one line: its first sentence, and the lines it introduces with ':', down
    to the innermost cause (torch.compile wraps the user's error in its own)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    message = lines[0] if lines else ""
    for line in lines[1:]:
        if not message.endswith((":", ",")):
            break
        message = f"{message} {line}"
    text = f"raised {type(error).__name__}: {message}"
    cause = error.__cause__ or error.__context__
    if cause is not None and message.endswith(":"):
        return f"{text} {raised(cause)}"
    return text.rstrip(": ")


def guarded(name: str, check: Callable[[], Result]) -> Result:
    """A Function that raises is a failed check with its message, not a traceback; torch's
    warnings about it (anomaly hints naming its backward node) stay out of the terminal."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return check()
    except Exception as error:
        return Result(name, "fail", raised(error))


def first_jacobian_offender(fn: Activation, x: torch.Tensor) -> str:
    """Elementwise fn: the first x whose analytic derivative disagrees with finite differences."""
    step = 1e-6
    with torch.no_grad():
        numeric = (fn(x + step) - fn(x - step)) / (2 * step)
    (analytic,) = torch.autograd.grad(fn(x).sum(), x)
    mismatch = first_mismatch(x.detach(), analytic, numeric)
    return mismatch[1].replace("reference", "finite differences") if mismatch else ""


def gradient_checks(subject: Subject) -> list[Result]:
    """gradcheck and gradgradcheck in float64, off the kink; fast mode for the larger input."""
    generator = torch.Generator().manual_seed(0)
    results = []
    for shape, fast in [((4, 5), False), ((64, 100), True)]:
        x = off_kinks(shape, generator).requires_grad_()
        suffix = f" {tuple(shape)}" + (" fast" if fast else "")

        def first_order(x=x, fast=fast, label="gradcheck" + suffix) -> Result:
            if torch.autograd.gradcheck(subject.fn, (x,), fast_mode=fast, raise_exception=False):
                return Result(label, "pass")
            offender = first_jacobian_offender(subject.fn, x)
            return Result(label, "fail", offender or "the Jacobian differs (not elementwise)")

        def second_order(x=x, fast=fast, label="gradgradcheck" + suffix) -> Result:
            torch.autograd.gradgradcheck(subject.fn, (x,), fast_mode=fast)
            return Result(label, "pass")

        results.append(guarded("gradcheck" + suffix, first_order))
        result = guarded("gradgradcheck" + suffix, second_order)
        if "does not require grad" in result.detail:
            result = Result(result.check, "unsupported", "backward is not differentiable")
        results.append(result)
    results.append(guarded("derivative (64, 100) every element", lambda: derivative_check(subject)))
    return results


def derivative_check(subject: Subject) -> Result:
    """Every element of a (64, 100) input against central finite differences, in float64 and
    off the kink: fast gradcheck projects the Jacobian onto random vectors and lets a slightly
    wrong constant through; for an elementwise Function every element is cheap to check."""
    name = "derivative (64, 100) every element"
    x = off_kinks((64, 100), torch.Generator().manual_seed(3)).requires_grad_()
    with torch.no_grad():
        y = subject.fn(x)
        nudged = x.clone()
        nudged[0, 0] += 1.0
        elementwise = y.shape == x.shape and torch.equal(subject.fn(nudged)[1:], y[1:])
    if not elementwise:
        return Result(name, "unsupported", "the Function is not elementwise")
    detail = first_jacobian_offender(subject.fn, x)
    return Result(name, "pass") if detail == "" else Result(name, "fail", detail)


def parity_checks(subject: Subject) -> list[Result]:
    """Forward and backward against the reference on random inputs of several shapes."""
    generator = torch.Generator().manual_seed(1)
    results = []
    for shape in [(17,), (64, 100), (2, 3, 50)]:
        for dtype in (torch.float32, torch.float64):
            x = torch.randn(shape, generator=generator, dtype=dtype).requires_grad_()
            name = f"parity {tuple(shape)} {str(dtype).removeprefix('torch.')}"
            results.append(guarded(name, lambda name=name, x=x: compare(name, subject, x)))
    return results


def edge_checks(subject: Subject) -> list[Result]:
    """Exact zeros, non-finite values, empty and 0-dim tensors, strides, dtypes, devices."""
    generator = torch.Generator().manual_seed(2)

    def randn(*shape: int, **kwargs: Any) -> torch.Tensor:
        return torch.randn(shape, generator=generator).to(**kwargs)

    zeros = torch.tensor([0.0, -0.0, 1.5, -1.5])
    non_finite = torch.tensor([math.inf, -math.inf, math.nan, 2.0])
    cases: list[tuple[str, torch.Tensor, tuple[str, torch.Tensor] | None]] = [
        ("edge 0 and -0.0", zeros.requires_grad_(), ("x == 0", zeros == 0)),
        # The derivative at ±inf or NaN is a limit or undefined: differences are conventions.
        (
            "edge ±inf and NaN",
            non_finite.requires_grad_(),
            ("non-finite x", ~non_finite.isfinite()),
        ),
        ("edge empty (0, 5)", torch.empty(0, 5).requires_grad_(), None),
        ("edge 0-dim", torch.tensor(-0.7).requires_grad_(), None),
        ("edge non-contiguous", randn(20, 30).t().requires_grad_(), None),
        ("edge input without grad", randn(8), None),
    ]
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        x = randn(64, 100, dtype=dtype).requires_grad_()
        cases.append((f"edge dtype {str(dtype).removeprefix('torch.')}", x, None))
    if torch.cuda.is_available():
        cases.append(("edge device cuda", randn(64, 100, device="cuda").requires_grad_(), None))
    return [
        guarded(name, lambda n=name, x=x, c=c: compare(n, subject, x, c)) for name, x, c in cases
    ]


def input_check(subject: Subject) -> Result:
    """The forward must not write into its input (an in-place forward corrupts training)."""
    name = "forward keeps its input"
    if changes_its_input(subject.fn):
        return Result(name, "fail", "forward changed its input in place (x[...] = ... or x.op_())")
    return Result(name, "pass")


def saved_bytes(fn: Activation, x: torch.Tensor) -> tuple[float, float]:
    """Bytes per input element that fn saves for backward: all, and beyond its own output.

    The output is kept alive by the next layer's matmul anyway, so only the rest costs memory.
    """
    packed: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = fn(x.detach().requires_grad_())
    output_storage = y.untyped_storage().data_ptr()
    total = sum(t.nbytes for t in packed)
    extra = sum(t.nbytes for t in packed if t.untyped_storage().data_ptr() != output_storage)
    return total / x.numel(), extra / x.numel()


def compatibility_checks(subject: Subject) -> list[Result]:
    """torch.compile(fullgraph=True), torch.func.vmap and saved bytes: reported, never fatal."""
    x = torch.randn(64, 100)
    results = []

    def agreement(name: str, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Result:
        """Within the dtype's tolerance of the eager results; a difference is reported only."""
        for actual, expected in pairs:
            if (mismatch := first_mismatch(x, actual, expected)) is not None:
                return Result(name, "info", f"runs, but differs from eager: {mismatch[1]}")
        return Result(name, "pass")

    def compiled() -> Result:
        torch.compiler.reset()
        # aot_eager traces forward and backward as inductor would, without compiling kernels.
        fn = torch.compile(subject.fn, fullgraph=True, backend="aot_eager")
        y, grad = forward_backward(fn, x.requires_grad_(), torch.ones_like(x))
        y_eager, grad_eager = forward_backward(subject.fn, x, torch.ones_like(x))
        return agreement("torch.compile fullgraph", [(y, y_eager), (grad, grad_eager)])

    def vmapped() -> Result:
        batched = torch.func.vmap(subject.fn)(x)
        grads = torch.func.vmap(torch.func.grad(lambda row: subject.fn(row).sum()))(x)
        y_eager, grad_eager = forward_backward(subject.fn, x.requires_grad_(), torch.ones_like(x))
        return agreement("torch.func.vmap", [(batched, y_eager), (grads, grad_eager)])

    for name, check in [("torch.compile fullgraph", compiled), ("torch.func.vmap", vmapped)]:
        result = guarded(name, check)
        if result.status == "fail":  # raised: the transform does not support this Function
            result.status = "unsupported"
        results.append(result)

    total, extra = saved_bytes(subject.fn, x)
    total_ref, extra_ref = saved_bytes(subject.reference, x)
    verdict = "no more than" if extra <= extra_ref else "more than"
    results.append(
        Result(
            "saved bytes per element",
            "info",
            f"{total:g} saved, {extra:g} beyond the output; reference {total_ref:g}, "
            f"{extra_ref:g} beyond the output ({verdict} the reference)",
        )
    )
    return results


# Input shapes the cost is measured at: one element (what every call costs), the reference
# experiment's hidden layer, and a large layer (what the kernels cost).
COST_SIZES = {"(1,)": (1,), "(64, 100)": (64, 100), "(2048, 2048)": (2048, 2048)}


def step_time(fn: Activation, x: torch.Tensor, grad_output: torch.Tensor, calls: int) -> float:
    """Seconds per forward + backward of fn on x."""
    leaf = x.detach().requires_grad_()
    start = time.perf_counter()
    for _ in range(calls):
        fn(leaf).backward(grad_output)
    return (time.perf_counter() - start) / calls


def cost(subject: Subject, repetitions: int = 7) -> tuple[Result, dict[str, Any]]:
    """Forward + backward time against the reference: alternating repetitions, medians."""
    generator = torch.Generator().manual_seed(4)
    report: dict[str, Any] = {}
    for label, shape in COST_SIZES.items():
        x = torch.randn(shape, generator=generator)
        grad_output = torch.ones_like(x)
        # About 20 ms of calls per repetition, whatever the size.
        once = max(step_time(subject.reference, x, grad_output, 1), 1e-6)
        calls = max(1, min(2000, int(0.02 / once)))
        times: dict[str, list[float]] = {"function": [], "reference": []}
        for _ in range(repetitions):
            times["function"].append(step_time(subject.fn, x, grad_output, calls))
            times["reference"].append(step_time(subject.reference, x, grad_output, calls))
        fn_us, ref_us = (statistics.median(t) * 1e6 for t in times.values())
        report[label] = {"function_us": fn_us, "reference_us": ref_us, "ratio": fn_us / ref_us}
    parts = [
        f"{v['ratio']:.2f}x at {size} ({v['function_us']:.3g} vs {v['reference_us']:.3g} us)"
        for size, v in report.items()
        if size != "(1,)"
    ]
    detail = "forward+backward: " + ", ".join(parts).replace("x at", "x the reference's time at", 1)
    per_call = report["(1,)"]["function_us"] - report["(1,)"]["reference_us"]
    if per_call > 0:
        # At one element the kernels cost nothing: what is left is per-call overhead.
        detail += f"; {per_call:.1f} us more per call (Python and autograd.Function overhead)"
    return Result("cost: forward+backward time", "info", detail), report


def training_parity(
    config: Config, check_dir: Path, gradients_failed: bool
) -> tuple[Result, dict[str, Any]]:
    """The reference experiment trained with the activation and with its reference, same seed."""
    series = {}
    for side, target in [
        ("target", config.activation.target),
        ("reference", config.activation.reference),
    ]:
        side_config = copy.deepcopy(config)
        side_config.activation.target = target
        side_config.log_every = 1
        train.run(side_config, check_dir / f"train_{side}")
        scalars = read_scalars(check_dir / f"train_{side}", [tags.LOSS, tags.EXACT_ZEROS])
        series[side] = {tag: list(values.values()) for tag, values in scalars.items()}
    # The gap as a chart beside the two runs (Custom Scalars' difference chart).
    write_loss_difference(check_dir / "train_target", check_dir / "train_reference")
    losses, ref_losses = series["target"][tags.LOSS], series["reference"][tags.LOSS]
    zeros = series["target"][tags.EXACT_ZEROS]
    parted = next((t for t, (a, b) in enumerate(zip(losses, ref_losses)) if a != b), None)
    relative = [
        abs(a - b) / abs(b) for a, b in zip(losses, ref_losses) if b != 0 and math.isfinite(a - b)
    ]
    report = {
        "steps": len(losses),
        "first_parting_step": parted,
        "exact_zeros_before_parting": int(zeros[parted - 1]) if parted else None,
        "steps_with_exact_zeros": sum(z > 0 for z in zeros),
        "max_relative_difference": max(relative, default=0.0),
        "final_loss": losses[-1] if losses else None,
        "reference_final_loss": ref_losses[-1] if ref_losses else None,
    }
    if parted is None:
        detail = f"identical loss series over {len(losses)} steps"
        status = "pass"
    elif parted and zeros[parted - 1] > 0:
        status = "convention"
        detail = (
            f"parts at step {parted}, after {int(zeros[parted - 1])} exact-zero "
            f"pre-activation(s) at step {parted - 1}; "
            f"{report['steps_with_exact_zeros']} steps had exact zeros; "
            f"max relative difference {report['max_relative_difference']:.3g}"
        )
    elif gradients_failed:
        status = "fail"
        detail = (
            f"the runs part at step {parted}, with no exact zero before it, and end up "
            f"{report['max_relative_difference']:.3g} apart (relative): the gradient is wrong "
            "(see the failed checks above)"
        )
    elif report["max_relative_difference"] <= ROUNDING_DRIFT:
        status = "info"
        detail = (
            f"parts at step {parted} with no exact zero before it and stays within "
            f"{report['max_relative_difference']:.3g} (rounding: another order of operations)"
        )
    else:
        status = "info"
        detail = (
            f"the runs part at step {parted}, with no exact zero before it, and end up "
            f"{report['max_relative_difference']:.3g} apart (relative): not rounding, the "
            "Function computes something else than its reference"
        )
    return Result("training parity", status, detail), report


def print_table(results: list[Result]) -> None:
    width = max(len(r.check) for r in results)
    for r in results:
        print(f"{r.check:<{width}}  {r.status.upper():<11}  {r.detail}")


def check(config: Config, check_dir: Path) -> int:
    """Run every check, print the table, write check.json; return the exit code."""
    validate(config)
    subject = make_subject(config)
    # An in-place forward breaks every check after it: it is named first.
    results = [guarded("forward keeps its input", lambda: input_check(subject))]
    results += gradient_checks(subject) + parity_checks(subject) + edge_checks(subject)
    results += compatibility_checks(subject)
    gradients_failed = any(r.status == "fail" for r in results)
    try:
        cost_result, cost_report = cost(subject)
    except Exception as error:
        cost_result, cost_report = (
            Result("cost: forward+backward time", "unsupported", raised(error)),
            {},
        )
    results.append(cost_result)
    try:
        training_result, training_report = training_parity(config, check_dir, gradients_failed)
    except Exception as error:
        training_result = Result("training parity", "fail", raised(error))
        training_report = {"error": training_result.detail}
    results.append(training_result)
    print_table(results)
    failed = [r for r in results if r.status == "fail"]
    write_json_atomic(
        check_dir / "check.json",
        {
            "activation": config_dict(config)["activation"],
            "passed": not failed,
            "checks": [asdict(r) for r in results],
            "training": training_report,
            "cost": cost_report,
        },
    )
    if failed:
        print(f"FAILED {failed[0].check}: {failed[0].detail}", file=sys.stderr)
        return 1
    conventions = [r for r in results if r.status == "convention"]
    summary = f"; {len(conventions)} convention difference(s)" if conventions else ""
    print(
        f"{config.activation.name}: gradients correct{summary}. Report: {check_dir / 'check.json'}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    overrides = sys.argv[1:] if argv is None else argv
    try:
        # The same config tree and overrides as `python -m reluexp`; the dir from hydra.run.dir.
        cfg = compose_config(overrides)
        config, check_dir = task_config(cfg), Path(cfg.hydra.run.dir)
        check_dir.mkdir(parents=True, exist_ok=True)
        return check(config, check_dir)
    except (ConfigError, HydraException, OmegaConfBaseException) as error:
        print(f"reluexp.check: error: {one_line(error)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
