"""``Consumer``: reads committed messages of a topic, alone or as a member of a consumer group.

    consumer = Consumer("orders", from_beginning=True)          # every partition, no group
    consumer = Consumer("orders", group="billing")              # a group member
    for message in consumer.poll(timeout_ms=500): ...
    consumer.commit(); consumer.seek(0, 1234); consumer.seek_to_time(1_700_000_000_000)
    consumer.close()                                            # commits and leaves the group

The topic's read mode decides what is read. A mafka4-mode topic is read from its virtual
partitions: ``Consumer`` hands every call to a ``VirtualConsumer`` (no group) or a
``VirtualGroupConsumer`` (a group whose members own VPs, without eager rebalances), and
``partition`` / offsets mean VP ids and VP offsets. The rest of this docstring is about
mafka3-mode topics, read from their physical partitions.

Each poll keeps one long-poll fetch outstanding per partition leader, over the leader's stream
(``client.stream_caller``), and decodes the whole batches that come back; only messages below the high watermark (committed on the
ISR) are ever returned. Positions are per partition: the offset of the next message. A leader
that a network fault (``mafka4.partition_gate``) cuts this process off from is not asked
until the fault heals or the partition's leader moves; while no leader can be asked, ``poll()``
looks again every ``LEADER_RETRY_S``.

In a group (see ``mafka4.coordinator.groups.partition_groups``) the consumer reads only the partitions it
owns. The rebalance runs inside ``poll()``, in the caller's thread, as in Kafka's classic
consumer: a background thread only refreshes the member lease and notices changes. So
positions never move while they are committed, and a consumer that stops polling holds its
partitions until ``rebalance_timeout_ms`` (then it leaves the group). A claimed partition
starts at its committed offset; without one (or below the log start) at ``auto_offset_reset``
(default ``latest``, as Kafka; ``from_beginning=True`` means ``earliest``). Positions are
committed by ``poll()`` every ``auto_commit_interval_ms``, by ``commit()``, before a partition
is released and on ``close()``. A committed offset is the position after the messages that
earlier polls returned, so delivery is at-least-once: messages returned but not yet committed
are returned again to the next owner after a crash. A commit never moves an offset backwards.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from typing import Any

import ray

from mafka4.client.fetched_messages import take_messages
from mafka4.client.message import Message, new_member_id
from mafka4.client.routing import Routing
from mafka4.client.stream_caller import stream_caller
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.client.virtual_group_consumer import VirtualGroupConsumer
from mafka4.coordinator.groups.partition_groups import GroupMember, GroupStore, SyncResult
from mafka4.coordinator.groups.partition_protocol import (CommittedOffset, MemberInfo, TopicPartition,
                                                          validate_group_name)
from mafka4.errors import CommitFailed, CoordinatorUnavailable, MafkaError, PartitionNotAssigned
from mafka4.limits import (LEADER_RETRY_S, LIST_OFFSETS_TIMEOUT_S, PARTITION_GROUP_CHECK_INTERVAL_S, ConsumerConfig,
                           OffsetReset, ReadMode)
from mafka4.names import validate_topic_name
from mafka4.partition_gate import client_gate
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection, connect
from mafka4.transport.ray_names import replica_actor_name
from mafka4.transport.remote_errors import unwrap

logger = logging.getLogger(__name__)

class Consumer:
    def __init__(self, topic: str, group: str | None = None, connection: Connection | None = None,
                 from_beginning: bool = False, **settings: Any):
        """``settings`` are ``ConsumerConfig`` fields (fetch_bytes_max, auto_commit_interval_ms, assignor, ...)."""
        self.topic = validate_topic_name(topic)
        if group is not None and from_beginning:
            settings = {**settings, "auto_offset_reset": OffsetReset.EARLIEST}
        self.config = ConsumerConfig(**settings)
        self.group = None if group is None else validate_group_name(group)
        connection = connection or connect()
        metadata = TopicStore(connection.store, connection.cluster).get(topic)
        self._virtual: VirtualConsumer | VirtualGroupConsumer | None = None
        if metadata.config.read_mode is ReadMode.MAFKA4:
            self._virtual = (VirtualConsumer(topic, connection, from_beginning, **settings) if self.group is None
                             else VirtualGroupConsumer(metadata, self.group, connection, self.config))
            return
        self._routing = Routing(connection, topic)
        self._positions: dict[int, int] = {}
        self._pending: dict[int, tuple[concurrent.futures.Future, int]] = {}  # fetches over leaders' streams
        self._cluster = connection.cluster
        self._member: GroupMember | None = None
        # Claimed partitions whose start position is not known yet (their leader did not answer).
        self._unstarted: dict[TopicPartition, CommittedOffset | None] = {}
        self._store: GroupStore | None = None
        self._last_commit_s = time.monotonic()
        if self.group is None:
            partitions = range(len(self._routing.metadata.partitions))
            for partition, (start, high_watermark) in zip(partitions, self._list_offsets_many(partitions)):
                self._positions[partition] = start if from_beginning else high_watermark
        else:
            self._join(connection)

    def _join(self, connection: Connection) -> None:
        self._store = GroupStore(connection.store.endpoint, connection.cluster)
        member = MemberInfo(new_member_id(), self.topic, self.config.assignor)
        self._member = GroupMember(self._store, self.group, member, self.config)
        try:
            self._member.join()
            self._rebalance()
        except BaseException:
            self._member.leave({})
            self._store.close()
            raise

    @property
    def member_id(self) -> str | None:
        if isinstance(self._virtual, VirtualGroupConsumer):
            return self._virtual.member_id
        return None if self._member is None else self._member.member_id

    def assignment(self) -> list[int]:
        if self._virtual is not None:
            return self._virtual.assignment()
        return sorted(self._positions)

    def position(self, partition: int) -> int:
        if self._virtual is not None:
            return self._virtual.position(partition)
        return self._positions[partition]

    def seek(self, partition: int, offset: int) -> None:
        if self._virtual is not None:
            return self._virtual.seek(partition, offset)
        if partition not in self._positions:
            raise PartitionNotAssigned(
                f"partition {partition} of {self.topic!r} is not assigned to this consumer "
                f"(assigned: {self.assignment()}); poll() until assignment() lists it")
        self._positions[partition] = offset
        self._pending.pop(partition, None)

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every assigned partition to its first message at or after ``timestamp_ms`` (or its end)."""
        if self._virtual is not None:
            return self._virtual.seek_to_time(timestamp_ms)
        partitions = self.assignment()
        refs = [self._routing.leader(p).offset_for_timestamp.remote(timestamp_ms) for p in partitions]
        offsets = ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S)
        ends = self._list_offsets_many([p for p, offset in zip(partitions, offsets) if offset is None])
        for partition, offset in zip(partitions, offsets):
            self.seek(partition, offset if offset is not None else ends.pop(0)[1])

    def _list_offsets_many(self, partitions) -> list[tuple[int, int]]:
        """(log start offset, high watermark) of each partition, asked of the leaders in parallel."""
        refs = [self._routing.leader(p).list_offsets.remote() for p in partitions]
        return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S) if refs else []

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        if self._virtual is not None:
            return self._virtual.poll(timeout_ms)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if self._member is not None:
                self._group_duties()
            remaining = max(deadline - time.monotonic(), 0)
            slice_s = remaining if self._member is None else min(remaining, PARTITION_GROUP_CHECK_INTERVAL_S)
            if not self._positions:
                if remaining <= 0:
                    return []
                if self._member is None:
                    time.sleep(remaining)
                else:  # owning nothing: only a group change (or a partition still to start) matters
                    self._member.changed.wait(slice_s if self._unstarted else remaining)
                continue
            self._issue_fetches()
            calls = [call for call, _ in self._pending.values()]
            if not calls:
                time.sleep(min(slice_s, LEADER_RETRY_S))
                if time.monotonic() >= deadline:
                    return []
                continue
            ready, _ = concurrent.futures.wait(calls, timeout=slice_s, return_when=concurrent.futures.FIRST_COMPLETED)
            if ready:
                messages = self._collect({call for call in calls if call.done()})
                if messages or time.monotonic() >= deadline:
                    return messages
            elif time.monotonic() >= deadline:
                return []

    def _issue_fetches(self) -> None:
        for partition, offset in self._positions.items():
            if partition in self._pending:
                continue
            try:
                leader = self._routing.leader(partition)
            except MafkaError:
                self._routing.refresh()
                continue
            leader_id = self._routing.metadata.partitions[partition].leader
            passage = client_gate().plan(leader_id)
            if passage.lost:
                continue  # a fetch or its answer would be lost: ask again once the fault heals or the leader moves
            if passage.request_delay_ms or passage.answer_delay_ms:
                time.sleep((passage.request_delay_ms + passage.answer_delay_ms) / 1000)
            call = stream_caller().call(leader, replica_actor_name(self._cluster, self.topic, partition, leader_id),
                                        "fetch", offset, self.config.fetch_bytes_max, self.config.fetch_wait_ms_max)
            self._pending[partition] = (call, offset)

    def _collect(self, ready: set) -> list[Message]:
        messages: list[Message] = []
        for partition, (call, offset) in list(self._pending.items()):
            if call not in ready:
                continue
            del self._pending[partition]
            try:
                result = call.result()
            except (MafkaError, ray.exceptions.RayActorError) as raised:
                error = unwrap(raised)
                if isinstance(error, MafkaError) and not error.retriable:
                    raise error from None
                self._routing.forget(partition)
                continue
            next_offset = take_messages(result.data, self.topic, partition, offset, messages,
                                        self.config.poll_messages_max, self.config.check_crcs)
            if next_offset is not None:
                self._positions[partition] = next_offset
        return messages

    # --- group membership -----------------------------------------------------------------

    def _group_positions(self) -> dict[TopicPartition, int]:
        return {TopicPartition(self.topic, p): offset for p, offset in self._positions.items()}

    def _group_duties(self) -> None:
        """Rebalance when the group changed, start claimed partitions, auto-commit when due."""
        assert self._member is not None
        if self._member.changed.is_set():
            self._rebalance()
        if self._unstarted:
            self._start_claimed()
        interval_ms = self.config.auto_commit_interval_ms
        if interval_ms is not None and (time.monotonic() - self._last_commit_s) * 1000 >= interval_ms:
            try:
                _, lost = self._commit_positions()
            except CoordinatorUnavailable as error:
                logger.warning("group %s: auto-commit skipped, retried in %d ms: %s", self.group, interval_ms, error)
                return
            if lost:
                logger.warning("group %s: lost %s before committing; their next owner re-reads from the last "
                               "committed offsets", self.group, sorted(tp.partition for tp in lost))

    def _rebalance(self) -> None:
        assert self._member is not None
        result: SyncResult = self._member.sync(self._group_positions())
        for tp in result.revoked:
            self._positions.pop(tp.partition, None)
            self._pending.pop(tp.partition, None)
            self._unstarted.pop(tp, None)
        self._unstarted.update(result.claimed)
        self._start_claimed()
        started = set(self._positions) | {tp.partition for tp in self._unstarted}
        assert started == {tp.partition for tp in result.owned}, "fetching exactly the owned partitions"

    def _start_claimed(self) -> None:
        """Position claimed partitions at their committed offset, else at ``auto_offset_reset``."""
        partitions = sorted(tp.partition for tp in self._unstarted)
        try:
            ranges = self._list_offsets_many(partitions)
        except (MafkaError, ray.exceptions.RayError) as raised:
            logger.warning("group %s: cannot position %s yet (%s); retrying", self.group, partitions, unwrap(raised))
            self._routing.refresh()
            return
        for partition, (log_start, high_watermark) in zip(partitions, ranges):
            committed = self._unstarted.pop(TopicPartition(self.topic, partition))
            if committed is not None and committed.offset >= log_start:
                self._positions[partition] = committed.offset
            elif self.config.auto_offset_reset is OffsetReset.EARLIEST:
                self._positions[partition] = log_start
            else:
                self._positions[partition] = high_watermark

    def _commit_positions(self) -> tuple[set[TopicPartition], set[TopicPartition]]:
        assert self._member is not None
        self._last_commit_s = time.monotonic()
        return self._member.commit(self._group_positions())

    def commit(self) -> dict[int, int]:
        """Commit the positions of every owned partition now; returns the offsets written.

        Raises ``CommitFailed`` if a rebalance took a partition away first (its new owner starts
        from the last committed offset). Positions behind the committed offset are not written.
        """
        if self.group is None:
            raise CommitFailed(f"consumer of {self.topic!r} has no group: create it with group=NAME to commit offsets")
        if isinstance(self._virtual, VirtualGroupConsumer):
            return self._virtual.commit()
        positions = dict(self._positions)
        committed, lost = self._commit_positions()
        if lost:
            raise CommitFailed(
                f"group {self.group!r}: partitions {sorted(tp.partition for tp in lost)} of {self.topic!r} were "
                f"reassigned before the commit; poll() again to get the new assignment")
        return {tp.partition: positions[tp.partition] for tp in committed}

    def close(self) -> None:
        """Leave the group (committing and releasing every owned partition) and stop fetching."""
        if self._virtual is not None:
            return self._virtual.close()
        self._pending.clear()
        if self._member is not None:
            member, self._member = self._member, None
            try:
                member.leave(self._group_positions())
            finally:
                self._positions.clear()
                assert self._store is not None
                self._store.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
