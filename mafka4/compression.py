"""Batch compression codecs: which ones exist, their ids, and the one way each is framed.

A producer compresses a batch's msgpack payload as a whole; the batch says which codec in
the low three bits of its ``attributes`` (``batch_frame.py``), as Kafka does, so every batch of a
log carries its own codec and a log may mix them. Ids are part of the stored format: never
renumber one.

    id  codec  framing of the compressed payload
    0   none   the msgpack payload itself
    1   lz4    one LZ4 frame (``lz4.frame``) that stores its content size
    2   zstd   one Zstandard frame that stores its content size

Both compressed framings must hold exactly one frame, nothing after it, and say how large
the payload is: a reader checks that size against a bound before allocating anything, so
a hostile producer (a valid CRC proves only that the bytes arrived as sent) cannot make a
reader allocate more than an uncompressed batch could hold.

Compression contexts are kept per thread: a context is not safe to share between threads,
and making one costs about as much as compressing a small batch, which the feeder does for
every VP sub-batch it writes.

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import enum
import threading

from mafka4.errors import CorruptRecord, InvalidConfig, UnknownCodec

CODEC_MASK = 0x07  # the low bits of a batch's attributes that hold its codec id
# zstd's own default level and lz4's fast mode: the usual trade of a message queue's producer,
# which compresses on its send path.
ZSTD_LEVEL = 3
LZ4_LEVEL = 0


class Codec(enum.IntEnum):
    """A batch codec; its value is the id stored in the batch attributes."""

    NONE = 0
    LZ4 = 1
    ZSTD = 2

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: object, setting: str = "compression") -> "Codec":
        """A codec as a user names it (``"zstd"``); a ``Codec`` is returned as it is."""
        if isinstance(value, Codec):
            return value
        for codec in cls:
            if str(value).strip().lower() == str(codec):
                return codec
        raise InvalidConfig(f"{setting}={value!r} is not valid: use one of {names()}")

    @classmethod
    def from_attributes(cls, attributes: int, batch: str) -> "Codec":
        """The codec of ``batch`` (named in the error), from its ``attributes``; ``UnknownCodec``
        for an id this version does not know."""
        codec_id = attributes & CODEC_MASK
        codec = CODECS_BY_ID.get(codec_id)
        if codec is not None:
            return codec
        raise UnknownCodec(
            f"{batch} is compressed with codec id {codec_id}, which this version "
            f"does not know (known: {known_ids()}): it was written by a newer or a broken producer; read "
            f"it with a version that knows the codec"
        )


# Every batch a reader decodes asks for its codec: a dict lookup, where ``Codec(id)`` goes through
# the enum's Python-level ``__call__``.
CODECS_BY_ID = {codec.value: codec for codec in Codec}


def names() -> str:
    """The codec names a user may give, for error messages and help."""
    return ", ".join(repr(str(codec)) for codec in Codec)


def known_ids() -> str:
    return ", ".join(f"{codec.value} {codec}" for codec in Codec)


_contexts = threading.local()

# Bound by _import_codecs on the first compress or decompress, not with this module: mafka4.limits
# imports Codec, so every client command would pay about 10 ms for libraries most never call.
lz4 = zstandard = None


def _import_codecs() -> None:
    global lz4, zstandard
    import lz4.frame
    import zstandard  # bound last: a thread that sees it bound sees lz4 bound too


def _zstd_compressor() -> zstandard.ZstdCompressor:
    compressor = getattr(_contexts, "zstd_compressor", None)
    if compressor is None:
        compressor = _contexts.zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    decompressor = getattr(_contexts, "zstd_decompressor", None)
    if decompressor is None:
        decompressor = _contexts.zstd_decompressor = zstandard.ZstdDecompressor()
    return decompressor


def compress(codec: Codec, payload: bytes) -> bytes:
    """``payload`` in ``codec``'s framing (see the module docstring)."""
    if codec is Codec.NONE:
        return payload
    if zstandard is None:
        _import_codecs()
    if codec is Codec.LZ4:
        return lz4.frame.compress(payload, compression_level=LZ4_LEVEL, store_size=True)
    assert codec is Codec.ZSTD, codec
    return _zstd_compressor().compress(payload)


def decompress(codec: Codec, data: bytes | memoryview, size_max: int) -> bytes:
    """The payload ``data`` holds in ``codec``'s framing, at most ``size_max`` bytes.

    ``CorruptRecord`` saying what is wrong when ``data`` is not exactly one frame of the
    codec, does not say its size, says a size above ``size_max`` or does not decompress to it.
    """
    if codec is Codec.NONE:
        return bytes(data)
    if zstandard is None:
        _import_codecs()
    try:
        if codec is Codec.LZ4:
            return _lz4_decompress(data, size_max)
        assert codec is Codec.ZSTD, codec
        return _zstd_decompress(data, size_max)
    except (RuntimeError, ValueError, zstandard.ZstdError) as error:  # what lz4 and zstandard raise on bad input
        raise CorruptRecord(f"{type(error).__name__}: {error}") from error


def _lz4_decompress(data: bytes | memoryview, size_max: int) -> bytes:
    size = lz4.frame.get_frame_info(data)["content_size"]
    _check_size(size, size_max)
    decompressor = lz4.frame.LZ4FrameDecompressor()
    payload = decompressor.decompress(data, max_length=size)
    if not decompressor.eof or decompressor.unused_data or len(payload) != size:
        raise CorruptRecord(f"the lz4 frame does not end after the {size} bytes it claims, or holds fewer")
    return payload


def _zstd_decompress(data: bytes | memoryview, size_max: int) -> bytes:
    size = zstandard.frame_content_size(data)
    _check_size(size, size_max)
    # With the content size in the frame, zstandard allocates exactly that and never writes past it.
    payload = _zstd_decompressor().decompress(data, allow_extra_data=False)
    if len(payload) != size:
        raise CorruptRecord(f"the zstd frame claims {size} bytes but holds {len(payload)}")
    return payload


def _check_size(size: int, size_max: int) -> None:
    # A payload is a msgpack array of at least one record: never empty. lz4 says 0 and zstd -1
    # for a frame that does not store its size.
    if not 0 < size <= size_max:
        raise CorruptRecord(f"the frame claims a payload of {size} bytes; a payload has 1 to {size_max}")
