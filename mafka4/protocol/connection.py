"""A client's connection to one node's client port: open (versions, authenticate), then typed calls.

``ClientConnection.open`` connects, asks ``API_VERSIONS`` (the node must speak this
``PROTOCOL_VERSION``), and authenticates with the exchange given (``SASL_HANDSHAKE``, then the
exchange's two ``SASL_AUTHENTICATE`` steps, as SCRAM has them; the server proves it knows the
credential too, or ``finish`` raises). ``call`` sends a typed request and returns the typed
answer, or raises the error the server answered (``protocol.error_codes``). Calls run
concurrently on the one connection and are matched to their answers by correlation id.

A connection that breaks, or whose server sends a frame that does not decode, fails every call
in flight with ``StreamLost`` (retriable: the outcome of a call is unknown) and every later one.
TCP keepalive breaks one whose node vanished without closing it (its host lost, the network cut)
within ``PROTOCOL_PEER_SILENT_S_MAX``, however long its calls may wait.
Imports neither Ray nor etcd: a client needs only this package, ``transport.stream_frames`` and
msgpack.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, Sequence

from mafka4.errors import AuthenticationFailed, ProtocolError, RequestTimedOut, StreamLost, UnsupportedVersion
from mafka4.limits import PROTOCOL_OPEN_TIMEOUT_S_DEFAULT, PROTOCOL_VERSION
from mafka4.protocol.error_codes import raised_error
from mafka4.protocol.frames import Envelope, decode_frame, encode_frame, frame_reader
from mafka4.protocol.messages import (ApiVersionsRequest, Kind, SaslAuthenticateRequest, SaslHandshakeRequest,
                                      api_name, api_of)
from mafka4.transport.framed_connection import FramedConnection
from mafka4.transport.stream_frames import Frame

_U32_LIMIT = 1 << 32


class ClientExchange(Protocol):
    """The client's side of one authentication (a SCRAM exchange, in ``mafka4.security``)."""

    mechanism: str

    def first(self) -> bytes:
        """The client's first message."""

    def respond(self, server_first: bytes) -> bytes:
        """The client's final message, answering the server's first."""

    def finish(self, server_final: bytes) -> None:
        """Check the server's final message; ``AuthenticationFailed`` if the server's proof is wrong."""


class ClientConnection:
    """One open, authenticated connection to a node (make it with ``open``)."""

    def __init__(self, host: str, port: int):
        self.address = f"{host}:{port}"
        self.principal = ""
        self.node_id = ""
        self._pending: dict[int, tuple[int, asyncio.Future]] = {}  # correlation id -> (api, answer)
        self._next_id = 0
        self._protocol = FramedConnection(self._on_frame, self._on_lost, frame_reader(), keepalive=True)

    @classmethod
    async def open(cls, host: str, port: int, exchange: ClientExchange | None, client: str = "mafka4",
                   timeout_s: float = PROTOCOL_OPEN_TIMEOUT_S_DEFAULT) -> "ClientConnection":
        """Connect to ``host``:``port`` and authenticate with ``exchange`` (None: a node that needs no
        authentication), all within ``timeout_s``. ``StreamLost`` if nothing listens there,
        ``RequestTimedOut`` if it does not answer in time (both retriable), ``AuthenticationFailed``
        or ``UnsupportedVersion`` as the node answers."""
        connection = cls(host, port)
        try:
            await asyncio.wait_for(connection._open(host, port, exchange, client), timeout_s)
        except TimeoutError:
            connection.close()
            raise RequestTimedOut(f"the mafka4 node at {host}:{port} did not answer within {timeout_s} s; "
                                  f"retry, or try another bootstrap address") from None
        except BaseException:
            connection.close()
            raise
        return connection

    async def _open(self, host: str, port: int, exchange: ClientExchange | None, client: str) -> None:
        try:
            await asyncio.get_running_loop().create_connection(lambda: self._protocol, host, port)
        except OSError as error:
            raise StreamLost(f"cannot connect to a mafka4 node at {host}:{port} ({error.strerror or error}); "
                             f"is it running? retry, or try another bootstrap address") from None
        versions, _ = await self.call(ApiVersionsRequest(client))
        self.node_id = versions.node_id
        if PROTOCOL_VERSION not in versions.versions:
            raise UnsupportedVersion(f"node {versions.node_id} at {self.address} speaks protocol versions "
                                     f"{list(versions.versions)}, this client {PROTOCOL_VERSION}: use a client "
                                     f"and a cluster of matching versions")
        if exchange is None:
            from mafka4.protocol.session import ANONYMOUS  # here: a client needs no more of the server's session rules

            self.principal = ANONYMOUS
            return
        if exchange.mechanism not in versions.mechanisms:
            raise AuthenticationFailed(f"node {versions.node_id} at {self.address} offers the SASL mechanisms "
                                       f"{list(versions.mechanisms)}, not {exchange.mechanism}")
        await self.call(SaslHandshakeRequest(exchange.mechanism))
        server_first, _ = await self.call(SaslAuthenticateRequest(exchange.first()))
        server_final, _ = await self.call(SaslAuthenticateRequest(exchange.respond(server_first.message)))
        exchange.finish(server_final.message)
        if server_final.principal is None:
            raise ProtocolError(f"node {versions.node_id} at {self.address} ended the {exchange.mechanism} "
                                f"exchange without naming the principal")
        self.principal = server_final.principal

    @property
    def closed(self) -> bool:
        return self._protocol.lost is not None

    async def call(self, request: object, buffers: Sequence[bytes | bytearray | memoryview] = (),
                   timeout_s: float | None = None) -> tuple[object, tuple[bytearray, ...]]:
        """The typed answer to ``request`` and the answer frame's buffers (``buffers`` travel out of
        band with the request). Raises the error the node answered; ``ProtocolError`` or
        ``MessageTooLarge`` for a request that cannot be sent; ``StreamLost`` if the connection
        breaks; ``RequestTimedOut`` after ``timeout_s`` (the outcome is then unknown)."""
        api = api_of(request)
        correlation_id = self._take_id()
        parts = encode_frame(api, correlation_id, Kind.REQUEST, request, buffers)
        if self._protocol.lost is not None:
            raise self._lost(self._protocol.lost)
        answer = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (api, answer)
        try:
            self._protocol.write(parts)
            await self._protocol.drain()
            envelope: Envelope = await asyncio.wait_for(answer, timeout_s)
        except ConnectionError:
            raise self._lost(self._protocol.lost or "the connection broke") from None
        except TimeoutError:
            raise RequestTimedOut(f"{api_name(api)} to node {self.node_id} at {self.address} got no answer within "
                                  f"{timeout_s} s; its outcome is unknown") from None
        finally:
            self._pending.pop(correlation_id, None)
        if envelope.kind is Kind.ERROR:
            raise raised_error(envelope.message)
        return envelope.message, envelope.buffers

    async def send(self, request: object, buffers: Sequence[bytes | bytearray | memoryview] = ()) -> None:
        """Send ``request`` and wait only until it is written: its answer, when it comes, is dropped
        (a producer's acks=0). ``StreamLost`` if the connection is broken."""
        parts = encode_frame(api_of(request), self._take_id(), Kind.REQUEST, request, buffers)
        if self._protocol.lost is not None:
            raise self._lost(self._protocol.lost)
        try:
            self._protocol.write(parts)
            await self._protocol.drain()
        except ConnectionError:
            raise self._lost(self._protocol.lost or "the connection broke") from None

    def close(self) -> None:
        """Close the connection; calls in flight fail with ``StreamLost``."""
        self._protocol.close("the client closed the connection")

    def _take_id(self) -> int:
        while self._next_id in self._pending:  # an id wraps around only past a call that is still waiting
            self._next_id = (self._next_id + 1) % _U32_LIMIT
        correlation_id = self._next_id
        self._next_id = (correlation_id + 1) % _U32_LIMIT
        return correlation_id

    def _on_frame(self, frame: Frame) -> None:
        try:
            envelope = decode_frame(frame)
            if envelope.kind is Kind.REQUEST:
                raise ProtocolError("the server sent a request")
        except ProtocolError as error:
            self._protocol.close(f"the node sent a frame that did not decode ({error})")
            return
        pending = self._pending.get(envelope.correlation_id)
        if pending is None or pending[1].done():
            return  # a call that gave up (timed out) is gone
        api, answer = pending
        if envelope.api != api:
            self._protocol.close(f"the node answered call {envelope.correlation_id} ({api_name(api)}) "
                                 f"with a frame of api {envelope.api}")
            return
        answer.set_result(envelope)

    def _lost(self, reason: str) -> StreamLost:
        return StreamLost(f"the connection to mafka4 node {self.node_id or '(unknown)'} at {self.address} was lost "
                          f"({reason}); the call's outcome is unknown: retry it, here or at another node")

    def _on_lost(self, reason: str) -> None:
        for _, answer in self._pending.values():
            if not answer.done():
                answer.set_exception(self._lost(reason))
