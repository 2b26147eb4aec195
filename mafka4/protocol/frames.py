"""The client protocol's frames: typed messages in a msgpack body, bulk bytes out of band.

Outer framing: that of ``transport.stream_frames`` (head ``u32 body_bytes, u32 buffer_count``,
the buffers' lengths, the body, the buffers), with the client port's bounds. The body is one
msgpack map, never a pickle:

    {"v": PROTOCOL_VERSION, "api": int, "id": u32 correlation id,
     "kind": "request" | "answer" | "error", "body": the message's map (``messages.to_body``)}

An answer or an error carries its request's ``api`` and ``id``; answers come back in any order.

Decoding runs nothing the peer chose: msgpack with every length bounded, map keys only str,
no ext type (a timestamp included), then the strict codec of ``messages``. Anything else (not
msgpack, truncated, trailing bytes, another version, an unknown key or api, a wrong type) is a
``ProtocolError`` saying what was wrong. ``readable_header`` gives the ``api`` and ``id`` of a
frame that failed, when they could be read, so that the server answers it before it closes.

Pure: messages in, byte parts out; received frames in, messages out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import msgpack

from mafka4.errors import MessageTooLarge, ProtocolError, UnsupportedVersion
from mafka4.limits import (PROTOCOL_BIN_BYTES_MAX, PROTOCOL_BODY_BYTES_MAX, PROTOCOL_FRAME_BUFFERS_MAX,
                           PROTOCOL_FRAME_BYTES_MAX, PROTOCOL_ITEMS_MAX, PROTOCOL_STAGING_BYTES,
                           PROTOCOL_STR_BYTES_MAX, PROTOCOL_VERSION)
from mafka4.protocol.messages import Kind, from_body, message_class, to_body
from mafka4.transport.stream_frames import Frame, FrameReader, FrameTooLarge, encode_parts

_U32_LIMIT = 1 << 32
_KEYS = frozenset({"v", "api", "id", "kind", "body"})
_KINDS = {kind.value: kind for kind in Kind}


@dataclass(frozen=True, slots=True)
class Envelope:
    """One decoded frame: which API, which call, what kind, the typed message, the frame's buffers."""

    api: int
    correlation_id: int
    kind: Kind
    message: object
    buffers: tuple[bytearray, ...]


def frame_reader(frame_bytes_max: int = PROTOCOL_FRAME_BYTES_MAX) -> FrameReader:
    """A ``FrameReader`` with the client port's bounds."""
    return FrameReader(frame_bytes_max=frame_bytes_max, buffers_max=PROTOCOL_FRAME_BUFFERS_MAX,
                       staging_bytes=PROTOCOL_STAGING_BYTES)


def encode_frame(api: int, correlation_id: int, kind: Kind, message: object, buffers: Sequence = (),
                 frame_bytes_max: int = PROTOCOL_FRAME_BYTES_MAX) -> list[bytes | memoryview]:
    """The frame of ``message`` as parts to write in order; ``buffers`` (bytes-like) travel out of
    band first, then the message's ``Buffer`` fields. ``ProtocolError`` for a field its type
    refuses; ``MessageTooLarge`` beyond the body's or the frame's bounds."""
    assert 0 <= correlation_id < _U32_LIMIT, correlation_id
    out_of_band = [buffer.cast("B") if type(buffer) is memoryview else buffer for buffer in buffers]
    body = msgpack.packb({"v": PROTOCOL_VERSION, "api": int(api), "id": correlation_id, "kind": kind.value,
                          "body": to_body(message, out_of_band)}, use_bin_type=True)
    name = type(message).__name__
    if len(body) > PROTOCOL_BODY_BYTES_MAX:
        raise MessageTooLarge(f"a {name} of {len(body)} bytes exceeds PROTOCOL_BODY_BYTES_MAX "
                              f"({PROTOCOL_BODY_BYTES_MAX}); send its bulk bytes as Buffer fields, or ask for less")
    try:
        return encode_parts(body, out_of_band, frame_bytes_max, PROTOCOL_FRAME_BUFFERS_MAX)
    except FrameTooLarge as error:
        raise MessageTooLarge(f"a {name} cannot be sent: {error}") from None


def _refuse_ext(code: int, data: bytes) -> None:
    raise ProtocolError(f"the frame holds a msgpack ext of type {code}; the client protocol has none")


def _unpack(body: bytes | bytearray, body_bytes_max: int) -> object:
    if len(body) > body_bytes_max:
        raise ProtocolError(f"a frame body of {len(body)} bytes exceeds its bound ({body_bytes_max})")
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=True, use_list=False, ext_hook=_refuse_ext,
                               max_str_len=PROTOCOL_STR_BYTES_MAX, max_bin_len=PROTOCOL_BIN_BYTES_MAX,
                               max_array_len=PROTOCOL_ITEMS_MAX, max_map_len=PROTOCOL_ITEMS_MAX, max_ext_len=0)
    except ProtocolError:
        raise
    except Exception as error:  # msgpack's errors of malformed input are ValueError, TypeError and their kin
        raise ProtocolError(f"the frame body is not one bounded msgpack value ({type(error).__name__}: "
                            f"{error!s:.200}); a pickle or a truncated body looks like this") from None


def decode_frame(frame: Frame, body_bytes_max: int = PROTOCOL_BODY_BYTES_MAX) -> Envelope:
    """The envelope of ``frame``, its message typed; ``ProtocolError`` (``UnsupportedVersion`` for
    another version) saying what was wrong."""
    envelope = _unpack(frame.body, body_bytes_max)
    if type(envelope) is not dict:
        raise ProtocolError(f"the frame body is a msgpack {type(envelope).__name__}, not the envelope map")
    if envelope.keys() != _KEYS:
        raise ProtocolError(f"the frame's envelope has the keys {sorted(map(repr, envelope))}; it must have "
                            f"exactly {sorted(_KEYS)}")
    version, api, correlation_id, kind = envelope["v"], envelope["api"], envelope["id"], envelope["kind"]
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise UnsupportedVersion(f"frame version {version!r:.40}, this mafka4 speaks {PROTOCOL_VERSION}: use a "
                                 f"client and a cluster of matching versions")
    if type(correlation_id) is not int or not 0 <= correlation_id < _U32_LIMIT:
        raise ProtocolError(f"the frame's id {correlation_id!r:.40} is not a u32")
    if type(kind) is not str or kind not in _KINDS:
        raise ProtocolError(f"the frame's kind {kind!r:.40} is none of {sorted(_KINDS)}")
    if type(api) is not int or not 0 <= api < _U32_LIMIT:
        raise ProtocolError(f"the frame's api {api!r:.40} is not a u32")
    cls = message_class(api, _KINDS[kind])
    return Envelope(api, correlation_id, _KINDS[kind], from_body(cls, envelope["body"], frame.buffers),
                    frame.buffers)


def readable_header(body: bytes | bytearray, body_bytes_max: int = PROTOCOL_BODY_BYTES_MAX) -> tuple[int, int] | None:
    """``(api, id)`` of a frame that did not decode, if its envelope was readable that far (an api
    that is not a u32 reads as 0); None if there is no id to answer."""
    try:
        envelope = _unpack(body, body_bytes_max)
    except ProtocolError:
        return None
    if type(envelope) is not dict:
        return None
    api, correlation_id = envelope.get("api"), envelope.get("id")
    if type(correlation_id) is not int or not 0 <= correlation_id < _U32_LIMIT:
        return None
    return (api if type(api) is int and 0 <= api < _U32_LIMIT else 0), correlation_id
