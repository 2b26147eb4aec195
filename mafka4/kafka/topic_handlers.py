"""The Kafka listener's answers to CREATE_TOPICS and DELETE_TOPICS, on a read node.

They do what the client port's topic APIs do (``frontend.topic_handlers``): the node changes no
topic itself, it writes an intent for the controller on the client's behalf and waits for the
result (``frontend.topic_intents``), through ``TopicChanges``. Each topic of a request is its own
change, answered with its own Kafka error code and message; before anything is written, in the
client port's order:

1. the request's shape (``kafka.topic_configs``: the name, the partitions, the replication
   factor, the configs) and, for a create, a name given twice in one request (INVALID_REQUEST,
   as Kafka answers it);
2. the principal: CREATE on the cluster or on the topic, DELETE on the topic
   (TOPIC_AUTHORIZATION_FAILED);
3. the topic, read from etcd: TOPIC_ALREADY_EXISTS, UNKNOWN_TOPIC_OR_PARTITION.

``validate_only`` runs the three steps and writes nothing. The request's ``timeout`` bounds the
wait for the controller (at most ``TOPIC_INTENT_WAIT_S``); REQUEST_TIMED_OUT then says whether the
intent was withdrawn. A timeout of 0 or less (confluent-kafka's default: "do not wait") waits as
a KRaft controller answers, once the change is done, up to ``TOPIC_INTENT_WAIT_S``: mafka4 has no
intent that is written and forgotten. A change done, the handler waits until this node's view
shows it (``ClusterView.topics_caught_up`` / ``topics_gone``), so the client's next Metadata
request to this node lists the new topic, or no longer lists the deleted one.

Topic ids are not served (mafka4 names topics by name; Metadata answers the zero id): a
DeleteTopics v6 entry naming only an id is UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import uuid
from typing import Callable, Protocol

from mafka4.errors import (CoordinatorUnavailable, InvalidReshard, NotEnoughReadNodes, NotEnoughWriteNodes,
                           MafkaError)
from mafka4.frontend.admin_handlers import Check
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.thread_slots import ThreadSlots
from mafka4.frontend.topic_handlers import Allows
from mafka4.frontend.topic_intents import create_topic, delete_topic, topic_absent
from mafka4.kafka import error_codes
from mafka4.kafka.error_codes import kafka_error_code, kafka_error_message
from mafka4.kafka.topic_configs import Refused, created_config, described_configs, kafka_partitions
from mafka4.limits import TOPIC_INTENT_WAIT_S, TopicConfig
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.session import Session
from mafka4.security.acl import CLUSTER_RESOURCE, Operation, ResourceType

CREATE_TOPICS, DELETE_TOPICS = 19, 20
_NO_TOPIC_ID = uuid.UUID(int=0)
# What a controller's refusal of a topic change means to a Kafka client, beside kafka_error_code's.
_CHANGE_CODES = (
    (NotEnoughWriteNodes, error_codes.INVALID_REPLICATION_FACTOR),  # Kafka's answer when brokers are too few
    (NotEnoughReadNodes, error_codes.INVALID_CONFIG),  # mafka4.read.replicas beyond the live read nodes
    (InvalidReshard, error_codes.INVALID_CONFIG),
    (CoordinatorUnavailable, error_codes.REQUEST_TIMED_OUT),  # etcd away: retriable, as for Kafka's controller
)


class TopicChanges(Protocol):
    """The changes the handlers ask for, each done (or refused with a ``MafkaError``) when it returns."""

    async def create(self, name: str, config: TopicConfig, wait_s: float, validate_only: bool) -> None: ...

    async def delete(self, name: str, wait_s: float) -> None: ...


class IntentTopicChanges:
    """``TopicChanges`` as intents for the controller (``frontend.topic_intents``) on ``threads``,
    waiting for ``view`` to show each change done."""

    def __init__(self, store: MetadataStore, cluster: str, view: ClusterView, threads: ThreadSlots):
        self._store, self._cluster, self._view, self._threads = store, cluster, view, threads

    async def create(self, name: str, config: TopicConfig, wait_s: float, validate_only: bool) -> None:
        if validate_only:
            await self._threads.run(topic_absent, self._store, self._cluster, name)
            return
        await self._threads.run(create_topic, self._store, self._cluster, name, config, wait_s)
        await self._view.topics_caught_up((name,))

    async def delete(self, name: str, wait_s: float) -> None:
        await self._threads.run(delete_topic, self._store, self._cluster, name, wait_s)
        await self._view.topics_gone((name,))


class KafkaTopicHandlers:
    """CREATE_TOPICS and DELETE_TOPICS through ``changes``, each topic checked with ``check`` /
    ``allows`` (the port's, ``PortSecurity``)."""

    def __init__(self, changes: TopicChanges, check: Check, allows: Allows):
        self._changes, self._check, self._allows = changes, check, allows

    def handlers(self) -> dict[int, Callable]:
        return {CREATE_TOPICS: self.create_topics, DELETE_TOPICS: self.delete_topics}

    # --- CREATE_TOPICS -----------------------------------------------------------------------

    async def create_topics(self, session: Session, request) -> dict:
        wait_s = _wait_s(request.timeout)
        counts = collections.Counter(topic.name for topic in request.topics)
        first = {}  # each name answered once, as Kafka keys its results by name
        for topic in request.topics:
            first.setdefault(topic.name, topic)
        results = await asyncio.gather(*(
            self._create(session, topic, wait_s, request.validate_only) if counts[name] == 1 else
            _as_ready(_create_error(name, error_codes.INVALID_REQUEST,
                                    f"topic {name!r} is named {counts[name]} times in one CreateTopics request"))
            for name, topic in first.items()))
        return {"throttle_time": datetime.timedelta(0), "topics": results}

    async def _create(self, session: Session, topic, wait_s: float, validate_only: bool) -> dict:
        name = topic.name
        configs = [(config.name, config.value) for config in topic.configs]
        config = created_config(name, topic.num_partitions, topic.replication_factor, len(topic.assignments), configs)
        if isinstance(config, Refused):
            return _create_error(name, config.error_code, config.message)
        try:
            if not self._allows(session, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_RESOURCE):
                self._check(session, Operation.CREATE, ResourceType.TOPIC, name)
            await self._changes.create(name, config, wait_s, validate_only)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return _create_error(name, _change_code(error), kafka_error_message(error))
        answer = {"name": name, "error_code": error_codes.NONE, "error_message": None,
                  "num_partitions": kafka_partitions(config), "replication_factor": config.replication_factor}
        if self._allows(session, Operation.DESCRIBE, ResourceType.TOPIC, name):
            answer["configs"] = described_configs(config, (config_name for config_name, _ in configs))
        else:
            answer["topic_config_error_code"] = error_codes.TOPIC_AUTHORIZATION_FAILED
        return answer

    # --- DELETE_TOPICS -----------------------------------------------------------------------

    async def delete_topics(self, session: Session, request) -> dict:
        wait_s = _wait_s(request.timeout)
        if hasattr(request, "topics"):  # v6: names or ids
            named = [(topic.name, topic.topic_id) for topic in request.topics]
        else:
            named = [(name, None) for name in request.topic_names]
        results = await asyncio.gather(*(self._delete(session, name, topic_id, wait_s)
                                         for name, topic_id in dict.fromkeys(named)))
        return {"throttle_time": datetime.timedelta(0), "responses": results}

    async def _delete(self, session: Session, name: str | None, topic_id: uuid.UUID | None, wait_s: float) -> dict:
        if name is None:
            if topic_id in (None, _NO_TOPIC_ID):
                return _delete_error(None, topic_id, error_codes.INVALID_REQUEST, "a topic to delete needs a name")
            return _delete_error(None, topic_id, error_codes.UNKNOWN_TOPIC_ID,
                                 f"topic id {topic_id}: mafka4 names topics by name and serves no topic ids; "
                                 f"send the topic's name")
        if topic_id not in (None, _NO_TOPIC_ID):
            return _delete_error(name, topic_id, error_codes.INVALID_REQUEST,
                                 f"topic {name!r}: name a topic by its name or by its id, not both")
        try:
            self._check(session, Operation.DELETE, ResourceType.TOPIC, name)
            await self._changes.delete(name, wait_s)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return _delete_error(name, topic_id, _change_code(error), kafka_error_message(error))
        return {"name": name, "topic_id": topic_id, "error_code": error_codes.NONE, "error_message": None}


def _wait_s(timeout: datetime.timedelta) -> float:
    """How long a change waits for the controller: the request's timeout, at most
    ``TOPIC_INTENT_WAIT_S``; 0 or less waits until it is done (see the module docstring)."""
    timeout_s = timeout.total_seconds()
    return TOPIC_INTENT_WAIT_S if timeout_s <= 0 else min(timeout_s, TOPIC_INTENT_WAIT_S)


def _change_code(error: BaseException) -> int:
    if isinstance(error, MafkaError):
        for cls, code in _CHANGE_CODES:
            if isinstance(error, cls):
                return code
    return kafka_error_code(error)


def _create_error(name: str, error_code: int, message: str) -> dict:
    return {"name": name, "error_code": error_code, "error_message": message, "num_partitions": -1,
            "replication_factor": -1}


def _delete_error(name: str | None, topic_id: uuid.UUID | None, error_code: int, message: str) -> dict:
    return {"name": name, "topic_id": topic_id, "error_code": error_code, "error_message": message}


async def _as_ready(value: dict) -> dict:
    return value
