"""CreateTopics and DeleteTopics (``mafka4.kafka.topic_handlers``) over stand-in topic changes.

Requests are what kafka-python's protocol classes encode, read as the listener reads them; every
answer is shaped to the request's version, framed, and read back by kafka-python's response
classes, so each served version is checked on the wire. The stand-in changes record what they
were asked and raise what a controller would (``TopicExists``, ``UnknownTopic``, ...); that the
real changes write intents and wait for the controller is the integration test's
(tests/integration/test_kafka_listener.py).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse
from kio.index import load_response_schema

from mafka4.errors import (CoordinatorUnavailable, NotEnoughReadNodes, NotEnoughWriteNodes,
                           RequestTimedOut, TopicExists, UnknownTopic)
from mafka4.kafka import error_codes
from mafka4.kafka.listener import SERVED
from mafka4.kafka.shapes import shaped
from mafka4.kafka.topic_handlers import KafkaTopicHandlers
from mafka4.kafka.wire import encode_response, read_request
from mafka4.limits import TOPIC_INTENT_WAIT_S, TopicConfig
from mafka4.protocol.session import Session
from mafka4.security.acl import (CLUSTER_RESOURCE, AclRule, AclTable, Operation, PatternType, Permission,
                                 ResourceType)

ALICE, BOB, CAROL = Session("alice", "127.0.0.1:1"), Session("bob", "127.0.0.1:2"), Session("carol", "127.0.0.1:3")
CREATE_VERSIONS, DELETE_VERSIONS = range(2, 8), range(1, 7)
# alice may create, delete and describe topics "t-*"; bob may create (so describe) "b-*"; carol may
# create any topic (on the cluster) and describe none.
ACLS = AclTable([AclRule("alice", Permission.ALLOW, operation, ResourceType.TOPIC, PatternType.PREFIXED, "t-")
                 for operation in (Operation.CREATE, Operation.DELETE, Operation.DESCRIBE)] +
                [AclRule("bob", Permission.ALLOW, Operation.CREATE, ResourceType.TOPIC, PatternType.PREFIXED, "b-"),
                 AclRule("carol", Permission.ALLOW, Operation.CREATE, ResourceType.CLUSTER, PatternType.LITERAL,
                         CLUSTER_RESOURCE)])


class StandInChanges:
    """Records each change; ``refusals`` maps a topic to the error its change raises."""

    def __init__(self, refusals: dict | None = None):
        self.refusals = refusals or {}
        self.asked: list[tuple] = []

    async def create(self, name: str, config: TopicConfig, wait_s: float, validate_only: bool) -> None:
        self.asked.append(("create", name, config, wait_s, validate_only))
        if name in self.refusals:
            raise self.refusals[name]

    async def delete(self, name: str, wait_s: float) -> None:
        self.asked.append(("delete", name, wait_s))
        if name in self.refusals:
            raise self.refusals[name]


def handlers(changes: StandInChanges) -> KafkaTopicHandlers:
    def check(session, operation, resource_type, name):
        ACLS.check(session.principal, operation, resource_type, name)

    def allows(session, operation, resource_type, name):
        return ACLS.allows(session.principal, operation, resource_type, name)

    return KafkaTopicHandlers(changes, check, allows)


def served(handler, session: Session, request, response_class):
    """``request`` (kafka-python's) read as the listener reads it, answered by ``handler``, and the
    answer as kafka-python reads it."""
    request.with_header(correlation_id=5, client_id="admin")
    frame = bytes(request.encode(framed=True, header=True))
    received = read_request(frame[4:], SERVED)
    description = asyncio.run(handler(session, received.body))
    answer = encode_response(received, shaped(load_response_schema(received.api_key, received.api_version),
                                              description))
    return response_class[received.api_version].decode(answer, header=True, framed=True)


def creatable(version: int, name: str, partitions: int = 3, replication_factor: int = -1, configs=(), assignments=()):
    topic = CreateTopicsRequest[version].CreatableTopic
    return topic(name=name, num_partitions=partitions, replication_factor=replication_factor,
                 assignments=[topic.CreatableReplicaAssignment(partition_index=index, broker_ids=brokers)
                              for index, brokers in assignments],
                 configs=[topic.CreatableTopicConfig(name=k, value=v) for k, v in configs])


def create(changes: StandInChanges, version: int, topics: list, session: Session = ALICE, timeout_ms: int = 30_000,
           validate_only: bool = False):
    request = CreateTopicsRequest[version](topics=topics, timeout_ms=timeout_ms, validate_only=validate_only)
    return served(handlers(changes).create_topics, session, request, CreateTopicsResponse)


def delete(changes: StandInChanges, version: int, names: list, session: Session = ALICE, timeout_ms: int = 30_000):
    request_class = DeleteTopicsRequest[version]
    request = request_class(topics=[request_class.DeleteTopicState(name=name) for name in names], timeout_ms=timeout_ms)
    return served(handlers(changes).delete_topics, session, request, DeleteTopicsResponse)


@pytest.mark.parametrize("version", CREATE_VERSIONS)
def test_a_topic_is_created_at_every_served_version_with_mafka4s_defaults(version):
    changes = StandInChanges()
    (result,) = create(changes, version, [creatable(version, "t-orders")]).topics
    assert (result.name, result.error_code) == ("t-orders", 0)
    ((kind, name, config, wait_s, validate_only),) = changes.asked
    assert (kind, name, config.partitions, config.virtual_partitions, config.replication_factor) == (
        "create", "t-orders", 3, 3, 1)
    assert (wait_s, validate_only) == (30.0, False)
    if version >= 5:  # the topic as created: its Kafka partitions, replication factor and configs
        assert (result.num_partitions, result.replication_factor, result.topic_config_error_code) == (3, 1, 0)
        configs = {config.name: config.value for config in result.configs}
        assert configs["mafka4.read.mode"] == "mafka4" and configs["mafka4.virtual.partitions"] == "3"


def test_a_topic_with_more_vps_than_partitions_answers_its_vps_as_its_partitions():
    changes = StandInChanges()
    (result,) = create(changes, 7, [creatable(7, "t-wide", 2, configs=[("mafka4.virtual.partitions", "6")])]).topics
    assert (result.error_code, result.num_partitions) == (0, 6)
    sources = {config.name: config.config_source for config in result.configs}
    assert sources["mafka4.virtual.partitions"] == 1 and sources["retention.ms"] == 5


@pytest.mark.parametrize("version", [2, 7])
def test_each_refusal_is_its_topics_own_with_kafkas_code_and_a_message(version):
    changes = StandInChanges({"t-exists": TopicExists("topic 't-exists' already exists"),
                              "t-wide": NotEnoughWriteNodes("3 write nodes are live, replication factor 5 needs 5"),
                              "t-read": NotEnoughReadNodes("1 read node is live"),
                              "t-slow": RequestTimedOut("no controller carried out the intent; it was withdrawn"),
                              "t-away": CoordinatorUnavailable("etcd does not answer")})
    topics = [creatable(version, "t-exists"), creatable(version, "t-wide", replication_factor=5),
              creatable(version, "t-read"), creatable(version, "t-slow"), creatable(version, "t-away"),
              creatable(version, "t-bad", configs=[("cleanup.policy", "compact")]),
              creatable(version, "t-zero", partitions=0), creatable(version, "t-fine"),
              creatable(version, "other")]
    results = {result.name: (result.error_code, result.error_message)
               for result in create(changes, version, topics).topics}
    assert {name: code for name, (code, _) in results.items()} == {
        "t-exists": error_codes.TOPIC_ALREADY_EXISTS, "t-wide": error_codes.INVALID_REPLICATION_FACTOR,
        "t-read": error_codes.INVALID_CONFIG, "t-slow": error_codes.REQUEST_TIMED_OUT,
        "t-away": error_codes.REQUEST_TIMED_OUT, "t-bad": error_codes.INVALID_CONFIG,
        "t-zero": error_codes.INVALID_PARTITIONS, "t-fine": error_codes.NONE,
        "other": error_codes.TOPIC_AUTHORIZATION_FAILED}
    assert "already exists" in results["t-exists"][1] and "cleanup.policy" in results["t-bad"][1]
    assert "not authorized" in results["other"][1].lower() or "alice" in results["other"][1]
    asked = {name for _, name, *_ in changes.asked}
    assert asked == {"t-exists", "t-wide", "t-read", "t-slow", "t-away", "t-fine"}, (
        "a topic refused by its shape or its ACL asks for no change")


def test_the_cluster_create_permission_covers_every_topic_and_a_topic_one_only_its_own():
    changes = StandInChanges()
    (refused,) = create(changes, 7, [creatable(7, "t-x")], session=BOB).topics
    (made,) = create(changes, 7, [creatable(7, "b-x")], session=BOB).topics
    assert (refused.error_code, made.error_code) == (error_codes.TOPIC_AUTHORIZATION_FAILED, 0)
    assert made.topic_config_error_code == 0 and made.configs, "CREATE on a topic implies DESCRIBE on it"
    (anywhere,) = create(changes, 7, [creatable(7, "any-name")], session=CAROL).topics
    assert anywhere.error_code == 0, "CREATE on the cluster covers every topic, as in Kafka"
    # carol may not describe any-name: the answer holds no configs and says why, as Kafka's does.
    assert anywhere.topic_config_error_code == error_codes.TOPIC_AUTHORIZATION_FAILED and not anywhere.configs
    assert anywhere.num_partitions == 3


def test_a_name_given_twice_in_one_request_is_an_invalid_request_and_creates_nothing():
    changes = StandInChanges()
    results = create(changes, 7, [creatable(7, "t-twice"), creatable(7, "t-twice", 5), creatable(7, "t-once")]).topics
    assert [(result.name, result.error_code) for result in results] == [
        ("t-twice", error_codes.INVALID_REQUEST), ("t-once", 0)]
    assert [name for _, name, *_ in changes.asked] == ["t-once"]


def test_validate_only_checks_and_asks_for_a_validation_only():
    changes = StandInChanges({"t-exists": TopicExists("topic 't-exists' already exists")})
    results = create(changes, 7, [creatable(7, "t-new"), creatable(7, "t-exists")], validate_only=True).topics
    assert [(result.name, result.error_code) for result in results] == [
        ("t-new", 0), ("t-exists", error_codes.TOPIC_ALREADY_EXISTS)]
    assert all(validate_only for *_, validate_only in changes.asked)


@pytest.mark.parametrize("timeout_ms, wait_s", [(5_000, 5.0), (0, TOPIC_INTENT_WAIT_S), (-1, TOPIC_INTENT_WAIT_S),
                                                 (10**9, TOPIC_INTENT_WAIT_S)])
def test_the_requests_timeout_bounds_the_wait_and_zero_waits_until_done(timeout_ms, wait_s):
    changes = StandInChanges()
    create(changes, 7, [creatable(7, "t-a")], timeout_ms=timeout_ms)
    delete(changes, 6, ["t-a"], timeout_ms=timeout_ms)
    (created, deleted) = changes.asked
    assert (created[3], deleted[2]) == (wait_s, wait_s)


def test_assignments_are_refused_before_anything_is_asked():
    changes = StandInChanges()
    (result,) = create(changes, 7, [creatable(7, "t-placed", -1, -1, assignments=[(0, [1, 2])])]).topics
    assert result.error_code == error_codes.INVALID_REPLICA_ASSIGNMENT and changes.asked == []


@pytest.mark.parametrize("version", DELETE_VERSIONS)
def test_topics_are_deleted_at_every_served_version_each_with_its_own_answer(version):
    changes = StandInChanges({"t-gone": UnknownTopic("topic 't-gone' does not exist")})
    results = delete(changes, version, ["t-orders", "t-gone", "other", "t-orders"]).responses
    assert [(result.name, result.error_code) for result in results] == [
        ("t-orders", 0), ("t-gone", error_codes.UNKNOWN_TOPIC_OR_PARTITION),
        ("other", error_codes.TOPIC_AUTHORIZATION_FAILED)]
    if version >= 5:
        assert "does not exist" in results[1].error_message
    assert [name for _, name, _ in changes.asked] == ["t-orders", "t-gone"], "refused by its ACL: nothing asked"


def test_a_delete_by_topic_id_is_unknown_topic_id_since_mafka4_has_none():
    changes = StandInChanges()
    request_class = DeleteTopicsRequest[6]
    topic_id = uuid.uuid4()
    request = request_class(topics=[request_class.DeleteTopicState(name=None, topic_id=topic_id),
                                    request_class.DeleteTopicState(name="t-both", topic_id=topic_id)],
                            timeout_ms=1000)
    results = served(handlers(changes).delete_topics, ALICE, request, DeleteTopicsResponse).responses
    assert [(result.name, result.topic_id, result.error_code) for result in results] == [
        (None, topic_id, error_codes.UNKNOWN_TOPIC_ID), ("t-both", topic_id, error_codes.INVALID_REQUEST)]
    assert "by name" in results[0].error_message and changes.asked == []
