"""Messages between simulated processes: one frozen dataclass per request and answer.

They mirror the Ray calls and etcd operations of the real cluster (named after them).
Errors travel as ``error`` (the ``MafkaError`` subclass name) plus ``retriable``, as a Ray
call would re-raise them. Every request carries a ``request_id`` unique in the run, so a
late or duplicated answer is recognised and ignored by a caller that no longer waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.limits import Acks
from mafka4.physical.partition_state import PartitionState
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import SourcedRecord
from mafka4.virtual.vp_state import VirtualPartitionState


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed call returns: the error's class name and whether a retry can succeed."""

    error: str
    retriable: bool
    text: str

    @classmethod
    def of(cls, error: Exception) -> "Failure":
        return cls(type(error).__name__, bool(getattr(error, "retriable", False)), str(error))


# --- physical replicas (PhysicalPartition actor) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Produce:
    request_id: int
    partition: int
    batch: bytes
    acks: Acks


@dataclass(frozen=True, slots=True)
class ProduceResult:
    request_id: int
    base_offset: int | None
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class ReplicaFetch:
    request_id: int
    partition: int
    follower_id: str
    follower_epoch: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class ReplicaFetchResult:
    request_id: int
    data: bytes
    high_watermark: int
    diverging: tuple[int, int] | None
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class Fetch:
    """A consumer-style fetch of committed batches (the feeder's, with ``from_follower``)."""

    request_id: int
    partition: int
    offset: int
    bytes_max: int
    from_follower: bool


@dataclass(frozen=True, slots=True)
class FetchResult:
    request_id: int
    data: bytes
    high_watermark: int
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class BecomeLeader:
    request_id: int
    partition: int
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BecomeFollower:
    request_id: int
    partition: int
    leader_epoch: int
    leader_id: str


@dataclass(frozen=True, slots=True)
class RoleResult:
    """The answer to a role notice; ``request_id`` names the notice it answers."""

    request_id: int
    partition: int  # the VP id when ``virtual``
    replica_id: str
    leader_epoch: int
    failure: Failure | None
    virtual: bool = False


@dataclass(frozen=True, slots=True)
class StartReplica:
    partition: int


@dataclass(frozen=True, slots=True)
class StopReplica:
    partition: int


# --- coordinator (etcd + controller) ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A node's lease refresh: it is alive (since boot ``incarnation``) and runs these replicas
    (physical partitions on a write node, VPs on a read node); a read node also says how long
    each VP log it holds is (``ReadNode.log_end_offsets``: the controller picks the longest log
    among restarted RISR members)."""

    node: str
    incarnation: int
    running: tuple[int, ...]
    log_ends: tuple[tuple[int, int], ...] = ()  # (vp, log end offset)


@dataclass(frozen=True, slots=True)
class IsrWrite:
    """The leader's compare-and-swap of its ISR (or a VP leader's RISR)."""

    request_id: int
    partition: int
    replica_id: str
    leader_epoch: int
    isr: tuple[str, ...]
    virtual: bool = False


@dataclass(frozen=True, slots=True)
class IsrWriteResult:
    request_id: int
    written: bool


@dataclass(frozen=True, slots=True)
class MetadataRequest:
    request_id: int
    # A feeder about to resume while not holding back for a reshard: the coordinator first
    # drops that partition's acknowledgement of a pending reshard and ignores any later one
    # of an older incarnation (the real feeder deletes its hold key, which fences the reshard).
    fence_partition: int | None = None
    incarnation: int = 0


@dataclass(frozen=True, slots=True)
class Metadata:
    request_id: int
    partitions: tuple[PartitionState, ...]
    layout: TopicLayout
    vps: tuple[VirtualPartitionState, ...]
    sealed_end_offsets: tuple[tuple[int, int], ...]
    # A reshard waiting for the feeders to offer a cut (its id), or None, and the VPs it closes:
    # the feeders hold back their records from the offered cut on.
    reshard_pending: int | None
    reshard_parents: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class OpenLane:
    """A producer asks where lane ``lane`` is, opening it if it is new (``client.topic_admin.open_lane``:
    the controller appends ``plan_open_lane``'s epoch with the lane's policy)."""

    request_id: int
    lane: str
    fallback: str


@dataclass(frozen=True, slots=True)
class LaneOpened:
    request_id: int
    lane: str
    lane_id: int | None  # None: refused (the layout has no room for one more VP or lane); the producer asks again


# --- virtual partitions (VirtualPartition actor) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class Feed:
    request_id: int
    vp: int
    leader_epoch: int
    partition: int
    records: tuple[SourcedRecord, ...]
    fed_through: int
    physical_high_watermark: int


@dataclass(frozen=True, slots=True)
class FeedAck:
    request_id: int
    last_applied: int
    log_end_offset: int
    high_watermark: int
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class FeedPosition:
    request_id: int
    vp: int
    leader_epoch: int
    partition: int


@dataclass(frozen=True, slots=True)
class FeedPositionResult:
    request_id: int
    last_applied: int
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class VpReplicaFetch:
    request_id: int
    vp: int
    follower_id: str
    follower_epoch: int
    fetch_offset: int
    last_fetched_epoch: int


@dataclass(frozen=True, slots=True)
class VpReplicaFetchResult:
    request_id: int
    data: bytes
    high_watermark: int
    serving: bool
    diverging: tuple[int, int] | None
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class VpBecomeLeader:
    request_id: int
    vp: int
    leader_epoch: int
    replicas: tuple[str, ...]
    risr: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class VpBecomeFollower:
    request_id: int
    vp: int
    leader_epoch: int
    leader_id: str


@dataclass(frozen=True, slots=True)
class VpFetch:
    """A consumer fetch of VP records below the serving replica's VP high watermark."""

    request_id: int
    vp: int
    offset: int
    bytes_max: int
    last_epoch: int  # of the last record read before ``offset`` (``NO_EPOCH``: none known)


@dataclass(frozen=True, slots=True)
class VpFetchResult:
    request_id: int
    data: bytes
    high_watermark: int
    log_end_offset: int
    failure: Failure | None
    diverging: tuple[int, int] | None = None  # (epoch, end offset): the reader moves back; no data


@dataclass(frozen=True, slots=True)
class VpSealQuery:
    """The coordinator asks a closed VP's leader whether it holds everything below its cuts."""

    request_id: int
    vp: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class VpSealAnswer:
    request_id: int
    vp: int
    fed_through: tuple[tuple[int, int], ...]
    log_end_offset: int
    high_watermark: int
    failure: Failure | None


@dataclass(frozen=True, slots=True)
class Pause:
    """The reshard admin asks a feeder to stop before it plans a new split epoch."""

    reshard_id: int


@dataclass(frozen=True, slots=True)
class PauseAck:
    reshard_id: int
    partition: int
    incarnation: int  # of the feeder: see MetadataRequest.fence_partition
    # Every record of the partition below this was handed to its VP (or never will be again).
    fed_through: int


# --- consumer group (etcd operations of ``partition_groups.vp_groups``) -------------------------
#
# A member's requests travel over this lossy network but etcd's client sends them in order over
# one connection: the group store applies a member's requests once and in request order (a late
# or duplicated one is dropped unanswered, which the member sees as etcd not answering).


@dataclass(frozen=True, slots=True)
class Register:
    """Grant a lease and put the member key under it (``VirtualGroupMember._register``)."""

    request_id: int
    member_id: str
    lanes: tuple[str, ...] = ("",)  # the lanes it reads ("" the trunk), kept in its member key


@dataclass(frozen=True, slots=True)
class Registered:
    request_id: int
    lease_id: int


@dataclass(frozen=True, slots=True)
class LeaseKeepAlive:
    """Refresh a member's lease (the lease thread, every third of the TTL in production)."""

    member_id: str
    lease_id: int


@dataclass(frozen=True, slots=True)
class LeaseKeepAliveResult:
    lease_id: int
    alive: bool  # False: the lease had lapsed (etcd answers TTL 0); the member registers again


@dataclass(frozen=True, slots=True)
class RevokeLease:
    """Revoke a member's lease, deleting the keys under it: its member key and owner keys."""

    request_id: int
    member_id: str
    lease_id: int


@dataclass(frozen=True, slots=True)
class GroupSnapshotRequest:
    """Read the group and the topic's layout in one transaction (``VirtualGroupStore.snapshot``)."""

    request_id: int
    member_id: str


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    request_id: int
    members: tuple[str, ...]  # member ids with a member key, sorted
    layout: TopicLayout
    sealed_end_offsets: tuple[tuple[int, int], ...]
    owners: tuple[tuple[int, str], ...]  # VP -> member id of its owner key
    # (VP, committed offset, VP high watermark the committer saw, leader epoch of the record before the offset)
    offsets: tuple[tuple[int, int, int, int], ...]
    member_lanes: tuple[tuple[str, tuple[str, ...]], ...] = ()  # member id -> the lanes its member key names


@dataclass(frozen=True, slots=True)
class Claim:
    """Create the owner keys of ``vps`` under the member's lease, only if all are absent and the
    member key exists, reading their committed offsets in the same transaction."""

    request_id: int
    member_id: str
    lease_id: int
    vps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ClaimResult:
    request_id: int
    # (VP, committed offset or None, its leader epoch) per claimed VP; None: the transaction failed
    # (an owner key existed or the member key was gone), nothing was claimed.
    committed: tuple[tuple[int, int | None, int], ...] | None


@dataclass(frozen=True, slots=True)
class CommitOffsets:
    """Write offsets of VPs whose owner key is the member's, then delete the owner keys of
    ``release`` that are the member's, in one transaction (``VirtualGroupStore.commit``)."""

    request_id: int
    member_id: str
    offsets: tuple[tuple[int, int, int, int], ...]  # (VP, offset, VP high watermark seen, leader epoch)
    release: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CommitResult:
    request_id: int
    committed: tuple[int, ...]
    lost: tuple[int, ...]  # offsets not written: the owner key was not the member's


@dataclass(frozen=True, slots=True)
class SplitRequest:
    """A member asks for ``vp`` to be split (``Resharder.split``, which the plan named)."""

    request_id: int
    vp: int


@dataclass(frozen=True, slots=True)
class SplitResult:
    request_id: int
    done: bool  # False: refused (another reshard runs, the VP is not splittable) or abandoned
