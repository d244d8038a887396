"""Per-step metrics: a few torch ops on the device per logged step, brought to the host in blocks
(one stack and one copy per block: no host sync between flushes)."""

import time
from dataclasses import dataclass, field

import torch

from reluexp.record import tags

# Rows wait on the device and reach the host in blocks: at most this many steps, ...
FLUSH_ROWS = 256
# ... or this many seconds, so a slow run still streams.
FLUSH_SECONDS = 2.0


def squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """||tensor||^2 as one BLAS dot product in the tensor's dtype: at the reference size half
    the time of torch.linalg.vector_norm, whose reduction is not a BLAS call
    (benchmarks/overhead.py)."""
    flat = tensor.detach().view(-1) if tensor.is_contiguous() else tensor.detach().reshape(-1)
    return torch.dot(flat, flat)


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
    """One logged step's values, still on the device, in the order they are recorded:
    `record_activations` after the backward, `record_grad_norms` before the update and
    `record_weight_norms` after it, `record_activation_params` last."""

    # The loss, the squared norms and the activation's parameter statistics (tags.streamed's
    # order, squared norms in place of norms).
    values: list[torch.Tensor] = field(default_factory=list)
    # Per hidden layer: its nonzero pre-activations, and each unit's extremes over the batch
    # (two reductions: a third of the time of one count per unit).
    nonzero: list[torch.Tensor] = field(default_factory=list)
    unit_max: list[torch.Tensor] = field(default_factory=list)
    unit_min: list[torch.Tensor] = field(default_factory=list)

    def record_activations(self, loss: torch.Tensor, hidden: list) -> None:
        self.values.append(loss.detach())
        for pre, post in hidden:
            self.nonzero.append(torch.count_nonzero(pre))
            self.unit_max.append(torch.amax(post, dim=0))
            self.unit_min.append(torch.amin(post, dim=0))

    def record_grad_norms(self, weights: list[torch.Tensor]) -> None:
        self.values += [squared_norm(w.grad) for w in weights]

    def record_weight_norms(self, weights: list[torch.Tensor]) -> None:
        self.values += [squared_norm(w) for w in weights]

    def record_activation_params(self, params: list[torch.Tensor]) -> None:
        """A scalar parameter's value; a tensor's squared norm, mean, min, max
        (tags.activation_params)."""
        for p in params:
            p = p.detach()
            if p.numel() == 1:  # a copy: the parameter changes in place at the next update
                self.values.append(p.reshape(()).clone())
            else:
                self.values += [squared_norm(p), p.mean(), p.min(), p.max()]


class MetricStream:
    """Records every logged step's metrics on the device; hands them to the host in blocks.

    At the reference size an op costs more in dispatch than in arithmetic: a logged step runs
    a count and two reductions per hidden layer and one dot product per weight before its
    update and one after, and keeps their results; a flush stacks the block's rows and reads
    them with one copy. The weight norms are those of the weights the step produced."""

    def __init__(
        self, batch: int, widths: list[int], num_weights: int, param_sizes: dict[str, int]
    ):
        self.batch = batch
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
        n, k, layers = len(rows), self.num_weights, len(self.widths)
        # float64 holds every value exactly (float32 values, small counts).
        values = torch.stack([v for row in rows for v in row.values]).double().reshape(n, -1)
        squared = torch.tensor(self.squared, device=values.device)
        total_grad_norm = values[:, 1 : 1 + k].sum(dim=1, keepdim=True).sqrt()
        values = torch.where(squared, values.sqrt(), values)
        nonzero = torch.stack([c for row in rows for c in row.nonzero]).reshape(n, layers)
        exact_zeros = (self.batch * sum(self.widths) - nonzero.sum(dim=1, keepdim=True)).double()
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
