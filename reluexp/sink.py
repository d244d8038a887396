"""The one place that writes a run's TensorBoard events and its summary.json."""

import itertools
import json
import os
import socket
import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import google_crc32c
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary
from torch.utils.tensorboard.summary import custom_scalars
from torch.utils.tensorboard.summary import hparams as hparams_summaries

# Scalars the HParams tab sorts runs by; written once, at the end of the run.
HPARAM_METRICS = ("hparams/final_loss", "hparams/min_loss")
# The Custom Scalars tab: every run's curve of a family on one chart.
LAYOUT = {
    "loss": {"loss of every run": ["Multiline", ["loss/train"]]},
    "gradients": {
        "total gradient norm": ["Multiline", ["grad_norm/total"]],
        "gradient norm per weight": ["Multiline", [r"grad_norm/w\d+"]],
    },
    "weights": {"weight norm per weight": ["Multiline", [r"weight_norm/.*"]]},
    "activation counters": {
        "pre-activations exactly 0": ["Multiline", ["activation/exact_zeros"]],
        "dead fraction of hidden units": ["Multiline", ["activation/dead_fraction"]],
    },
}


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Write JSON to a temp file and rename it over `path`, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, allow_nan=True) + "\n")
    os.replace(tmp, path)


def masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class EventFile:
    """A TensorBoard event file, written synchronously, a block of records per write.

    Record format: length (u64), masked CRC32C of the length, data, masked CRC32C of the data.
    TensorBoard's own writer checksums in pure Python (~30 us per event) on a thread that
    contends for the GIL; a C CRC32C and one write per block make streaming every step cheap.
    """

    _counter = itertools.count()

    def __init__(self, run_dir: Path):
        name = (
            f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}."
            f"{os.getpid()}.{next(self._counter)}"
        )
        self._file = open(run_dir / name, "ab")  # noqa: SIM115 (closed by close())
        self.write([Event(wall_time=time.time(), file_version="brain.Event:2")])

    def write(self, events: Sequence[Event]) -> None:
        records = []
        for event in events:
            data = event.SerializeToString()
            header = struct.pack("<Q", len(data))
            records += [header, struct.pack("<I", masked_crc32c(header))]
            records += [data, struct.pack("<I", masked_crc32c(data))]
        self._file.write(b"".join(records))
        # Into the OS's hands at once: a killed process loses nothing already written.
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def record_failure(run_dir: Path, overrides: Sequence[str], error: BaseException) -> None:
    """summary.json for a job that failed before its run could write one."""
    write_json_atomic(
        run_dir / "summary.json",
        {
            "status": "failed",
            "error": f"{type(error).__name__}: {error}",
            "overrides": list(overrides),
        },
    )


class Sink:
    """Streams one run's scalars into one TensorBoard run (the run dir) and keeps summary.json."""

    def __init__(self, run_dir: Path, summary: dict[str, Any], purge_step: int | None = None):
        self.run_dir = run_dir
        self.summary = dict(summary)
        self._events = EventFile(run_dir)
        if purge_step is not None:
            # A resumed run: TensorBoard drops events at or after this step left by the lost part.
            start = SessionLog(status=SessionLog.START)
            self._events.write([Event(wall_time=time.time(), step=purge_step, session_log=start)])
        self.update(status="running")

    def update(self, **fields: Any) -> None:
        """Merge fields into summary.json and rewrite it atomically."""
        self.summary.update(fields)
        write_json_atomic(self.run_dir / "summary.json", self.summary)

    def scalars(
        self,
        tags: Sequence[str],
        steps: Sequence[int],
        times: Sequence[float],
        rows: Sequence[Sequence[float]],
    ) -> None:
        """One event per step holding that step's value for every tag."""
        events = []
        for step, wall_time, row in zip(steps, times, rows):
            values = [Summary.Value(tag=tag, simple_value=v) for tag, v in zip(tags, row)]
            events.append(Event(wall_time=wall_time, step=step, summary=Summary(value=values)))
        self._events.write(events)

    def declare(self, hparams: dict[str, Any]) -> None:
        """The hparams (in this run, not a sub-run as add_hparams makes) and the chart layout."""
        experiment, session_start, _ = hparams_summaries(hparams, dict.fromkeys(HPARAM_METRICS))
        self._write_summaries(experiment, session_start, custom_scalars(LAYOUT))

    def hparams_end(
        self, hparams: dict[str, Any], step: int, final_loss: float, min_loss: float
    ) -> None:
        """Record the metrics the HParams tab compares runs by, then close the session."""
        self.scalars(HPARAM_METRICS, [step], [time.time()], [[final_loss, min_loss]])
        *_, session_end = hparams_summaries(hparams, dict.fromkeys(HPARAM_METRICS))
        self._write_summaries(session_end)

    def _write_summaries(self, *summaries: Summary) -> None:
        self._events.write([Event(wall_time=time.time(), step=0, summary=s) for s in summaries])

    def close(self) -> None:
        self._events.close()
