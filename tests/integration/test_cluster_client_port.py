"""A running cluster's client ports, as a client and an attacker meet them: no Ray, no etcd.

Each refusal is asserted by its named error, and the port goes on serving good clients after it.
"""

from __future__ import annotations

import asyncio
import pickle
import secrets
import socket
import struct

import msgpack
import pytest

from mafka4.client.admin import Admin
from mafka4.client.bootstrap import PASSWORD_ENV, USER_ENV, Credential, bootstrap_nodes
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.cluster_metadata import cluster_metadata, list_topics
from mafka4.client.consumer import Consumer
from mafka4.client.node_connection import connect_any
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import create_topic, describe_topic
from mafka4.errors import AuthenticationFailed, NotAuthorized, UnknownTopic
from mafka4.metadata import keys
from mafka4.protocol.metadata_api import MetadataRequest
from mafka4.security.acl import AclRule, Operation, PatternType, Permission, ResourceType
from mafka4.security.acl_store import AclStore
from mafka4.security.user_store import UserStore


def home_of(cluster):
    return cluster.state.home


def test_a_topic_created_is_listed_and_described_through_the_client_port(cluster):
    topic = f"port-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=2)
    assert topic in list_topics(home_of(cluster))
    described = cluster_metadata((topic,), home_of(cluster))
    assert [t.name for t in described.topics] == [topic] and len(described.topics[0].partitions) == 2
    assert {node.node_id for node in described.nodes} == set(cluster.state.read_nodes)
    assert all(node.address for node in described.nodes), "every read node names its client address"
    with pytest.raises(UnknownTopic):
        cluster_metadata(("no-such-topic",), home_of(cluster))


def test_a_node_describes_a_topic_as_the_drivers_admin_does_with_its_leaders_live_offsets(cluster):
    topic = f"desc-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=2, virtual_partitions=3)
    with Producer(topic, connection=cluster, acks="all") as producer:
        producer.send_sync(b"one", partition=1, timeout_s=30)
    thin = describe_topic(topic, home_of(cluster))
    driver = Admin(cluster).describe_topic(topic)
    assert thin["config"] == driver["config"] and thin["read_loss"] == driver["read_loss"] == {}
    assert [p["live"]["high_watermark"] for p in thin["partitions"]] == [0, 1]
    assert [(p["partition"], p["leader"], p["live"]["log_end_offset"]) for p in thin["partitions"]] == [
        (p["partition"], p["leader"], p["live"]["log_end_offset"]) for p in driver["partitions"]]
    assert [(v["virtual_partition"], v["leader"], v["active"]) for v in thin["virtual_partitions"]] == [
        (v["virtual_partition"], v["leader"], v["active"]) for v in driver["virtual_partitions"]]
    assert len(thin["virtual_partitions"]) == 3 and all("error" not in v["live"] for v in thin["virtual_partitions"])
    with pytest.raises(UnknownTopic):
        describe_topic("no-such-topic", home_of(cluster))


def test_a_wrong_password_is_refused_and_the_port_serves_the_next_client(cluster):
    nodes = bootstrap_nodes(home_of(cluster))
    UserStore(cluster.store, cluster.cluster).add("carol", "carols-password", replace=True)

    async def attempts():
        # A node learns users through its watch of etcd (``frontend.port_security``), so carol,
        # just added, is known a moment later: until then her own password is refused too, which
        # would make the wrong password's refusal below prove nothing.
        (await _connect_once_known(nodes, Credential("carol", "carols-password"))).close()
        with pytest.raises(AuthenticationFailed):
            await connect_any(nodes, Credential("carol", "not-her-password"))
        connection = await connect_any(nodes, Credential("carol", "carols-password"))
        try:
            answer, _ = await connection.call(MetadataRequest(None))
            return connection.principal, answer
        finally:
            connection.close()

    principal, answer = asyncio.run(attempts())
    assert principal == "carol" and answer.topics == ()  # no ACL lets carol describe anything


async def _connect_once_known(nodes, credential: Credential, attempts: int = 600):
    """A connection as ``credential``, asking again (every 50 ms, ``attempts`` times at most) while
    the node has not yet seen the user's record."""
    for attempt in range(attempts):
        try:
            return await connect_any(nodes, credential)
        except AuthenticationFailed:
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.05)


def raw_exchange(address, frame: bytes) -> bytes:
    """What a node answers to ``frame`` before it closes the connection (or within 10 s)."""
    with socket.create_connection((address.host, address.port), timeout=10) as raw:
        raw.sendall(frame)
        raw.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
        return received


def outer_frame(body: bytes) -> bytes:
    return struct.pack(">II", len(body), 0) + body


@pytest.mark.parametrize("frame, answered", [
    # A pickle is no msgpack map: nothing of it is run, the node answers the error it can and closes.
    (outer_frame(pickle.dumps({"v": 1, "api": 3, "id": 1, "kind": "request", "body": {"topics": None}})),
     (b"ProtocolError", b"")),
    (outer_frame(msgpack.packb({"v": 7, "api": 0, "id": 1, "kind": "request", "body": {"client": "x"}})),
     (b"UnsupportedVersion",)),
    (struct.pack(">II", 1000, 0) + b"\x85", (b"",)),  # truncated: announces 1000 bytes, sends one, closes
], ids=["pickle", "wrong-version", "truncated"])
def test_a_bad_frame_gets_an_error_or_a_close_and_the_node_keeps_serving(cluster, frame, answered):
    node = bootstrap_nodes(home_of(cluster))[0]
    answer = raw_exchange(node, frame)
    assert any(expected in answer if expected else answer == b"" for expected in answered), answer[:300]
    topic = f"after-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic)
    assert topic in list_topics(home_of(cluster)), "the node serves the next client"


# --- the data path: each principal may do what its ACLs allow, and nothing else is written ----------------


def as_user(cluster, user: str, password: str) -> ClusterAccess:
    return ClusterAccess(bootstrap_nodes(home_of(cluster)), Credential(user, password))


def allow(cluster, user: str, operation: Operation, topic: str) -> None:
    AclStore(cluster.store, cluster.cluster).add(
        AclRule(user, Permission.ALLOW, operation, ResourceType.TOPIC, PatternType.LITERAL, topic))


def test_produce_consume_and_admin_requests_need_their_acls_and_a_refusal_writes_nothing(cluster, monkeypatch):
    topic = f"acl-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=1, read_mode="mafka3")
    users = UserStore(cluster.store, cluster.cluster)
    stranger, reader_only, producer_only = (f"{role}-{secrets.token_hex(3)}" for role in ("dana", "erin", "frank"))
    for user in (stranger, reader_only, producer_only):
        users.add(user, "a-password-1", replace=True)
    allow(cluster, reader_only, Operation.DESCRIBE, topic)
    allow(cluster, producer_only, Operation.PRODUCE, topic)

    with pytest.raises(NotAuthorized, match=rf"{stranger}.*describe.*{topic}"):
        Producer(topic, connection=as_user(cluster, stranger, "a-password-1"))
    with Producer(topic, connection=as_user(cluster, reader_only, "a-password-1")) as producer:
        with pytest.raises(NotAuthorized, match=rf"{reader_only}.*produce.*{topic}"):
            producer.send_sync(b"refused", timeout_s=60)
    with Producer(topic, connection=as_user(cluster, producer_only, "a-password-1")) as producer:
        assert producer.send_sync(b"allowed", timeout_s=60).offset == 0
    with pytest.raises(NotAuthorized, match=rf"{producer_only}.*consume.*{topic}"):
        with Consumer(topic, connection=as_user(cluster, producer_only, "a-password-1"), from_beginning=True) as consumer:
            consumer.poll(timeout_ms=5_000)

    # A producer's credential asks for an admin change: refused, and no topic appears.
    monkeypatch.setenv(USER_ENV, producer_only)
    monkeypatch.setenv(PASSWORD_ENV, "a-password-1")
    with pytest.raises(NotAuthorized, match=rf"{producer_only}.*create"):
        create_topic(f"{topic}-made-by-a-producer", where=home_of(cluster))
    monkeypatch.delenv(USER_ENV)
    monkeypatch.delenv(PASSWORD_ENV)
    assert f"{topic}-made-by-a-producer" not in list_topics(home_of(cluster))

    # Only the allowed message was written.
    [partition] = Admin(cluster).describe_topic(topic)["partitions"]
    assert partition["live"]["high_watermark"] == 1
    with Consumer(topic, connection=cluster, from_beginning=True) as consumer:
        messages = []
        for _ in range(20):
            messages += consumer.poll(timeout_ms=500)
            if messages:
                break
    assert [m.value for m in messages] == [b"allowed"]


def test_joining_a_group_needs_consume_on_the_topic_and_on_the_group_and_a_refusal_registers_nobody(cluster):
    topic, group = f"gacl-{secrets.token_hex(3)}", f"gacl-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=1, read_mode="mafka3")
    user = f"gina-{secrets.token_hex(3)}"
    UserStore(cluster.store, cluster.cluster).add(user, "a-password-1", replace=True)
    allow(cluster, user, Operation.CONSUME, topic)
    access = as_user(cluster, user, "a-password-1")

    with pytest.raises(NotAuthorized, match=rf"{user}.*consume.*group.*{group}"):
        Consumer(topic, group=group, connection=access, from_beginning=True)
    assert cluster.store.get_prefix(keys.group_prefix(cluster.cluster, group)) == [], "nothing of the group written"

    AclStore(cluster.store, cluster.cluster).add(
        AclRule(user, Permission.ALLOW, Operation.CONSUME, ResourceType.GROUP, PatternType.LITERAL, group))
    with Consumer(topic, group=group, connection=access, from_beginning=True) as member:
        assert member.assignment() == [0]
        assert [item.key for item in cluster.store.get_prefix(keys.group_members_prefix(cluster.cluster, group))] == [
            keys.group_member(cluster.cluster, group, member.member_id)]
    assert cluster.store.get_prefix(keys.group_members_prefix(cluster.cluster, group)) == [], "it left on close"
