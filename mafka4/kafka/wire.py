"""Kafka request frames in, Kafka response frames out: the layer a node's Kafka listener stands on.

A Kafka connection carries frames, each a 4-byte big-endian size and that many bytes. A request
frame is a request header and a body; a response frame a response header and a body. Every
layout is Kafka's own, as the ``kio`` library generates it from Kafka's message schemas: nothing
here lays out a header or a body by hand, but the two fields every header version starts with.

    request header v1   api_key int16, api_version int16, correlation_id int32, client_id nullable string
    request header v2   v1 and tagged fields (the flexible versions of an API, KIP-482)
    response header v0  correlation_id int32
    response header v1  v0 and tagged fields (the flexible versions of an API)

Which header version a message takes is its kio class's ``__header_schema__``. ApiVersions
responses always take header v0, whatever the version (KIP-511): a client that does not yet
know which versions the node speaks can read it.

``served`` maps each API key the node serves to its (min, max) version: what ``read_request``
accepts and what the ApiVersions answer lists. A request outside it, or one whose bytes are not
what its header names, raises ``KafkaWireError`` with Kafka's error code; ``error_response`` is
the answer to send for it. A frame too short for a header, or any other bytes, raises only that:
before kio parses a body, ``array_bounds.check_arrays`` makes sure no array claims more items
than its bytes hold (kio reserves memory by the claimed count, and a failed reservation ends
the process).

Pure: bytes in, bytes out; no sockets.
"""

from __future__ import annotations

import datetime
import io
import struct
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator, Mapping

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.response_header.v0 import ResponseHeader as ResponseHeaderV0
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError
from kio.static.constants import EntityType

from mafka4.errors import KafkaWireError
from mafka4.kafka.array_bounds import check_arrays

API_VERSIONS = 18  # the API key of ApiVersions
UNSUPPORTED_VERSION = int(ErrorCode.unsupported_version)  # 35
INVALID_REQUEST = int(ErrorCode.invalid_request)  # 42
SIZE = struct.Struct(">i")  # a frame's size prefix
# The fields every request header version starts with: enough to know which header and body follow.
_HEADER_START = struct.Struct(">hhi")
_ERROR_CODE = struct.Struct(">h")
FRAME_SIZE_LIMIT = 2**31 - 1  # what the int32 size prefix can say

Served = Mapping[int, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """One parsed request: its header's fields and its body, an instance of the kio request class
    of ``api_key`` at ``api_version``."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: object


def frame_size(prefix: bytes, bytes_max: int) -> int:
    """The size a frame's 4-byte ``prefix`` announces; ``KafkaWireError`` for one that is negative,
    0, or above ``bytes_max`` (the listener then closes the connection, as a broker does: the bytes
    that follow cannot be told apart from another frame)."""
    assert len(prefix) == SIZE.size, len(prefix)
    (size,) = SIZE.unpack(prefix)
    if not 0 < size <= bytes_max:
        raise KafkaWireError(f"a Kafka frame announces {size} bytes; a request frame has 1 to {bytes_max} "
                             f"(a client sending more must lower its request size, e.g. max.request.size)")
    return size


def read_request(frame: bytes | bytearray | memoryview, served: Served) -> KafkaRequest:
    """The request in ``frame`` (the bytes after the size prefix).

    ``KafkaWireError`` with error code 35 (UNSUPPORTED_VERSION) for an API key or version not in
    ``served``; 42 (INVALID_REQUEST) for a header or body that does not parse, or bytes left
    after the body; its ``correlation_id``, ``api_key`` and ``api_version`` are None when the frame
    is too short to hold them.
    """
    if len(frame) < _HEADER_START.size:
        raise KafkaWireError(f"a Kafka frame of {len(frame)} bytes is too short for a request header "
                             f"({_HEADER_START.size} bytes at least): not a Kafka client")
    api_key, api_version, correlation_id = _HEADER_START.unpack_from(frame)
    known = {"correlation_id": correlation_id, "api_key": api_key, "api_version": api_version}
    versions = served.get(api_key)
    if versions is None:
        raise KafkaWireError(f"API key {api_key} is not served by this node (served: {_served_text(served)})",
                             error_code=UNSUPPORTED_VERSION, **known)
    if not versions[0] <= api_version <= versions[1]:
        raise KafkaWireError(f"API key {api_key} version {api_version} is not served by this node, which serves "
                             f"versions {versions[0]} to {versions[1]}: the client must ask ApiVersions first",
                             error_code=UNSUPPORTED_VERSION, **known)
    request_class, read_header, read_body = _request_readers(api_key, api_version)
    # kio reads only read-only buffers; a read-only view of a bytearray costs no copy.
    frame = memoryview(frame).toreadonly()
    with _refused_unless_parsed(f"the header of API key {api_key} version {api_version}", known):
        header, position = read_header(frame, 0)
    with _refused_unless_parsed(f"the body of API key {api_key} version {api_version}", known):
        check_arrays(request_class, frame, position)  # before kio reserves memory by the counts (see there)
        body, size = read_body(frame, position)
    if position + size != len(frame):
        raise KafkaWireError(f"{len(frame) - position - size} bytes are left after the body of API key {api_key} "
                             f"version {api_version}: the frame is not one request", **known)
    return KafkaRequest(api_key, api_version, correlation_id, header.client_id, body)


@contextmanager
def _refused_unless_parsed(what: str, known: dict) -> Iterator[None]:
    """``KafkaWireError`` naming ``what`` for what kio (or ``check_arrays``) raises on bytes that do not parse."""
    try:
        yield
    # kio's native readers raise its DecodeError for short bytes and ValueError (UnicodeDecodeError
    # among them) for values out of their field's range, and KeyError for a tagged field its schema
    # does not know (Kafka's rule is to skip one: a client sending tagged fields newer than kio's
    # schemas is refused here). The hypothesis tests feed it random bytes to find any other.
    except (ValueError, TypeError, OverflowError, KeyError, SerialError) as error:
        raise KafkaWireError(f"{what} does not parse: {type(error).__name__}: {error}", **known) from None


@lru_cache(maxsize=None)
def _request_readers(api_key: int, api_version: int) -> tuple[type, Callable, Callable]:
    """kio's class of requests of ``api_key`` at ``api_version``, and its readers of their header and body."""
    request_class = load_request_schema(api_key, api_version)
    return request_class, entity_reader(request_class.__header_schema__), entity_reader(request_class)


@lru_cache(maxsize=None)
def _writer(entity_class: type) -> Callable:
    return entity_writer(entity_class)


def encode_response(request: KafkaRequest, body: object) -> bytes:
    """The whole response frame to ``request``: size prefix, the response header its version takes
    (v0 for every ApiVersions response), and ``body``, an instance of the kio response class of the
    request's API key and version."""
    body_class = type(body)
    assert (body_class.__api_key__, body_class.__version__) == (request.api_key, request.api_version), (
        f"a {body_class.__name__} v{body_class.__version__} answers API key {request.api_key} "
        f"version {request.api_version}")
    return _framed(request.correlation_id, body_class.__header_schema__, lambda buffer: _writer(body_class)(buffer, body))


def _framed(correlation_id: int, header_class: type, write_body: Callable[[io.BytesIO], object]) -> bytes:
    buffer = io.BytesIO()
    buffer.write(bytes(SIZE.size))
    _writer(header_class)(buffer, header_class(correlation_id=correlation_id))
    write_body(buffer)
    frame = buffer.getbuffer()
    size = len(frame) - SIZE.size
    assert size <= FRAME_SIZE_LIMIT, f"a response of {size} bytes"
    SIZE.pack_into(frame, 0, size)
    del frame  # the view must go before the buffer's bytes are taken
    return buffer.getvalue()


def error_response(api_key: int, api_version: int, correlation_id: int, error_code: int, served: Served) -> bytes:
    """The answer to a request that failed before or while its body was parsed (a ``KafkaWireError``
    whose ``correlation_id`` is known; without one nothing can be answered).

    ApiVersions is answered with a v0 body behind header v0, whatever version was asked: at an
    unserved version (UNSUPPORTED_VERSION) it lists every API key of ``served``, so that the client
    retries at a version both speak, as Kafka answers it (KIP-511); with another error it lists
    none. Kafka answers that other case at the version asked, but kafka-python reads every
    ApiVersions error answer as v0 (and Kafka's Java client falls back to v0 when the version
    asked does not parse), so v0 is the answer every client can read.

    Any other API: the response header (the version's own when ``served`` holds the version, else
    v0) and one int16, the error code. A client can read no more than the correlation id and,
    where its response begins with an error code, the error: the most a server can answer a
    request it could not read. The listener closes the connection after sending it, as a broker
    closes one it cannot answer.
    """
    if api_key == API_VERSIONS:
        body = api_versions_body(served if error_code == UNSUPPORTED_VERSION else {}, 0, error_code)
        return _framed(correlation_id, type(body).__header_schema__, lambda buffer: _writer(type(body))(buffer, body))
    versions = served.get(api_key)
    known_version = versions is not None and versions[0] <= api_version <= versions[1]
    header_class = load_response_schema(api_key, api_version).__header_schema__ if known_version else ResponseHeaderV0
    return _framed(correlation_id, header_class, lambda buffer: buffer.write(_ERROR_CODE.pack(error_code)))


def api_versions_body(served: Served, version: int, error_code: int = 0) -> object:
    """The ApiVersionsResponse body at ``version`` (any kio knows: 0 to 4) listing ``served``, its API
    keys in ascending order, with ``error_code`` and no throttling."""
    response_class = load_response_schema(API_VERSIONS, version)
    entry_class = load_payload_module(API_VERSIONS, version, EntityType.response).ApiVersion
    api_keys = tuple(entry_class(api_key=key, min_version=low, max_version=high)
                     for key, (low, high) in sorted(served.items()))
    fields = {"error_code": ErrorCode(error_code), "api_keys": api_keys}
    if version >= 1:
        fields["throttle_time"] = datetime.timedelta(0)
    return response_class(**fields)


def _served_text(served: Served) -> str:
    return ", ".join(f"{key} v{low}-{high}" for key, (low, high) in sorted(served.items())) or "none"
