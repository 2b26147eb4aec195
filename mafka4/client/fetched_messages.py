"""Fetched batch bytes -> the ``Message``s a consumer returns, for reads of physical partitions and VPs.

A fetch is answered with whole batches, the first one possibly starting before the fetch
offset. Record ``i`` of a batch has offset ``base_offset + i``, so the messages a consumer
takes from one batch are one slice of its records: ``wanted_records`` yields those slices,
decoding no batch wholly before the offset and none once the poll holds ``messages_max``
messages. ``take_wanted`` adds them to the poll's messages, with the cyclic collector paused
over the whole take, and stops at a message that ends it (a VP's loss marker). Its two uses:
``take_messages``, the read of a physical partition (Mafka3 mode), and
``vp_messages.take_vp_messages``, the read of a VP.

Pure: bytes in, messages out.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Callable, Iterator, TypeVar

from mafka4.batch_frame import BatchHeader, iter_batches
from mafka4.batch_payload import TupleBuilder, decode_checked_batch
from mafka4.client.message import Message
from mafka4.collector import collection_paused

# Decodes the CRC-checked batch at a position of the data into messages.
BatchDecoder = Callable[[int, BatchHeader], list]
Ending = TypeVar("Ending")

_headers_of = attrgetter("headers")


def wanted_records(data: bytes | bytearray | memoryview, offset: int, messages: list, messages_max: int,
                   decode: BatchDecoder, check_crc: bool = True) -> Iterator[list]:
    """Per batch of ``data`` holding records from ``offset`` on, the slice of them that fits in
    ``messages`` (at most ``messages_max``), decoded by ``decode``. The caller adds each slice to
    ``messages`` (or stops) before taking the next.

    ``CorruptRecord`` as ``decode`` raises it, for any batch that is decoded (the batches not
    decoded hold no message the caller takes: its next fetch starts at them).

    ``check_crc`` (``ConsumerConfig.check_crcs``): each batch is checked against its CRC first,
    and the take stops before one that fails it (it was damaged on its way here: the next fetch
    asks for it again). Without the check, a damaged batch is caught only if its structure is bad.
    """
    for position, header in iter_batches(data, check_crc):
        if header.next_offset <= offset:
            continue
        room = messages_max - len(messages)
        if room <= 0:
            return
        start = max(offset - header.base_offset, 0)
        decoded = decode(position, header)
        # Most batches are taken whole: the list itself, not a copy of it.
        yield decoded if start == 0 and room >= len(decoded) else decoded[start:start + room]


def take_wanted(data: bytes | bytearray | memoryview, offset: int, messages: list[Message], messages_max: int,
                decode: BatchDecoder, check_crc: bool,
                ending: Callable[[tuple], Ending | None] | None = None) -> tuple[int | None, Ending | None]:
    """Append to ``messages`` the messages ``wanted_records`` yields (``decode`` and ``check_crc`` as it
    takes them), stopping past the first one whose headers ``ending`` names an ending for.

    Returns (the offset after the last message taken or the ending one, None if there is none;
    the ending, or None).
    """
    next_offset = None
    with collection_paused():  # over the whole take, not each batch: see ``mafka4.collector``
        for taken in wanted_records(data, offset, messages, messages_max, decode, check_crc):
            if ending is not None and any(map(_headers_of, taken)):  # only a message with headers can end it
                for index, message in enumerate(taken):
                    end = ending(message.headers)
                    if end is not None:
                        messages.extend(taken[:index])
                        return message.offset + 1, end
            messages.extend(taken)
            if taken:
                next_offset = taken[-1].offset + 1
    return next_offset, None


def take_messages(data: bytes | bytearray | memoryview, topic: str, partition: int, offset: int,
                  messages: list[Message], messages_max: int, check_crc: bool = True) -> int | None:
    """Append to ``messages`` the messages of ``partition`` in ``data`` from ``offset`` on, while it
    holds fewer than ``messages_max``; the partition's next offset, or None if none was taken.

    Each record is decoded straight into its message: no ``Record`` is built only to be copied.
    ``check_crc`` as ``wanted_records`` takes it.
    """
    build = TupleBuilder(Message, topic, partition)
    next_offset, _ = take_wanted(data, offset, messages, messages_max,
                                 lambda position, header: decode_checked_batch(data, position, header, build),
                                 check_crc)
    return next_offset
