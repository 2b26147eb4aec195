"""The read path on a real cluster: feeders split physical partitions into VPs, read by VirtualConsumer.

Checked against what producers had acknowledged: every acknowledged message is in exactly
one VP exactly once (its source ``(partition, offset)`` appears once over all VP logs), in
the VP the layout names for its key, with each key's messages in produce order; this holds
across a feeder restart, a paused physical follower, a paused VP follower and a VP leader
failover. The session cluster has one read node; the RISR tests start their own cluster
with two.
"""

from __future__ import annotations

import os

import pytest
import ray

from mafka4 import errors
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.coordinator import keys
from mafka4.limits import ClusterConfig
from mafka4.physical.launcher import replica_handle
from mafka4.runtime.connect import connect
from mafka4.runtime.environment import HOME_ENV
from mafka4.runtime.local import down, up
from mafka4.virtual.failover import fail_over_virtual_partition
from mafka4.virtual.feeder import feeder_actor_name
from mafka4.virtual.launcher import feeder_handle, restart_feeder, start_vp_replica, vp_handle
from mafka4.virtual.metadata import VirtualStore

from virtual_helpers import WAIT_S, ProduceLoop, check_exactly_once, read_everything, topic_name, vp_log, wait_until


# --- on the session cluster (one read node) -------------------------------------------------


def test_every_acknowledged_message_is_in_one_vp_once_across_a_feeder_restart_and_a_paused_follower(cluster):
    admin = Admin(cluster)
    topic = topic_name("vp")
    metadata = admin.create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=4, replica_lag_ms_max=1500,
                                  read_mode="mafka4")
    loop = ProduceLoop(cluster, topic)
    try:
        loop.wait_for(1500)
        node = ray.get(feeder_handle(cluster.cluster, topic, 0).describe.remote(), timeout=WAIT_S)["node_id"]
        restarted = restart_feeder(cluster.cluster, cluster.store.endpoint, topic, 0, node)
        restarted_at = len(loop.acknowledged)
        assert wait_until(lambda: ray.get(restarted.describe.remote(), timeout=WAIT_S)["rounds"] > 0), "not feeding"
        # Feeders read from an in-sync follower. Partition 1's only follower stops replicating:
        # it leaves the ISR, and its feeder goes on reading from the leader.
        state = metadata.partitions[1]
        follower = next(r for r in state.replicas if r != state.leader)
        feeder = feeder_handle(cluster.cluster, topic, 1)
        assert wait_until(lambda: ray.get(feeder.describe.remote(), timeout=WAIT_S)["source"] == follower)
        admin.inject_fault(topic, kind="physical", partition=1, replica=follower, paused=True)
        leader = replica_handle(cluster.cluster, topic, 1, state.leader)
        assert wait_until(lambda: ray.get(leader.describe.remote())["isr"] == [state.leader]), "follower stayed in ISR"
        assert wait_until(lambda: ray.get(feeder.describe.remote())["source"] == state.leader), "feeder kept the follower"
        loop.wait_for(restarted_at + 1500)
        admin.inject_fault(topic, kind="physical", partition=1, replica=follower, paused=False)
        assert wait_until(lambda: sorted(ray.get(leader.describe.remote())["isr"]) == sorted(state.replicas))
        loop.wait_for(len(loop.acknowledged) + 500)
    finally:
        acknowledged = loop.stop()
    logs = check_exactly_once(cluster, topic, acknowledged)
    assert all(logs.values()), "every VP received records"
    messages = read_everything(cluster, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(v for _, _, _, v in acknowledged)
    assert all(not any(name == "mafka4.src" for name, _ in m.headers) for m in messages), "source header stripped"


def test_read_mode_and_read_replicas_are_checked_at_creation(cluster):
    admin = Admin(cluster)
    wide = topic_name("wide")
    with pytest.raises(errors.NotEnoughReadNodes, match="needs 2 live read nodes, 1 are live .*read_mode='mafka3'"):
        admin.create_topic(wide, partitions=1, read_replicas=2, read_mode="mafka4")
    assert wide not in admin.list_topics()
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if wide in a["name"]], "actors left behind"
    with pytest.raises(errors.InvalidConfig, match="read_mode='fast'"):
        admin.create_topic(topic_name("bad"), read_mode="fast")
    with pytest.raises(errors.InvalidConfig, match="has no virtual partitions"):
        admin.create_topic(topic_name("bad"), read_mode="mafka3", virtual_partitions=2)

    classic = topic_name("m3")
    config = admin.create_topic(classic, partitions=1, read_mode="mafka3").config
    assert (config.read_mode, config.virtual_partitions, config.read_replicas) == ("mafka3", 0, 0)
    assert not cluster.store.get_prefix(keys.virtual_partitions_prefix(cluster.cluster, classic))
    assert feeder_handle(cluster.cluster, classic, 0) is None
    with pytest.raises(errors.WrongReadMode, match="read it with Consumer"):
        VirtualConsumer(classic, connection=cluster)
    with Producer(classic, connection=cluster) as producer:
        producer.send_sync(b"direct")
    with Consumer(classic, connection=cluster, from_beginning=True) as consumer:
        assert wait_until(lambda: any(m.value == b"direct" for m in consumer.poll(timeout_ms=300)), 20)

    default = topic_name("m4")
    config = admin.create_topic(default, partitions=2, read_mode="mafka4").config
    assert (config.read_mode, config.virtual_partitions, config.read_replicas) == ("mafka4", 2, 1)
    epoch = cluster.store.get(keys.split_epoch(cluster.cluster, default, 0)).value
    assert epoch["cut"] == [0, 0] and epoch["children"] == [0, 1] and epoch["ranges"][0][:2] == [0, 2**63]
    admin.delete_topic(default)
    assert vp_handle(cluster.cluster, default, 0, "r0") is None and feeder_handle(cluster.cluster, default, 0) is None
    assert not cluster.store.get_prefix(keys.topic_children_prefix(cluster.cluster, default))


# --- on a cluster of its own (two read nodes: RR=2) -------------------------------------------


@pytest.fixture
def two_read_nodes(fresh_home):
    """A cluster with write nodes w0, w1 and read nodes r0, r1; the driver rejoins the session's Ray afterwards."""
    previous_ray = ray.get_runtime_context().gcs_address if ray.is_initialized() else None
    previous_home = os.environ.get(HOME_ENV)
    ray.shutdown()
    os.environ[HOME_ENV] = str(fresh_home)
    connection = None
    try:
        up(fresh_home, ClusterConfig(write_nodes=2, read_nodes=2))
        connection = connect(fresh_home)
        yield connection
    finally:
        if connection is not None:
            connection.store.close()
        ray.shutdown()
        down(fresh_home)
        if previous_home is None:
            os.environ.pop(HOME_ENV, None)
        else:
            os.environ[HOME_ENV] = previous_home
        if previous_ray is not None:
            ray.init(address=previous_ray, namespace="mafka4", log_to_driver=False)


def vp_state(connection, topic: str, vp: int):
    return VirtualStore(connection.store, connection.cluster).state(topic, vp)[0]


def test_a_paused_vp_follower_leaves_the_risr_and_a_vp_leader_failover_loses_nothing(two_read_nodes):
    connection = two_read_nodes
    admin = Admin(connection)
    topic = topic_name("risr")
    admin.create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=2, read_mode="mafka4",
                       read_replica_lag_ms_max=3000)
    loop = ProduceLoop(connection, topic)
    try:
        loop.wait_for(1000)
        # A paused follower leaves the RISR (recorded in etcd) and stops serving reads; it returns once unpaused.
        state = vp_state(connection, topic, 0)
        follower = next(r for r in state.replicas if r != state.leader)
        admin.inject_fault(topic, kind="virtual", partition=0, replica=follower, paused=True)
        assert wait_until(lambda: vp_state(connection, topic, 0).risr == (state.leader,)), "follower stayed in RISR"
        # Cut off from its leader, the follower stops serving by itself within the lag bound.
        paused = vp_handle(connection.cluster, topic, 0, follower)
        assert wait_until(lambda: not ray.get(paused.describe.remote(), timeout=WAIT_S)["serving"], 10)
        with pytest.raises(errors.ReadReplicaNotInSync):
            ray.get(paused.fetch.remote(0, 1024), timeout=WAIT_S)
        admin.inject_fault(topic, kind="virtual", partition=0, replica=follower, paused=False)
        assert wait_until(lambda: set(vp_state(connection, topic, 0).risr) == set(state.replicas)), "did not rejoin"

        # The leader of VP 1 dies mid-stream: a RISR follower takes over at the next epoch.
        assert wait_until(lambda: len(vp_state(connection, topic, 1).risr) == 2), "VP 1 has no in-sync follower"
        before = vp_state(connection, topic, 1)
        ray.kill(vp_handle(connection.cluster, topic, 1, before.leader))
        assert wait_until(lambda: vp_handle(connection.cluster, topic, 1, before.leader) is None, 30)
        after = fail_over_virtual_partition(connection.store, connection.cluster, topic, 1)
        assert after.leader != before.leader and after.leader_epoch == before.leader_epoch + 1
        assert vp_state(connection, topic, 1) == after
        loop.wait_for(len(loop.acknowledged) + 1000)
        # The old leader comes back as a follower: it truncates what the new leader lacks and rejoins.
        metadata = admin.topic_metadata(topic)
        start_vp_replica(connection.cluster, connection.store.endpoint, metadata, 1, before.leader,
                         connection.state.data_root)
        ray.get(vp_handle(connection.cluster, topic, 1, before.leader).become_follower.remote(
            after.leader_epoch, after.leader), timeout=WAIT_S)
        assert wait_until(lambda: set(vp_state(connection, topic, 1).risr) == set(before.replicas)), "did not rejoin"
        loop.wait_for(len(loop.acknowledged) + 500)
    finally:
        acknowledged = loop.stop()
    logs = check_exactly_once(connection, topic, acknowledged)
    for vp, records in logs.items():
        for replica in vp_state(connection, topic, vp).replicas:
            assert wait_until(lambda: len(vp_log(connection, topic, vp, replica)) == len(records)), "replica behind"
            assert vp_log(connection, topic, vp, replica) == records, f"replica {replica} of VP {vp} differs"
    messages = read_everything(connection, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(v for _, _, _, v in acknowledged)
    assert feeder_actor_name(connection.cluster, topic, 0) in {
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
