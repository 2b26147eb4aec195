"""Kafka's consumer protocol inside JoinGroup and SyncGroup: a member's subscription in, its assignment out (pure).

A Kafka consumer joins a group with protocol type ``consumer`` and one (name, metadata) pair per
partition assignor it offers, in its order of preference; each metadata is a
``ConsumerProtocolSubscription`` (the topics it subscribes to), and what SyncGroup hands back is
a ``ConsumerProtocolAssignment`` (the partitions it owns). Both are an int16 version and a
struct of Kafka's own schema, which ``kio`` generates; nothing is laid out by hand here.

- ``subscribed_topics``: the topics of a subscription of any version. A version newer than the
  schemas known is read as the newest known one (its fields are a prefix of the newer ones, as
  Kafka's rule for this embedded protocol has it); array counts are checked against the bytes
  before kio reads them (``kafka.array_bounds``).
- ``chosen_protocol``: the assignor name the answers carry. The client's assignor does not run
  (mafka4's ownership rules assign), but a client accepts only a name it offered, and the name
  picks its rebalance protocol: an eager one (every member revokes everything before it rejoins)
  is preferred, since a VP then changes owner only once its reader stopped (see
  ``kafka.group_handlers``); ``cooperative-sticky`` only when the client offers nothing else.
- ``assignment_bytes``: the assignment of one topic's partitions (VP numbers in Mafka4 mode),
  version 0 (every consumer reads it; later versions add nothing).
"""

from __future__ import annotations

import io
import struct
from typing import Iterable, Sequence

from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as AssignedTopic
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription as SubscriptionV0
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription as SubscriptionV1
from kio.schema.consumer_protocol_subscription.v2.data import ConsumerProtocolSubscription as SubscriptionV2
from kio.schema.consumer_protocol_subscription.v3.data import ConsumerProtocolSubscription as SubscriptionV3
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from mafka4.errors import KafkaWireError
from mafka4.kafka.array_bounds import check_arrays

CONSUMER_PROTOCOL_TYPE = "consumer"
COOPERATIVE = "cooperative-sticky"
_SUBSCRIPTIONS = (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)
_VERSION = struct.Struct(">h")
_READERS = {cls: entity_reader(cls) for cls in _SUBSCRIPTIONS}
_WRITE_ASSIGNMENT = entity_writer(ConsumerProtocolAssignment)


def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """The topics of a ``ConsumerProtocolSubscription``; ``KafkaWireError`` (INVALID_REQUEST) if it does not parse."""
    view = memoryview(metadata).toreadonly()
    if len(view) < _VERSION.size:
        raise KafkaWireError(f"a consumer protocol subscription of {len(view)} bytes has no version")
    (version,) = _VERSION.unpack_from(view)
    if version < 0:
        raise KafkaWireError(f"a consumer protocol subscription of version {version}")
    cls = _SUBSCRIPTIONS[min(version, len(_SUBSCRIPTIONS) - 1)]
    try:
        check_arrays(cls, view, _VERSION.size)
        subscription, _ = _READERS[cls](view, _VERSION.size)
    except (ValueError, TypeError, OverflowError, KeyError, SerialError) as error:
        raise KafkaWireError(f"a consumer protocol subscription v{version} does not parse: "
                             f"{type(error).__name__}: {error}") from None
    return tuple(subscription.topics)


def chosen_protocol(offered: Sequence[str]) -> str | None:
    """The assignor name to answer with, of those the client ``offered`` (see the module docstring); None if none."""
    eager = [name for name in offered if name != COOPERATIVE]
    if eager:
        return eager[0]
    return offered[0] if offered else None


def assignment_bytes(topic: str, partitions: Iterable[int]) -> bytes:
    """A ``ConsumerProtocolAssignment`` v0 of ``topic``'s ``partitions`` (none: an empty assignment)."""
    owned = tuple(sorted(partitions))
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=(AssignedTopic(topic=topic, partitions=owned),) if owned else (), user_data=None)
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(0))
    _WRITE_ASSIGNMENT(buffer, assignment)
    return buffer.getvalue()
