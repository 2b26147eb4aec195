"""Fuzzing the client port (``mafka4.protocol.server``): whatever a peer sends, it gets answers or
errors that decode, and then a close; the server keeps serving, and a good client after it is served.

``MAFKA4_FUZZ_EXAMPLES`` (default 200 here) scales the examples. One server of each kind serves
every example: one that makes connections authenticate (the surface an anonymous peer reaches) and
one without authentication (where every frame reaches the handlers). Each example sends its bytes
on a fresh connection and ends its sending side, so every connection ends.
"""

from __future__ import annotations

import asyncio
import os
import struct
from dataclasses import dataclass

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mafka4.errors import AuthenticationFailed
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.frames import decode_frame, encode_frame, frame_reader
from mafka4.protocol.messages import ApiKey, ApiVersionsRequest, Buffer, Kind, register
from mafka4.protocol.server import ClientPortServer

EXAMPLES = int(os.environ.get("MAFKA4_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                            HealthCheck.function_scoped_fixture])
HOST = "127.0.0.1"
FUZZ_API = 950
WAIT_S = 10  # a safety net: a connection that did not end by then is a failure


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    count: int
    tags: tuple[str, ...]
    data: Buffer | None


register(FUZZ_API, Probe, Probe)


class SecretExchange:
    """Both sides of a two-step exchange: the server accepts the secret ``b"ok"`` as user fuzz."""

    mechanism = "FUZZ"

    def __init__(self):
        self.principal, self._greeted = None, False

    def step(self, client_message: bytes) -> bytes:
        if not self._greeted:
            self._greeted = True
            return b"go"
        if client_message != b"ok":
            raise AuthenticationFailed("wrong secret")
        self.principal = "fuzz"
        return b""

    def first(self) -> bytes:
        return b"hello"

    def respond(self, server_first: bytes) -> bytes:
        return b"ok"

    def finish(self, server_final: bytes) -> None:
        pass


async def _probe(session, request, buffers):
    return request, ()


_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 64) - 1) | st.floats() | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5) | st.integers(-9, 9), children,
                                                                       max_size=4),
    max_leaves=12)
_ENVELOPES = st.fixed_dictionaries({
    "v": st.sampled_from([1, 1, 1, 0, 2]) | _VALUES, "api": st.sampled_from([0, 1, 2, FUZZ_API, 7]) | _VALUES,
    "id": st.integers(0, (1 << 32) - 1) | _VALUES, "kind": st.sampled_from(["request", "answer", "error"]) | _VALUES,
    "body": st.fixed_dictionaries({"name": st.text(max_size=5), "count": st.integers(-9, 9), "tags": st.just([]),
                                   "data": st.none() | st.integers(0, 2)}) | _VALUES,
}) | st.dictionaries(st.sampled_from(["v", "api", "id", "kind", "body", "x"]), _VALUES, max_size=6)


def _framed(body: bytes, buffers: list[bytes]) -> bytes:
    return (struct.pack(">II", len(body), len(buffers)) + b"".join(struct.pack(">I", len(b)) for b in buffers)
            + body + b"".join(buffers))


_BODIES = st.one_of(
    st.binary(max_size=200),
    _VALUES.map(msgpack.packb),
    _ENVELOPES.map(msgpack.packb),
)
_WIRES = st.one_of(
    st.binary(max_size=300),  # anything at all, the outer framing included
    st.builds(_framed, _BODIES, st.lists(st.binary(max_size=20), max_size=3)),
    st.builds(lambda body, cut: _framed(body, [])[:cut], _ENVELOPES.map(msgpack.packb), st.integers(0, 100)),
)


@pytest.fixture(scope="module")
def served():
    loop = asyncio.new_event_loop()
    servers = {authenticating: ClientPortServer({FUZZ_API: _probe}, "fuzzed port", "w1",
                                                (lambda mechanism: SecretExchange()) if authenticating else None,
                                                mechanisms=("FUZZ",))
               for authenticating in (True, False)}
    ports = {mode: loop.run_until_complete(server.start(HOST))[1] for mode, server in servers.items()}
    yield loop, servers, ports
    for server in servers.values():
        server.close()
    loop.close()


async def _send_and_read(port: int, wire: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(wire)
    writer.write_eof()
    received = await asyncio.wait_for(reader.read(), WAIT_S)  # until the server closes
    writer.close()
    return received


def _frames(received: bytes) -> list:
    reader, frames = frame_reader(), []
    while received:
        buffer = reader.get_buffer()
        size = min(len(buffer), len(received))
        buffer[:size], received = received[:size], received[size:]
        frames += reader.buffer_updated(size)
    return [decode_frame(frame) for frame in frames]


async def _served_well(port: int, authenticating: bool) -> None:
    connection = await ClientConnection.open(HOST, port, SecretExchange() if authenticating else None)
    answer, _ = await connection.call(Probe("after", 1, ("a",), None))
    assert answer == Probe("after", 1, ("a",), None)
    connection.close()


@FUZZ
@given(wire=_WIRES, authenticating=st.booleans(), good_first=st.booleans())
def test_any_bytes_get_answers_that_decode_then_a_close_and_the_next_client_is_served(served, wire, authenticating,
                                                                                        good_first):
    loop, servers, ports = served
    if good_first:
        wire = b"".join(map(bytes, encode_frame(ApiKey.API_VERSIONS, 3, Kind.REQUEST, ApiVersionsRequest("f")))) + wire
    received = loop.run_until_complete(_send_and_read(ports[authenticating], wire))
    for envelope in _frames(received):
        assert envelope.kind in (Kind.ANSWER, Kind.ERROR)
    loop.run_until_complete(_served_well(ports[authenticating], authenticating))
