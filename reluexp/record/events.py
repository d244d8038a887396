"""TensorBoard event files: the one place that writes a run's events, and reads them back."""

import itertools
import math
import os
import socket
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
from google.protobuf import struct_pb2
from tensorboard.compat.proto.event_pb2 import Event, SessionLog
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

from reluexp.record.tags import (
    FINAL_LOSS_VS_REFERENCE,
    HPARAM_METRICS,
    IDENTICAL_LOG10,
    Chart,
    description,
    loss_gap,
)

# {category: {chart title: tags}} (tags.layout's shape).
Layout = dict[str, dict[str, Chart]]
# Where the HParams tab reads a run's experiment (its columns), session start and end.
EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_TAG = "_hparams_/session_start_info"
SESSION_END_TAG = "_hparams_/session_end_info"


# The protos below are what torch.utils.tensorboard's hparams() and custom_scalars() build;
# building them here spares every run that module's import (~0.15 s of start-up).
def plugin_summary(tag: str, plugin: str, content: bytes = b"", **value: Any) -> Summary:
    metadata = SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name=plugin, content=content)
    )
    return Summary(value=[Summary.Value(tag=tag, metadata=metadata, **value)])


def hparams_summary(tag: str, **data: Any) -> Summary:
    content = plugin_data_pb2.HParamsPluginData(version=0, **data).SerializeToString()
    return plugin_summary(tag, "hparams", content)


def layout_chart(title: str, tags: Chart) -> layout_pb2.Chart:
    if tags and isinstance(tags[0], tuple):
        series = [
            layout_pb2.MarginChartContent.Series(value=value, lower=lower, upper=upper)
            for value, lower, upper in tags
        ]
        return layout_pb2.Chart(title=title, margin=layout_pb2.MarginChartContent(series=series))
    return layout_pb2.Chart(title=title, multiline=layout_pb2.MultilineChartContent(tag=tags))


def layout_summary(layout: Layout) -> Summary:
    categories = [
        layout_pb2.Category(
            title=title, chart=[layout_chart(chart, tags) for chart, tags in charts.items()]
        )
        for title, charts in layout.items()
    ]
    layout = layout_pb2.Layout(category=categories).SerializeToString()
    tensor = TensorProto(dtype="DT_STRING", string_val=[layout])
    return plugin_summary("custom_scalars__config__", "custom_scalars", tensor=tensor)


def image_summary(tag: str, png: bytes) -> Summary:
    # A PNG's width and height: the first fields of its IHDR chunk, big-endian.
    width, height = struct.unpack(">II", png[16:24])
    image = Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def text_summary(tag: str, text: str) -> Summary:
    shape = TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)])
    tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()], tensor_shape=shape)
    return plugin_summary(tag, "text", tensor=tensor)


def hparam_value(value: Any) -> tuple[struct_pb2.Value, int]:
    """The value as the HParams plugin stores it, and its declared type."""
    if isinstance(value, bool):
        return struct_pb2.Value(bool_value=value), api_pb2.DATA_TYPE_BOOL
    if isinstance(value, int | float):
        return struct_pb2.Value(number_value=value), api_pb2.DATA_TYPE_FLOAT64
    return struct_pb2.Value(string_value=str(value)), api_pb2.DATA_TYPE_STRING


def masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    """Protobuf's base-128 encoding of a non-negative integer."""
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class ScalarEvents:
    """Serialized Events holding one row of scalars each, encoded directly.

    They parse to Event(wall_time, step, summary=Summary(value=[Summary.Value(tag, simple_value),
    ...])) (tested), at a fraction of the cost of building those messages per step, since
    everything but the step, the time and the values is the same for every row.
    """

    def __init__(self, tags: Sequence[str]):
        template, holes = b"", []
        for tag in tags:
            name = tag.encode()
            # Summary.Value: tag (field 1, bytes), then simple_value (field 2, float32) ...
            value = b"\x0a" + varint(len(name)) + name + b"\x15"
            # ... as one Summary.value (field 1, message): the 4 float bytes follow the prefix.
            template += b"\x0a" + varint(len(value) + 4) + value
            holes += range(len(template), len(template) + 4)
            template += bytes(4)
        # The Summary of every row, its values' bytes left as holes: a block's rows are filled
        # in one numpy assignment, whatever the number of tags (a loop over tags per row cost
        # about 0.2 us a tag, 30 us a step for a 24-layer MLP's 150 tags).
        self.template = np.frombuffer(template, dtype=np.uint8)
        self.holes = np.array(holes, dtype=np.intp)

    def encode(
        self, steps: Sequence[int], wall_times: Sequence[float], rows: Sequence[Sequence[float]]
    ) -> list[bytes]:
        """One serialized Event per row."""
        if not len(rows):
            return []
        with np.errstate(over="ignore"):  # float32 as protobuf converts: out of range is ±inf
            floats = np.asarray(rows, dtype=np.float64).astype(np.float32).reshape(len(rows), -1)
        summaries = np.tile(self.template, (len(rows), 1))
        summaries[:, self.holes] = floats.view(np.uint8)
        size = varint(summaries.shape[1])
        # Event: wall_time (field 1, double), step (field 2, varint), summary (field 5, message).
        return [
            b"".join((b"\x09", struct.pack("<d", wall_time), b"\x10", varint(step), b"\x2a", size))
            + summary.tobytes()
            for step, wall_time, summary in zip(steps, wall_times, summaries)
        ]


class EventFile:
    """A TensorBoard event file, written synchronously, a block of records per write.

    Record format: length (u64), masked CRC32C of the length, data, masked CRC32C of the data.
    TensorBoard's own writer checksums in pure Python (~30 us per event) on a thread that
    contends for the GIL; a C CRC32C and one write per block make streaming every step cheap.
    """

    _counter = itertools.count()

    def __init__(self, run_dir: Path, name: str | None = None):
        # Readers (TensorBoard's, read_events) take a run's files in name order: the creating
        # time to the microsecond, then a zero-padded counter, so that name order is writing
        # order (a resume in the same second as the part it continues, `10` after `9`).
        name = name or (
            f"events.out.tfevents.{time.time():.6f}.{socket.gethostname()}."
            f"{os.getpid()}.{next(self._counter):06d}"
        )
        self._file = open(run_dir / name, "ab")  # noqa: SIM115 (closed by close())
        self.write([Event(wall_time=time.time(), file_version="brain.Event:2")])

    def write(self, events: Sequence[Event]) -> None:
        self.write_serialized([event.SerializeToString() for event in events])

    def write_serialized(self, serialized_events: Sequence[bytes]) -> None:
        records = []
        for data in serialized_events:
            header = struct.pack("<Q", len(data))
            records += [header, struct.pack("<I", masked_crc32c(header))]
            records += [data, struct.pack("<I", masked_crc32c(data))]
        self._file.write(b"".join(records))
        # Into the OS's hands at once: a killed process loses nothing already written.
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_events(run_dir: Path) -> Iterator[Event]:
    """Every intact Event record of a run's event files, in writing order.

    A file's reading stops at a torn or corrupt record (a process killed mid-write), as
    TensorBoard's reader does. TensorBoard's own reader checks CRCs in pure Python (~0.1 s for
    a 500-step run); this one reads a whole sweep in the time that takes for one run.
    """
    # File names start with the creating time (EventFile): name order is writing order.
    for path in sorted(run_dir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset + 12 <= len(data):
            header = data[offset : offset + 8]
            (length,) = struct.unpack_from("<Q", data, offset)
            (header_crc,) = struct.unpack_from("<I", data, offset + 8)
            end = offset + 12 + length
            if masked_crc32c(header) != header_crc or end + 4 > len(data):
                break
            body = data[offset + 12 : end]
            if masked_crc32c(body) != struct.unpack_from("<I", data, end)[0]:
                break
            yield Event.FromString(body)
            offset = end + 4


@dataclass
class Session:
    """A derived run's HParams session (a sweep group's): the experiment its jobs declared
    (the same columns in every run, whichever TensorBoard reads the experiment from), its
    hyperparameters, and its metrics at `step`."""

    experiment: plugin_data_pb2.HParamsPluginData
    hparams: dict[str, struct_pb2.Value]
    step: int
    metrics: dict[str, float]
    # Its name in the HParams tab's Trial ID column ('' for the run's name).
    trial: str = ""


def read_declared(run_dir: Path) -> tuple[plugin_data_pb2.HParamsPluginData, ...] | None:
    """A run's HParams declaration as EventWriter.declare wrote it: the experiment and the
    session's start (its hyperparameters); None where the run has none."""
    found: dict[str, plugin_data_pb2.HParamsPluginData] = {}
    for event in read_events(run_dir):
        for value in event.summary.value:
            if value.tag in (EXPERIMENT_TAG, SESSION_START_TAG) and value.tag not in found:
                content = value.metadata.plugin_data.content
                found[value.tag] = plugin_data_pb2.HParamsPluginData.FromString(content)
        if len(found) == 2:
            return found[EXPERIMENT_TAG], found[SESSION_START_TAG]
    return None


def read_scalars(run_dir: Path, tags: Sequence[str]) -> dict[str, dict[int, float]]:
    """tag -> {step: value} of a run, as TensorBoard shows it (tested against its reader).

    A SessionLog START (written by a resumed run) drops the steps at or after its step that
    the interrupted part had logged. A point is a simple_value, or a scalars-plugin tensor (a
    described tag's first point, EventWriter.described_scalar, carries both; 0.5 wrote it as
    a tensor alone).
    """
    scalars: dict[str, dict[int, float]] = {tag: {} for tag in tags}
    for event in read_events(run_dir):
        if event.session_log.status == SessionLog.START:
            for values in scalars.values():
                for step in [step for step in values if step >= event.step]:
                    del values[step]
        for value in event.summary.value:
            if value.tag not in scalars:
                continue
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                scalars[value.tag][event.step] = value.simple_value
            elif kind == "tensor" and value.metadata.plugin_data.plugin_name == "scalars":
                scalars[value.tag][event.step] = value.tensor.float_val[0]
    return scalars


class EventWriter:
    """Streams one run's scalars, hparams and chart layout into one TensorBoard run (its dir)."""

    def __init__(self, run_dir: Path, start_step: int | None = None, file_name: str | None = None):
        """start_step: where a training session starts (0, or a resumed run's checkpoint step);
        None for a file that is not one (a report's). TensorBoard's readers take a run's first
        SessionLog START as its start and each later one as a restart, dropping the events at
        or after its step that the lost part of an interrupted run had logged: so a fresh run
        writes one too, or its resume's would only count as the first."""
        self._events = EventFile(run_dir, file_name)
        self._encoders: dict[tuple[str, ...], ScalarEvents] = {}
        # Tags whose first point, with what they mean, this file holds.
        self._described: set[str] = set()
        if start_step is not None:
            start = SessionLog(status=SessionLog.START)
            self._events.write([Event(wall_time=time.time(), step=start_step, session_log=start)])

    def scalars(
        self,
        tags: Sequence[str],
        steps: Sequence[int],
        times: Sequence[float],
        rows: Sequence[Sequence[float]],
    ) -> None:
        """One event per step holding that step's value for every tag; a tag's first point in
        this file carries what it means (tags.description), which TensorBoard shows beside
        its chart."""
        undescribed = [
            i for i, tag in enumerate(tags) if tag not in self._described and description(tag)
        ]
        if undescribed and len(rows):
            for i in undescribed:
                self.described_scalar(tags[i], steps[0], rows[0][i], description(tags[i]))
            self._described.update(tags[i] for i in undescribed)
            rest = [i for i in range(len(tags)) if i not in undescribed]
            if rest:
                first = [[rows[0][i] for i in rest]]
                self.scalars([tags[i] for i in rest], steps[:1], times[:1], first)
            steps, times, rows = steps[1:], times[1:], rows[1:]
            if not len(rows):
                return
        key = tuple(tags)
        if key not in self._encoders:
            self._encoders[key] = ScalarEvents(tags)
        encoder = self._encoders[key]
        self._events.write_serialized(encoder.encode(steps, times, rows))

    def declare(
        self, hparams: dict[str, Any], varying: frozenset[str], layout: "Layout", trial: str = ""
    ) -> None:
        """The hparams (in this run, not a sub-run as add_hparams makes) and the chart layout
        (tags.layout). `varying`: the config keys whose value differs across this run's sweep.
        Their hparams are marked `differs`, which the HParams tab shows first (it shows five at
        the start). `trial`: the name the tab gives the run (hparams.trial_name; '' for its
        run name)."""
        values = {name: hparam_value(value) for name, value in hparams.items()}

        def differs(name: str) -> bool:
            # A group choice (`activation`) changes its keys; a key changes its dict's value.
            return any(
                name == key or name.startswith(f"{key}.") or key.startswith(f"{name}.")
                for key in varying
            )

        experiment = api_pb2.Experiment(
            hparam_infos=[
                api_pb2.HParamInfo(name=name, type=kind, differs=differs(name))
                for name, (_, kind) in values.items()
            ],
            metric_infos=[
                api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in HPARAM_METRICS
            ],
        )
        session_start = plugin_data_pb2.SessionStartInfo(
            hparams={name: value for name, (value, _) in values.items()}, group_name=trial
        )
        self._write_summaries(
            hparams_summary(EXPERIMENT_TAG, experiment=experiment),
            hparams_summary(SESSION_START_TAG, session_start_info=session_start),
        )
        self.declare_layout(layout)

    def declare_layout(self, layout: Layout) -> None:
        """A Custom Scalars layout; TensorBoard merges every run's, by category title."""
        self._write_summaries(layout_summary(layout))

    def hparams_end(self, step: int, final_loss: float, min_loss: float) -> None:
        """Record the metrics the HParams tab compares runs by, then close the session."""
        self.scalars(HPARAM_METRICS[:2], [step], [time.time()], [[final_loss, min_loss]])
        self.end_session()

    def end_session(self) -> None:
        session_end = plugin_data_pb2.SessionEndInfo(status=api_pb2.STATUS_SUCCESS)
        self._write_summaries(hparams_summary(SESSION_END_TAG, session_end_info=session_end))

    def session(self, session: Session) -> None:
        """A derived run's whole HParams session (Session): declared, its metrics, ended."""
        start = plugin_data_pb2.SessionStartInfo(hparams=session.hparams, group_name=session.trial)
        self._write_summaries(
            hparams_summary(EXPERIMENT_TAG, experiment=session.experiment.experiment),
            hparams_summary(SESSION_START_TAG, session_start_info=start),
        )
        tags = list(session.metrics)
        values = [session.metrics[tag] for tag in tags]
        self.scalars(tags, [session.step], [time.time()], [values])
        self.end_session()

    def described_scalar(self, tag: str, step: int, value: float, meaning: str) -> None:
        """One point of a scalar with its description, which TensorBoard shows beside its
        chart (it takes a tag's metadata from its first point), as every reader sees it."""
        # The description on a float tensor, as the scalars plugin writes it (TensorBoard's
        # fast loader drops a simple_value's), and the point again as a simple_value, which
        # EventAccumulator.Scalars and tbparse read (they skip tensors). The fast loader keeps
        # one point per step; the Python loader (--load_fast=false) shows this one twice.
        tensor = TensorProto(dtype="DT_FLOAT", float_val=[value], tensor_shape=TensorShapeProto())
        summary = plugin_summary(tag, "scalars", tensor=tensor)
        summary.value[0].metadata.summary_description = meaning
        summary.value.add(tag=tag, simple_value=value)
        self._events.write([Event(wall_time=time.time(), step=step, summary=summary)])

    def images(self, pngs: dict[str, bytes]) -> None:
        """PNG images by tag, for the Images tab."""
        self._write_summaries(*(image_summary(tag, png) for tag, png in pngs.items()))

    def texts(self, markdowns: dict[str, str]) -> None:
        """Markdown by tag, for the Text tab (which renders tables)."""
        self._write_summaries(*(text_summary(tag, text) for tag, text in markdowns.items()))

    def _write_summaries(self, *summaries: Summary) -> None:
        self._events.write([Event(wall_time=time.time(), step=0, summary=s) for s in summaries])

    def close(self) -> None:
        self._events.close()


def write_derived(
    run_dir: Path,
    name: str,
    series: dict[str, dict[int, float]] | None = None,
    layout: Layout | None = None,
    images: dict[str, bytes] | None = None,
    texts: dict[str, str] | None = None,
    session: Session | None = None,
) -> None:
    """What is computed after the runs (scalars as tag -> {step: value}, a chart layout, images,
    text, an HParams session) as an event file of their own,
    `events.out.tfevents.reluexp-<name>`, rewritten whole, so writing twice adds nothing. It is
    written under a temporary name of this process's (two reports at once never share one)
    without `tfevents` in it, so TensorBoard never lists it as a run, and renamed into place
    whole: a killed write leaves the old file, and its temporary one, which the next write
    removes. Created as the runs' own files are (the umask's mode), so a TensorBoard run by
    another user reads it too."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"events.out.tfevents.reluexp-{name}"
    remove_stale_temporaries(run_dir, name)
    tmp = run_dir / f".reluexp-{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        writer = EventWriter(run_dir, file_name=tmp.name)
        if layout:
            writer.declare_layout(layout)
        writer.images(images or {})
        writer.texts(texts or {})
        for tag, values in (series or {}).items():
            steps = sorted(values)
            rows = [[values[step]] for step in steps]
            writer.scalars([tag], steps, [time.time()] * len(steps), rows)
        if session is not None:
            writer.session(session)
        writer.close()
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temporaries(run_dir: Path, name: str) -> None:
    """write_derived's temporary files left by a process that was killed (its pid, in the
    name, no longer runs); a living writer's are left alone."""
    for stale in run_dir.glob(f".reluexp-{name}.*.tmp"):
        pid = stale.name.removeprefix(f".reluexp-{name}.").split(".")[0]
        if pid.isdigit() and not process_exists(int(pid)):
            stale.unlink(missing_ok=True)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def loss_gap_series(group: str, difference: dict[int, float]) -> dict[str, dict[int, float]]:
    """A run's per-step loss relative to its reference run's, (loss - ref) / |ref|, as the
    series a report writes into the run: log10 of its magnitude under tags.loss_gap(group)
    (IDENTICAL_LOG10 where the two are equal), and the last step's, signed, as the HParams
    metric FINAL_LOSS_VS_REFERENCE."""
    gap_log10 = {
        step: math.log10(abs(gap)) if gap else IDENTICAL_LOG10 for step, gap in difference.items()
    }
    series = {loss_gap(group): gap_log10}
    if difference:
        last = max(difference)
        series[FINAL_LOSS_VS_REFERENCE] = {last: difference[last]}
    return series
