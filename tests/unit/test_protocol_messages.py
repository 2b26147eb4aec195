"""The client protocol's messages and frames (``mafka4.protocol.messages``, ``.frames``, ``.error_codes``):
what is sent is what is decoded, field by field; anything else is a ``ProtocolError`` saying what
was wrong. No sockets."""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import errors
from mafka4.errors import MafkaError, MessageTooLarge, NotLeader, ProtocolError, UnsupportedVersion
from mafka4.limits import PROTOCOL_BODY_BYTES_MAX, PROTOCOL_ITEMS_MAX, PROTOCOL_STR_BYTES_MAX, PROTOCOL_VERSION
from mafka4.protocol.error_codes import error_answer, raised_error
from mafka4.protocol.frames import decode_frame, encode_frame, frame_reader, readable_header
from mafka4.protocol.messages import (ApiKey, ApiVersionsAnswer, ApiVersionsRequest, Buffer, ErrorAnswer, Kind,
                                      SaslAuthenticateAnswer, SaslAuthenticateRequest, SaslHandshakeAnswer,
                                      SaslHandshakeRequest, from_body, register, to_body)
from mafka4.transport.stream_frames import Frame

TEST_API = 900  # an api of this file's own; the product's are ApiKey members


@dataclass(frozen=True, slots=True)
class Inner:
    name: str
    weight: float


@dataclass(frozen=True, slots=True)
class Everything:
    """A message with a field of every type the protocol carries."""
    count: int
    ratio: float
    name: str
    flag: bool
    key: bytes
    maybe: int | None
    names: tuple[str, ...]
    sizes: dict[str, int]
    inner: Inner
    inners: tuple[Inner, ...]
    data: Buffer
    maybe_data: Buffer | None


register(TEST_API, Everything, Inner)

_INTS = st.integers(-(1 << 63), (1 << 64) - 1)
_FLOATS = st.floats(allow_nan=False)
_TEXT = st.text(max_size=20)
_INNER = st.builds(Inner, _TEXT, _FLOATS)
_EVERYTHING = st.builds(
    Everything, _INTS, _FLOATS, _TEXT, st.booleans(), st.binary(max_size=40), st.none() | _INTS,
    st.lists(_TEXT, max_size=5).map(tuple), st.dictionaries(_TEXT, _INTS, max_size=5), _INNER,
    st.lists(_INNER, max_size=3).map(tuple), st.binary(max_size=3000), st.none() | st.binary(max_size=100))
_BUILT_IN = st.one_of(
    st.builds(ApiVersionsRequest, _TEXT),
    st.builds(ApiVersionsAnswer, st.lists(st.integers(0, 9), max_size=3).map(tuple),
              st.lists(st.integers(0, 30), max_size=9).map(tuple), st.lists(_TEXT, max_size=3).map(tuple), _TEXT),
    st.builds(SaslHandshakeRequest, _TEXT), st.builds(SaslHandshakeAnswer, st.lists(_TEXT, max_size=3).map(tuple)),
    st.builds(SaslAuthenticateRequest, st.binary(max_size=200)),
    st.builds(SaslAuthenticateAnswer, st.binary(max_size=200), st.none() | _TEXT))
_API_OF = {ApiVersionsRequest: ApiKey.API_VERSIONS, ApiVersionsAnswer: ApiKey.API_VERSIONS,
           SaslHandshakeRequest: ApiKey.SASL_HANDSHAKE, SaslHandshakeAnswer: ApiKey.SASL_HANDSHAKE,
           SaslAuthenticateRequest: ApiKey.SASL_AUTHENTICATE, SaslAuthenticateAnswer: ApiKey.SASL_AUTHENTICATE}


def through_the_wire(parts: list) -> Frame:
    """The one frame ``parts`` make, read back by a client port's reader (other protocol tests use it too)."""
    wire, reader, frames, position = b"".join(map(bytes, parts)), frame_reader(), [], 0
    while position < len(wire):
        buffer = reader.get_buffer()
        size = min(len(buffer), len(wire) - position)
        buffer[:size] = wire[position:position + size]
        position += size
        frames += reader.buffer_updated(size)
    frame, = frames
    return frame


def _raw(body: bytes, buffers: tuple = ()) -> Frame:
    return Frame(body, buffers)


def _envelope(**changes) -> bytes:
    envelope = {"v": PROTOCOL_VERSION, "api": 0, "id": 7, "kind": "request", "body": {"client": "c"}}
    envelope.update(changes)
    return msgpack.packb(envelope, use_bin_type=True)


@settings(max_examples=150, deadline=None)
@given(_EVERYTHING, st.lists(st.binary(max_size=2000), max_size=3), st.integers(0, (1 << 32) - 1))
def test_every_field_type_crosses_a_frame_as_sent(message, extra_buffers, correlation_id):
    frame = through_the_wire(encode_frame(TEST_API, correlation_id, Kind.REQUEST, message, extra_buffers))
    envelope = decode_frame(frame)
    assert (envelope.api, envelope.correlation_id, envelope.kind) == (TEST_API, correlation_id, Kind.REQUEST)
    assert envelope.message == message
    assert type(envelope.message.data) is bytearray, "an out-of-band field arrives as the bytearray it was read into"
    assert list(envelope.buffers[:len(extra_buffers)]) == extra_buffers, "the frame's own buffers come first"
    assert all(type(buffer) is bytearray for buffer in envelope.buffers)


@settings(max_examples=150, deadline=None)
@given(_BUILT_IN)
def test_the_connection_s_own_messages_cross_a_frame_as_sent(message):
    api = _API_OF[type(message)]
    kind = Kind.REQUEST if type(message).__name__.endswith("Request") else Kind.ANSWER
    envelope = decode_frame(through_the_wire(encode_frame(api, 1, kind, message)))
    assert envelope.message == message and envelope.api == api


def test_a_body_with_an_unknown_or_a_missing_key_names_them():
    with pytest.raises(ProtocolError, match=r"ApiVersionsRequest.*unknown \[\"'extra'\"\]"):
        from_body(ApiVersionsRequest, {"client": "c", "extra": 1})
    with pytest.raises(ProtocolError, match=r"lacks \['client'\]"):
        from_body(ApiVersionsRequest, {})
    with pytest.raises(ProtocolError, match="expected a map of ApiVersionsRequest"):
        from_body(ApiVersionsRequest, ("client", "c"))


def test_a_bool_is_not_an_int_and_an_int_is_not_a_bool_or_a_float():
    body = to_body(Inner("a", 1.5))
    assert from_body(Inner, body) == Inner("a", 1.5)
    with pytest.raises(ProtocolError, match=r"Inner\.weight: expected float, got int"):
        from_body(Inner, {"name": "a", "weight": 1})
    with pytest.raises(ProtocolError, match=r"SaslAuthenticateAnswer\.principal: expected str, got bool"):
        from_body(SaslAuthenticateAnswer, {"message": b"", "principal": True})
    with pytest.raises(ProtocolError, match=r"ApiVersionsAnswer\.versions\[0\]: expected int, got bool"):
        to_body(ApiVersionsAnswer((True,), (), (), "w1"))
    answer = ApiVersionsAnswer((1,), (0,), (), "w1")
    body = to_body(answer)
    assert from_body(ApiVersionsAnswer, body) == answer
    with pytest.raises(ProtocolError, match="expected bool, got int"):
        to_body(ErrorAnswer("NotLeader", "m", 1))
    assert to_body(Inner("a", 2))["weight"] == 2.0 and type(to_body(Inner("a", 2))["weight"]) is float, \
        "an int given for a float is sent as a float"


def test_sizes_beyond_the_bounds_are_refused_naming_the_field():
    with pytest.raises(ProtocolError, match=rf"SaslHandshakeAnswer\.mechanisms: {PROTOCOL_ITEMS_MAX + 1} items"):
        to_body(SaslHandshakeAnswer(("m",) * (PROTOCOL_ITEMS_MAX + 1)))
    with pytest.raises(ProtocolError, match=r"SaslHandshakeRequest\.mechanism: a str of"):
        to_body(SaslHandshakeRequest("é" * PROTOCOL_STR_BYTES_MAX))
    assert to_body(SaslHandshakeRequest("a" * PROTOCOL_STR_BYTES_MAX)), "up to the bound, sent"
    with pytest.raises(MessageTooLarge, match="PROTOCOL_BODY_BYTES_MAX"):
        encode_frame(ApiKey.SASL_HANDSHAKE, 1, Kind.ANSWER,
                     SaslHandshakeAnswer(("x" * 60_000,) * (PROTOCOL_BODY_BYTES_MAX // 60_000 + 1)))
    array = b"\xdd" + struct.pack(">I", PROTOCOL_ITEMS_MAX + 1)  # a msgpack array32 announcing too many items
    with pytest.raises(ProtocolError, match="not one bounded msgpack value"):
        decode_frame(_raw(array))


def test_a_buffer_field_must_name_a_buffer_the_frame_has():
    body = to_body(Everything(1, 1.0, "", False, b"", None, (), {}, Inner("", 0.0), (), b"x", None), [])
    assert body["data"] == 0
    with pytest.raises(ProtocolError, match=r"Everything\.data: refers to buffer 0; the frame has 0"):
        from_body(Everything, body)
    with pytest.raises(ProtocolError, match="pass the frame's buffers"):
        to_body(Everything(1, 1.0, "", False, b"", None, (), {}, Inner("", 0.0), (), b"x", None))


@pytest.mark.parametrize("body, problem", [
    (pickle.dumps({"v": 1, "api": 0}), "not one bounded msgpack value"),
    (_envelope()[:-3], "incomplete input"),
    (_envelope() + b"\x00", "extra data"),
    (_envelope(v=7), f"frame version 7, this mafka4 speaks {PROTOCOL_VERSION}"),
    # Version 1 had no leader epochs in VP fetches and group positions: its frames are refused whole.
    (_envelope(v=PROTOCOL_VERSION - 1), f"frame version {PROTOCOL_VERSION - 1}, this mafka4 speaks {PROTOCOL_VERSION}"),
    (_envelope(api=899), r"unknown api 899"),
    (_envelope(id=-1), "is not a u32"),
    (_envelope(id=1 << 32), "is not a u32"),
    (_envelope(kind="maybe"), "kind 'maybe'"),
    (_envelope(body={"client": 1}), r"ApiVersionsRequest\.client: expected str, got int"),
    (msgpack.packb([1, 0, 7]), "not the envelope map"),
    (msgpack.packb({"v": PROTOCOL_VERSION, "api": 0, "id": 7, "kind": "request"}), "must have exactly"),
    (msgpack.packb({1: 1}), "not one bounded msgpack value"),
    (msgpack.packb(msgpack.ExtType(5, b"x")), "not one bounded msgpack value"),
    (msgpack.packb(msgpack.Timestamp(1)), "not one bounded msgpack value"),
    (b"\xc1", "not one bounded msgpack value"),
    (b"", "not one bounded msgpack value"),
])
def test_a_frame_that_is_not_a_typed_message_is_refused_saying_why(body, problem):
    with pytest.raises(ProtocolError, match=problem):
        decode_frame(_raw(body))


def test_a_wrong_version_is_an_unsupported_version_and_its_id_can_still_be_answered():
    body = _envelope(v=7, api=2, id=41)
    with pytest.raises(UnsupportedVersion):
        decode_frame(_raw(body))
    assert readable_header(body) == (2, 41)
    assert readable_header(_envelope(api="x", id=41)) == (0, 41), "an unreadable api still lets the id be answered"
    assert readable_header(pickle.dumps(1)) is None and readable_header(_envelope(id="x")) is None


def test_a_body_beyond_its_bound_is_refused_before_it_is_decoded():
    with pytest.raises(ProtocolError, match="exceeds its bound"):
        decode_frame(_raw(_envelope(body={"client": "x" * 100})), body_bytes_max=64)


def test_a_mafka_error_travels_as_itself_and_anything_else_as_a_server_failure():
    for error in (NotLeader("w1 is not the leader of orders-0"), errors.StreamLost("lost")):
        answer = from_body(ErrorAnswer, to_body(error_answer(error)))
        again = raised_error(answer)
        assert type(again) is type(error) and str(again) == str(error) and again.retriable == error.retriable
    failure = raised_error(error_answer(KeyError("k")))
    assert type(failure) is MafkaError and str(failure) == "the server failed: KeyError: 'k'"


def test_an_error_name_the_client_does_not_know_becomes_a_mafka_error_and_nothing_else_is_imported():
    class PluginError(MafkaError):
        retriable = True
    answer = error_answer(PluginError("a plugin's error"))
    assert answer == ErrorAnswer("PluginError", "a plugin's error", True)
    again = raised_error(answer)
    assert type(again) is MafkaError and str(again) == "PluginError: a plugin's error" and again.retriable
    for name in ("Exception", "SystemExit", "__builtins__", "os.system", "MafkaError.__class__"):
        assert type(raised_error(ErrorAnswer(name, "m", False))) is MafkaError, name


def test_a_long_error_message_is_cut_to_what_a_frame_carries():
    answer = error_answer(MafkaError("é" * PROTOCOL_STR_BYTES_MAX))
    assert from_body(ErrorAnswer, to_body(answer)).message == answer.message
