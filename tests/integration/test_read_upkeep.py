"""The controller's upkeep of the read path, on a cluster of its own with short upkeep delays.

Three read nodes and a write node are registered by node agents under a cluster name of this
module, whose controller runs with ``read_node_gone_ms``, ``vp_merge_delay_ms`` and
``upkeep_interval_ms`` of seconds, so that the test sees what a production controller does
after minutes:

* a read node that is gone for good loses its replicas to the other nodes (its VPs fail over
  first), and every acknowledged message stays readable from the new replicas;
* when a group shrinks, the controller merges VPs back down to what the topic needs;
* a closed VP whose records passed retention is retired: its logs go, readers skip it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import ray

from mafka4.client.admin import Admin
from mafka4.errors import ReadReplicaNotInSync
from mafka4.limits.servers import ClusterConfig
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.hosted_vp import VpId, vp_directory
from mafka4.virtual.vp_store import VirtualStore

from conftest import own_cluster
from process_helpers import ControllerProcess, agent_cluster
from virtual_helpers import Deliveries, Member, ProduceLoop, check_exactly_once, read_everything, topic_name, vp_log
from wait_helpers import wait_until

SETTINGS = {"read_node_gone_ms": 3000, "vp_merge_delay_ms": 2000, "upkeep_interval_ms": 500}
WAIT_S = 120


class UpkeepCluster:
    def __init__(self, connection: Connection, data_dir: Path, agents: dict, controller: ControllerProcess):
        self.connection, self.data_dir, self.agents, self.controller = connection, data_dir, agents, controller

    def states(self, topic: str):
        return {vp: state for vp, (state, _) in VirtualStore(self.connection.store, self.connection.cluster).states(topic).items()}

    def active(self, topic: str) -> tuple[int, ...]:
        config = TopicStore(self.connection.store, self.connection.cluster).get(topic).config
        layout = VirtualStore(self.connection.store, self.connection.cluster).layout(
            topic, config.partitions, config.virtual_config())
        return layout.current.ranges.vp_ids


@pytest.fixture(scope="module")
def upkeep_cluster(tmp_path_factory):
    with own_cluster(ClusterConfig(write_nodes=1, read_nodes=3)) as local, \
            agent_cluster(local, tmp_path_factory.mktemp("upkeep"), "upkeep", SETTINGS,
                          (("w0", "write"), ("r0", "read"), ("r1", "read"), ("r2", "read")), WAIT_S) as cluster:
        yield UpkeepCluster(cluster.connection, cluster.data_dir, cluster.agents, cluster.controller)


def test_replicas_move_off_a_read_node_gone_for_good_and_nothing_is_lost(upkeep_cluster):
    cluster = upkeep_cluster
    connection, admin = cluster.connection, Admin(cluster.connection)
    topic = topic_name("gone")
    admin.create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=3, read_replicas=2,
                       read_mode="mafka4")
    loop = ProduceLoop(connection, topic, messages_max=1500)
    assert wait_until(lambda: loop.done, WAIT_S)
    acknowledged = loop.stop()
    assert any("r2" in state.replicas for state in cluster.states(topic).values())
    # Every replica caught up first: a VP whose only RISR member is on r2 may not move (its
    # other replica may lack records, and only a RISR member may lead).
    assert wait_until(lambda: all(set(state.risr) == set(state.replicas) for state in cluster.states(topic).values()),
                      WAIT_S), f"the RISRs did not fill: {cluster.states(topic)}"
    # r2 leaves for good: its agent stops (the registration goes) and its read node dies.
    assert cluster.agents["r2"].stop() == 0
    ray.kill(read_node_handle(connection.cluster, "r2"))
    assert wait_until(lambda: all("r2" not in state.replicas and set(state.risr) == set(state.replicas)
                                  for state in cluster.states(topic).values()), WAIT_S), \
        f"replicas still on r2 or not caught up: {cluster.states(topic)}"
    logs = check_exactly_once(connection, topic, acknowledged)

    def holds(vp: int, replica: str, records: list) -> bool:
        try:
            return vp_log(connection, topic, vp, replica) == records
        except ReadReplicaNotInSync:  # a follower lagging out of its RISR a moment on a loaded machine: wait
            return False

    for vp, records in logs.items():
        for replica in cluster.states(topic)[vp].replicas:
            assert wait_until(lambda: holds(vp, replica, records)), f"v{vp} on {replica} differs"
    assert sorted(m.value for m in read_everything(connection, topic, len(acknowledged))) == \
        sorted(v for _, _, _, v in acknowledged)
    assert "gone for good" in cluster.controller.log_text()


def test_the_controller_merges_vps_back_once_a_group_shrank(upkeep_cluster):
    cluster = upkeep_cluster
    connection, admin = cluster.connection, Admin(cluster.connection)
    topic, group = topic_name("shrink"), topic_name("g")
    admin.create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=1,
                       read_mode="mafka4")
    deliveries = Deliveries()
    loop = ProduceLoop(connection, topic, messages_max=4000, pause_s=0.05)
    members = [Member(connection, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500) for i in range(4)]
    try:
        assert wait_until(lambda: len(cluster.active(topic)) >= 4, WAIT_S), "the group did not split to 4 VPs"
        for member in members[1:]:
            member.leave()
        assert wait_until(lambda: len(cluster.active(topic)) == 2, WAIT_S), \
            f"not merged back to the 2 VPs the topic was created with: {cluster.active(topic)}"
        assert wait_until(lambda: loop.done, WAIT_S)
        acknowledged = loop.stop()
        deliveries.wait_for_all(acknowledged, WAIT_S)
    finally:
        loop.stop()
        members[0].leave()
    deliveries.check_per_key_order()
    assert "merging v" in cluster.controller.log_text()
    check_exactly_once(connection, topic, acknowledged)


def test_a_closed_vp_past_its_retention_is_retired_and_readers_skip_it(upkeep_cluster):
    cluster = upkeep_cluster
    connection, admin = cluster.connection, Admin(cluster.connection)
    topic = topic_name("retire")
    admin.create_topic(topic, partitions=1, replication_factor=1, virtual_partitions=2, read_replicas=1,
                       read_mode="mafka4", retention_ms=2000)
    first = ProduceLoop(connection, topic, messages_max=300)
    assert wait_until(lambda: first.done, WAIT_S)
    before = first.stop()
    admin.split_virtual_partition(topic, 1)
    parent = cluster.states(topic)[1]
    assert wait_until(lambda: cluster.states(topic)[1].retired, WAIT_S), "the closed VP was not retired"
    directory = vp_directory(cluster.data_dir, parent.leader, VpId(topic, 1))
    assert wait_until(lambda: not directory.exists(), 30), "its log is still on disk"
    roles = ray.get(read_node_handle(connection.cluster, parent.leader).roles.remote(topic), timeout=30)
    assert 1 not in roles, "no node hosts a retired VP"
    second = ProduceLoop(connection, topic, after=before, messages_max=300)
    assert wait_until(lambda: second.done, WAIT_S)
    after = second.stop()
    # The parent's records are gone by retention, as in Kafka; a new reader reads the rest without
    # waiting for the parent, and nothing it reads is repeated.
    # Records of the first loop that were fed after the split's cut are in the children, so the reader
    # may get some of them besides: it reads until it has every record of the second loop.
    read = [m.value for m in read_everything(connection, topic, len(after), {value for _, _, _, value in after})]
    assert {value for _, _, _, value in after} <= set(read) and len(read) == len(set(read))
    assert set(read) <= {value for _, _, _, value in before + after}
