"""The data APIs of a physical partition: PRODUCE, FETCH and LIST_OFFSETS.

Each replica of a physical partition serves them on its own client port (``frontend.replica_port``),
whose address the METADATA answer names for the partition's leader, as a Kafka client sends a
partition's produce to the broker that leads it. A request names its topic and partition, so a
client whose metadata is stale is told ``NotLeader`` (retriable: refresh the metadata and resend)
instead of writing elsewhere.

Batches travel as out-of-band buffers (``Buffer`` fields), never inside the msgpack body: a
produce's batch is the frame ``batch_frame`` encodes, which the replica checks (its CRC, its
producer id and sequence) as it did when the batch came over the cluster's own stream; a fetch
answers whole committed batches. ``acks`` is the ``limits.Acks`` value ("0", "1" or "all").
Pure: message types.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.protocol.messages import ApiKey, Buffer, register


@dataclass(frozen=True, slots=True)
class ProduceRequest:
    """Append ``batch`` to ``topic``-``partition``; answered once ``acks`` holds, or ``timeout_ms`` passed."""

    topic: str
    partition: int
    acks: str
    timeout_ms: int
    batch: Buffer


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    """The offset of the batch's first record (a retried batch gets its first append's offset)."""

    base_offset: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """Whole committed batches from ``offset``, at most about ``bytes_max`` (at least one batch);
    with none there yet, wait up to ``wait_ms_max`` for one. ``from_follower``: a follower may
    answer, below its own high watermark."""

    topic: str
    partition: int
    offset: int
    bytes_max: int
    wait_ms_max: int
    from_follower: bool


@dataclass(frozen=True, slots=True)
class FetchAnswer:
    data: Buffer
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    """The readable range of ``topic``-``partition``, and with ``timestamp_ms`` the first offset
    whose record is stamped at or after it."""

    topic: str
    partition: int
    timestamp_ms: int | None


@dataclass(frozen=True, slots=True)
class ListOffsetsAnswer:
    log_start_offset: int
    high_watermark: int
    timestamp_offset: int | None  # None: no timestamp asked, or no record stamped that late


register(ApiKey.PRODUCE, ProduceRequest, ProduceAnswer)
register(ApiKey.FETCH, FetchRequest, FetchAnswer)
register(ApiKey.LIST_OFFSETS, ListOffsetsRequest, ListOffsetsAnswer)
