"""The consumer groups' APIs on a port (``protocol.group_api``): the coordinator's side.

- ``FIND_COORDINATOR`` is answered by any node from its view: the coordinator of a group is the
  node the group's name hashes to highest among the candidates (rendezvous hashing,
  ``coordinator_of``): the live read nodes, or, in a cluster without read nodes, the live
  replicas. So every member of a group meets on one node, and a node's death moves only its
  own groups (their members find the new coordinator and join again).
- The other APIs run on the member's session (``frontend.group_sessions``). A mafka4-mode sync
  that claimed VPs answers with their states and the layout (``hosted_members``) and, from this
  node's view, where the read nodes serve clients: the member fetches a newly claimed child
  without a ``VP_METADATA`` round trip first.

ACLs: joining needs ``consume`` on the topic and on the group; every later request of the
session ``consume`` on the group (a session answers only the principal that opened it).
"""

from __future__ import annotations

import dataclasses
from typing import Awaitable, Callable, Sequence

from mafka4.errors import CoordinatorUnavailable, InvalidConfig, NotAuthorized
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.group_sessions import GroupSessions
from mafka4.hashing import key_hash
from mafka4.limits import PROTOCOL_FETCH_WAIT_MS_MAX, ConsumerConfig
from mafka4.names import validate_reader_lanes
from mafka4.protocol.group_api import (FindCoordinatorAnswer, FindCoordinatorRequest, GroupCommitRequest,
                                       GroupHeartbeatAnswer, GroupHeartbeatRequest, GroupJoinRequest,
                                       GroupLeaveAnswer, GroupLeaveRequest, GroupSeedAnswer, GroupSeedRequest,
                                       GroupSyncRequest)
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import NodeInfo
from mafka4.protocol.session import Session
from mafka4.protocol.vp_api import VpMetadataAnswer
from mafka4.security.acl import Operation, ResourceType

Check = Callable[[Session, Operation, ResourceType, str], None]


def coordinator_of(group: str, candidates: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """The (node id, address) of ``candidates`` that coordinates ``group``: the highest hash of the
    group's name with the node's id, so that a node joining or leaving moves only its share."""
    if not candidates:
        return None
    return max(candidates, key=lambda node: (key_hash(f"{group}\0{node[0]}".encode()), node[0]))


class GroupHandlers:
    """``sessions`` hosts the members; ``view`` (awaited: a replica starts its view on first use) names the candidates."""

    def __init__(self, sessions: GroupSessions, view: Callable[[], Awaitable[ClusterView]], check: Check):
        self._sessions, self._view, self._check = sessions, view, check

    def handlers(self) -> dict:
        return {ApiKey.FIND_COORDINATOR: self._find_coordinator, ApiKey.GROUP_JOIN: self._join,
                ApiKey.GROUP_SYNC: self._sync, ApiKey.GROUP_COMMIT: self._commit, ApiKey.GROUP_LEAVE: self._leave,
                ApiKey.GROUP_HEARTBEAT: self._heartbeat, ApiKey.GROUP_SEED: self._seed}

    async def _find_coordinator(self, session: Session, request: FindCoordinatorRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        view = await self._view()
        found = coordinator_of(request.group, view.read(lambda state: state.coordinator_candidates()))
        if found is None:
            raise CoordinatorUnavailable(f"no live node serves clients to coordinate group {request.group!r} yet; "
                                         f"retry once the cluster's nodes are up ('mafka4 status')")
        return FindCoordinatorAnswer(*found), ()

    async def _join(self, session: Session, request: GroupJoinRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.TOPIC, request.topic)
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        config = ConsumerConfig(member_lease_ttl_s=round(request.session_timeout_ms / 1000),  # out of range: InvalidConfig
                                rebalance_timeout_ms=request.rebalance_timeout_ms)
        answer = await self._sessions.join(session.principal, request.group, request.topic, request.assignor, config,
                                           validate_reader_lanes(request.lanes))
        return answer, ()

    async def _sync(self, session: Session, request: GroupSyncRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        answer = await self._sessions.call(session.principal, request.group, request.member_id,
                                           lambda member: member.sync(request.positions), arrived="sync_arrived")
        if answer.vp_metadata is not None:
            answer = dataclasses.replace(answer, vp_metadata=await self._with_nodes(session, answer.vp_metadata))
        return answer, ()

    async def _with_nodes(self, session: Session, metadata: VpMetadataAnswer) -> VpMetadataAnswer | None:
        """A claiming sync's VP metadata with where the read nodes serve clients, from this node's view;
        None for a member denied what ``VP_METADATA`` answers (consuming implies it, unless denied):
        it asks that, and is refused."""
        try:
            self._check(session, Operation.DESCRIBE, ResourceType.TOPIC, metadata.topic)
        except NotAuthorized:
            return None
        view = await self._view()
        nodes = view.read(lambda state: state.read_node_endpoints())
        return dataclasses.replace(metadata, nodes=tuple(NodeInfo(node.node_id, "read", node.client_address)
                                                         for node in nodes))

    async def _commit(self, session: Session, request: GroupCommitRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        answer = await self._sessions.call(session.principal, request.group, request.member_id,
                                           lambda member: member.commit(request.positions))
        return answer, ()

    async def _leave(self, session: Session, request: GroupLeaveRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        await self._sessions.leave(session.principal, request.group, request.member_id,
                                   lambda member: member.leave(request.positions))
        return GroupLeaveAnswer(request.member_id), ()

    async def _heartbeat(self, session: Session, request: GroupHeartbeatRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        if not 0 <= request.wait_ms <= PROTOCOL_FETCH_WAIT_MS_MAX:
            raise InvalidConfig(f"a heartbeat of wait_ms={request.wait_ms}: wait 0 to {PROTOCOL_FETCH_WAIT_MS_MAX} ms")
        changed = await self._sessions.heartbeat(session.principal, request.group, request.member_id,
                                                 request.wait_ms / 1000)
        return GroupHeartbeatAnswer(changed), ()

    async def _seed(self, session: Session, request: GroupSeedRequest, _buffers):
        self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group)
        seeded = await self._sessions.call(session.principal, request.group, request.member_id,
                                           lambda member: member.seed(request.offsets))
        return GroupSeedAnswer(seeded), ()
