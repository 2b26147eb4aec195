"""Topics created, deleted, described and scaled through a node's client port, against a real etcd: who may,
which intent is written, what the client hears.

No Ray and no controller process: the etcd and the port are ``test_node_port``'s (users ``admin``
and ``bob``, no ACL; topics ``orders``, ``orders-eu`` and ``payments``), and a fake controller
(a thread) carries out the intents the node writes, recording them in etcd as the real one does
(``metadata.intents``). The thin client and the CLI run on a thread of their own, since they run
their own event loop, against the port served on this one.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import cli
from mafka4.client import topic_admin
from mafka4.errors import (InvalidConfig, InvalidTopicName, NotAuthorized, NotEnoughWriteNodes, TopicExists,
                           UnknownTopic)
from mafka4.limits import ReadMode
from mafka4.metadata import keys
from mafka4.metadata.intents import Intent, IntentKind, IntentResult
from mafka4.metadata.store import MetadataStore
from mafka4.physical.partition_state import config_from_json, config_to_json
from mafka4.physical.topics import TopicStore
from mafka4.errors import ProtocolError
from mafka4.protocol.messages import from_body, to_body
from mafka4.protocol.topic_admin_api import (EpochInfo, TopicCreateRequest, TopicDeleteRequest, TopicDescribeAnswer,
                                             TopicDescribeRequest, TopicScaleRequest, config_json, config_of,
                                             description_answer, description_of, new_topic_config)
from mafka4.security.acl import CLUSTER_RESOURCE, AclRule, Operation, PatternType, Permission, ResourceType
from mafka4.security.acl_store import AclStore
from mafka4.virtual.layout import SplitEpoch
from mafka4.virtual.ranges import HASH_SPACE, HashRange, RangeMap
from mafka4.virtual.vp_state import epoch_to_json
from test_admin_apis import as_client, call_as, refusal_as, serve, until_the_view
from test_node_port import ADMIN_PASSWORD, BOB_PASSWORD, CLUSTER, etcd  # noqa: F401 (etcd: a fixture)

# What the fake controller answers a scale: one split of VP 0 into 1 and 2 at offset 5.
SPLIT = SplitEpoch(1, RangeMap.of([(HashRange(0, HASH_SPACE // 2), 1), (HashRange(HASH_SPACE // 2, HASH_SPACE), 2)]),
                   (5,), (0,), (1, 2))


class FakeController:
    """Carries out every intent written to the cluster, as ``control.intent_worker`` records it:
    the result under ``intent_results/<id>``, the intent deleted. A create records the topic (its
    partitions on node w0), a delete removes it, a scale answers ``SPLIT``; ``refuse``: every
    intent fails with that error instead. ``intents``: every intent seen, in order."""

    def __init__(self, store: MetadataStore, refuse: Exception | None = None):
        self.intents: list[Intent] = []
        self._store, self._refuse, self._topics = store, refuse, TopicStore(store, CLUSTER)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "FakeController":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        prefix = keys.intents_prefix(CLUSTER)
        while not self._stop.wait(0.01):
            for item in self._store.get_prefix(prefix):
                intent = Intent.from_json(item.key[len(prefix):], item.value)
                self.intents.append(intent)
                result = IntentResult.of_error(self._refuse) if self._refuse else IntentResult(True, self._do(intent))
                self._store.put(keys.intent_result(CLUSTER, intent.intent_id), result.to_json())
                self._store.delete(item.key)

    def _do(self, intent: Intent) -> dict:
        if intent.kind is IntentKind.CREATE_TOPIC:
            config = config_from_json(intent.args["config"])
            self._topics.create(TopicStore.initial_metadata(intent.topic, config, [["w0"]] * config.partitions))
            return {"partitions": config.partitions}
        if intent.kind is IntentKind.DELETE_TOPIC:
            self._topics.delete(intent.topic)
            return {}
        assert intent.kind is IntentKind.SCALE, intent
        return {"epochs": [epoch_to_json(SPLIT)]}


def on_thread(monkeypatch, host: str, number: int, user: str, password: str, call: Callable[[], object]):
    """``call`` (the thin client's or the CLI's) as ``user``, on a thread of its own."""
    as_client(monkeypatch, host, number, user, password)
    return asyncio.to_thread(call)


def allow(operation: Operation, resource_type: ResourceType, pattern_type: PatternType, name: str) -> AclRule:
    return AclRule("bob", Permission.ALLOW, operation, resource_type, pattern_type, name)


async def with_acl(port, store: MetadataStore, rule: AclRule, body):
    """``body()`` while ``rule`` holds (and the node's view has it)."""
    acls = AclStore(store, CLUSTER)
    acls.add(rule)
    try:
        await until_the_view(port, lambda state: len(state.acls) == 1, "the rule added")
        return await body()
    finally:
        acls.remove(rule)
        await until_the_view(port, lambda state: not state.acls, "the rule removed")


def test_an_admins_create_writes_one_intent_with_the_resolved_config_and_answers_the_topic(etcd, monkeypatch, capsys):
    endpoint, store = etcd

    async def body(_port, host, number):
        created = await on_thread(monkeypatch, host, number, "admin", ADMIN_PASSWORD,
                                  lambda: topic_admin.create_topic("created", partitions=2, virtual_partitions=3))
        code = await asyncio.to_thread(cli.main, ["topic", "create", "created-by-cli", "--read-mode", "mafka3"])
        return created, code

    with FakeController(store) as controller:
        created, code = serve(endpoint, body)
    config = new_topic_config("created", partitions=2, virtual_partitions=3)
    assert [(intent.kind, intent.topic) for intent in controller.intents] == [
        (IntentKind.CREATE_TOPIC, "created"), (IntentKind.CREATE_TOPIC, "created-by-cli")]
    assert controller.intents[0].args == {"config": config_to_json(config)}
    assert (created.name, created.config, [p.leader for p in created.partitions]) == ("created", config, ["w0", "w0"])
    assert created.config.read_mode is ReadMode.MAFKA4 and created.config.read_replicas == 1
    assert code == 0 and capsys.readouterr().out == (
        "created topic 'created-by-cli': 1 partition(s), replication factor 1, read mode mafka3\n")
    assert TopicStore(store, CLUSTER).exists("created") and store.get_prefix(keys.intents_prefix(CLUSTER)) == []


def test_a_principal_without_create_is_refused_and_no_intent_is_written(etcd, monkeypatch):
    endpoint, store = etcd
    request = TopicCreateRequest("bobs-topic", config_json(new_topic_config("bobs-topic")))

    async def body(port, host, number):
        refusal = await refusal_as(host, number, "bob", BOB_PASSWORD, request, NotAuthorized)
        # Ruled on its name alone: an ACL on another topic does not help.
        other = allow(Operation.CREATE, ResourceType.TOPIC, PatternType.PREFIXED, "alices-")
        elsewhere = await with_acl(port, store, other,
                                   lambda: refusal_as(host, number, "bob", BOB_PASSWORD, request, NotAuthorized))
        return refusal, elsewhere, port.counters

    with FakeController(store) as controller:
        refusal, elsewhere, counters = serve(endpoint, body)
    assert "principal 'bob' may not create topic 'bobs-topic'" in refusal
    assert "mafka4 acl add --principal bob --operation create --topic bobs-topic" in refusal
    assert elsewhere == refusal and counters["refusals"] == 2
    assert controller.intents == [] and not TopicStore(store, CLUSTER).exists("bobs-topic")


def test_create_on_a_topic_prefix_or_on_the_cluster_lets_a_principal_create(etcd, monkeypatch):
    endpoint, store = etcd
    on_prefix = allow(Operation.CREATE, ResourceType.TOPIC, PatternType.PREFIXED, "bobs-")
    on_cluster = allow(Operation.CREATE, ResourceType.CLUSTER, PatternType.LITERAL, CLUSTER_RESOURCE)

    async def body(port, host, number):
        async def create(name: str):
            return await on_thread(monkeypatch, host, number, "bob", BOB_PASSWORD,
                                   lambda: topic_admin.create_topic(name))

        async def as_prefixed():
            with pytest.raises(NotAuthorized, match="may not create topic 'not-bobs'"):
                await create("not-bobs")
            return await create("bobs-first")

        first = await with_acl(port, store, on_prefix, as_prefixed)
        second = await with_acl(port, store, on_cluster, lambda: create("not-bobs"))
        return first, second

    with FakeController(store) as controller:
        first, second = serve(endpoint, body)
    assert (first.name, second.name) == ("bobs-first", "not-bobs")
    assert [intent.topic for intent in controller.intents] == ["bobs-first", "not-bobs"]


def test_a_bad_name_or_config_is_refused_by_the_node_and_no_intent_is_written(etcd):
    endpoint, store = etcd
    bad = (TopicCreateRequest("bad name!", config_json(new_topic_config("fine"))),
           TopicCreateRequest("fine", "not json"),
           TopicCreateRequest("fine", "[1, 2]"),
           TopicCreateRequest("fine", json.dumps({"partitions": 0})),
           TopicCreateRequest("fine", json.dumps({"partitions": "2"})),
           TopicCreateRequest("fine", json.dumps({"replication_factor": 2, "min_insync_replicas": 3})),
           TopicCreateRequest("fine", json.dumps({"name": "other", "shards": 3})),
           TopicCreateRequest("fine", "[" * 5000 + "]" * 5000))

    async def body(_port, host, number):
        return [await refusal_as(host, number, "admin", ADMIN_PASSWORD, request,
                                 InvalidTopicName if request.name != "fine" else InvalidConfig)
                for request in bad]

    with FakeController(store) as controller:
        refusals = serve(endpoint, body)
    assert "topic name 'bad name!'" in refusals[0]
    assert "not JSON" in refusals[1] and "a JSON list, not a map" in refusals[2]
    assert "partitions=0 must be at least 1" in refusals[3] and "partitions='2' must be an integer" in refusals[4]
    assert "min_insync_replicas=3 is larger than replication_factor=2" in refusals[5]
    assert "unknown setting(s) name, shards" in refusals[6] and "not JSON" in refusals[7]
    assert controller.intents == [] and not TopicStore(store, CLUSTER).exists("fine")


def test_an_existing_topic_is_not_created_again_and_an_unknown_one_not_deleted_or_scaled(etcd):
    endpoint, store = etcd
    requests = ((TopicCreateRequest("orders", config_json(new_topic_config("orders"))), TopicExists),
                (TopicDeleteRequest("no-such-topic"), UnknownTopic),
                (TopicScaleRequest("no-such-topic", 4), UnknownTopic))

    async def body(_port, host, number):
        return [await refusal_as(host, number, "admin", ADMIN_PASSWORD, request, error)
                for request, error in requests]

    with FakeController(store) as controller:
        exists, unknown, unscaled = serve(endpoint, body)
    assert exists == "topic 'orders' already exists: delete it first or choose another name"
    assert unknown == unscaled == ("topic 'no-such-topic' does not exist: create it with "
                                   "'mafka4 topic create no-such-topic'")
    assert controller.intents == []


def test_the_controllers_error_reaches_the_client_as_its_class_with_its_message(etcd, monkeypatch):
    endpoint, store = etcd
    refusal = NotEnoughWriteNodes("topic 'wide' needs 3 write nodes for replication factor 3, the cluster has 1 "
                                  "live: start more write nodes or lower --replication-factor")

    async def body(_port, host, number):
        with pytest.raises(NotEnoughWriteNodes) as raised:
            await on_thread(monkeypatch, host, number, "admin", ADMIN_PASSWORD,
                            lambda: topic_admin.create_topic("wide", replication_factor=3))
        return raised.value.message

    with FakeController(store, refuse=refusal) as controller:
        message = serve(endpoint, body)
    assert message == refusal.message and [intent.topic for intent in controller.intents] == ["wide"]


def test_delete_needs_delete_on_the_topic_and_removes_it_through_an_intent(etcd, monkeypatch, capsys):
    endpoint, store = etcd
    topics = TopicStore(store, CLUSTER)
    topics.create(TopicStore.initial_metadata("doomed", new_topic_config("doomed"), [["w0"]]))

    async def body(port, host, number):
        refusal = await refusal_as(host, number, "bob", BOB_PASSWORD, TopicDeleteRequest("doomed"), NotAuthorized)
        rule = allow(Operation.DELETE, ResourceType.TOPIC, PatternType.LITERAL, "doomed")
        code = await with_acl(port, store, rule, lambda: on_thread(monkeypatch, host, number, "bob", BOB_PASSWORD,
                                                                   lambda: cli.main(["topic", "delete", "doomed"])))
        return refusal, code

    with FakeController(store) as controller:
        refusal, code = serve(endpoint, body)
    assert "principal 'bob' may not delete topic 'doomed'" in refusal
    assert code == 0 and capsys.readouterr().out == "deleted topic 'doomed'\n"
    assert [(intent.kind, intent.topic, intent.args) for intent in controller.intents] == [
        (IntentKind.DELETE_TOPIC, "doomed", {})]
    assert not topics.exists("doomed")


def test_scale_needs_alter_on_the_topic_and_answers_the_epochs_opened(etcd, monkeypatch, capsys):
    endpoint, store = etcd

    async def body(port, host, number):
        refusal = await refusal_as(host, number, "bob", BOB_PASSWORD, TopicScaleRequest("orders", 2), NotAuthorized)
        # DESCRIBE is implied by ALTER, never the other way round.
        describe = allow(Operation.DESCRIBE, ResourceType.TOPIC, PatternType.LITERAL, "orders")
        still = await with_acl(port, store, describe, lambda: refusal_as(host, number, "bob", BOB_PASSWORD,
                                                                          TopicScaleRequest("orders", 2),
                                                                          NotAuthorized))
        alter = allow(Operation.ALTER, ResourceType.TOPIC, PatternType.PREFIXED, "ord")
        epochs = await with_acl(port, store, alter, lambda: on_thread(monkeypatch, host, number, "bob", BOB_PASSWORD,
                                                                      lambda: topic_admin.scale("orders", 2)))
        code = await on_thread(monkeypatch, host, number, "admin", ADMIN_PASSWORD,
                               lambda: cli.main(["scale", "orders", "--virtual-partitions", "2"]))
        return refusal, still, epochs, code

    with FakeController(store) as controller:
        refusal, still, epochs, code = serve(endpoint, body)
    assert "principal 'bob' may not alter topic 'orders'" in refusal and still == refusal
    assert epochs == [EpochInfo(1, (0,), (1, 2), (5,))]
    assert code == 0 and capsys.readouterr().out == ("split epoch 1: 0 -> 1+2 at cut [5]\n"
                                                     "topic 'orders' has 2 virtual partition(s) (1 split(s) and merge(s))\n")
    assert [(intent.kind, intent.args) for intent in controller.intents] == [
        (IntentKind.SCALE, {"virtual_partitions": 2})] * 2


def test_describe_needs_describe_on_the_topic_and_a_bad_name_is_refused_before_any_leader_is_asked(etcd):
    """The refusals come before the node asks a leader (over Ray, which this test has not: the
    description itself is checked on a real cluster, ``test_cluster_client_port``)."""
    endpoint, _ = etcd

    async def body(_port, host, number):
        return (await refusal_as(host, number, "bob", BOB_PASSWORD, TopicDescribeRequest("orders"), NotAuthorized),
                await refusal_as(host, number, "admin", ADMIN_PASSWORD, TopicDescribeRequest("no/such"),
                                 InvalidTopicName))

    refusal, bad_name = serve(endpoint, body)
    assert "principal 'bob' may not describe topic 'orders'" in refusal
    assert "topic name" in bad_name


def test_a_description_travels_row_by_row_and_comes_back_in_describe_topics_shape():
    config = new_topic_config("orders", partitions=2, virtual_partitions=3)
    description = {
        "topic": "orders", "config": config,
        "partitions": [{"partition": 0, "leader": "w0", "leader_epoch": 3, "replicas": ["w0"], "isr": ["w0"],
                        "live": {"log_end_offset": 10, "high_watermark": 9, "followers": {"w1": {"log_end_offset": 8}}}},
                       {"partition": 1, "leader": "w1", "leader_epoch": 1, "replicas": ["w1"], "isr": ["w1"],
                        "live": None}],
        "virtual_partitions": [{"virtual_partition": vp, "range": [vp, HASH_SPACE], "leader": "r0", "active": True,
                                "lane": "" if vp < 2 else "swim", "live": {"error": "GetTimeoutError"}}
                               for vp in range(3)],
        "lanes": [{"lane": "swim", "fallback": "trunk", "priority": 3}],
        "read_loss": {1: [[0, 5], [7, 9]]},
        "delays": {"waiting": 3, "horizons": {"minute": 1, "hour": 0, "day": 2, "later": 0},
                   "counts": {"released": 4}, "restart_offsets": {"0": 7}, "written_ms": 1}}
    answer = description_answer(description)
    assert from_body(TopicDescribeAnswer, to_body(answer)) == answer
    assert description_of(answer) == description


def test_a_description_that_is_not_the_json_a_node_sends_is_a_protocol_error():
    good = description_answer({"topic": "t", "config": new_topic_config("t"), "partitions": [],
                               "virtual_partitions": [], "read_loss": {}})
    for broken in (TopicDescribeAnswer("t", "{", (), (), "{}"), TopicDescribeAnswer("t", good.config_json, ("[",), (), "{}"),
                   TopicDescribeAnswer("t", good.config_json, (), (), '{"zero": []}'),
                   TopicDescribeAnswer("t", "[]", (), (), "{}")):
        with pytest.raises(ProtocolError, match="the description of topic 't'"):
            description_of(broken)


# Settings near the valid ones (some resolve, some conflict), and anything JSON holds.
NEAR_VALID = st.fixed_dictionaries({}, optional={
    "partitions": st.integers(1, 3), "replication_factor": st.integers(1, 3), "min_insync_replicas": st.integers(1, 3),
    "read_mode": st.sampled_from(["mafka3", "mafka4"]), "virtual_partitions": st.none() | st.integers(0, 3),
    "read_replicas": st.integers(0, 3), "retention_ms": st.none() | st.integers(1, 10**9)})
ANY_JSON = st.dictionaries(st.text(max_size=20), st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8), max_size=4)


@settings(max_examples=300, deadline=None)
@given(NEAR_VALID | ANY_JSON)
def test_any_config_a_client_sends_is_resolved_or_refused_as_invalid(settings_sent):
    request = TopicCreateRequest("t", json.dumps(settings_sent))
    try:
        config = config_of(request)
    except InvalidConfig:
        return
    assert config_of(TopicCreateRequest("t", config_json(config))) == config, "a resolved config resolves to itself"
