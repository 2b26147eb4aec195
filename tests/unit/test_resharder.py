"""``Resharder``: the etcd round trips and read-node calls of one split, and what fences its epoch.

No etcd and no Ray: ``MemoryEtcd`` answers the ``MetadataStore`` calls a reshard makes with
etcd's rules (a transaction's creates only if absent, its requires by mod_revision) and counts
them; ``FakeReadNode``s answer Ray calls at once (``ray.get`` is the identity here) and log
them; the named-actor lookups are counted per node.
"""

from __future__ import annotations

import collections
import dataclasses

import pytest
import ray

from mafka4.coordinator.control import read_node_launcher, resharding
from mafka4.coordinator.control.placement import plan_read_path
from mafka4.coordinator.control.resharding import Resharder
from mafka4.errors import ReshardConflict
from mafka4.limits import TopicConfig
from mafka4.metadata import keys
from mafka4.metadata.store import Versioned
from mafka4.physical.partition_state import config_to_json
from mafka4.virtual import handles
from mafka4.virtual.vp_store import read_path_values

CLUSTER, TOPIC = "c", "orders"
CONFIG = TopicConfig(partitions=2, read_mode="mafka4", virtual_partitions=2, read_replicas=2)
NODES = ("r0", "r1")
OFFER = 10  # where every held stream offers to cut


class MemoryEtcd:
    """The ``MetadataStore`` calls of a reshard on one dict, with etcd's revisions; ``calls``: its round trips."""

    def __init__(self):
        self.values: dict[str, tuple[object, int]] = {}
        self.revision = 1
        self.calls: list[str] = []

    def write(self, key: str, value) -> int:
        self.revision += 1
        self.values[key] = (value, self.revision)
        return self.revision

    def _found(self, key: str) -> Versioned | None:
        found = self.values.get(key)
        return None if found is None else Versioned(key, found[0], found[1])

    def _under(self, prefix: str) -> list[Versioned]:
        return [self._found(key) for key in sorted(self.values) if key.startswith(prefix)]

    def get_prefixes(self, prefixes, keys=()) -> dict[str, list[Versioned]]:
        self.calls.append("get_prefixes")
        found = {prefix: self._under(prefix) for prefix in prefixes}
        found.update({key: [item] if (item := self._found(key)) is not None else [] for key in keys})
        return found

    def transact(self, creates: dict, requires: dict[str, int], deletes=()) -> bool:
        self.calls.append("transact")
        if any(key in self.values for key in creates):
            return False
        if any(self.values.get(key, (None, 0))[1] != revision for key, revision in requires.items()):
            return False
        for key, value in creates.items():
            self.write(key, value)
        for key in deletes:
            self.values.pop(key, None)
        return True


class Method:
    def __init__(self, node: "FakeReadNode", name: str):
        self._node, self._name = node, name

    def remote(self, *args):
        self._node.cluster.ray_calls.append((self._node.node_id, self._name))
        if self._node.dead:
            return ray.exceptions.ActorDiedError()
        return getattr(self._node, f"do_{self._name}")(*args)


class FakeReadNode:
    """A ``ReadNode`` handle whose calls answer at once: a hold writes the hold keys and offers ``OFFER``."""

    def __init__(self, cluster: "FakeCluster", node_id: str):
        self.cluster, self.node_id, self.dead = cluster, node_id, False
        for name in ("hold", "host", "release", "host_and_release"):
            setattr(self, name, Method(self, name))

    def do_hold(self, topic, token, parents, wait_ms_max):
        while self.cluster.during_hold:
            self.cluster.during_hold.pop(0)()
        return {p: (OFFER, self.cluster.etcd.write(keys.feeder_hold(CLUSTER, topic, p, self.node_id),
                                                   {"token": token, "fed_through": OFFER}))
                for p in range(self.cluster.config.partitions)}

    def do_host(self, topic, config, states):
        return {}

    def do_release(self, topic, token, epoch=None, children=()):
        return None

    def do_host_and_release(self, topic, config, states, token, epoch, children):
        return self.do_host(topic, config, states)


class FakeCluster:
    """A mafka4-mode topic of 2 partitions and 2 VPs (``config``), placed over ``read_nodes``, in
    ``MemoryEtcd``; its read nodes."""

    def __init__(self, config: TopicConfig = CONFIG, read_nodes: tuple[str, ...] = NODES):
        self.config, self.read_nodes = config, read_nodes
        self.etcd = MemoryEtcd()
        self.ray_calls: list[tuple[str, str]] = []
        self.lookups: collections.Counter[str] = collections.Counter()
        self.nodes = {node: FakeReadNode(self, node) for node in read_nodes}
        self.create_topic()
        for node in read_nodes:
            self.etcd.write(keys.node(CLUSTER, node), {"node_id": node, "role": "read"})
            self.etcd.write(keys.read_node_liveness(CLUSTER, node), {"node_id": node})
        self.during_hold: list = []  # run once each, by the next hold: what happens while a reshard holds
        self.fence = (keys.controller(CLUSTER), self.etcd.write(keys.controller(CLUSTER), {"controller_id": "c0"}))
        self.etcd.calls.clear()

    def resharder(self) -> Resharder:
        """The active controller's."""
        return Resharder(self.etcd, CLUSTER, self.fence)

    def create_topic(self) -> None:
        self.etcd.write(keys.topic(CLUSTER, TOPIC), config_to_json(self.config))
        for key, value in read_path_values(CLUSTER, TOPIC, plan_read_path(self.config, self.read_nodes)).items():
            self.etcd.write(key, value)

    def delete_topic(self) -> None:
        for key in [key for key in self.etcd.values if key.startswith(keys.topic(CLUSTER, TOPIC))]:
            del self.etcd.values[key]

    def restart(self, node_id: str) -> None:
        """Kill ``node_id``'s actor and start another under its name, which writes its liveness key."""
        self.nodes[node_id].dead = True  # what a handle kept of it still calls
        self.nodes[node_id] = FakeReadNode(self, node_id)
        self.etcd.write(keys.read_node_liveness(CLUSTER, node_id), {"node_id": node_id})

    def lookup(self, cluster: str, node_id: str):
        self.lookups[node_id] += 1
        node = self.nodes.get(node_id)
        return None if node is None or node.dead else node  # Ray frees a dead actor's name

    def leader_of(self, vp: int) -> str:
        return self.etcd.values[keys.virtual_partition(CLUSTER, TOPIC, vp)][0]["leader"]


def resolve(refs, timeout=None):
    """``ray.get`` of the fake handles' answers: raises an answer that is an error."""
    answers = refs if isinstance(refs, list) else [refs]
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    return refs


def fake(monkeypatch, found: FakeCluster) -> FakeCluster:
    """``found`` answers the Ray calls and lookups of this test."""
    monkeypatch.setattr(ray, "get", resolve)
    for module in (handles, resharding, read_node_launcher):
        monkeypatch.setattr(module, "read_node_handle", found.lookup, raising=False)
    return found


@pytest.fixture
def cluster(monkeypatch) -> FakeCluster:
    return fake(monkeypatch, FakeCluster())


def test_a_split_looks_each_read_node_up_once(cluster):
    done = cluster.resharder().split(TOPIC, 0)
    assert done.epoch.children == (2, 3) and done.unhosted == ()
    # Before: the holder once to hold, each child replica's node once per hosting phase, the holder again to release.
    assert cluster.lookups == {"r0": 1, "r1": 1}


def test_read_node_handles_keep_a_running_node_until_forgotten_and_look_a_missing_one_up_again(cluster):
    found = handles.ReadNodeHandles(CLUSTER)
    assert found.get("r9") is None and found.get("r9") is None
    assert found.get("r0") is found.get("r0") is cluster.nodes["r0"]
    found.forget("r0")
    found.get("r0")
    assert cluster.lookups == {"r9": 2, "r0": 2}


def test_a_split_reads_etcd_once_before_it_stores_its_epoch(cluster):
    cluster.resharder().split(TOPIC, 0)
    # Before: the topic key, its partitions, the layout with the states, the registered nodes.
    assert [call for call in cluster.etcd.calls if call.startswith("get")] == ["get_prefixes"]


def test_a_split_takes_no_lock_its_etcd_round_trips_are_one_read_and_its_epoch_transaction(cluster):
    cluster.resharder().split(TOPIC, 0)
    assert cluster.etcd.calls == ["get_prefixes", "transact"]
    assert not [key for key in cluster.etcd.values if "/holds/" in key], "the transaction deleted the hold keys"


def test_a_controller_deposed_during_a_split_stores_no_epoch_and_releases_its_holds(cluster):
    resharder = cluster.resharder()
    cluster.during_hold.append(lambda: cluster.etcd.write(keys.controller(CLUSTER), {"controller_id": "c1"}))
    with pytest.raises(ReshardConflict, match="deposed"):
        resharder.split(TOPIC, 0)
    assert keys.split_epoch(CLUSTER, TOPIC, 1) not in cluster.etcd.values
    assert cluster.ray_calls[-1] == (cluster.leader_of(0), "release")


def test_a_topic_deleted_and_created_again_during_a_split_gets_no_epoch_of_the_old_one(cluster):
    cluster.during_hold.append(lambda: (cluster.delete_topic(), cluster.create_topic()))
    with pytest.raises(ReshardConflict):
        cluster.resharder().split(TOPIC, 0)
    assert keys.split_epoch(CLUSTER, TOPIC, 1) not in cluster.etcd.values


def test_handles_are_kept_across_reshards_until_the_node_restarts_or_a_call_to_it_fails(cluster):
    resharder = cluster.resharder()
    resharder.split(TOPIC, 0)
    resharder.split(TOPIC, 1)
    assert cluster.lookups == {"r0": 1, "r1": 1}
    assert (cluster.leader_of(2), cluster.leader_of(3)) == ("r0", "r1")
    cluster.restart("r1")  # another actor under r1's name: it wrote r1's liveness key again
    resharder.split(TOPIC, 3)  # held on r1
    assert cluster.lookups == {"r0": 1, "r1": 2}
    cluster.nodes["r0"].dead = True  # died; its successor has not written the liveness key yet
    with pytest.raises(ReshardConflict):
        resharder.split(TOPIC, 2)  # held on r0
    cluster.nodes["r0"] = FakeReadNode(cluster, "r0")
    resharder.split(TOPIC, 2)


def test_an_epoch_stored_after_the_read_fails_the_split_and_is_not_overwritten(cluster):
    """The claim the one read relies on: a stale layout numbers its epoch and children as stored ones."""
    other = {"epoch": "stored by another reshard"}
    cluster.during_hold.append(lambda: cluster.etcd.write(keys.split_epoch(CLUSTER, TOPIC, 1), other))
    with pytest.raises(ReshardConflict):
        cluster.resharder().split(TOPIC, 0)
    assert cluster.etcd.values[keys.split_epoch(CLUSTER, TOPIC, 1)][0] is other
    assert keys.virtual_partition(CLUSTER, TOPIC, 2) not in cluster.etcd.values


def test_a_holder_leading_a_child_hosts_it_and_releases_in_one_call_before_the_followers_are_hosted(cluster):
    assert cluster.leader_of(0) == "r0"
    cluster.resharder().split(TOPIC, 0)
    assert (cluster.leader_of(2), cluster.leader_of(3)) == ("r0", "r1")
    assert cluster.ray_calls == [("r0", "hold"),
                                 ("r0", "host_and_release"), ("r1", "host"),  # the children's leaders, at once
                                 ("r0", "host"), ("r1", "host")]  # then their followers


def test_a_holder_leading_no_child_releases_while_the_children_leaders_are_hosted(monkeypatch):
    cluster = fake(monkeypatch, FakeCluster(dataclasses.replace(CONFIG, read_replicas=1), ("r0", "r1", "r2")))
    assert cluster.leader_of(1) == "r1"
    cluster.resharder().split(TOPIC, 1)
    assert (cluster.leader_of(2), cluster.leader_of(3)) == ("r2", "r0")
    assert cluster.ray_calls == [("r1", "hold"), ("r0", "host"), ("r1", "release"), ("r2", "host")]
