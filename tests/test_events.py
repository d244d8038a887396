"""The event encoding and reading against protobuf's messages and TensorBoard's reader."""

import itertools
import math
import os
import stat
import subprocess
import sys
import time

import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from reluexp.record.events import (
    EventFile,
    EventWriter,
    ScalarEvents,
    read_scalars,
    varint,
    write_derived,
)
from reluexp.run import runner
from tests.helpers import plugin_scalars, scalars, small_config, tensorboard

# A 1x1 PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000000000500010d0a2db40000000049454e44ae426082"
)

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**35])
def test_varint_is_protobufs_encoding(n):
    assert Event.FromString(b"\x10" + varint(n)).step == n


@pytest.mark.parametrize("step", [0, 1, 499, 2**40])
def test_scalar_events_parse_as_the_messages_they_encode(step):
    tags = ["loss/train", "grad_norm/w1", "activation/exact_zeros", "t" * 200]
    row = [7.040318450890481e-05, 0.0, 3, -2.5e30]
    (serialized,) = ScalarEvents(tags).encode([step], [1764495600.25], [row])
    encoded = Event.FromString(serialized)
    values = [Summary.Value(tag=tag, simple_value=value) for tag, value in zip(tags, row)]
    assert encoded == Event(wall_time=1764495600.25, step=step, summary=Summary(value=values))


def test_a_block_of_rows_encodes_as_each_row_alone():
    encoder = ScalarEvents(["loss/train", "norm/grad_w1"])
    rows = [[1.5, 2.0], [3.25, -0.0], [math.inf, 1e-45]]
    block = encoder.encode([0, 1, 300], [1.0, 2.0, 3.5], rows)
    alone = [
        encoder.encode([s], [t], [r])[0] for s, t, r in zip([0, 1, 300], [1.0, 2.0, 3.5], rows)
    ]
    assert block == alone and len(set(block)) == 3
    assert encoder.encode([], [], []) == []


def test_out_of_range_and_nan_values_become_float32_like_protobufs():
    encoder = ScalarEvents(["a", "b", "c"])
    (serialized,) = encoder.encode([3], [0.0], [[1e39, -1e39, math.nan]])
    encoded = Event.FromString(serialized)
    a, b, c = (value.simple_value for value in encoded.summary.value)
    assert (a, b) == (math.inf, -math.inf)
    assert math.isnan(c)


def tensorboards_view(run_dir, tags):
    shown = scalars(run_dir)
    return {tag: dict(shown.get(tag, [])) for tag in tags}


def test_read_scalars_sees_a_resumed_run_as_tensorboard_does(tmp_path):
    tags = ["loss/train", "grad_norm/w1", "never/written"]
    first = EventWriter(tmp_path, start_step=0)
    first.scalars(tags[:2], range(10), [1.0] * 10, [[step + 0.5, -step] for step in range(10)])
    first.close()
    # The resumed part starts again at step 6: what the first part logged from there is dropped.
    resumed = EventWriter(tmp_path, start_step=6)
    resumed.scalars(tags[:2], range(6, 8), [2.0] * 2, [[100.0, 7.0], [101.0, 8.0]])
    resumed.close()
    ours = read_scalars(tmp_path, tags)
    assert ours["loss/train"] == {**{s: s + 0.5 for s in range(6)}, 6: 100.0, 7: 101.0}
    assert ours == tensorboards_view(tmp_path, tags)
    # 31.7: and as TensorBoard's plugin reader (`--load_fast=false`) does, one point per step.
    assert plugin_scalars(tmp_path, "loss/train") == ours["loss/train"]


def test_read_scalars_stops_at_a_torn_record(tmp_path):
    writer = EventWriter(tmp_path)
    writer.scalars(["loss/train"], [0, 1], [1.0, 1.0], [[3.0], [2.0]])
    writer.close()
    (events_file,) = tmp_path.glob("events.out.tfevents.*")
    intact = events_file.read_bytes()
    events_file.write_bytes(intact[:-5])  # the last record's tail never reached the disk
    assert read_scalars(tmp_path, ["loss/train"]) == {"loss/train": {0: 3.0}}


def test_a_derived_file_is_written_aside_under_a_name_tensorboard_never_lists(
    tmp_path, monkeypatch
):
    """31.3: while a report writes, the run directory holds no extra run (no subdirectory)
    and no second event file; a write killed mid-way (its temp file left, torn) changes
    nothing of the next one, which removes its temp file (42.3); two writers never share a temp
    file, and a living writer's is left alone."""
    seen = []
    images = EventWriter.images

    def look_mid_write(writer, pngs):
        images(writer, pngs)
        seen.append(sorted(p.name for p in tmp_path.iterdir()))

    monkeypatch.setattr(EventWriter, "images", look_mid_write)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed = tmp_path / f".reluexp-report.{ended.pid}.0badc0de.tmp"
    other = tmp_path / f".reluexp-report.{living.pid}.12345678.tmp"
    try:
        for temporary in (killed, other):
            temporary.write_bytes(b"\x10\x00torn")
        for _ in range(2):
            write_derived(tmp_path, "report", series={"a/b": {0: 1.0, 1: 2.0}}, images={"i": PNG})
    finally:
        living.kill()
        living.wait()
    final = "events.out.tfevents.reluexp-report"
    for names in seen:
        assert [n for n in names if "tfevents" in n] in ([], [final])
        assert not any((tmp_path / n).is_dir() for n in names)
        temporaries = [n for n in names if n.endswith(".tmp")]
        assert other.name in temporaries and len(temporaries) == 2  # the other's and its own
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, final]
    assert scalars(tmp_path)["a/b"] == [(0, 1.0), (1, 2.0)]
    assert len(tensorboard(tmp_path).Images("i")) == 1


def test_a_derived_file_has_the_mode_of_a_runs_own_files(tmp_path):
    """42.3: readable by a TensorBoard that another user runs, as the run's events are."""
    previous = os.umask(0o022)
    try:
        EventWriter(tmp_path, start_step=0).close()
        write_derived(tmp_path, "report", series={"a/b": {0: 1.0}})
    finally:
        os.umask(previous)
    modes = {p.name.split(".")[3]: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert set(modes.values()) == {0o644}, modes


def test_event_files_sort_in_writing_order_within_one_second(tmp_path, monkeypatch):
    """A resumed part written in the same second as the part it continues (the 10th file of a
    process after its 9th): readers take files in name order, so names must sort as written."""
    monkeypatch.setattr(EventFile, "_counter", itertools.count(9))
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.25)
    first = EventWriter(tmp_path, start_step=0)
    first.scalars(["loss/train"], range(4), [1.0] * 4, [[float(s)] for s in range(4)])
    first.close()
    resumed = EventWriter(tmp_path, start_step=2)
    resumed.scalars(["loss/train"], [2, 3], [2.0] * 2, [[20.0], [30.0]])
    resumed.close()
    expected = {0: 0.0, 1: 1.0, 2: 20.0, 3: 30.0}
    assert read_scalars(tmp_path, ["loss/train"])["loss/train"] == expected
    assert plugin_scalars(tmp_path, "loss/train") == expected


def test_every_streamed_tag_says_what_it_means_in_tensorboard(tmp_path):
    """62.9: units/exact_zeros and the other streamed tags carried no description; each now
    has one on its first point, which TensorBoard shows beside its chart."""
    from tensorboard.backend.event_processing import plugin_event_accumulator

    runner.run(small_config(steps=3), tmp_path)
    events = plugin_event_accumulator.EventAccumulator(str(tmp_path))
    events.Reload()
    shown = {
        tag: events.SummaryMetadata(tag).summary_description for tag in events.Tags()["tensors"]
    }
    streamed = [tag for tag in shown if tag.split("/")[0] in ("loss", "norm", "units")]
    assert len(streamed) >= 10
    assert all(shown[tag] for tag in streamed), [tag for tag in streamed if not shown[tag]]
    assert shown["units/exact_zeros"].startswith("pre-activations exactly 0.0 in the step's batch")
    assert shown["norm/grad_w1"] == "the L2 norm of w1's gradient, before the update"


def test_every_reader_sees_every_point_of_a_50_step_run(tmp_path):
    """74.4: a tag's first point carries its description as a scalars tensor, which
    EventAccumulator.Scalars and tbparse skip: they saw a 50-step run's loss from step 1. The
    point is a simple_value too; every reader sees the 50 points, the first included."""
    from tbparse import SummaryReader

    runner.run(small_config(steps=50), tmp_path)
    written = read_scalars(tmp_path, ["loss/train"])["loss/train"]
    assert sorted(written) == list(range(50))
    legacy = {event.step: event.value for event in tensorboard(tmp_path).Scalars("loss/train")}
    frame = SummaryReader(str(tmp_path)).scalars
    loss = frame[frame["tag"] == "loss/train"]
    assert legacy == written
    assert dict(zip(loss["step"], loss["value"])) == written
    assert dict(scalars(tmp_path)["loss/train"]) == written
