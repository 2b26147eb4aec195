"""Users, ACL rules and the admin's credential against a real etcd (one lone member on a free
loopback port for the module, stopped by its PID).

What a user relies on: ``mafka4 user add`` stores a credential that authenticates and holds no
password, refuses to overwrite a user by accident, and ``remove`` of an unknown user says so;
an ACL rule added twice is one rule, and removing an absent rule says so; ``mafka4 up`` leaves an
admin credential file only its owner can read, and a fresh etcd gets the admin user back from it.
"""

from __future__ import annotations

import json
import os
import stat
import uuid

import pytest

from mafka4.errors import (AuthenticationFailed, InvalidConfig, MissingCredential, UnknownAclRule, UnknownUser,
                           UserExists)
from mafka4.metadata import keys
from mafka4.security.acl import AclRule, Operation, PatternType, Permission, ResourceType
from mafka4.security.acl_store import AclStore
from mafka4.security.admin_credential import ensure_admin_credential, load_credential
from mafka4.security.principals import ADMIN_USER
from mafka4.security.scram import ScramServerExchange
from mafka4.security.scram_client import ScramClientExchange
from mafka4.security.user_store import UserStore

PASSWORD = "correct horse battery"


@pytest.fixture
def store(lone_etcd_store):
    return lone_etcd_store


@pytest.fixture
def cluster() -> str:
    """A cluster name of its own for each test: the etcd is shared by the module."""
    return f"c{uuid.uuid4().hex[:8]}"


def authenticates(users: UserStore, user: str, password: str) -> bool:
    server = ScramServerExchange(users.get)
    client = ScramClientExchange(user, password)
    try:
        client.finish(server.step(client.respond(server.step(client.first()))))
    except AuthenticationFailed:
        return False
    return server.principal == user


def test_a_user_added_authenticates_and_etcd_holds_no_password(store, cluster):
    users = UserStore(store, cluster)
    users.add("bob", PASSWORD)
    assert authenticates(users, "bob", PASSWORD) and not authenticates(users, "bob", PASSWORD + "x")
    raw = store.get(keys.user(cluster, "bob"))
    assert raw is not None and PASSWORD not in json.dumps(raw.value)
    assert users.get("alice") is None
    assert keys.user_name_of(cluster, raw.key) == "bob" and raw.key.startswith(users.prefix)


def test_adding_an_existing_user_is_refused_unless_replaced(store, cluster):
    users = UserStore(store, cluster)
    users.add("bob", PASSWORD)
    with pytest.raises(UserExists, match="user 'bob' already exists"):
        users.add("bob", "another password")
    assert authenticates(users, "bob", PASSWORD)
    users.add("bob", "another password", replace=True)
    assert authenticates(users, "bob", "another password") and not authenticates(users, "bob", PASSWORD)


def test_users_are_listed_and_removed(store, cluster):
    users = UserStore(store, cluster)
    for name in ("carol", "alice", "bob"):
        users.add(name, PASSWORD)
    assert users.names() == ["alice", "bob", "carol"]
    users.remove("bob")
    assert users.names() == ["alice", "carol"] and not authenticates(users, "bob", PASSWORD)
    with pytest.raises(UnknownUser, match="no user 'bob'"):
        users.remove("bob")


def test_bad_names_and_short_passwords_are_refused_before_etcd(store, cluster):
    users = UserStore(store, cluster)
    for name in ("a/b", "", "..", "x" * 65):
        with pytest.raises(InvalidConfig, match="user name"):
            users.add(name, PASSWORD)
    with pytest.raises(InvalidConfig, match="at least 8"):
        users.add("bob", "short")
    assert users.names() == []


def test_an_acl_rule_added_twice_is_one_rule_and_removing_an_absent_one_says_so(store, cluster):
    acls = AclStore(store, cluster)
    produce = AclRule("bob", Permission.ALLOW, Operation.PRODUCE, ResourceType.TOPIC, PatternType.LITERAL, "orders")
    deny = AclRule("*", Permission.DENY, Operation.DELETE, ResourceType.TOPIC, PatternType.PREFIXED, "sys.")
    acls.add(produce)
    acls.add(produce)
    acls.add(deny)
    assert sorted(acls.rules(), key=AclRule.digest) == sorted([produce, deny], key=AclRule.digest)
    assert store.count_prefix(acls.prefix) == 2
    acls.remove(produce)
    assert acls.rules() == [deny]
    with pytest.raises(UnknownAclRule, match="--principal bob --operation produce --topic orders"):
        acls.remove(produce)


def test_the_admin_credential_is_private_idempotent_and_restored_to_a_fresh_etcd(store, cluster, tmp_path):
    home = tmp_path / "home"
    users = UserStore(store, cluster)
    path = ensure_admin_credential(home, users)
    assert path == home / "credentials"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    user, password = load_credential(path)
    assert user == ADMIN_USER and len(password) >= 24
    assert authenticates(users, ADMIN_USER, password)
    assert sorted(os.listdir(home)) == ["credentials"], "no temporary file is left behind"

    assert ensure_admin_credential(home, users) == path
    assert load_credential(path) == (user, password), "an existing file is kept"
    assert authenticates(users, ADMIN_USER, password)

    fresh = UserStore(store, f"{cluster}-fresh")  # as a new etcd: no users at all
    assert fresh.names() == []
    ensure_admin_credential(home, fresh)
    assert fresh.names() == [ADMIN_USER] and authenticates(fresh, ADMIN_USER, password)


def test_the_admin_credential_file_is_never_readable_by_others_even_with_a_lax_umask(store, cluster, tmp_path):
    previous = os.umask(0)
    try:
        path = ensure_admin_credential(tmp_path, UserStore(store, cluster))
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_missing_or_bad_credential_file_is_named_with_the_fix(store, cluster, tmp_path):
    with pytest.raises(MissingCredential, match=f"no credential file {tmp_path / 'nope'}.*mafka4 up"):
        load_credential(tmp_path / "nope")
    bad = tmp_path / "credentials"
    bad.write_text('{"user": "admin"}')
    with pytest.raises(InvalidConfig, match=f"{bad} must hold exactly the fields"):
        load_credential(bad)
    bad.write_text(json.dumps({"user": "bob", "password": PASSWORD}))
    with pytest.raises(InvalidConfig, match="holds user 'bob', not 'admin'"):
        ensure_admin_credential(tmp_path, UserStore(store, cluster))


def test_acl_rules_beyond_the_bound_are_refused_but_a_rule_held_may_be_added_again(store, cluster, monkeypatch):
    monkeypatch.setattr("mafka4.security.acl_store.ACL_RULES_MAX", 2)
    acls = AclStore(store, cluster)
    rules = [AclRule("bob", Permission.ALLOW, operation, ResourceType.TOPIC, PatternType.LITERAL, "orders")
             for operation in (Operation.PRODUCE, Operation.CONSUME, Operation.DELETE)]
    acls.add(rules[0])
    acls.add(rules[1])
    with pytest.raises(InvalidConfig, match="holds 2 ACL rules, the most it takes"):
        acls.add(rules[2])
    acls.add(rules[0])
    assert len(acls.rules()) == 2
