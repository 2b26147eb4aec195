"""What a node answers ``mafka4 group list|describe|reset-offsets`` with: groups read from etcd,
offsets from the leaders (``protocol.group_admin_api``; the handlers are ``frontend.group_admin_handlers``).

- ``list_groups``: every group with a key in etcd (members, generation, owners or offsets).
- ``describe_group``: members, generation, and per partition of each topic the group reads (per
  VP for a mafka4-mode topic) the owner, committed offset, high watermark and lag in messages and
  in time (``metrics.group_lag``: the rule the leaders' metrics follow; the leader reads the
  timestamp the lag counts from); ``UnknownGroup`` for a group with nothing in etcd.
  A topic deleted since is left out: its offsets are history.
- ``reset_offsets``: every partition's (every VP's, closed ones included, so that "earliest"
  reads parents again before their children) committed offset set to its log start, its end
  (a closed VP's sealed end once recorded), or the first offset at or after a time; written in
  one etcd transaction only while the group has no member, else ``GroupNotEmpty``.

The leaders are asked over Ray, since this runs in a node's process: a physical partition's
leader replica found by name from the topic's state in etcd, a VP's leader through its read
node, each call bounded by ``LIST_OFFSETS_TIMEOUT_S``. A leader that is not running or does not
answer fails the request with a retriable error that says to retry once it failed over (a
description shows a VP whose leader did not answer without its high watermark instead). Every
call blocks on etcd or Ray: run them off an event loop. Names and targets come checked
(``frontend.group_admin_handlers`` checks them before the principal).
"""

from __future__ import annotations

import ray

from mafka4.clocks import wall_ms
from mafka4.coordinator.groups.partition_groups import GroupStore
from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, GroupSnapshot, MemberInfo, TopicPartition
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore
from mafka4.errors import GroupNotEmpty, MafkaError, NotLeader, RequestTimedOut, UnknownGroup, UnknownTopic
from mafka4.frontend.topic_description import read_loss
from mafka4.limits import LIST_OFFSETS_TIMEOUT_S, ReadMode, TopicConfig
from mafka4.metadata import keys
from mafka4.metrics.group_lag import group_lag
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import TopicMetadata
from mafka4.physical.topics import TopicStore
from mafka4.protocol.group_admin_api import GroupDescription, PartitionLag, VirtualPartitionLag, VpStatus
from mafka4.transport.remote_errors import unwrap
from mafka4.virtual.handles import ask_leader_nodes
from mafka4.virtual.vp_state import VirtualPartitionState


class GroupReports:
    """The groups of ``cluster``, read and reset through etcd clients of its own; see the module docstring."""

    def __init__(self, etcd_endpoint: str, cluster: str):
        self._cluster = cluster
        self._store = GroupStore(etcd_endpoint, cluster)
        self._virtual_groups = VirtualGroupStore(etcd_endpoint, cluster)
        self._topics = TopicStore(self._store, cluster)

    def close(self) -> None:
        self._store.close()
        self._virtual_groups.close()

    def list_groups(self) -> list[str]:
        """Every group's name, sorted."""
        return self._store.group_names()

    # --- describe ---------------------------------------------------------------------------

    def describe_group(self, group: str) -> GroupDescription:
        snapshot = self._store.snapshot(group)
        virtual_topics = self._virtual_topics(group, snapshot.members)
        if not snapshot.members and not snapshot.offsets and snapshot.generation is None and not virtual_topics:
            raise UnknownGroup(f"group {group!r} has no members and no committed offsets: see 'mafka4 group list'")
        physical_members = [m for m in snapshot.members if m.assignor != VIRTUAL_ASSIGNOR]
        topics = ({m.topic for m in physical_members} | {tp.topic for tp in snapshot.offsets}
                  | {tp.topic for tp in snapshot.owners})
        virtual_rows = [row for topic in sorted(virtual_topics) for row in self._virtual_rows(group, topic)]
        rows = []
        for topic in sorted(topics):
            try:
                metadata = self._topics.get(topic)
            except UnknownTopic:
                continue  # deleted since: its offsets are history
            committed = [None if (c := snapshot.offsets.get(TopicPartition(topic, p))) is None else c.offset
                         for p in range(len(metadata.partitions))]
            positions = self._partition_answers(metadata, "lag_position", per_partition=[(o,) for o in committed])
            now_ms = wall_ms()
            for partition, (high_watermark, timestamp_ms) in enumerate(positions):
                rows.append(_row(snapshot, TopicPartition(topic, partition), high_watermark, timestamp_ms, now_ms))
        generation = snapshot.generation
        losses = {topic: read_loss(self._store, self._cluster, topic) for topic in sorted(virtual_topics)}
        return GroupDescription(group, None if generation is None else generation.generation,
                                None if generation is None else generation.assignor, snapshot.members, tuple(rows),
                                tuple(virtual_rows), {topic: loss for topic, loss in losses.items() if loss})

    def _virtual_topics(self, group: str, members: tuple[MemberInfo, ...]) -> set[str]:
        """Topics the group reads by virtual partitions: its mafka4-mode members' and those with VP offsets."""
        topics = {m.topic for m in members if m.assignor == VIRTUAL_ASSIGNOR}
        for prefix in (keys.group_vp_offsets_prefix(self._cluster, group),
                       keys.group_vp_owners_prefix(self._cluster, group)):
            for item in self._store.get_prefix(prefix):
                parsed = keys.parse_group_partition(prefix, item.key)
                if parsed is not None:
                    topics.add(parsed[0])
        return topics

    def _virtual_rows(self, group: str, topic: str) -> list[VirtualPartitionLag]:
        try:
            config = self._topics.get(topic).config
        except UnknownTopic:
            return []  # deleted since: its offsets are history
        snapshot = self._virtual_groups.snapshot(group, topic, config)
        view = snapshot.view()
        readable = view.readable()
        consumable = set(view.consumable())
        vps = sorted(snapshot.states)
        positions = self._vp_lag_positions(topic, [snapshot.states[vp] for vp in vps], dict(view.committed))
        now_ms = wall_ms()
        rows = []
        for vp, (high_watermark, timestamp_ms) in zip(vps, positions):
            if vp not in readable:
                status = VpStatus.WAITING
            elif view.layout.is_active(vp):
                status = VpStatus.ACTIVE
            else:
                status = VpStatus.CLOSED if vp in consumable else VpStatus.READ
            committed = view.committed.get(vp)
            lag = group_lag(committed, high_watermark, timestamp_ms, now_ms)
            rows.append(VirtualPartitionLag(topic, vp, status, snapshot.owners.get(vp), committed, high_watermark,
                                            lag.messages, lag.ms))
        return rows

    def _vp_lag_positions(self, topic: str, states: list[VirtualPartitionState],
                          committed: dict[int, int]) -> list[tuple[int | None, int | None]]:
        """Each VP's high watermark and the timestamp its committed offset lags from, from its leader's
        node ((None, None): not answering, or retired)."""
        found = ask_leader_nodes(self._cluster, topic, [s for s in states if not s.retired], "lag_positions",
                                 committed, timeout_s=LIST_OFFSETS_TIMEOUT_S)
        return [(None, None) if isinstance(answer := found.get(state.vp), BaseException) or answer is None else answer
                for state in states]

    # --- reset ------------------------------------------------------------------------------

    def reset_offsets(self, group: str, topic: str, to: str | int) -> dict[int, tuple[int | None, int]]:
        """Set the committed offset of every partition of ``topic`` to ``to``: "earliest" (log start),
        "latest" (high watermark) or a timestamp in ms (first message at or after it, else the high
        watermark). Refused with ``GroupNotEmpty`` while the group has members. Returns, per
        partition (per virtual partition for a mafka4-mode topic), (committed offset before, after)."""
        metadata = self._topics.get(topic)
        if metadata.config.read_mode is ReadMode.MAFKA4:
            return self._reset_vp_offsets(group, topic, metadata.config, to)
        ranges = self._partition_answers(metadata, "list_offsets")
        if to == "earliest":
            targets = [start for start, _ in ranges]
        elif to == "latest":
            targets = [high_watermark for _, high_watermark in ranges]
        else:
            found = self._partition_answers(metadata, "offset_for_timestamp", to)
            targets = [hw if offset is None else offset for offset, (_, hw) in zip(found, ranges)]
        before = self._store.snapshot(group)
        if not self._store.reset_offsets(group, {TopicPartition(topic, p): o for p, o in enumerate(targets)}):
            self._refuse_reset(group)
        return {p: (None if (c := before.offsets.get(TopicPartition(topic, p))) is None else c.offset, o)
                for p, o in enumerate(targets)}

    def _reset_vp_offsets(self, group: str, topic: str, config: TopicConfig,
                          to: str | int) -> dict[int, tuple[int | None, int]]:
        """``reset_offsets`` of a mafka4-mode topic: every VP's log start, end or first offset at a time.

        A closed VP's end is its sealed end once recorded (its high watermark until then).
        """
        before = self._virtual_groups.snapshot(group, topic, config)
        vps = sorted(vp for vp, state in before.states.items() if not state.retired)
        states = [before.states[vp] for vp in vps]
        ranges = self._vp_answers(topic, states, "list_offsets")
        ends = [before.states[vp].sealed_end_offset if before.states[vp].sealed_end_offset is not None else end
                for vp, (_, end) in zip(vps, ranges)]
        if to == "earliest":
            targets = [start for start, _ in ranges]
        elif to == "latest":
            targets = ends
        else:
            found = self._vp_answers(topic, states, "offsets_for_time", to)
            targets = [end if offset is None else offset for offset, end in zip(found, ends)]
        if not self._virtual_groups.reset_offsets(group, topic, dict(zip(vps, targets))):
            self._refuse_reset(group)
        return {vp: (None if (c := before.offsets.get(vp)) is None else c.offset, target)
                for vp, target in zip(vps, targets)}

    def _refuse_reset(self, group: str) -> None:
        members = self._store.snapshot(group).members
        raise GroupNotEmpty(
            f"group {group!r} has {len(members)} active member(s) ({', '.join(m.member_id for m in members)}): "
            f"close those consumers first (a crashed one leaves when its lease expires), then retry")

    # --- the leaders ------------------------------------------------------------------------

    def _partition_answers(self, metadata: TopicMetadata, method: str, *args,
                           per_partition: list[tuple] | None = None) -> list:
        """``<method>(*args)`` (``<method>(*per_partition[p])`` if given) of the leader replica of each
        partition of ``metadata``'s topic, in partition order; ``NotLeader`` or ``RequestTimedOut``
        (retriable) if a leader cannot answer."""
        topic, refs = metadata.name, []
        for state in metadata.partitions:
            if per_partition is not None:
                args = per_partition[state.partition]
            leader = replica_handle(self._cluster, topic, state.partition, state.leader)
            if leader is None:
                raise NotLeader(f"leader {state.leader} of {topic}-{state.partition} (epoch {state.leader_epoch}) is "
                                f"not running: retry once it failed over ('mafka4 topic describe {topic}' shows "
                                f"its leader)")
            refs.append(getattr(leader, method).remote(*args))
        try:
            return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as error:
            cause = unwrap(error)
            if isinstance(cause, MafkaError):
                raise cause from None
            raise RequestTimedOut(f"a leader of topic {topic!r} did not answer within {LIST_OFFSETS_TIMEOUT_S} s "
                                  f"({type(error).__name__}): retry once it failed over ('mafka4 topic describe "
                                  f"{topic}' shows its leaders)") from None

    def _vp_answers(self, topic: str, states: list[VirtualPartitionState], method: str, *args) -> list:
        """``ReadNode.<method>`` for each VP of ``states`` on its leader's node, in order;
        ``RequestTimedOut`` (retriable) if one cannot answer."""
        found = ask_leader_nodes(self._cluster, topic, states, method, *args, timeout_s=LIST_OFFSETS_TIMEOUT_S)
        for state in states:
            if isinstance(found[state.vp], BaseException):
                raise RequestTimedOut(f"{topic}/v{state.vp}: its leader {state.leader} did not answer "
                                      f"({found[state.vp]}); retry once it failed over ('mafka4 topic describe "
                                      f"{topic}' shows its leader)")
        return [found[state.vp] for state in states]


def _row(snapshot: GroupSnapshot, tp: TopicPartition, high_watermark: int, timestamp_ms: int | None,
         now_ms: int) -> PartitionLag:
    owner = snapshot.owners.get(tp)
    committed = snapshot.offsets.get(tp)
    offset = None if committed is None else committed.offset
    lag = group_lag(offset, high_watermark, timestamp_ms, now_ms)
    return PartitionLag(tp.topic, tp.partition, None if owner is None else owner.member_id, offset, high_watermark,
                        lag.messages, lag.ms)
