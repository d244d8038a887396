"""The fused kernel (reluexp/_fused.c) behind checks: it takes tensors, and anything it could
not safely read or write (another dtype or device, strides, sizes, overlapping memory) is a
ValueError, never a crash. Nothing else imports the kernel."""

import torch  # before the kernel: it then runs on the OpenMP runtime torch loaded

try:
    from reluexp import _fused
except ImportError:  # built without a C compiler: reluexp does the same work with torch ops
    _fused = None


def serves(*tensors: torch.Tensor) -> bool:
    """The kernel is built and takes these tensors (float32, CPU, contiguous)."""
    return _fused is not None and all(
        t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors
    )


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"reluexp.fused: {message}")


def _block(name: str, t: torch.Tensor, dtype: torch.dtype = torch.float32) -> int:
    """The address of a contiguous CPU tensor of the dtype."""
    _require(
        isinstance(t, torch.Tensor)
        and t.dtype == dtype
        and t.device.type == "cpu"
        and t.is_contiguous(),
        f"{name} must be a contiguous {dtype} CPU tensor",
    )
    return t.data_ptr()


def _span(t: torch.Tensor) -> tuple[int, int]:
    return t.data_ptr(), t.data_ptr() + t.nbytes


def _disjoint(written: dict[str, torch.Tensor], read: dict[str, torch.Tensor]) -> None:
    """What the kernel writes overlaps nothing else it touches (what it reads may overlap)."""
    others = list(written.items()) + list(read.items())
    for i, (name, tensor) in enumerate(written.items()):
        start, end = _span(tensor)
        for other, other_tensor in others[i + 1 :]:
            other_start, other_end = _span(other_tensor)
            _require(end <= other_start or other_end <= start, f"{name} overlaps {other}")


def update_with_norms(
    w: torch.Tensor,
    grad: torch.Tensor,
    lr: float,
    grad_norm: torch.Tensor,
    weight_norm: torch.Tensor,
) -> None:
    """The seed's `w -= lr * grad` in place (bit-identical to torch's), with the norms of grad
    and of the updated w written into the float64 one-element tensors."""
    _require(_fused is not None, "the kernel is not built")
    addresses = [_block("w", w), _block("grad", grad)]
    addresses += [
        _block(n, t, torch.float64)
        for n, t in (("grad_norm", grad_norm), ("weight_norm", weight_norm))
    ]
    _require(grad.numel() == w.numel(), f"grad has {grad.numel()} elements, w {w.numel()}")
    _require(grad_norm.numel() == weight_norm.numel() == 1, "the norms are one element each")
    _disjoint({"w": w, "grad_norm": grad_norm, "weight_norm": weight_norm}, {"grad": grad})
    w_address, grad_address, grad_norm_address, weight_norm_address = addresses
    _fused.update_and_norms(
        w_address, grad_address, w.numel(), lr, grad_norm_address, weight_norm_address
    )


def layer_counts(
    pre: torch.Tensor,
    post: torch.Tensor,
    unit_max: torch.Tensor,
    unit_min: torch.Tensor,
    nonzero: torch.Tensor,
) -> None:
    """A hidden layer's (rows, units) pre- and post-activations: pre's nonzero count into the
    float64 one-element `nonzero`, post's per-unit max and min over the rows into (units,)."""
    _require(_fused is not None, "the kernel is not built")
    _require(
        pre.dim() == 2 and pre.shape == post.shape, "pre and post must be one (rows, units) shape"
    )
    rows, units = post.shape
    _require(
        unit_max.shape == unit_min.shape == (units,), f"unit_max and unit_min must be ({units},)"
    )
    _require(nonzero.numel() == 1, "nonzero is one element")
    addresses = [_block("pre", pre), _block("post", post), _block("unit_max", unit_max)]
    addresses += [_block("unit_min", unit_min), _block("nonzero", nonzero, torch.float64)]
    _disjoint(
        {"unit_max": unit_max, "unit_min": unit_min, "nonzero": nonzero}, {"pre": pre, "post": post}
    )
    pre_address, post_address, max_address, min_address, nonzero_address = addresses
    _fused.layer_counts(
        pre_address, post_address, rows, units, max_address, min_address, nonzero_address
    )
