"""The admin APIs of consumer groups: GROUP_LIST, GROUP_DESCRIBE and GROUP_RESET_OFFSETS, and what they answer.

Read nodes answer them (``frontend.group_admin_handlers``), reading the groups from etcd and the
offsets from the partitions' and VPs' leaders, so ``mafka4 group`` is a client of the port like
the other commands. ACLs, as Kafka's: a listing shows only the groups the principal may
DESCRIBE; a description needs DESCRIBE on the group and holds the offsets of the topics the
principal may DESCRIBE only (``visible_to``); a reset ALTER on the group and DESCRIBE on the topic.

What a description holds (``GroupDescription``) is defined here once, for the node that makes it
and the client that shows it. It travels as its wire twin (``GroupDescribeAnswer``), since the
codec carries no enums and no int-keyed maps: a VP's status as its ``VpStatus`` value, the read
loss per topic as a tuple of partitions. ``describe_answer`` and ``description_of`` convert both
ways. A reset's target ("earliest", "latest" or a timestamp in ms) travels as ``target`` and
``timestamp_ms``; ``reset_request`` makes the request from the Python target, refusing a bad
one before any connection, and ``reset_target`` reads it back on the node, which trusts nothing
the client checked. Pure: message types and their conversions.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Callable

from mafka4.coordinator.groups.partition_protocol import MemberInfo, validate_group_name
from mafka4.errors import InvalidConfig, ProtocolError
from mafka4.names import validate_topic_name
from mafka4.protocol.messages import ApiKey, register

# A reset's ``target`` on the wire; "timestamp" comes with its ``timestamp_ms``.
EARLIEST, LATEST, TIMESTAMP = "earliest", "latest", "timestamp"


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """A Mafka3-mode group's place in one physical partition. Travels as it is."""

    topic: str
    partition: int
    member_id: str | None  # the owner now, None while unowned (e.g. during a rebalance)
    committed_offset: int | None
    high_watermark: int
    lag: int | None
    # The age of the oldest message not committed (``metrics.group_lag``): None if unknown or nothing committed.
    lag_ms: int | None = None


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
    lag_ms: int | None = None  # as ``PartitionLag.lag_ms``


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


@dataclass(frozen=True, slots=True)
class GroupListRequest:
    """Every group the principal may describe."""


@dataclass(frozen=True, slots=True)
class GroupListAnswer:
    """The groups' names, sorted."""

    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupDescribeRequest:
    group: str


@dataclass(frozen=True, slots=True)
class VirtualPartitionLagInfo:
    """A ``VirtualPartitionLag`` with its status as the ``VpStatus`` value."""

    topic: str
    vp: int
    status: str
    member_id: str | None
    committed_offset: int | None
    high_watermark: int | None
    lag: int | None
    lag_ms: int | None


@dataclass(frozen=True, slots=True)
class OffsetRange:
    first_offset: int
    end_offset: int  # exclusive


@dataclass(frozen=True, slots=True)
class PartitionLoss:
    """The ``[first, end)`` ranges of one physical partition that retention deleted before every read node fed them."""

    partition: int
    ranges: tuple[OffsetRange, ...]


@dataclass(frozen=True, slots=True)
class GroupDescribeAnswer:
    """A ``GroupDescription``; ``read_loss``: per topic, its partitions with losses."""

    group: str
    generation: int | None
    assignor: str | None
    members: tuple[MemberInfo, ...]
    partitions: tuple[PartitionLag, ...]
    virtual_partitions: tuple[VirtualPartitionLagInfo, ...]
    read_loss: dict[str, tuple[PartitionLoss, ...]]


@dataclass(frozen=True, slots=True)
class GroupResetOffsetsRequest:
    """Set ``group``'s committed offsets of every partition (per VP in mafka4 mode) of ``topic`` to
    ``target``: "earliest", "latest", or "timestamp" with ``timestamp_ms`` (None for the others)."""

    group: str
    topic: str
    target: str
    timestamp_ms: int | None


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """A partition's (or VP's: ``id``) committed offset before the reset (None: none) and after."""

    id: int
    before: int | None
    after: int


@dataclass(frozen=True, slots=True)
class GroupResetOffsetsAnswer:
    offsets: tuple[OffsetReset, ...]  # in partition (VP) order


def visible_to(description: GroupDescription, may_describe: Callable[[str], bool]) -> GroupDescription:
    """``description`` without the offsets of the topics ``may_describe`` refuses, as Kafka's
    OffsetFetch leaves out the partitions a principal may not describe: their lag would tell of
    their traffic. The members stay (a member's topic is the group's business)."""
    topics = {row.topic for row in description.partitions} | {row.topic for row in description.virtual_partitions}
    hidden = {topic for topic in topics | description.read_loss.keys() if not may_describe(topic)}
    if not hidden:
        return description
    return dataclasses.replace(
        description, partitions=tuple(row for row in description.partitions if row.topic not in hidden),
        virtual_partitions=tuple(row for row in description.virtual_partitions if row.topic not in hidden),
        read_loss={topic: loss for topic, loss in description.read_loss.items() if topic not in hidden})


def describe_answer(description: GroupDescription) -> GroupDescribeAnswer:
    """``description`` as it travels."""
    virtual = tuple(VirtualPartitionLagInfo(row.topic, row.vp, row.status.value, row.member_id, row.committed_offset,
                                            row.high_watermark, row.lag, row.lag_ms)
                    for row in description.virtual_partitions)
    losses = {topic: tuple(PartitionLoss(partition, tuple(OffsetRange(first, end) for first, end in ranges))
                           for partition, ranges in by_partition.items())
              for topic, by_partition in description.read_loss.items()}
    return GroupDescribeAnswer(description.group, description.generation, description.assignor,
                               tuple(description.members), tuple(description.partitions), virtual, losses)


def description_of(answer: GroupDescribeAnswer) -> GroupDescription:
    """The ``GroupDescription`` ``answer`` carries; ``ProtocolError`` for a status this mafka4 does not know."""
    virtual = tuple(VirtualPartitionLag(row.topic, row.vp, _status(row.status), row.member_id, row.committed_offset,
                                        row.high_watermark, row.lag, row.lag_ms) for row in answer.virtual_partitions)
    losses = {topic: {loss.partition: [[r.first_offset, r.end_offset] for r in loss.ranges] for loss in by_partition}
              for topic, by_partition in answer.read_loss.items()}
    return GroupDescription(answer.group, answer.generation, answer.assignor, answer.members, answer.partitions,
                            virtual, losses)


def _status(value: str) -> VpStatus:
    try:
        return VpStatus(value)
    except ValueError:
        raise ProtocolError(f"VirtualPartitionLagInfo.status: {value!r:.40} is none of "
                            f"{[status.value for status in VpStatus]}") from None


def reset_answer(offsets: dict[int, tuple[int | None, int]]) -> GroupResetOffsetsAnswer:
    """A reset's result (per partition or VP: committed offset before, after) as it travels."""
    return GroupResetOffsetsAnswer(tuple(OffsetReset(number, before, after)
                                         for number, (before, after) in sorted(offsets.items())))


def resets_of(answer: GroupResetOffsetsAnswer) -> dict[int, tuple[int | None, int]]:
    """The reset's result ``answer`` carries, as ``reset_answer`` took it."""
    return {reset.id: (reset.before, reset.after) for reset in answer.offsets}


def reset_request(group: str, topic: str, to: str | int) -> GroupResetOffsetsRequest:
    """The request to reset ``group``'s offsets of ``topic`` to ``to`` ("earliest", "latest" or a
    timestamp in ms); ``InvalidGroupName``/``InvalidTopicName``/``InvalidConfig`` for a bad one."""
    validate_group_name(group)
    validate_topic_name(topic)
    if to in (EARLIEST, LATEST):
        return GroupResetOffsetsRequest(group, topic, to, None)
    if isinstance(to, int) and not isinstance(to, bool):
        return GroupResetOffsetsRequest(group, topic, TIMESTAMP, to)
    raise InvalidConfig(f"reset target {to!r} is not valid: use 'earliest', 'latest' or a timestamp in ms")


def reset_target(request: GroupResetOffsetsRequest) -> str | int:
    """What ``request`` resets to, as ``reset_request`` took it: "earliest", "latest" or a timestamp
    in ms. Checks the names again; ``InvalidConfig`` for a target and timestamp that do not go together."""
    validate_group_name(request.group)
    validate_topic_name(request.topic)
    if request.target in (EARLIEST, LATEST) and request.timestamp_ms is None:
        return request.target
    if request.target == TIMESTAMP and request.timestamp_ms is not None:
        return request.timestamp_ms
    raise InvalidConfig(f"reset target {request.target!r} with timestamp_ms={request.timestamp_ms!r} is not valid: "
                        f"send {EARLIEST!r} or {LATEST!r} without a timestamp, or {TIMESTAMP!r} with one")


register(ApiKey.GROUP_LIST, GroupListRequest, GroupListAnswer)
register(ApiKey.GROUP_DESCRIBE, GroupDescribeRequest, GroupDescribeAnswer)
register(ApiKey.GROUP_RESET_OFFSETS, GroupResetOffsetsRequest, GroupResetOffsetsAnswer)
