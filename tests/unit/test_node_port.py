"""A node's client port against a real etcd: SCRAM authentication, ACL checks and metadata from the watched view.

No Ray: a ``NodePort`` needs only etcd, so these run the same server a read node runs, on loopback.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from mafka4.errors import AuthenticationFailed, NotAuthenticated, NotAuthorized, UnknownTopic
from mafka4.frontend.node_port import NodePort
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.metadata_api import MetadataRequest
from mafka4.runtime.etcd_member import etcd_endpoint
from mafka4.runtime.etcd_server import start_etcd, stop_etcd
from mafka4.security.acl import AclRule, Operation, PatternType, Permission, ResourceType
from mafka4.security.acl_store import AclStore
from mafka4.security.scram_client import ScramClientExchange
from mafka4.security.user_store import UserStore

CLUSTER = "c"
ADMIN_PASSWORD = "admin-password-1"
BOB_PASSWORD = "bob-password-1"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    endpoint = etcd_endpoint([server])
    store = MetadataStore(endpoint)
    UserStore(store, CLUSTER).add("admin", ADMIN_PASSWORD)
    UserStore(store, CLUSTER).add("bob", BOB_PASSWORD)
    for name in ("orders", "orders-eu", "payments"):
        store.put(keys.topic(CLUSTER, name), {"partitions": 1, "read_mode": "mafka4"})
        store.put(keys.physical_partition(CLUSTER, name, 0),
                  {"leader": "w0", "leader_epoch": 2, "replicas": ["w0"], "isr": ["w0"]})
    store.put(keys.read_node_liveness(CLUSTER, "r0"), {"node_id": "r0", "client": "127.0.0.1:1"})
    yield endpoint, store
    store.close()
    stop_etcd(server)


def run(coroutine):
    return asyncio.run(coroutine)


async def with_port(endpoint: str, body):
    port = NodePort(endpoint, CLUSTER, "r0")
    await asyncio.to_thread(port.start_view)
    try:
        host, _, number = (await port.start("127.0.0.1", 0)).rpartition(":")
        return await body(port, host, int(number))
    finally:
        port.close()


async def metadata_as(host: str, port: int, user: str, password: str, topics=None):
    connection = await ClientConnection.open(host, port, ScramClientExchange(user, password))
    try:
        answer, _ = await connection.call(MetadataRequest(topics))
        return answer
    finally:
        connection.close()


def test_the_admin_sees_every_topic_with_its_partitions_and_the_read_nodes(etcd):
    async def body(_port, host, number):
        return await metadata_as(host, number, "admin", ADMIN_PASSWORD)

    answer = run(with_port(etcd[0], body))
    assert [topic.name for topic in answer.topics] == ["orders", "orders-eu", "payments"]
    assert json.loads(answer.topics[0].config_json)["read_mode"] == "mafka4"
    assert answer.topics[0].partitions[0].leader_epoch == 2
    assert [(node.node_id, node.address) for node in answer.nodes] == [("r0", "127.0.0.1:1")]
    assert answer.cluster == CLUSTER


def test_a_wrong_password_and_an_unknown_user_are_refused_alike(etcd):
    async def body(port, host, number):
        refusals = []
        for user, password in (("bob", "not-bobs-password"), ("mallory", "any-password-1")):
            with pytest.raises(AuthenticationFailed) as refused:
                await metadata_as(host, number, user, password)
            refusals.append(refused.value.message.replace(user, "USER"))
        return refusals, port.counters

    refusals, counters = run(with_port(etcd[0], body))
    assert refusals[0] == refusals[1] and "wrong password or unknown user" in refusals[0]
    assert counters["auth_failures"] == 2


def test_a_client_that_does_not_authenticate_is_refused(etcd):
    async def body(_port, host, number):
        connection = await ClientConnection.open(host, number, None)
        try:
            await connection.call(MetadataRequest(None))
        finally:
            connection.close()

    with pytest.raises(NotAuthenticated) as refused:
        run(with_port(etcd[0], body))
    assert "before authenticating" in refused.value.message


def test_acls_decide_which_topics_a_user_sees_and_may_describe(etcd):
    endpoint, store = etcd
    acls = AclStore(store, CLUSTER)
    allow_orders = AclRule("bob", Permission.ALLOW, Operation.CONSUME, ResourceType.TOPIC, PatternType.PREFIXED,
                           "orders")
    deny_eu = AclRule("bob", Permission.DENY, Operation.DESCRIBE, ResourceType.TOPIC, PatternType.LITERAL, "orders-eu")

    async def body(port, host, number):
        nothing = await metadata_as(host, number, "bob", BOB_PASSWORD)
        acls.add(allow_orders)
        acls.add(deny_eu)
        deadline = time.monotonic() + 10
        while port.view.read(lambda state: len(state.acls)) < 2:
            assert time.monotonic() < deadline, "the view did not see the ACLs"
            await asyncio.sleep(0.02)
        listed = await metadata_as(host, number, "bob", BOB_PASSWORD)
        named = await metadata_as(host, number, "bob", BOB_PASSWORD, ("orders",))
        with pytest.raises(NotAuthorized) as refused:
            await metadata_as(host, number, "bob", BOB_PASSWORD, ("payments",))
        with pytest.raises(UnknownTopic):
            await metadata_as(host, number, "admin", ADMIN_PASSWORD, ("absent",))
        return nothing, listed, named, refused.value.message, port.counters

    try:
        nothing, listed, named, refusal, counters = run(with_port(endpoint, body))
    finally:
        for rule in (allow_orders, deny_eu):
            acls.remove(rule)
    assert nothing.topics == ()
    assert [topic.name for topic in listed.topics] == ["orders"]  # consume implies describe; the deny wins for -eu
    assert [topic.name for topic in named.topics] == ["orders"]
    assert "principal 'bob' may not describe topic 'payments'" in refusal
    assert counters["refusals"] == 1


def test_the_view_holds_the_stored_users_and_never_a_password(etcd):
    async def body(port, _host, _number):
        return port.view.read(lambda state: dict(state.users))

    users = run(with_port(etcd[0], body))
    assert sorted(users) == ["admin", "bob"]
    assert ADMIN_PASSWORD not in json.dumps(users) and BOB_PASSWORD not in json.dumps(users)
