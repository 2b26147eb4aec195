"""Harder faults on a real cluster: frozen processes, a killed controller, network partitions.

Each fault kind of ``mafka4 chaos`` beyond the kills and pauses, alone and scripted, under a
few hundred acks=all messages, checked as a user relies on it: production goes on while the
in-sync replicas suffice, the cluster repairs itself (the ISR or RISR fills again, a
controller is active again) and every acknowledged message is read back once, in order.

* **SIGSTOP/SIGCONT** of a physical follower, a physical leader, a read node, the controller
  and etcd (``simulations.chaos.processes``: by PID, continued in a ``finally``). A process
  frozen past its lease TTL may be replaced by the controller before it is continued (it kills
  the frozen actor and starts it again); the tests accept either outcome and check the result.
  A replaced process may still write its liveness key before it dies, under a lease that dies
  with it: its replacement writes the key again (checked without a stop, by writing it so).
* **Controller kill**: SIGKILL of the active controller; the cluster's daemon starts it again,
  and the new one fails leaders over.
* **Network partitions** (``mafka4.partition_gate`` through ``Admin.set_network_fault``):
  leader and follower cut off both ways or one way, a producer whose acknowledgements are lost,
  a read node cut off from the write nodes, two read nodes cut off from each other.

No assert reads a clock: every wait is for a state, bounded generously for a shared machine.
"""

from __future__ import annotations

import contextlib
import time

import pytest
import ray

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.metadata import keys
from mafka4.partition_gate import CLIENT, HEALED, NetworkFault, set_client_fault
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState
from mafka4.virtual.handles import read_node_handle
from simulations.chaos.processes import ProcessStopper, process_of

from fault_helpers import (
    MESSAGES, RECOVERY_S, acknowledged_of, active_controller, assert_physical_topic_whole,
    assert_read_back_once_in_order, assert_virtual_topic_whole, create_physical_topic, create_virtual_topic, full_isr,
    partition_state, produce, produce_keyed, send, virtual_topic_in_sync, vp_state,
)
from virtual_helpers import check_exactly_once, feed_of, read_everything
from wait_helpers import wait_until

ETCD_STOP_S = 7  # longer than every lease TTL (replicas, read nodes and the controller: 5 s)
CONTROLLER_COMMAND = "mafka4.runtime.controller_process"


def replica_pid(connection, topic: str, replica: str) -> int:
    return ray.get(replica_handle(connection.cluster, topic, 0, replica).describe.remote(), timeout=60)["pid"]


@contextlib.contextmanager
def stopped(pid: int, what: str, command_has: str | None = None):
    """SIGSTOP ``pid`` for the block; SIGCONT afterwards, also when the block fails. Yields a list
    that holds, afterwards, whether the process was still there to continue."""
    stopper, continued = ProcessStopper(), []
    process = stopper.stop(pid, what, command_has)
    try:
        yield continued
    finally:
        continued.append(stopper.resume(process))
        print(f"\n{what} (pid {pid}) " + ("continued" if continued[0] else "was replaced while stopped"))


@contextlib.contextmanager
def network_fault(connection, topic: str, fault: NetworkFault):
    """``fault`` on every actor of ``topic`` and this process's clients for the block; healed afterwards."""
    admin = Admin(connection)
    try:
        reached = admin.set_network_fault(topic, fault)
        assert set(reached.values()) == {"set"}, reached
        yield
    finally:
        set_client_fault(HEALED)  # first: this process's clients, even if no actor answers
        healed = admin.set_network_fault(topic, HEALED)
    assert set(healed.values()) == {"set"}, healed


# --- SIGSTOP/SIGCONT of physical replicas ---------------------------------------------------------


def test_a_stopped_follower_leaves_the_isr_production_goes_on_and_it_catches_up_after_sigcont(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "stopfollower")
    follower = next(replica for replica in state.replicas if replica != state.leader)
    acknowledged = produce(cluster, topic, 0)
    with stopped(replica_pid(cluster, topic, follower), f"follower {follower}"):
        assert wait_until(lambda: follower not in partition_state(cluster, topic).isr, RECOVERY_S), \
            "the frozen follower stayed in the ISR"
        acknowledged += produce(cluster, topic, MESSAGES)  # two in-sync replicas: min_insync_replicas holds
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S), \
        f"the follower did not rejoin: {partition_state(cluster, topic)}"
    # A follower frozen past its lease is replaced, which may open a new epoch under the same leader.
    assert partition_state(cluster, topic).leader == state.leader, "no failover for a follower"
    acknowledged += produce(cluster, topic, 2 * MESSAGES)
    assert_physical_topic_whole(cluster, topic, acknowledged)


def test_a_stopped_leader_is_failed_over_and_the_partition_is_whole_again_after_sigcont(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "stopleader")
    acknowledged = produce(cluster, topic, 0)
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S)
    with stopped(replica_pid(cluster, topic, state.leader), f"leader {state.leader}"):
        # Its liveness lease expires and it answers no ping: the controller elects an ISR member.
        new = wait_until(lambda: (s := partition_state(cluster, topic)).leader_epoch > state.leader_epoch and s,
                         RECOVERY_S)
        assert new, "the controller did not fail the frozen leader over"
        assert new.leader != state.leader and new.leader in state.isr
        acknowledged += produce(cluster, topic, MESSAGES)  # through the new leader
    # Continued or replaced, the old leader comes back as a follower of the new epoch.
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S), \
        f"not whole again: {partition_state(cluster, topic)}"
    assert partition_state(cluster, topic).leader == new.leader
    acknowledged += produce(cluster, topic, 2 * MESSAGES)
    assert_physical_topic_whole(cluster, topic, acknowledged)


# --- the controller and etcd ------------------------------------------------------------------------


def fail_leader_over(connection, topic: str) -> PartitionState:
    """Kill the partition's leader actor and wait for the controller to elect another."""
    state = partition_state(connection, topic)
    ray.kill(replica_handle(connection.cluster, topic, 0, state.leader))
    new = wait_until(lambda: (s := partition_state(connection, topic)).leader_epoch > state.leader_epoch and s,
                     RECOVERY_S)
    assert new and new.leader != state.leader, "no failover"
    return new


def test_a_stopped_controller_loses_its_key_campaigns_again_after_sigcont_and_still_fails_leaders_over(cluster):
    before = active_controller(cluster)
    topic, _ = create_physical_topic(cluster, "stopcontroller")
    with stopped(before["pid"], "the controller", CONTROLLER_COMMAND) as continued:
        acknowledged = produce(cluster, topic, 0)  # the data path needs no controller
        # Frozen, it refreshes nothing: its key goes with its lease, and nobody takes over (the
        # daemon restarts a controller that exited, not one that hangs).
        assert wait_until(lambda: cluster.store.get(keys.controller(cluster.cluster)) is None, RECOVERY_S), \
            "the key outlived the lease"
    assert continued == [True], "nothing replaces a frozen controller"
    after = active_controller(cluster)
    assert after["pid"] == before["pid"] and after["controller_epoch"] > before["controller_epoch"], \
        "the same process, active again at a new epoch"
    fail_leader_over(cluster, topic)
    acknowledged += produce(cluster, topic, MESSAGES)
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S)
    assert_read_back_once_in_order(cluster, topic, acknowledged)


def test_a_killed_controller_is_started_again_and_fails_a_leader_over(cluster):
    before = active_controller(cluster)
    topic, _ = create_physical_topic(cluster, "killcontroller")
    acknowledged = produce(cluster, topic, 0)
    process_of(before["pid"], CONTROLLER_COMMAND).kill()  # no resignation: the new one waits out the lease
    after = wait_until(lambda: (found := cluster.store.get(keys.controller(cluster.cluster))) is not None
                       and found.value["controller_epoch"] > before["controller_epoch"] and found.value, RECOVERY_S)
    assert after, "no controller became active again"
    assert after["pid"] != before["pid"], "the daemon started a new controller process"
    fail_leader_over(cluster, topic)
    acknowledged += produce(cluster, topic, MESSAGES)
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S)
    assert_read_back_once_in_order(cluster, topic, acknowledged)


def test_a_stopped_etcd_stops_no_production_and_changes_no_leader(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "stopetcd")
    replicas_prefix = f"{keys.replicas_prefix(cluster.cluster)}{topic}/0/"
    assert wait_until(lambda: len(cluster.store.get_prefix(replicas_prefix)) == 3, RECOVERY_S)
    acknowledged = produce(cluster, topic, 0)
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S), "an ISR change would wait for etcd"
    with Producer(topic, connection=cluster, acks="all", linger_ms=1) as producer:  # routes read before the stop
        with stopped(cluster.state.etcd_pid, "etcd", "etcd"):
            acknowledged += acknowledged_of(send(producer, MESSAGES))
            time.sleep(ETCD_STOP_S)  # past every lease TTL: leases lapse once etcd runs again
    # The replicas' liveness keys may have lapsed; they register again, and since every actor
    # answers its ping, the controller moves no leader.
    assert wait_until(lambda: len(cluster.store.get_prefix(replicas_prefix)) == 3, RECOVERY_S), \
        "replicas did not register again"
    # The nodes' registrations lapsed too: the next test needs every write node live again.
    nodes = len(cluster.state.write_nodes) + len(cluster.state.read_nodes)
    assert wait_until(lambda: len(cluster.store.get_prefix(keys.nodes_prefix(cluster.cluster))) == nodes, RECOVERY_S), \
        "the nodes did not register again"
    active_controller(cluster)
    after = partition_state(cluster, topic)
    assert (after.leader, after.leader_epoch) == (state.leader, state.leader_epoch), "an etcd freeze moved a leader"
    acknowledged += produce(cluster, topic, 2 * MESSAGES)
    assert_read_back_once_in_order(cluster, topic, acknowledged)


# --- network partitions between physical replicas and to clients ---------------------------------


CUT_ROUNDS_MAX = 3


@pytest.mark.parametrize("cut", ["both ways", "follower to leader", "leader to follower"])
def test_a_follower_cut_off_from_its_leader_leaves_the_isr_and_rejoins_once_healed(cluster, cut):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "cutfollower")
    follower = next(replica for replica in state.replicas if replica != state.leader)
    acknowledged = produce(cluster, topic, 0)
    # Follower to leader: its fetches are lost. Leader to follower: they arrive, the answers are lost.
    sides = ([state.leader], [follower]) if cut == "leader to follower" else ([follower], [state.leader])
    with network_fault(cluster, topic, NetworkFault.between(*sides, both_ways=cut == "both ways")):
        # Acknowledged once the follower left the ISR: a follower whose fetches still arrive at
        # the leader's log end (lost answers) is caught up until something new is produced. The
        # gate judges a call when it is made, so a fetch already parked at the leader when the
        # cut began still gets its answer: the first round may reach the follower, legitimately
        # acknowledged with it in the ISR. A later round cannot.
        for _ in range(CUT_ROUNDS_MAX):
            acknowledged += produce(cluster, topic, len(acknowledged))
            if follower not in partition_state(cluster, topic).isr:
                break
        assert follower not in partition_state(cluster, topic).isr, \
            f"the cut-off follower stayed in the ISR through {CUT_ROUNDS_MAX} acknowledged rounds"
    assert wait_until(lambda: full_isr(cluster, topic), RECOVERY_S), \
        f"the follower did not rejoin: {partition_state(cluster, topic)}"
    after = partition_state(cluster, topic)
    assert (after.leader, after.leader_epoch) == (state.leader, state.leader_epoch), "a partition is no failover"
    acknowledged += produce(cluster, topic, len(acknowledged))
    assert_physical_topic_whole(cluster, topic, acknowledged)


def test_a_producer_whose_acknowledgements_are_lost_retries_without_duplicating(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "lostacks")
    leader = replica_handle(cluster.cluster, topic, 0, state.leader)
    # Traffic from the leader's node to this process is lost: every produce arrives and is
    # appended, and its answer never comes back; the producer resends the same sequences.
    fault = NetworkFault.between([state.leader], [CLIENT], both_ways=False, lost_after_ms=500)
    # One batch (within the in-flight bound whatever happens): every message reaches the leader.
    with Producer(topic, connection=cluster, acks="all", linger_ms=500) as producer:
        with network_fault(cluster, topic, fault):
            sent = send(producer, 0)
            assert wait_until(lambda: ray.get(leader.describe.remote(), timeout=60)["high_watermark"] >= MESSAGES,
                              RECOVERY_S), \
                "the leader did not commit what it was sent"
            assert not any(future.done() for _, future in sent), "an acknowledgement got through the cut"
        producer.flush()
        acknowledged = acknowledged_of(sent)
    assert sorted(offset for _, offset, _ in acknowledged) == list(range(MESSAGES)), "each message appended once"
    assert_read_back_once_in_order(cluster, topic, acknowledged)



def test_a_mafka3_consumer_cut_off_from_its_leader_reads_nothing_and_everything_once_healed(cluster):
    active_controller(cluster)
    topic, state = create_physical_topic(cluster, "cutreader")
    acknowledged = produce(cluster, topic, 0)
    with Consumer(topic, connection=cluster, from_beginning=True) as consumer:
        set_client_fault(NetworkFault.between([CLIENT], [state.leader], lost_after_ms=500))
        try:
            cut_off = [message for _ in range(4) for message in consumer.poll(timeout_ms=500)]
        finally:
            set_client_fault(HEALED)
        assert cut_off == [], "a fetch from the leader got through the cut"
        messages = []
        deadline = time.monotonic() + RECOVERY_S
        while len(messages) < len(acknowledged) and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
    assert [(m.partition, m.offset, m.value) for m in messages] == acknowledged, "not every message once, in order"

# --- network partitions on the read path ------------------------------------------------------------


def test_a_read_node_cut_off_from_the_write_nodes_feeds_everything_once_healed(cluster):
    topic = create_virtual_topic(cluster, "cutfeed", read_replicas=1)
    acknowledged = produce_keyed(cluster, topic)
    check_exactly_once(cluster, topic, acknowledged)
    errors_before = {p: feed_of(cluster, topic, p, "r0")["errors"] for p in (0, 1)}
    with network_fault(cluster, topic, NetworkFault.between(["r0"], list(cluster.state.write_nodes))):
        acknowledged = produce_keyed(cluster, topic, acknowledged)  # the write path does not need the read node
        assert wait_until(lambda: all(feed_of(cluster, topic, p, "r0")["errors"] > errors_before[p] for p in (0, 1)),
                          RECOVERY_S), \
            "a feed stream got through the cut"
    check_exactly_once(cluster, topic, acknowledged)
    messages = read_everything(cluster, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(value for _, _, _, value in acknowledged)


def test_two_read_nodes_cut_off_from_each_other_shrink_the_risr_and_fill_it_again_once_healed(read_cluster):
    connection = read_cluster
    topic, acknowledged = virtual_topic_in_sync(connection, "cutread")
    with network_fault(connection, topic, NetworkFault.between(["r0"], ["r1"])):
        # Every VP's follower is on the other node: no replication session gets through, and
        # with new records its followers fall behind and leave.
        acknowledged = produce_keyed(connection, topic, acknowledged)
        assert wait_until(lambda: all(len(vp_state(connection, topic, vp).risr) == 1 for vp in (0, 1)), RECOVERY_S), \
            "a cut-off VP follower stayed in the RISR"
    assert wait_until(lambda: all(len(vp_state(connection, topic, vp).risr) == 2 for vp in (0, 1)), RECOVERY_S), \
        "the followers did not rejoin the RISR"
    assert_virtual_topic_whole(connection, topic, acknowledged)


def test_a_read_node_s_liveness_key_taken_and_dropped_by_a_replaced_process_is_written_again(cluster):
    # What a replaced read node continued after SIGCONT may do before it dies: write the node's
    # key under its own lease, which then ends. The node's own lease lives on without the key.
    key = keys.read_node_liveness(cluster.cluster, "r0")
    live = cluster.store.get(key)
    assert live is not None, "r0 holds its liveness key"
    ghost = cluster.store.grant_lease(60)
    cluster.store.put(key, dict(live.value, pid=live.value["pid"] + 1), lease=ghost)
    cluster.store.revoke_lease(ghost)
    assert cluster.store.get(key) is None

    def written_again() -> bool:
        found = cluster.store.get(key)
        return found is not None and found.value == live.value

    assert wait_until(written_again, RECOVERY_S), f"r0 did not write its liveness key again: {cluster.store.get(key)}"


def test_a_stopped_read_node_s_vps_fail_over_and_it_rejoins_after_sigcont(read_cluster):
    connection = read_cluster
    topic = create_virtual_topic(connection, "stopread", read_replicas=2)
    acknowledged = produce_keyed(connection, topic)
    assert wait_until(lambda: len(vp_state(connection, topic, 0).risr) == 2, RECOVERY_S)
    before = vp_state(connection, topic, 0)
    pid = ray.get(read_node_handle(connection.cluster, before.leader).describe.remote(topic), timeout=60)["pid"]
    with stopped(pid, f"read node {before.leader}"):
        # Its liveness lease expires and it answers no ping: VP 0 fails over to the other node.
        assert wait_until(lambda: vp_state(connection, topic, 0).leader_epoch > before.leader_epoch, RECOVERY_S), \
            "the controller did not fail VP 0 over"
        acknowledged = produce_keyed(connection, topic, acknowledged)
    after = vp_state(connection, topic, 0)
    assert after.leader != before.leader
    assert wait_until(lambda: all(len(vp_state(connection, topic, vp).risr) == 2 for vp in (0, 1)), RECOVERY_S), \
        "the frozen node's replicas did not rejoin the RISR"
    assert_virtual_topic_whole(connection, topic, acknowledged)
