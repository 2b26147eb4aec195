"""``checksum.crc32`` is zlib's CRC32, whatever the buffer: the batch format depends on it."""

import zlib

from hypothesis import given, strategies as st

from mafka4.checksum import crc32


@given(st.binary(max_size=5000), st.integers(min_value=0, max_value=2**32 - 1))
def test_crc32_is_zlibs_from_any_start_value(data, value):
    assert crc32(data) == zlib.crc32(data)
    assert crc32(data, value) == zlib.crc32(data, value)


@given(st.binary(min_size=1, max_size=3000), st.data())
def test_crc32_of_a_slice_of_any_buffer_type(data, draw):
    start = draw.draw(st.integers(min_value=0, max_value=len(data)))
    end = draw.draw(st.integers(min_value=start, max_value=len(data)))
    expected = zlib.crc32(data[start:end])
    assert crc32(memoryview(data)[start:end]) == expected
    assert crc32(memoryview(bytearray(data))[start:end]) == expected
    assert crc32(bytearray(data[start:end])) == expected


def test_crc32_continued_over_parts_is_the_crc32_of_the_whole():
    head, body = b"fields of a header", bytes(range(256)) * 4096  # a MiB: ISA-L's folding path
    assert crc32(body, crc32(head)) == zlib.crc32(head + body)
