"""The read path on a real cluster: feeders split physical partitions into VPs, read by VirtualConsumer.

Checked against what producers had acknowledged: every acknowledged message is in exactly
one VP exactly once (its source ``(partition, offset)`` appears once over all VP logs), in
the VP the layout names for its key, with each key's messages in produce order; this holds
across a feeder restart, a paused physical follower, a paused VP follower, and the deaths
of a VP leader, a VP follower and a feeder, which the cluster's controller repairs by
itself (failover, restarts). The session cluster has one read node; the RISR tests share a
cluster of their own with two (``read_cluster``).
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
from mafka4.coordinator import keys
from mafka4.physical.launcher import replica_handle
from mafka4.virtual.feeder import feeder_actor_name
from mafka4.virtual.launcher import feeder_handle, restart_feeder, vp_handle
from mafka4.virtual.metadata import VirtualStore

from virtual_helpers import (
    WAIT_S, ProduceLoop, TimedReader, check_exactly_once, read_everything, topic_name, vp_log, wait_until,
)

# The controller learns of a death when the actor's liveness lease expires (5 s) and then
# restarts actors; on this shared machine that may take much longer.
REPAIR_WAIT_S = 180


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


# --- on a cluster of its own (two read nodes: RR=2), with the controller `mafka4 up` starts -----


def vp_state(connection, topic: str, vp: int):
    return VirtualStore(connection.store, connection.cluster).state(topic, vp)[0]


def actor_id(handle) -> str | None:
    return None if handle is None else handle._actor_id.hex()


def controller_log(connection) -> str:
    return (Path(connection.state.home) / "controller.log").read_text()


def check_replicas_hold_the_leaders_log(connection, topic: str, logs: dict) -> None:
    for vp, records in logs.items():
        for replica in vp_state(connection, topic, vp).replicas:
            assert wait_until(lambda: len(vp_log(connection, topic, vp, replica)) == len(records)), "replica behind"
            assert vp_log(connection, topic, vp, replica) == records, f"replica {replica} of VP {vp} differs"


def read_path_actors(connection, topic: str, states: dict) -> dict[str, str | None]:
    """The Ray actor id of every VP replica of ``states`` and of the topic's two feeders."""
    handles = {f"v{vp}/{r}": vp_handle(connection.cluster, topic, vp, r) for vp, s in states.items() for r in s.replicas}
    handles |= {f"feeder {p}": feeder_handle(connection.cluster, topic, p) for p in (0, 1)}
    return {name: actor_id(handle) for name, handle in handles.items()}


def create_risr_topic(connection, prefix: str) -> str:
    topic = topic_name(prefix)
    Admin(connection).create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=2,
                                   read_mode="mafka4", read_replica_lag_ms_max=3000)
    return topic


def test_a_paused_vp_follower_leaves_the_risr_and_the_controller_fails_a_dead_vp_leader_over(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = create_risr_topic(connection, "risr")
    loop = ProduceLoop(connection, topic)
    reader = None
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

        # The leader of VP 1 dies mid-stream. Nothing but the controller acts: its liveness key
        # expires, it answers no ping, so a RISR follower takes over at the next epoch; the old
        # leader is started again on its node as a follower, truncates what the new leader
        # lacks and rejoins the RISR.
        assert wait_until(lambda: len(vp_state(connection, topic, 1).risr) == 2), "VP 1 has no in-sync follower"
        before = vp_state(connection, topic, 1)
        reader = TimedReader(connection, topic)
        assert wait_until(lambda: any(vp == 1 for _, vp, _ in reader.consumed)), "the reader reads nothing of VP 1"
        killed_at = time.monotonic()
        killed_at_text = datetime.datetime.now().isoformat(sep=" ", timespec="milliseconds")
        ray.kill(vp_handle(connection.cluster, topic, 1, before.leader))
        assert wait_until(lambda: vp_handle(connection.cluster, topic, 1, before.leader) is None, 30)
        sent_after_death = len(loop.sent_values)  # these can only reach readers through a new leader
        assert wait_until(lambda: vp_state(connection, topic, 1).leader_epoch > before.leader_epoch, REPAIR_WAIT_S), \
            "the controller did not fail VP 1 over"
        failed_over_after_s = time.monotonic() - killed_at
        after = vp_state(connection, topic, 1)
        assert after.leader != before.leader and after.leader_epoch == before.leader_epoch + 1
        assert wait_until(lambda: set(vp_state(connection, topic, 1).risr) == set(before.replicas), REPAIR_WAIT_S), \
            "the old leader was not restarted as a follower, or did not rejoin the RISR"
        assert vp_state(connection, topic, 1).leader == after.leader
        loop.wait_for(len(loop.acknowledged) + 500)
        later = set(loop.sent_values[sent_after_death:])
        assert wait_until(lambda: reader.first_of(1, later) is not None), "nothing new read from VP 1"
        print(f"\nVP 1 leader {before.leader} killed at {killed_at_text}: etcd named {after.leader} leader after "
              f"{failed_over_after_s:.1f} s (polled); the first message sent after the old leader was gone was "
              f"read from VP 1 {reader.first_of(1, later) - killed_at:.1f} s after the kill")
    finally:
        acknowledged = loop.stop()
        if reader is not None:
            reader.stop()
    handled = [line for line in controller_log(connection).splitlines() if f"{topic}/v1" in line]
    print("controller, on VP 1:\n" + "\n".join(handled))
    assert any(f"{topic}/v1: leader {before.leader} is dead" in line for line in handled)
    check_replicas_hold_the_leaders_log(connection, topic, check_exactly_once(connection, topic, acknowledged))
    messages = read_everything(connection, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(v for _, _, _, v in acknowledged)
    assert feeder_actor_name(connection.cluster, topic, 0) in {
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    admin.delete_topic(topic)


def test_the_controller_restarts_a_dead_vp_follower_and_a_dead_feeder(read_cluster):
    connection = read_cluster
    topic = create_risr_topic(connection, "restart")
    loop = ProduceLoop(connection, topic)
    try:
        loop.wait_for(1000)
        assert wait_until(lambda: len(vp_state(connection, topic, 0).risr) == 2), "VP 0 has no in-sync follower"
        state = vp_state(connection, topic, 0)
        follower = next(r for r in state.replicas if r != state.leader)
        dead_follower = actor_id(vp_handle(connection.cluster, topic, 0, follower))
        dead_feeder = actor_id(feeder_handle(connection.cluster, topic, 1))
        ray.kill(vp_handle(connection.cluster, topic, 0, follower))
        ray.kill(feeder_handle(connection.cluster, topic, 1))
        acknowledged_at_kill = len(loop.acknowledged)

        assert wait_until(lambda: actor_id(vp_handle(connection.cluster, topic, 0, follower)) not in (None, dead_follower),
                          REPAIR_WAIT_S), "the follower was not restarted"
        assert wait_until(lambda: actor_id(feeder_handle(connection.cluster, topic, 1)) not in (None, dead_feeder),
                          REPAIR_WAIT_S), "the feeder was not restarted"
        restarted = vp_handle(connection.cluster, topic, 0, follower)
        assert wait_until(lambda: ray.get(restarted.describe.remote(), timeout=WAIT_S)["role"] == "follower")
        assert wait_until(lambda: set(vp_state(connection, topic, 0).risr) == set(state.replicas), REPAIR_WAIT_S), \
            "the restarted follower did not rejoin the RISR"
        assert wait_until(lambda: ray.get(restarted.describe.remote(), timeout=WAIT_S)["serving"])
        feeder = feeder_handle(connection.cluster, topic, 1)
        assert wait_until(lambda: ray.get(feeder.describe.remote(), timeout=WAIT_S)["rounds"] > 0), "not feeding"
        loop.wait_for(acknowledged_at_kill + 1500)
    finally:
        acknowledged = loop.stop()
    after = vp_state(connection, topic, 0)
    assert (after.leader, after.leader_epoch) == (state.leader, state.leader_epoch), "a follower's death moves no leader"
    log = controller_log(connection)
    assert f"{topic}/v0: restarted ['{follower}'] to follow {state.leader}" in log
    assert f"{topic}-1: the feeder was dead; restarted it on" in log
    check_replicas_hold_the_leaders_log(connection, topic, check_exactly_once(connection, topic, acknowledged))
    messages = read_everything(connection, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(v for _, _, _, v in acknowledged)
    Admin(connection).delete_topic(topic)


def test_lost_liveness_leases_of_live_vp_replicas_and_feeders_cause_no_failover_or_restart(read_cluster):
    """As after an etcd outage: every read-path lease of a topic expires while the actors run."""
    connection = read_cluster
    topic = create_risr_topic(connection, "vpleases")
    before = {vp: vp_state(connection, topic, vp) for vp in (0, 1)}
    actors = read_path_actors(connection, topic, before)
    prefixes = [f"{keys.read_replicas_prefix(connection.cluster)}{topic}/", f"{keys.feeders_prefix(connection.cluster)}{topic}/"]
    assert wait_until(lambda: [len(connection.store.get_prefix(p)) for p in prefixes] == [4, 2])
    host, _, port = connection.state.etcd_endpoint.rpartition(":")
    client = etcd3.client(host=host, port=int(port), timeout=5)
    try:
        # Revoked again and again for longer than a lease, so the controller surely examines
        # the items while the keys are gone (an actor registers anew within a third of its TTL).
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            for prefix in prefixes:
                for lease_id in {meta.lease_id for _, meta in client.get_prefix(prefix)}:
                    try:
                        client.revoke_lease(lease_id)
                    except grpc.RpcError:  # the actor replaced that lease since the read
                        pass
            time.sleep(0.2)
    finally:
        client.close()
    assert wait_until(lambda: [len(connection.store.get_prefix(p)) for p in prefixes] == [4, 2]), "not registered again"
    assert re.search(rf"{topic}/v\d: .* answer a ping: alive", controller_log(connection)), "keys gone, yet not examined"
    for vp, state in before.items():
        now = vp_state(connection, topic, vp)
        assert (now.leader, now.leader_epoch) == (state.leader, state.leader_epoch), "no failover of a live VP leader"
    running = read_path_actors(connection, topic, before)
    assert running == actors, "no live actor was restarted"
    Admin(connection).delete_topic(topic)
