"""Frames over a byte stream: a body, with its large bytes beside it.

Why: a fetch answer or a produce batch is up to several MiB of bytes inside a few small fields.
Put whole into the body, those bytes were copied into it, again on the way into the socket, and
on the receiving side out of the socket's reads into a stream buffer, out of it into the frame,
and out of the frame into the decoded object. So a frame carries its large bytes as buffers
apart from its body: each is written to the socket as it lies, and the receiver reads it straight
into the ``bytearray`` the decoded object gets.

Two protocols frame this way: the stream calls between a cluster's processes
(``runtime.stream_calls``), whose body is a pickle (``transport.stream_pickles``), and the client
protocol (``protocol.frames``), whose body is msgpack and which never unpickles: this module
only frames bytes.

Wire, all integers big-endian:

    frame   := head lengths body buffer*
    head    := u32 body_bytes, u32 buffer_count
    lengths := buffer_count x u32 buffer_bytes
    body    := what the protocol encodes; for a stream connection's first frame, the server's token

Buffers arrive as ``bytearray`` (what a socket can be read into), so a receiver of large data
must take any bytes-like object. A frame longer than ``STREAM_FRAME_BYTES_MAX`` in all is refused
on either side (unless its protocol passes bounds of its own): ``FrameTooLarge`` before it is
sent, ``BadFrame`` when a peer announces one, or more buffers than could fit in it
(``STREAM_FRAME_BUFFERS_MAX``): that peer does not speak this protocol, or is corrupt.

Pure: bodies and buffers in, byte parts out (``encode_parts``); bytes in, frames out
(``FrameReader``). No sockets here.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from mafka4.limits import (STREAM_FRAME_BUFFERS_MAX, STREAM_FRAME_BYTES_MAX, STREAM_STAGING_BYTES,
                           STREAM_WRITTEN_APART_BYTES_MIN)

_HEAD = struct.Struct(">II")
_LENGTH = struct.Struct(">I")


class FrameTooLarge(Exception):
    """A frame to send exceeds a bound; the message names it."""


class BadFrame(Exception):
    """The peer sent bytes that are not a frame within the bounds; the message says how."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One received frame: its body and its out-of-band buffers, in order."""

    body: bytes | bytearray
    buffers: tuple[bytearray, ...]


def encode_raw(body: bytes) -> list[bytes | memoryview]:
    """A frame whose body is ``body`` itself (a connection's first frame: the token)."""
    return encode_parts(body, [])


def encode_parts(body: bytes, buffers: Sequence[bytes | bytearray | memoryview], frame_bytes_max: int | None = None,
                 buffers_max: int | None = None) -> list[bytes | memoryview]:
    """The frame of ``body`` (bytes its reader decodes however it likes) and ``buffers`` (each of
    whose ``len`` is its size in bytes), as parts to write in order. ``FrameTooLarge`` above
    ``frame_bytes_max`` bytes in all or ``buffers_max`` buffers (by default the stream calls' bounds)."""
    named = frame_bytes_max is None
    frame_bytes_max = STREAM_FRAME_BYTES_MAX if named else frame_bytes_max
    buffers_max = STREAM_FRAME_BUFFERS_MAX if buffers_max is None else buffers_max
    total = _HEAD.size + _LENGTH.size * len(buffers) + len(body) + sum(map(len, buffers))
    if total > frame_bytes_max:
        bound = f"STREAM_FRAME_BYTES_MAX ({frame_bytes_max})" if named else f"its bound of {frame_bytes_max}"
        raise FrameTooLarge(f"a stream frame of {total} bytes exceeds {bound}; fetch or batch bounds this large "
                            f"are not supported")
    if len(buffers) > buffers_max:
        raise FrameTooLarge(f"a stream frame of {len(buffers)} buffers exceeds its bound of {buffers_max}")
    lengths = b"".join(_LENGTH.pack(len(buffer)) for buffer in buffers)
    parts: list[bytes | memoryview] = []
    joined = [_HEAD.pack(len(body), len(buffers)), lengths, body]
    for buffer in buffers:
        if len(buffer) < STREAM_WRITTEN_APART_BYTES_MIN:
            joined.append(buffer)
            continue
        if joined:
            parts.append(b"".join(joined))
            joined = []
        parts.append(memoryview(buffer))
    return parts + [b"".join(joined)] if joined else parts


class FrameReader:
    """Reassembles frames from a byte stream read in pieces of any size (sans-IO).

    The caller reads the socket into ``get_buffer()`` and tells ``buffer_updated(n)`` how many
    bytes it put there, which returns the frames those bytes completed. A frame is read as a
    head, then its parts in turn (the lengths, the body, each buffer). Heads and small parts are
    taken out of a staging buffer; a part of its size (``STREAM_STAGING_BYTES`` by default) or more is read straight into its
    own bytearray (after the piece of it the staging buffer already held). ``BadFrame`` when the
    bytes announce a frame beyond the bounds; the reader is unusable after it.

    The bounds default to the stream calls'; another protocol over the same framing passes its
    own. ``frame_bytes_max`` and ``buffers_max`` may be changed between frames (a server raises
    them once its peer has authenticated): a frame is held to the bounds its head was read under.
    """

    def __init__(self, frame_bytes_max: int | None = None, buffers_max: int | None = None,
                 staging_bytes: int | None = None) -> None:
        self.frame_bytes_max = STREAM_FRAME_BYTES_MAX if frame_bytes_max is None else frame_bytes_max
        self.buffers_max = STREAM_FRAME_BUFFERS_MAX if buffers_max is None else buffers_max
        self._staging = bytearray(STREAM_STAGING_BYTES if staging_bytes is None else staging_bytes)
        self._start = 0  # staging[_start:_end] is received and not yet taken
        self._end = 0
        self._direct: bytearray | None = None  # the large part being read straight into, if any
        self._direct_filled = 0
        # The frame being read: the sizes of its parts still to come (None: its head comes next),
        # whether the next is its lengths, its body's size, and its body and buffers taken so far.
        self._sizes: deque[int] | None = None
        self._reading_lengths = False
        self._body_bytes = 0
        self._parts: list[bytearray] = []

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty)."""
        if self._direct is not None:
            return memoryview(self._direct)[self._direct_filled:]
        if self._end == len(self._staging):
            self._compact()
        assert self._end < len(self._staging), "a full staging buffer always holds a part or a head to take"
        return memoryview(self._staging)[self._end:]

    def buffer_updated(self, nbytes: int) -> list[Frame]:
        """Take in ``nbytes`` written at ``get_buffer()``; the frames now complete, in order."""
        assert nbytes > 0, nbytes
        frames: list[Frame] = []
        if self._direct is not None:
            self._direct_filled += nbytes
            assert self._direct_filled <= len(self._direct)
            if self._direct_filled < len(self._direct):
                return frames
            part, self._direct, self._direct_filled = self._direct, None, 0
            self._part_done(part, frames)
        else:
            self._end += nbytes
            assert self._end <= len(self._staging)
        while self._direct is None and self._take(frames):
            pass
        return frames

    def _take(self, frames: list[Frame]) -> bool:
        """Take the frame's next head or part out of the staging buffer; False when it needs more bytes."""
        held = self._end - self._start
        if self._sizes is None:
            if held < _HEAD.size:
                return False
            body_bytes, count = _HEAD.unpack_from(self._staging, self._start)
            self._start += _HEAD.size
            if count > self.buffers_max or body_bytes > self.frame_bytes_max:
                raise BadFrame(f"the peer announced a frame of {body_bytes} bytes of body and {count} buffers, "
                               f"above the bounds ({self.frame_bytes_max} bytes, {self.buffers_max} buffers): "
                               f"not a mafka4 stream, or a corrupt one")
            self._sizes, self._body_bytes = deque((_LENGTH.size * count,)), body_bytes
            self._reading_lengths = True
            return True
        size = self._sizes[0]
        if size <= held:
            part = self._staging[self._start:self._start + size]
            self._start += size
            self._part_done(part, frames)
            return True
        if size >= len(self._staging):
            self._direct = bytearray(size)
            self._direct[:held] = memoryview(self._staging)[self._start:self._end]
            self._direct_filled = held
            self._start = self._end = 0
        return False

    def _part_done(self, part: bytearray, frames: list[Frame]) -> None:
        """``part``, the frame's next, is whole; after the lengths, the sizes of the rest are known."""
        self._sizes.popleft()
        if self._reading_lengths:
            self._reading_lengths = False
            lengths = struct.unpack(f">{len(part) // _LENGTH.size}I", part)
            total = _HEAD.size + len(part) + self._body_bytes + sum(lengths)
            if total > self.frame_bytes_max:
                raise BadFrame(f"the peer announced a stream frame of {total} bytes, above its bound of "
                               f"{self.frame_bytes_max}: not a mafka4 stream, or a corrupt one")
            self._sizes.extend((self._body_bytes, *lengths))
            return
        self._parts.append(part)
        if not self._sizes:
            body, *buffers = self._parts
            frames.append(Frame(body, tuple(buffers)))
            self._sizes, self._parts = None, []

    def _compact(self) -> None:
        """Move what is held to the staging buffer's start, to make room after it."""
        held = self._end - self._start
        self._staging[:held] = memoryview(self._staging)[self._start:self._end]
        self._start, self._end = 0, held
