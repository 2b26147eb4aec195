"""The client port (``mafka4.protocol.server`` and ``.connection``): a real server and clients on loopback.

A test exchange stands in for SCRAM (part of ``mafka4.security``): the client sends a greeting,
then the secret; the server accepts ``b"ok"`` as user alice and proves itself with ``b"proof"``.
A test API (``ECHO``) stands in for the data APIs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest

from mafka4.errors import (AuthenticationFailed, InvalidConfig, MafkaError, NotAuthenticated, NotLeader, ProtocolError,
                           RequestTimedOut, StreamLost, UnsupportedVersion)
from mafka4.limits import PROTOCOL_VERSION
from mafka4.limits.servers import ClientPortConfig
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.error_codes import raised_error
from mafka4.protocol.frames import decode_frame, encode_frame, frame_reader
from mafka4.protocol.messages import (ApiKey, ApiVersionsRequest, Buffer, ErrorAnswer, Kind, SaslAuthenticateRequest,
                                      SaslHandshakeRequest, register)
from mafka4.protocol.server import ClientPortServer

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]
ECHO, UNSERVED = 901, 902  # test APIs: one served, one registered but served by no handler
WAIT_S = 10  # a safety net for a test that would otherwise hang; nothing waits this long when it passes


@dataclass(frozen=True, slots=True)
class EchoRequest:
    text: str
    data: Buffer | None


@dataclass(frozen=True, slots=True)
class EchoAnswer:
    text: str
    principal: str
    data: Buffer | None


@dataclass(frozen=True, slots=True)
class Unserved:
    text: str


register(ECHO, EchoRequest, EchoAnswer)
register(UNSERVED, Unserved, Unserved)


class SecretServerExchange:
    def __init__(self):
        self.principal, self._steps = None, 0

    def step(self, client_message: bytes) -> bytes:
        self._steps += 1
        if self._steps == 1:
            return b"challenge"
        if client_message != b"ok":
            raise AuthenticationFailed("user 'alice' failed TEST authentication: wrong password or unknown user; "
                                       "check the credential (mafka4 user add)")
        self.principal = "alice"
        return b"proof"


class SecretClientExchange:
    mechanism = "TEST"

    def __init__(self, secret: bytes = b"ok", proof: bytes = b"proof"):
        self._secret, self._proof = secret, proof

    def first(self) -> bytes:
        return b"hello"

    def respond(self, server_first: bytes) -> bytes:
        assert server_first == b"challenge"
        return self._secret

    def finish(self, server_final: bytes) -> None:
        if server_final != self._proof:
            raise AuthenticationFailed("the server's proof is wrong")


class Echo:
    """The ECHO handler: answers the text, who asked, and its bytes reversed; parks on request."""

    def __init__(self):
        self.running = self.running_max = 0
        self.full = asyncio.Event()
        self.release = asyncio.Event()
        self.running_bound = None
        self.sessions = []

    async def __call__(self, session, request, buffers):
        self.sessions.append(session)
        if request.text == "refuse":
            raise NotLeader("w1 is not the leader of orders-0 (leader: w2)")
        if request.text == "crash":
            raise KeyError("a bug")
        if request.text.startswith("yield"):
            for _ in range(int(request.text[5:]) % 7):
                await asyncio.sleep(0)  # answers leave in another order than the requests came
        if request.text == "park":
            self.running += 1
            self.running_max = max(self.running_max, self.running)
            if self.running == self.running_bound:
                self.full.set()
            await self.release.wait()
            self.running -= 1
        assert all(type(buffer) is bytearray for buffer in buffers)
        data = None if request.data is None else request.data[::-1]
        return EchoAnswer(request.text, session.principal, data), tuple(buffers)


@contextlib.asynccontextmanager
async def _serving(config: ClientPortConfig = ClientPortConfig(), authenticating: bool = True):
    echo = Echo()
    server = ClientPortServer({ECHO: echo}, "node w1's client port", "w1",
                              (lambda mechanism: SecretServerExchange()) if authenticating else None,
                              mechanisms=("TEST",), config=config)
    host, port = await server.start(HOST)
    try:
        yield server, echo, port
    finally:
        server.close()


async def _open(port: int, exchange=SecretClientExchange()) -> ClientConnection:
    return await ClientConnection.open(HOST, port, exchange, client="test")


async def _raw_exchange(port: int, wire: bytes, first: bytes = b"", half_close: bool = False) -> list:
    """Send ``first`` on a fresh connection and read the one frame it answers, then send ``wire``
    (and end the sending side, if ``half_close``) and read until the server closes the connection:
    the frames answered, in order."""
    reader, writer = await asyncio.open_connection(HOST, port)
    frames, frame_bytes = [], frame_reader()

    def take(received: bytes) -> None:
        nonlocal frames
        while received:
            buffer = frame_bytes.get_buffer()
            size = min(len(buffer), len(received))
            buffer[:size], received = received[:size], received[size:]
            frames += frame_bytes.buffer_updated(size)
    if first:
        writer.write(first)
        while not frames:
            take(await asyncio.wait_for(reader.read(1 << 16), WAIT_S))
    writer.write(wire)
    if half_close:
        writer.write_eof()
    take(await asyncio.wait_for(reader.read(), WAIT_S))  # until EOF: the server closed
    writer.close()
    return [decode_frame(frame) for frame in frames]


def _framed(body: bytes) -> bytes:
    return struct.pack(">II", len(body), 0) + body


def test_an_authenticated_client_calls_and_is_known_by_its_principal():
    async def main():
        async with _serving() as (server, echo, port):
            connection = await _open(port)
            assert (connection.principal, connection.node_id) == ("alice", "w1")
            answer, buffers = await connection.call(EchoRequest("hi", None))
            assert answer == EchoAnswer("hi", "alice", None) and buffers == ()
            assert echo.sessions[0].principal == "alice" and echo.sessions[0].peer.startswith("127.0.0.1:")
            versions, _ = await connection.call(ApiVersionsRequest("test"))
            assert versions.api_keys == (0, 1, 2, ECHO) and versions.mechanisms == ("TEST",)
            connection.close()
            assert connection.closed
    asyncio.run(main())


def test_many_concurrent_calls_are_each_answered_by_their_own_id():
    async def main():
        async with _serving() as (server, echo, port):
            connection = await _open(port)
            texts = [f"yield{n}" for n in range(300)]
            answers = await asyncio.gather(*(connection.call(EchoRequest(text, None)) for text in texts))
            assert [answer.text for answer, _ in answers] == texts
            connection.close()
    asyncio.run(main())


def test_out_of_band_buffers_arrive_as_bytearray_both_ways():
    async def main():
        async with _serving() as (server, echo, port):
            connection = await _open(port)
            data, extra = bytes(range(256)) * 400, [b"small", bytearray(b"x" * 70_000)]
            answer, buffers = await connection.call(EchoRequest("bulk", data), extra)
            assert type(answer.data) is bytearray and answer.data == data[::-1]
            assert list(buffers[:2]) == extra and all(type(buffer) is bytearray for buffer in buffers)
            connection.close()
    asyncio.run(main())


def test_a_handler_s_error_reaches_the_caller_as_itself_and_a_crash_as_a_server_failure():
    async def main():
        async with _serving() as (server, echo, port):
            connection = await _open(port)
            with pytest.raises(NotLeader, match="leader: w2"):
                await connection.call(EchoRequest("refuse", None))
            with pytest.raises(MafkaError, match="the server failed: KeyError: 'a bug'"):
                await connection.call(EchoRequest("crash", None))
            with pytest.raises(UnsupportedVersion, match=f"node w1 does not serve api {UNSERVED}"):
                await connection.call(Unserved("x"))
            assert (await connection.call(EchoRequest("still", None)))[0].text == "still", "the connection stays"
            assert server.counters["errors"] == 2
            connection.close()
    asyncio.run(main())


def test_a_call_before_authentication_is_refused_with_the_named_error():
    async def main():
        async with _serving() as (server, echo, port):
            connection = await _open(port, exchange=None)
            with pytest.raises(NotAuthenticated, match=f"asked for api {ECHO} before authenticating"):
                await connection.call(EchoRequest("hi", None))
            assert echo.sessions == [], "the handler never ran"
            connection.close()
    asyncio.run(main())


def test_a_wrong_secret_is_refused_and_its_connection_closed():
    async def main():
        async with _serving() as (server, echo, port):
            with pytest.raises(AuthenticationFailed, match="user 'alice' failed TEST authentication"):
                await _open(port, SecretClientExchange(secret=b"wrong"))
            connection = await _open(port, exchange=None)  # the same steps by hand, to see the close
            await connection.call(SaslHandshakeRequest("TEST"))
            await connection.call(SaslAuthenticateRequest(b"hello"))
            with pytest.raises(AuthenticationFailed):
                await connection.call(SaslAuthenticateRequest(b"wrong"))
            with pytest.raises(StreamLost, match=f"at 127.0.0.1:{port} was lost"):
                await connection.call(EchoRequest("after", None))
            assert server.counters["auth_failures"] == 2
            assert (await (await _open(port)).call(EchoRequest("good", None)))[0].principal == "alice"
    asyncio.run(main())


def test_a_server_that_cannot_prove_the_credential_is_refused_by_the_client():
    async def main():
        async with _serving() as (server, echo, port):
            with pytest.raises(AuthenticationFailed, match="proof is wrong"):
                await _open(port, SecretClientExchange(proof=b"another"))
            with pytest.raises(AuthenticationFailed, match=r"offers the SASL mechanisms \['TEST'\], not PLAIN"):
                await _open(port, type("Plain", (SecretClientExchange,), {"mechanism": "PLAIN"})())
    asyncio.run(main())


def test_without_authentication_every_connection_is_anonymous():
    async def main():
        async with _serving(authenticating=False) as (server, echo, port):
            connection = await _open(port, exchange=None)
            assert connection.principal == "ANONYMOUS"
            assert (await connection.call(EchoRequest("hi", None)))[0].principal == "ANONYMOUS"
            connection.close()
    asyncio.run(main())


def _request(api: int, correlation_id: int, message) -> bytes:
    return b"".join(map(bytes, encode_frame(api, correlation_id, Kind.REQUEST, message)))


def _envelope(**changes) -> bytes:
    envelope = {"v": PROTOCOL_VERSION, "api": 0, "id": 5, "kind": "request", "body": {"client": "raw"}}
    envelope.update(changes)
    return msgpack.packb(envelope)


_ANSWER_BODY = {"versions": [PROTOCOL_VERSION], "api_keys": [0], "mechanisms": [], "node_id": "w9"}


@pytest.mark.parametrize("wire, half_close, answered", [
    (_framed(pickle.dumps(("call", "os.system", ("true",)))), False, None),
    (_framed(_envelope(v=7, id=12)), False, ("UnsupportedVersion", 12, f"frame version 7, this mafka4 speaks {PROTOCOL_VERSION}")),
    (_framed(_envelope(id=13)[:-4]), False, None),  # a truncated body: its id cannot be read
    (_framed(_envelope(id=14, body={"client": 1})), False, ("ProtocolError", 14, r"ApiVersionsRequest\.client")),
    (_framed(_envelope(id=15, kind="answer", body=_ANSWER_BODY)), False, ("ProtocolError", 15, "this frame's kind is 'answer'")),
    (_request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest("raw"))[:-3], True, None),  # a truncated frame, then EOF
    (struct.pack(">II", 1 << 20, 0), False, None),  # a frame above the unauthenticated bound
])
def test_a_bad_frame_gets_an_error_answer_or_a_close_and_the_server_serves_the_next_connection(wire, half_close,
                                                                                                answered):
    async def main():
        async with _serving() as (server, echo, port):
            prefix = _request(ApiKey.API_VERSIONS, 1, ApiVersionsRequest("raw"))  # answered before the bad frame
            frames = await _raw_exchange(port, wire, first=prefix, half_close=half_close)
            assert frames[0].message.node_id == "w1"
            if answered is None:
                assert len(frames) == 1, "closed, with nothing to answer"
            else:
                (error, ), (name, correlation_id, message) = frames[1:], answered
                assert error.kind is Kind.ERROR and error.correlation_id == correlation_id
                assert type(error.message) is ErrorAnswer and error.message.error == name
                with pytest.raises(ProtocolError, match=message):
                    raise raised_error(error.message)
            assert (await (await _open(port)).call(EchoRequest("next", None)))[0].text == "next"
    asyncio.run(main())


def test_no_more_than_requests_in_flight_max_run_at_once_and_all_are_answered():
    async def main():
        async with _serving(ClientPortConfig(requests_in_flight_max=3)) as (server, echo, port):
            echo.running_bound = 3
            connection = await _open(port)
            calls = [asyncio.ensure_future(connection.call(EchoRequest("park", None))) for _ in range(10)]
            await asyncio.wait_for(echo.full.wait(), WAIT_S)
            await asyncio.sleep(0.2)  # room for a fourth to start, if the bound did not hold
            assert echo.running == 3
            echo.release.set()
            answers = await asyncio.wait_for(asyncio.gather(*calls), WAIT_S)
            assert len(answers) == 10 and echo.running_max == 3
            connection.close()
    asyncio.run(main())


def test_a_connection_that_does_not_authenticate_in_time_is_closed():
    async def main():
        async with _serving(ClientPortConfig(auth_timeout_s=0.1)) as (server, echo, port):
            assert await _raw_exchange(port, b"") == []
            assert server.counters["auth_failures"] == 1
    asyncio.run(main())


def test_a_connection_beyond_connections_max_is_closed():
    async def main():
        async with _serving(ClientPortConfig(connections_max=1)) as (server, echo, port):
            connection = await _open(port)
            assert await _raw_exchange(port, _request(ApiKey.API_VERSIONS, 1, ApiVersionsRequest("x"))) == []
            assert server.counters["connections_refused"] == 1
            assert (await connection.call(EchoRequest("kept", None)))[0].text == "kept"
            connection.close()
    asyncio.run(main())


def test_a_lost_connection_fails_the_calls_in_flight_with_stream_lost_naming_the_node():
    async def main():
        async with _serving() as (server, echo, port):
            echo.running_bound = 1
            connection = await _open(port)
            parked = asyncio.ensure_future(connection.call(EchoRequest("park", None)))
            await asyncio.wait_for(echo.full.wait(), WAIT_S)
            server.close()
            with pytest.raises(StreamLost, match=f"node w1 at 127.0.0.1:{port} was lost") as lost:
                await parked
            assert lost.value.retriable and connection.closed
    asyncio.run(main())


def test_a_call_without_an_answer_in_time_times_out():
    async def main():
        async with _serving() as (server, echo, port):
            connection = await _open(port)
            with pytest.raises(RequestTimedOut, match=f"api {ECHO} to node w1"):
                await connection.call(EchoRequest("park", None), timeout_s=0.05)
            echo.release.set()
            assert (await connection.call(EchoRequest("after", None)))[0].text == "after"
            connection.close()
    asyncio.run(main())


def test_opening_a_port_nobody_listens_on_is_a_retriable_error_naming_it():
    async def main():
        async with _serving() as (server, echo, port):
            pass  # closed: nothing listens on the port now
        with pytest.raises(StreamLost, match=f"cannot connect to a mafka4 node at 127.0.0.1:{port}") as refused:
            await _open(port)
        assert refused.value.retriable
    asyncio.run(main())


def test_the_client_connection_imports_neither_ray_nor_etcd():
    code = ("import sys, mafka4.protocol.connection; "
            "print(sorted(m for m in ('ray', 'etcd3', 'grpc') if m in sys.modules))")
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert output.strip() == "[]"


@pytest.mark.parametrize("field, value, problem", [
    ("requests_in_flight_max", 0, "requests_in_flight_max=0 must be at least 1"),
    ("connections_max", True, "connections_max=True must be an integer"),
    ("frame_bytes_max", 1000, "frame_bytes_max=1000 must be at least 65536"),
    ("auth_timeout_s", 0, "auth_timeout_s=0 must be a number of seconds above 0"),
])
def test_the_port_s_bounds_are_checked_when_configured(field, value, problem):
    with pytest.raises(InvalidConfig, match=problem):
        ClientPortConfig(**{field: value})
