"""One TCP connection as frames of ``transport.stream_frames``: an asyncio ``BufferedProtocol``.

The socket is read straight into a ``FrameReader``'s buffers (out-of-band bytes land in their own
``bytearray``, never copied in Python) and a frame's parts are written as they lie. Whoever owns
the connection decides what a frame's body means: the stream calls (``transport.stream_calls``)
unpickle it between the cluster's own processes; the client port (``mafka4.protocol``) decodes
typed msgpack from clients, with bounds of its own.

A connection made with ``keepalive`` has TCP keepalive on (``keep_alive``): the kernel probes it
while it is idle, so a peer that vanished without closing it ends it in bounded time, as a peer
that closed it does (the client port's connections, both ends).

Invariant: ``on_lost`` runs exactly once, when the connection ends for any reason (the peer
closed it, the socket failed, a frame beyond the reader's bounds, or ``close``); after it no frame
is delivered and ``write`` raises.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Callable

from mafka4.limits import PROTOCOL_KEEPALIVE_IDLE_S, PROTOCOL_KEEPALIVE_INTERVAL_S, PROTOCOL_KEEPALIVE_PROBES
from mafka4.transport.stream_frames import BadFrame, Frame, FrameReader


def peer_of(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the other end of ``transport``, for messages and logs."""
    address = transport.get_extra_info("peername")
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else str(address)


def keep_alive(sock: socket.socket) -> None:
    """TCP keepalive on ``sock``: probed after ``PROTOCOL_KEEPALIVE_IDLE_S`` without traffic, then every
    ``PROTOCOL_KEEPALIVE_INTERVAL_S``, dropped after ``PROTOCOL_KEEPALIVE_PROBES`` unanswered. Where the
    system lacks an option (not Linux), its own default stays."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", PROTOCOL_KEEPALIVE_IDLE_S), ("TCP_KEEPINTVL", PROTOCOL_KEEPALIVE_INTERVAL_S),
                          ("TCP_KEEPCNT", PROTOCOL_KEEPALIVE_PROBES)):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class FramedConnection(asyncio.BufferedProtocol):
    """One TCP connection as frames: the socket is read into a ``FrameReader``, each frame it
    completes goes to ``on_frame``; ``write`` sends a frame's parts, ``drain`` waits while the
    transport holds more than its high-water mark. ``on_lost(reason)`` runs once, when the
    connection ends for any reason (a frame beyond the bounds closes it). ``reader`` defaults to
    one with the stream calls' bounds; ``keepalive``: see the module docstring."""

    def __init__(self, on_frame: Callable[[Frame], None], on_lost: Callable[[str], None],
                 reader: FrameReader | None = None, keepalive: bool = False):
        self._on_frame, self._on_lost, self._keepalive = on_frame, on_lost, keepalive
        self.reader = reader if reader is not None else FrameReader()
        self._transport: asyncio.Transport | None = None
        self._writable: asyncio.Event | None = None
        self.lost: str | None = None
        self.peer = "an unconnected peer"

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._writable = asyncio.Event()
        self._writable.set()
        self.peer = peer_of(transport)
        if self._keepalive:
            keep_alive(transport.get_extra_info("socket"))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.reader.buffer_updated(nbytes)
        except BadFrame as error:
            self.close(str(error))
            return
        for frame in frames:
            if self.lost is not None:
                return
            self._on_frame(frame)

    def eof_received(self) -> bool:
        return False  # the peer is done: close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended("the peer closed the connection" if exc is None else f"{type(exc).__name__}: {exc}")

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def pause_reading(self) -> None:
        """Read nothing more until ``resume_reading``: the peer's sends back up into its socket."""
        if self._transport is not None and self.lost is None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._transport is not None and self.lost is None:
            self._transport.resume_reading()

    def write(self, parts: list[bytes | memoryview]) -> None:
        """Write one frame's parts, with no await between them: no other frame can come in between."""
        if self.lost is not None:
            raise ConnectionResetError(self.lost)
        for part in parts:
            self._transport.write(part)

    async def drain(self) -> None:
        await self._writable.wait()
        if self.lost is not None:
            raise ConnectionResetError(self.lost)

    def close(self, reason: str) -> None:
        """End the connection; what was written before is still sent (the transport flushes it)."""
        if self._transport is not None:
            self._transport.close()
        self._ended(reason)

    def _ended(self, reason: str) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        if self._writable is not None:
            self._writable.set()  # a drain waiting wakes, and raises
        self._on_lost(reason)
