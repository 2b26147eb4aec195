"""``PhysicalReplica``: the replica shell both drivers host, on a real temp dir.

The actor and the simulator's replica run these sequences unchanged: a follower appends
fetched batches and takes the leader's HW, checkpoints a new epoch, and on a divergence cuts
the log, the epochs and the producer state at the offset the core names (and a restart finds
the same); a leader stamps and appends, answers acks=all waiters in order once committed or
refused, and hands its driver what only the driver can do (``notify``).
"""

from __future__ import annotations

import asyncio

from mafka4 import batch_frame, batch_payload
from mafka4.errors import NotLeader
from mafka4.limits import Acks
from mafka4.limits.servers import LogConfig, ReplicaConfig
from mafka4.log.replica_storage import EPOCH_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT
from mafka4.physical.physical_replica import PhysicalReplica
from mafka4.physical.replica import Ready
from mafka4.physical.sequencer import SequenceGate

LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
REPLICA_CONFIG = ReplicaConfig(replica_lag_ms_max=1_000, min_insync_replicas=1)
PRODUCER_ID = 7
ALL = ("r0", "r1")


def batches(base_offset: int, leader_epoch: int, count: int, base_sequence: int) -> bytes:
    """``count`` one-record batches of one idempotent producer, as a leader's log holds them."""
    data = bytearray()
    for i in range(count):
        batch = bytearray(batch_payload.encode_batch([(b"k", b"v" * 50, 1_000 + i, None)], PRODUCER_ID, base_sequence + i))
        batch_frame.stamp(batch, base_offset + i, leader_epoch)
        data += batch
    return bytes(data)


def produced(base_sequence: int, producer_id: int = PRODUCER_ID) -> bytes:
    """One batch as a producer sends it (not stamped yet)."""
    return batch_payload.encode_batch([(b"k", b"v", 1_000, None)], producer_id, base_sequence)


class Waiter:
    """A ``CommitWaiter`` that remembers its answer (the actor's is an asyncio future)."""

    def __init__(self):
        self.answer: object = None

    def done(self) -> bool:
        return self.answer is not None

    def set_result(self, result: None) -> None:
        self.answer = "committed"

    def set_exception(self, exception: BaseException) -> None:
        self.answer = exception


def open_replica(directory, replica_id: str = "r1", config: ReplicaConfig = REPLICA_CONFIG,
                 readies: list[Ready] | None = None) -> PhysicalReplica:
    """A replica opened as the actor opens one; ``readies`` collects what it hands its driver."""
    notify = readies.append if readies is not None else (lambda ready: None)
    return PhysicalReplica(replica_id, "orders-0", directory, LOG_CONFIG, config, 0, notify)


def follower(directory, leader_epoch: int) -> PhysicalReplica:
    """A follower of ``r0`` in ``leader_epoch``."""
    replica = open_replica(directory)
    replica.become_follower(leader_epoch, "r0")
    return replica


def append(replica: PhysicalReplica, base_sequence: int, acks: Acks = Acks.ALL):
    batch = produced(base_sequence)
    return replica.append(batch_frame.check_producer_batch(batch), batch, acks, now_ms=0)


# --- follower -------------------------------------------------------------------------------


def test_fetched_batches_are_appended_and_the_leaders_high_watermark_taken(tmp_path):
    replica = follower(tmp_path, leader_epoch=1)
    state, log = replica.state, replica.log
    assert replica.apply_leader_answer(None, batches(0, 1, 3, 0), high_watermark=2, now_ms=0) is None
    assert log.log_end_offset == state.log_end_offset == 3
    assert state.high_watermark == 2
    assert state.producers.next_sequence(PRODUCER_ID) == 3
    # A HW past what this log holds is taken only as far as the log goes.
    replica.apply_leader_answer(None, b"", high_watermark=9, now_ms=0)
    assert state.high_watermark == 3


def test_the_epoch_checkpoint_is_rewritten_only_for_a_new_epoch(tmp_path):
    replica = follower(tmp_path, leader_epoch=2)
    state = replica.state
    replica.apply_leader_answer(None, batches(0, 1, 2, 0), high_watermark=0, now_ms=0)
    checkpoint = tmp_path / EPOCH_CHECKPOINT
    assert checkpoint.read_text() == state.epochs.to_text()
    checkpoint.write_text("unchanged")  # a rewrite would replace this
    replica.apply_leader_answer(None, batches(2, 1, 1, 2), high_watermark=0, now_ms=0)
    assert checkpoint.read_text() == "unchanged"
    replica.apply_leader_answer(None, batches(3, 2, 1, 3), high_watermark=0, now_ms=0)
    assert checkpoint.read_text() == state.epochs.to_text()
    assert state.epochs.entries == ((1, 0), (2, 3))


def test_a_divergence_cuts_the_log_epochs_and_producer_state_and_a_restart_agrees(tmp_path):
    replica = follower(tmp_path, leader_epoch=2)
    state = replica.state
    replica.apply_leader_answer(None, batches(0, 1, 3, 0), high_watermark=3, now_ms=0)
    replica.apply_leader_answer(None, batches(3, 2, 3, 3), high_watermark=3, now_ms=0)
    replica.become_follower(3, "r2")  # the new leader never had epoch 2's batches: epoch 1 ends at 3 there
    assert replica.apply_leader_answer((1, 3), b"", high_watermark=0, now_ms=0) == 3
    assert replica.log.log_end_offset == state.log_end_offset == 3
    assert state.epochs.entries == ((1, 0),)
    assert (tmp_path / EPOCH_CHECKPOINT).read_text() == state.epochs.to_text()
    assert state.producers.next_sequence(PRODUCER_ID) == 3
    replica.close()
    restarted = follower(tmp_path, leader_epoch=3)
    assert restarted.log.log_end_offset == 3
    assert restarted.state.epochs.entries == ((1, 0),)


def test_a_follower_wakes_its_driver_only_when_its_high_watermark_moves(tmp_path):
    readies: list[Ready] = []
    replica = open_replica(tmp_path, readies=readies)
    replica.become_follower(1, "r0")
    readies.clear()
    replica.apply_leader_answer(None, batches(0, 1, 2, 0), high_watermark=0, now_ms=0)
    assert readies == []  # appended below no new HW: a consumer's long poll has nothing new
    replica.apply_leader_answer(None, b"", high_watermark=2, now_ms=0)
    assert readies == [Ready(wake=True)]


# --- leader ---------------------------------------------------------------------------------


def test_a_leader_checkpoints_its_epoch_and_stamps_what_it_appends(tmp_path):
    readies: list[Ready] = []
    replica = open_replica(tmp_path, "r0", readies=readies)
    replica.become_leader(4, ALL, ALL, now_ms=0)
    assert (tmp_path / EPOCH_CHECKPOINT).read_text() == replica.state.epochs.to_text()
    assert readies == [Ready(save_epochs=True, wake=True)]
    readies.clear()
    plan = append(replica, 0)
    assert (plan.base_offset, plan.leader_epoch, plan.duplicate) == (0, 4, False)
    header = next(iter(batch_frame.iter_batches(replica.log.read(0, 1 << 20))))[1]
    assert (header.base_offset, header.leader_epoch) == (0, 4)
    assert readies == [Ready(sequence_advanced=True, wake=True)]
    readies.clear()
    assert append(replica, 0).duplicate and readies == []  # a retry appends nothing, moves nothing
    replica.become_leader(4, ALL, ALL, now_ms=0)  # a repeated notice
    assert readies == []


def test_acks_all_waiters_are_answered_in_order_once_committed(tmp_path):
    replica = open_replica(tmp_path, "r0")
    replica.become_leader(1, ALL, ALL, now_ms=0)
    waiters = []
    for sequence in range(3):
        waiters.append(Waiter())
        replica.wait_for_commit(append(replica, sequence), waiters[-1])
    assert [w.answer for w in waiters] == [None, None, None]
    replica.answer_follower("r1", 1, 2, 1, now_ms=1)
    assert [w.answer for w in waiters] == ["committed", "committed", None]
    late = Waiter()
    replica.wait_for_commit(append(replica, 0), late)  # a retry of a committed batch: answered at once
    assert late.answer == "committed"
    replica.answer_follower("r1", 1, 3, 1, now_ms=2)
    assert waiters[2].answer == "committed"


def test_waiters_are_refused_when_leadership_is_lost_or_the_replica_closes(tmp_path):
    replica = open_replica(tmp_path, "r0")
    replica.become_leader(1, ALL, ALL, now_ms=0)
    first, second = Waiter(), Waiter()
    replica.wait_for_commit(append(replica, 0), first)
    replica.become_follower(2, "r1")
    assert isinstance(first.answer, NotLeader) and "retry it on the new leader" in first.answer.message
    replica.become_leader(3, ALL, ALL, now_ms=0)
    replica.wait_for_commit(append(replica, 1), second)
    replica.close()
    assert isinstance(second.answer, NotLeader) and "shutting down" in second.answer.message


def test_an_isr_change_goes_to_the_driver_and_counts_only_once_written_in_this_epoch(tmp_path):
    readies: list[Ready] = []
    replica = open_replica(tmp_path, "r0", readies=readies)
    replica.become_leader(1, ALL, ALL, now_ms=0)
    waiter = Waiter()
    replica.wait_for_commit(append(replica, 0), waiter)
    readies.clear()
    replica.tick(now_ms=1_001)  # r1 never fetched: out of the ISR
    assert readies == [Ready(write_isr=("r0",), wake=True)]
    assert replica.isr_to_write() == (("r0",), 1)
    assert waiter.answer is None, "etcd may still hold r1, which lacks offset 0: it bounds the HW"
    replica.isr_written(("r0",), leader_epoch=0)  # the answer to an older epoch's write: moot
    assert waiter.answer is None
    replica.isr_written(("r0",), leader_epoch=1)
    assert replica.state.high_watermark == 1 and waiter.answer == "committed"
    readies.clear()
    replica.tick(now_ms=1_002)  # every leader tick wakes: it ends followers' long polls
    assert readies == [Ready(wake=True)]


def test_only_a_changed_isr_or_a_moved_high_watermark_wakes_on_a_follower_fetch(tmp_path):
    readies: list[Ready] = []
    replica = open_replica(tmp_path, "r0", readies=readies)
    replica.become_leader(1, ALL, ("r0",), now_ms=0)
    readies.clear()
    decision = replica.answer_follower("r1", 1, 0, -1, now_ms=1)  # caught up: joins the ISR
    assert decision.ready == Ready(write_isr=("r0", "r1"), wake=True) and readies == [decision.ready]
    readies.clear()
    replica.answer_follower("r1", 1, 0, -1, now_ms=2)  # an idle follower's next fetch moves nothing
    assert readies == []
    decision = replica.answer_follower("r1", 1, 5, 1, now_ms=3)  # past this log: diverging, nothing moves
    assert decision.diverging is not None and readies == []


def test_a_batch_ahead_of_its_producers_sequence_is_early(tmp_path):
    replica = open_replica(tmp_path, "r0")
    replica.become_leader(1, ALL, ALL, now_ms=0)
    header = batch_frame.check_producer_batch
    assert not replica.is_early(header(produced(0)))
    assert replica.is_early(header(produced(1)))  # an unknown producer starts at 0
    assert not replica.is_early(header(batch_payload.encode_batch([(b"k", b"v", 1, None)])))  # not idempotent
    append(replica, 0)
    assert not replica.is_early(header(produced(1)))


def test_the_high_watermark_checkpoint_is_written_only_when_it_moved_and_never_after_close(tmp_path):
    replica = open_replica(tmp_path, "r0", ReplicaConfig(min_insync_replicas=1))
    replica.become_leader(1, ("r0",), ("r0",), now_ms=0)
    append(replica, 0, Acks.LEADER)
    replica.checkpoint_high_watermark()
    assert (tmp_path / HIGH_WATERMARK_CHECKPOINT).read_text() == "1"
    append(replica, 1, Acks.LEADER)
    staged = replica.stage_high_watermark(replica.state.high_watermark)
    assert staged is not None and replica.stage_high_watermark(1) is None
    replica.close()
    replica.commit_high_watermark(staged)
    assert (tmp_path / HIGH_WATERMARK_CHECKPOINT).read_text() == "1"


def test_the_actors_sequence_gate_holds_an_early_batch_until_the_replica_appends_its_turn(tmp_path):
    async def scenario():
        gates: list[SequenceGate] = []

        def notify(ready: Ready) -> None:  # what the actor does with ``Ready.sequence_advanced``
            if ready.sequence_advanced:
                gates[0].batch_appended()

        replica = PhysicalReplica("r0", "orders-0", tmp_path, LOG_CONFIG, REPLICA_CONFIG, 0, notify)
        gates.append(SequenceGate(replica.is_early))
        replica.become_leader(1, ALL, ALL, now_ms=0)
        waiting = asyncio.create_task(gates[0].wait_turn(batch_frame.check_producer_batch(produced(1)), 5_000))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        append(replica, 0)
        await asyncio.wait_for(waiting, 1.0)
        # A batch whose turn never comes goes on once its wait ran out (and the core refuses it).
        await asyncio.wait_for(gates[0].wait_turn(batch_frame.check_producer_batch(produced(5)), 10), 1.0)

    asyncio.run(scenario())
