"""Per-step metrics: a few torch ops on the device per logged step, written into a block allocated
once, brought to the host a block at a time (one copy per block: no host sync between
flushes)."""

import functools
import math
import time
from collections.abc import Callable

import numpy as np
import torch

from reluexp._compat import float64_norms
from reluexp.record import tags
from reluexp.record.block import Block

# Rows wait on the device and reach the host in blocks: at most this many steps, ...
FLUSH_ROWS = 256
# ... or fewer where their per-unit extremes would take more than this many bytes (a site with
# many units per example, as a sequence's positions are, flushes more often instead), ...
EXTREMES_BYTES = 64 * 2**20
# ... or this many seconds, so a slow run still streams.
FLUSH_SECONDS = 2.0


def flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as one dimension, a view where its layout allows one (a weight's view,
    taken once, follows its in-place updates); detached where it is part of a graph (a
    gradient never is, and a logged step skips the op)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    return tensor.view(-1) if tensor.is_contiguous() else tensor.reshape(-1)


def unit_dims(dim: int) -> tuple[int, ...]:
    """The dimensions of an activation's output (N, ...) that are not its units: the batch, and
    for images (N, C, H, W) and volumes (N, C, D, H, W) the positions too: there a unit is a
    channel, as convolutions and batch norms count them (a position is not a unit of its own:
    a padded border's zeros would count as dead ones)."""
    return (0, *range(2, dim)) if dim in (4, 5) else (0,)


def per_unit(
    post: torch.Tensor, dims: tuple[int, ...], reduce: Callable, out: torch.Tensor | None = None
) -> torch.Tensor:
    """reduce (torch.amax or torch.amin) of `post` over `dims` (the batch, then positions),
    into `out` where given: over the batch first, an elementwise reduction of contiguous
    examples, then over each channel's positions. One reduction over all of them was up to 20x
    slower for small images ((128, 32, 4, 4): 222 us against 11, one thread, measured alone)
    and within a fifth either way for larger ones. Exact either way: an extreme does not
    depend on the order."""
    batch, *positions = dims
    if not positions:
        return reduce(post, dim=batch, out=out)
    return reduce(reduce(post, dim=batch), dim=tuple(d - 1 for d in positions), out=out)


def unit_shape(post: torch.Tensor) -> tuple[int, ...]:
    """The shape of an activation output's units per example (unit_dims): () for a scalar."""
    return tuple(post.shape[d] for d in range(post.dim()) if d not in unit_dims(post.dim()))


def units_of(post: torch.Tensor) -> int:
    """An activation output's units per example (unit_dims)."""
    return math.prod(unit_shape(post))


# torch.count_nonzero (2.13, CPU, one thread) counts a float tensor of up to this many elements
# at ~0.4 ns each and a larger one at ~4 ns each (that path is not vectorized), an integer
# tensor of any size at ~0.2 ns an element; a float's comparison with zero costs ~0.8 ns.
COUNTED_AS_IS = 16384
# A float is zero (+0.0 or -0.0) exactly where every bit but the sign is: its bits read as
# integers of its width, the sign masked off, count as the float does (NaN, subnormals
# nonzero). A (128, 16, 8, 8) site's count: 128 us through a comparison, 52 us so.
MAGNITUDE_BITS = {
    torch.float64: (torch.int64, 2**63 - 1),
    torch.float32: (torch.int32, 2**31 - 1),
    torch.float16: (torch.int16, 2**15 - 1),
    torch.bfloat16: (torch.int16, 2**15 - 1),
}


def nonzeros(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's count of nonzero elements (NaN included), a 0-d tensor on its device."""
    if tensor.is_cpu and tensor.numel() > COUNTED_AS_IS:
        if tensor.dtype in MAGNITUDE_BITS:
            bits, magnitude = MAGNITUDE_BITS[tensor.dtype]
            tensor = tensor.view(bits) & magnitude
        else:
            tensor = tensor.ne(0)
    return torch.count_nonzero(tensor)


def nonzeros_of_group(inputs: list[torch.Tensor]) -> torch.Tensor:
    """Each of the inputs' counts of nonzero elements (one shape, one device; NaN included),
    (len(inputs),), from one count over their stack: one launch a group of sites on an
    accelerator, where a count a site grows with depth."""
    if len(inputs) == 1:
        return nonzeros(inputs[0]).reshape(1)
    stacked = torch.stack(inputs)
    return torch.count_nonzero(stacked, dim=tuple(range(1, stacked.dim())))


def squared_norm(vector: torch.Tensor) -> torch.Tensor:
    """||vector||^2 (a `flat` tensor), as squared_norms takes it."""
    return squared_norms([vector])[0]


def squared_norms(vectors: list[torch.Tensor]) -> torch.Tensor:
    """||v||^2 of each `flat` vector (of one device), float64, one value each: on the CPU
    read at once (host_square), on an accelerator, where a read would wait on the device
    every step, accumulated in float64, all of them in one multi-tensor kernel
    (_compat.float64_norms)."""
    if vectors and not vectors[0].is_cpu:
        return torch.stack(float64_norms(vectors)).square()
    # Through numpy: torch.tensor of a list of floats took ~3x as long.
    return torch.from_numpy(np.array([host_square(v) for v in vectors], dtype=np.float64))


def host_square(vector: torch.Tensor) -> float:
    """||vector||^2 of a `flat` CPU vector, read: a BLAS dot product in its dtype (at the
    reference size half the time of torch.linalg.vector_norm, whose reduction is not a BLAS
    call: benchmarks/overhead.py); where the square leaves the dtype's normal range while the
    norm itself is finite and nonzero (in float32, a norm above ~1.8e19 or below ~1.1e-19),
    again in float64, where such squares fit: a norm streams as inf only where it is inf."""
    square = torch.dot(vector, vector).item()
    if vector.dtype != torch.float64 and not smallest_normal(vector.dtype) <= square < math.inf:
        if square == 0 and not vector.any():  # a zero vector (a dead unit's gradient): 0
            return 0.0
        wide = vector.double()
        square = torch.dot(wide, wide).item()
    return square


@functools.cache
def smallest_normal(dtype: torch.dtype) -> float:
    """The dtype's smallest normal number (torch.finfo is built anew at each call)."""
    return torch.finfo(dtype).tiny


# Sites whose outputs have at most this many elements (torch's grain size: below it an op is
# one thread's short loop) are stacked by shape and reduced together, where an op costs more
# in dispatch than in arithmetic; a larger one is reduced alone: stacking ResNet-20's seven
# (128, 16, 32, 32) outputs copied 56 MB a logged step.
STACKED_ELEMENTS = 32768


class SiteLayout:
    """The activation sites of a forward in groups reduced together: small sites of one output
    shape (and device), such as every hidden layer of an MLP of one width, and each larger
    site alone (STACKED_ELEMENTS); the groups in the sites' order of first appearance, and
    each site's input elements. Found from the first recorded forward, again for one whose
    shapes differ (a smaller last batch), which keeps the `previous` grouping where its
    groups' sites still share a shape: a block's rows must be grouped alike (and a smaller
    batch could bring a site under STACKED_ELEMENTS)."""

    def __init__(
        self,
        calls: list[tuple[torch.Tensor, torch.Tensor]],
        previous: "SiteLayout | None" = None,
    ):
        self.shapes = shapes_of(calls)
        # What a later row is checked against (a model's sites do not change devices).
        self.output_shapes = [shape for shape, _ in self.shapes]
        if (
            previous is not None
            and len(previous.shapes) == len(self.shapes)
            and all(len({self.shapes[site] for site in group}) == 1 for group in previous.groups)
        ):
            self.groups = previous.groups
        else:
            by_shape: dict[object, list[int]] = {}
            for site, (shape, device) in enumerate(self.shapes):
                stacked = shape.numel() <= STACKED_ELEMENTS
                by_shape.setdefault((shape, device) if stacked else site, []).append(site)
            self.groups = list(by_shape.values())
        # Sites in the groups' order, and each one's input elements in that order.
        self.grouped = [site for group in self.groups for site in group]
        self.elements = np.array([calls[site][0].numel() for site in self.grouped], np.int64)


def shapes_of(calls: list[tuple[torch.Tensor, torch.Tensor]]) -> list[tuple]:
    return [(post.shape, post.device) for _, post in calls]


# The segments a logged step records by name, in any order (the loss, the counts and the
# extremes are recorded with the activations).
RECORDED = (tags.GRAD_NORMS, tags.WEIGHT_NORMS, tags.ACTIVATION_PARAMS)


class MetricStream:
    """Records every logged step's metrics into a block of rows on the run's device (FLUSH_ROWS,
    fewer for sites of many units: EXTREMES_BYTES), allocated at the first row and written in
    place, and hands the block to the host with one copy per flush: no Python object per row,
    no stack at the flush.

    A row is recorded between start_row and end_row: first `record_activations`, after the
    backward (it lays the block out at the first row), then `record_grad_norms` before the
    update, `record_weight_norms` and `record_activation_params` after it (in any order: each
    writes its own columns). At the reference size an op costs more in dispatch than in
    arithmetic: a logged step runs a count per activation site (per group of sites on an
    accelerator), two reductions per group of sites (SiteLayout) written into the block with
    `out=`, and one dot product per parameter before its update and one after (the weight
    norms are those of the weights the step produced). On the CPU each scalar is read at once
    into its element of the block's numpy view (there is no device to wait for); on an
    accelerator it is copied into the block on the device."""

    def __init__(
        self,
        params: list[str],
        sites: list[tuple[str, int]],
        activation_param_sizes: dict[str, int],
        of_the_step: dict[str, Callable[[int], float]] | None = None,
    ):
        """params: the trained parameters' names; sites: each activation site's name and its
        units per example; activation_param_sizes: the activation's own parameters' sizes;
        of_the_step: values that are functions of the step alone, by tag (the scheduled lr):
        computed at the flush (tags.OF_THE_STEP). A new such column is one entry here."""
        self.params = params
        self.sites = [name for name, _ in sites]
        self.units = [units for _, units in sites]
        self.of_the_step = of_the_step or {}
        self.segments = tags.segments(
            params, self.sites, activation_param_sizes, tuple(self.of_the_step)
        )
        self.tags = [tag for segment in self.segments.values() for tag in segment]
        # Which of the activation parameters' values are squared norms: a tensor's first.
        self.squared_params = [
            square
            for size in activation_param_sizes.values()
            for square in ([False] if size == 1 else [True, False, False, False])
        ]
        # The block's columns (float64): the loss, each RECORDED segment (a column per tag),
        # then each site's count of nonzero inputs in the layout's grouped order.
        self.columns: dict[str, slice] = {}
        start = 0
        for name in (tags.LOSS_SEGMENT, *RECORDED):
            width = len(self.segments[name])
            self.columns[name] = slice(start, start + width)
            start += width
        self.nonzero = slice(start, start + len(self.sites))
        self.capacity = FLUSH_ROWS  # the block's rows, set at the first row
        self.values: torch.Tensor | None = None  # (capacity, columns), from the first row
        self.host: np.ndarray | None = None  # its numpy view, on the CPU
        # Each row's input elements per site, in the layout's grouped order (a smaller last
        # batch has fewer), on the host: (capacity, sites).
        self.elements: np.ndarray | None = None
        # Per group of sites (SiteLayout), each row's largest and smallest output per unit
        # over the batch ((capacity, 2, units...) for a lone site, (capacity, 2, sites,
        # units...) for several; a channel is one unit), in the outputs' dtype.
        self.extremes: list[torch.Tensor] = []
        # The same per row: (largest, smallest) views, taken once (an index costs as much as
        # the reduction that writes into it).
        self.extremes_of_row: list[list[tuple[torch.Tensor, ...]]] = []
        # How the sites' statistics are grouped, from the first recorded step.
        self.layout: SiteLayout | None = None
        self.row = 0  # the block's rows ended so far: the row being recorded
        self.step = 0  # the step being recorded
        self.steps: list[int] = []
        self.times: list[float] = []
        # Validation passes waiting on the device: (step, [loss, accuracy, batch accuracy]).
        self.evaluations: list[tuple[int, torch.Tensor]] = []
        self.last_flush = time.perf_counter()

    def start_row(self, step: int) -> None:
        self.step = step

    def put(self, columns: slice, values: torch.Tensor) -> None:
        """values (of the block's device, one per column) into the row's columns: on the CPU
        read at once into the block's numpy view, elsewhere copied on the device."""
        if self.host is not None:
            self.host[self.row, columns] = values.numpy()
        else:
            self.values[self.row, columns] = values

    def put_scalars(self, columns: slice, scalars: list[torch.Tensor]) -> None:
        """0-d tensors (of a forward: detached here) into the row's columns: on the CPU each
        read into its element of the row (a few reads cost less than a stack), elsewhere
        stacked on the device."""
        if self.host is not None:
            row = self.host[self.row]
            for column, scalar in zip(range(columns.start, columns.stop), scalars):
                row[column] = scalar.item()
        else:
            self.put(columns, torch.stack(scalars).detach())

    def checked(self, segment: str, count: int) -> slice:
        """The segment's columns, which must number `count`."""
        columns = self.columns[segment]
        if count != columns.stop - columns.start:
            raise RuntimeError(
                f"the stream's {segment} segment has {count} values a row and "
                f"{columns.stop - columns.start} tags"
            )
        return columns

    def record(self, segment: str, values: torch.Tensor) -> None:
        self.put(self.checked(segment, values.numel()), values)

    def record_squares(self, segment: str, vectors: list[torch.Tensor]) -> None:
        """Each `flat` vector's squared norm into the segment's columns: on the CPU each one
        read into its element of the row (host_square: no tensor of them made and read back),
        elsewhere computed on the device (squared_norms)."""
        columns = self.checked(segment, len(vectors))
        if self.host is None:
            self.put(columns, squared_norms(vectors))
            return
        row = self.host[self.row]
        for column, vector in zip(range(columns.start, columns.stop), vectors):
            row[column] = host_square(vector)

    def record_activations(self, loss: torch.Tensor, calls: list) -> None:
        """The loss, and each activation call's (input, output), in its sites' order: each
        site's count of nonzero inputs (on the CPU one full count a site, faster there than any
        count along a dimension; on an accelerator one count a group of sites), and per group
        of sites (SiteLayout) each unit's extremes over the batch (and, for a channel, its
        positions: unit_dims), reduced from the group's outputs stacked."""
        if len(calls) != len(self.sites):
            raise RuntimeError(
                f"the model called its activation {len(calls)} times at step {self.step}, "
                f"{len(self.sites)} times on the probe it was built with; the streamed sites "
                "are those of the probe (a model that calls it a varying number of times "
                "cannot be streamed)"
            )
        if self.layout is None:
            self.allocate(loss.device, calls)
        elif self.layout.output_shapes != [post.shape for _, post in calls]:
            layout = SiteLayout(calls, self.layout)
            if layout.groups != self.layout.groups:
                raise RuntimeError(
                    f"the shapes the model's activation sites take changed at step "
                    f"{self.step}: one site's shape changed, another's did not (their "
                    "statistics are reduced together by shape)"
                )
            self.layout = layout
        layout, row = self.layout, self.row
        self.put_scalars(self.columns[tags.LOSS_SEGMENT], [loss])
        for sites, extremes in zip(layout.groups, self.extremes_of_row):
            if len(sites) == 1:
                post = calls[sites[0]][1]
                dims = unit_dims(post.dim())
            else:
                post = torch.stack([calls[site][1] for site in sites])  # (sites, batch, ...)
                dims = tuple(d + 1 for d in unit_dims(post.dim() - 1))
            largest, smallest = extremes[row]
            per_unit(post, dims, torch.amax, out=largest)
            per_unit(post, dims, torch.amin, out=smallest)
        if self.host is not None:  # a count a site: the CPU's fastest (nonzeros)
            self.put_scalars(self.nonzero, [nonzeros(calls[site][0]) for site in layout.grouped])
        elif self.sites:  # a count a group: launches that do not grow with depth
            counts = [nonzeros_of_group([calls[s][0] for s in sites]) for sites in layout.groups]
            self.put(self.nonzero, torch.cat(counts))
        self.elements[row] = layout.elements

    def allocate(self, device: torch.device, calls: list) -> None:
        """The block, on the device, laid out by the first row's sites."""
        self.layout = SiteLayout(calls)
        # Each group's extremes of a row: (largest, smallest) x (sites x) units, and its dtype.
        row_shapes = []
        for sites in self.layout.groups:
            post = calls[sites[0]][1]
            stacked = [len(sites)] if len(sites) > 1 else []
            row_shapes.append(((2, *stacked, *unit_shape(post)), post))
        row_bytes = sum(math.prod(shape) * post.element_size() for shape, post in row_shapes)
        self.capacity = max(1, min(FLUSH_ROWS, EXTREMES_BYTES // max(row_bytes, 1)))
        self.values = torch.zeros(
            self.capacity, self.nonzero.stop, dtype=torch.float64, device=device
        )
        self.host = self.values.numpy() if device.type == "cpu" else None
        self.elements = np.zeros((self.capacity, len(self.sites)), dtype=np.int64)
        self.extremes = [
            torch.empty((self.capacity, *shape), dtype=post.dtype, device=post.device)
            for shape, post in row_shapes
        ]
        self.extremes_of_row = [
            [row.unbind(0) for row in extremes.unbind(0)] for extremes in self.extremes
        ]

    def record_grad_norms(self, params: list[torch.Tensor]) -> None:
        """Each parameter's gradient's squared norm (0 where the loss does not reach it)."""
        grads = [flat(p.grad) if p.grad is not None else p.new_zeros(1) for p in params]
        self.record_squares(tags.GRAD_NORMS, grads)

    def record_weight_norms(self, flat_params: list[torch.Tensor]) -> None:
        """The parameters as `flat` views, taken once per run."""
        self.record_squares(tags.WEIGHT_NORMS, flat_params)

    def record_activation_params(self, params: list[torch.Tensor]) -> None:
        """A scalar parameter's value; a tensor's squared norm, mean, min, max
        (tags.activation_params)."""
        values = []
        for p in params:
            p = p.detach()
            if p.numel() == 1:
                values.append(p.reshape(1))
            else:
                values.append(torch.stack([squared_norm(flat(p)), p.mean(), p.min(), p.max()]))
        if values:
            self.record(tags.ACTIVATION_PARAMS, torch.cat(values))

    def end_row(self) -> None:
        self.steps.append(self.step)
        self.times.append(time.time())
        self.row += 1

    def record_evaluation(self, step: int, values: torch.Tensor) -> None:
        """A validation pass's [loss, accuracy, the batch's accuracy], kept on the device
        until the next flush (no host sync)."""
        self.evaluations.append((step, values))

    @property
    def due(self) -> bool:
        """The block is full, or old enough that a slow run should stream what it has."""
        full = self.row == self.capacity
        return full or time.perf_counter() - self.last_flush > FLUSH_SECONDS

    def flush(self) -> Block:
        """The recorded rows on the host, in self.tags' order, with one copy, and the
        validation passes; the stream is then empty (its block is written over)."""
        block = Block(self.tags, self.sites)
        if self.evaluations:
            block.evaluation_steps = [step for step, _ in self.evaluations]
            block.evaluations = torch.stack([v for _, v in self.evaluations]).tolist()
            self.evaluations = []
        if not self.row:
            return block
        columns, alive = self.block_columns()
        host = torch.cat([columns[name] for name in self.segments], dim=1)
        block.steps, block.times = self.steps, self.times
        block.rows, block.live_units = host.cpu().numpy(), alive.cpu().numpy()
        self.row, self.steps, self.times = 0, [], []
        self.last_flush = time.perf_counter()
        return block

    def block_columns(self) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Each segment's values for the block's rows (n, its tags), float64, by name; and
        each row's live units per site (n, sites)."""
        n = self.row
        values = self.values[:n]
        grad_squares = values[:, self.columns[tags.GRAD_NORMS]]
        params = values[:, self.columns[tags.ACTIVATION_PARAMS]]
        squared = torch.tensor(self.squared_params, dtype=torch.bool, device=params.device)
        columns = {
            tags.LOSS_SEGMENT: values[:, self.columns[tags.LOSS_SEGMENT]],
            tags.GRAD_NORMS: grad_squares.sqrt(),
            tags.GRAD_TOTAL: grad_squares.sum(dim=1, keepdim=True).sqrt(),
            tags.WEIGHT_NORMS: values[:, self.columns[tags.WEIGHT_NORMS]].sqrt(),
            tags.ACTIVATION_PARAMS: torch.where(squared, params.sqrt(), params),
            tags.OF_THE_STEP: values.new_tensor(
                [[value(step) for value in self.of_the_step.values()] for step in self.steps]
            ).reshape(n, -1),
        }
        if not self.sites:  # a model without activation sites: nothing dead, no zeros counted
            columns[tags.UNITS] = values.new_zeros(n, 2)
            columns[tags.SITES] = values.new_zeros(n, 0)
            return columns, torch.zeros(n, 0, dtype=torch.long)
        units = torch.tensor(self.units, dtype=torch.float64, device=values.device)
        exact_zeros, alive, output_max, output_min = self.site_statistics(values)
        dead = 1 - alive.double() / units
        columns[tags.UNITS] = torch.cat(
            [
                1 - alive.sum(dim=1, keepdim=True).double() / units.sum(),
                exact_zeros.sum(dim=1, keepdim=True),
            ],
            dim=1,
        )
        per_site = torch.stack([dead, exact_zeros, output_max, output_min], dim=2)
        columns[tags.SITES] = per_site.reshape(n, -1)
        return columns, alive

    def site_statistics(self, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per row and site (n, sites): its inputs' exact zeros, its live units, its output's
        largest and smallest value, reduced a group of sites at a time. A unit is alive when
        some example of the batch gives it a nonzero activation (NaN included: a diverging
        run's units are not reported dead)."""
        n = self.row
        elements = torch.from_numpy(self.elements[:n]).to(values.device)
        alive, output_max, output_min = [], [], []
        for sites, extremes in zip(self.layout.groups, self.extremes):
            shape = (n, len(sites), -1)
            unit_max, unit_min = extremes[:n, 0].reshape(shape), extremes[:n, 1].reshape(shape)
            alive.append(torch.count_nonzero((unit_max != 0) | (unit_min != 0), dim=2))
            output_max.append(unit_max.amax(dim=2).double())
            output_min.append(unit_min.amin(dim=2).double())
        # Back to the sites' order, from the groups'.
        in_order = torch.tensor(self.layout.grouped).argsort()
        grouped = [
            elements - values[:, self.nonzero],
            *(torch.cat(column, dim=1) for column in (alive, output_max, output_min)),
        ]
        return tuple(column[:, in_order] for column in grouped)
