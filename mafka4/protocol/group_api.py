"""The consumer groups' APIs: a group's members are sessions on its coordinator, a node of the cluster.

A member of a consumer group (either read mode) no longer runs the group protocol against etcd
itself: the coordinator of its group does it for it (``frontend.group_sessions``), as a Kafka
broker coordinates the groups that hash to it. The member asks, in its own thread, for what it
did before against etcd:

- ``FIND_COORDINATOR``: which node coordinates ``group`` (any node answers, from its view).
- ``GROUP_JOIN``: open a session, named by the member id the answer gives. A mafka4-mode member
  also learns whether the group has committed offsets and the sealed ends of closed VPs, to
  seed a new group at the latest offsets (``GROUP_SEED``).
- ``GROUP_SYNC``: one round of the group protocol (Mafka3's eager rebalance, or mafka4's VP
  ownership), given the member's positions (committed with what it releases); the answer says
  what it lost, what it claimed (from which committed offset), what it owns now, and (mafka4
  mode) the sealed ends and committed offsets it needs to commit a drained parent at once. A
  mafka4-mode answer that claims VPs also carries the topic's VP metadata as the coordinator's
  node sees it (the ``VP_METADATA`` answer, ``protocol.vp_api``): the member positions and
  fetches a child born after its last metadata read without asking any node for it first.
- ``GROUP_COMMIT``: commit positions of owned partitions or VPs; what was written, what was lost.
  A VP position carries the leader epoch of the record before it (Kafka's
  ``committed_leader_epoch``), and a claimed VP's committed offset comes back with it, so the
  member that starts there names it in its first fetch (``protocol.vp_api``: a log that diverged
  after a power loss is then told). -1 (``NO_EPOCH``): none known (a partition, a commit written
  before epochs were, a reset or seeded offset); only the length is checked then.
- ``GROUP_LEAVE``: commit, release everything, end the session.
- ``GROUP_HEARTBEAT``: a long poll that keeps the session alive and is answered as soon as the
  group changed in a way that asks this member to sync (or after ``wait_ms``).

A member's id in a session's answers and requests is the coordinator's; ``UnknownMember`` answers
a session that ended (expired without heartbeats, or its coordinator restarted): the member joins
again. Partitions (Mafka3) and VPs (mafka4) are both numbers here (``id``): a member reads one topic.

Pure: message types.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.protocol.messages import ApiKey, register
from mafka4.protocol.vp_api import VpMetadataAnswer


@dataclass(frozen=True, slots=True)
class FindCoordinatorRequest:
    group: str


@dataclass(frozen=True, slots=True)
class FindCoordinatorAnswer:
    node_id: str
    address: str  # host:port of its client port


@dataclass(frozen=True, slots=True)
class IdOffset:
    """An offset of a partition or a VP (``id``)."""

    id: int
    offset: int


@dataclass(frozen=True, slots=True)
class MemberPosition:
    """A member's position in a partition or a VP, with the high watermark it saw there (for lag)."""

    id: int
    offset: int
    high_watermark: int
    leader_epoch: int  # of the VP record before ``offset``; -1: none known (always, for a partition)


@dataclass(frozen=True, slots=True)
class Claimed:
    """A partition or VP the member now owns, and the committed offset to start from (None: none)."""

    id: int
    committed: int | None
    committed_leader_epoch: int  # the leader epoch committed with it; -1: none known


@dataclass(frozen=True, slots=True)
class GroupJoinRequest:
    """Join ``group`` to read ``topic``; ``assignor`` names the protocol ("virtual": mafka4's VP ownership)."""

    group: str
    topic: str
    assignor: str
    session_timeout_ms: int  # no heartbeat or request for this long ends the session
    rebalance_timeout_ms: int  # no sync for this long after a change that asks one ends it too
    lanes: tuple[str, ...] = ()  # the lanes the member reads ("" the trunk; none: the trunk alone)


@dataclass(frozen=True, slots=True)
class GroupJoinAnswer:
    member_id: str
    offsets_committed: bool  # the group had committed offsets of the topic before this join (mafka4 mode)
    sealed_end_offsets: tuple[IdOffset, ...]  # of the topic's closed VPs (mafka4 mode)


@dataclass(frozen=True, slots=True)
class GroupSyncRequest:
    group: str
    member_id: str
    positions: tuple[MemberPosition, ...]


@dataclass(frozen=True, slots=True)
class GroupSyncAnswer:
    revoked: tuple[int, ...]  # stop reading these (committed from ``positions`` if still owned)
    claimed: tuple[Claimed, ...]  # start these
    owned: tuple[int, ...]  # everything owned now
    waiting: str | None  # why the assignment is not settled yet (Mafka3 mode), or None
    sealed_end_offsets: tuple[IdOffset, ...]  # mafka4 mode: of closed VPs
    committed_offsets: tuple[IdOffset, ...]  # mafka4 mode: the group's committed offsets
    # mafka4 mode, when ``claimed`` is not empty: the topic's VP metadata (None: not known here,
    # the member asks VP_METADATA as before). Since protocol version 3.
    vp_metadata: VpMetadataAnswer | None


@dataclass(frozen=True, slots=True)
class GroupCommitRequest:
    group: str
    member_id: str
    positions: tuple[MemberPosition, ...]


@dataclass(frozen=True, slots=True)
class GroupCommitAnswer:
    committed: tuple[int, ...]
    lost: tuple[int, ...]  # no longer owned: not committed


@dataclass(frozen=True, slots=True)
class GroupLeaveRequest:
    group: str
    member_id: str
    positions: tuple[MemberPosition, ...]  # committed as everything owned is released


@dataclass(frozen=True, slots=True)
class GroupLeaveAnswer:
    member_id: str


@dataclass(frozen=True, slots=True)
class GroupHeartbeatRequest:
    group: str
    member_id: str
    wait_ms: int  # answer at the latest after this long


@dataclass(frozen=True, slots=True)
class GroupHeartbeatAnswer:
    changed: bool  # the member should sync


@dataclass(frozen=True, slots=True)
class GroupSeedRequest:
    """A new group's starting offsets, written only if the group has none of them yet (mafka4 mode)."""

    group: str
    member_id: str
    offsets: tuple[IdOffset, ...]


@dataclass(frozen=True, slots=True)
class GroupSeedAnswer:
    seeded: bool


register(ApiKey.FIND_COORDINATOR, FindCoordinatorRequest, FindCoordinatorAnswer)
register(ApiKey.GROUP_JOIN, GroupJoinRequest, GroupJoinAnswer)
register(ApiKey.GROUP_SYNC, GroupSyncRequest, GroupSyncAnswer)
register(ApiKey.GROUP_COMMIT, GroupCommitRequest, GroupCommitAnswer)
register(ApiKey.GROUP_LEAVE, GroupLeaveRequest, GroupLeaveAnswer)
register(ApiKey.GROUP_HEARTBEAT, GroupHeartbeatRequest, GroupHeartbeatAnswer)
register(ApiKey.GROUP_SEED, GroupSeedRequest, GroupSeedAnswer)
