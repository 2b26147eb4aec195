"""``GroupAdmin``: list consumer groups, describe them with lag, and reset their offsets.

    with GroupAdmin() as admin:
        description = admin.describe_group("billing")   # members, owners, committed offsets, lag
        admin.reset_offsets("billing", "orders", to="earliest")   # only while the group is empty

Lag of a partition is its high watermark (the end of what consumers may read) minus the
group's committed offset; a partition without a committed offset has no lag figure. This is
what ``mafka4 group describe`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray

from mafka4.client.routing import Routing
from mafka4.coordinator.group_protocol import GroupSnapshot, MemberInfo, TopicPartition, validate_group_name
from mafka4.coordinator.groups import GroupStore
from mafka4.errors import GroupNotEmpty, InvalidConfig, UnknownGroup, UnknownTopic
from mafka4.names import validate_topic_name
from mafka4.runtime.connect import Connection, connect

LIST_OFFSETS_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    member_id: str | None  # the owner now, None while unowned (e.g. during a rebalance)
    committed_offset: int | None
    high_watermark: int
    lag: int | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    generation: int | None
    assignor: str | None
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions]
        return None if any(lag is None for lag in lags) else sum(lags)


class GroupAdmin:
    def __init__(self, connection: Connection | None = None):
        self._connection = connection or connect()
        self._store = GroupStore(self._connection.store.endpoint, self._connection.cluster)

    def list_groups(self) -> list[str]:
        return self._store.group_names()

    def _offsets_of(self, topic: str) -> list[tuple[int, int]]:
        """(log start offset, high watermark) of every partition of ``topic``."""
        routing = Routing(self._connection, topic)
        refs = [routing.leader(p).list_offsets.remote() for p in range(len(routing.metadata.partitions))]
        return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S)

    def describe_group(self, group: str) -> GroupDescription:
        snapshot = self._store.snapshot(validate_group_name(group))
        if not snapshot.members and not snapshot.offsets and snapshot.generation is None:
            raise UnknownGroup(f"group {group!r} has no members and no committed offsets: see 'mafka4 group list'")
        topics = {m.topic for m in snapshot.members} | {tp.topic for tp in snapshot.offsets} | {tp.topic for tp in snapshot.owners}
        rows = []
        for topic in sorted(topics):
            try:
                ranges = self._offsets_of(topic)
            except UnknownTopic:
                continue  # deleted since: its offsets are history
            for partition, (_, high_watermark) in enumerate(ranges):
                rows.append(self._row(snapshot, TopicPartition(topic, partition), high_watermark))
        generation = snapshot.generation
        return GroupDescription(group, None if generation is None else generation.generation,
                                None if generation is None else generation.assignor, snapshot.members, tuple(rows))

    @staticmethod
    def _row(snapshot: GroupSnapshot, tp: TopicPartition, high_watermark: int) -> PartitionLag:
        owner = snapshot.owners.get(tp)
        committed = snapshot.offsets.get(tp)
        offset = None if committed is None else committed.offset
        lag = None if offset is None else max(high_watermark - offset, 0)
        return PartitionLag(tp.topic, tp.partition, None if owner is None else owner.member_id, offset, high_watermark, lag)

    def reset_offsets(self, group: str, topic: str, to: str | int) -> dict[int, tuple[int | None, int]]:
        """Set the committed offset of every partition of ``topic`` to ``to``: "earliest" (log start),
        "latest" (high watermark) or a timestamp in ms (first message at or after it, else the high
        watermark). Refused with ``GroupNotEmpty`` while the group has members. Returns, per
        partition, (committed offset before, after)."""
        validate_group_name(group)
        validate_topic_name(topic)
        ranges = self._offsets_of(topic)
        if to == "earliest":
            targets = [start for start, _ in ranges]
        elif to == "latest":
            targets = [high_watermark for _, high_watermark in ranges]
        elif isinstance(to, int) and not isinstance(to, bool):
            routing = Routing(self._connection, topic)
            found = ray.get([routing.leader(p).offset_for_timestamp.remote(to) for p in range(len(ranges))],
                            timeout=LIST_OFFSETS_TIMEOUT_S)
            targets = [hw if offset is None else offset for offset, (_, hw) in zip(found, ranges)]
        else:
            raise InvalidConfig(f"reset target {to!r} is not valid: use 'earliest', 'latest' or a timestamp in ms")
        before = self._store.snapshot(group)
        if not self._store.reset_offsets(group, {TopicPartition(topic, p): o for p, o in enumerate(targets)}):
            members = self._store.snapshot(group).members
            raise GroupNotEmpty(
                f"group {group!r} has {len(members)} active member(s) ({', '.join(m.member_id for m in members)}): "
                f"close those consumers first (a crashed one leaves when its lease expires), then retry")
        return {p: (None if (c := before.offsets.get(TopicPartition(topic, p))) is None else c.offset, o)
                for p, o in enumerate(targets)}

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> "GroupAdmin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
