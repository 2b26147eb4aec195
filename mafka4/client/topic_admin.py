"""Topics created, deleted, described and scaled, and lanes opened, through any node's client port (``protocol.topic_admin_api``).

``where`` names the cluster as ``client.cluster_access`` reads it (None: the environment's or
the local cluster's).

For a change, the node writes an intent on the caller's behalf and answers once the controller
carried it out (or refused it), so a call takes as long as the controller does: the call itself
has no deadline, the node's wait bounds it (``TOPIC_INTENT_WAIT_S``, ``RESHARD_INTENT_WAIT_S``;
past it the node answers ``RequestTimedOut`` saying whether the change may still happen). The
caller needs CREATE on the topic or the cluster to create, DELETE to delete, ALTER to scale and
DESCRIBE to describe (the admin user has all).
A create request is resolved here first (``new_topic_config``), so a bad name or value is
reported as such before any connection is made. Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from mafka4.client.node_connection import call_once
from mafka4.delays import CANCEL_OF_HEADER, MessageId, delay_topic_name, encode_cancel_of
from mafka4.errors import InvalidMessageId
from mafka4.limits import READ_MODE_DEFAULT, ReadMode
from mafka4.names import validate_lane_name, validate_topic_name
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.metadata_topics import topic_of
from mafka4.protocol.topic_admin_api import (EpochInfo, LaneOpenAnswer, LaneOpenRequest, TopicCreateRequest, TopicDeleteRequest, TopicDescribeRequest,
                                             TopicScaleRequest, config_json, description_of, new_topic_config)


def create_topic(name: str, partitions: int = 1, replication_factor: int = 1, virtual_partitions: int | None = None,
                 read_replicas: int = 1, read_mode: ReadMode | str = READ_MODE_DEFAULT, where: object = None,
                 **overrides) -> TopicMetadata:
    """Create a topic, as ``Admin.create_topic`` does (``overrides``: other ``TopicConfig`` fields);
    the topic as the controller created it. ``TopicExists`` if the name is taken."""
    config = new_topic_config(name, partitions, replication_factor, virtual_partitions, read_replicas, read_mode,
                              **overrides)
    return topic_of(call_once(TopicCreateRequest(name, config_json(config)), where))


def delete_topic(name: str, where: object = None) -> None:
    """Delete a topic with its data on every node; ``UnknownTopic`` if there is none."""
    call_once(TopicDeleteRequest(name), where)


def describe_topic(name: str, where: object = None) -> dict:
    """Topic ``name``'s config and, per partition and per VP, etcd's state beside what the live
    leader reports (``frontend.topic_description``'s report, as ``Admin.describe_topic`` gives it).
    ``UnknownTopic`` if there is none."""
    return description_of(call_once(TopicDescribeRequest(validate_topic_name(name)), where))


def scale(name: str, virtual_partitions: int, where: object = None) -> list[EpochInfo]:
    """Split or merge until mafka4-mode topic ``name`` has ``virtual_partitions`` active VPs; the
    epochs opened, oldest first."""
    return list(call_once(TopicScaleRequest(name, virtual_partitions), where).epochs)


def open_companion(name: str, lane: str, where: object = None) -> LaneOpenAnswer:
    """A companion topic of topic ``name``, created on its first use with ``name``'s config: the delay
    topic (``DELAY_LANE``; needs the ``produce`` ACL on the topic), or a group's retry or dead-letter
    topic (``retries.retry_lane``, ``dead_letter_lane``; needs ``consume`` on the topic and the group).
    A lane open of the reserved lane (``frontend.topic_intents.open_companion_topic``)."""
    return call_once(LaneOpenRequest(validate_topic_name(name), lane, "", -1), where)


def open_lane(name: str, lane: str, fallback: str = "", priority: int = -1, where: object = None) -> LaneOpenAnswer:
    """Where lane ``lane`` of topic ``name`` is, opened (with ``fallback`` and ``priority``, defaults
    for "" and -1) if it is not yet: its lane id in the topic, or in mafka3 mode the topic holding
    it (``frontend.topic_intents.open_lane``). Needs the ``produce`` ACL on the topic."""
    return call_once(LaneOpenRequest(validate_topic_name(name), validate_lane_name(lane), fallback, priority), where)


def cancel_delayed(name: str, message_id: "MessageId | str", where: object = None) -> None:
    """Cancel delayed message ``message_id`` (``"P:OFFSET"``, its acknowledgement's) of topic ``name``:
    append a cancel marker to the partition of its delay topic that holds it (``mafka4.delays``).

    The delay scheduler drops the message if it reads the marker before the message is due; a
    cancel read later is counted as late (``topic describe``) and the message is delivered.
    ``InvalidMessageId`` for a bad id or one past the delay topic's partitions; ``UnknownTopic``
    if the topic never had a delayed message. Needs the ``produce`` ACL on the topic."""
    from mafka4.client.producer import Producer  # here: the producer imports this module

    target = message_id if isinstance(message_id, MessageId) else MessageId.parse(message_id)
    delays = delay_topic_name(validate_topic_name(name))
    with Producer(delays, where, acks="all", linger_ms=0) as producer:
        partitions = producer.partition_count
        if target.partition >= partitions:
            raise InvalidMessageId(f"message id {target} names partition {target.partition}, but the delay topic of "
                                   f"{name!r} has {partitions}: use the id its producer's acknowledgement gave")
        producer._send_system(b"", None, target.partition, [(CANCEL_OF_HEADER, encode_cancel_of(target))],
                              None, None, None).result(producer.config.delivery_timeout_ms / 1000 + 5)
