"""A consumer's membership of a group, run by the group's coordinator: ``RemoteMember``.

A consumer of either read mode holds one of these; the coordinator runs the group protocol for
it (``frontend.group_sessions``). It is what ``coordinator.groups``' members were to the
consumer, over the client port: ``join``, ``sync`` (in ``poll()``, when ``changed`` is set),
``commit`` and ``leave``, all from the consumer's thread; its ``GroupLink`` heartbeats on the
client loop and sets ``changed``.

Partitions (Mafka3 mode) and VPs (mafka4 mode) are both numbers here; a position is the offset
of the next message and the high watermark seen there (for the group's lag).

When the coordinator does not answer, a sync returns what was owned, changes nothing, and
leaves ``changed`` set, so the next poll tries again: the consumer keeps reading what it owns
meanwhile, as it did while etcd did not answer. When the coordinator no longer knows the
session (``UnknownMember``: it expired, or the coordinator died), the member joins again and
gives up everything it owned (another member may have claimed it since), claiming afresh.

Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import dataclass
from typing import Mapping

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.group_link import GroupLink
from mafka4.client.node_links import NodeLinks
from mafka4.client.positions import Positions
from mafka4.errors import CoordinatorUnavailable, MafkaError, UnknownMember
from mafka4.limits import GROUP_CALL_TIMEOUT_S, GROUP_RETRY_BACKOFF_S, ConsumerConfig
from mafka4.protocol.group_api import (GroupCommitAnswer, GroupCommitRequest, GroupJoinAnswer, GroupJoinRequest,
                                       GroupLeaveRequest, GroupSeedAnswer, GroupSeedRequest, GroupSyncAnswer,
                                       GroupSyncRequest, IdOffset, MemberPosition)
from mafka4.protocol.vp_api import VpMetadataAnswer

logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class MemberSync:
    """What one ``sync`` changed, for the consumer to apply to its fetches."""

    revoked: tuple[int, ...]  # stop reading these
    claimed: Mapping[int, int | None]  # start these, from their committed offset (None: none)
    claimed_epochs: Mapping[int, int]  # the leader epoch committed with each claimed offset (mafka4 mode; -1: none)
    owned: tuple[int, ...]
    waiting: str | None  # why the group is not settled, or None
    # mafka4 mode, None when the coordinator did not say (keep what was known): closed VPs' sealed
    # ends, and the group's committed offsets.
    sealed_end_offsets: Mapping[int, int] | None
    committed_offsets: Mapping[int, int] | None
    # mafka4 mode, with claims: the topic's VP metadata the coordinator sent along (None: ask for it).
    vp_metadata: VpMetadataAnswer | None


class RemoteMember:
    def __init__(self, access: ClusterAccess, group: str, topic: str, assignor: str, config: ConsumerConfig,
                 links: NodeLinks | None = None, lanes: tuple[str, ...] = ()):
        """``links``: connections shared with the consumer's fetcher (``GroupLink``); ``lanes``: those the
        member reads (``names.validate_reader_lanes``' form: () the trunk alone)."""
        self.group, self.topic, self._assignor, self._config = group, topic, assignor, config
        self.lanes = lanes
        self._link = GroupLink(access, group, config.member_lease_ttl_s, links)
        self.changed = self._link.changed
        self.owned: set[int] = set()

    @property
    def member_id(self) -> str:
        return self._link.member_id

    @property
    def coordinator_found_ms(self) -> float:
        """Wall clock when the coordinator was last found (``FIND_COORDINATOR`` answered)."""
        return self._link.found_ms

    def woken(self) -> concurrent.futures.Future:
        """Done once ``changed`` is set: a consumer waits on it beside its fetches, so a change ends the wait."""
        return self._link.woken()

    def join(self) -> GroupJoinAnswer:
        """Open a session on the coordinator (retrying a coordinator that does not answer, for a while)."""
        deadline = time.monotonic() + GROUP_CALL_TIMEOUT_S
        while True:
            try:
                answer = self._link.call(lambda _: GroupJoinRequest(
                    self.group, self.topic, self._assignor, self._config.member_lease_ttl_s * 1000,
                    self._config.rebalance_timeout_ms, self.lanes))
                break
            except MafkaError as error:
                if not error.retriable or time.monotonic() > deadline:
                    raise
                logger.info("group %s: no coordinator answered the join yet (%s); retrying", self.group, error)
                time.sleep(GROUP_RETRY_BACKOFF_S)
        assert isinstance(answer, GroupJoinAnswer)
        self._link.joined(answer.member_id)
        self.changed.set()  # the first sync claims
        return answer

    def sync(self, positions: Positions) -> MemberSync:
        # The heartbeat long-polls again only once this sync is answered (``GroupLink``).
        self._link.syncing()
        self.changed.clear()
        revoked: list[int] = []
        try:
            try:
                answer = self._sync(positions)
            except UnknownMember:
                logger.info("group %s: the coordinator lost member %s's session; joining again", self.group,
                            self.member_id)
                revoked = sorted(self.owned)
                self.owned.clear()
                self.join()
                answer = self._sync({})
        except MafkaError as error:
            if not error.retriable:
                raise
            logger.warning("group %s: member %s could not sync: %s", self.group, self.member_id, error)
            self.changed.set()
            return MemberSync(tuple(revoked), {}, {}, tuple(sorted(self.owned)), f"coordinator unavailable: {error}",
                              None, None, None)
        finally:
            self._link.synced()
        self.owned = set(answer.owned)
        informed = answer.waiting is None  # else (mafka4 mode) the coordinator could not read them
        return MemberSync((*revoked, *answer.revoked), {c.id: c.committed for c in answer.claimed},
                          {c.id: c.committed_leader_epoch for c in answer.claimed}, answer.owned,
                          answer.waiting,
                          _offsets(answer.sealed_end_offsets) if informed else None,
                          _offsets(answer.committed_offsets) if informed else None, answer.vp_metadata)

    def _sync(self, positions: Positions) -> GroupSyncAnswer:
        answer = self._link.call(lambda member_id: GroupSyncRequest(self.group, member_id, _positions(positions)))
        assert isinstance(answer, GroupSyncAnswer)
        return answer

    def commit(self, positions: Positions) -> tuple[set[int], set[int]]:
        """Commit positions of owned partitions or VPs; (committed, lost: no longer owned).
        ``CoordinatorUnavailable`` (retriable) if the coordinator did not answer."""
        mine = {id_: position for id_, position in positions.items() if id_ in self.owned}
        if not mine:
            return set(), set()
        try:
            answer = self._link.call(lambda member_id: GroupCommitRequest(self.group, member_id, _positions(mine)))
        except UnknownMember:
            self.changed.set()
            return set(), set(mine)
        except MafkaError as error:
            if not error.retriable:
                raise
            self.changed.set()
            raise CoordinatorUnavailable(f"the coordinator of group {self.group!r} did not answer the commit "
                                         f"({error.message}); retry") from error
        assert isinstance(answer, GroupCommitAnswer)
        if answer.lost:
            self.changed.set()
        return set(answer.committed), set(answer.lost)

    def seed(self, offsets: Mapping[int, int]) -> bool:
        """Write a new group's starting offsets, if it has none of them yet (mafka4 mode)."""
        answer = self._link.call(lambda member_id: GroupSeedRequest(
            self.group, member_id, tuple(IdOffset(id_, offset) for id_, offset in sorted(offsets.items()))))
        assert isinstance(answer, GroupSeedAnswer)
        return answer.seeded

    def leave(self, positions: Positions) -> None:
        """Commit and release everything owned and end the session; then stop heartbeating.

        A coordinator that does not answer is left to expire the session (what it owned is then
        released uncommitted: delivery stays at-least-once)."""
        try:
            if self.member_id:
                mine = {id_: position for id_, position in positions.items() if id_ in self.owned}
                self._link.call(lambda member_id: GroupLeaveRequest(self.group, member_id, _positions(mine)))
        except MafkaError as error:
            logger.warning("group %s: member %s left without its coordinator's answer (%s); its session expires",
                           self.group, self.member_id, error)
        finally:
            self.owned.clear()
            self._link.close()


def _positions(positions: Positions) -> tuple[MemberPosition, ...]:
    return tuple(MemberPosition(id_, offset, high_watermark, leader_epoch)
                 for id_, (offset, high_watermark, leader_epoch) in sorted(positions.items()))


def _offsets(offsets: tuple[IdOffset, ...]) -> dict[int, int]:
    return {o.id: o.offset for o in offsets}
