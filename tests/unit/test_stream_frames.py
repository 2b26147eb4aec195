"""Stream frames (``mafka4.transport.stream_frames``) and the stream calls' pickles in them
(``stream_pickles``): what is encoded is what is read back, however the byte stream is cut; large
bytes travel out of band, uncopied; bad frames are refused. No sockets."""

from __future__ import annotations

import pickle
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.limits import (STREAM_FRAME_BYTES_MAX, STREAM_OUT_OF_BAND_BYTES_MIN, STREAM_STAGING_BYTES,
                           STREAM_WRITTEN_APART_BYTES_MIN)
from mafka4.transport import stream_frames
from mafka4.transport.stream_frames import BadFrame, FrameReader, FrameTooLarge, encode_raw
from mafka4.transport.stream_pickles import decode, encode

# Sizes on both sides of every threshold the frames have.
_SIZES = st.sampled_from([0, 1, STREAM_OUT_OF_BAND_BYTES_MIN - 1, STREAM_OUT_OF_BAND_BYTES_MIN, 5000,
                          STREAM_WRITTEN_APART_BYTES_MIN - 1, STREAM_WRITTEN_APART_BYTES_MIN,
                          STREAM_STAGING_BYTES - 1, STREAM_STAGING_BYTES, STREAM_STAGING_BYTES + 7, 700_000])
_DATA = st.builds(lambda size, byte, kind: kind(bytes([byte]) * size), _SIZES, st.integers(0, 255),
                  st.sampled_from([bytes, bytearray]))
_LEAVES = st.one_of(st.integers(), st.text(max_size=8), st.none(), _DATA)
_OBJECTS = st.recursive(_LEAVES, lambda children: st.one_of(
    st.lists(children, max_size=4), st.tuples(children, children),
    st.dictionaries(st.text(max_size=4), children, max_size=3)), max_leaves=8)


def _wire(*objects: object) -> bytes:
    return b"".join(bytes(part) for obj in objects for part in encode(obj))


def _read(wire: bytes, cuts: list[int]) -> list:
    """Feed ``wire`` to a reader in pieces no longer than each of ``cuts`` in turn (then the rest at once)."""
    reader, frames, position, cuts = FrameReader(), [], 0, list(cuts)
    while position < len(wire):
        buffer = reader.get_buffer()
        assert len(buffer) > 0, "the reader always has room"
        size = min(len(buffer), len(wire) - position, cuts.pop(0) if cuts else len(wire))
        buffer[:size] = wire[position:position + size]
        position += size
        frames += reader.buffer_updated(size)
    return frames


def _same_shape(sent: object, received: object) -> bool:
    """Equal values, and the out-of-band bytes (and only they) received as bytearray."""
    if isinstance(sent, (bytes, bytearray)):
        expected = bytearray if len(sent) >= STREAM_OUT_OF_BAND_BYTES_MIN else type(sent)
        return type(received) is expected and received == sent
    if isinstance(sent, (list, tuple)):
        return type(received) is type(sent) and len(received) == len(sent) and all(map(_same_shape, sent, received))
    if isinstance(sent, dict):
        return received.keys() == sent.keys() and all(_same_shape(sent[k], received[k]) for k in sent)
    return received == sent


@settings(max_examples=60, deadline=None)
@given(st.lists(_OBJECTS, min_size=1, max_size=3), st.lists(st.integers(1, 300_000), max_size=30))
def test_frames_read_back_as_sent_however_the_stream_is_cut(objects, cuts):
    frames = _read(_wire(*objects), cuts)
    assert len(frames) == len(objects)
    for sent, frame in zip(objects, frames):
        assert _same_shape(sent, decode(frame))


def test_one_byte_at_a_time_still_reads_every_frame():
    objects = [(1, b"k", bytes(5000)), {"data": bytes(70_000)}, "last"]
    frames = _read(_wire(*objects), [1] * 200_000)
    assert [decode(frame) for frame in frames] == objects


def test_large_bytes_are_written_as_views_of_themselves_and_small_ones_joined():
    large, small = b"L" * STREAM_WRITTEN_APART_BYTES_MIN, b"s" * STREAM_OUT_OF_BAND_BYTES_MIN
    parts = encode((small, large, small))
    assert [type(part) for part in parts] == [bytes, memoryview, bytes]
    assert parts[1].obj is large, "the large bytes are not copied on their way to the socket"
    assert small in parts[0] and small in parts[2], "out of band, joined to the parts around"


def test_a_large_part_is_read_into_its_own_bytearray():
    data = bytes(range(256)) * 4096  # 1 MiB
    frame, = _read(_wire((7, data)), [])
    call_id, received = decode(frame)
    assert call_id == 7 and type(received) is bytearray and received == data
    assert frame.buffers == (received,), "the object gets the very buffer the socket was read into"


def test_a_connection_s_first_frame_carries_the_token_as_it_is():
    frame, = _read(b"".join(map(bytes, encode_raw(b"token-bytes"))), [3, 3])
    assert bytes(frame.body) == b"token-bytes" and frame.buffers == ()


def test_a_frame_above_the_bound_is_refused_before_it_is_sent(monkeypatch):
    monkeypatch.setattr(stream_frames, "STREAM_FRAME_BYTES_MAX", 10_000)
    with pytest.raises(FrameTooLarge, match=r"STREAM_FRAME_BYTES_MAX \(10000\)"):
        encode((1, bytes(20_000)))
    assert encode((1, bytes(5_000))), "below it, encoded"


@pytest.mark.parametrize("head, problem", [
    (struct.pack(">II", STREAM_FRAME_BYTES_MAX + 1, 0), "bytes of body"),
    (struct.pack(">II", 10, 2**32 - 1), "buffers"),
    (struct.pack(">II", 10, 2) + struct.pack(">II", STREAM_FRAME_BYTES_MAX, 10), "stream frame of"),
])
def test_a_peer_announcing_a_frame_beyond_the_bounds_is_refused_before_it_is_read(head, problem):
    reader = FrameReader()
    reader.get_buffer()[:len(head)] = head
    with pytest.raises(BadFrame, match=problem):
        reader.buffer_updated(len(head))


def test_a_reference_to_a_buffer_the_frame_lacks_does_not_load():
    body = pickle.dumps(1, protocol=5)
    persistent = b"\x80\x05K\x03Q."  # PROTO 5, BININT1 3, BINPERSID, STOP: buffer 3 of none
    for payload, ok in ((body, True), (persistent, False)):
        frame, = _read(struct.pack(">II", len(payload), 0) + payload, [])
        if ok:
            assert decode(frame) == 1
        else:
            with pytest.raises(pickle.UnpicklingError, match="buffer 3"):
                decode(frame)
