"""``GroupAdmin``: list consumer groups, describe them with lag, and reset their offsets.

    with GroupAdmin() as admin:
        description = admin.describe_group("billing")   # members, owners, committed offsets, lag
        admin.reset_offsets("billing", "orders", to="earliest")   # only while the group is empty

Lag of a partition is its high watermark (the end of what consumers may read) minus the
group's committed offset; a partition without a committed offset has no lag figure. This is
what ``mafka4 group describe`` prints. A group of a mafka4-mode topic is described per
virtual partition (``virtual_partitions``): every VP of the topic's layout with its status
for the group (``VpStatus``), owner, committed offset, VP high watermark and lag.
``reset_offsets`` resets a Mafka3-mode topic's offsets per physical partition and a
mafka4-mode topic's per virtual partition (every VP of its layout, closed ones included, so
that "earliest" reads parents again before their children).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import ray

from mafka4.client.routing import Routing
from mafka4.coordinator.groups.partition_groups import GroupStore
from mafka4.coordinator.groups.partition_protocol import (VIRTUAL_ASSIGNOR, GroupSnapshot, MemberInfo, TopicPartition,
                                                          validate_group_name)
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore
from mafka4.errors import GroupNotEmpty, InvalidConfig, RequestTimedOut, UnknownGroup, UnknownTopic
from mafka4.limits import LIST_OFFSETS_TIMEOUT_S, ReadMode
from mafka4.metadata import keys
from mafka4.names import validate_topic_name
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection, connect
from mafka4.virtual.handles import ask_leader_nodes
from mafka4.virtual.vp_store import VirtualStore


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    member_id: str | None  # the owner now, None while unowned (e.g. during a rebalance)
    committed_offset: int | None
    high_watermark: int
    lag: int | None


class VpStatus(enum.Enum):
    """Where a group stands with one virtual partition (parent before child)."""

    ACTIVE = "active"  # receives messages; readable by the group
    CLOSED = "closed"  # closed by a split or merge; the group still reads it to its sealed end
    READ = "read"  # closed and read to its sealed end, or retired by retention: nothing left
    WAITING = "waiting"  # a child whose parents the group has not read to their end yet


@dataclass(frozen=True, slots=True)
class VirtualPartitionLag:
    topic: str
    vp: int
    status: VpStatus
    member_id: str | None  # the owner now, None while unowned
    committed_offset: int | None
    high_watermark: int | None  # None if its leader did not answer
    lag: int | None


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group: str
    generation: int | None
    assignor: str | None
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]
    virtual_partitions: tuple[VirtualPartitionLag, ...] = ()
    # Per mafka4-mode topic read, per physical partition: [first, end) offsets deleted by retention
    # before every read node fed them (the group never got them).
    read_loss: dict[str, dict[int, list[list[int]]]] = dataclasses.field(default_factory=dict)

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions] + [
            v.lag for v in self.virtual_partitions if v.status in (VpStatus.ACTIVE, VpStatus.CLOSED)]
        return None if any(lag is None for lag in lags) else sum(lags)


class GroupAdmin:
    def __init__(self, connection: Connection | None = None):
        self._connection = connection or connect()
        self._store = GroupStore(self._connection.store.endpoint, self._connection.cluster)
        self._virtual_groups = VirtualGroupStore(self._connection.store.endpoint, self._connection.cluster)

    def list_groups(self) -> list[str]:
        return self._store.group_names()

    def _offsets_of(self, topic: str) -> list[tuple[int, int]]:
        """(log start offset, high watermark) of every partition of ``topic``."""
        routing = Routing(self._connection, topic)
        refs = [routing.leader(p).list_offsets.remote() for p in range(len(routing.metadata.partitions))]
        return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S)

    def describe_group(self, group: str) -> GroupDescription:
        snapshot = self._store.snapshot(validate_group_name(group))
        virtual_topics = self._virtual_topics(group, snapshot.members)
        if not snapshot.members and not snapshot.offsets and snapshot.generation is None and not virtual_topics:
            raise UnknownGroup(f"group {group!r} has no members and no committed offsets: see 'mafka4 group list'")
        physical_members = [m for m in snapshot.members if m.assignor != VIRTUAL_ASSIGNOR]
        topics = {m.topic for m in physical_members} | {tp.topic for tp in snapshot.offsets} | {tp.topic for tp in snapshot.owners}
        virtual_rows = [row for topic in sorted(virtual_topics) for row in self._virtual_rows(group, topic)]
        rows = []
        for topic in sorted(topics):
            try:
                ranges = self._offsets_of(topic)
            except UnknownTopic:
                continue  # deleted since: its offsets are history
            for partition, (_, high_watermark) in enumerate(ranges):
                rows.append(self._row(snapshot, TopicPartition(topic, partition), high_watermark))
        generation = snapshot.generation
        virtual = VirtualStore(self._store, self._store.cluster)
        losses = {topic: {p: [[r.first_offset, r.end_offset] for r in loss.ranges]
                          for p, loss in sorted(virtual.read_losses(topic).items())} for topic in sorted(virtual_topics)}
        return GroupDescription(group, None if generation is None else generation.generation,
                                None if generation is None else generation.assignor, snapshot.members, tuple(rows),
                                tuple(virtual_rows), {topic: loss for topic, loss in losses.items() if loss})

    def _virtual_topics(self, group: str, members) -> set[str]:
        """Topics the group reads by virtual partitions: its mafka4-mode members' and those with VP offsets."""
        topics = {m.topic for m in members if m.assignor == VIRTUAL_ASSIGNOR}
        for prefix in (keys.group_vp_offsets_prefix(self._store.cluster, group),
                       keys.group_vp_owners_prefix(self._store.cluster, group)):
            for item in self._store.get_prefix(prefix):
                parsed = keys.parse_group_partition(prefix, item.key)
                if parsed is not None:
                    topics.add(parsed[0])
        return topics

    def _virtual_rows(self, group: str, topic: str) -> list[VirtualPartitionLag]:
        try:
            config = TopicStore(self._store, self._store.cluster).get(topic).config
        except UnknownTopic:
            return []  # deleted since: its offsets are history
        snapshot = self._virtual_groups.snapshot(group, topic, config)
        view = snapshot.view()
        readable = view.readable()
        consumable = set(view.consumable())
        vps = sorted(snapshot.states)
        high_watermarks = self._vp_high_watermarks(topic, [snapshot.states[vp] for vp in vps])
        rows = []
        for vp, high_watermark in zip(vps, high_watermarks):
            if vp not in readable:
                status = VpStatus.WAITING
            elif view.layout.is_active(vp):
                status = VpStatus.ACTIVE
            else:
                status = VpStatus.CLOSED if vp in consumable else VpStatus.READ
            committed = view.committed.get(vp)
            lag = None if committed is None or high_watermark is None else max(high_watermark - committed, 0)
            rows.append(VirtualPartitionLag(topic, vp, status, snapshot.owners.get(vp), committed, high_watermark, lag))
        return rows

    def _vp_high_watermarks(self, topic: str, states) -> list[int | None]:
        """Each VP's high watermark from its leader's node (None: not answering, or retired)."""
        found = ask_leader_nodes(self._store.cluster, topic, [s for s in states if not s.retired], "list_offsets",
                                 timeout_s=LIST_OFFSETS_TIMEOUT_S)
        return [None if isinstance(answer := found.get(state.vp), BaseException) or answer is None else answer[1]
                for state in states]

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
        partition (per virtual partition for a mafka4-mode topic), (committed offset before, after)."""
        validate_group_name(group)
        validate_topic_name(topic)
        _check_reset_target(to)
        config = TopicStore(self._store, self._store.cluster).get(topic).config
        if config.read_mode is ReadMode.MAFKA4:
            return self._reset_vp_offsets(group, topic, config, to)
        ranges = self._offsets_of(topic)
        if to == "earliest":
            targets = [start for start, _ in ranges]
        elif to == "latest":
            targets = [high_watermark for _, high_watermark in ranges]
        else:
            routing = Routing(self._connection, topic)
            found = ray.get([routing.leader(p).offset_for_timestamp.remote(to) for p in range(len(ranges))],
                            timeout=LIST_OFFSETS_TIMEOUT_S)
            targets = [hw if offset is None else offset for offset, (_, hw) in zip(found, ranges)]
        before = self._store.snapshot(group)
        if not self._store.reset_offsets(group, {TopicPartition(topic, p): o for p, o in enumerate(targets)}):
            self._refuse_reset(group)
        return {p: (None if (c := before.offsets.get(TopicPartition(topic, p))) is None else c.offset, o)
                for p, o in enumerate(targets)}

    def _reset_vp_offsets(self, group: str, topic: str, config, to: str | int) -> dict[int, tuple[int | None, int]]:
        """``reset_offsets`` of a mafka4-mode topic: every VP's log start, end or first offset at a time.

        A closed VP's end is its sealed end once recorded (its high watermark until then).
        """
        before = self._virtual_groups.snapshot(group, topic, config)
        vps = sorted(vp for vp, state in before.states.items() if not state.retired)
        states = [before.states[vp] for vp in vps]
        ranges = self._leader_answers(topic, states, "list_offsets")
        ends = [before.states[vp].sealed_end_offset if before.states[vp].sealed_end_offset is not None else end
                for vp, (_, end) in zip(vps, ranges)]
        if to == "earliest":
            targets = [start for start, _ in ranges]
        elif to == "latest":
            targets = ends
        else:
            found = self._leader_answers(topic, states, "offsets_for_time", to)
            targets = [end if offset is None else offset for offset, end in zip(found, ends)]
        if not self._virtual_groups.reset_offsets(group, topic, dict(zip(vps, targets))):
            self._refuse_reset(group)
        return {vp: (None if (c := before.offsets.get(vp)) is None else c.offset, target)
                for vp, target in zip(vps, targets)}

    def _leader_answers(self, topic: str, states, method: str, *args) -> list:
        """``ReadNode.<method>`` for each VP of ``states`` on its leader's node, in order; raises if one cannot answer."""
        found = ask_leader_nodes(self._store.cluster, topic, states, method, *args, timeout_s=LIST_OFFSETS_TIMEOUT_S)
        for state in states:
            if isinstance(found[state.vp], BaseException):
                raise RequestTimedOut(f"{topic}/v{state.vp}: its leader {state.leader} did not answer ({found[state.vp]}); "
                                      f"retry once it failed over ('mafka4 topic describe {topic}' shows its leader)")
        return [found[state.vp] for state in states]

    def _refuse_reset(self, group: str) -> None:
        members = self._store.snapshot(group).members
        raise GroupNotEmpty(
            f"group {group!r} has {len(members)} active member(s) ({', '.join(m.member_id for m in members)}): "
            f"close those consumers first (a crashed one leaves when its lease expires), then retry")

    def is_virtual(self, topic: str) -> bool:
        """True if ``topic`` is read by virtual partitions (mafka4 mode): its offsets are per VP."""
        return TopicStore(self._store, self._store.cluster).get(validate_topic_name(topic)).config.read_mode is ReadMode.MAFKA4

    def close(self) -> None:
        self._store.close()
        self._virtual_groups.close()

    def __enter__(self) -> "GroupAdmin":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _check_reset_target(to) -> None:
    if to in ("earliest", "latest") or (isinstance(to, int) and not isinstance(to, bool)):
        return
    raise InvalidConfig(f"reset target {to!r} is not valid: use 'earliest', 'latest' or a timestamp in ms")
