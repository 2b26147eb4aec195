"""The read path on a real cluster: read nodes split physical partitions into VPs, read by VirtualConsumer.

Checked against what producers had acknowledged: every acknowledged message is in exactly
one VP exactly once (its source ``(partition, offset)`` appears once over all VP logs), in
the VP the layout names for its key, with each key's messages in produce order; this holds
across a read node's death (its VPs lead again from their logs, or fail over to the other
node), a paused physical follower and a paused VP follower, which the cluster's controller
repairs by itself. The session cluster has one read node; the RISR tests share a cluster of
their own with two (``read_cluster``).
"""

from __future__ import annotations

import datetime
import re
import time
from pathlib import Path

import etcd3
import grpc
import pytest
import ray

from mafka4 import errors
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.metadata import keys
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.physical.handles import replica_handle
from mafka4.virtual.consumer_reads import ConsumerRead
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

from virtual_helpers import (
    FAULT_TEST_PAUSE_S, WAIT_S, ProduceLoop, TimedReader, check_exactly_once, describe_vp, feed_of, read_everything,
    topic_name, vp_log,
)
from wait_helpers import wait_until

# The controller learns of a death when the read node's liveness lease expires (5 s), then
# restarts it and fails its VPs over; on this shared machine that may take much longer.
REPAIR_WAIT_S = 180


def vp_state(connection, topic: str, vp: int):
    return VirtualStore(connection.store, connection.cluster).state(topic, vp)[0]


def actor_id(handle) -> str | None:
    return None if handle is None else handle._actor_id.hex()


def node_actor(connection, node: str) -> str | None:
    return actor_id(read_node_handle(connection.cluster, node))


def controller_log(connection) -> str:
    return (Path(connection.state.home) / "controller.log").read_text()


def hosted_roles(connection, node: str, topic: str) -> dict:
    return ray.get(read_node_handle(connection.cluster, node).roles.remote(topic), timeout=WAIT_S)


# --- on the session cluster (one read node) -------------------------------------------------


def test_every_acknowledged_message_is_in_one_vp_once_across_a_read_node_restart_and_a_paused_follower(cluster):
    admin = Admin(cluster)
    topic = topic_name("vp")
    metadata = admin.create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=4, replica_lag_ms_max=1500,
                                  read_mode="mafka4")
    loop = ProduceLoop(cluster, topic, pause_s=FAULT_TEST_PAUSE_S)
    try:
        loop.wait_for(500)
        # The only read node dies: its VPs (read_replicas=1) have no other RISR member, so the
        # controller starts the node again and each VP leads the next epoch from the node's log.
        before = {vp: vp_state(cluster, topic, vp) for vp in range(4)}
        dead = node_actor(cluster, "r0")
        ray.kill(read_node_handle(cluster.cluster, "r0"))
        killed_at = len(loop.acknowledged)
        assert wait_until(lambda: node_actor(cluster, "r0") not in (None, dead), REPAIR_WAIT_S), "not restarted"
        assert wait_until(lambda: all(vp_state(cluster, topic, vp).leader_epoch > before[vp].leader_epoch
                                      for vp in range(4)), REPAIR_WAIT_S), "the VPs did not lead again"
        assert wait_until(lambda: (feed_of(cluster, topic, 0, "r0") or {}).get("rounds", 0) > 0), "not feeding"
        loop.wait_for(killed_at + 500)
        # Feed streams read from an in-sync follower. Partition 1's only follower stops
        # replicating: it leaves the ISR, and the stream goes on reading from the leader.
        state = metadata.partitions[1]
        follower = next(r for r in state.replicas if r != state.leader)
        assert wait_until(lambda: feed_of(cluster, topic, 1, "r0")["source"] == follower)
        admin.inject_fault(topic, kind="physical", partition=1, replica=follower, paused=True)
        leader = replica_handle(cluster.cluster, topic, 1, state.leader)
        assert wait_until(lambda: ray.get(leader.describe.remote())["isr"] == [state.leader]), "follower stayed in ISR"
        assert wait_until(lambda: feed_of(cluster, topic, 1, "r0")["source"] == state.leader), "kept the follower"
        loop.wait_for(len(loop.acknowledged) + 500)
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
    assert "read node r0 was not running; started it" in controller_log(cluster)


def test_read_mode_and_read_replicas_are_checked_at_creation(cluster):
    admin = Admin(cluster)
    wide = topic_name("wide")
    with pytest.raises(errors.NotEnoughReadNodes, match="needs 2 live read nodes, 1 are live .*read_mode='mafka3'"):
        admin.create_topic(wide, partitions=1, read_replicas=2, read_mode="mafka4")
    assert wide not in admin.list_topics()
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True) if wide in a["name"]], "actors left behind"
    assert hosted_roles(cluster, "r0", wide) == {}
    with pytest.raises(errors.InvalidConfig, match="read_mode='fast'"):
        admin.create_topic(topic_name("bad"), read_mode="fast")
    with pytest.raises(errors.InvalidConfig, match="has no virtual partitions"):
        admin.create_topic(topic_name("bad"), read_mode="mafka3", virtual_partitions=2)

    classic = topic_name("m3")
    config = admin.create_topic(classic, partitions=1, read_mode="mafka3").config
    assert (config.read_mode, config.virtual_partitions, config.read_replicas) == ("mafka3", 0, 0)
    assert not cluster.store.get_prefix(keys.virtual_partitions_prefix(cluster.cluster, classic))
    assert hosted_roles(cluster, "r0", classic) == {}
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
    assert hosted_roles(cluster, "r0", default) == {0: ("leader", 0), 1: ("leader", 0)}, "logs in the running node"
    admin.delete_topic(default)
    assert hosted_roles(cluster, "r0", default) == {}
    assert not cluster.store.get_prefix(keys.topic_children_prefix(cluster.cluster, default))


def test_a_read_node_refuses_to_host_vps_of_a_deleted_topic_or_that_do_not_exist(cluster):
    admin = Admin(cluster)
    topic = topic_name("gone")
    metadata = admin.create_topic(topic, partitions=1, read_mode="mafka4")
    state = vp_state(cluster, topic, 0)
    node = read_node_handle(cluster.cluster, "r0")
    missing = VirtualPartitionState(7, state.hash_range, "r0", 0, ("r0",), ("r0",))
    with pytest.raises(errors.UnknownVirtualPartition, match="no virtual partitions \\[7\\]"):
        ray.get(node.host.remote(topic, metadata.config, [missing]), timeout=WAIT_S)
    admin.delete_topic(topic)
    with pytest.raises(errors.UnknownTopic, match="was deleted"):
        ray.get(node.host.remote(topic, metadata.config, [state]), timeout=WAIT_S)
    assert hosted_roles(cluster, "r0", topic) == {}
    with pytest.raises(errors.UnknownTopic, match="does not exist"):
        admin.split_virtual_partition(topic, 0)


def test_a_read_node_reports_its_hosted_vps_fed_bytes_and_fetch_cpu_while_producers_and_a_reader_run(cluster):
    topic = topic_name("load")
    Admin(cluster).create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=4, read_mode="mafka4")
    assert wait_until(lambda: len(hosted_roles(cluster, "r0", topic)) == 4), "the VPs were not hosted"
    node = read_node_handle(cluster.cluster, "r0")
    loaded_since_ms = time.time_ns() // 1_000_000
    loop, reader = ProduceLoop(cluster, topic), TimedReader(cluster, topic)

    def loaded_report() -> ReadNodeLoad | None:
        """The node's report, once one covers a window wholly under load and shows feed and fetches."""
        found = cluster.store.get(keys.read_node_load(cluster.cluster, "r0"))
        report = None if found is None else ReadNodeLoad.from_json(found.value)
        if (report is None or report.measured_at_ms - report.window_ms < loaded_since_ms
                or report.fed_bytes_per_s <= 0 or report.fetch_cpu_cores <= 0):
            return None
        return report

    try:
        report = wait_until(loaded_report, REPAIR_WAIT_S)
        assert report is not None, "no report of a loaded window (every load_report_interval_ms, 10 s by default)"
        hosted = ray.get(node.describe.remote(), timeout=WAIT_S)["hosted_vps"]
    finally:
        reader.stop()
        loop.stop()
    # Every hosted replica is counted once: of an open VP, or apart, of a sealed one (another test's split).
    assert report.node_id == "r0" and report.hosted_vp_replicas + report.sealed_vp_replicas == hosted >= 4, \
        (report, hosted)
    assert report.fetch_cpu_cores <= 1.0, "one thread builds every fetch answer"


# --- on a cluster of its own (two read nodes: RR=2), with the controller `mafka4 up` starts -----


def check_replicas_hold_the_leaders_log(connection, topic: str, logs: dict) -> None:
    for vp, records in logs.items():
        for replica in vp_state(connection, topic, vp).replicas:
            assert wait_until(lambda: vp_log_if_serving(connection, topic, vp, replica) == records), \
                f"replica {replica} of VP {vp} differs or does not serve: {len(records)} records at its leader"


def vp_log_if_serving(connection, topic: str, vp: int, replica: str) -> list | None:
    """The replica's log, or None while it is out of the RISR: a follower lagging on a loaded
    machine leaves it for a while and refuses reads until it is back."""
    try:
        return vp_log(connection, topic, vp, replica)
    except errors.ReadReplicaNotInSync:
        return None


def create_risr_topic(connection, prefix: str) -> str:
    topic = topic_name(prefix)
    Admin(connection).create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=2,
                                   read_mode="mafka4", read_replica_lag_ms_max=3000)
    return topic


def test_a_paused_vp_follower_leaves_the_risr_and_a_dead_read_node_s_vps_fail_over(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = create_risr_topic(connection, "risr")
    loop = ProduceLoop(connection, topic, pause_s=FAULT_TEST_PAUSE_S)
    reader = None
    try:
        loop.wait_for(500)
        # A paused follower leaves the RISR (recorded in etcd) and stops serving reads; it returns once unpaused.
        state = vp_state(connection, topic, 0)
        follower = next(r for r in state.replicas if r != state.leader)
        admin.inject_fault(topic, kind="virtual", partition=0, replica=follower, paused=True)
        assert wait_until(lambda: vp_state(connection, topic, 0).risr == (state.leader,)), "follower stayed in RISR"
        # Cut off from its leader, the follower stops serving by itself within the lag bound.
        assert wait_until(lambda: not describe_vp(connection, topic, 0, follower)["serving"], 10)
        node = read_node_handle(connection.cluster, follower)
        refused = ray.get(node.fetch.remote([ConsumerRead(VpId(topic, 0), 0)], 1024, 0), timeout=WAIT_S)[0]
        assert isinstance(refused.error, errors.ReadReplicaNotInSync) and refused.read is None
        admin.inject_fault(topic, kind="virtual", partition=0, replica=follower, paused=False)
        assert wait_until(lambda: set(vp_state(connection, topic, 0).risr) == set(state.replicas)), "did not rejoin"

        # The read node leading VP 1 dies mid-stream, with every VP replica it hosts. Nothing but
        # the controller acts: the node's liveness key expires, it answers no ping, so the VPs it
        # led fail over to their RISR members on the other node at the next epoch; the node is
        # started again, its replicas come back as followers, truncate what the new leaders lack
        # and rejoin the RISR.
        assert wait_until(lambda: len(vp_state(connection, topic, 1).risr) == 2), "VP 1 has no in-sync follower"
        before = vp_state(connection, topic, 1)
        reader = TimedReader(connection, topic)
        assert wait_until(lambda: any(vp == 1 for _, vp, _ in reader.consumed)), "the reader reads nothing of VP 1"
        killed_at = time.monotonic()
        killed_at_text = datetime.datetime.now().isoformat(sep=" ", timespec="milliseconds")
        dead = node_actor(connection, before.leader)
        ray.kill(read_node_handle(connection.cluster, before.leader))
        sent_after_death = len(loop.sent_values)  # these can only reach readers through a new leader
        assert wait_until(lambda: vp_state(connection, topic, 1).leader_epoch > before.leader_epoch, REPAIR_WAIT_S), \
            "the controller did not fail VP 1 over"
        failed_over_after_s = time.monotonic() - killed_at
        after = vp_state(connection, topic, 1)
        assert after.leader != before.leader and after.leader_epoch == before.leader_epoch + 1
        assert wait_until(lambda: node_actor(connection, before.leader) not in (None, dead), REPAIR_WAIT_S)
        assert wait_until(lambda: set(vp_state(connection, topic, 1).risr) == set(before.replicas), REPAIR_WAIT_S), \
            "the old leader was not restarted as a follower, or did not rejoin the RISR"
        assert vp_state(connection, topic, 1).leader == after.leader
        loop.wait_for(len(loop.acknowledged) + 500)
        later = set(loop.sent_values[sent_after_death:])
        assert wait_until(lambda: reader.first_of(1, later) is not None), "nothing new read from VP 1"
        print(f"\nread node {before.leader} (leading VP 1) killed at {killed_at_text}: etcd named {after.leader} "
              f"leader after {failed_over_after_s:.1f} s (polled); the first message sent after the old leader was "
              f"gone was read from VP 1 {reader.first_of(1, later) - killed_at:.1f} s after the kill")
    finally:
        acknowledged = loop.stop()
        if reader is not None:
            reader.stop()
    handled = [line for line in controller_log(connection).splitlines() if f"{topic}/v1" in line]
    print("controller, on VP 1:\n" + "\n".join(handled))
    # Dead, or already restarted (with no role) when the controller looked: either way the RISR member takes over.
    assert any(re.search(rf"{topic}/v1: leader {before.leader} \((dead|restarted)\) -> {after.leader}", line)
               for line in handled)
    check_replicas_hold_the_leaders_log(connection, topic, check_exactly_once(connection, topic, acknowledged))
    messages = read_everything(connection, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(v for _, _, _, v in acknowledged)
    admin.delete_topic(topic)


def test_lost_liveness_leases_of_live_read_nodes_cause_no_failover_or_restart(read_cluster):
    """As after an etcd outage: every read node's lease expires while the nodes run."""
    connection = read_cluster
    topic = create_risr_topic(connection, "vpleases")
    before = {vp: vp_state(connection, topic, vp) for vp in (0, 1)}
    actors = {node: node_actor(connection, node) for node in ("r0", "r1")}
    prefix = keys.read_nodes_prefix(connection.cluster)  # both live: the read_cluster fixture waited for them
    host, _, port = connection.state.etcd_endpoint.rpartition(":")
    client = etcd3.client(host=host, port=int(port), timeout=5)
    try:
        # Revoked again and again for longer than a lease, so the controller surely examines
        # the nodes while the keys are gone (a node registers anew within a third of its TTL).
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            for lease_id in {meta.lease_id for _, meta in client.get_prefix(prefix)}:
                try:
                    client.revoke_lease(lease_id)
                except grpc.RpcError:  # the node replaced that lease since the read
                    pass
            time.sleep(0.2)
    finally:
        client.close()
    assert wait_until(lambda: len(connection.store.get_prefix(prefix)) == 2), "not registered again"
    for vp, state in before.items():
        now = vp_state(connection, topic, vp)
        assert (now.leader, now.leader_epoch) == (state.leader, state.leader_epoch), "no failover of a live VP leader"
    assert {node: node_actor(connection, node) for node in ("r0", "r1")} == actors, "no live node was restarted"
    Admin(connection).delete_topic(topic)
