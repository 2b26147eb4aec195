"""Which physical partition each record of a Kafka produce request goes to (pure).

A Kafka client picks a partition for each record with its own partitioner (murmur2 in Java's,
CRC-32 in librdkafka's "consistent_random") over the partitions it was shown, which for a
Mafka4-mode topic are VPs, not the physical partitions that take writes. So the listener routes
every record again, by mafka4's own rule (``client.partitioner``'s): a keyed record to
``key_hash(key) % partitions``, so one key always lands in one physical partition and its VP
keeps the key's order; keyless records of one Kafka batch together to one partition, round
robin from batch to batch (Kafka's sticky partitioner, one batch at a time).

The records keep their order within each physical partition, so a key's records keep the order
its producer sent them in.
"""

from __future__ import annotations

from typing import Sequence

from mafka4.hashing import key_hash

Record = tuple[bytes | None, bytes, int, Sequence[tuple[str, bytes]] | None]  # (key, value, timestamp_ms, headers)


class ProduceRouting:
    """Routes records over a topic's physical partitions; keeps the keyless round robin's place."""

    def __init__(self) -> None:
        self._keyless_next = 0

    def route(self, records: Sequence[Record], partitions: int) -> dict[int, list[Record]]:
        """``records`` grouped by the physical partition each goes to, each group in their order."""
        assert partitions >= 1, partitions
        keyless_partition = self._keyless_next % partitions
        routed: dict[int, list[Record]] = {}
        for record in records:
            key = record[0]
            partition = keyless_partition if key is None else key_hash(key) % partitions
            routed.setdefault(partition, []).append(record)
        if any(record[0] is None for record in records):
            self._keyless_next = keyless_partition + 1
        return routed
