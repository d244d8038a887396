"""What the Function supports and costs, never fatal: torch.func.vmap, the bytes it saves for
backward, and its forward + backward time against the reference's (or alone), eager and, with
--compile, compiled. Whether it compiles at all is lab/compiled.py's."""

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from reluexp._compat import VMAP_FALLBACK_REFUSED, import_dynamo_outside_vmap, vmap_fallback
from reluexp.lab.calls import (
    ReferenceFailed,
    UserError,
    forward_backward,
    raised,
    the_reference,
    users_code,
)
from reluexp.lab.compiled import torch_logs_held
from reluexp.lab.context import Check, Context, Learnt
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.subject import Subject, Tensors


def transform_checks(context: Context) -> list[Check]:
    """vmap against eager: a transform the Function does not support is reported, not
    failed. Its gradient under vmap (torch.func.grad, which on torch 2.13 imports dynamo:
    about a second, most of a default check) with --compile, beside torch.compile's checks."""
    subject = context.subject
    x = torch.randn(context.probe.shaped((64, 100)), generator=torch.Generator().manual_seed(5))
    plain = subject.plain

    def agreement(name: str, pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> Finding:
        for actual, expected in pairs:
            if not torch.allclose(actual, expected, rtol=1.3e-6, atol=1e-5, equal_nan=True):
                difference = (actual - expected).abs().max().item()
                detail = f"runs, but differs from eager by up to {difference:.3g}"
                return Finding(Group.TRANSFORMS, name, Status.INFO, detail)
        said = "" if context.options.compile else "the forward (its gradient under vmap: --compile)"
        return Finding(Group.TRANSFORMS, name, Status.PASS, said)

    def under_vmap(allowed: bool) -> list[torch.Tensor]:
        params = subject.inputs(x)
        with vmap_fallback(allowed):
            batched = [torch.func.vmap(lambda row: plain(row, *params))(x)]
            if context.options.compile:
                row_grad = torch.func.grad(lambda row: plain(row, *params).sum())
                batched.append(torch.func.vmap(row_grad)(x))
        return batched

    def vmapped() -> Finding:
        """Without vmap's fallback first: an op without a batching rule is then named, and run
        through the fallback (a loop), said."""
        import_dynamo_outside_vmap()
        looped = ""
        try:
            try:
                batched = under_vmap(allowed=False)
            except RuntimeError as error:
                op, refused, _ = str(error).partition(VMAP_FALLBACK_REFUSED)
                if not refused:
                    raise
                batched = under_vmap(allowed=True)
                looped = f"through vmap's fallback, a loop: {op} has no batching rule"
        except Exception as error:
            raise UserError(raised(error)) from error
        y, (grad, *_), _ = forward_backward(subject, plain, x.requires_grad_(), torch.ones_like(x))
        expected = [y, grad] if context.options.compile else [y]
        found = agreement("torch.func.vmap", list(zip(batched, expected)))
        if looped and found.status == Status.PASS:
            return Finding(Group.TRANSFORMS, found.check, Status.INFO, looped)
        return found

    return [Check(Group.TRANSFORMS, "torch.func.vmap", vmapped, Status.UNSUPPORTED)]


def saved_bytes(fn: Tensors, subject: Subject, x: torch.Tensor) -> tuple[float, float]:
    """Bytes per input element that fn saves for backward: all, and beyond its own output.

    The output is kept alive by the next layer's matmul anyway, so only the rest costs memory.
    """
    packed: list[torch.Tensor] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t, lambda t: t):
        y = fn(x.detach().requires_grad_(), *subject.inputs(x))
    output_storage = y.untyped_storage().data_ptr()
    total = sum(t.nbytes for t in packed)
    extra = sum(t.nbytes for t in packed if t.untyped_storage().data_ptr() != output_storage)
    return total / x.numel(), extra / x.numel()


def memory_checks(context: Context) -> list[Check]:
    subject, name = context.subject, "saved bytes per element"

    def check() -> Finding:
        shape = context.probe.shaped((64, 100))
        x = torch.randn(shape, generator=torch.Generator().manual_seed(5))
        total, extra = saved_bytes(subject.call, subject, x)
        detail = f"{total:g} saved, {extra:g} beyond the output"
        if subject.reference is not None:
            try:
                with the_reference(subject):
                    total_ref, extra_ref = saved_bytes(subject.reference, subject, x)
            except ReferenceFailed as error:
                return Finding(Group.MEMORY, name, Status.INFO, f"{detail}; {error}")
            verdict = "no more than" if extra <= extra_ref else "more than"
            detail += (
                f"; reference {total_ref:g}, {extra_ref:g} beyond the output ({verdict} the "
                "reference)"
            )
        return Finding(Group.MEMORY, name, Status.INFO, detail)

    return [Check(Group.MEMORY, name, check)]


def step_time(fn: Tensors, subject: Subject, x: torch.Tensor, calls: int) -> float:
    """Seconds per forward + backward of fn on x."""
    leaf = x.detach().requires_grad_()
    params = subject.inputs(x)
    grad_output = torch.ones_like(x)
    start = time.perf_counter()
    for _ in range(calls):
        y = fn(leaf, *params)
        if y.requires_grad:  # a plain step has no backward to time
            y.backward(grad_output)
    return (time.perf_counter() - start) / calls


def cost_checks(context: Context, repetitions: int = 5) -> list[Check]:
    """Forward + backward time, alternating repetitions, medians: at one element (what a call
    costs beyond its kernels) and at the experiment's hidden layer, with --large at (2048,
    2048); against the reference where there is one; with --compile, at the hidden layer, the
    Function and its reference compiled by inductor too, in the same repetitions (their
    kernels built first, which takes seconds). A spread over half the median is flagged as
    noise."""
    subject, name = context.subject, "cost: forward+backward time"
    sizes = {"(1,)": (1,), "(64, 100)": (64, 100)} | (
        {"(2048, 2048)": (2048, 2048)} if context.options.large else {}
    )
    candidates: dict[str, Callable[..., torch.Tensor]] = {"function": subject.call}
    if subject.reference is not None:
        candidates["reference"] = subject.reference
    report: dict[str, Any] = {}

    def check() -> Learnt:
        generator = torch.Generator().manual_seed(4)
        for label, shape in sizes.items():
            x = context.probe.lifted(torch.randn(shape, generator=generator))
            sides = dict(candidates)
            if "reference" in sides:
                try:
                    with the_reference(subject):
                        step_time(subject.reference, subject, x, 1)
                except ReferenceFailed as error:  # a reference written for 2-D input, say
                    del sides["reference"]
                    report.setdefault("not timed", []).append(f"not timed at {label} ({error})")
            if context.options.compile and label == "(64, 100)":
                compiled, why_not = compiled_sides(subject, x)
                sides |= compiled
                if why_not:
                    report["compiled"] = why_not
            # About 5 ms of calls per repetition, whatever the size.
            with users_code(subject), torch_logs_held():
                once = max(step_time(subject.call, subject, x, 1), 1e-6)
                calls = max(1, min(500, int(0.005 / once)))
                times: dict[str, list[float]] = {side: [] for side in sides}
                for _ in range(repetitions):
                    for side, fn in sides.items():
                        times[side].append(step_time(fn, subject, x, calls))
            report[label] = {f"{side}_us": statistics.median(t) * 1e6 for side, t in times.items()}
            report[label]["spread"] = max(
                (max(t) - min(t)) / statistics.median(t) for t in times.values()
            )
            if "reference" in sides:
                report[label]["ratio"] = (
                    report[label]["function_us"] / report[label]["reference_us"]
                )
        finding = Finding(Group.COST, name, Status.INFO, cost_text(report))
        return Learnt([finding], facts={"cost": report})

    return [Check(Group.COST, name, check, Status.UNSUPPORTED)]


def compiled_sides(
    subject: Subject, x: torch.Tensor
) -> tuple[dict[str, Callable[..., torch.Tensor]], str]:
    """The Function and its reference compiled by inductor, each called once (which builds
    its kernels); none, and why, where compiling the Function raises."""
    sides = {"compiled": torch.compile(subject.plain)}
    if subject.reference is not None:
        sides["compiled_reference"] = torch.compile(subject.reference)
    try:
        with torch_logs_held():
            for fn in sides.values():
                step_time(fn, subject, x, 1)
    except Exception as error:  # the Function under torch.compile: the compile check says why
        return {}, f"not timed compiled: {raised(error)}"
    return sides, ""


def cost_text(report: dict[str, Any]) -> str:
    parts = []
    for size, v in report.items():
        if size in ("(1,)", "compiled", "not timed"):
            continue
        noisy = f", noisy: spread {v['spread']:.0%}" if v["spread"] > 0.5 else ""
        if "ratio" in v:
            times = f"{v['function_us']:.3g} vs {v['reference_us']:.3g} us{noisy}"
            parts.append(f"{v['ratio']:.2f}x the reference's time at {size} ({times})")
        else:
            parts.append(f"{v['function_us']:.3g} us at {size}{noisy}")
        if "compiled_us" in v:
            compiled = f"compiled by inductor {v['compiled_us']:.3g} us at {size}"
            if "compiled_reference_us" in v:
                ratio = v["compiled_us"] / v["compiled_reference_us"]
                compiled += (
                    f", {ratio:.2f}x the compiled reference's ({v['compiled_reference_us']:.3g} us)"
                )
            parts.append(compiled)
    if "compiled" in report:
        parts.append(report["compiled"])
    parts += report.get("not timed", [])
    text = "forward+backward: " + ", ".join(parts)
    single = report.get("(1,)", {})
    if "reference_us" in single and single["function_us"] > single["reference_us"]:
        # At one element the kernels cost nothing: what is left is per-call overhead.
        per_call = single["function_us"] - single["reference_us"]
        text += f"; {per_call:.1f} us more per call (Python and autograd.Function overhead)"
    return text
