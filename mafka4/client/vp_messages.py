"""VP batch bytes -> the ``Message``s a consumer returns: what ``VpFetcher`` does with each answer.

A read node answers a fetch of a VP with whole batches of its log, the first one possibly
starting before the fetch offset. ``take_vp_messages`` turns them into messages:

* each batch is CRC-checked once (``batch_frame.iter_batches``; not at all with the consumer's
  ``check_crcs`` off) and decoded by
  ``vp_records.decode_checked_vp_batch`` straight into ``Message``s, the source header checked
  and left out on the way: one object per record, where decoding, stripping the source and
  copying into a message built three;
* messages before the fetch offset are skipped, and no batch wholly before it is decompressed;
* at most ``messages_max`` messages are held by ``messages`` (shared by the VPs of one poll),
  and no batch is decompressed once it is full (these two as a physical partition's read
  does them: ``fetched_messages.take_wanted``);
* a loss marker ends the take: the position moves past it, and the caller raises
  ``RecordsLost`` for its range after the messages before it;
* the take names the leader epoch of the batch holding its last message (or loss marker): the
  reader's next fetch sends it, so a log that diverged from what it read is told (KIP-320).

Why here and not in ``mafka4.virtual``: ``Message`` is the client's type, and the virtual side
sits below the clients (``tests/unit/test_floors.py``), so it exports a decoder that takes the
constructor, and this module owns the consumer's rules above (start, limit, loss markers).

Pure: bytes in, messages out.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.batch_frame import iter_batches
from mafka4.batch_payload import TupleBuilder
from mafka4.client.fetched_messages import take_wanted
from mafka4.client.message import Message
from mafka4.virtual.vp_records import decode_checked_vp_batch, lost_range_in


@dataclass(frozen=True, slots=True)
class VpTake:
    """Where one VP's reading stands after ``take_vp_messages``."""

    next_offset: int  # the VP's position: past the last message taken or loss marker met, else the fetch offset
    lost: tuple[int, int, int] | None  # (partition, first lost offset, end) of the loss marker that ended it
    leader_epoch: int | None  # of the batch holding the record before ``next_offset``; None: nothing taken


def take_vp_messages(data: bytes | bytearray | memoryview, topic: str, vp: int, offset: int,
                     messages: list[Message], messages_max: int, check_crc: bool = True) -> VpTake:
    """Append to ``messages`` the messages of ``vp`` in ``data`` (batches of its log) from ``offset`` on,
    while it holds fewer than ``messages_max``; stop past the first loss marker.

    ``CorruptRecord`` as ``batch_payload.decode_checked_batch`` raises it, and for a record without
    its source header, for any batch that is decoded (the batches not decoded hold no message this
    take returns: the next fetch starts at them). ``check_crc`` as ``fetched_messages.wanted_records``
    takes it.
    """
    build = TupleBuilder(Message, topic, vp)
    next_offset, lost = take_wanted(data, offset, messages, messages_max,
                                    lambda position, header: decode_checked_vp_batch(data, position, header, build),
                                    check_crc, lost_range_in)
    if next_offset is None:
        return VpTake(offset, lost, None)
    return VpTake(next_offset, lost, epoch_at(data, next_offset - 1))


def epoch_at(data: bytes | bytearray | memoryview, offset: int) -> int:
    """The leader epoch of the batch in ``data`` that holds ``offset`` (one that was just taken from it)."""
    for _, header in iter_batches(data, check_crc=False):  # headers only: the take checked the CRCs it needed
        if header.base_offset <= offset < header.next_offset:
            return header.leader_epoch
    raise AssertionError(f"offset {offset} was taken from batches that do not hold it")
