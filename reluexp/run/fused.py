"""The fused kernel (reluexp/run/_fused.c) behind checks: it takes tensors, and anything it could
not safely read or write (another dtype or device, strides, sizes, overlapping memory) is a
ValueError, never a crash. Nothing else imports the kernel."""

import torch  # before the kernel: it then runs on the OpenMP runtime torch loaded

try:
    from reluexp.run import _fused
except ImportError:  # built without a C compiler: reluexp does the same work with torch ops
    _fused = None


def serves(*tensors: torch.Tensor) -> bool:
    """The kernel is built and takes these tensors (float32, CPU, contiguous)."""
    return _fused is not None and all(
        t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors
    )


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(f"reluexp.run.fused: {message}")


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


def _apart(start: int, end: int, spans: list[tuple[int, int]]) -> bool:
    return all(end <= other_start or other_end <= start for other_start, other_end in spans)


class Blocks:
    """The metric stream's blocks the kernel writes into, checked once: contiguous CPU tensors
    of their dtypes, one row per recorded step, apart from one another. A call names its row
    (and its weight or layer): addresses follow from the row strides, bounds checked."""

    def __init__(
        self,
        scalars: torch.Tensor,
        norms: torch.Tensor,
        unit_max: torch.Tensor,
        unit_min: torch.Tensor,
        widths: list[int],
    ):
        named = {"scalars": scalars, "norms": norms, "unit_max": unit_max, "unit_min": unit_min}
        dtypes = [torch.float64, torch.float64, torch.float32, torch.float32]
        self.tensors = named  # kept alive while the kernel writes into them
        self.bases = [_block(name, t, dtype) for (name, t), dtype in zip(named.items(), dtypes)]
        self.spans: list[tuple[int, int]] = []
        for name, t in named.items():
            _require(t.dim() == 2 and len(t) == len(scalars), f"{name}: one row per step")
            _require(_apart(*_span(t), self.spans), f"{name} overlaps another block")
            self.spans.append(_span(t))
        _require(scalars.shape[1] == 1 + len(widths), "scalars: the loss and a count per layer")
        _require(unit_max.shape == unit_min.shape and unit_max.shape[1] == sum(widths), "units")
        self.rows, self.weights = len(scalars), norms.shape[1] // 2
        self.row_bytes = [t.stride(0) * t.element_size() for t in named.values()]
        self.widths = widths
        self.starts = [sum(widths[:layer]) for layer in range(len(widths))]

    def address(self, block: int, row: int, column: int) -> int:
        _require(0 <= row < self.rows, f"row {row} of {self.rows}")
        return self.bases[block] + row * self.row_bytes[block] + column * (8 if block < 2 else 4)

    def norm_addresses(self, row: int, weight: int) -> tuple[int, int]:
        """A weight's gradient-norm and weight-norm cells in the row."""
        _require(0 <= weight < self.weights, f"weight {weight} of {self.weights}")
        return self.address(1, row, weight), self.address(1, row, self.weights + weight)

    def layer_addresses(self, row: int, layer: int) -> tuple[int, int, int]:
        """A hidden layer's per-unit max and min cells, and its nonzero count cell, in the row."""
        _require(0 <= layer < len(self.widths), f"layer {layer} of {len(self.widths)}")
        start = self.starts[layer]
        return (
            self.address(2, row, start),
            self.address(3, row, start),
            self.address(0, row, 1 + layer),
        )


def _input(name: str, t: torch.Tensor, numel: int, blocks: Blocks) -> int:
    """A per-call input: a contiguous float32 CPU tensor of numel elements, apart from the
    blocks the call writes. Its address. (Called every step: as few attribute reads as it
    takes.)"""
    if not (t.dtype is torch.float32 and t.is_cpu and t.is_contiguous()):
        raise ValueError(f"reluexp.run.fused: {name} must be a contiguous torch.float32 CPU tensor")
    if t.numel() != numel:
        raise ValueError(f"reluexp.run.fused: {name} has {t.numel()} elements, {numel} expected")
    start = t.data_ptr()
    end = start + 4 * numel
    for block_start, block_end in blocks.spans:
        if block_start < end and start < block_end:
            raise ValueError(f"reluexp.run.fused: {name} overlaps a block it would write")
    return start


class Weight:
    """A float32 CPU weight the kernel updates in place: checked once; each update checks its
    gradient, and that the weight still has the storage it was checked with."""

    def __init__(self, w: torch.Tensor, blocks: Blocks, index: int):
        _require(_fused is not None, "the kernel is not built")
        self.w, self.address, self.numel = w, _block("w", w), w.numel()
        self.span = _span(w)
        _require(_apart(*self.span, blocks.spans), "w overlaps a metric block")
        _require(0 <= index < blocks.weights, f"weight {index} of {blocks.weights}")
        self.blocks, self.index = blocks, index

    def update_with_norms(self, grad: torch.Tensor, lr: float, row: int) -> None:
        """The seed's `w -= lr * grad` in place (bit-identical to torch's), with the norms of
        grad and of the updated w written into the row's cells."""
        if self.w.data_ptr() != self.address or not self.w.is_contiguous():
            raise ValueError("reluexp.run.fused: w's storage changed since it was checked")
        address = _input("grad", grad, self.numel, self.blocks)
        w_start, w_end = self.span
        if address < w_end and w_start < address + 4 * self.numel:
            raise ValueError("reluexp.run.fused: w overlaps grad")
        cells = self.blocks.norm_addresses(row, self.index)
        _fused.update_and_norms(self.address, address, self.numel, lr, *cells)


def layer_counts(
    pre: torch.Tensor, post: torch.Tensor, blocks: Blocks, row: int, layer: int
) -> None:
    """A hidden layer's (rows, units) pre- and post-activations: pre's nonzero count and post's
    per-unit max and min over the rows, into the row's cells of the layer."""
    _require(_fused is not None, "the kernel is not built")
    units = blocks.widths[layer] if 0 <= layer < len(blocks.widths) else -1
    _require(
        pre.dim() == 2 and pre.shape == post.shape and post.shape[1] == units,
        f"pre and post must be one (rows, {units}) shape",
    )
    batch = post.shape[0]
    pre_address = _input("pre", pre, batch * units, blocks)
    post_address = _input("post", post, batch * units, blocks)
    cells = blocks.layer_addresses(row, layer)
    _fused.layer_counts(pre_address, post_address, batch, units, *cells)
