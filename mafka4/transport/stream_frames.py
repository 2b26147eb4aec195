"""The frames of a stream call (``runtime.stream_calls``): a pickle, with its large bytes beside it.

Why: a fetch answer or a produce batch is up to several MiB of bytes inside a few small fields.
Pickled whole, those bytes were copied into the pickle, again on the way into the socket, and
on the receiving side out of the socket's reads into a stream buffer, out of it into the frame,
and out of the frame into the unpickled object. So a ``bytes`` or ``bytearray`` of at least
``STREAM_OUT_OF_BAND_BYTES_MIN`` travels out of band: the pickle holds a reference to it (a
persistent id), it is written to the socket as it lies, and the receiver reads it straight
into the ``bytearray`` the unpickled object gets. A 4 MiB fetch answer (``mafka4 bench
stream``, load below 0.6) cost, per MiB, 0.79-0.87 ms of CPU to send and 0.86-1.27 to receive
pickled whole over asyncio streams; out of band, 0.22-0.29 and 0.17-0.24.

Wire, all integers big-endian:

    frame   := head lengths body buffer*
    head    := u32 body_bytes, u32 buffer_count
    lengths := buffer_count x u32 buffer_bytes
    body    := a pickle (protocol 5) whose persistent id i is buffer i; or, for a connection's
               first frame, the server's token

Out-of-band bytes arrive as ``bytearray`` (what a socket can be read into), so a receiver of
large data must take any bytes-like object; smaller ones arrive as they were sent. A frame
longer than ``STREAM_FRAME_BYTES_MAX`` in all is refused on either side: ``FrameTooLarge``
before it is sent, ``BadFrame`` when a peer announces one, or more buffers than could fit in
it (``STREAM_FRAME_BUFFERS_MAX``): that peer does not speak this protocol, or is corrupt.

Pure: objects in, byte parts out (``encode``); bytes in, frames out (``FrameReader``). No
sockets here.
"""

from __future__ import annotations

import io
import pickle
import struct
from collections import deque
from dataclasses import dataclass

from mafka4.limits import (STREAM_FRAME_BUFFERS_MAX, STREAM_FRAME_BYTES_MAX, STREAM_OUT_OF_BAND_BYTES_MIN,
                           STREAM_STAGING_BYTES, STREAM_WRITTEN_APART_BYTES_MIN)

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

    def loads(self) -> object:
        """The object the body pickles, its persistent ids resolved to the buffers."""
        return _Unpickler(io.BytesIO(self.body), self.buffers).load()


class _Pickler(pickle.Pickler):
    """Pickles ``bytes`` and ``bytearray`` of at least ``STREAM_OUT_OF_BAND_BYTES_MIN`` as persistent
    ids, collecting them in ``buffers``. (``persistent_id`` is asked of every object, before the
    C pickler's fast paths for atoms; ``reducer_override`` is not asked of exact bytes.)"""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=5)
        self.buffers: list[bytes | bytearray] = []

    def persistent_id(self, obj: object) -> int | None:
        if type(obj) in (bytes, bytearray) and len(obj) >= STREAM_OUT_OF_BAND_BYTES_MIN:
            self.buffers.append(obj)
            return len(self.buffers) - 1
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, buffers: tuple[bytearray, ...]):
        super().__init__(file)
        self._buffers = buffers

    def persistent_load(self, pid: object) -> bytearray:
        if not (type(pid) is int and 0 <= pid < len(self._buffers)):
            raise pickle.UnpicklingError(f"the frame refers to buffer {pid!r}; it has {len(self._buffers)}")
        return self._buffers[pid]


def encode(obj: object) -> list[bytes | memoryview]:
    """The frame of ``obj``, as parts to write in order: each out-of-band buffer of at least
    ``STREAM_WRITTEN_APART_BYTES_MIN`` as a view of itself (no copy), everything between them joined.
    ``FrameTooLarge`` above the bounds; whatever ``pickle`` raises for an object that does not
    pickle."""
    file = io.BytesIO()
    pickler = _Pickler(file)
    pickler.dump(obj)
    return _parts(file.getvalue(), pickler.buffers)


def encode_raw(body: bytes) -> list[bytes | memoryview]:
    """A frame whose body is ``body`` itself (a connection's first frame: the token)."""
    return _parts(body, [])


def _parts(body: bytes, buffers: list[bytes | bytearray]) -> list[bytes | memoryview]:
    total = _HEAD.size + _LENGTH.size * len(buffers) + len(body) + sum(map(len, buffers))
    if total > STREAM_FRAME_BYTES_MAX:
        raise FrameTooLarge(f"a stream frame of {total} bytes exceeds STREAM_FRAME_BYTES_MAX "
                            f"({STREAM_FRAME_BYTES_MAX}); fetch or batch bounds this large are not supported")
    assert len(buffers) <= STREAM_FRAME_BUFFERS_MAX, "each is at least STREAM_OUT_OF_BAND_BYTES_MIN"
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
    taken out of a staging buffer; a part of ``STREAM_STAGING_BYTES`` or more is read straight into its
    own bytearray (after the piece of it the staging buffer already held). ``BadFrame`` when the
    bytes announce a frame beyond the bounds; the reader is unusable after it.
    """

    def __init__(self) -> None:
        self._staging = bytearray(STREAM_STAGING_BYTES)
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
            if count > STREAM_FRAME_BUFFERS_MAX or body_bytes > STREAM_FRAME_BYTES_MAX:
                raise BadFrame(f"the peer announced a frame of {body_bytes} bytes of body and {count} buffers, "
                               f"above STREAM_FRAME_BYTES_MAX ({STREAM_FRAME_BYTES_MAX}) or STREAM_FRAME_BUFFERS_MAX "
                               f"({STREAM_FRAME_BUFFERS_MAX}): not a mafka4 stream, or a corrupt one")
            self._sizes, self._body_bytes = deque((_LENGTH.size * count,)), body_bytes
            self._reading_lengths = True
            return True
        size = self._sizes[0]
        if size <= held:
            part = self._staging[self._start:self._start + size]
            self._start += size
            self._part_done(part, frames)
            return True
        if size >= STREAM_STAGING_BYTES:
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
            if total > STREAM_FRAME_BYTES_MAX:
                raise BadFrame(f"the peer announced a stream frame of {total} bytes, above STREAM_FRAME_BYTES_MAX "
                               f"({STREAM_FRAME_BYTES_MAX}): not a mafka4 stream, or a corrupt one")
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
