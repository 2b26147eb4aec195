"""A topic change asked of the controller: checked against etcd, written as an intent, awaited.

What a node does for a client's TOPIC_CREATE, TOPIC_DELETE, TOPIC_SCALE and LANE_OPEN
(``frontend.topic_handlers``), and what ``client.admin.Admin`` does from a Ray driver until it
moves onto the client port: one implementation for both. The topic is read from etcd (not from
a watched view, which may not have seen a change just made), so a create of a topic that exists
is ``TopicExists`` and a delete or scale of one that does not is ``UnknownTopic``, each before an
intent is written (but for a delete of a name with keys below it: ``delete_topic``). Then the
controller's result is awaited for at most ``wait_s`` (``metadata.intents.request``), and its
error raised as its own class. Every call blocks on etcd.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.delays import DELAY_LANE, DELAY_TOPIC_SUFFIX, delay_topic_config, delay_topic_name, delayed_topic_of
from mafka4.errors import InvalidConfig, TopicExists, UnknownTopic
from mafka4.limits import RESHARD_INTENT_WAIT_S, TOPIC_INTENT_WAIT_S, TOPIC_NAME_CHARS_MAX, ReadMode, TopicConfig
from mafka4.metadata import intents
from mafka4.metadata.intents import IntentKind
from mafka4.metadata.store import MetadataStore
from mafka4.names import lane_topic_name, validate_lane_name, validate_topic_name
from mafka4.retries import companion_config, companion_of_lane
from mafka4.physical.partition_state import TopicMetadata, config_to_json
from mafka4.physical.topic_leftovers import absent_topic
from mafka4.physical.topics import TopicStore
from mafka4.virtual.layout import DEFAULT_POLICY, LanePolicy, SplitEpoch
from mafka4.virtual.vp_state import epoch_from_json
from mafka4.virtual.vp_store import VirtualStore


def create_topic(store: MetadataStore, cluster: str, name: str, config: TopicConfig,
                 wait_s: float = TOPIC_INTENT_WAIT_S) -> TopicMetadata:
    """Create topic ``name`` with ``config`` (resolved: ``new_topic_config``); the topic as created."""
    topic_absent(store, cluster, name)
    intents.request(store, cluster, IntentKind.CREATE_TOPIC, name, {"config": config_to_json(config)}, wait_s)
    return TopicStore(store, cluster).get(name)


def topic_absent(store: MetadataStore, cluster: str, name: str) -> None:
    """``TopicExists`` if topic ``name`` exists: what a create checks before its intent (and all a
    create that only validates does with etcd)."""
    if TopicStore(store, cluster).exists(name):
        raise TopicExists(f"topic {name!r} already exists: delete it first or choose another name")


def delete_topic(store: MetadataStore, cluster: str, name: str, wait_s: float = TOPIC_INTENT_WAIT_S) -> None:
    """Delete topic ``name`` with its data on every node.

    A name with no config key but keys below it goes to the controller too: they are what a
    dead creation left, which the controller deletes (then answers ``UnknownTopic`` saying so),
    or a creation under way, which it finishes before it deletes the topic
    (``physical.topic_leftovers``)."""
    topics = TopicStore(store, cluster)
    if not topics.exists(validate_topic_name(name)) and topics.keys_below(name) == 0:
        raise absent_topic(name)
    intents.request(store, cluster, IntentKind.DELETE_TOPIC, name, {}, wait_s)
    if delayed_topic_of(name) is None and len(name + DELAY_TOPIC_SUFFIX) <= TOPIC_NAME_CHARS_MAX:
        _delete_delay_topic(topics, store, cluster, delay_topic_name(name), wait_s)


def _delete_delay_topic(topics: TopicStore, store: MetadataStore, cluster: str, name: str, wait_s: float) -> None:
    """A deleted topic's delayed messages go with it: its delay topic ``name``, if it has one."""
    if not topics.exists(name):
        return
    try:
        intents.request(store, cluster, IntentKind.DELETE_TOPIC, name, {}, wait_s)
    except UnknownTopic:
        pass  # deleted meanwhile by another delete


def scale_topic(store: MetadataStore, cluster: str, name: str, virtual_partitions: int,
                wait_s: float = RESHARD_INTENT_WAIT_S) -> list[SplitEpoch]:
    """Split or merge until mafka4-mode topic ``name`` has ``virtual_partitions`` active VPs; the
    epochs opened, oldest first."""
    TopicStore(store, cluster).get(name)
    return epochs_of(intents.request(store, cluster, IntentKind.SCALE, name,
                                     {"virtual_partitions": virtual_partitions}, wait_s))


def epochs_of(result: dict) -> list[SplitEpoch]:
    """The epochs of a reshard intent's result (``control.intent_worker``'s ``{"epochs": [...]}``)."""
    return [epoch_from_json(epoch) for epoch in result["epochs"]]


@dataclass(frozen=True, slots=True)
class OpenedLane:
    """Where a lane's messages go: lane ``lane_id`` of the topic itself (a mafka4-mode topic), or,
    in mafka3 mode, topic ``topic`` of its own (``<topic>.<lane>``, lane id 0)."""

    topic: str
    lane_id: int


def policy_asked(fallback: str = "", priority: int = -1) -> LanePolicy | None:
    """The policy a lane-open request asks for ("" and -1: any, None if both), as ``LanePolicy`` checks it."""
    if not fallback and priority == -1:
        return None
    return LanePolicy(fallback or DEFAULT_POLICY.fallback, DEFAULT_POLICY.priority if priority == -1 else priority)


def open_companion_topic(store: MetadataStore, cluster: str, topic: str, lane: str,
                         wait_s: float = TOPIC_INTENT_WAIT_S) -> OpenedLane:
    """The companion of ``topic`` that reserved lane ``lane`` names, created if this is its first
    use: the delay topic (``DELAY_LANE``; ``delays.delay_topic_config``, the topic's partitions),
    or a group's retry or dead-letter topic (``retries.companion_of_lane``; one partition).
    Answered as a lane held by a topic of its own."""
    config = TopicStore(store, cluster).get(validate_topic_name(topic)).config
    if lane == DELAY_LANE:
        name, companion = delay_topic_name(topic), delay_topic_config(config)
    else:
        name, companion = companion_of_lane(topic, lane), companion_config(config, 1)
        assert name is not None, f"lane {lane!r} names no companion topic"
    if not TopicStore(store, cluster).exists(name):
        try:
            create_topic(store, cluster, name, companion, wait_s)
        except TopicExists:
            pass  # another client's first use created it first
    return OpenedLane(name, 0)


def open_lane(store: MetadataStore, cluster: str, topic: str, lane: str, policy: LanePolicy | None = None,
              wait_s: float = RESHARD_INTENT_WAIT_S) -> OpenedLane:
    """Where lane ``lane`` of ``topic`` is, opening it (with ``policy``, else the default) if this is its first message.

    A lane's policy is fixed when it opens: asking an open lane for another one is ``InvalidConfig``
    (an environment lane is opened with ``fallback="none"`` before its first message).

    A mafka4-mode topic opens the lane in its own layout (``control.resharding.Resharder.open_lane``,
    by an intent the controller carries out; no physical partition is added). A mafka3-mode topic
    has no read side to hold lanes: the lane is topic ``<topic>.<lane>``, created with the topic's
    own config the first time (the way isolation worked before queue merging, and what
    ``mafka4 experiment`` compares against). A lane already open costs one etcd read.
    """
    if lane == DELAY_LANE or companion_of_lane(topic, lane) is not None:
        return open_companion_topic(store, cluster, topic, lane, wait_s)
    validate_lane_name(lane)
    metadata = TopicStore(store, cluster).get(validate_topic_name(topic))
    config = metadata.config
    if config.read_mode is ReadMode.MAFKA3:  # no consumer group reads several topics: no policy to keep
        name = lane_topic_name(topic, lane)
        if not TopicStore(store, cluster).exists(name):
            try:
                create_topic(store, cluster, name, config, wait_s)
            except TopicExists:
                pass  # another producer of the lane created it first
        return OpenedLane(name, 0)
    layout = VirtualStore(store, cluster).layout(topic, config.partitions, config.virtual_config())
    known = layout.current.lane_id(lane)
    if known is None:
        wanted = policy or DEFAULT_POLICY
        result = intents.request(store, cluster, IntentKind.OPEN_LANE, topic,
                                 {"lane": lane, "fallback": wanted.fallback, "priority": wanted.priority}, wait_s)
        known = int(result["lane_id"])
        layout = VirtualStore(store, cluster).layout(topic, config.partitions, config.virtual_config())
    held = layout.current.lane_policy(lane)
    if policy is not None and held != policy:
        raise InvalidConfig(f"lane {lane!r} of topic {topic!r} is open with fallback={held.fallback!r} "
                            f"priority={held.priority}, not fallback={policy.fallback!r} priority={policy.priority}: "
                            f"a lane's policy is fixed when it opens; open lanes that need another one before "
                            f"their first message")
    return OpenedLane(topic, known)
