"""A node's watched view of the metadata: the pure state, and the view against a real etcd."""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time

import pytest

from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.view_state import ReadNodeEndpoint, ViewState, Watched
from mafka4.limits import ReadMode
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.etcd_member import etcd_endpoint
from mafka4.runtime.etcd_server import start_etcd, stop_etcd

CLUSTER = "c"
PARTITION = {"leader": "r0", "leader_epoch": 3, "replicas": ["r0", "r1"], "isr": ["r0", "r1"]}


def topic_items(name: str, partitions: int) -> list[tuple[str, dict]]:
    items = [(keys.topic(CLUSTER, name), {"partitions": partitions, "read_mode": "mafka4"})]
    items += [(keys.physical_partition(CLUSTER, name, p), PARTITION) for p in range(partitions)]
    return items + [(keys.feed_position(CLUSTER, name, 0, "n1"), {"next_offset": 5})]


def test_a_loaded_topic_has_its_config_and_partitions_in_order():
    state = ViewState(CLUSTER)
    state.load(Watched.TOPICS, reversed(topic_items("orders", 3)))
    topic = state.topic("orders")
    assert state.topic_names() == ["orders"]
    assert topic.config.read_mode is ReadMode.MAFKA4
    assert [p.partition for p in topic.partitions] == [0, 1, 2]
    assert topic.partitions[0].isr == ("r0", "r1")


def test_deleting_a_topics_config_forgets_its_partitions_and_keeps_other_topics():
    state = ViewState(CLUSTER)
    state.load(Watched.TOPICS, topic_items("a", 2) + topic_items("ab", 1))
    state.apply([(keys.topic(CLUSTER, "a"), None)])
    assert state.topic_names() == ["ab"]
    assert state.topic("a") is None
    assert state.topic("ab").partitions[0].partition == 0
    assert list(state.partitions) == ["ab"]


def test_a_load_replaces_what_the_kind_held_and_nothing_else():
    state = ViewState(CLUSTER)
    state.load(Watched.TOPICS, topic_items("old", 1))
    state.load(Watched.USERS, [(keys.user(CLUSTER, "bob"), {"iterations": 4096})])
    state.load(Watched.TOPICS, topic_items("new", 1))
    assert state.topic_names() == ["new"]
    assert list(state.users) == ["bob"]


def test_read_nodes_and_their_client_addresses():
    state = ViewState(CLUSTER)
    state.apply([(keys.read_node_liveness(CLUSTER, "r2"), {"node_id": "r2"}),
                 (keys.read_node_liveness(CLUSTER, "r1"), {"node_id": "r1", "client": "127.0.0.1:9"})])
    assert state.read_node_endpoints() == [ReadNodeEndpoint("r1", "127.0.0.1:9"), ReadNodeEndpoint("r2", None)]
    state.apply([(keys.read_node_liveness(CLUSTER, "r1"), None)])
    assert [node.node_id for node in state.read_node_endpoints()] == ["r2"]


def test_keys_it_does_not_track_are_ignored():
    state = ViewState(CLUSTER)
    state.apply([(keys.feeder_hold(CLUSTER, "t", 0, "r0"), {"leader": "n"}), (keys.controller(CLUSTER), {}),
                 (keys.user(CLUSTER, "a") + "/extra", {})])
    assert state == ViewState(CLUSTER)


def test_a_topics_split_epochs_and_vp_states_are_kept_in_order_and_go_with_the_topic():
    state = ViewState(CLUSTER)
    state.apply([(keys.topic(CLUSTER, "t"), {"partitions": 1}),
                 (keys.split_epoch(CLUSTER, "t", 1), {"epoch": 1}), (keys.split_epoch(CLUSTER, "t", 0), {"epoch": 0}),
                 (keys.virtual_partition(CLUSTER, "t", 0), {"leader": "r0"})])
    assert state.virtual_layout("t") == (['{"epoch": 0}', '{"epoch": 1}'], {0: '{"leader": "r0"}'})
    assert state.virtual_layout("other") is None
    state.apply([(keys.topic(CLUSTER, "t"), None)])
    assert state.virtual_layout("t") is None and state.virtual_partitions == {}


def test_a_topics_keys_written_before_its_config_show_no_topic_until_the_config_comes():
    """A topic too large for one etcd transaction is created in runs, its config key last."""
    state = ViewState(CLUSTER)
    state.apply([(keys.split_epoch(CLUSTER, "t", 0), {"epoch": 0}), (keys.virtual_partition(CLUSTER, "t", 0), {}),
                 (keys.physical_partition(CLUSTER, "t", 0), PARTITION), (keys.topic_creation(CLUSTER, "t"), "token")])
    assert state.topic_names() == [] and state.topic("t") is None and state.virtual_layout("t") is None
    state.apply([(keys.topic(CLUSTER, "t"), {"partitions": 1, "read_mode": "mafka4"}),
                 (keys.topic_creation(CLUSTER, "t"), None)])
    assert state.topic_names() == ["t"] and len(state.topic("t").partitions) == 1
    assert state.virtual_layout("t") == (['{"epoch": 0}'], {0: "{}"})


@pytest.fixture
def store(tmp_path):
    server = start_etcd(tmp_path / "etcd")
    store = MetadataStore(etcd_endpoint([server]))
    yield store
    store.close()
    stop_etcd(server)


def wait_for(condition, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.02)


def test_the_view_loads_what_etcd_holds_and_follows_its_changes(store):
    for key, value in topic_items("before", 1):
        store.put(key, value)
    view = ClusterView(store, CLUSTER)
    view.start()
    try:
        assert view.read(ViewState.topic_names) == ["before"]
        for key, value in topic_items("after", 2):
            store.put(key, value)
        store.put(keys.acl(CLUSTER, "rule"), {"operation": "produce"})
        store.delete(keys.topic(CLUSTER, "before"))
        wait_for(lambda: view.read(ViewState.topic_names) == ["after"], "the watch delivering the new topic")
        wait_for(lambda: view.read(lambda state: list(state.acls)) == ["rule"], "the watch delivering the ACL")
        assert len(view.read(lambda state: state.topic("after")).partitions) == 2
    finally:
        view.close()


class SlowStore:
    """Prefix reads that wait for ``release`` once ``slow`` is set; watches counted while open."""

    def __init__(self):
        self.slow, self.reading, self.release = threading.Event(), threading.Event(), threading.Event()
        self.open_watches: set[int] = set()
        self._ids = itertools.count(1)

    def get_prefix_at(self, prefix: str):
        if self.slow.is_set():
            self.reading.set()
            self.release.wait(30)
        return [], 1

    def watch_prefix(self, prefix, on_events, on_broken, start_revision) -> int:
        watch_id = next(self._ids)
        self.open_watches.add(watch_id)
        self.broken = on_broken
        return watch_id

    def cancel_watch(self, watch_id: int) -> None:
        self.open_watches.discard(watch_id)


def test_a_view_closed_while_its_keeper_reads_again_leaves_no_watch_and_no_keeper():
    store = SlowStore()
    view = ClusterView(store, CLUSTER, (Watched.USERS, Watched.ACLS))
    view.start()
    assert len(store.open_watches) == 2
    store.slow.set()
    store.broken()  # a watch ends: the keeper reads every prefix again, slowly
    assert store.reading.wait(10)
    view.close()
    store.release.set()
    view._keeper.join(10)
    assert not view._keeper.is_alive(), "the keeper ended"
    assert store.open_watches == set(), "no watch left behind"


class LateWatchStore(MetadataStore):
    """etcd itself, but every watch delivers, in order, only once ``deliver`` is set: a node whose watch lags."""

    def __init__(self, endpoint):
        super().__init__(endpoint)
        self.deliver = threading.Event()

    def watch_prefix(self, prefix, on_events, on_broken, start_revision=None) -> int:
        held: queue.Queue = queue.Queue()

        def deliver_in_order() -> None:
            self.deliver.wait(30)
            while True:
                on_events(held.get())

        threading.Thread(target=deliver_in_order, daemon=True).start()
        return super().watch_prefix(prefix, held.put, on_broken, start_revision)


def test_a_view_whose_watch_lags_waits_for_a_topic_etcd_holds_and_says_at_once_that_another_does_not_exist(tmp_path):
    server = start_etcd(tmp_path / "etcd")
    store = LateWatchStore(etcd_endpoint([server]))
    view = ClusterView(store, CLUSTER)
    view.start()
    try:
        assert store.create_all(dict(topic_items("new", 2))), "a topic is created in one transaction, as the controller does"
        assert view.read(lambda state: state.topic("new")) is None, "the watch has not delivered yet"
        threading.Timer(0.3, store.deliver.set).start()
        assert asyncio.run(view.topics_caught_up(["new"])), "etcd holds the topic"
        assert len(view.read(lambda state: state.topic("new")).partitions) == 2, "and the view has it when asked"
        assert not asyncio.run(view.topics_caught_up(["no-such-topic"]))
    finally:
        store.deliver.set()
        view.close()
        store.close()
        stop_etcd(server)


def test_a_view_whose_watch_lags_waits_until_a_deleted_topic_is_gone_from_it(tmp_path):
    server = start_etcd(tmp_path / "etcd")
    store = LateWatchStore(etcd_endpoint([server]))
    for key, value in topic_items("old", 1):
        store.put(key, value)
    view = ClusterView(store, CLUSTER)
    view.start()
    try:
        assert view.read(lambda state: state.topic("old")) is not None, "loaded before the watch"
        store.delete_prefix(keys.topic(CLUSTER, "old"))
        assert view.read(lambda state: state.topic("old")) is not None, "the watch has not delivered the delete yet"
        threading.Timer(0.3, store.deliver.set).start()
        asyncio.run(view.topics_gone(["old"]))
        assert view.read(lambda state: state.topic("old")) is None, "gone from the view once topics_gone returns"
    finally:
        store.deliver.set()
        view.close()
        store.close()
        stop_etcd(server)


def test_a_view_loads_a_topics_prefix_larger_than_grpcs_default_message(store):
    for key, value in topic_items("big", 1):
        store.put(key, value)
    padding = "x" * 16_000
    for node in range(300):  # 4.8 MB under the prefix: grpc's default answer is at most 4 MiB
        store.put(keys.feed_position(CLUSTER, "big", 0, f"n{node}"), {"pad": padding})
    view = ClusterView(store, CLUSTER, (Watched.TOPICS,))
    view.start()
    try:
        assert view.read(ViewState.topic_names) == ["big"]
    finally:
        view.close()
