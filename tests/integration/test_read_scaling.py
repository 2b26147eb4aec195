"""Read-node scaling wired into the controller, on a cluster of its own (issue 38, item 3).

A write node and two read nodes are registered by node agents under a cluster name of this
module; its controller runs with ``read_node_scaling=1`` and small bounds (three VP replicas per
read node, at most three read nodes, upkeep every 500 ms). A group grows from two to four members
while a producer writes, so the topic splits to four VPs with two read replicas each: eight
replicas on two nodes, over 2 x 3 (the closed parents' four, once sealed, count for no bound:
they are reported apart, which the test checks against the VP states). The controller decides
to add a read node, says why, records the decision in etcd and asks Ray's autoscaler (a local
Ray has none: the request is logged as asked or as failed, never raised). The test then plays
the autoscaler: it starts the third read node's agent, as ``mafka4 up`` registers its simulated
nodes (the Ray node offering ``r2``'s resource exists from the start). Replicas move onto it one
step at a time (recorded under ``keys.replica_moves_prefix``), and no acknowledged message is
lost, repeated or reordered per key.

Needs read nodes that report their load (``keys.read_node_load``, the read-load change): without
reports the controller counts the nodes as unmeasured and holds.

    PYTHONPATH=$PWD python3 -m pytest -q -p no:cacheprovider tests/integration/test_read_scaling.py
"""

from __future__ import annotations

import pytest

from mafka4.client.admin import Admin
from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.virtual.vp_store import VirtualStore

from conftest import own_cluster
from process_helpers import agent_cluster
from virtual_helpers import Deliveries, Member, ProduceLoop, check_exactly_once, topic_name, vp_log
from wait_helpers import wait_until

SETTINGS = {"read_node_scaling": 1, "upkeep_interval_ms": 500, "read_nodes_min": 1, "read_nodes_max": 3,
            "read_node_vp_replicas_max": 3, "replica_moves_in_flight_max": 2}
WAIT_S = 180


@pytest.fixture(scope="module")
def scaling_cluster(tmp_path_factory):
    with own_cluster(ClusterConfig(write_nodes=1, read_nodes=3)) as local, \
            agent_cluster(local, tmp_path_factory.mktemp("scaling"), "scaling", SETTINGS,
                          (("w0", "write"), ("r0", "read"), ("r1", "read")), WAIT_S) as cluster:
        yield cluster.connection, cluster.controller, cluster.start_agent


def test_a_growing_group_adds_a_read_node_and_replicas_move_onto_it_with_nothing_lost(scaling_cluster):
    connection, controller, start_agent = scaling_cluster
    store, cluster = connection.store, connection.cluster
    virtual = VirtualStore(store, cluster)
    topic, group = topic_name("scale"), topic_name("g")
    Admin(connection).create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=2,
                                   read_mode="mafka4")

    def states():
        return {vp: state for vp, (state, _) in virtual.states(topic).items() if not state.retired}

    deliveries = Deliveries()
    loop = ProduceLoop(connection, topic, messages_max=6000, pause_s=0.02)
    members = [Member(connection, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500) for i in range(2)]
    try:
        assert wait_until(lambda: store.get_prefix(keys.read_loads_prefix(cluster)), 60), \
            "no read node reported its load: the controller cannot scale on it (merge the read-load change)"
        members += [Member(connection, topic, group, f"m{i}", deliveries, auto_commit_interval_ms=500)
                    for i in range(2, 4)]
        assert wait_until(lambda: "read nodes: add 1 read node (to 3)" in controller.log_text(), WAIT_S), \
            "the controller did not decide to add a read node"
        decision = store.get(keys.read_scaling(cluster)).value
        assert decision["target_read_nodes"] == 3 and decision["kind"] in ("add", "hold"), decision
        log = controller.log_text()
        assert "VP replicas" in log[log.index("read nodes: add 1 read node (to 3)"):].splitlines()[0], \
            "the decision names the bound it passed"
        assert ("asked Ray's autoscaler for 3 read nodes" in log
                or "asking Ray's autoscaler for 3 read nodes failed" in log)

        start_agent("r2", "read")  # what Ray's autoscaler would start
        assert wait_until(lambda: sum("r2" in state.replicas for state in states().values()) >= 2
                          and not store.get_prefix(keys.replica_moves_prefix(cluster))
                          and all(set(state.risr) == set(state.replicas) for state in states().values()), WAIT_S), \
            f"replicas did not move onto r2 and settle: {states()}"
        assert "started (onto a new read node" in controller.log_text()
        assert all(len(state.replicas) == 2 for state in states().values()), "a VP lost or kept an extra replica"

        def reported() -> tuple[int, int]:
            loads = [ReadNodeLoad.from_json(item.value) for item in store.get_prefix(keys.read_loads_prefix(cluster))]
            return sum(load.hosted_vp_replicas for load in loads), sum(load.sealed_vp_replicas for load in loads)

        def placed() -> tuple[int, int]:
            current = states().values()
            return (sum(len(state.replicas) for state in current if state.sealed_end_offset is None),
                    sum(len(state.replicas) for state in current if state.sealed_end_offset is not None))

        # The split's parents are sealed: their replicas (on r0 and r1, leader and follower) are
        # reported apart from the open VPs' ones, by the follower's node too.
        assert wait_until(lambda: placed()[1] > 0 and reported() == placed(), WAIT_S), \
            f"the nodes report (open, sealed) replicas {reported()}, the VP states place {placed()}"

        assert wait_until(lambda: loop.done, WAIT_S)
        acknowledged = loop.stop()
        deliveries.wait_for_all(acknowledged, WAIT_S)
    finally:
        loop.stop()
        for member in members:
            member.leave()
    deliveries.check_per_key_order()
    logs = check_exactly_once(connection, topic, acknowledged)
    for vp, records in logs.items():
        for replica in states()[vp].replicas:
            assert wait_until(lambda: vp_log(connection, topic, vp, replica) == records), f"v{vp} on {replica} differs"
