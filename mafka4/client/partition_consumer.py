"""``PartitionConsumer``: reads the physical partitions of a mafka3-mode topic, alone or as a group member.

``Consumer(topic)`` and ``Consumer(topic, group=...)`` of a mafka3-mode topic are one of these
(``client.consumer`` says how to use them). Fetching is ``PartitionFetcher``'s: one long-poll
fetch outstanding per partition leader, only messages below the high watermark returned.
Positions are per partition: the offset of the next message. Without a group, every partition
is read, from its start (``from_beginning``) or its high watermark.

In a group (see ``mafka4.coordinator.groups.partition_groups``) the consumer reads only the
partitions it owns. The group's coordinator, a node of the cluster, runs the protocol for it
(``client.remote_member``); the rebalance is asked for inside ``poll()``, in the caller's thread,
as in Kafka's classic consumer, while heartbeats on the client loop keep the session alive and
notice changes. So positions never move while they are committed, and a consumer that stops
polling holds its partitions until ``rebalance_timeout_ms`` (then the coordinator drops it). A claimed partition
starts at its committed offset; without one (or below the log start) at ``auto_offset_reset``
(default ``latest``, as Kafka; ``from_beginning=True`` means ``earliest``). Positions are
committed by ``poll()`` every ``auto_commit_interval_ms`` (not again while they have not moved
since a commit the coordinator answered: ``client.positions``), by ``commit()``, before a
partition is released and on ``close()``. A committed offset is the position after the messages that
earlier polls returned, so delivery is at-least-once: messages returned but not yet committed
are returned again to the next owner after a crash. A commit never moves an offset backwards.
"""

from __future__ import annotations

import logging
import time

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.group_commits import GroupCommits
from mafka4.client.message import Message
from mafka4.client.partition_fetcher import PartitionFetcher
from mafka4.client.positions import Positions, start_offset
from mafka4.client.reading import poll_until, seek_to_time
from mafka4.client.remote_member import RemoteMember
from mafka4.errors import CommitFailed, MafkaError, PartitionNotAssigned
from mafka4.limits import CLAIMED_START_RETRY_S, ConsumerConfig, OffsetReset
from mafka4.log.epochs import NO_EPOCH

logger = logging.getLogger(__name__)


class PartitionConsumer:
    def __init__(self, topic: str, group: str | None, access: ClusterAccess, config: ConsumerConfig,
                 from_beginning: bool):
        """``access``: the cluster's ports, which data and the group's coordinator answer on."""
        self.topic, self.group, self.config = topic, group, config
        self._fetcher = PartitionFetcher(access, topic, config)
        self._member: RemoteMember | None = None
        self._commits: GroupCommits | None = None
        # Claimed partitions whose start position is not known yet (their leader did not answer), with
        # their committed offsets.
        self._unstarted: dict[int, int | None] = {}
        if group is None:
            partitions = self._fetcher.partitions()
            for partition, log_range in zip(partitions, self._fetcher.list_offsets_many(partitions)):
                self._fetcher.seek(partition, start_offset(None, log_range, from_beginning))
        else:
            self._join(access, group)

    def _join(self, access: ClusterAccess, group: str) -> None:
        self._member = RemoteMember(access, group, self.topic, self.config.assignor, self.config)
        self._commits = GroupCommits(group, self.config.auto_commit_interval_ms,
                                     lambda: self._group_positions(self._fetcher.positions), self._write_commit,
                                     "partitions")
        try:
            self._member.join()
            self._rebalance()
        except BaseException:
            self._member.leave({})
            raise

    @property
    def member_id(self) -> str | None:
        return None if self._member is None else self._member.member_id

    # --- positions --------------------------------------------------------------------------

    def assignment(self) -> list[int]:
        return sorted(self._fetcher.positions)

    def position(self, partition: int) -> int:
        return self._fetcher.positions[partition]

    def end_offsets(self) -> dict[int, int]:
        """The high watermark of every partition read, asked of the leaders now (Kafka's ``endOffsets``)."""
        partitions = sorted(self._fetcher.positions)
        return {partition: high_watermark for partition, (_, high_watermark)
                in zip(partitions, self._fetcher.list_offsets_many(partitions))}

    def seek(self, partition: int, offset: int) -> None:
        if partition not in self._fetcher.positions:
            raise PartitionNotAssigned(
                f"partition {partition} of {self.topic!r} is not assigned to this consumer "
                f"(assigned: {self.assignment()}); poll() until assignment() lists it")
        self._fetcher.seek(partition, offset)

    def hold(self, partition: int, held: bool) -> None:
        """Fetch nothing of ``partition`` while ``held`` (an ordered retry, ``client.retrying``)."""
        self._fetcher.hold(partition, held)

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every assigned partition to its first message at or after ``timestamp_ms`` (or its end)."""
        seek_to_time(self._fetcher, self.assignment(), timestamp_ms)

    # --- polling ----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        return poll_until(timeout_ms, self._group_duties, self._fetch)

    def _fetch(self, remaining_s: float) -> list[Message]:
        """Fetch (or, reading nothing, wait) until data comes or ``remaining_s`` passed; in a group also until
        it changes, an auto-commit is due or a claimed partition is to be started again."""
        if self._member is None:
            if not self._fetcher.positions:
                time.sleep(remaining_s)
                return []
            return self._fetcher.fetch(remaining_s)
        assert self._commits is not None
        wait_s = min(remaining_s, self._commits.seconds_until_due(),
                     CLAIMED_START_RETRY_S if self._unstarted else remaining_s)
        if not self._fetcher.positions:
            self._member.changed.wait(wait_s)
            return []
        return self._fetcher.fetch(wait_s, self._member.woken())

    # --- group membership -----------------------------------------------------------------

    def _group_duties(self) -> None:
        """Rebalance when the group changed, start claimed partitions, auto-commit when due."""
        if self._member is None:
            return
        if self._member.changed.is_set():
            self._rebalance()
        if self._unstarted:
            self._start_claimed()
        assert self._commits is not None
        self._commits.if_due()

    def _rebalance(self) -> None:
        assert self._member is not None
        result = self._member.sync(self._group_positions(self._fetcher.positions))
        assert self._commits is not None
        self._commits.forget()
        for partition in result.revoked:
            self._fetcher.stop(partition)
            self._unstarted.pop(partition, None)
        self._unstarted.update(result.claimed)
        self._start_claimed()
        started = set(self._fetcher.positions) | set(self._unstarted)
        assert started == set(result.owned), "fetching exactly the owned partitions"

    def _start_claimed(self) -> None:
        """Position claimed partitions at their committed offset, else at ``auto_offset_reset``."""
        partitions = sorted(self._unstarted)
        try:
            ranges = self._fetcher.list_offsets_many(partitions)
        except MafkaError as raised:
            logger.warning("group %s: cannot position %s yet (%s); retrying", self.group, partitions, raised)
            self._fetcher.refresh()
            return
        earliest = self.config.auto_offset_reset is OffsetReset.EARLIEST
        for partition, log_range in zip(partitions, ranges):
            committed = self._unstarted.pop(partition)
            self._fetcher.seek(partition, start_offset(committed, log_range, earliest))

    @staticmethod
    def _group_positions(positions: dict[int, int]) -> dict[int, tuple[int, int, int]]:
        return {partition: (offset, offset, NO_EPOCH) for partition, offset in positions.items()}

    def _write_commit(self, positions: Positions) -> tuple[dict[int, int], set[int]]:
        assert self._member is not None
        committed, lost = self._member.commit(positions)
        return {partition: positions[partition][0] for partition in committed}, lost

    def commit(self) -> dict[int, int]:
        """Commit the positions of every owned partition now; returns the offsets written.

        Raises ``CommitFailed`` if a rebalance took a partition away first (its new owner starts
        from the last committed offset). Positions behind the committed offset are not written.
        """
        assert self._commits is not None, "Consumer.commit() refuses a consumer without a group"
        written, lost = self._commits.now()
        if lost:
            raise CommitFailed(
                f"group {self.group!r}: partitions {sorted(lost)} of {self.topic!r} were "
                f"reassigned before the commit; poll() again to get the new assignment")
        return written

    def close(self) -> None:
        """Leave the group (committing and releasing every owned partition) and stop fetching."""
        self._fetcher.clear()
        try:
            if self._member is not None:
                member, self._member = self._member, None
                try:
                    member.leave(self._group_positions(self._fetcher.positions))
                finally:
                    self._fetcher.positions.clear()
        finally:
            self._fetcher.close()
