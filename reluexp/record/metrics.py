"""Per-step metrics: a few ops on the device per step, brought to the host in blocks."""

import itertools
import math
import time
from dataclasses import dataclass

import torch

from reluexp.record import tags
from reluexp.run import fused

# Rows wait on the device and reach the host in blocks: at most this many steps, ...
FLUSH_ROWS = 256
# ... or this many seconds, so a slow run still streams.
FLUSH_SECONDS = 2.0


def norm_into(tensor: torch.Tensor, cell: torch.Tensor) -> None:
    """||tensor|| into the float64 `cell`, summed in double (a float32's square is exact there):
    the same value as the fused kernel's, to far below float32's resolution. No host sync."""
    torch.linalg.vector_norm(tensor, dtype=torch.float64, out=cell)


@dataclass
class MetricRows:
    """A flushed block: the steps, their wall times and one host row (tags.streamed order)
    each, with each hidden layer's count of live units."""

    steps: list[int]
    times: list[float]
    rows: list[list[float]]
    live_units: list[list[int]]


class MetricRow:
    """One step's cells in the stream's device blocks (views made once), filled in this order:
    `record_activations` after the backward, `record_grad_norms` before the update and
    `record_weight_norms` after it (or update.WeightUpdate filling both in its fused pass).

    On a float32 CPU run with the fused kernel built (reluexp/fused.py), a hidden layer is read
    once for its counters; the torch ops do the same work on any device and dtype."""

    def __init__(
        self,
        index: int,
        scalars: torch.Tensor,
        norms: torch.Tensor,
        unit_max: list[torch.Tensor],
        unit_min: list[torch.Tensor],
        param_cells: torch.Tensor,
        kernel_blocks: fused.Blocks | None,
    ):
        self.index = index
        self.loss_cell, *self.nonzero_cells = scalars
        self.param_cells = param_cells
        half = len(norms) // 2
        self.grad_cells, self.weight_cells = list(norms[:half]), list(norms[half:])
        self.max_cells, self.min_cells = unit_max, unit_min
        # The fused kernel's view of the same blocks, checked once (reluexp/fused.py).
        self.kernel_blocks = kernel_blocks

    def record_activations(self, loss: torch.Tensor, hidden: list) -> None:
        """The loss; each hidden layer's nonzero pre-activations and per-unit extremes."""
        self.loss_cell.copy_(loss)  # 0-dim copies: a third of the time of a mixed-dtype stack
        if self.kernel_blocks is not None:
            for layer, (pre, post) in enumerate(hidden):
                blocks = self.kernel_blocks
                fused.layer_counts(pre.contiguous(), post.contiguous(), blocks, self.index, layer)
            return
        for (pre, post), nonzero, unit_max, unit_min in zip(
            hidden, self.nonzero_cells, self.max_cells, self.min_cells
        ):
            nonzero.copy_(torch.count_nonzero(pre))
            torch.amax(post, dim=0, out=unit_max)
            torch.amin(post, dim=0, out=unit_min)

    def record_grad_norms(self, weights: list[torch.Tensor]) -> None:
        for cell, w in zip(self.grad_cells, weights):
            norm_into(w.grad, cell)

    def record_weight_norms(self, weights: list[torch.Tensor]) -> None:
        for cell, w in zip(self.weight_cells, weights):
            norm_into(w.detach(), cell)

    def record_activation_params(self, params: list[torch.Tensor]) -> None:
        """A scalar parameter's value; a tensor's norm, mean, min, max (tags.activation_params)."""
        column = 0
        for p in params:
            p = p.detach()
            if p.numel() == 1:
                self.param_cells[column].copy_(p.reshape(()))
                column += 1
                continue
            norm_into(p, self.param_cells[column])
            for offset, statistic in enumerate((p.mean(), p.min(), p.max()), 1):
                self.param_cells[column + offset].copy_(statistic)
            column += 4


class MetricStream:
    """Records every logged step's metrics on the device; hands them to the host in blocks.

    A step writes its row in place into preallocated device blocks, through the views of a
    MetricRow (at the reference size an op costs more in dispatch than in arithmetic, so a step
    runs as few as it can, allocates nothing and keeps nothing alive):
    - `scalars` (float64, exact for both): the loss and each layer's nonzero pre-activations;
    - `norms` (float64): gradient and weight norms;
    - `unit_max`, `unit_min` (the run's dtype): each hidden unit's extreme activations over the
      batch (two reductions without a temporary: a third of abs+amax's time at N=4096, H=4096).
    A flush counts the live units of the whole block at once and reads each block with one
    copy; the total norm, the dead fraction and the exact zeros are derived on the host. The
    weight norms are those of the weights the step produced.
    """

    def __init__(
        self,
        batch: int,
        widths: list[int],
        weights: list[torch.Tensor],
        activation_params: dict[str, torch.Tensor] | None = None,
    ):
        self.batch = batch
        self.widths = widths
        self.num_weights = len(weights)
        sizes = {name: p.numel() for name, p in (activation_params or {}).items()}
        self.tags = tags.streamed(self.num_weights, sizes)
        device, dtype = weights[0].device, weights[0].dtype
        use_kernel = fused.serves(weights[0])
        exact = {"dtype": torch.float64, "device": device}
        self.scalars = torch.zeros(FLUSH_ROWS, 1 + len(widths), **exact)
        self.norms = torch.zeros(FLUSH_ROWS, 2 * self.num_weights, **exact)
        self.unit_max = torch.zeros(FLUSH_ROWS, sum(widths), dtype=dtype, device=device)
        self.unit_min = torch.zeros(FLUSH_ROWS, sum(widths), dtype=dtype, device=device)
        self.params = torch.zeros(FLUSH_ROWS, len(tags.activation_params(sizes)), **exact)
        bounds = [0, *itertools.accumulate(widths)]
        self.layer_columns = list(zip(bounds, bounds[1:]))
        self.kernel_blocks = (
            fused.Blocks(self.scalars, self.norms, self.unit_max, self.unit_min, widths)
            if use_kernel
            else None
        )
        self.rows = [
            MetricRow(
                i,
                self.scalars[i],
                self.norms[i],
                [self.unit_max[i, a:b] for a, b in self.layer_columns],
                [self.unit_min[i, a:b] for a, b in self.layer_columns],
                self.params[i],
                self.kernel_blocks,
            )
            for i in range(FLUSH_ROWS)
        ]
        self.steps: list[int] = []
        self.times: list[float] = []
        self.last_flush = time.perf_counter()

    def next_row(self) -> MetricRow:
        """The cells of the row the next recorded step fills; `end_row` completes it."""
        return self.rows[len(self.steps)]

    def end_row(self, step: int) -> None:
        self.steps.append(step)
        self.times.append(time.time())

    @property
    def due(self) -> bool:
        """The block is full, or old enough that a slow run should stream what it has."""
        full = len(self.steps) == FLUSH_ROWS
        return full or time.perf_counter() - self.last_flush > FLUSH_SECONDS

    def host_row(
        self, scalars: list[float], norms: list[float], alive: list[int], params: list[float]
    ) -> list[float]:
        """A device row as the values of self.tags."""
        k = self.num_weights
        loss, nonzero_pre = scalars[0], scalars[1:]
        grad_norms, weight_norms = norms[:k], norms[k:]
        exact_zeros = sum(self.batch * h - int(nz) for h, nz in zip(self.widths, nonzero_pre))
        dead_fraction = 1 - sum(alive) / sum(self.widths)
        total_grad_norm = math.sqrt(sum(v * v for v in grad_norms))
        return [
            loss,
            *grad_norms,
            total_grad_norm,
            *weight_norms,
            dead_fraction,
            exact_zeros,
            *params,
        ]

    def flush(self) -> MetricRows:
        """The recorded rows, with one host copy per block; the blocks are then free again."""
        n = len(self.steps)
        if n == 0:
            return MetricRows([], [], [], [])
        # A unit is alive when some example of the batch gives it a nonzero activation.
        live = (self.unit_max[:n] != 0) | (self.unit_min[:n] != 0)
        alive = torch.stack(
            [torch.count_nonzero(live[:, a:b], dim=1) for a, b in self.layer_columns], dim=1
        )
        live_units = alive.tolist()
        device_rows = (self.scalars[:n], self.norms[:n], self.params[:n])
        scalars, norms, params = (block.tolist() for block in device_rows)
        rows = [self.host_row(*row) for row in zip(scalars, norms, live_units, params)]
        block = MetricRows(list(self.steps), list(self.times), rows, live_units)
        self.steps.clear()
        self.times.clear()
        self.last_flush = time.perf_counter()
        return block
