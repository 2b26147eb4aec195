"""Which physical partition a message goes to (pure).

* an explicit partition wins;
* a key goes to ``key_hash(key) % partitions``, so one key always lands in one partition;
* keyless messages go round robin, one batch at a time (Kafka's sticky partitioner): the
  partition moves on whenever a keyless message opens a new batch or fills one, so
  keyless traffic fills one batch per partition at a time instead of many small ones.

The hash that picked a keyed record's partition is recorded in its batch, as the key-hash
column (``message_hash_column``; the format: ``batch_payload``), with keyless records' round-robin
hashes beside it: a read node splits the batch into virtual partitions by that column and never
decodes a record.
"""

from __future__ import annotations

import hashlib
import struct
from operator import itemgetter
from typing import Sequence

from mafka4.errors import InvalidRecord
from mafka4.hashing import key_hash
from mafka4.virtual.ranges import GOLDEN_GAMMA, HASH_SPACE, keyless_hash

_KEY = itemgetter(1)  # of a record in payload form: (timestamp_delta_ms, key, value, headers)


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


def message_hash_column(records: Sequence[tuple], producer_id: int, partition: int, base_sequence: int) -> bytes:
    """The key-hash column of a batch of ``records`` (payload form) with this producer id, partition
    and base sequence: each record's ``virtual.ranges.message_hash`` as 8 big-endian bytes.

    A key's entry is its BLAKE2b digest as is (``key_hash`` is that digest read big-endian), made
    once per distinct key of the batch; keyless records' hashes step by ``GOLDEN_GAMMA`` from the
    first one's, as ``keyless_hash`` of consecutive sequences does.
    """
    keys = list(map(_KEY, records))
    digests = dict.fromkeys(keys)
    keyless = None in digests
    for key in digests:
        if key is not None:
            digests[key] = hashlib.blake2b(key, digest_size=8).digest()
    if not keyless:
        return b"".join(map(digests.__getitem__, keys))
    first = keyless_hash(producer_id, partition, base_sequence)
    keyless_hashes = [(first + index * GOLDEN_GAMMA) % HASH_SPACE for index in range(len(keys))]
    if len(digests) == 1:
        return struct.pack(f">{len(keys)}Q", *keyless_hashes)
    return b"".join(digests[key] if key is not None else hash_value.to_bytes(8, "big")
                    for key, hash_value in zip(keys, keyless_hashes))
