"""Which physical partition a message goes to (pure).

* an explicit partition wins;
* a key goes to ``key_hash(key) % partitions``, so one key always lands in one partition;
* keyless messages go round robin, one batch at a time (Kafka's sticky partitioner): the
  partition moves on whenever a keyless message opens a new batch or fills one, so
  keyless traffic fills one batch per partition at a time instead of many small ones.
"""

from __future__ import annotations

from mafka4.errors import InvalidRecord
from mafka4.hashing import key_hash


class Partitioner:
    def __init__(self, topic: str, partitions: int):
        assert partitions >= 1
        self._topic = topic
        self._partitions = partitions
        self._sticky = 0

    @property
    def partitions(self) -> int:
        return self._partitions

    def partition(self, key: bytes | None, partition: int | None) -> int:
        if partition is not None:
            if isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < self._partitions:
                raise InvalidRecord(
                    f"partition {partition!r} does not exist: topic {self._topic!r} has partitions 0..{self._partitions - 1}"
                )
            return partition
        if key is not None:
            return key_hash(key) % self._partitions
        return self._sticky

    def batch_closed(self, partition: int) -> None:
        """Move keyless traffic on: the sticky partition started or filled a batch."""
        if partition == self._sticky:
            self._sticky = (self._sticky + 1) % self._partitions
