"""Power loss on real files: the fsync points a log records, the cut back to them, and recovery after.

A process "dies" here by closing its descriptors without a flush (``kill``): the files hold every
write, as the page cache would after a SIGKILL. ``cut_to_fsync_points`` then keeps only what
was fsynced, and the reopened log must hold exactly the batches below the flushed offset at the
moment of the kill, each whole and CRC-valid, and nothing written after it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4 import batch_frame, batch_payload
from mafka4.limits import FSYNC_POINTS_PRUNE_ENTRIES_MIN
from mafka4.limits.servers import LogConfig
from mafka4.log import fsync_points
from mafka4.log.checkpoint import write_checkpoint
from mafka4.log.epochs import EpochHistory
from mafka4.log.fsync_points import (FSYNC_POINTS_FILE, cut_to_fsync_points, cut_tree_to_fsync_points,
                                     read_fsync_points)
from mafka4.log.log import Log, read_recovery_point
from mafka4.log.replica_storage import ReplicaStorage

CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None, flush_interval_messages=None)


@pytest.fixture(autouse=True)
def recording():
    fsync_points.set_recording(True)
    yield
    fsync_points.set_recording(False)


def make_batch(base_offset: int, value_bytes: int, count: int = 1, timestamp_ms: int = 10_000) -> bytes:
    batch = bytearray(batch_payload.encode_batch(
        [(b"k", bytes([i % 256]) * value_bytes, timestamp_ms + i, None) for i in range(count)]))
    batch_frame.stamp(batch, base_offset, 1)
    return bytes(batch)


def append(log: Log, value_bytes: int = 300, count: int = 1) -> bytes:
    batch = make_batch(log.log_end_offset, value_bytes, count)
    log.append(batch, now_ms=10_000)
    return batch


def kill(log: Log) -> None:
    """The process dies: descriptors close, nothing is flushed (the page cache keeps every write)."""
    for segment in log._segments:
        segment.close()


def whole_log(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 30)


def log_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def assert_power_loss_keeps_the_flushed_batches(log: Log, directory: Path, config: LogConfig,
                                                appended: list[bytes]) -> Log:
    """Kill ``log``, cut its files to their fsync points and reopen it: it must hold exactly the
    batches of ``appended`` below its flushed offset, each found through the indexes. Returns
    the reopened log."""
    flushed = log.flushed_offset
    survivors = [batch for batch in appended if batch_frame.read_header(batch).next_offset <= flushed]
    kill(log)
    cut_to_fsync_points(directory)
    recovered = Log.open(directory, config, now_ms=0)
    assert recovered.log_end_offset == flushed
    assert whole_log(recovered) == b"".join(survivors)
    assert log_bytes(directory) == sum(map(len, survivors))  # nothing half-written past the last batch
    for offset in range(recovered.log_start_offset, recovered.log_end_offset):
        assert recovered.read(offset, 1)
    return recovered


def test_a_cut_log_reopens_with_exactly_its_fsynced_prefix(tmp_path):
    log = Log.open(tmp_path, CONFIG, now_ms=0)
    durable = [append(log) for _ in range(5)]
    log.flush()
    lost = [append(log) for _ in range(3)]
    assert log.flushed_offset == 5 and log.log_end_offset == 8
    kill(log)

    cut = cut_to_fsync_points(tmp_path)
    assert cut.bytes_lost >= sum(map(len, lost))  # the three batches, and their index entries if any

    recovered = Log.open(tmp_path, CONFIG, now_ms=0)
    assert recovered.log_end_offset == 5
    assert whole_log(recovered) == b"".join(durable)
    assert log_bytes(tmp_path) == sum(map(len, durable))  # nothing half-written past the last batch
    recovered.close()


def test_segments_created_after_the_last_fsync_are_cut_to_nothing(tmp_path):
    log = Log.open(tmp_path, CONFIG, now_ms=0)
    durable = [append(log, value_bytes=1000) for _ in range(3)]
    log.flush()
    for _ in range(8):  # rolls (each roll fsyncs the segment it closes), then more in the new one
        append(log, value_bytes=1000)
    flushed, active_base = log.flushed_offset, log._segments[-1].base_offset
    assert log.segment_count > 1 and flushed <= active_base < log.log_end_offset
    kill(log)

    cut_to_fsync_points(tmp_path)
    assert (tmp_path / f"{active_base:020d}.log").stat().st_size == 0
    recovered = Log.open(tmp_path, CONFIG, now_ms=0)
    assert recovered.log_end_offset == flushed
    assert whole_log(recovered)[:sum(map(len, durable))] == b"".join(durable)
    recovered.close()


def test_a_background_flush_keeps_only_what_was_written_before_it_began(tmp_path):
    config = LogConfig(segment_bytes_max=1 << 20, index_interval_bytes=512, flush_interval_ms=100)
    log = Log.open(tmp_path, config, now_ms=0, flushes_in_background=True)
    durable = [append(log) for _ in range(6)]
    pending = log.start_flush(now_ms=10_100)
    lost = [append(log) for _ in range(3)]  # written while the fsync runs: not covered by it
    pending.run()
    assert log.finish_flush(pending)
    kill(log)

    cut = cut_to_fsync_points(tmp_path)
    assert cut.bytes_lost >= sum(map(len, lost))
    recovered = Log.open(tmp_path, CONFIG, now_ms=0)
    assert recovered.log_end_offset == 6
    assert whole_log(recovered) == b"".join(durable)
    recovered.close()


BACKGROUND = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=100,
                       flush_interval_messages=None)


def test_segments_a_background_roll_left_unflushed_are_lost_to_a_power_loss_until_the_next_flush(tmp_path):
    log = Log.open(tmp_path, BACKGROUND, now_ms=0, flushes_in_background=True)
    durable = [append(log, value_bytes=1000) for _ in range(3)]
    log.flush()
    for _ in range(12):  # several rolls, none of which fsyncs
        append(log, value_bytes=1000)
    assert log.segment_count > 2 and log.flushed_offset == 3
    kill(log)

    cut_to_fsync_points(tmp_path)
    recovered = Log.open(tmp_path, CONFIG, now_ms=0)
    assert recovered.log_end_offset == 3
    assert whole_log(recovered) == b"".join(durable)
    recovered.close()


def test_a_background_flush_after_rolls_keeps_every_rolled_segment_and_its_checkpoint(tmp_path):
    log = Log.open(tmp_path, BACKGROUND, now_ms=0, flushes_in_background=True)
    durable = [append(log, value_bytes=1000) for _ in range(12)]
    pending = log.start_flush(now_ms=10_100)
    lost = [append(log, value_bytes=1000) for _ in range(5)]  # rolls again while the fsync runs
    pending.run()
    assert log.finish_flush(pending)
    kill(log)

    cut_to_fsync_points(tmp_path)
    assert read_recovery_point(tmp_path).offset == 12  # the staged checkpoint survives its rename
    recovered = Log.open(tmp_path, CONFIG, now_ms=0)
    assert recovered.log_end_offset == 12
    assert whole_log(recovered) == b"".join(durable)
    assert log_bytes(tmp_path) == sum(map(len, durable)) and lost
    recovered.close()


def test_a_truncation_above_rolled_unflushed_segments_keeps_them_through_a_power_loss(tmp_path):
    log = Log.open(tmp_path, BACKGROUND, now_ms=0, flushes_in_background=True)
    appended = [append(log, value_bytes=1000) for _ in range(12)]
    cut = log._segments[-2].base_offset + 1  # inside the last segment a roll closed
    log.truncate_to(cut)
    assert log.flushed_offset == cut
    kill(log)

    cut_to_fsync_points(tmp_path)
    recovered = Log.open(tmp_path, CONFIG, now_ms=0)
    assert recovered.log_end_offset == cut
    assert whole_log(recovered) == b"".join(appended[:cut])
    recovered.close()


# Appends weigh most and are large, so that most plans roll several segments between flushes
# (hypothesis favours small values); a truncation drops the last 0-7 batches.
steps = st.lists(st.tuples(st.integers(500, 1500), st.sampled_from(["append"] * 5 + ["start", "finish", "truncate"]),
                           st.integers(0, 7)),
                 min_size=8, max_size=60)


@settings(max_examples=60, deadline=None)
@given(plan=steps, interval=st.sampled_from([1, 100, 512]))
def test_with_background_flushes_a_power_loss_leaves_the_batches_below_the_flushed_offset_and_nothing_else(
        plan, interval):
    """Appends that roll, background flushes begun, run and finished at any point among them, and
    truncations (a follower cut by its leader) that void a flush in flight."""
    config = LogConfig(segment_bytes_max=4096, index_interval_bytes=interval, flush_interval_ms=1,
                       flush_interval_messages=None)
    with tempfile.TemporaryDirectory() as root:
        directory = Path(root)
        log = Log.open(directory, config, now_ms=0, flushes_in_background=True)
        appended: list[bytes] = []
        pending = None
        for now_ms, (value_bytes, step, dropped) in enumerate(plan, start=10):
            if step == "append":
                appended.append(append(log, value_bytes))
            elif step == "start" and pending is None:
                pending = log.start_flush(now_ms)
            elif step == "finish" and pending is not None:
                pending.run()
                log.finish_flush(pending)
                pending = None
            elif step == "truncate" and appended:
                kept = max(0, len(appended) - dropped)  # near the end, as a leader cuts a follower
                offsets = [batch_frame.read_header(batch).base_offset for batch in appended]
                log.truncate_to(offsets[kept] if kept < len(appended) else log.log_end_offset)
                appended = appended[:kept]
        if pending is not None:
            pending.run()  # ran, never taken in: the log vouches for none of it
        assert_power_loss_keeps_the_flushed_batches(log, directory, config, appended).close()


batch_plans = st.lists(st.tuples(st.integers(1, 1500), st.integers(1, 3), st.booleans()), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(plan=batch_plans, interval=st.sampled_from([1, 100, 512]), truncate_at=st.none() | st.integers(0, 2**16))
def test_after_a_power_loss_the_log_holds_the_batches_below_its_flushed_offset_and_nothing_else(
        plan, interval, truncate_at):
    config = LogConfig(segment_bytes_max=4096, index_interval_bytes=interval,
                       flush_interval_ms=None, flush_interval_messages=None)
    with tempfile.TemporaryDirectory() as root:
        directory = Path(root)
        log = Log.open(directory, config, now_ms=0)
        appended = []
        for value_bytes, count, flush in plan:
            appended.append(append(log, value_bytes, count))
            if flush:
                log.flush()
        if truncate_at is not None:  # a follower cut by its leader: truncate_to is durable on return
            offsets = [batch_frame.read_header(batch).base_offset for batch in appended]
            kept = truncate_at % (len(appended) + 1)
            log.truncate_to(offsets[kept] if kept < len(appended) else log.log_end_offset)
            appended = appended[:kept] + [append(log, 200) for _ in range(3)]
        survivors = [batch for batch in appended if batch_frame.read_header(batch).next_offset <= log.flushed_offset]
        recovered = assert_power_loss_keeps_the_flushed_batches(log, directory, config, appended)
        more = append(recovered, 10)
        recovered.close()
        reopened = Log.open(directory, config, now_ms=0)
        assert whole_log(reopened) == b"".join(survivors) + more
        reopened.close()


def test_a_file_created_again_under_its_old_name_is_not_trusted_to_the_old_files_size(tmp_path):
    """Deleted and created again, a file often gets its inode back (ext4 hands the freed one out
    first): the old file's record must not cover the new file's unfsynced bytes."""
    path = tmp_path / "00000000000000000006.log"
    fd = fsync_points.create(path)
    os.write(fd, b"x" * 1000)
    fsync_points.fsync(fd)
    os.close(fd)
    path.unlink()
    fd = fsync_points.create(path)
    os.write(fd, b"y" * 500)  # never fsynced
    os.close(fd)

    cut_to_fsync_points(tmp_path)
    assert path.stat().st_size == 0


def test_a_segment_rolled_again_at_a_truncated_base_offset_keeps_nothing_unfsynced(tmp_path):
    log = Log.open(tmp_path, CONFIG, now_ms=0)
    for _ in range(9):  # three segments of three batches
        append(log, value_bytes=1000)
    log.flush()
    last_base = log._segments[-1].base_offset
    log.truncate_to(last_base - 1)  # deletes the last segment's files
    append(log, value_bytes=1000)
    log.flush()
    append(log, value_bytes=1000)  # rolls a segment at last_base again, never fsynced
    assert log._segments[-1].base_offset == last_base and log.flushed_offset == last_base
    kill(log)

    cut_to_fsync_points(tmp_path)
    assert Log.open(tmp_path, CONFIG, now_ms=0).log_end_offset == last_base


def test_checkpoints_survive_a_power_loss_because_they_are_fsynced_before_their_rename(tmp_path):
    storage = ReplicaStorage(tmp_path, CONFIG, now_ms=0)
    for _ in range(4):
        append(storage.log)
    storage.log.flush()
    storage.save_epochs(EpochHistory([(1, 0)]))
    storage.save_high_watermark(3)
    append(storage.log)
    kill(storage.log)

    cut_to_fsync_points(tmp_path)
    recovered = ReplicaStorage(tmp_path, CONFIG, now_ms=0)
    assert recovered.log.log_end_offset == 4
    assert recovered.recovered_high_watermark() == 3
    assert recovered.recovered_epochs().entries == ((1, 0),)
    recovered.close()


def test_a_file_never_fsynced_since_recording_began_is_cut_to_nothing(tmp_path):
    log = Log.open(tmp_path, CONFIG, now_ms=0)
    append(log)
    log.flush()
    (tmp_path / "scratch").write_bytes(b"x" * 100)  # written, never fsynced
    write_checkpoint(tmp_path / "high-watermark", "1")  # fsynced as .tmp, then renamed
    kill(log)

    cut = cut_to_fsync_points(tmp_path)
    assert (tmp_path / "scratch").stat().st_size == 0
    assert (tmp_path / "high-watermark").read_text() == "1"
    assert cut.files_cut == 1 and cut.bytes_lost == 100


def test_a_reopened_log_counts_what_it_found_as_durable(tmp_path):
    """What a restarted process finds survived: a second power loss before any new fsync cuts nothing of it."""
    log = Log.open(tmp_path, CONFIG, now_ms=0)
    batches = [append(log) for _ in range(3)]
    kill(log)  # a process death without power loss: the page cache keeps the unflushed batches
    reopened = Log.open(tmp_path, CONFIG, now_ms=0)
    assert reopened.log_end_offset == 3
    kill(reopened)

    cut_to_fsync_points(tmp_path)
    assert whole_log(Log.open(tmp_path, CONFIG, now_ms=0)) == b"".join(batches)


def test_a_node_tree_is_cut_directory_by_directory(tmp_path):
    first, second = (Log.open(tmp_path / name, CONFIG, now_ms=0) for name in ("t-v0", "t-v1"))
    for log in (first, second):
        append(log)
        log.flush()
        append(log)
        kill(log)
    (tmp_path / "not-a-log").mkdir()
    (tmp_path / "not-a-log" / "file").write_bytes(b"kept")  # no records: not a recording process's directory

    cut_tree_to_fsync_points(tmp_path)
    assert [Log.open(tmp_path / name, CONFIG, now_ms=0).log_end_offset for name in ("t-v0", "t-v1")] == [1, 1]
    assert (tmp_path / "not-a-log" / "file").read_bytes() == b"kept"


def test_without_recording_no_side_file_is_written_and_a_cut_is_refused(tmp_path):
    fsync_points.set_recording(False)
    log = Log.open(tmp_path, CONFIG, now_ms=0)
    append(log)
    log.flush()
    log.close()
    assert not (tmp_path / FSYNC_POINTS_FILE).exists()
    with pytest.raises(FileNotFoundError, match="MAFKA4_RECORD_FSYNC_POINTS=1"):
        cut_to_fsync_points(tmp_path)


def test_records_stay_bounded_while_files_come_and_go(tmp_path):
    for i in range(3 * FSYNC_POINTS_PRUNE_ENTRIES_MIN):  # segments rolled and deleted by retention, say
        write_checkpoint(tmp_path / f"f{i}", "x")
        if i:
            os.unlink(tmp_path / f"f{i - 1}")
        assert len(read_fsync_points(tmp_path)) <= FSYNC_POINTS_PRUNE_ENTRIES_MIN
    assert read_fsync_points(tmp_path)[os.stat(tmp_path / f"f{i}").st_ino] == (f"f{i}.tmp", 1)
