"""Disk faults on a real cluster: power loss of a write or read node, and a full disk.

Each fault kind of ``mafka4 chaos`` that hits a node's disk, alone and scripted, under a few
hundred acks=all messages (min_insync_replicas 2 on the write side), checked as a user relies on
it: nothing acknowledged is lost, the cluster repairs itself, and the replicas hold the same log.

* **Power loss** (``simulations.chaos.disk_faults``): the node's actors are SIGKILLed while
  messages are in flight and their log files cut back to the last fsync they recorded
  (``mafka4.log.fsync_points``; the session clusters record them). What the victim lost its
  peers still hold: a follower refetches it, a leader is failed over and truncates to the new
  one, a read node's VPs fail over to their RISR peers and catch up from them. A VP with one
  read replica feeds what it lost again from the physical log, and a reader that read the lost
  tail is told and reads it again.
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
from mafka4.client.consumer import Consumer
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


def test_a_power_loss_of_the_only_read_replica_loses_nothing_and_a_reader_of_a_moved_offset_reads_it_again(
        read_cluster):
    """``read_replicas=1``: the VP's only replica serves its unflushed tail, loses it with the power
    and feeds it again from the physical log, in a new leader epoch and maybe in another order. A
    reader that read the lost tail is told by its next fetch, which names the epoch of the last
    record it read (Kafka's KIP-320), and reads again from where the epochs part: duplicates,
    never a gap. No acknowledged record is lost."""
    connection = read_cluster
    topic = create_virtual_topic(connection, "powerone", read_replicas=1)
    acknowledged = produce_keyed(connection, topic)
    before = vp_state(connection, topic, 0)
    with Consumer(topic, connection=connection, from_beginning=True) as reader:
        read = []
        loop = ProduceLoop(connection, topic, after=acknowledged, messages_max=MESSAGES)
        deadline = time.monotonic() + RECOVERY_S
        while loop.sent <= MESSAGES // 4 and time.monotonic() < deadline:  # the reader keeps up with the producer
            read.extend(reader.poll(timeout_ms=50))
        assert loop.sent > MESSAGES // 4, "the producer is stuck"
        seen = [(r.offset, r.key, r.value) for r in vp_log(connection, topic, 0, before.leader)]
        read_before, read_at_loss = [(m.offset, m.value) for m in read if m.partition == 0], len(read)
        _, outcome = disk_faults(connection, topic).power_loss_read_node(before.leader)
        assert outcome.startswith("power loss: SIGKILLed pid"), outcome
        assert wait_until(lambda: vp_state(connection, topic, 0).leader_epoch > before.leader_epoch, RECOVERY_S), \
            "VP 0's only replica does not lead again"
        assert wait_until(lambda: loop.done, RECOVERY_S), "the producer did not finish"
        acknowledged += loop.stop()
        acknowledged = produce_keyed(connection, topic, acknowledged)  # feeding goes on
        wanted = {value for _, _, _, value in acknowledged}
        deadline = time.monotonic() + RECOVERY_S
        while not wanted <= {m.value for m in read} and time.monotonic() < deadline:
            read.extend(reader.poll(timeout_ms=500))
    assert_virtual_topic_whole(connection, topic, acknowledged)
    after = {r.offset: r.value for r in vp_log(connection, topic, 0, before.leader)}
    moved = sorted(offset for offset, value in read_before if after.get(offset) != value)
    print(f"\nread node {before.leader}: {outcome}; a reader had read {len(read_before)} records of VP 0 "
          f"({len(seen)} below its HW); offsets it read that hold other records now: "
          f"{f'{moved[0]}..{moved[-1]} ({len(moved)})' if moved else 'none'}")
    missing = wanted - {m.value for m in read}
    assert not missing, f"the reader never read {len(missing)} acknowledged records, e.g. {sorted(missing)[:3]}"
    if moved:
        again = [m.offset for m in read[read_at_loss:] if m.partition == 0]
        assert again and min(again) <= moved[0], \
            f"the reader read offsets {moved[0]}.. before the loss and did not read VP 0 again from there"


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
