"""The compiled world: a torch.library custom op tested as torch.library.opcheck tests it (its
declared mutation, its fake kernel against the real output, its autograd registration), and,
in a stage of its own that --compile (compile=True) asks for, every Function under
torch.compile(fullgraph=True): a graph break named at the user's line, a failure to compile
said as such, values and gradients as eager's (its compiled time is the cost check's, beside
its eager one). Importing dynamo alone takes about a second, most of a default check's time: a
default check does not compile."""

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import torch

from reluexp.lab.calls import UserError, computed_in, forward_backward, raised
from reluexp.lab.context import Check, Context, Learnt
from reluexp.lab.findings import Finding, Group, Status
from reluexp.lab.judge import dtype_name
from reluexp.lab.subject import Subject

# opcheck's tests, by the name its report gives each, and what each one tests.
OPCHECK = {
    "test_schema": "its schema's declared mutation (mutates_args)",
    "test_faketensor": "its fake kernel (register_fake) against the real output",
    "test_autograd_registration": "its autograd registration (register_autograd)",
    "test_aot_dispatch_dynamic": "forward and backward traced as torch.compile traces them",
}
# Where torch and reluexp live: a graph break's line is the first of the user's code.
LIBRARIES = (Path(torch.__file__).parent, Path(__file__).parent.parent)
# Within this many units of the dtype of eager's values, a compiled result is eager's.
COMPILED_UNITS = 16


def user_line(error: BaseException, logged: list[str]) -> str:
    """`file.py:12` of the innermost frame outside torch and reluexp that dynamo names in its
    report ('from user code: File ..., line N') or its log (a graph break's warning), else
    ''."""
    text = "\n".join([*(str(e) for e in (error, error.__cause__) if e is not None), *logged])
    frames = re.findall(r'File "([^"]+)", line (\d+)', text)
    users = [(f, n) for f, n in frames if not any(Path(f).is_relative_to(p) for p in LIBRARIES)]
    return f"{users[-1][0]}:{users[-1][1]}" if users else ""


def opchecked(context: Context) -> Finding:
    """torch.library.opcheck on the lab's shapes in float32 and float64: the first test that
    fails, in one line naming what it tests."""
    subject, name = context.subject, "custom op (opcheck)"
    if not hasattr(torch.library, "opcheck"):
        return Finding(
            Group.COMPILE, name, Status.UNSUPPORTED, "torch.library.opcheck came in torch 2.4"
        )
    generator = torch.Generator().manual_seed(11)
    for dtype in (torch.float32, torch.float64):
        for shape in ((4, 5), (64, 100)):
            x = context.probe.lifted(context.sample(shape, generator).to(dtype)).requires_grad_()
            result = torch.library.opcheck(
                subject.op, (x, *subject.inputs(x)), raise_exception=False
            )
            failed = [test for test in OPCHECK if result.get(test, "SUCCESS") != "SUCCESS"]
            failed += [
                t for t, outcome in result.items() if outcome != "SUCCESS" and t not in OPCHECK
            ]
            if failed:
                test = failed[0]
                detail = (
                    f"{OPCHECK.get(test, test)} fails ({test}, a {dtype_name(dtype)} "
                    f"{tuple(x.shape)} input): {raised(result[test]).removeprefix('raised ')}"
                )
                return Finding(Group.COMPILE, name, Status.WRONG, detail)
    return Finding(Group.COMPILE, name, Status.PASS)


# The lists of every torch_logs_held active here, outermost first: a record one holds is
# kept in each (a handler stops at the first filter that refuses a record).
HELD: ContextVar[tuple[list[str], ...]] = ContextVar("torch_logs_held", default=())


@contextmanager
def torch_logs_held() -> Iterator[list[str]]:
    """torch's own log records kept off the terminal while the lab runs (one failed trace
    logs a 68-line traceback; a graph break, a warning per frame), their messages kept for
    the finding to say what matters of them (warnings and worse), here and in any hold around
    this one. torch gives each of its loggers a handler of its own (none propagates to the
    root logger's), so each is held."""
    held: list[str] = []
    token = HELD.set((*HELD.get(), held))

    def hold(record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:  # not the structured trace's debug records
            for kept in HELD.get():
                kept.append(record.getMessage())
        return False

    handlers = {
        handler
        for name, found in logging.root.manager.loggerDict.items()
        if (name == "torch" or name.startswith("torch.")) and isinstance(found, logging.Logger)
        for handler in found.handlers
    }
    for handler in handlers:
        handler.addFilter(hold)
    try:
        yield held
    finally:
        for handler in handlers:
            handler.removeFilter(hold)
        HELD.reset(token)


def fails_when_compiled(subject: Subject, x: torch.Tensor, g: torch.Tensor) -> str:
    """Where fullgraph refused the Function: what compiling it as compile=true training does
    (graph breaks allowed) raises, or '' where that runs (the refusal was a graph break)."""
    torch.compiler.reset()
    try:
        forward_backward(subject, torch.compile(subject.plain, backend="eager"), x, g)
    except UserError as error:
        return str(error)
    return ""


def compiled(context: Context) -> Finding | Learnt:
    """Forward and backward compiled whole (fullgraph) on the lab's inputs, against eager.
    Dynamo's own `eager` backend: it traces what inductor would be given, graph breaks
    included, in a tenth of aot_eager's time (0.13 s against 1.2 s for MyReLU, most of it
    importing AOTAutograd); a custom op's AOT tracing is opcheck's."""
    with torch_logs_held() as logged:
        return compiled_against_eager(context, logged)


def compiled_against_eager(context: Context, logged: list[str]) -> Finding | Learnt:
    subject, name = context.subject, "torch.compile fullgraph"
    generator = torch.Generator().manual_seed(12)
    torch.compiler.reset()
    fn = torch.compile(subject.plain, fullgraph=True, backend="eager")
    for dtype in (torch.float32, torch.float64):
        x = context.probe.lifted(context.sample((64, 100), generator).to(dtype)).requires_grad_()
        g = torch.randn(x.shape, generator=generator, dtype=torch.float64).to(dtype)
        try:
            y, grads, _ = forward_backward(subject, fn, x, g)
        except UserError as error:
            cause = error.__cause__ or error
            if not compiles_at_all():
                detail = f"torch.compile cannot run here ({raised(cause)}): not checked"
                return Learnt([Finding(Group.COMPILE, name, Status.INFO, detail)])
            failure = fails_when_compiled(subject, x, g)
            where = user_line(cause, logged)
            at = f" at {where}" if where else ""
            if failure:
                detail = (
                    f"{subject.name} fails under torch.compile{at} ({dtype_name(dtype)} "
                    f"{tuple(x.shape)}: {failure}): compile=true training fails on it; it runs "
                    "in eager"
                )
                finding = Finding(Group.COMPILE, name, Status.UNSUPPORTED, detail)
                return Learnt([finding], notes=[f"unsupported: {detail}"])
            # Dynamo's warning names the break (`Graph break from Tensor.item()`) where its
            # fullgraph error is an internal one.
            said = [line for text in logged for line in text.splitlines() if "Graph break" in line]
            reason = said[0].split(", consider")[0].strip() if said else str(error)
            detail = (
                f"{subject.name} breaks torch.compile's graph{at} ({dtype_name(dtype)} "
                f"{tuple(x.shape)}: {reason}); compiled, it runs in pieces, that part in eager"
            )
            finding = Finding(Group.COMPILE, name, Status.INFO, detail)
            return Learnt([finding], notes=[f"info: {detail}"])
        eager, eager_grads, _ = forward_backward(subject, subject.plain, x, g)
        for what, got, want in [("forward", y, eager), ("backward", grads[0], eager_grads[0])]:
            if got is None or want is None:
                continue
            # In the dtype it computes in: a float32 kernel's rounding inside a float64 call.
            rounding = computed_in(want.dtype, context.probe.float64_computed_in)
            units = COMPILED_UNITS * torch.finfo(rounding).eps
            if not torch.allclose(got, want, rtol=units, atol=units, equal_nan=True):
                apart = (got.double() - want.double()).abs().nan_to_num(nan=float("inf")).max()
                detail = (
                    f"compiled, its {what} differs from eager's by up to {apart.item():.3g} "
                    f"({dtype_name(dtype)} {tuple(x.shape)}): beyond {dtype_name(rounding)} "
                    "rounding"
                )
                return Finding(Group.COMPILE, name, Status.WRONG, detail)
    return Finding(Group.COMPILE, name, Status.PASS)


def compiles_at_all() -> bool:
    """torch.compile works here at all (a Python it supports, its backends importable)."""
    torch.compiler.reset()
    try:
        torch.compile(lambda v: v + 1, fullgraph=True, backend="eager")(torch.ones(2))
    except Exception:
        return False
    return True


# The finding of a check that did not compile.
NOT_COMPILED = "not checked: --compile (compile=True) checks the Function under torch.compile"


def custom_op_checks(context: Context) -> list[Check]:
    """opcheck, for a custom op."""
    if context.subject.op is None:
        return []
    return [Check(Group.COMPILE, "custom op (opcheck)", lambda: opchecked(context))]


def compile_checks(context: Context) -> list[Check]:
    """With --compile: the fullgraph compile (the compiled cost is the cost check's); without,
    a line that says it was not run."""
    if not context.options.compile:
        skipped = Finding(Group.COMPILE, "torch.compile fullgraph", Status.INFO, NOT_COMPILED)
        return [Check(Group.COMPILE, "torch.compile fullgraph", lambda: skipped)]
    return [Check(Group.COMPILE, "torch.compile fullgraph", lambda: compiled(context), Status.INFO)]
