"""Per-step metrics: a few torch ops on the device per logged step, brought to the host in blocks
(one stack and one copy per block: no host sync between flushes)."""

import time
from dataclasses import dataclass, field

import torch

from reluexp.record import tags

try:
    import reluexp_fast
except ImportError:  # the optional kernel (pip install ./fast): torch ops do the same work
    reluexp_fast = None

# Rows wait on the device and reach the host in blocks: at most this many steps, ...
FLUSH_ROWS = 256
# ... or this many seconds, so a slow run still streams.
FLUSH_SECONDS = 2.0


def flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as one dimension, a view where its layout allows one (a weight's view,
    taken once, follows its in-place updates)."""
    tensor = tensor.detach()
    return tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1)


def squared_norm(vector: torch.Tensor) -> torch.Tensor:
    """||vector||^2 (a `flat` tensor) as one BLAS dot product in its dtype: at the reference
    size half the time of torch.linalg.vector_norm, whose reduction is not a BLAS call
    (benchmarks/overhead.py)."""
    return torch.dot(vector, vector)


@dataclass
class MetricRows:
    """A flushed block: the steps, their wall times and one host row (tags.streamed order)
    each, with each hidden layer's count of live units."""

    steps: list[int]
    times: list[float]
    rows: list[list[float]]
    live_units: list[list[int]]


@dataclass
class MetricRow:
    """One logged step's values, in the order they are recorded: `record_activations` after
    the backward, `record_grad_norms` before the update and `record_weight_norms` after it (or
    `record_norms` from the kernel's update), `record_activation_params` last.

    Torch ops keep them on the device until the flush. A kernel row (reluexp_fast installed, a
    float32 CPU run with the seed's update) holds host numbers: the kernel reads a hidden layer
    once for its counters, and the update takes both norms in its own pass."""

    kernel: bool = False
    # The loss, the squared norms and the activation's parameter statistics (tags.streamed's
    # order, squared norms in place of norms).
    values: list = field(default_factory=list)
    # Per hidden layer: its count of nonzero pre-activations, and each unit's extremes over
    # the batch (two reductions: a third of the time of one count per unit); a kernel row
    # holds the counts as ints and, in place of the extremes, the layer's live units.
    nonzero: list = field(default_factory=list)
    unit_max: list[torch.Tensor] = field(default_factory=list)
    unit_min: list[torch.Tensor] = field(default_factory=list)
    alive: list[int] = field(default_factory=list)

    def record_activations(self, loss: torch.Tensor, hidden: list) -> None:
        if self.kernel:
            self.values.append(loss.item())  # a CPU run: no device to wait for
            for pre, post in hidden:
                nonzero, alive = reluexp_fast.layer_counts(pre.contiguous(), post.contiguous())
                self.nonzero.append(nonzero)
                self.alive.append(alive)
            return
        self.values.append(loss.detach())
        for pre, post in hidden:
            self.nonzero.append(torch.count_nonzero(pre))
            self.unit_max.append(torch.amax(post, dim=0))
            self.unit_min.append(torch.amin(post, dim=0))

    def record_grad_norms(self, weights: list[torch.Tensor]) -> None:
        self.values += [squared_norm(flat(w.grad)) for w in weights]

    def record_weight_norms(self, flat_weights: list[torch.Tensor]) -> None:
        """The weights as `flat` views, taken once per run: at the reference size an op costs
        more in dispatch than in arithmetic."""
        self.values += [squared_norm(w) for w in flat_weights]

    def record_norms(self, grad_squares: list[float], weight_squares: list[float]) -> None:
        """The kernel's squared norms, taken in its update."""
        self.values += [*grad_squares, *weight_squares]

    def record_activation_params(self, params: list[torch.Tensor]) -> None:
        """A scalar parameter's value; a tensor's squared norm, mean, min, max
        (tags.activation_params)."""
        for p in params:
            p = p.detach()
            if p.numel() == 1:  # a copy: the parameter changes in place at the next update
                statistics = [p.reshape(()).clone()]
            else:
                statistics = [squared_norm(flat(p)), p.mean(), p.min(), p.max()]
            self.values += [v.item() for v in statistics] if self.kernel else statistics


class MetricStream:
    """Records every logged step's metrics on the device; hands them to the host in blocks.

    At the reference size an op costs more in dispatch than in arithmetic: a logged step runs
    a count and two reductions per hidden layer and one dot product per weight before its
    update and one after, and keeps their results; a flush stacks the block's rows and reads
    them with one copy. The weight norms are those of the weights the step produced."""

    def __init__(
        self,
        batch: int,
        widths: list[int],
        num_weights: int,
        param_sizes: dict[str, int],
        kernel: bool = False,
    ):
        self.batch = batch
        # Its rows are kernel rows (MetricRow).
        self.kernel = kernel
        self.widths = widths
        self.num_weights = num_weights
        self.tags = tags.streamed(num_weights, param_sizes)
        # Which of a row's values are squared norms: the weights' and a tensor parameter's.
        self.squared = [False] + [True] * (2 * num_weights)
        for size in param_sizes.values():
            self.squared += [False] if size == 1 else [True, False, False, False]
        self.rows: list[MetricRow] = []
        self.steps: list[int] = []
        self.times: list[float] = []
        self.last_flush = time.perf_counter()

    def new_row(self) -> MetricRow:
        return MetricRow(kernel=self.kernel)

    def end_row(self, step: int, row: MetricRow) -> None:
        self.rows.append(row)
        self.steps.append(step)
        self.times.append(time.time())

    @property
    def due(self) -> bool:
        """The block is full, or old enough that a slow run should stream what it has."""
        full = len(self.steps) == FLUSH_ROWS
        return full or time.perf_counter() - self.last_flush > FLUSH_SECONDS

    def flush(self) -> MetricRows:
        """The recorded rows on the host, in self.tags' order, each kind stacked and copied
        once per block (at a flush, ops cost more in dispatch than in arithmetic too); the
        stream is then empty."""
        rows = self.rows
        if not rows:
            return MetricRows([], [], [], [])
        k = self.num_weights
        values, nonzero, alive = self.kernel_block() if self.kernel else self.device_block()
        squared = torch.tensor(self.squared, device=values.device)
        total_grad_norm = values[:, 1 : 1 + k].sum(dim=1, keepdim=True).sqrt()
        values = torch.where(squared, values.sqrt(), values)
        exact_zeros = (self.batch * sum(self.widths) - nonzero.sum(dim=1, keepdim=True)).double()
        dead_fraction = 1 - alive.sum(dim=1, keepdim=True).double() / sum(self.widths)
        host = torch.cat(
            [
                values[:, : 1 + k],
                total_grad_norm,
                values[:, 1 + k : 1 + 2 * k],
                dead_fraction,
                exact_zeros,
                values[:, 1 + 2 * k :],
            ],
            dim=1,
        )
        block = MetricRows(list(self.steps), list(self.times), host.tolist(), alive.tolist())
        self.rows, self.steps, self.times = [], [], []
        self.last_flush = time.perf_counter()
        return block

    def device_block(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows' values (float64: exact for float32 values and small counts), nonzero
        counts and live units per layer, each kind stacked once."""
        rows, layers = self.rows, len(self.widths)
        values = torch.stack([v for row in rows for v in row.values]).double()
        nonzero = torch.stack([c for row in rows for c in row.nonzero]).reshape(len(rows), layers)
        # A unit is alive when some example of the batch gives it a nonzero activation (NaN
        # included: a diverging run's units are not reported dead).
        alive = torch.stack(
            [
                torch.count_nonzero(
                    (torch.stack([row.unit_max[layer] for row in rows]) != 0)
                    | (torch.stack([row.unit_min[layer] for row in rows]) != 0),
                    dim=1,
                )
                for layer in range(layers)
            ],
            dim=1,
        )
        return values.reshape(len(rows), -1), nonzero, alive

    def kernel_block(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """device_block's three, from kernel rows' host numbers."""
        values = torch.tensor([row.values for row in self.rows], dtype=torch.float64)
        nonzero = torch.tensor([row.nonzero for row in self.rows])
        return values, nonzero, torch.tensor([row.alive for row in self.rows])
