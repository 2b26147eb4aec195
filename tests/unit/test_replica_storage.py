"""``ReplicaStorage``: a replica's directory on real temp dirs -- what a restart recovers from it.

Every replica (physical, VP, the simulator's) opens its directory through this one class, so
these are the restart rules of all of them: epochs from the checkpoint cut at the log end (or
rebuilt from the batches), the HW from its checkpoint within the log's range, producer state
from the batch headers; the HW checkpoint written only when it changed; close, delete and discard.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.limits.servers import LogConfig, ReplicaConfig
from mafka4.log.epochs import EpochHistory
from mafka4.log.replica_storage import (DISCARDED_PREFIX, EPOCH_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, ReplicaStorage,
                                       remove_discarded, remove_trees)

LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
REPLICA_CONFIG = ReplicaConfig()


def append(storage: ReplicaStorage, leader_epoch: int, count: int = 1, producer_id: int = batch_frame.NO_PRODUCER_ID,
           base_sequence: int = batch_frame.NO_SEQUENCE) -> None:
    """Append one batch of ``count`` records at the log end, stamped with ``leader_epoch``."""
    batch = bytearray(batch_payload.encode_batch([(b"k", b"v" * 50, 1_000 + i, None) for i in range(count)],
                                           producer_id, base_sequence))
    batch_frame.stamp(batch, storage.log.log_end_offset, leader_epoch)
    storage.log.append(batch, now_ms=0)


def reopen(storage: ReplicaStorage) -> ReplicaStorage:
    storage.close()
    return ReplicaStorage(storage.directory, LOG_CONFIG, now_ms=0)


def test_a_new_directory_recovers_an_empty_replica(tmp_path):
    storage = ReplicaStorage(tmp_path / "new", LOG_CONFIG, now_ms=0)
    assert storage.directory.is_dir()
    assert storage.recovered_epochs().entries == ()
    assert storage.recovered_high_watermark() == 0
    assert len(storage.recovered_producers(REPLICA_CONFIG)) == 0


def test_saved_epochs_come_back_after_a_restart(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=3)
    append(storage, leader_epoch=2, count=2)
    storage.save_epochs(EpochHistory([(0, 0), (2, 3)]))
    assert reopen(storage).recovered_epochs().entries == ((0, 0), (2, 3))


def test_checkpointed_epochs_past_the_log_end_are_cut(tmp_path):
    # The checkpoint was saved when the epoch began; the batches of that epoch never reached disk.
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=3)
    storage.save_epochs(EpochHistory([(0, 0), (4, 3)]))
    assert reopen(storage).recovered_epochs().entries == ((0, 0),)


def test_without_an_epoch_checkpoint_the_epochs_are_rebuilt_from_the_batches(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=1, count=2)
    append(storage, leader_epoch=1)
    append(storage, leader_epoch=5, count=4)
    assert not (tmp_path / EPOCH_CHECKPOINT).exists()
    assert reopen(storage).recovered_epochs().entries == ((1, 0), (5, 3))


def test_the_high_watermark_comes_back_within_the_log(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=5)
    assert storage.save_high_watermark(3)
    assert reopen(storage).recovered_high_watermark() == 3


@pytest.mark.parametrize("checkpoint_text, recovered", [
    ("90", 5),  # past a lost tail: cut to the log end
    ("-", 0),  # unreadable: as if there were none
])
def test_a_high_watermark_checkpoint_the_log_does_not_back_is_not_trusted(tmp_path, checkpoint_text, recovered):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=5)
    (tmp_path / HIGH_WATERMARK_CHECKPOINT).write_text(checkpoint_text)
    assert reopen(storage).recovered_high_watermark() == recovered


def test_the_high_watermark_is_written_only_when_it_changed(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    checkpoint = tmp_path / HIGH_WATERMARK_CHECKPOINT
    checkpoint.write_text("0")  # what a previous run left: this run writes its own first value anyway
    assert storage.save_high_watermark(0)
    checkpoint.write_text("stale")  # a second write of the same value would replace this
    assert not storage.save_high_watermark(0)
    assert checkpoint.read_text() == "stale"
    assert storage.save_high_watermark(7)
    assert checkpoint.read_text() == "7"


def test_a_staged_high_watermark_lands_only_when_committed(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    checkpoint = tmp_path / HIGH_WATERMARK_CHECKPOINT
    storage.save_high_watermark(3)
    staged = storage.stage_high_watermark(5)  # a worker thread writes and fsyncs it beside its place
    assert checkpoint.read_text() == "3", "a replica closed before the commit leaves the old checkpoint"
    storage.commit_high_watermark(staged)
    assert checkpoint.read_text() == "5"
    assert storage.stage_high_watermark(5) is None, "the committed value is the one last written"
    storage.close()


def test_producer_state_is_rebuilt_from_the_batch_headers(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=2, producer_id=42, base_sequence=0)
    append(storage, leader_epoch=0)  # not idempotent: remembered by no one
    append(storage, leader_epoch=0, count=3, producer_id=42, base_sequence=2)
    producers = reopen(storage).recovered_producers(REPLICA_CONFIG)
    assert len(producers) == 1
    assert producers.next_sequence(42) == 5
    assert [batch.base_offset for batch in producers.remembered(42)] == [0, 3]


def test_close_keeps_the_data_and_may_be_repeated(tmp_path):
    storage = ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=4)
    storage.close()
    storage.close()
    assert ReplicaStorage(tmp_path, LOG_CONFIG, now_ms=0).log.log_end_offset == 4


def test_close_with_delete_data_removes_the_directory(tmp_path):
    directory: Path = tmp_path / "replica"
    storage = ReplicaStorage(directory, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0)
    storage.save_high_watermark(1)
    storage.close(delete_data=True)
    assert not directory.exists()


def test_a_discarded_directory_is_moved_aside_so_a_replica_opened_in_its_place_starts_empty(tmp_path):
    directory: Path = tmp_path / "orders-v3"
    storage = ReplicaStorage(directory, LOG_CONFIG, now_ms=0)
    append(storage, leader_epoch=0, count=4)
    aside = storage.discard()
    assert not directory.exists() and aside.name.startswith(DISCARDED_PREFIX)
    again = ReplicaStorage(directory, LOG_CONFIG, now_ms=0)
    assert again.log.log_end_offset == 0, "nothing of the discarded replica"
    remove_trees([aside, None])
    assert not aside.exists() and directory.is_dir()


def test_what_a_crash_left_discarded_is_removed_and_nothing_else(tmp_path):
    kept = ReplicaStorage(tmp_path / "kept-v0", LOG_CONFIG, now_ms=0)
    append(kept, leader_epoch=0)
    kept.close()
    ReplicaStorage(tmp_path / "gone-v0", LOG_CONFIG, now_ms=0).discard()
    assert remove_discarded(tmp_path) == 1
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept-v0"]
    assert remove_discarded(tmp_path / "no-such-directory") == 0
