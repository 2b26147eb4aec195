"""What a node's client port answers to the admin APIs of topics (``protocol.topic_admin_api``).

The node changes no topic itself: it writes an intent on the client's behalf and waits for the
controller's result (``metadata.intents``), as ``client.admin.Admin`` does from a Ray driver, with
the same bounds (``TOPIC_INTENT_WAIT_S``, ``RESHARD_INTENT_WAIT_S``). Before anything is written,
in this order:

1. the request is checked for its shape: a create's name and config are resolved again here
   (``config_of``), whatever the client checked, and a bad one is ``InvalidTopicName`` /
   ``InvalidConfig``;
2. the principal, through the port's own check (so a refusal is logged and counted): CREATE on
   the topic, or on the cluster (Kafka accepts either); DELETE on the topic; ALTER to scale;
3. the topic, read from etcd (not the watched view, which may not have seen a change just made):
   a create of a topic that exists is ``TopicExists``, a delete or scale of one that does not is
   ``UnknownTopic``.

A refusal at any step writes nothing. The controller's error (``NotEnoughWriteNodes``, a
``RequestTimedOut`` that says whether the intent was withdrawn, ...) is the request's error
answer, so the client raises it as its own class with its message. The etcd calls block, so they
run on threads, at most ``NODE_INTENT_REQUESTS_IN_FLIGHT_MAX`` waiting intents at once: a waiting
intent holds its thread for up to the wait bound, and the port's other handlers need threads too.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from mafka4.errors import TopicExists
from mafka4.frontend.admin_handlers import Check
from mafka4.limits import NODE_INTENT_REQUESTS_IN_FLIGHT_MAX, RESHARD_INTENT_WAIT_S, TOPIC_INTENT_WAIT_S
from mafka4.metadata import intents
from mafka4.metadata.intents import IntentKind
from mafka4.metadata.store import MetadataStore
from mafka4.physical.partition_state import TopicMetadata, config_to_json
from mafka4.physical.topics import TopicStore
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import TopicInfo, topic_info
from mafka4.protocol.server import Handler
from mafka4.protocol.session import Session
from mafka4.protocol.topic_admin_api import (EpochInfo, TopicCreateRequest, TopicDeleteAnswer, TopicDeleteRequest,
                                             TopicScaleAnswer, TopicScaleRequest, config_of)
from mafka4.security.acl import CLUSTER_RESOURCE, Operation, ResourceType
from mafka4.virtual.vp_state import epoch_from_json

# The port's plain decision (a bool; nothing logged or counted), beside its check.
Allows = Callable[[Session, Operation, ResourceType, str], bool]


class TopicHandlers:
    """The handlers of the topic APIs of ``cluster``, writing intents through ``store``."""

    def __init__(self, store: MetadataStore, cluster: str, check: Check, allows: Allows):
        self._store, self._cluster, self._check, self._allows = store, cluster, check, allows
        self._topics = TopicStore(store, cluster)
        self._waiting = asyncio.Semaphore(NODE_INTENT_REQUESTS_IN_FLIGHT_MAX)

    def handlers(self) -> dict[ApiKey, Handler]:
        return {ApiKey.TOPIC_CREATE: self._create, ApiKey.TOPIC_DELETE: self._delete, ApiKey.TOPIC_SCALE: self._scale}

    async def _create(self, session: Session, request: TopicCreateRequest, _buffers) -> tuple[TopicInfo, tuple]:
        config = config_of(request)
        if not self._allows(session, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_RESOURCE):
            self._check(session, Operation.CREATE, ResourceType.TOPIC, request.name)

        def create() -> TopicMetadata:
            if self._topics.exists(request.name):
                raise TopicExists(f"topic {request.name!r} already exists: delete it first or choose another name")
            self._request(IntentKind.CREATE_TOPIC, request.name, {"config": config_to_json(config)},
                          TOPIC_INTENT_WAIT_S)
            return self._topics.get(request.name)

        return topic_info(await self._on_thread(create)), ()

    async def _delete(self, session: Session, request: TopicDeleteRequest,
                      _buffers) -> tuple[TopicDeleteAnswer, tuple]:
        self._check(session, Operation.DELETE, ResourceType.TOPIC, request.name)

        def delete() -> None:
            self._topics.get(request.name)  # UnknownTopic before an intent is written
            self._request(IntentKind.DELETE_TOPIC, request.name, {}, TOPIC_INTENT_WAIT_S)

        await self._on_thread(delete)
        return TopicDeleteAnswer(request.name), ()

    async def _scale(self, session: Session, request: TopicScaleRequest, _buffers) -> tuple[TopicScaleAnswer, tuple]:
        self._check(session, Operation.ALTER, ResourceType.TOPIC, request.name)

        def scale() -> dict:
            self._topics.get(request.name)  # UnknownTopic before an intent is written
            return self._request(IntentKind.SCALE, request.name, {"virtual_partitions": request.virtual_partitions},
                                 RESHARD_INTENT_WAIT_S)

        epochs = (epoch_from_json(epoch) for epoch in (await self._on_thread(scale))["epochs"])
        return TopicScaleAnswer(tuple(EpochInfo(epoch.epoch, epoch.parents, epoch.children, epoch.cut)
                                      for epoch in epochs)), ()

    def _request(self, kind: IntentKind, topic: str, args: dict, wait_s: float):
        return intents.request(self._store, self._cluster, kind, topic, args, wait_s)

    async def _on_thread(self, call: Callable[[], object]) -> object:
        async with self._waiting:
            return await asyncio.to_thread(call)
