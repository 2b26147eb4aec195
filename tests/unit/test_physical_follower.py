"""``apply_leader_answer``: a physical follower applying its leader's answers, on a real temp dir.

The actor and the simulator's replica run this one sequence: append fetched batches and take
the leader's HW, checkpoint a new epoch, and on a divergence cut the log, the epochs and the
producer state at the offset the core names -- and a restart finds the same.
"""

from __future__ import annotations

from mafka4 import batch_frame, batch_payload
from mafka4.limits import LogConfig, ReplicaConfig
from mafka4.log.replica_storage import EPOCH_CHECKPOINT, ReplicaStorage
from mafka4.physical.follower import apply_leader_answer
from mafka4.physical.replica import ReplicaState

LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
REPLICA_CONFIG = ReplicaConfig()
PRODUCER_ID = 7


def batches(base_offset: int, leader_epoch: int, count: int, base_sequence: int) -> bytes:
    """``count`` one-record batches of one idempotent producer, as a leader's log holds them."""
    data = bytearray()
    for i in range(count):
        batch = bytearray(batch_payload.encode_batch([(b"k", b"v" * 50, 1_000 + i, None)], PRODUCER_ID,
                                                     base_sequence + i))
        batch_frame.stamp(batch, base_offset + i, leader_epoch)
        data += batch
    return bytes(data)


def follower(directory, leader_epoch: int) -> tuple[ReplicaState, ReplicaStorage]:
    """A follower of ``r0`` in ``leader_epoch``, opened as the actor opens one."""
    storage = ReplicaStorage(directory, LOG_CONFIG, now_ms=0)
    state = ReplicaState("r1", "orders-0", REPLICA_CONFIG, storage.log.log_end_offset,
                         storage.recovered_high_watermark(), storage.recovered_epochs(),
                         storage.recovered_producers(REPLICA_CONFIG))
    state.become_follower(leader_epoch, "r0")
    return state, storage


def test_fetched_batches_are_appended_and_the_leaders_high_watermark_taken(tmp_path):
    state, storage = follower(tmp_path, leader_epoch=1)
    assert apply_leader_answer(state, storage, None, batches(0, 1, 3, 0), high_watermark=2, now_ms=0) is None
    assert storage.log.log_end_offset == state.log_end_offset == 3
    assert state.high_watermark == 2
    assert state.producers.next_sequence(PRODUCER_ID) == 3
    # A HW past what this log holds is taken only as far as the log goes.
    apply_leader_answer(state, storage, None, b"", high_watermark=9, now_ms=0)
    assert state.high_watermark == 3


def test_the_epoch_checkpoint_is_rewritten_only_for_a_new_epoch(tmp_path):
    state, storage = follower(tmp_path, leader_epoch=2)
    apply_leader_answer(state, storage, None, batches(0, 1, 2, 0), high_watermark=0, now_ms=0)
    checkpoint = tmp_path / EPOCH_CHECKPOINT
    assert checkpoint.read_text() == state.epochs.to_text()
    checkpoint.write_text("unchanged")  # a rewrite would replace this
    apply_leader_answer(state, storage, None, batches(2, 1, 1, 2), high_watermark=0, now_ms=0)
    assert checkpoint.read_text() == "unchanged"
    apply_leader_answer(state, storage, None, batches(3, 2, 1, 3), high_watermark=0, now_ms=0)
    assert checkpoint.read_text() == state.epochs.to_text()
    assert state.epochs.entries == ((1, 0), (2, 3))


def test_a_divergence_cuts_the_log_epochs_and_producer_state_and_a_restart_agrees(tmp_path):
    state, storage = follower(tmp_path, leader_epoch=2)
    apply_leader_answer(state, storage, None, batches(0, 1, 3, 0), high_watermark=3, now_ms=0)
    apply_leader_answer(state, storage, None, batches(3, 2, 3, 3), high_watermark=3, now_ms=0)
    state.become_follower(3, "r2")  # the new leader never had epoch 2's batches: epoch 1 ends at 3 there
    assert apply_leader_answer(state, storage, (1, 3), b"", high_watermark=0, now_ms=0) == 3
    assert storage.log.log_end_offset == state.log_end_offset == 3
    assert state.epochs.entries == ((1, 0),)
    assert (tmp_path / EPOCH_CHECKPOINT).read_text() == state.epochs.to_text()
    assert state.producers.next_sequence(PRODUCER_ID) == 3
    storage.close()
    restarted, reopened = follower(tmp_path, leader_epoch=3)
    assert reopened.log.log_end_offset == 3
    assert restarted.epochs.entries == ((1, 0),)
