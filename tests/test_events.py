"""The event encoding and reading against protobuf's messages and TensorBoard's reader."""

import math

import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from reluexp.record.events import EventWriter, ScalarEvents, read_scalars, varint
from tests.helpers import tensorboard

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 2**35])
def test_varint_is_protobufs_encoding(n):
    assert Event.FromString(b"\x10" + varint(n)).step == n


@pytest.mark.parametrize("step", [0, 1, 499, 2**40])
def test_scalar_events_parse_as_the_messages_they_encode(step):
    tags = ["loss/train", "grad_norm/w1", "activation/exact_zeros", "t" * 200]
    row = [7.040318450890481e-05, 0.0, 3, -2.5e30]
    encoded = Event.FromString(ScalarEvents(tags).encode(step, 1764495600.25, row))
    values = [Summary.Value(tag=tag, simple_value=value) for tag, value in zip(tags, row)]
    assert encoded == Event(wall_time=1764495600.25, step=step, summary=Summary(value=values))


def test_out_of_range_and_nan_values_become_float32_like_protobufs():
    encoder = ScalarEvents(["a", "b", "c"])
    encoded = Event.FromString(encoder.encode(3, 0.0, [1e39, -1e39, math.nan]))
    a, b, c = (value.simple_value for value in encoded.summary.value)
    assert (a, b) == (math.inf, -math.inf)
    assert math.isnan(c)


def tensorboards_view(run_dir, tags):
    events = tensorboard(run_dir)
    present = events.Tags()["scalars"]
    return {
        tag: {e.step: e.value for e in events.Scalars(tag)} if tag in present else {}
        for tag in tags
    }


def test_read_scalars_sees_a_resumed_run_as_tensorboard_does(tmp_path):
    tags = ["loss/train", "grad_norm/w1", "never/written"]
    first = EventWriter(tmp_path)
    first.scalars(tags[:2], range(10), [1.0] * 10, [[step + 0.5, -step] for step in range(10)])
    first.close()
    # The resumed part starts again at step 6: what the first part logged from there is dropped.
    resumed = EventWriter(tmp_path, purge_step=6)
    resumed.scalars(tags[:2], range(6, 8), [2.0] * 2, [[100.0, 7.0], [101.0, 8.0]])
    resumed.close()
    ours = read_scalars(tmp_path, tags)
    assert ours["loss/train"] == {**{s: s + 0.5 for s in range(6)}, 6: 100.0, 7: 101.0}
    assert ours == tensorboards_view(tmp_path, tags)


def test_read_scalars_stops_at_a_torn_record(tmp_path):
    writer = EventWriter(tmp_path)
    writer.scalars(["loss/train"], [0, 1], [1.0, 1.0], [[3.0], [2.0]])
    writer.close()
    (events_file,) = tmp_path.glob("events.out.tfevents.*")
    intact = events_file.read_bytes()
    events_file.write_bytes(intact[:-5])  # the last record's tail never reached the disk
    assert read_scalars(tmp_path, ["loss/train"]) == {"loss/train": {0: 3.0}}
