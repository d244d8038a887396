"""reluexp's optional kernel: the seed's update with its two squared norms, and a hidden layer's
counters, each in one pass (reluexp_fast/_kernel.c says why). It takes tensors; anything it
could not safely read or write (another dtype or device, strides, sizes, overlapping memory) is
a ValueError, never a crash. reluexp uses it when it is installed (pip install ./fast)."""

import torch  # before the kernel: it then runs on the OpenMP runtime torch loaded

from reluexp_fast import _kernel


def serves(*tensors: torch.Tensor) -> bool:
    """The kernel takes these tensors: float32, CPU, contiguous."""
    return all(map(_served, tensors))


def _served(t: torch.Tensor) -> bool:
    # Attributes, not t.device (an object made on every read): checked a few times a step.
    return t.dtype is torch.float32 and t.is_cpu and t.is_contiguous()


def _address(name: str, t: torch.Tensor, numel: int) -> int:
    if not (isinstance(t, torch.Tensor) and _served(t)):
        raise ValueError(f"reluexp_fast: {name} must be a contiguous torch.float32 CPU tensor")
    if t.numel() != numel:
        raise ValueError(f"reluexp_fast: {name} has {t.numel()} elements, {numel} expected")
    return t.data_ptr()


def update_and_norms(w: torch.Tensor, grad: torch.Tensor, lr: float) -> tuple[float, float]:
    """The seed's `w -= lr * grad` in place (bit-identical to torch's), and the squared norms
    of grad and of the updated w, summed in double."""
    numel = w.numel() if isinstance(w, torch.Tensor) else -1
    w_start, g_start = _address("w", w, numel), _address("grad", grad, numel)
    if g_start < w_start + 4 * numel and w_start < g_start + 4 * numel:
        raise ValueError("reluexp_fast: w overlaps grad")
    return _kernel.update_and_norms(w_start, g_start, numel, lr)


def layer_counts(pre: torch.Tensor, post: torch.Tensor) -> tuple[int, int]:
    """A hidden layer's (rows, units) pre- and post-activations: pre's nonzero count, and how
    many units are nonzero in some row (NaN counts as nonzero, -0.0 does not)."""
    if not (isinstance(pre, torch.Tensor) and isinstance(post, torch.Tensor)):
        raise ValueError("reluexp_fast: pre and post must be tensors")
    if pre.dim() != 2 or pre.shape != post.shape:
        raise ValueError(
            f"reluexp_fast: pre and post must be one (rows, units) shape, not "
            f"{tuple(pre.shape)} and {tuple(post.shape)}"
        )
    rows, units = post.shape
    pre_start = _address("pre", pre, rows * units)
    post_start = _address("post", post, rows * units)
    return _kernel.layer_counts(pre_start, post_start, rows, units)
