"""Users and ACLs managed through a node's client port, against a real etcd: who may, what is written, what is sent.

No Ray: a ``NodePort`` needs only etcd; the etcd and the port are ``test_node_port``'s (users
``admin`` and ``bob``, no ACL). The thin client (``client.security_admin``) runs on a
thread of its own, since it runs its own event loop, against the port served on this one.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from test_node_port import ADMIN_PASSWORD, BOB_PASSWORD, CLUSTER, etcd, run, with_port  # noqa: F401 (etcd: a fixture)

from mafka4.client import security_admin
from mafka4.errors import InvalidConfig, NotAuthorized, ProtectedUser, UnknownAclRule
from mafka4.frontend.node_port import NodePort
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.protocol import server as port_server
from mafka4.protocol.admin_api import (
    AclAddRequest,
    AclRemoveRequest,
    AclRuleInfo,
    CredentialInfo,
    UserAddRequest,
    UserListRequest,
    UserRemoveRequest,
    credential_info,
    rule_info,
)
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.metadata_api import MetadataRequest
from mafka4.security.acl import (
    CLUSTER_RESOURCE,
    AclRule,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from mafka4.security.credentials import make_credential
from mafka4.security.scram_client import ScramClientExchange

CAROL_PASSWORD = "carol-password-1"
BOB_ALTERS_THE_CLUSTER = AclRule("bob", Permission.ALLOW, Operation.ALTER, ResourceType.CLUSTER, PatternType.LITERAL,
                                 CLUSTER_RESOURCE)


@pytest.fixture
def frames_received(monkeypatch):
    """The bytes of every frame a node's port decodes (body and buffers), as it received them."""
    received: list[bytes] = []
    decode_frame = port_server.decode_frame

    def recording(frame):
        received.append(bytes(frame.body) + b"".join(bytes(buffer) for buffer in frame.buffers))
        return decode_frame(frame)

    monkeypatch.setattr(port_server, "decode_frame", recording)
    return received


def serve(endpoint: str, body):
    return run(with_port(endpoint, body))


async def call_as(host: str, port: int, user: str, password: str, request):
    connection = await ClientConnection.open(host, port, ScramClientExchange(user, password))
    try:
        answer, _ = await connection.call(request)
        return answer
    finally:
        connection.close()


async def refusal_as(host: str, port: int, user: str, password: str, request, error: type) -> str:
    with pytest.raises(error) as refused:
        await call_as(host, port, user, password, request)
    return refused.value.message


async def until_the_view(port: NodePort, holds, what: str) -> None:
    deadline = time.monotonic() + 10
    while not port.view.read(holds):
        assert time.monotonic() < deadline, f"the node's view did not see {what}"
        await asyncio.sleep(0.02)


def as_client(monkeypatch, host: str, number: int, user: str, password: str) -> None:
    """Point the thin client at the port, as ``user``."""
    monkeypatch.setenv("MAFKA4_BOOTSTRAP", f"{host}:{number}")
    monkeypatch.setenv("MAFKA4_USER", user)
    monkeypatch.setenv("MAFKA4_PASSWORD", password)


def stored_users(store: MetadataStore) -> dict[str, dict]:
    return {item.key: item.value for item in store.get_prefix(keys.users_prefix(CLUSTER))}


def stored_acls(store: MetadataStore) -> list[dict]:
    return [item.value for item in store.get_prefix(keys.acls_prefix(CLUSTER))]


def test_a_user_the_admin_adds_authenticates_and_its_password_never_reaches_the_node(etcd, frames_received,
                                                                                     monkeypatch):
    endpoint, store = etcd

    async def body(port, host, number):
        as_client(monkeypatch, host, number, "admin", ADMIN_PASSWORD)
        await asyncio.to_thread(security_admin.add_user, "carol", CAROL_PASSWORD)
        await until_the_view(port, lambda state: "carol" in state.users, "carol")
        metadata = await call_as(host, number, "carol", CAROL_PASSWORD, MetadataRequest(None))
        listed = await asyncio.to_thread(security_admin.list_users)
        await asyncio.to_thread(security_admin.remove_user, "carol")
        return metadata, listed

    metadata, listed = serve(endpoint, body)
    assert metadata.cluster == CLUSTER
    assert listed == ["admin", "bob", "carol"]
    assert keys.user(CLUSTER, "carol") not in stored_users(store)
    user_adds = [frame for frame in frames_received if b"stored_key" in frame]
    assert len(user_adds) == 1, "the USER_ADD request was seen"
    assert all(CAROL_PASSWORD.encode() not in frame for frame in frames_received)


def test_etcd_holds_the_credential_the_client_made_and_no_password(etcd, monkeypatch):
    endpoint, store = etcd
    credential = make_credential(CAROL_PASSWORD)

    async def body(_port, host, number):
        await call_as(host, number, "admin", ADMIN_PASSWORD,
                      UserAddRequest("carol", credential_info(credential), False))
        stored = stored_users(store)[keys.user(CLUSTER, "carol")]
        await call_as(host, number, "admin", ADMIN_PASSWORD, UserRemoveRequest("carol"))
        return stored

    stored = serve(endpoint, body)
    assert stored == credential.to_json()
    assert CAROL_PASSWORD not in json.dumps(stored)


def test_a_principal_without_alter_on_the_cluster_may_change_nothing_and_nothing_is_written(etcd):
    endpoint, store = etcd
    users_before, acls_before = stored_users(store), stored_acls(store)
    requests = (UserAddRequest("mallory", credential_info(make_credential("mallory-password")), False),
                UserAddRequest("bob", credential_info(make_credential("bobs-new-password")), True),
                UserRemoveRequest("admin"), AclAddRequest(rule_info(BOB_ALTERS_THE_CLUSTER)),
                AclRemoveRequest(rule_info(BOB_ALTERS_THE_CLUSTER)), UserListRequest())

    async def body(port, host, number):
        refusals = [await refusal_as(host, number, "bob", BOB_PASSWORD, request, NotAuthorized)
                    for request in requests]
        return refusals, port.counters

    refusals, counters = serve(endpoint, body)
    assert all("principal 'bob' may not" in refusal and "the cluster" in refusal for refusal in refusals)
    assert "mafka4 acl add --principal bob --operation alter --cluster" in refusals[0]
    assert "--operation describe --cluster" in refusals[-1]
    assert counters["refusals"] == len(requests)
    assert stored_users(store) == users_before and stored_acls(store) == acls_before


def test_an_acl_allowing_alter_on_the_cluster_lets_a_user_manage_users_from_the_next_request(etcd):
    endpoint, store = etcd
    add_dave = UserAddRequest("dave", credential_info(make_credential("dave-password")), False)

    async def body(port, host, number):
        await refusal_as(host, number, "bob", BOB_PASSWORD, add_dave, NotAuthorized)
        await call_as(host, number, "admin", ADMIN_PASSWORD, AclAddRequest(rule_info(BOB_ALTERS_THE_CLUSTER)))
        await until_the_view(port, lambda state: len(state.acls) == 1, "the rule added")
        await call_as(host, number, "bob", BOB_PASSWORD, add_dave)
        listed = await call_as(host, number, "bob", BOB_PASSWORD, UserListRequest())  # ALTER implies DESCRIBE
        await call_as(host, number, "admin", ADMIN_PASSWORD, AclRemoveRequest(rule_info(BOB_ALTERS_THE_CLUSTER)))
        await until_the_view(port, lambda state: not state.acls, "the rule removed")
        refusal = await refusal_as(host, number, "bob", BOB_PASSWORD, UserRemoveRequest("dave"), NotAuthorized)
        await call_as(host, number, "admin", ADMIN_PASSWORD, UserRemoveRequest("dave"))
        return listed.users, refusal

    users, refusal = serve(endpoint, body)
    assert "dave" in users
    assert "principal 'bob' may not alter the cluster" in refusal
    assert stored_acls(store) == [] and keys.user(CLUSTER, "dave") not in stored_users(store)


def test_the_admin_user_is_neither_removed_nor_given_a_new_password(etcd):
    endpoint, store = etcd
    admin_before = stored_users(store)[keys.user(CLUSTER, "admin")]
    replace = UserAddRequest("admin", credential_info(make_credential("another-password")), True)

    async def body(_port, host, number):
        return [await refusal_as(host, number, "admin", ADMIN_PASSWORD, request, ProtectedUser)
                for request in (UserRemoveRequest("admin"), replace)]

    removal, replacement = serve(endpoint, body)
    assert "'admin' cannot be removed" in removal and "$MAFKA4_HOME/credentials" in removal
    assert "'admin' cannot be given a new password" in replacement
    assert stored_users(store)[keys.user(CLUSTER, "admin")] == admin_before


def test_acl_rules_are_added_listed_and_removed_and_a_bad_rule_is_refused_by_the_node(etcd, monkeypatch):
    endpoint, store = etcd
    rules = (AclRule("bob", Permission.ALLOW, Operation.PRODUCE, ResourceType.TOPIC, PatternType.PREFIXED, "orders."),
             AclRule("*", Permission.DENY, Operation.CONSUME, ResourceType.GROUP, PatternType.LITERAL, "audit"))
    bad_rules = (AclRuleInfo("bob", "allow", "fly", "topic", "literal", "orders"),
                 AclRuleInfo("bob", "allow", "alter", "cluster", "prefixed", CLUSTER_RESOURCE),
                 AclRuleInfo("bob smith", "allow", "produce", "topic", "literal", "orders"))

    async def body(_port, host, number):
        as_client(monkeypatch, host, number, "admin", ADMIN_PASSWORD)
        for rule in rules:
            await asyncio.to_thread(security_admin.add_acl, rule)
        await asyncio.to_thread(security_admin.add_acl, rules[0])  # a rule held already: nothing changes
        listed = await asyncio.to_thread(security_admin.list_acls)
        for rule in rules:
            await asyncio.to_thread(security_admin.remove_acl, rule)
        with pytest.raises(UnknownAclRule, match="mafka4 acl list"):
            await asyncio.to_thread(security_admin.remove_acl, rules[0])
        invalid = [await refusal_as(host, number, "admin", ADMIN_PASSWORD, AclAddRequest(bad), InvalidConfig)
                   for bad in bad_rules]
        return listed, await asyncio.to_thread(security_admin.list_acls), invalid

    listed, after, invalid = serve(endpoint, body)
    assert sorted(listed, key=AclRule.digest) == sorted(rules, key=AclRule.digest)
    assert after == [] and stored_acls(store) == []
    assert "'operation'" in invalid[0] and "--prefixed" in invalid[1] and "'principal'" in invalid[2]


def test_a_credential_that_is_no_scram_credential_is_refused_and_not_stored(etcd):
    endpoint, store = etcd
    good = make_credential(CAROL_PASSWORD)
    bad_credentials = (CredentialInfo(b"short", good.stored_key, good.server_key, good.iterations),
                       CredentialInfo(good.salt * 20, good.stored_key, good.server_key, good.iterations),
                       CredentialInfo(good.salt, good.stored_key[:16], good.server_key, good.iterations),
                       CredentialInfo(good.salt, good.stored_key, good.server_key, 1))

    async def body(_port, host, number):
        return [await refusal_as(host, number, "admin", ADMIN_PASSWORD, UserAddRequest("carol", bad, False),
                                 InvalidConfig) for bad in bad_credentials]

    refusals = serve(endpoint, body)
    assert ["'salt'" in refusals[0], "'salt'" in refusals[1], "'stored_key'" in refusals[2],
            "'iterations'" in refusals[3]] == [True] * 4
    assert keys.user(CLUSTER, "carol") not in stored_users(store)
