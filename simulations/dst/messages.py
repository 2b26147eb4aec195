"""Messages between simulated processes: one frozen dataclass per request and answer.

They mirror the Ray calls and etcd operations of the real cluster (named after them).
Errors travel as ``error`` (the ``MafkaError`` subclass name) plus ``retriable``, as a Ray
call would re-raise them. Every request carries a ``request_id`` unique in the run, so a
late or duplicated answer is recognised and ignored by a caller that no longer waits.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.coordinator.topics import PartitionState
from mafka4.virtual.metadata import VirtualPartitionState
from mafka4.virtual.reshard import TopicLayout
from mafka4.virtual.split import SourcedRecord


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
    acks: str


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
    (physical partitions on a write node, VPs on a read node, VPs owned by a group member)."""

    node: str
    incarnation: int
    running: tuple[int, ...]
    sent_ms: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatAck:
    """The coordinator renewed the lease of a heartbeat sent at ``sent_ms`` (group members)."""

    incarnation: int
    sent_ms: int


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


@dataclass(frozen=True, slots=True)
class VpFetchResult:
    request_id: int
    data: bytes
    high_watermark: int
    log_end_offset: int
    failure: Failure | None


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


# --- consumer group ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assign:
    """The group coordinator hands ``vp`` to one incarnation of a member (``assignment`` names
    this hand-over); another incarnation of the member ignores it."""

    assignment: int
    vp: int
    offset: int
    incarnation: int


@dataclass(frozen=True, slots=True)
class Revoke:
    assignment: int
    vp: int


@dataclass(frozen=True, slots=True)
class Released:
    """A member stopped reading ``vp``; ``offset`` is its position to commit (-1: none)."""

    member: str
    assignment: int
    vp: int
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    request_id: int
    member: str
    assignment: int
    vp: int
    offset: int


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    request_id: int
    accepted: bool
