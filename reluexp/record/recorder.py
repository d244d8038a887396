"""What a run's flushed blocks become: its events (with the columns derived for the charts), its
series in memory for its caller, and the article's loss lines. It decides nothing about the run
(run/outcome.py does): it receives the rows the run keeps and writes them."""

import logging
import math
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from reluexp.config import Config
from reluexp.record import tags
from reluexp.record.events import EventWriter
from reluexp.record.metrics import Block

log = logging.getLogger("reluexp")
# The article's `step loss` lines: the only lines on stdout (conf/config.yaml).
loss_log = logging.getLogger("reluexp.losses")


@dataclass
class Series:
    """What a run recorded, step by step, kept in memory for its caller (the lab, a notebook):
    the recorded steps, their losses and their exact-zero pre-activation counts."""

    steps: array = field(default_factory=lambda: array("q"))
    losses: array = field(default_factory=lambda: array("d"))
    exact_zeros: array = field(default_factory=lambda: array("d"))


class Recorder:
    """Writes a run's blocks: into its events (none for a run without a directory), its
    series, and the article's loss lines; with each row, the columns derived for the charts
    (tags.DERIVED: log10 loss and total gradient norm, the logged steps so far with an exact
    zero)."""

    def __init__(self, config: Config, events: EventWriter | None, steps_with_exact_zeros: int = 0):
        self.config = config
        self.events = events
        self.series = Series()
        # Logged steps so far whose pre-activations held an exact 0.0 (a resumed run's start
        # from its checkpoint).
        self.steps_with_exact_zeros = steps_with_exact_zeros

    def state_dict(self) -> dict[str, Any]:
        return {"steps_with_exact_zeros": self.steps_with_exact_zeros}

    def write(self, block: Block) -> None:
        streamed = block.tags
        loss = streamed.index(tags.LOSS)
        total = streamed.index(tags.GRAD_NORM_TOTAL)
        exact_zeros = streamed.index(tags.EXACT_ZEROS)
        rows = []
        for step, row in zip(block.steps, block.rows):
            self.series.steps.append(step)
            self.series.losses.append(row[loss])
            self.series.exact_zeros.append(row[exact_zeros])
            self.steps_with_exact_zeros += row[exact_zeros] > 0
            rows.append([*row, log10(row[loss]), log10(row[total]), self.steps_with_exact_zeros])
            if self.config.prints_at(step):
                # The article's line (step, repr of the loss), from the flushed value: no .item().
                loss_log.info("%d %r", step, row[loss])
        if self.events is None:
            return
        if rows:
            log.debug("flushed %d metric rows up to step %d", len(rows), block.steps[-1])
            self.events.scalars([*streamed, *tags.DERIVED], block.steps, block.times, rows)
        if block.evaluation_steps:
            now = [time.time()] * len(block.evaluation_steps)
            self.events.scalars(tags.VALIDATION, block.evaluation_steps, now, block.evaluations)


def log10(value: float) -> float:
    """log10 for the charts: -inf at 0, NaN where the value is not finite."""
    if value > 0 and math.isfinite(value):
        return math.log10(value)
    return -math.inf if value == 0 else math.nan
