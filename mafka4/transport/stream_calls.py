"""Calls that carry a batch's bytes over a TCP stream between two processes, beside Ray.

Why: a Ray actor call whose argument or answer is a 1 MiB batch cost about 3 ms of CPU on
each side here (Ray's inline path: pickled, copied into its protobuf message, through gRPC,
copied out), while the same MiB over a plain TCP stream costs about 0.2-0.3 ms on each side
(``mafka4 bench stream``; the frames of ``runtime.stream_frames`` are why). A replicated
write pays that transfer once per replica, so the broker's bulk traffic goes over streams;
Ray still starts, places, names and supervises every actor, and carries every control call.

A process serves some async methods of one object (``StreamServer``); a caller reaches them
through a ``StreamHandle``, whose ``handle.method.remote(*args)`` is a coroutine, so it fits
where a ``GatedHandle`` wraps an actor handle (``mafka4.partition_gate``). The handle learns
where to connect from a resolver (in practice one Ray call to the serving actor), and learns
it again after its connection broke: a restarted actor listens on a new port.

Wire: frames of ``transport.stream_frames`` whose body is a pickle, with its large bytes out of
band, which arrive as ``bytearray`` (``transport.stream_pickles``). The client's first frame is the server's token; then each request
is ``(call_id, method, args, kwargs)`` and each answer ``(call_id, raised, value)``. Calls on
one connection run concurrently (long polls park), and their answers come back in any order.
Each connection is an asyncio ``BufferedProtocol``: the socket is read into the frame reader's
buffers, and out-of-band bytes are written to it as views, so no MiB is copied in Python.

Trust is Ray's own: pickles flow between the processes of one cluster, and the token is only
handed out by a Ray call to the serving actor, so only a process that may call the actor can
call through its stream. The server listens on its node's address, never on all interfaces.

A broken connection, a refused one, or a frame beyond ``stream_frames``' bounds fails every
call it carried with ``StreamLost``, which is retriable: callers retry as they retry a call to
a dead actor.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import Awaitable, Callable

from mafka4.errors import MafkaError, StreamLost
from mafka4.transport.framed_connection import FramedConnection
from mafka4.transport.stream_frames import Frame, FrameTooLarge, encode_raw
from mafka4.transport.stream_pickles import decode, encode

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamEndpoint:
    """Where a ``StreamServer`` listens, and the token its clients present."""
    host: str
    port: int
    token: bytes


def _answer_parts(call_id: int, raised: bool, value: object) -> list[bytes | memoryview]:
    """The answer's frame; an answer that cannot be sent is replaced by an error that says why, so
    the caller hears of it instead of waiting for ever."""
    try:
        return encode((call_id, raised, value))
    except FrameTooLarge as error:
        return encode((call_id, True, StreamLost(f"the answer to a stream call was too large ({error}); ask for "
                                                 f"less (a smaller bytes_max)")))
    except Exception as error:
        failure = MafkaError(f"the answer to a stream call could not be sent ({type(error).__name__}: {error}); "
                             f"it was {type(value).__name__}: {value!r:.200}")
        return encode((call_id, True, failure))


class StreamServer:
    """Serves ``methods`` (names of async methods of ``target``) on the running event loop."""

    def __init__(self, target: object, methods: frozenset[str], name: str):
        self._target, self._methods, self._name = target, methods, name
        self._token = secrets.token_bytes(16)
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[_ServedConnection] = set()
        self._calls: set[asyncio.Task] = set()

    async def start(self, host: str) -> StreamEndpoint:
        """Listen on ``host`` (a free port); idempotent."""
        if self._server is None:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: _ServedConnection(self)._protocol, host, 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        return StreamEndpoint(host, port, self._token)

    def close(self) -> None:
        """Stop listening and drop every connection: their callers' calls fail with ``StreamLost``."""
        if self._server is not None:
            self._server.close()
        for connection in list(self._connections):
            connection.close()
        for task in list(self._calls):
            task.cancel()


class _ServedConnection:
    """The server's side of one connection: checks the token, then runs each request as a task."""

    def __init__(self, server: StreamServer):
        self._server = server
        self._trusted = False
        self._protocol = FramedConnection(self._on_frame, self._on_lost)
        server._connections.add(self)

    def close(self) -> None:
        self._protocol.close("the server closed")

    def _on_lost(self, reason: str) -> None:
        self._server._connections.discard(self)  # its calls' answers are dropped: the caller went away

    def _on_frame(self, frame: Frame) -> None:
        server = self._server
        if not self._trusted:
            if frame.buffers or not hmac.compare_digest(bytes(frame.body), server._token):
                logger.warning("%s: refused a stream connection with a wrong token", server._name)
                self._protocol.close("wrong token")
                return
            self._trusted = True
            return
        try:
            call_id, method, args, kwargs = decode(frame)
        except Exception as error:  # a request that does not unpickle: not a mafka4 caller
            logger.warning("%s: dropped a stream connection whose request did not decode (%s: %s)",
                           server._name, type(error).__name__, error)
            self._protocol.close("a request that did not decode")
            return
        task = asyncio.get_running_loop().create_task(self._call(call_id, method, args, kwargs))
        server._calls.add(task)
        task.add_done_callback(server._calls.discard)

    async def _call(self, call_id: int, method: str, args: tuple, kwargs: dict) -> None:
        server = self._server
        if method not in server._methods:
            raised, value = True, MafkaError(f"{server._name} serves {sorted(server._methods)} over its stream, "
                                             f"not {method!r}")
        else:
            try:
                raised, value = False, await getattr(server._target, method)(*args, **kwargs)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                raised, value = True, error
        if self._protocol.lost is not None:
            return
        try:
            self._protocol.write(_answer_parts(call_id, raised, value))
            await self._protocol.drain()
        except ConnectionError:
            pass


class _Connection:
    """The caller's side of one open stream: calls in flight by id, answered as frames arrive."""

    def __init__(self, name: str):
        self._name = name
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self.protocol = FramedConnection(self._on_frame, self._on_lost)

    @property
    def broken(self) -> bool:
        return self.protocol.lost is not None

    async def call(self, method: str, args: tuple, kwargs: dict) -> object:
        call_id = self._next_id
        future = self._pending[call_id] = asyncio.get_running_loop().create_future()
        try:
            await self.send(method, args, kwargs)
            raised, value = await future
        finally:
            self._pending.pop(call_id, None)
        if raised:
            raise value
        return value

    async def send(self, method: str, args: tuple, kwargs: dict) -> None:
        """Write one request; returns once it was written (``call`` then waits for its answer)."""
        call_id = self._next_id
        self._next_id += 1
        try:
            parts = encode((call_id, method, args, kwargs))
        except FrameTooLarge as error:
            raise StreamLost(str(error)) from None
        try:
            self.protocol.write(parts)
            await self.protocol.drain()
        except ConnectionError as error:
            raise self._lost(f"{type(error).__name__}: {error}") from None

    def _on_frame(self, frame: Frame) -> None:
        try:
            call_id, raised, value = decode(frame)
        except Exception as error:  # an answer that does not unpickle: the stream cannot be trusted
            self.protocol.close(f"an answer that did not decode ({type(error).__name__}: {error})")
            return
        future = self._pending.get(call_id)
        if future is not None and not future.done():  # a caller that gave up is gone
            future.set_result((raised, value))

    def _lost(self, reason: str) -> StreamLost:
        return StreamLost(f"the stream to {self._name} broke ({reason}); the call's outcome is unknown and it "
                          f"is retried as a call to a dead actor is")

    def _on_lost(self, reason: str) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(self._lost(reason))

    def close(self) -> None:
        self.protocol.close("the connection was closed by its caller")


class StreamClient:
    """Calls one server's methods; connects when first needed and again after a break."""

    def __init__(self, resolve: Callable[[], Awaitable[StreamEndpoint]], name: str):
        self._resolve, self._name = resolve, name
        self._connection: _Connection | None = None
        self._connecting: asyncio.Future | None = None

    async def call(self, method: str, args: tuple = (), kwargs: dict | None = None) -> object:
        connection = await self._connected()
        return await connection.call(method, args, kwargs or {})

    async def send(self, method: str, args: tuple = (), kwargs: dict | None = None) -> None:
        """A call whose answer is dropped unread (acks=0): returns once the request was written."""
        connection = await self._connected()
        await connection.send(method, args, kwargs or {})

    async def _connected(self) -> _Connection:
        if self._connection is not None and not self._connection.broken:
            return self._connection
        if self._connecting is None:  # one connect at a time; concurrent callers share it
            self._connecting = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(self._connecting)
        finally:
            if self._connecting is not None and self._connecting.done():
                self._connecting = None

    async def _connect(self) -> _Connection:
        endpoint = await self._resolve()
        connection = _Connection(self._name)
        try:
            await asyncio.get_running_loop().create_connection(lambda: connection.protocol, endpoint.host,
                                                               endpoint.port)
        except OSError as error:
            raise StreamLost(f"cannot connect to the stream of {self._name} at {endpoint.host}:{endpoint.port} "
                             f"({error.strerror or error}); retried as a call to a dead actor is") from None
        connection.protocol.write(encode_raw(endpoint.token))
        self._connection = connection
        return connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None


def actor_stream(actor, name: str) -> "StreamHandle":
    """A stream to the Ray actor ``actor``, which answers ``stream_endpoint()`` with its
    ``StreamEndpoint``; ``name`` says which actor it is in errors."""
    async def endpoint() -> StreamEndpoint:
        return await asyncio.wrap_future(actor.stream_endpoint.remote().future())
    return StreamHandle(StreamClient(endpoint, name))


class StreamedActor:
    """A Ray actor handle whose ``streamed`` methods go over the actor's stream and the others
    as Ray calls; ``close`` closes the stream."""

    def __init__(self, actor, streamed: frozenset[str], name: str):
        self._actor, self._streamed = actor, streamed
        self._stream = actor_stream(actor, name)

    def __getattr__(self, method: str):
        return getattr(self._stream if method in self._streamed else self._actor, method)

    def close(self) -> None:
        self._stream.close()


class StreamHandle:
    """``handle.method.remote(*args, **kwargs)``: a coroutine making the call over ``client``,
    shaped like the calls ``GatedHandle`` makes on an actor handle."""

    def __init__(self, client: StreamClient):
        self._client = client

    def __getattr__(self, method: str) -> "_StreamMethod":
        return _StreamMethod(self._client, method)

    def close(self) -> None:
        self._client.close()


class _StreamMethod:
    def __init__(self, client: StreamClient, method: str):
        self._client, self._method = client, method

    def remote(self, *args, **kwargs) -> Awaitable:
        return self._client.call(self._method, args, kwargs)

    def send(self, *args, **kwargs) -> Awaitable[None]:
        """The call, its answer left unread: done once the request was written."""
        return self._client.send(self._method, args, kwargs)
