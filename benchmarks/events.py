"""What writing a streamed row to the event file costs against the training step it records: for
MLPs of 1, 12 and 24 hidden layers of width 100, the recorder's write of blocks of FLUSH_ROWS
rows of the model's tags (the derived ones included, encoded and written to a file), per row,
beside the same training's step written by hand (benchmarks.depth's loop) and that step's own
spread over the rounds.

    python -m benchmarks.events [--repetitions 7] [--threads 1]

In-process, alternating.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import alternate, machine, summarize, write_section
from benchmarks.depth import mlp_by_hand
from reluexp.config import Config
from reluexp.record import tags
from reluexp.record.block import Block
from reluexp.record.events import EventWriter
from reluexp.record.metrics import FLUSH_ROWS
from reluexp.record.recorder import Recorder

DEPTHS = (1, 12, 24)
BLOCKS = 4


def streamed_tags(depth: int) -> tuple[list[str], list[str]]:
    """The MLP's streamed tags (as a run names them) and its sites."""
    sites = [f"act{i}" for i in range(1, depth + 1)]
    return tags.streamed([f"w{i}" for i in range(1, depth + 2)], sites), sites


def written_per_row(depth: int) -> float:
    """Seconds the recorder takes per row to write BLOCKS blocks of FLUSH_ROWS rows."""
    names, sites = streamed_tags(depth)
    with tempfile.TemporaryDirectory() as run_dir:
        events = EventWriter(Path(run_dir), start_step=0)
        recorder = Recorder(Config(print_every=10**9), events)
        blocks = []
        for b in range(BLOCKS):
            steps = list(range(b * FLUSH_ROWS, (b + 1) * FLUSH_ROWS))
            rows = np.array([[1.0 + step + i for i in range(len(names))] for step in steps])
            blocks.append(Block(names, sites, steps, [time.time()] * FLUSH_ROWS, rows))
        start = time.perf_counter()
        for block in blocks:
            recorder.write(block)
        elapsed = time.perf_counter() - start
        events.close()
    return elapsed / (BLOCKS * FLUSH_ROWS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    candidates = {}
    for depth in DEPTHS:
        candidates[f"step {depth}"] = lambda d=depth: mlp_by_hand(d, 200, "cpu")
        candidates[f"row {depth}"] = lambda d=depth: written_per_row(d)
    samples = alternate(candidates, args.repetitions)
    lines = [
        "## Events: writing a streamed row against the step it records",
        "",
        f"`python -m benchmarks.events`: {machine()}. The recorder's write (derived columns, "
        f"encoding, the file) of {BLOCKS} blocks of {FLUSH_ROWS} rows, per row, and the same "
        "MLP's training step by hand; medians (min–max) over "
        f"{args.repetitions} alternating repetitions. The step's spread: (max - min) / median.",
        "",
        "| MLP | tags per row | write, µs/row | step by hand, µs | write / step | step's spread |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for depth in DEPTHS:
        row, step = samples[f"row {depth}"], samples[f"step {depth}"]
        spread = (max(step) - min(step)) / statistics.median(step)
        width = len(streamed_tags(depth)[0]) + len(tags.DERIVED)
        lines.append(
            f"| {depth} hidden | {width} | {summarize(row, 1e6)} | {summarize(step, 1e6)} | "
            f"{statistics.median(row) / statistics.median(step):.3f} | {spread:.3f} |"
        )
    write_section("events", "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
