"""Disk faults on a real cluster: power loss of a write or read node, and a full disk.

Each fault kind of ``mafka4 chaos`` that hits a node's disk, alone and scripted, under a few
hundred acks=all messages (min_insync_replicas 2 on the write side), checked as a user relies on
it: nothing acknowledged is lost, the cluster repairs itself, and the replicas hold the same log.

* **Power loss** (``simulations.chaos.disk_faults``): the node's actors are SIGKILLed while
  messages are in flight and their log files cut back to the last fsync they recorded
  (``mafka4.log.fsync_points``; the session clusters record them). What the victim lost its
  peers still hold: a follower refetches it, a leader is failed over and truncates to the new
  one, a read node's VPs fail over to their RISR peers and catch up from them.
* **Disk full** (``log_dir_bytes_max``, ``mafka4.log.log_dir_budget``): a leader refuses produce
  with the retriable ``DiskFull`` and writes nothing; the producer retries until space returns.
  A follower or read node that cannot append leaves the ISR / RISR and returns once cleared.

No assert reads a clock: every wait is for a state, bounded generously for a shared machine
(one hold of ``HOLD_S`` shows that production is held while the leader's disk is full).
"""

from __future__ import annotations

import random
import time

import pytest
import ray

from mafka4 import errors
from mafka4.batch_payload import encode_batch
from mafka4.client.producer import Producer
from mafka4.limits import Acks
from mafka4.physical.handles import replica_handle
from mafka4.physical.topics import TopicStore
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.vp_store import VirtualStore
from simulations.chaos.disk_faults import DiskFaults
from simulations.chaos.settings import FaultTiming

from fault_helpers import (
    MESSAGES, RECOVERY_S, acknowledged_of, active_controller, assert_physical_topic_whole, assert_virtual_topic_whole,
    create_physical_topic, create_virtual_topic, full_isr, partition_state, produce, produce_keyed, send,
    virtual_topic_in_sync, vp_state,
)
from virtual_helpers import ProduceLoop, vp_log
from wait_helpers import wait_until

HOLD_S = 3  # a full disk held this long: longer than the topics' lag bound, so followers leave


def disk_faults(connection, topic: str) -> DiskFaults:
    """The chaos run's disk faults, aimed by hand (each call names its node: nothing is drawn)."""
    return DiskFaults(connection.cluster, topic, TopicStore(connection.store, connection.cluster),
                      VirtualStore(connection.store, connection.cluster), random.Random(0), FaultTiming())


def restarted(connection, topic: str, replica: str, old_pid: int) -> bool:
    """True once ``replica`` runs again in a new process."""
    handle = replica_handle(connection.cluster, topic, 0, replica)
    try:
        return handle is not None and ray.get(handle.describe.remote(), timeout=10)["pid"] != old_pid
    except (ray.exceptions.RayError, TimeoutError):
        return False


# --- power loss ---------------------------------------------------------------------------------


@pytest.mark.parametrize("victim", ["follower", "leader"])
def test_a_power_loss_of_a_write_node_loses_no_acknowledged_message(cluster, victim):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, f"power{victim}")
    node = state.leader if victim == "leader" else next(r for r in state.replicas if r != state.leader)
    acknowledged = produce(cluster, topic, 0)
    old_pid = ray.get(replica_handle(cluster.cluster, topic, 0, node).describe.remote(), timeout=60)["pid"]
    with Producer(topic, connection=cluster, acks="all", linger_ms=1) as producer:
        sent = send(producer, MESSAGES)  # in flight: some acknowledged, not all fsynced, when the power goes
        _, outcome = disk_faults(cluster, topic).power_loss_write_node(node)
        print(f"\n{victim} {node}: {outcome}")
        assert outcome.startswith("power loss: SIGKILLed") and f"{topic}-0" in outcome, outcome
        sent += send(producer, 2 * MESSAGES)  # while the cluster repairs itself
        producer.flush()
        acknowledged += acknowledged_of(sent)
    assert wait_until(lambda: restarted(cluster, topic, node, old_pid), RECOVERY_S), f"{node} was not started again"
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S), \
        f"{node} did not rejoin: {partition_state(cluster, topic)}"
    after = partition_state(cluster, topic)
    if victim == "leader":
        assert after.leader != node and after.leader_epoch > state.leader_epoch, "the leader was not failed over"
    acknowledged += produce(cluster, topic, 3 * MESSAGES)
    assert_physical_topic_whole(cluster, topic, acknowledged)


def test_a_power_loss_of_a_read_node_recovers_its_vps_from_their_risr_peers(read_cluster):
    connection = read_cluster
    topic, acknowledged = virtual_topic_in_sync(connection, "powerread")
    before = vp_state(connection, topic, 0)
    loop = ProduceLoop(connection, topic, after=acknowledged, messages_max=MESSAGES)
    _, outcome = disk_faults(connection, topic).power_loss_read_node(before.leader)
    print(f"\nread node {before.leader}: {outcome}")
    assert outcome.startswith("power loss: SIGKILLed pid"), outcome
    assert wait_until(lambda: vp_state(connection, topic, 0).leader_epoch > before.leader_epoch, RECOVERY_S), \
        "the controller did not fail VP 0 over"
    assert vp_state(connection, topic, 0).leader != before.leader
    assert wait_until(lambda: loop.done, RECOVERY_S), "the producer did not finish"
    acknowledged += loop.stop()
    assert wait_until(lambda: all(len(vp_state(connection, topic, vp).risr) == 2 for vp in (0, 1)), RECOVERY_S), \
        "the restarted node's replicas did not rejoin the RISR"
    acknowledged = produce_keyed(connection, topic, acknowledged)  # feeding and replication go on
    assert_virtual_topic_whole(connection, topic, acknowledged)


def test_a_power_loss_of_the_only_read_replica_loses_nothing_and_moves_no_offset_a_reader_saw(read_cluster):
    """``read_replicas=1``: the VP's only replica loses its unflushed tail and feeds it again from
    the physical log. A reader saw only flushed offsets (``risr.state``), so each holds the same
    record after the loss."""
    connection = read_cluster
    topic = create_virtual_topic(connection, "powerone", read_replicas=1)
    acknowledged = produce_keyed(connection, topic)
    before = vp_state(connection, topic, 0)
    loop = ProduceLoop(connection, topic, after=acknowledged, messages_max=MESSAGES)
    assert wait_until(lambda: loop.sent > MESSAGES // 4, RECOVERY_S), "the producer is stuck"
    seen = [(r.offset, r.key, r.value) for r in vp_log(connection, topic, 0, before.leader)]
    _, outcome = disk_faults(connection, topic).power_loss_read_node(before.leader)
    print(f"\nread node {before.leader}: {outcome}; a reader had seen {len(seen)} records of VP 0")
    assert outcome.startswith("power loss: SIGKILLed pid"), outcome
    assert wait_until(lambda: vp_state(connection, topic, 0).leader_epoch > before.leader_epoch, RECOVERY_S), \
        "VP 0's only replica does not lead again"
    assert wait_until(lambda: loop.done, RECOVERY_S), "the producer did not finish"
    acknowledged += loop.stop()
    acknowledged = produce_keyed(connection, topic, acknowledged)  # feeding goes on
    assert_virtual_topic_whole(connection, topic, acknowledged)
    after = [(r.offset, r.key, r.value) for r in vp_log(connection, topic, 0, before.leader)]
    assert after[:len(seen)] == seen, "an offset a reader saw holds another record after the power loss"


# --- disk full ----------------------------------------------------------------------------------


def test_a_leader_whose_disk_is_full_refuses_with_disk_full_writes_nothing_and_takes_the_retries_once_cleared(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "fullleader")
    acknowledged = produce(cluster, topic, 0)
    leader = replica_handle(cluster.cluster, topic, 0, state.leader)
    before = ray.get(leader.describe.remote(), timeout=60)
    ray.get(leader.set_log_dir_bytes_max.remote(0), timeout=60)
    try:
        with pytest.raises(errors.DiskFull, match="log_dir_bytes_max") as refused:
            ray.get(leader.produce.remote(encode_batch([(None, b"refused", 1, None)]), Acks.ALL), timeout=60)
        assert refused.value.retriable
        with Producer(topic, connection=cluster, acks="all", linger_ms=1) as producer:
            sent = send(producer, MESSAGES)
            time.sleep(HOLD_S)  # the producer retries DiskFull meanwhile
            held = ray.get(leader.describe.remote(), timeout=60)
            assert (held["log_end_offset"], held["size_bytes"]) == (before["log_end_offset"], before["size_bytes"]), \
                "a refused append left bytes behind"
            assert not any(future.done() for _, future in sent), "a message was answered while the disk was full"
            ray.get(leader.set_log_dir_bytes_max.remote(None), timeout=60)
            producer.flush()
            acknowledged += acknowledged_of(sent)
    finally:
        ray.get(leader.set_log_dir_bytes_max.remote(None), timeout=60)
    after = partition_state(cluster, topic)
    assert (after.leader, after.leader_epoch) == (state.leader, state.leader_epoch), "no failover for a full disk"
    assert_physical_topic_whole(cluster, topic, acknowledged)


def test_a_follower_whose_disk_is_full_leaves_the_isr_and_returns_once_cleared(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "fullfollower")
    follower = next(replica for replica in state.replicas if replica != state.leader)
    acknowledged = produce(cluster, topic, 0)
    handle = replica_handle(cluster.cluster, topic, 0, follower)
    ray.get(handle.set_log_dir_bytes_max.remote(0), timeout=60)
    try:
        acknowledged += produce(cluster, topic, MESSAGES)  # acknowledged once the ISR shrank to the two others
        assert wait_until(lambda: follower not in partition_state(cluster, topic).isr, RECOVERY_S), \
            "a follower that cannot append stayed in the ISR"
        acknowledged += produce(cluster, topic, 2 * MESSAGES)
    finally:
        ray.get(handle.set_log_dir_bytes_max.remote(None), timeout=60)
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S), \
        f"the follower did not rejoin: {partition_state(cluster, topic)}"
    assert_physical_topic_whole(cluster, topic, acknowledged)


def test_a_read_node_whose_disk_is_full_stops_appending_and_feeds_everything_once_cleared(read_cluster):
    connection = read_cluster
    topic, acknowledged = virtual_topic_in_sync(connection, "fullread")
    state = vp_state(connection, topic, 0)
    full = next(replica for replica in state.replicas if replica != state.leader)  # VP 0's follower (may lead VP 1)
    node = read_node_handle(connection.cluster, full)
    ray.get(node.set_log_dir_bytes_max.remote(0), timeout=60)
    try:
        acknowledged = produce_keyed(connection, topic, acknowledged)  # the write side does not wait for read nodes
        assert wait_until(lambda: full not in vp_state(connection, topic, 0).risr, RECOVERY_S), \
            "a VP follower that cannot append stayed in the RISR"
    finally:
        ray.get(node.set_log_dir_bytes_max.remote(None), timeout=60)
    assert wait_until(lambda: all(len(vp_state(connection, topic, vp).risr) == 2 for vp in (0, 1)), RECOVERY_S), \
        "the node's replicas did not rejoin the RISR"
    assert_virtual_topic_whole(connection, topic, acknowledged)
