"""The hand-encoded scalar events against the protobuf messages they stand for."""

import math

import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary

from reluexp.sink import ScalarEvents, varint


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
