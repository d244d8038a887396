"""A flush's rows on the host: what the stream (record.metrics) hands over, what a run's
outcome reads and the recorder writes, a column at a time."""

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass
class Block:
    """A flush's host values: the steps, their wall times and one row each (n, tags), float64,
    with each activation site's count of live units (n, sites); and the validation passes with
    their steps (each [loss, accuracy, the batch's accuracy], NaN where there is none). Arrays,
    not a Python object per row: what a block means and writes is computed a column at a
    time."""

    tags: list[str]
    sites: list[str]
    steps: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    rows: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    live_units: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    evaluation_steps: list[int] = field(default_factory=list)
    evaluations: list[list[float]] = field(default_factory=list)

    def column(self, tag: str) -> np.ndarray:
        """The rows' values of one tag."""
        return self.rows[:, self.tags.index(tag)]

    def with_column(self, tag: str, values: np.ndarray) -> "Block":
        """The block with one more tag, a value per row."""
        rows = np.concatenate([self.rows, np.asarray(values, dtype=np.float64)[:, None]], axis=1)
        return replace(self, tags=[*self.tags, tag], rows=rows)

    def first(self, n: int) -> "Block":
        """The block's first n rows (its validation passes all kept)."""
        if n == len(self.rows):
            return self
        return replace(
            self,
            steps=self.steps[:n],
            times=self.times[:n],
            rows=self.rows[:n],
            live_units=self.live_units[:n],
        )
