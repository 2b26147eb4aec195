"""Writes too large for one etcd transaction, sent in runs, against a real etcd (one lone member).

With the longest names and node ids the bounds allow, a topic of every bound and a lone group
member's commit of every VP pass etcd's 1.5 MiB request bound (tests/unit/test_etcd_requests.py
measures them). What a user relies on here: etcd accepts every run; a topic is all or nothing as
readers see it, also when its creation dies between two runs, and the next creation of the name
succeeds without a key of the dead one; a delete of the name deletes those keys and says so; of
two creations of one name, the topic is one creation's alone; a lone member claims, commits and
releases every VP.
"""

from __future__ import annotations

import uuid

import pytest

from mafka4.coordinator.control import topic_control
from mafka4.coordinator.control.placement import assign_replicas, plan_read_path
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore, VpOffset
from mafka4.errors import CoordinatorUnavailable, TopicExists, UnknownTopic
from mafka4.frontend import topic_intents
from mafka4.frontend.view_state import ViewState, Watched
from mafka4.limits import (PARTITIONS_MAX, READ_REPLICAS_MAX, REPLICATION_FACTOR_MAX, TOPIC_NAME_CHARS_MAX,
                           VIRTUAL_PARTITIONS_MAX, ReadMode, TopicConfig)
from mafka4.metadata import keys
from mafka4.metadata.intents import IntentKind
from mafka4.physical.topics import TopicStore
from mafka4.runtime.node_identity import NODE_ID_CHARS_MAX
from mafka4.virtual.vp_store import VirtualStore, read_path_values

LONGEST_NAME = "t" * TOPIC_NAME_CHARS_MAX
LONGEST_MEMBER_ID = f"{'h' * 64}-4194304-0123abcd"  # client.message.new_member_id of the longest host name


@pytest.fixture
def store(lone_etcd):
    group_store = VirtualGroupStore(lone_etcd.endpoint, f"c{uuid.uuid4().hex[:8]}")  # a cluster of its own per test
    try:
        yield group_store
    finally:
        group_store.close()


class Interposed:
    """Stands between the store and etcd for its transactions: counts them and, once ``count`` went
    through, fails every later one (the process died there) or first runs ``then``, once."""

    def __init__(self, store: VirtualGroupStore, count: int | None = None, then=None):
        self.sent = 0
        self._send, self._count, self._then = store._transaction, count, then
        store._transaction = self

    def __call__(self, compare, success):
        if self.sent == self._count:
            if self._then is None:
                raise CoordinatorUnavailable("the creating process died here")
            then, self._then, self._count = self._then, None, None
            then()
        self.sent += 1
        return self._send(compare, success)


def create(store: VirtualGroupStore, name: str = LONGEST_NAME, virtual_partitions: int = VIRTUAL_PARTITIONS_MAX,
           node_chars: int = NODE_ID_CHARS_MAX) -> None:
    """Record a topic of every bound but ``virtual_partitions``, as the controller records it."""
    config = TopicConfig(partitions=PARTITIONS_MAX, replication_factor=REPLICATION_FACTOR_MAX,
                         min_insync_replicas=REPLICATION_FACTOR_MAX, read_mode=ReadMode.MAFKA4,
                         virtual_partitions=virtual_partitions, read_replicas=READ_REPLICAS_MAX)
    write_nodes = [f"w{index}".rjust(node_chars, "n") for index in range(REPLICATION_FACTOR_MAX)]
    read_nodes = [f"r{index}".rjust(node_chars, "n") for index in range(READ_REPLICAS_MAX)]
    metadata = TopicStore.initial_metadata(name, config, assign_replicas(PARTITIONS_MAX, REPLICATION_FACTOR_MAX,
                                                                         write_nodes))
    plan = plan_read_path(config, read_nodes)
    TopicStore(store, store.cluster).create(metadata, read_path_values(store.cluster, name, plan))


def below_topic(store: VirtualGroupStore, name: str = LONGEST_NAME) -> list[str]:
    return [item.key for item in store.get_prefix(keys.topic_children_prefix(store.cluster, name))]


def assert_absent(store: VirtualGroupStore, name: str = LONGEST_NAME) -> None:
    topics = TopicStore(store, store.cluster)
    assert not topics.exists(name) and topics.names() == []
    with pytest.raises(UnknownTopic):
        topics.get(name)
    view = ViewState(store.cluster)  # what a node serves clients from
    view.load(Watched.TOPICS, [(item.key, item.value) for item in store.get_prefix(keys.topics_prefix(store.cluster))])
    assert view.topic_names() == [] and view.topic(name) is None and view.virtual_layout(name) is None


def assert_whole(store: VirtualGroupStore, virtual_partitions: int, name: str = LONGEST_NAME) -> None:
    metadata = TopicStore(store, store.cluster).get(name)
    assert metadata.config.virtual_partitions == virtual_partitions
    assert [state.partition for state in metadata.partitions] == list(range(PARTITIONS_MAX))
    assert sorted(VirtualStore(store, store.cluster).states(name)) == list(range(virtual_partitions))
    assert keys.topic_creation(store.cluster, name) not in below_topic(store, name)
    assert len(below_topic(store, name)) == PARTITIONS_MAX + 1 + virtual_partitions, "no key of an earlier try"


def test_a_topic_of_every_bound_with_the_longest_names_is_created_in_runs_etcd_accepts(store):
    transactions = Interposed(store)
    create(store)
    assert transactions.sent == 3, "emptied below the topic, then two runs"
    assert_whole(store, VIRTUAL_PARTITIONS_MAX)
    with pytest.raises(TopicExists):
        create(store)


@pytest.mark.parametrize("died_after", [1, 2])
def test_a_creation_that_dies_between_runs_leaves_no_topic_and_the_next_one_succeeds(store, died_after):
    """It died after emptying what was below the topic, or after its first run (of two: the second
    writes the config key)."""
    Interposed(store, died_after)
    with pytest.raises(CoordinatorUnavailable):
        create(store)
    del store._transaction  # the process that retries has nothing dying in it
    assert_absent(store)
    if died_after > 1:
        assert below_topic(store), "the dead creation's keys are there, below a topic no reader sees"
    create(store, virtual_partitions=2, node_chars=13)  # one transaction, once the dead one's keys are deleted
    assert_whole(store, 2)


def test_a_topic_created_again_in_runs_after_a_creation_died_holds_no_key_of_the_dead_one(store):
    Interposed(store, 2)
    with pytest.raises(CoordinatorUnavailable):
        create(store)
    del store._transaction
    create(store, virtual_partitions=VIRTUAL_PARTITIONS_MAX - 1)
    assert_whole(store, VIRTUAL_PARTITIONS_MAX - 1)


def test_a_delete_of_a_name_whose_creation_died_between_runs_deletes_what_it_left_and_says_so(store, monkeypatch):
    """What ``mafka4 topic delete`` does there: the node finds keys below an absent config key and
    asks the controller (the real one's step, ``topic_control.delete_topic``, stands in for the
    intent's round trip), which deletes them and answers that no topic existed, naming what it deleted."""
    Interposed(store, 2)
    with pytest.raises(CoordinatorUnavailable):
        create(store)
    del store._transaction
    left = below_topic(store)
    asked = []

    def controller(store_, cluster, kind, topic, args, wait_s):
        asked.append((kind, topic))
        return topic_control.delete_topic(store_, cluster, topic)

    monkeypatch.setattr(topic_intents.intents, "request", controller)
    with pytest.raises(UnknownTopic, match=f"does not exist; deleted the {len(left)} key"):
        topic_intents.delete_topic(store, store.cluster, LONGEST_NAME)
    assert asked == [(IntentKind.DELETE_TOPIC, LONGEST_NAME)] and left
    assert below_topic(store) == [], "nothing left below the name"
    assert_absent(store)
    with pytest.raises(UnknownTopic, match="does not exist: create it with"):
        topic_intents.delete_topic(store, store.cluster, LONGEST_NAME)
    assert len(asked) == 1, "with nothing below the name, the node answers without the controller"
    create(store, virtual_partitions=2, node_chars=13)
    assert_whole(store, 2)


def test_the_controllers_delete_of_leftovers_never_deletes_a_topic_recorded_meanwhile(store):
    create(store, virtual_partitions=2, node_chars=13)
    assert TopicStore(store, store.cluster).delete_leftovers(LONGEST_NAME) == 0, "its config key is there"
    assert_whole(store, 2)


def test_of_two_creations_of_one_name_the_topic_is_the_later_ones_alone(store):
    """The later one empties what the earlier one wrote (its marker too), so the earlier one stops."""
    other = VirtualGroupStore(store.endpoint, store.cluster)
    try:
        Interposed(store, 2, then=lambda: create(other, virtual_partitions=3))
        with pytest.raises(TopicExists):
            create(store)
    finally:
        other.close()
    assert_whole(store, 3)


def test_a_lone_member_with_the_longest_names_claims_commits_and_releases_every_vp(store):
    group, vps = "g" * TOPIC_NAME_CHARS_MAX, list(range(VIRTUAL_PARTITIONS_MAX))
    lease = store.grant_lease(60)
    store.put(keys.group_member(store.cluster, group, LONGEST_MEMBER_ID), {"member_id": LONGEST_MEMBER_ID}, lease)
    assert store.claim(group, LONGEST_MEMBER_ID, LONGEST_NAME, vps, lease) == dict.fromkeys(vps)
    assert store.claim(group, "another-member", LONGEST_NAME, vps, lease) is None, "owned, and not a member"
    offsets = {vp: VpOffset(vp + 1, vp + 2, 0) for vp in vps}
    assert store.commit(group, LONGEST_MEMBER_ID, LONGEST_NAME, offsets) == (set(vps), set())
    closing = {vp: VpOffset(vp + 2, vp + 2, 0) for vp in vps}
    assert store.commit(group, LONGEST_MEMBER_ID, LONGEST_NAME, closing, release=vps) == (set(vps), set())
    assert store.get_prefix(keys.group_vp_owners_prefix(store.cluster, group)) == []
    committed = store.get_prefix(keys.group_vp_offsets_prefix(store.cluster, group))
    assert sorted(item.value["offset"] for item in committed) == [vp + 2 for vp in vps]
    store.revoke_lease(lease)
