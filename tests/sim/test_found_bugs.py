"""Bugs the deterministic simulator found in the code under test, now fixed; one test pins each.

The simulator's shells work around nothing: a seed that fails is replayed
(``python3 -m simulations.dst --seed S --trace``), the cause is fixed in the code, and the
behaviour the fix gives is pinned here with the smallest reproduction, named after the bug
and the seed that first found it. The seeded runs (``test_simulation.py``) keep covering
the whole protocol around them.

The seeds are history, not replay commands: each test reproduces its bug without the
simulator. The random stream has moved since (for one, when the simulated controller and
group took production's VP failover and ownership rules), so a seed named here runs
another history today.
"""

from __future__ import annotations

import pytest

from mafka4.batch_frame import BatchHeader
from mafka4.coordinator.control.partition_decisions import decide_partition
from mafka4.errors import OutOfOrderSequence
from mafka4.limits import Acks, TopicConfig
from mafka4.limits.servers import ReplicaConfig
from mafka4.log.epochs import EpochHistory
from mafka4.log.producer_state import ProducerStateTable
from mafka4.physical.partition_state import PartitionState
from mafka4.physical.replica import ReplicaState
from mafka4.risr.state import RisrConfig, RisrState


def header(base_offset: int, count: int, producer_id: int, base_sequence: int, epoch: int = 0) -> BatchHeader:
    return BatchHeader(base_offset, 100, epoch, 0, 0, count, 0, 0, producer_id, base_sequence)


def test_a_leader_refuses_a_first_batch_of_an_unknown_producer_that_does_not_start_at_sequence_0():
    """unknown-producer-gap (seed 0): the table appended an unknown producer's batch whatever its
    sequence, so batch 1 was acknowledged and batch 0 refused for ever (fix: ``UnknownProducer``)."""
    # The actor's SequenceGate holds batch 1 of producer 7 while batch 0 failed (e.g. NotLeader
    # just before the election); once the wait runs out it hands batch 1 to the core.
    config = ReplicaConfig(min_insync_replicas=1)
    state = ReplicaState("r0", "t-0", config, 0, 0, EpochHistory(), ProducerStateTable(5, 100))
    state.become_leader(1, ["r0"], ["r0"], 0)
    with pytest.raises(OutOfOrderSequence):
        state.plan_append(header(0, 1, producer_id=7, base_sequence=1), Acks.ALL, 0)


def test_truncation_keeps_a_producer_whose_older_batches_are_still_in_the_log():
    """truncation-forgets-producers (seed 837): truncation deleted a producer whose older batches
    were still in the log, and a retry of one of them was appended a second time."""
    table = ProducerStateTable(batches_remembered=5, producer_ids_max=100)
    for offset in range(7):  # seven one-record batches at offsets 0..6; the table keeps the last five
        table.record(header(offset, 1, producer_id=7, base_sequence=offset))
    table.truncate_from(2)  # offsets 0 and 1 stay in the log
    assert table.next_sequence(7) == 2


def test_a_new_vp_leader_alone_in_its_risr_serves_its_whole_log():
    """risr-hw-stuck-after-election: a new VP leader did not compute its HW until the next feed,
    and a closed parent VP is never fed again, so its children never became readable."""
    risr = RisrState("v0", RisrConfig(), "r0", ["r0"], ["r0"], log_end_offset=10, high_watermark=4, now_ms=0,
                     flushed_offset=10)
    assert risr.high_watermark == 10


def test_a_member_of_an_unconfirmed_isr_write_keeps_bounding_the_high_watermark():
    """unconfirmed-isr-write-ignored (seed 1142): a follower added by an ISR write whose answer was
    lost, then shrunk, stopped bounding the HW (fix: KIP-497's maximal ISR)."""
    config = ReplicaConfig(replica_lag_ms_max=100, min_insync_replicas=1)
    leader = ReplicaState("r0", "t-0", config, 0, 0, EpochHistory(), ProducerStateTable(5, 100))
    leader.become_leader(1, ["r0", "r1"], ["r0"], 0)
    leader.appended(header(0, 1, producer_id=-1, base_sequence=-1, epoch=1), 0)
    decision = leader.on_follower_fetch("r1", 1, 1, 10)  # r1 caught up: the ISR grows to {r0, r1}
    assert decision.ready.write_isr and leader.isr == {"r0", "r1"}
    # The actor writes {r0, r1} to etcd; the answer is lost (the write may have been applied).
    assert leader.tick(200).write_isr and leader.isr == {"r0"}  # r1 went quiet: shrunk, not confirmed either
    leader.appended(header(1, 1, producer_id=-1, base_sequence=-1, epoch=1), 200)
    # etcd may hold {r0, r1}: the controller could elect r1, which lacks offset 1.
    assert leader.high_watermark <= 1


def test_a_member_of_an_unconfirmed_risr_write_keeps_bounding_the_vp_high_watermark():
    """unconfirmed-risr-write-ignored: the RISR twin of unconfirmed-isr-write-ignored."""
    risr = RisrState("v0", RisrConfig(read_replica_lag_ms_max=100), "r1", ["r0", "r1"], ["r1"], 0, 0, now_ms=0,
                     flushed_offset=0)
    decision = risr.on_replica_fetch("r0", 0, 10)  # r0 caught up: the RISR grows to {r0, r1}
    assert decision.risr_changed and risr.risr == {"r0", "r1"}
    # The leader writes {r0, r1} to etcd; the answer is lost (the write was applied).
    assert risr.tick(200) and risr.risr == {"r1"}  # r0 went quiet: it lags, not confirmed either
    risr.leader_appended(8)
    risr.leader_flushed(8)  # durable on r1: only r0 can hold the HW back
    # etcd holds {r0, r1}: decide_failover may elect r0, which lacks offsets 0..7 readers were served.
    assert risr.high_watermark == 0


def test_a_replica_restarted_in_place_leaves_the_isr_it_could_be_elected_from():
    """restarted-isr-member-electable (seed 1466): a replica that lost its unflushed tail came back
    still listed in the ISR and could be elected (fix: Kafka's KIP-966, a new epoch without it)."""
    state = PartitionState(0, "w0", 3, ("w0", "w1", "w2"), ("w0", "w1", "w2"))
    # w2's machine lost power (and its unflushed tail) and is back; the leader w0 is alive.
    decision = decide_partition(state, {"w0", "w1"}, ["w0", "w1", "w2"], TopicConfig(replication_factor=3))
    assert decision.restart == ("w2",)
    assert "w2" not in (decision.state or state).isr


def test_replicas_shrunk_out_below_min_isr_stay_electable_when_the_lone_leader_loses_power():
    """lone-isr-leader-power-loss (seed 4226; the scripted run in ``test_write_power_loss.py``): the
    leader shrank the ISR to itself and lost power; restarted with a shorter log, it was elected as
    the sole ISR member and the followers, which held acknowledged batches, truncated to it (fix:
    Kafka's KIP-966, eligible leader replicas)."""
    config = ReplicaConfig(replica_lag_ms_max=100, min_insync_replicas=2)
    leader = ReplicaState("w0", "t-0", config, 0, 0, EpochHistory(), ProducerStateTable(5, 100))
    leader.become_leader(1, ["w0", "w1", "w2"], ["w0", "w1", "w2"], 0)
    leader.appended(header(0, 2, producer_id=-1, base_sequence=-1, epoch=1), 0)
    leader.on_follower_fetch("w1", 2, 1, 0)
    leader.on_follower_fetch("w2", 2, 1, 0)
    assert leader.ack_ready(2), "acknowledged: on w0, w1 and w2"
    assert leader.tick(200).write_isr and leader.isr == {"w0"}  # w1 and w2 went quiet
    state = PartitionState(0, "w0", 1, ("w0", "w1", "w2"), ("w0", "w1", "w2"))
    state = state.with_isr(sorted(leader.isr), config.min_insync_replicas)  # the ISR write lands
    leader.isr_committed(leader.isr, leader.leader_epoch)
    leader.appended(header(2, 1, producer_id=-1, base_sequence=-1, epoch=1), 200)  # acks=1
    assert leader.high_watermark == 2, "a lone leader makes nothing visible that w1 or w2 lacks"
    # w0 loses power and its unflushed tail; w1 and w2 are live.
    decision = decide_partition(state, {"w1", "w2"}, ["w0", "w1", "w2"],
                                TopicConfig(replication_factor=3, min_insync_replicas=2))
    assert decision.restart == ("w0",)
    assert (decision.state.leader, decision.state.isr, decision.state.elr) == ("w1", ("w1",), ("w2",))


def test_a_lone_risr_leader_serves_readers_only_what_a_power_loss_cannot_take():
    """lone-risr-leader-power-loss (seeds 501, 645, 695, 896, 918 once VP logs flushed lazily; the
    scripted run in ``test_vp_power_loss.py``): a VP leader alone in its RISR moved the HW with
    every append, lost its unflushed tail to a power loss after readers had read it, and was
    elected again (the only RISR member) with a shorter log, so the feed refilled offsets readers
    had seen with other records (fix: the HW of a lone leader never passes its flushed offset)."""
    risr = RisrState("v0", RisrConfig(read_replica_lag_ms_max=100), "r0", ["r0", "r1"], ["r0", "r1"], 0, 0,
                     now_ms=0, flushed_offset=0)
    risr.leader_appended(5)
    risr.on_replica_fetch("r1", 5, 10)
    assert risr.tick(200) and risr.risr == {"r0"}  # r1 went quiet
    assert risr.flush_needed, "r0 holds 0..4, which readers saw, only in its page cache"
    risr.leader_flushed(5)
    risr.risr_committed({"r0"})
    risr.leader_appended(9)
    assert risr.high_watermark == 5, "readers see nothing a power loss of r0 could take"
    risr.leader_flushed(9)
    assert risr.high_watermark == 9


def test_new_batches_overtaking_a_resend_push_it_out_of_the_deduplication_window():
    """new-batches-overtake-resend (seed 2): why ``client.sender`` holds new batches while a resend
    is open (pinned with the real pipeline in ``tests/unit/test_sender.py``).

    Batch 0 is in the log but its answer failed; batches 1..4 were acknowledged. Had the sender
    resent 0 and at once sent 5, and 5 been appended first, the resent 0 would no longer be
    among the five batches the leader remembers and would be refused for ever, though it is in
    the log.
    """
    table = ProducerStateTable(batches_remembered=5, producer_ids_max=100)
    for sequence in range(6):
        table.record(header(sequence, 1, producer_id=7, base_sequence=sequence))
    with pytest.raises(OutOfOrderSequence):
        table.check(header(0, 1, producer_id=7, base_sequence=0))
