"""The body of a stream call's frame (``runtime.stream_calls``): a pickle, its large bytes out of band.

A ``bytes`` or ``bytearray`` of at least ``STREAM_OUT_OF_BAND_BYTES_MIN`` travels as one of the
frame's buffers (``transport.stream_frames``): the pickle (protocol 5) holds a reference to it,
a persistent id, which is the buffer's index. A 4 MiB fetch answer (``mafka4 bench stream``,
load below 0.6) cost, per MiB, 0.79-0.87 ms of CPU to send and 0.86-1.27 to receive pickled
whole over asyncio streams; out of band, 0.22-0.29 and 0.17-0.24.

Out-of-band bytes arrive as ``bytearray``, smaller ones as they were sent. Unpickling runs what
the peer chose: only the processes of one cluster speak it (the client protocol's frames are
msgpack, ``protocol.frames``).

Pure: objects in, byte parts out (``encode``); frames in, objects out (``decode``).
"""

from __future__ import annotations

import io
import pickle

from mafka4.limits import STREAM_OUT_OF_BAND_BYTES_MIN
from mafka4.transport.stream_frames import Frame, encode_parts


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
    return encode_parts(file.getvalue(), pickler.buffers)


def decode(frame: Frame) -> object:
    """The object ``frame``'s body pickles, its persistent ids resolved to the frame's buffers."""
    return _Unpickler(io.BytesIO(frame.body), frame.buffers).load()
