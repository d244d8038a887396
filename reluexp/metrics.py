"""Per-step metrics: a few ops on the device per step, brought to the host in blocks."""

import logging
import math
import time

import torch

from reluexp.sink import Sink

log = logging.getLogger("reluexp")

# Rows wait on the device and reach the host in blocks: at most this many steps, ...
FLUSH_ROWS = 256
# ... or this many seconds, so a slow run still streams.
FLUSH_SECONDS = 2.0


def metric_tags(num_weights: int) -> list[str]:
    """TensorBoard tags of one host row, in order."""
    names = [f"w{i}" for i in range(1, num_weights + 1)]
    return [
        "loss/train",
        *(f"grad_norm/{n}" for n in names),
        "grad_norm/total",
        *(f"weight_norm/{n}" for n in names),
        "activation/dead_fraction",
        "activation/exact_zeros",
    ]


class MetricStream:
    """Records every logged step's metrics on the device; streams them to the sink in blocks.

    A device row is [loss, grad norms, weight norms, nonzero pre-activations per layer, units
    alive per layer]: one foreach_norm and two count_nonzero per layer, since at the reference
    size an op costs more in dispatch than in arithmetic. The rows' 0-dim tensors are kept as
    they are and stacked once per block; the rest (total norm, dead fraction, exact zeros) is
    derived on the host at flush time.
    """

    def __init__(
        self,
        sink: Sink,
        batch: int,
        widths: list[int],
        min_loss: float = math.inf,
        final_loss: float = math.nan,
        stop_on_divergence: bool = True,
        print_every: int = 100,
    ):
        self.sink = sink
        self.batch = batch
        self.widths = widths
        self.num_weights = len(widths) + 1
        self.tags = metric_tags(self.num_weights)
        self.rows: list[list[torch.Tensor]] = []
        self.steps: list[int] = []
        self.times: list[float] = []
        self.last_flush = time.perf_counter()
        self.min_loss = min_loss
        self.final_loss = final_loss
        self.stop_on_divergence = stop_on_divergence
        self.print_every = print_every
        self.diverged_at: int | None = None

    def record(
        self,
        step: int,
        loss: torch.Tensor,
        weights: list[torch.Tensor],
        hidden: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> None:
        """Fill one device row without a host sync; flush when the block is full or old."""
        norms = torch._foreach_norm([w.grad for w in weights] + weights)
        nonzero_pre = [torch.count_nonzero(pre) for pre, _ in hidden]
        # A unit is alive when some example of the batch gives it a nonzero activation.
        alive_units = [torch.count_nonzero(torch.count_nonzero(post, dim=0)) for _, post in hidden]
        self.rows.append([loss.detach(), *norms, *nonzero_pre, *alive_units])
        self.steps.append(step)
        self.times.append(time.time())
        if len(self.steps) == FLUSH_ROWS or time.perf_counter() - self.last_flush > FLUSH_SECONDS:
            self.flush()

    def host_row(self, raw: list[float]) -> list[float]:
        """A device row as the values of metric_tags()."""
        k, layers = self.num_weights, len(self.widths)
        loss, grad_norms, weight_norms = raw[0], raw[1 : 1 + k], raw[1 + k : 1 + 2 * k]
        nonzero_pre = raw[1 + 2 * k : 1 + 2 * k + layers]
        alive_units = raw[1 + 2 * k + layers :]
        # Pre-activations exactly 0.0 are where a ReLU's subgradient convention matters.
        exact_zeros = sum(self.batch * h - nz for h, nz in zip(self.widths, nonzero_pre))
        dead_fraction = 1 - sum(alive_units) / sum(self.widths)
        total_grad_norm = math.sqrt(sum(g * g for g in grad_norms))
        return [loss, *grad_norms, total_grad_norm, *weight_norms, dead_fraction, exact_zeros]

    def flush(self) -> None:
        """One host sync per block; when stopping, rows after a diverging step are dropped."""
        if not self.rows:
            return
        # One stack for the block; it promotes the integer counts to the loss's dtype.
        block = torch.stack([value for row in self.rows for value in row]).view(len(self.rows), -1)
        rows = [self.host_row(raw) for raw in block.tolist()]
        for i, row in enumerate(rows):
            if math.isfinite(row[0]):
                self.min_loss = min(self.min_loss, row[0])
            elif self.diverged_at is None:
                self.diverged_at = self.steps[i]
                if self.stop_on_divergence:
                    del rows[i + 1 :]
                    break
        for step, row in zip(self.steps, rows):
            if step % self.print_every == self.print_every - 1:
                # The article's line (step, repr of the loss), from the flushed value: no .item().
                log.info("%d %r", step, row[0])
        if rows:
            self.final_loss = rows[-1][0]
        log.debug("flushed %d metric rows up to step %d", len(rows), self.steps[-1])
        self.sink.scalars(self.tags, self.steps, self.times, rows)
        self.rows.clear()
        self.steps.clear()
        self.times.clear()
        self.last_flush = time.perf_counter()

    @property
    def stopped(self) -> bool:
        return self.diverged_at is not None and self.stop_on_divergence
