"""What a run's flushed blocks become: its events (with the columns derived for the charts), its
series in memory for its caller, and the article's loss lines. It decides nothing about the run
(run/outcome.py does): it receives the rows the run keeps and writes them."""

import logging
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from reluexp.config import Config
from reluexp.record import tags
from reluexp.record.block import Block
from reluexp.record.events import EventWriter

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
        if not len(block.rows):
            self.write_evaluations(block)
            return
        losses, exact_zeros = block.column(tags.LOSS), block.column(tags.EXACT_ZEROS)
        self.series.steps.extend(block.steps)
        self.series.losses.extend(losses.tolist())
        self.series.exact_zeros.extend(exact_zeros.tolist())
        with_zeros = self.steps_with_exact_zeros + np.cumsum(exact_zeros > 0)
        self.steps_with_exact_zeros = int(with_zeros[-1])
        for i, step in enumerate(block.steps):
            if self.config.prints_at(step):
                # The article's line (step, repr of the loss), from the flushed value: no .item().
                loss_log.info("%d %r", step, float(losses[i]))
        if self.events is not None:
            log.debug("flushed %d metric rows up to step %d", len(block.rows), block.steps[-1])
            derived = [log10(losses), log10(block.column(tags.GRAD_NORM_TOTAL)), with_zeros]
            rows = np.column_stack([block.rows, *derived])
            self.events.scalars([*block.tags, *tags.DERIVED], block.steps, block.times, rows)
        self.write_evaluations(block)

    def write_evaluations(self, block: Block) -> None:
        if self.events is not None and block.evaluation_steps:
            now = [time.time()] * len(block.evaluation_steps)
            self.events.scalars(tags.VALIDATION, block.evaluation_steps, now, block.evaluations)


def log10(values: np.ndarray) -> np.ndarray:
    """log10 for the charts: -inf at 0, NaN where the value is not finite."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(values), np.log10(values), np.nan)
