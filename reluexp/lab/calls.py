"""Running the user's code: what it raises, or returns that cannot be right, is a UserError in
one line naming the user's code; anything else that goes wrong inside a check is the lab's own
error, kept with its traceback."""

import re
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from reluexp.lab.subject import Subject, Tensors


class UserError(Exception):
    """The user's Function raised, or returned what cannot be right: a finding about it."""


class ReferenceFailed(UserError):
    """The reference raised (a built-in written for 2-D input given a 1-D one): the comparisons
    with it cannot run, which says nothing of the Function."""


def describe(value: object) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)}"
    return "None" if value is None else f"a {type(value).__name__}"


def autograd_message(message: str, name: str) -> str:
    """autograd's words for the user's backward (`Function MyReLUBackward returned ...`) as the
    user wrote it (`MyReLU.backward returned ...`); compile's node is the user's Function too."""
    message = re.sub(r"(?:[Ff]unction )?(\w+)Backward\b", r"\1.backward", message)
    return re.sub(r"ApplyTemplate\.backward", f"{name}.backward", message)


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


@contextmanager
def users_code(subject: Subject) -> Iterator[None]:
    """Around a call into the user's code (a forward, autograd running a backward, the
    reference, the surrogate): what it raises becomes a UserError."""
    try:
        yield
    except UserError:
        raise
    except Exception as error:
        raise UserError(autograd_message(raised(error), subject.name)) from error


@contextmanager
def the_reference(subject: Subject) -> Iterator[None]:
    """Around a call into the reference: what it raises is said as the reference's."""
    try:
        yield
    except ReferenceFailed:
        raise
    except Exception as error:
        message = str(error) if isinstance(error, UserError) else raised(error)
        raise ReferenceFailed(f"the reference {subject.reference_path} {message}") from error


def forward_backward(
    subject: Subject, fn: Tensors, x: torch.Tensor, grad_output: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor | None], object]:
    """fn(x, *params), its gradients for x and the params for upstream grad_output, and what
    the Function's backward returned for x before autograd cast it (for fn = subject.call). A
    function without a graph has gradient 0; a return that cannot be right is a UserError."""
    # detach() keeps x's strides: a non-contiguous input stays non-contiguous.
    leaf = x.detach().requires_grad_(x.requires_grad)
    params = subject.inputs(x)
    subject.record.take()
    with users_code(subject):
        y = fn(leaf, *params)
    if not isinstance(y, torch.Tensor):
        raise UserError(f"forward returned {describe(y)}, not a tensor")
    inputs = (leaf, *params)
    wanted = [t for t in inputs if t.requires_grad]
    if not y.requires_grad or not wanted:
        zeros = [torch.zeros_like(t) if t.requires_grad else None for t in inputs]
        return y.detach(), zeros, None
    with users_code(subject):
        found = iter(torch.autograd.grad(y, wanted, grad_output.to(y.dtype), allow_unused=True))
    # One per input, None for an input that wants no gradient.
    grads = [next(found) if t.requires_grad else None for t in inputs]
    if x.requires_grad and grads[0] is None:
        raise UserError("backward returned None for the input")
    return y.detach(), grads, subject.record.take()


def computed_in(*dtypes: torch.dtype) -> torch.dtype:
    """The least precise of the dtypes a result went through."""
    return max(dtypes, key=lambda d: torch.finfo(d).eps)
