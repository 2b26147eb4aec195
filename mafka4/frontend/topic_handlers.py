"""What a node's client port answers to the admin APIs of topics (``protocol.topic_admin_api``).

A describe needs DESCRIBE on the topic; the node answers ``frontend.topic_description``'s report,
asking the leaders over the cluster's own calls. For the changes, the node changes no topic itself: it writes an intent on the client's behalf and waits for the
controller's result, as ``client.admin.Admin`` does from a Ray driver, through the same calls
(``frontend.topic_intents``) and so with the same bounds (``TOPIC_INTENT_WAIT_S``,
``RESHARD_INTENT_WAIT_S``). Before anything is written, in this order:

1. the request's shape: a create's name and config are resolved again here (``config_of``),
   whatever the client checked, and a bad one is ``InvalidTopicName`` / ``InvalidConfig``;
2. the principal, through the port's own check (so a refusal is logged and counted): CREATE on
   the topic, or on the cluster (Kafka accepts either); DELETE on the topic; ALTER to scale;
   PRODUCE on the topic to open a lane (a producer's first message in it: no admin step);
3. the topic, read from etcd: a create of a topic that exists is ``TopicExists``, a delete or
   scale of one that does not is ``UnknownTopic``.

A refusal at any step writes nothing. The controller's error (``NotEnoughWriteNodes``, a
``RequestTimedOut`` that says whether the intent was withdrawn, ...) is the request's error
answer, so the client raises it as its own class with its message. The etcd calls block, so they
run on threads, at most ``NODE_INTENT_REQUESTS_IN_FLIGHT_MAX`` at once (``frontend.thread_slots``):
a waiting intent holds its thread for up to the wait bound, and the port's other handlers need
threads too.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from mafka4.frontend.admin_handlers import Check
from mafka4.frontend.thread_slots import ThreadSlots
from mafka4.frontend.topic_description import describe_topic
from mafka4.frontend.topic_intents import create_topic, delete_topic, open_lane, policy_asked, scale_topic
from mafka4.limits import NODE_INTENT_REQUESTS_IN_FLIGHT_MAX
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import TopicInfo
from mafka4.protocol.metadata_topics import topic_info
from mafka4.protocol.server import Handler
from mafka4.protocol.session import Session
from mafka4.names import validate_topic_name
from mafka4.retries import DEAD_LETTER_LANE_PREFIX, RETRY_LANE_PREFIX
from mafka4.protocol.topic_admin_api import (EpochInfo, LaneOpenAnswer, LaneOpenRequest, TopicCreateRequest, TopicDeleteAnswer, TopicDeleteRequest,
                                             TopicDescribeAnswer, TopicDescribeRequest, TopicScaleAnswer,
                                             TopicScaleRequest, config_of, description_answer)
from mafka4.security.acl import CLUSTER_RESOURCE, Operation, ResourceType

# The port's plain decision (a bool; nothing logged or counted), beside its check.
Allows = Callable[[Session, Operation, ResourceType, str], bool]
T = TypeVar("T")


class TopicHandlers:
    """The handlers of the topic APIs of ``cluster``, writing intents through ``store``."""

    def __init__(self, store: MetadataStore, cluster: str, check: Check, allows: Allows,
                 threads: ThreadSlots | None = None):
        self._store, self._cluster, self._check, self._allows = store, cluster, check, allows
        # Shared with the node's Kafka listener (``kafka.topic_handlers``): the bound is the node's.
        self._threads = threads or ThreadSlots(NODE_INTENT_REQUESTS_IN_FLIGHT_MAX)

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.TOPIC_CREATE: self._create, ApiKey.TOPIC_DELETE: self._delete,
                ApiKey.TOPIC_DESCRIBE: self._describe, ApiKey.TOPIC_SCALE: self._scale,
                ApiKey.LANE_OPEN: self._open_lane}

    async def _create(self, session: Session, request: TopicCreateRequest, _buffers) -> tuple[TopicInfo, tuple]:
        config = config_of(request)
        if not self._allows(session, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_RESOURCE):
            self._check(session, Operation.CREATE, ResourceType.TOPIC, request.name)
        return topic_info(await self._on_thread(create_topic, request.name, config)), ()

    async def _delete(self, session: Session, request: TopicDeleteRequest,
                      _buffers) -> tuple[TopicDeleteAnswer, tuple]:
        self._check(session, Operation.DELETE, ResourceType.TOPIC, request.name)
        await self._on_thread(delete_topic, request.name)
        return TopicDeleteAnswer(request.name), ()

    async def _describe(self, session: Session, request: TopicDescribeRequest,
                        _buffers) -> tuple[TopicDescribeAnswer, tuple]:
        self._check(session, Operation.DESCRIBE, ResourceType.TOPIC, validate_topic_name(request.name))
        return description_answer(await self._on_thread(describe_topic, request.name)), ()

    async def _scale(self, session: Session, request: TopicScaleRequest, _buffers) -> tuple[TopicScaleAnswer, tuple]:
        self._check(session, Operation.ALTER, ResourceType.TOPIC, request.name)
        epochs = await self._on_thread(scale_topic, request.name, request.virtual_partitions)
        return TopicScaleAnswer(tuple(EpochInfo(epoch.epoch, epoch.parents, epoch.children, epoch.cut)
                                      for epoch in epochs)), ()

    async def _open_lane(self, session: Session, request: LaneOpenRequest, _buffers) -> tuple[LaneOpenAnswer, tuple]:
        # A lane opens on its first message, with no admin step: producing to the topic is the right
        # it takes (in mafka3 mode too, where it creates the lane's own topic). A group's retry or
        # dead-letter topic opens on its first nack: consuming the topic in the group is the right.
        if request.lane.startswith((RETRY_LANE_PREFIX, DEAD_LETTER_LANE_PREFIX)):
            self._check(session, Operation.CONSUME, ResourceType.TOPIC, request.name)
            self._check(session, Operation.CONSUME, ResourceType.GROUP, request.lane.split(".", 1)[1])
        else:
            self._check(session, Operation.PRODUCE, ResourceType.TOPIC, request.name)
        opened = await self._on_thread(open_lane, request.name, request.lane, policy_asked(request.fallback,
                                                                                            request.priority))
        return LaneOpenAnswer(opened.topic, opened.lane_id), ()

    async def _on_thread(self, change: Callable[..., T], *args) -> T:
        """``change(store, cluster, *args)``, one of ``topic_intents``'s or ``describe_topic``, on a thread."""
        return await self._threads.run(change, self._store, self._cluster, *args)
