"""ACL decisions: what a principal may do, and what a refusal tells it.

What a user relies on: a rule allows exactly the names it matches (literally, by prefix, or
every name with "*"); "*" as principal is everyone; a DENY beats any ALLOW; the admin may do
anything; a producer or consumer may describe what it uses; nothing is allowed by default; a
refusal names the principal, the operation, the resource and the command that fixes it.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.errors import InvalidConfig, NotAuthorized
from mafka4.security.acl import CLUSTER_RESOURCE, AclRule, AclTable, Operation, PatternType, Permission, ResourceType
from mafka4.security.principals import ADMIN_USER

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = Permission.ALLOW, Permission.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def rule(principal="bob", operation=Operation.PRODUCE, name="orders", permission=ALLOW, pattern=LITERAL,
         resource_type=TOPIC) -> AclRule:
    return AclRule(principal, permission, operation, resource_type, pattern, name)


def test_a_literal_rule_matches_its_name_only():
    table = AclTable([rule()])
    assert table.allows("bob", Operation.PRODUCE, TOPIC, "orders")
    assert not table.allows("bob", Operation.PRODUCE, TOPIC, "orders2")
    assert not table.allows("bob", Operation.PRODUCE, TOPIC, "order")
    assert not table.allows("bob", Operation.CONSUME, TOPIC, "orders")
    assert not table.allows("bob", Operation.PRODUCE, GROUP, "orders"), "a topic rule says nothing of a group"
    assert not table.allows("alice", Operation.PRODUCE, TOPIC, "orders")


def test_a_prefixed_rule_matches_every_name_that_starts_with_it():
    table = AclTable([rule(name="orders.", pattern=PREFIXED), rule(name="a", pattern=PREFIXED)])
    for name in ("orders.eu", "orders.", "alpha", "a"):
        assert table.allows("bob", Operation.PRODUCE, TOPIC, name), name
    for name in ("orders", "order", "b", "xorders.eu"):
        assert not table.allows("bob", Operation.PRODUCE, TOPIC, name), name


def test_the_literal_name_star_matches_every_resource_of_its_type():
    table = AclTable([rule(operation=Operation.DESCRIBE, name="*")])
    assert table.allows("bob", Operation.DESCRIBE, TOPIC, "anything")
    assert not table.allows("bob", Operation.DESCRIBE, GROUP, "anything")
    assert not table.allows("bob", Operation.PRODUCE, TOPIC, "anything")


def test_the_star_principal_is_everyone():
    table = AclTable([rule(principal="*", operation=Operation.CONSUME)])
    assert table.allows("bob", Operation.CONSUME, TOPIC, "orders")
    assert table.allows("alice", Operation.CONSUME, TOPIC, "orders")
    assert not table.allows("alice", Operation.PRODUCE, TOPIC, "orders")


def test_deny_beats_allow_whatever_the_order():
    rules = [rule(principal="*", name="orders", pattern=PREFIXED), rule(permission=DENY)]
    for ordered in (rules, rules[::-1]):
        table = AclTable(ordered)
        assert not table.allows("bob", Operation.PRODUCE, TOPIC, "orders")
        assert table.allows("bob", Operation.PRODUCE, TOPIC, "orders.eu")
        assert table.allows("alice", Operation.PRODUCE, TOPIC, "orders")
    assert not AclTable([rule(operation=Operation.DESCRIBE, name="*"),
                         rule(principal="*", permission=DENY, operation=Operation.DESCRIBE, name="o",
                              pattern=PREFIXED)]).allows("bob", Operation.DESCRIBE, TOPIC, "orders")


def test_a_superuser_may_do_anything_even_when_denied():
    table = AclTable([rule(principal="*", permission=DENY, operation=Operation.DELETE)])
    assert table.allows(ADMIN_USER, Operation.DELETE, TOPIC, "orders")
    table.check(ADMIN_USER, Operation.ALTER, CLUSTER, CLUSTER_RESOURCE)
    custom = AclTable([], superusers=frozenset({"ops"}))
    assert custom.allows("ops", Operation.CREATE, TOPIC, "t") and not custom.allows(ADMIN_USER, Operation.CREATE,
                                                                                     TOPIC, "t")


def test_nothing_is_allowed_by_default():
    table = AclTable([])
    for operation in Operation:
        assert not table.allows("bob", operation, TOPIC, "orders")


@pytest.mark.parametrize("granted", [Operation.PRODUCE, Operation.CONSUME, Operation.CREATE, Operation.ALTER,
                                     Operation.DELETE])
def test_an_allow_implies_describe_and_nothing_else(granted):
    table = AclTable([rule(operation=granted)])
    assert table.allows("bob", Operation.DESCRIBE, TOPIC, "orders")
    assert not table.allows("bob", Operation.DESCRIBE, TOPIC, "other")
    others = set(Operation) - {granted, Operation.DESCRIBE}
    assert not any(table.allows("bob", operation, TOPIC, "orders") for operation in others)


def test_describe_implies_nothing_and_a_deny_implies_nothing():
    assert not AclTable([rule(operation=Operation.DESCRIBE)]).allows("bob", Operation.PRODUCE, TOPIC, "orders")
    table = AclTable([rule(operation=Operation.DESCRIBE), rule(permission=DENY)])
    assert table.allows("bob", Operation.DESCRIBE, TOPIC, "orders"), "denying produce does not deny describe"


def test_a_refusal_names_principal_operation_resource_and_the_fix():
    table = AclTable([rule(operation=Operation.CONSUME)])
    with pytest.raises(NotAuthorized) as refused:
        table.check("bob", Operation.PRODUCE, TOPIC, "orders")
    assert refused.value.message == ("principal 'bob' may not produce to topic 'orders': no ACL allows it "
                                     "(mafka4 acl add --principal bob --operation produce --topic orders)")
    assert not NotAuthorized.retriable and not NotAuthorized.usage_error
    table.check("bob", Operation.CONSUME, TOPIC, "orders")

    with pytest.raises(NotAuthorized, match="principal 'bob' may not consume from group 'g': no ACL allows it "
                                            r"\(mafka4 acl add --principal bob --operation consume --group g\)"):
        table.check("bob", Operation.CONSUME, GROUP, "g")
    with pytest.raises(NotAuthorized, match=r"may not alter the cluster: .*--operation alter --cluster\)"):
        table.check("bob", Operation.ALTER, CLUSTER, CLUSTER_RESOURCE)
    with pytest.raises(NotAuthorized, match="may not describe topic 'no such/name'"):
        table.check("bob", Operation.DESCRIBE, TOPIC, "no such/name")  # a name no rule could hold: still refused


def test_a_refusal_by_a_deny_names_the_rule_to_remove():
    table = AclTable([rule(principal="*", operation=Operation.PRODUCE, name="ord", pattern=PREFIXED,
                           permission=DENY), rule()])
    with pytest.raises(NotAuthorized) as refused:
        table.check("bob", Operation.PRODUCE, TOPIC, "orders")
    assert refused.value.message == ("principal 'bob' may not produce to topic 'orders': an ACL denies it "
                                     "(mafka4 acl remove --principal '*' --deny --operation produce --topic ord "
                                     "--prefixed)")


def test_a_rule_round_trips_through_json_and_has_a_stable_digest():
    original = rule(principal="*", operation=Operation.CONSUME, name="orders.", pattern=PREFIXED, permission=DENY)
    value = json.loads(json.dumps(original.to_json()))
    assert value == {"principal": "*", "permission": "deny", "operation": "consume", "resource_type": "topic",
                     "pattern_type": "prefixed", "name": "orders."}
    assert AclRule.from_json(value) == original
    assert AclRule.from_json(value).digest() == original.digest()
    assert rule().digest() != rule(permission=DENY).digest()
    assert [operation.value for operation in Operation] == ["produce", "consume", "describe", "create", "alter",
                                                           "delete"]


@pytest.mark.parametrize("field, bad", [
    ("principal", "bob smith"), ("principal", ""), ("principal", 7), ("permission", "maybe"),
    ("operation", "write"), ("operation", ["produce"]), ("resource_type", "queue"), ("pattern_type", "regex"),
    ("name", ""), ("name", "a/b"), ("name", None),
])
def test_a_bad_rule_field_is_named(field, bad):
    value = {**rule().to_json(), field: bad}
    with pytest.raises(InvalidConfig, match=field):
        AclRule.from_json(value)


def test_a_rule_with_missing_or_extra_fields_or_a_wrong_cluster_name_is_refused():
    value = rule().to_json()
    for bad in ({**value, "host": "*"}, {k: v for k, v in value.items() if k != "name"}, "rule"):
        with pytest.raises(InvalidConfig, match="exactly the fields"):
            AclRule.from_json(bad)
    with pytest.raises(InvalidConfig, match="cluster"):
        rule(resource_type=CLUSTER, name="orders")
    with pytest.raises(InvalidConfig, match="cluster"):
        rule(resource_type=CLUSTER, name=CLUSTER_RESOURCE, pattern=PREFIXED)


NAMES = st.text(alphabet="ab.", min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["bob", "alice", "*"]), st.sampled_from(list(Permission)),
                          st.sampled_from(list(Operation)), st.sampled_from([TOPIC, GROUP]),
                          st.sampled_from(list(PatternType)), NAMES | st.just("*")), max_size=8),
       st.sampled_from(["bob", "alice"]), st.sampled_from(list(Operation)), st.sampled_from([TOPIC, GROUP]), NAMES)
def test_the_indexed_table_decides_as_the_rules_say(fields, principal, operation, resource_type, name):
    """The table's index gives the decision the module's rules define over every rule."""
    rules = []
    for principal_, permission, operation_, type_, pattern, name_ in fields:
        if name_ in (".", "..") or (name_ == "*" and pattern is PREFIXED):
            continue
        rules.append(AclRule(principal_, permission, operation_, type_, pattern, name_))
    matching = [r for r in rules if r.matches(principal, operation, resource_type, name)]
    expected = bool(matching) and all(r.permission is ALLOW for r in matching)
    assert AclTable(rules).allows(principal, operation, resource_type, name) is expected
