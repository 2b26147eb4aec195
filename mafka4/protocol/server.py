"""A node's client port: typed requests from clients, authenticated, answered by handlers.

Each connection authenticates first (SASL: ``SASL_HANDSHAKE``, then ``SASL_AUTHENTICATE`` steps
of an exchange part of ``mafka4.security`` supplies), as ``protocol.session`` rules; the server
answers ``API_VERSIONS`` and the SASL steps itself and every other API with the handler given
for it, which gets the ``Session`` (who asked), the typed request and the frame's buffers.

Requests of one connection run concurrently (a fetch may long-poll) and their answers go back
in any order, by correlation id; at most ``requests_in_flight_max`` run at once per connection,
beyond which the server stops reading it until one ends (back-pressure: requests wait in the
client's socket, none is refused). When a connection ends (its peer closed it, or TCP keepalive
found the peer gone within ``PROTOCOL_PEER_SILENT_S_MAX``), its requests still running are
cancelled: nobody is left to answer, and a long poll that stands for its client (a group
member's waiting heartbeat keeps the member's session) lets go at once. Before a connection
has authenticated its frames may be only ``PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX`` long, and
it is closed ``auth_timeout_s`` after it opened; beyond ``connections_max`` open connections a
new one is closed at once.

Failures stay on their connection: a bad frame gets an error answer when its id could be read,
then the connection is closed; a failed authentication gets its error answer, then the close;
a handler's ``MafkaError`` is its request's error answer, any other exception is logged and
answered as a server failure. No frame is decoded by anything but ``protocol.frames``, which
runs nothing the peer chose. Refusals are logged at INFO with the peer and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Awaitable, Callable, Mapping, Protocol

from mafka4.errors import AuthenticationFailed, MafkaError, ProtocolError, UnsupportedVersion
from mafka4.limits import PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX, PROTOCOL_VERSION
from mafka4.limits.servers import ClientPortConfig
from mafka4.protocol.error_codes import error_answer
from mafka4.protocol.frames import Envelope, decode_frame, encode_frame, frame_reader, readable_header
from mafka4.protocol.messages import (ApiKey, ApiVersionsAnswer, Kind, SaslAuthenticateAnswer, SaslHandshakeAnswer,
                                      api_name, message_class, registered_apis)
from mafka4.protocol.session import AuthState, Session, SessionMachine
from mafka4.transport.framed_connection import FramedConnection, peer_of
from mafka4.transport.stream_frames import Frame

logger = logging.getLogger(__name__)

_SERVERS_OWN = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_COUNTERS = ("connections", "connections_refused", "requests", "bad_frames", "auth_failures", "refusals", "errors")


class ServerExchange(Protocol):
    """The server's side of one authentication (a SCRAM exchange, in ``mafka4.security``)."""

    def step(self, client_message: bytes) -> bytes:
        """The answer to the client's next message; ``AuthenticationFailed`` if it fails."""

    @property
    def principal(self) -> str | None:
        """Who authenticated, once the exchange has succeeded; None until then."""


Handler = Callable[[Session, object, tuple[bytearray, ...]], Awaitable[tuple[object, tuple]]]


class ClientPortServer:
    """Serves ``handlers`` (by API) to clients on the running event loop, as node ``node_id``.

    ``exchange_factory(mechanism)`` starts one authentication (it may raise
    ``AuthenticationFailed``); None serves without authentication, every connection as
    ``ANONYMOUS``. ``counters``: connections accepted and refused, requests, bad frames,
    authentication failures, refusals (requests out of turn), errors answered; all since start.
    """

    def __init__(self, handlers: Mapping[ApiKey, Handler], name: str, node_id: str,
                 exchange_factory: Callable[[str], ServerExchange] | None,
                 mechanisms: tuple[str, ...] = ("SCRAM-SHA-256",), config: ClientPortConfig = ClientPortConfig()):
        assert not set(handlers) & _SERVERS_OWN, "the server answers API_VERSIONS and the SASL steps itself"
        assert set(handlers) <= set(registered_apis()), f"register the messages of {set(handlers)} first"
        self._handlers, self._name, self._node_id = dict(handlers), name, node_id
        self._exchange_factory, self._config = exchange_factory, config
        self._mechanisms = tuple(mechanisms) if exchange_factory is not None else ()
        served = {ApiKey.API_VERSIONS, *handlers, *(_SERVERS_OWN if exchange_factory is not None else ())}
        self._versions = ApiVersionsAnswer((PROTOCOL_VERSION,), tuple(sorted(int(api) for api in served)),
                                           self._mechanisms, node_id)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_ServedClient] = set()
        self._counters = dict.fromkeys(_COUNTERS, 0)

    async def start(self, host: str, port: int = 0) -> tuple[str, int]:
        """Listen on ``host``:``port`` (0: a free port); the bound address. Idempotent."""
        if self._server is None:
            self._server = await asyncio.get_running_loop().create_server(self._accept, host, port)
        return tuple(self._server.sockets[0].getsockname()[:2])

    def close(self) -> None:
        """Stop listening and drop every connection; requests running are cancelled."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close("the server closed")

    @property
    def counters(self) -> dict[str, int]:
        return {**self._counters, "connections_open": len(self._connections)}

    def _count(self, counter: str) -> None:
        self._counters[counter] += 1

    def _accept(self) -> asyncio.BaseProtocol:
        if len(self._connections) >= self._config.connections_max:
            self._count("connections_refused")
            return _Refused(self._name, self._config.connections_max)
        self._count("connections")
        connection = _ServedClient(self)
        self._connections.add(connection)
        return connection.protocol


class _Refused(asyncio.Protocol):
    """A connection beyond ``connections_max``: closed as soon as it is made."""

    def __init__(self, name: str, connections_max: int):
        self._name, self._connections_max = name, connections_max

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        logger.info("%s: closed a connection from %s: %d are open (connections_max)", self._name,
                    peer_of(transport), self._connections_max)
        transport.close()


class _ServedClient:
    """The server's side of one client connection: its session, its requests running and waiting."""

    def __init__(self, server: ClientPortServer):
        self._server = server
        authenticating = server._exchange_factory is not None
        reader = frame_reader(PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX if authenticating
                              else server._config.frame_bytes_max)
        self.protocol = FramedConnection(self._on_frame, self._on_lost, reader, keepalive=True)
        self._machine: SessionMachine | None = None
        self._exchange: ServerExchange | None = None
        self._running: set[asyncio.Task] = set()
        self._waiting: deque[Frame] = deque()  # frames read while requests_in_flight_max ran; bounded by one read
        self._auth_timer = asyncio.get_running_loop().call_later(
            server._config.auth_timeout_s, self._auth_timed_out) if authenticating else None

    @property
    def machine(self) -> SessionMachine:
        if self._machine is None:  # made at the first frame: the peer's address is known by then
            self._machine = SessionMachine(self.protocol.peer, self._server._exchange_factory is not None)
        return self._machine

    def close(self, reason: str) -> None:
        self.protocol.close(reason)

    def _on_lost(self, reason: str) -> None:
        self._server._connections.discard(self)
        if self._auth_timer is not None:
            self._auth_timer.cancel()
        self._waiting.clear()
        for task in self._running:
            task.cancel()  # nobody is left to answer: a long poll stops waiting (one closing its connection just ends)

    def _auth_timed_out(self) -> None:
        if self.machine.state is not AuthState.AUTHENTICATED:
            self._server._count("auth_failures")
            logger.info("%s: closed the connection from %s: not authenticated within auth_timeout_s (%s s)",
                        self._server._name, self.protocol.peer, self._server._config.auth_timeout_s)
            self.close("not authenticated within auth_timeout_s")

    def _on_frame(self, frame: Frame) -> None:
        if self._waiting or len(self._running) >= self._server._config.requests_in_flight_max:
            self._waiting.append(frame)
            self.protocol.pause_reading()
            return
        self._start(frame)

    def _start(self, frame: Frame) -> None:
        # Tasks start in the order they are made, and each runs its request's checks and any SASL
        # step before its first await: the session sees requests in the order they came.
        task = asyncio.get_running_loop().create_task(self._serve(frame))
        self._running.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        self._running.discard(task)
        while self._waiting and len(self._running) < self._server._config.requests_in_flight_max:
            self._start(self._waiting.popleft())
        if not self._waiting:
            self.protocol.resume_reading()

    async def _serve(self, frame: Frame) -> None:
        if self.protocol.lost is not None:
            return
        try:
            envelope = decode_frame(frame)
            if envelope.kind is not Kind.REQUEST:
                raise ProtocolError(f"a client sends requests; this frame's kind is {envelope.kind.value!r}")
        except ProtocolError as error:
            self._bad_frame(frame, error)
            return
        self._server._count("requests")
        refusal = self.machine.refusal(envelope.api)
        if refusal is not None:
            self._server._count("refusals")
            logger.info("%s: refused a request of %s: %s", self._server._name, self.protocol.peer, refusal)
            await self._send(envelope, Kind.ERROR, error_answer(refusal))
        elif envelope.api == ApiKey.API_VERSIONS:
            await self._send(envelope, Kind.ANSWER, self._server._versions)
        elif envelope.api == ApiKey.SASL_HANDSHAKE:
            await self._handshake(envelope)
        elif envelope.api == ApiKey.SASL_AUTHENTICATE:
            await self._authenticate(envelope)
        else:
            await self._handle(envelope)

    def _bad_frame(self, frame: Frame, error: ProtocolError) -> None:
        self._server._count("bad_frames")
        logger.info("%s: closing the connection from %s after a bad frame: %s", self._server._name,
                    self.protocol.peer, error)
        header = readable_header(frame.body)
        if header is not None:
            try:
                self.protocol.write(encode_frame(header[0], header[1], Kind.ERROR, error_answer(error)))
            except ConnectionError:
                return
        self.close(f"a bad frame ({error})")  # what was written is still sent

    async def _handshake(self, envelope: Envelope) -> None:
        server = self._server
        failure = self.machine.handshake(envelope.message.mechanism, server._mechanisms)
        if failure is None:
            try:
                self._exchange = server._exchange_factory(envelope.message.mechanism)
            except AuthenticationFailed as error:
                failure = error
        if failure is not None:
            self._authentication_failed(envelope, failure)
            return
        await self._send(envelope, Kind.ANSWER, SaslHandshakeAnswer(server._mechanisms))

    async def _authenticate(self, envelope: Envelope) -> None:
        try:
            answer = self._exchange.step(envelope.message.message)
            principal = self._exchange.principal
        except AuthenticationFailed as error:
            self._authentication_failed(envelope, error)
            return
        except Exception as error:  # an exchange that chokes on a client's message fails that client only
            self._authentication_failed(envelope, AuthenticationFailed(
                f"the {self.machine.mechanism} exchange with {self.protocol.peer} failed "
                f"({type(error).__name__}: {error})"))
            return
        if principal is not None:
            self.machine.authenticated(principal)
            self._auth_timer.cancel()
            self.protocol.reader.frame_bytes_max = self._server._config.frame_bytes_max
        await self._send(envelope, Kind.ANSWER, SaslAuthenticateAnswer(answer, principal))

    def _authentication_failed(self, envelope: Envelope, error: MafkaError) -> None:
        self.machine.failed()
        self._server._count("auth_failures")
        logger.info("%s: authentication of %s failed: %s", self._server._name, self.protocol.peer, error)
        try:
            self.protocol.write(encode_frame(envelope.api, envelope.correlation_id, Kind.ERROR, error_answer(error)))
        except ConnectionError:
            return
        self.close(f"authentication failed ({error})")

    async def _handle(self, envelope: Envelope) -> None:
        server, api = self._server, envelope.api
        handler = server._handlers.get(api)
        if handler is None:
            server._count("refusals")
            await self._send(envelope, Kind.ERROR, error_answer(UnsupportedVersion(
                f"node {server._node_id} does not serve {api_name(api)}; it serves "
                f"{list(server._versions.api_keys)}")))
            return
        try:
            answer, buffers = await handler(self.machine.session(), envelope.message, envelope.buffers)
            expected = message_class(api, Kind.ANSWER)
            if type(answer) is not expected:
                raise TypeError(f"the handler of {api_name(api)} answered a {type(answer).__name__}, "
                                f"not a {expected.__name__}")
            parts = encode_frame(api, envelope.correlation_id, Kind.ANSWER, answer, buffers,
                                 server._config.frame_bytes_max)
        except asyncio.CancelledError:
            raise
        except MafkaError as error:
            server._count("errors")
            parts = encode_frame(api, envelope.correlation_id, Kind.ERROR, error_answer(error))
        except Exception as error:
            server._count("errors")
            logger.exception("%s: the handler of %s failed on a request of %s", server._name, api_name(api),
                             self.protocol.peer)
            parts = encode_frame(api, envelope.correlation_id, Kind.ERROR, error_answer(error))
        await self._write(parts)

    async def _send(self, envelope: Envelope, kind: Kind, message: object) -> None:
        await self._write(encode_frame(envelope.api, envelope.correlation_id, kind, message))

    async def _write(self, parts: list[bytes | memoryview]) -> None:
        try:
            self.protocol.write(parts)
            await self.protocol.drain()
        except ConnectionError:
            pass  # the client went away: nobody waits for this answer
