"""Unit tests of the segmented log: append, read, roll, retention, flush policy, truncation."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.errors import CorruptRecord, OffsetOutOfRange
from mafka4.limits.servers import LogConfig
from mafka4.log.log import Log, read_recovery_point
from mafka4.log.recovery_point import RECOVERY_POINT_FILE, STAGED_RECOVERY_POINT_FILE, RecoveryPoint

SEGMENT_BYTES = 4096  # the smallest segment LogConfig allows


def make_batch(base_offset: int, timestamp_ms: int, value_bytes: int = 100, count: int = 1, epoch: int = 0) -> bytes:
    batch = bytearray(batch_payload.encode_batch(
        [(b"key-%d" % i, bytes([i % 256]) * value_bytes, timestamp_ms + i, None) for i in range(count)]
    ))
    batch_frame.stamp(batch, base_offset, epoch)
    return bytes(batch)


def config(**changes) -> LogConfig:
    values = dict(segment_bytes_max=SEGMENT_BYTES, index_interval_bytes=512,
                  flush_interval_ms=None, flush_interval_messages=None)
    values.update(changes)
    return LogConfig(**values)


def fill(log: Log, batches: int, timestamp_ms: int = 1_000, value_bytes: int = 100, count: int = 1,
         now_ms: int | None = None) -> list[bytes]:
    """Append ``batches`` batches, timestamps rising by 10 ms per batch; return their bytes."""
    appended = []
    for i in range(batches):
        batch = make_batch(log.log_end_offset, timestamp_ms + 10 * i, value_bytes, count)
        log.append(batch, timestamp_ms + 10 * i if now_ms is None else now_ms)
        appended.append(batch)
    return appended


def log_files(directory: Path, suffix: str = ".log") -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(suffix))


def split_batches(data: bytes) -> list[bytes]:
    parts = [data[p:p + h.size_bytes] for p, h in batch_frame.iter_batches(data)]
    assert sum(map(len, parts)) == len(data)
    return parts


# --- append and read ------------------------------------------------------------------------


def test_round_trip_across_segments_with_20_digit_names(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 60, count=2)
    assert log.log_start_offset == 0 and log.log_end_offset == 120
    names = log_files(tmp_path)
    assert len(names) >= 3
    assert all(len(name) == 24 and name[:20].isdigit() for name in names)
    assert all((tmp_path / name).stat().st_size <= SEGMENT_BYTES for name in names)
    assert log.size_bytes == sum(map(len, appended))
    assert log.read(0, 10**9) == b"".join(appended)
    for offset in range(120):
        # Reading from inside a batch starts with the batch that holds the offset.
        assert log.read(offset, 1) == appended[offset // 2]
    log.close()


def test_read_honours_bytes_max_but_returns_at_least_one_batch(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 40)
    size = len(appended[0])
    assert log.read(0, 0) == appended[0]
    assert log.read(0, size - 1) == appended[0]
    assert log.read(3, int(size * 2.5)) == b"".join(appended[3:5])
    # A read that crosses a segment boundary keeps going.
    assert log.read(0, size * 40) == b"".join(appended)
    big = make_batch(40, 5_000, value_bytes=6_000)
    log.append(bytearray(big), 5_000)  # the actor stamps batches in a bytearray
    assert log.read(40, 10) == big
    log.close()


def test_read_stops_at_end_offset(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 10, count=3)
    assert log.read(0, 10**9, end_offset=9) == b"".join(appended[:3])
    assert log.read(0, 10**9, end_offset=10) == b"".join(appended[:3])  # batch 9..11 passes it
    assert log.read(9, 10**9, end_offset=9) == b""
    assert log.read(12, 10**9, end_offset=9) == b""
    assert log.read(30, 10**9) == b""  # the log end offset
    log.close()


def test_a_damaged_batch_is_never_read_and_the_batches_before_it_are(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 5)
    log.close()  # a clean shutdown: recovery trusts the segment and scans nothing
    path = tmp_path / log_files(tmp_path)[0]
    damaged_at = sum(len(batch) for batch in appended[:3])
    data = bytearray(path.read_bytes())
    data[damaged_at + len(appended[3]) - 1] ^= 0x10  # a value byte of the batch at offset 3
    path.write_bytes(bytes(data))
    log = Log.open(tmp_path, config(), now_ms=0)

    assert log.read(0, 1 << 20) == b"".join(appended[:3]), "the read stops before the damage"
    with pytest.raises(CorruptRecord, match=rf"{path.name}: the batch at byte {damaged_at} is damaged \(fails its CRC"):
        log.read(3, 1 << 20)
    assert log.read(4, 1 << 20) == appended[4], "what follows the damage is still readable"
    log.close()


def test_read_outside_the_log_raises_offset_out_of_range(tmp_path):
    log = Log.open(tmp_path, config(retention_bytes=0), now_ms=0)
    fill(log, 60)
    assert log.apply_retention(now_ms=0).segments_deleted > 0
    start = log.log_start_offset
    assert start > 0
    for offset in (start - 1, log.log_end_offset + 1):
        with pytest.raises(OffsetOutOfRange, match=rf"\[{start}, {log.log_end_offset}\]"):
            log.read(offset, 1000)
    assert log.read(start, 1) != b""
    log.close()


def test_append_refuses_bad_batches_and_appends_nothing(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 3)
    with pytest.raises(CorruptRecord, match="expects 3"):
        log.append(make_batch(7, 0), 0)
    corrupt = bytearray(make_batch(3, 0))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        log.append(corrupt, 0)
    with pytest.raises(CorruptRecord):
        log.append(make_batch(3, 0) + make_batch(4, 0), 0)  # one batch per append
    assert log.log_end_offset == 3 and log.size_bytes == 3 * len(make_batch(0, 0))
    log.close()


def test_an_append_whose_caller_checked_the_crc_still_checks_the_rest(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 3)
    for bad, problem in ((make_batch(7, 0), "expects 3"), (make_batch(3, 0) + b"x", "one batch per request"),
                         (make_batch(3, 0)[:-1], "only")):
        with pytest.raises(CorruptRecord, match=problem):
            log.append(bad, 0, check_crc=False)
    assert log.log_end_offset == 3
    assert log.append(make_batch(3, 0), 0, check_crc=False).base_offset == 3
    log.close()


def test_append_batches_is_all_or_nothing(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    good = [make_batch(2 * i, 1_000 + i, value_bytes=300, count=2) for i in range(20)]
    headers = log.append_batches(b"".join(good[:15]), now_ms=0)
    assert [h.base_offset for h in headers] == list(range(0, 30, 2))
    before = (log.log_end_offset, log.size_bytes)
    tail = b"".join(good[15:])
    corrupt_middle = bytearray(tail)
    corrupt_middle[len(good[15]) + 60] ^= 1
    for bad in (bytes(corrupt_middle), tail[:-1], tail + b"\x00" * 3, b"".join(good[16:])):
        with pytest.raises(CorruptRecord):
            log.append_batches(bad, now_ms=0)
        assert (log.log_end_offset, log.size_bytes) == before
    assert log.append_batches(b"", now_ms=0) == []
    log.append_batches(tail, now_ms=0)
    assert log.read(0, 10**9) == b"".join(good)
    assert len(log_files(tmp_path)) > 1  # the follower path rolls segments too
    log.close()


def test_batch_headers_from_an_offset(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 30, count=3)
    assert [h.base_offset for h in log.batch_headers()] == list(range(0, 90, 3))
    assert [h.base_offset for h in log.batch_headers(40)] == list(range(39, 90, 3))
    assert list(log.batch_headers(90)) == []
    log.close()


# --- rolling --------------------------------------------------------------------------------


def test_roll_by_size_and_oversized_batch_gets_its_own_segment(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 3)
    big = make_batch(3, 2_000, value_bytes=5_000)
    log.append(big, 2_000)
    fill(log, 1, timestamp_ms=3_000)
    assert log_files(tmp_path) == [f"{0:020d}.log", f"{3:020d}.log", f"{4:020d}.log"]
    assert (tmp_path / f"{3:020d}.log").read_bytes() == big
    log.close()


def test_batches_appended_one_at_a_time_land_as_those_appended_together(tmp_path):
    """A single batch takes its own path through the log (a VP leader appends one per feed call):
    the segments, their bytes, the indexes and the flush policy's count end as with ``append_batches``."""
    batches = [make_batch(offset, 1_000 + 10 * offset, value_bytes=300 + 97 * (offset % 5)) for offset in range(40)]
    one_at_a_time = Log.open(tmp_path / "one", config(flush_interval_messages=7), now_ms=0)
    together = Log.open(tmp_path / "together", config(flush_interval_messages=7), now_ms=0)
    for batch in batches:
        header = one_at_a_time.append(batch, 1_000)
        assert header.next_offset == one_at_a_time.log_end_offset
    for start in range(0, len(batches), 4):
        together.append_batches(b"".join(batches[start:start + 4]), 1_000)
    assert log_files(tmp_path / "one") == log_files(tmp_path / "together") and len(log_files(tmp_path / "one")) > 1
    for name in log_files(tmp_path / "one", ""):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "together" / name).read_bytes(), name
    assert one_at_a_time.flushes_total > 0
    assert one_at_a_time.read(0, 1 << 20) == together.read(0, 1 << 20)
    assert one_at_a_time.offset_for_timestamp(1_205) == together.offset_for_timestamp(1_205) == 21
    one_at_a_time.close()
    together.close()


def test_roll_by_age(tmp_path):
    log = Log.open(tmp_path, config(segment_age_ms_max=1_000), now_ms=0)
    log.append(make_batch(0, timestamp_ms=0), now_ms=0)
    log.append(make_batch(1, timestamp_ms=500), now_ms=1_000)
    assert len(log_files(tmp_path)) == 1  # 1000 ms old is not older than 1000 ms
    log.append(make_batch(2, timestamp_ms=1_001), now_ms=1_001)
    assert log_files(tmp_path) == [f"{0:020d}.log", f"{2:020d}.log"]
    log.close()
    # The age survives a restart: it comes from the first batch, not from memory.
    log = Log.open(tmp_path, config(segment_age_ms_max=1_000), now_ms=5_000)
    log.append(make_batch(3, timestamp_ms=5_000), now_ms=5_000)
    assert log_files(tmp_path)[-1] == f"{3:020d}.log"
    log.close()


def test_roll_by_age_counts_record_time_so_replayed_old_data_does_not_roll_every_batch(tmp_path):
    log = Log.open(tmp_path, config(segment_age_ms_max=1_000), now_ms=0)
    for offset in range(10):
        log.append(make_batch(offset, timestamp_ms=100 * offset), now_ms=10**9)
    assert log_files(tmp_path) == [f"{0:020d}.log"]
    log.append(make_batch(10, timestamp_ms=1_001), now_ms=10**9)
    assert log_files(tmp_path) == [f"{0:020d}.log", f"{10:020d}.log"]
    log.close()


# --- time lookup and retention --------------------------------------------------------------


def test_offset_for_timestamp(tmp_path):
    log = Log.open(tmp_path, config(index_interval_bytes=200), now_ms=0)
    # Timestamps not in offset order (producer clocks disagree): 0..59 rise by 10 ms,
    # except batch 30, which carries a timestamp from far in the future.
    for offset in range(60):
        timestamp_ms = 99_000 if offset == 30 else 1_000 + 10 * offset
        log.append(make_batch(offset, timestamp_ms), now_ms=0)
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(1_000) == 0
    assert log.offset_for_timestamp(1_001) == 1
    assert log.offset_for_timestamp(1_250) == 25
    assert log.offset_for_timestamp(1_305) == 30  # the future batch is the first at or after it
    assert log.offset_for_timestamp(1_590) == 30
    assert log.offset_for_timestamp(99_000) == 30
    assert log.offset_for_timestamp(99_001) is None
    for offset in range(60):
        if offset != 30:
            expected = offset if offset < 30 else 30
            assert log.offset_for_timestamp(1_000 + 10 * offset) == expected
    # A reader bounded by a high watermark finds only batches below it.
    assert log.offset_for_timestamp(1_250, end_offset=26) == 25
    assert log.offset_for_timestamp(1_250, end_offset=25) is None
    assert log.offset_for_timestamp(99_001, end_offset=60) is None
    log.close()


def test_timestamp_at_is_the_first_timestamp_of_the_batch_holding_the_first_record_below_the_bound(tmp_path):
    """Where a group's lag in time counts from (``metrics.group_lag``): one header, across segments."""
    log = Log.open(tmp_path, config(index_interval_bytes=200), now_ms=0)
    fill(log, 60, timestamp_ms=1_000, count=3)  # batch b: offsets 3b..3b+2, timestamps 1000+10b ..+2
    assert len(log_files(tmp_path)) >= 3, "several segments"
    assert log.timestamp_at(0) == 1_000
    assert log.timestamp_at(3 * 25) == 1_250
    assert log.timestamp_at(3 * 25 + 2) == 1_250, "inside a batch: the batch's first record's"
    assert log.timestamp_at(179) == 1_590
    assert log.timestamp_at(180) is None, "nothing at or after the log end"
    assert log.timestamp_at(3 * 25, end_offset=3 * 25 + 1) == 1_250
    assert log.timestamp_at(3 * 25, end_offset=3 * 25) is None, "nothing below the high watermark"
    log.close()


def test_timestamp_at_below_the_log_start_is_the_log_starts(tmp_path):
    log = Log.open(tmp_path, config(retention_ms=1_000), now_ms=0)
    fill(log, 100, timestamp_ms=0)
    log.apply_retention(now_ms=10**9)
    assert log.log_start_offset > 0
    assert log.timestamp_at(0) == 10 * log.log_start_offset
    assert log.timestamp_at(0, end_offset=log.log_start_offset) is None
    log.close()


def test_retention_by_age_never_deletes_the_active_segment(tmp_path):
    log = Log.open(tmp_path, config(retention_ms=1_000), now_ms=0)
    fill(log, 100, timestamp_ms=0)  # 10 ms apart: 0 .. 990
    segments = log_files(tmp_path)
    assert len(segments) >= 3
    second_base = int(segments[1][:20])
    assert log.apply_retention(now_ms=1_000).segments_deleted == 0
    first_max_ms = 10 * (second_base - 1)
    assert log.apply_retention(now_ms=first_max_ms + 1_000).segments_deleted == 0
    assert log.offset_for_timestamp(0) == 0
    assert log.apply_retention(now_ms=first_max_ms + 1_001).segments_deleted == 1
    assert log.log_start_offset == second_base
    assert log_files(tmp_path) == segments[1:]
    assert not (tmp_path / segments[0].replace(".log", ".index")).exists()
    assert log.offset_for_timestamp(0) == second_base  # older timestamps now map to the log start
    assert log.apply_retention(now_ms=10**9).segments_deleted == len(segments) - 2
    assert log_files(tmp_path) == segments[-1:]
    assert log.read(log.log_start_offset, 10**9) != b""
    log.close()


def test_retention_due_ms_is_when_the_oldest_segment_first_passes_retention(tmp_path):
    """An owner of many logs looks at an idle one only then (``virtual.housekeeping``)."""
    log = Log.open(tmp_path, config(retention_ms=1_000), now_ms=0)
    fill(log, 5, timestamp_ms=0)
    assert log.segment_count == 1 and log.retention_due_ms() is None, "the active segment is never deleted"
    fill(log, 100, timestamp_ms=50)
    due_ms = log.retention_due_ms()
    assert due_ms is not None
    assert log.apply_retention(now_ms=due_ms - 1).segments_deleted == 0
    assert log.apply_retention(now_ms=due_ms).segments_deleted == 1
    assert log.retention_due_ms() > due_ms
    log.apply_retention(now_ms=10**9)
    assert log.retention_due_ms() is None
    log.close()
    unbounded = Log.open(tmp_path / "unbounded", config(retention_ms=None), now_ms=0)
    fill(unbounded, 100)
    assert unbounded.segment_count > 1 and unbounded.retention_due_ms() is None
    unbounded.close()


def test_a_flush_by_time_is_pending_while_data_waits_for_it(tmp_path):
    log = Log.open(tmp_path, config(flush_interval_ms=100), now_ms=0, flushes_in_background=True)
    assert not log.flush_by_time_pending
    fill(log, 3, now_ms=10)
    assert log.flush_by_time_pending
    assert log.start_flush(now_ms=50) is None and log.flush_by_time_pending, "not due yet: still pending"
    pending = log.start_flush(now_ms=110)
    pending.run()
    log.finish_flush(pending)
    assert not log.flush_by_time_pending
    log.close()
    never = Log.open(tmp_path / "never", config(flush_interval_ms=None), now_ms=0)
    fill(never, 3)
    assert not never.flush_by_time_pending, "no flush by time will come: nothing to wait for"
    never.close()


def test_retention_by_size(tmp_path):
    log = Log.open(tmp_path, config(retention_ms=None, retention_bytes=2 * SEGMENT_BYTES), now_ms=0)
    appended = fill(log, 150)
    sizes = [(tmp_path / name).stat().st_size for name in log_files(tmp_path)]
    assert sum(sizes) == log.size_bytes > 3 * SEGMENT_BYTES
    # The oldest segments go, and only as many as needed to get within retention_bytes.
    expected = next(k for k in range(len(sizes)) if sum(sizes[k:]) <= 2 * SEGMENT_BYTES)
    assert log.apply_retention(now_ms=0).segments_deleted == expected
    assert log.size_bytes == sum(sizes[expected:])
    assert log.read(log.log_start_offset, 10**9) == b"".join(appended[log.log_start_offset:])
    assert log.apply_retention(now_ms=0).segments_deleted == 0
    log.close()


# --- retention held for readers (fed_floor) --------------------------------------------------

HOLD_MS = 5_000


def segment_bases(directory: Path) -> list[int]:
    return [int(name[:20]) for name in log_files(directory)]


def held_log(directory: Path, **changes) -> tuple[Log, list[int]]:
    """A log of 100 batches, 10 ms apart from 0 ms, in at least 4 segments; and their bases."""
    log = Log.open(directory, config(**{"retention_ms": 1_000, "unfed_hold_ms_max": HOLD_MS, **changes}), now_ms=0)
    fill(log, 100, timestamp_ms=0)
    bases = segment_bases(directory)
    assert len(bases) >= 4
    return log, bases


def newest_ms(bases: list[int], index: int) -> int:
    """Newest timestamp of segment ``index`` of ``held_log``."""
    return 10 * (bases[index + 1] - 1)


def test_retention_keeps_every_segment_holding_an_offset_a_reader_still_needs(tmp_path):
    log, bases = held_log(tmp_path)
    now_ms = 990 + 1_001  # every segment expired, none held past the bound
    result = log.apply_retention(now_ms, fed_floor=0)
    assert (result.segments_deleted, result.unfed_deleted) == (0, None)
    result = log.apply_retention(now_ms, fed_floor=bases[1] + 1)  # inside the second segment
    assert (result.segments_deleted, result.unfed_deleted) == (1, None)
    assert log.log_start_offset == bases[1]
    assert log.read(bases[1], 10**9) != b""
    log.close()


def test_retention_deletes_held_segments_once_the_reader_fed_them(tmp_path):
    log, bases = held_log(tmp_path)
    now_ms = 990 + 1_001
    assert log.apply_retention(now_ms, fed_floor=bases[2]).segments_deleted == 2
    assert log.log_start_offset == bases[2]
    result = log.apply_retention(now_ms, fed_floor=log.log_end_offset)
    assert (result.segments_deleted, result.unfed_deleted) == (len(bases) - 3, None)
    assert segment_bases(tmp_path) == bases[-1:], "the active segment stays"
    log.close()


def test_unfed_segments_are_deleted_past_the_hold_and_reported(tmp_path):
    log, bases = held_log(tmp_path)
    past_first_ms = newest_ms(bases, 0) + 1_000 + HOLD_MS + 1  # only the oldest is held past the bound
    assert log.apply_retention(past_first_ms - 1, fed_floor=5).segments_deleted == 0
    result = log.apply_retention(past_first_ms, fed_floor=5)
    assert (result.segments_deleted, result.unfed_deleted) == (1, (5, bases[1]))
    result = log.apply_retention(10**9, fed_floor=5)
    assert (result.segments_deleted, result.unfed_deleted) == (len(bases) - 2, (bases[1], bases[-1]))
    log.close()


def test_a_hold_of_none_keeps_unfed_segments_for_ever(tmp_path):
    log, bases = held_log(tmp_path, unfed_hold_ms_max=None)
    result = log.apply_retention(10**12, fed_floor=bases[1])
    assert (result.segments_deleted, result.unfed_deleted) == (1, None)
    assert log.apply_retention(10**12, fed_floor=bases[1]).segments_deleted == 0
    log.close()


def test_without_a_floor_retention_ignores_the_hold(tmp_path):
    log, bases = held_log(tmp_path, unfed_hold_ms_max=None)
    result = log.apply_retention(990 + 1_001, fed_floor=None)
    assert (result.segments_deleted, result.unfed_deleted) == (len(bases) - 1, None)
    log.close()


def test_a_held_segment_keeps_every_newer_one_even_past_the_hold(tmp_path):
    # The oldest segment carries newer timestamps than the next one (producer clocks differ):
    # the next one is past the bound, but deleting it first would leave a hole in the log.
    log = Log.open(tmp_path, config(retention_ms=1_000, unfed_hold_ms_max=HOLD_MS), now_ms=0)
    while len(log_files(tmp_path)) < 2:
        log.append(make_batch(log.log_end_offset, 4_000), now_ms=0)
    while len(log_files(tmp_path)) < 3:
        log.append(make_batch(log.log_end_offset, 500), now_ms=0)
    now_ms = 500 + 1_000 + HOLD_MS + 1  # oldest: expired, still held; second: past the bound
    assert log.apply_retention(now_ms, fed_floor=0).segments_deleted == 0
    assert log.log_start_offset == 0
    log.close()


def test_retention_by_size_respects_the_floor_and_holds_by_the_hold_alone(tmp_path):
    log = Log.open(tmp_path, config(retention_ms=None, retention_bytes=2 * SEGMENT_BYTES,
                                    unfed_hold_ms_max=HOLD_MS), now_ms=0)
    fill(log, 150, timestamp_ms=0)
    bases = segment_bases(tmp_path)
    assert log.size_bytes > 3 * SEGMENT_BYTES
    result = log.apply_retention(0, fed_floor=bases[1])
    assert (result.segments_deleted, result.unfed_deleted) == (1, None), "oversized, but the reader needs the rest"
    past_second_ms = newest_ms(bases, 1) + HOLD_MS + 1
    assert log.apply_retention(past_second_ms - 1, fed_floor=bases[1]).segments_deleted == 0
    result = log.apply_retention(past_second_ms, fed_floor=bases[1])
    assert (result.segments_deleted, result.unfed_deleted) == (1, (bases[1], bases[2]))
    log.close()


# --- flush policy ---------------------------------------------------------------------------


def test_flush_every_batch(tmp_path):
    log = Log.open(tmp_path, config(segment_bytes_max=1 << 20, flush_interval_messages=1), now_ms=0)
    fill(log, 5, count=3)
    assert log.flushes_total == 5
    log.close()


def test_flush_every_n_messages(tmp_path):
    log = Log.open(tmp_path, config(segment_bytes_max=1 << 20, flush_interval_messages=5), now_ms=0)
    counts = []
    for _ in range(6):
        fill(log, 1, count=2)
        counts.append(log.flushes_total)
    assert counts == [0, 0, 1, 1, 1, 2]  # after 6 and after 6 more messages
    log.close()


def test_flush_by_time(tmp_path):
    log = Log.open(tmp_path, config(segment_bytes_max=1 << 20, flush_interval_ms=100), now_ms=0)
    fill(log, 1, now_ms=10)
    assert log.flushes_total == 0
    assert log.maybe_flush(now_ms=99) is False
    assert log.maybe_flush(now_ms=100) is True
    assert log.flushes_total == 1
    assert log.maybe_flush(now_ms=500) is False  # nothing new to flush
    fill(log, 1, now_ms=150)
    assert log.flushes_total == 1
    fill(log, 1, now_ms=200)  # 100 ms since the last flush: the append itself flushes
    assert log.flushes_total == 2
    log.close()


def background_log(tmp_path, **changes) -> Log:
    settings = dict(segment_bytes_max=1 << 20, flush_interval_ms=100)
    settings.update(changes)
    return Log.open(tmp_path, config(**settings), now_ms=0, flushes_in_background=True)


def test_a_background_flush_makes_durable_what_was_written_before_it_began(tmp_path):
    log = background_log(tmp_path)
    fill(log, 3, now_ms=10)
    assert log.start_flush(now_ms=99) is None  # not due yet
    pending = log.start_flush(now_ms=100)
    fill(log, 2, now_ms=101)  # appends go on while the fsync runs elsewhere
    pending.run()
    assert log.finish_flush(pending) is True
    assert (log.flushed_offset, log.log_end_offset, log.flushes_total) == (3, 5, 1)
    assert log.start_flush(now_ms=150) is None  # the interval counts from the start of the last flush
    assert log.start_flush(now_ms=200).end_offset == 5
    log.close()


@pytest.mark.parametrize("flush_interval_ms", [100, None])
def test_a_forced_background_flush_starts_whenever_data_is_unflushed(tmp_path, flush_interval_ms):
    log = background_log(tmp_path, flush_interval_ms=flush_interval_ms)
    assert log.start_flush(now_ms=10, force=True) is None, "nothing unflushed: nothing to start"
    fill(log, 3, now_ms=10)
    assert log.start_flush(now_ms=20) is None, "not due by time"
    pending = log.start_flush(now_ms=20, force=True)
    assert pending.end_offset == 3
    pending.run()
    assert log.finish_flush(pending) and log.flushed_offset == 3
    assert log.start_flush(now_ms=10**6, force=True) is None, "all flushed"
    log.close()


def test_a_log_flushing_in_background_never_fsyncs_by_time_in_append(tmp_path):
    log = background_log(tmp_path)
    fill(log, 3, now_ms=500)
    assert log.flushes_total == 0 and log.flushed_offset == 0
    log.close()


def test_flush_every_n_messages_and_flush_interval_0_stay_in_append_when_flushing_in_background(tmp_path):
    by_messages = background_log(tmp_path / "messages", flush_interval_messages=2)
    fill(by_messages, 4, now_ms=0)
    assert by_messages.flushes_total == 2
    by_messages.close()
    every_append = background_log(tmp_path / "zero", flush_interval_ms=0)
    fill(every_append, 3, now_ms=0)
    assert (every_append.flushes_total, every_append.flushed_offset) == (3, 3)
    every_append.close()


@pytest.mark.parametrize("meanwhile", ["truncated", "closed", "flushed", "not run"])
def test_a_background_flush_overtaken_by_the_log_moves_nothing(tmp_path, meanwhile):
    log = background_log(tmp_path)
    fill(log, 4, now_ms=10)
    pending = log.start_flush(now_ms=100)
    if meanwhile == "truncated":
        log.truncate_to(2)
        fill(log, 3, now_ms=101)  # offsets 2-4 again: other bytes than the flush began with
    elif meanwhile == "closed":
        log.close()
    elif meanwhile == "flushed":
        fill(log, 1, now_ms=101)
        log.flush()
    if meanwhile != "not run":
        pending.run()
    flushed_before = log.flushed_offset
    assert log.finish_flush(pending) is False
    assert log.flushed_offset == flushed_before
    log.close()


def test_a_background_flush_of_a_segment_truncated_away_reports_it_did_not_sync(tmp_path):
    log = background_log(tmp_path, segment_bytes_max=4096)
    fill(log, 41, value_bytes=300, now_ms=10)  # several segments, the active one holding unflushed batches
    assert log.segment_count > 2 and log.flushed_offset < log.log_end_offset
    pending = log.start_flush(now_ms=1000)
    log.truncate_to(log._segments[-2].base_offset)  # the active segment's files are deleted
    pending.run()
    assert pending.synced is False
    assert log.finish_flush(pending) is False
    log.close()


def test_a_roll_of_a_log_flushing_in_background_fsyncs_nothing_and_the_next_flush_covers_every_rolled_segment(tmp_path):
    log = background_log(tmp_path, segment_bytes_max=4096)
    fill(log, 41, value_bytes=300, now_ms=10)
    assert log.segment_count > 2
    assert (log.flushes_total, log.flushed_offset, read_recovery_point(tmp_path).offset) == (0, 0, 0)
    pending = log.start_flush(now_ms=1000)
    assert len(pending.files) == 3 * log.segment_count  # each segment's .log and two indexes
    assert pending.sync_directory and pending.checkpoint.offset == 41
    pending.run()
    assert log.finish_flush(pending)
    assert log.flushed_offset == 41
    assert read_recovery_point(tmp_path).offset == 41  # the staged checkpoint, put in place
    assert not (tmp_path / STAGED_RECOVERY_POINT_FILE).exists()
    fill(log, 1, value_bytes=300, now_ms=1001)  # the same segment: nothing to raise, no directory fsync
    pending = log.start_flush(now_ms=2000)
    assert len(pending.files) == 3 and not pending.sync_directory and pending.checkpoint is None
    log.close()


def test_flush_and_close_cover_the_segments_a_roll_left_unflushed(tmp_path):
    log = background_log(tmp_path, segment_bytes_max=4096)
    fill(log, 41, value_bytes=300, now_ms=10)
    log.flush()
    assert log.flushed_offset == 41 and read_recovery_point(tmp_path).offset == 41
    fill(log, 41, value_bytes=300, now_ms=20)
    log.close()
    assert read_recovery_point(tmp_path) == RecoveryPoint(82, True)


def test_a_truncation_fsyncs_the_rolled_segments_below_it_before_the_recovery_point_moves(tmp_path):
    log = background_log(tmp_path, segment_bytes_max=4096)
    fill(log, 41, value_bytes=300, now_ms=10)
    cut = log._segments[-2].base_offset + 1
    log.truncate_to(cut)
    assert log.flushed_offset == log.log_end_offset == cut
    log.close()


@pytest.mark.parametrize("meanwhile", ["truncated", "flushed"])
def test_a_voided_background_flush_leaves_no_staged_checkpoint(tmp_path, meanwhile):
    log = background_log(tmp_path, segment_bytes_max=4096)
    fill(log, 41, value_bytes=300, now_ms=10)
    pending = log.start_flush(now_ms=1000)
    pending.run()
    assert (tmp_path / STAGED_RECOVERY_POINT_FILE).exists()
    if meanwhile == "truncated":
        log.truncate_to(20)
    else:
        fill(log, 1, value_bytes=300, now_ms=1001)
        log.flush()
    checkpoint = read_recovery_point(tmp_path)
    assert log.finish_flush(pending) is False
    assert not (tmp_path / STAGED_RECOVERY_POINT_FILE).exists()
    assert read_recovery_point(tmp_path) == checkpoint
    log.close()


def test_a_checkpoint_staged_by_a_log_closed_meanwhile_is_left_and_removed_on_the_next_open(tmp_path):
    log = background_log(tmp_path, segment_bytes_max=4096)
    fill(log, 41, value_bytes=300, now_ms=10)
    pending = log.start_flush(now_ms=1000)
    pending.run()
    log.close()
    assert log.finish_flush(pending) is False
    assert read_recovery_point(tmp_path) == RecoveryPoint(41, True)
    assert (tmp_path / STAGED_RECOVERY_POINT_FILE).exists()
    Log.open(tmp_path, config(), now_ms=0).close()
    assert not (tmp_path / STAGED_RECOVERY_POINT_FILE).exists()


def test_no_flush_policy_flushes_only_on_close(tmp_path):
    log = Log.open(tmp_path, config(segment_bytes_max=1 << 20), now_ms=0)
    fill(log, 20)
    assert log.maybe_flush(now_ms=10**9) is False
    assert log.flushes_total == 0
    log.close()
    assert read_recovery_point(tmp_path).clean_shutdown
    assert read_recovery_point(tmp_path).offset == 20


def test_flushed_offset_is_where_a_power_loss_may_cut_the_log(tmp_path):
    log = Log.open(tmp_path, config(segment_bytes_max=1 << 20), now_ms=0)
    fill(log, 3)
    assert (log.flushed_offset, log.log_end_offset) == (0, 3)  # no policy: nothing fsynced yet
    log.flush()
    assert log.flushed_offset == 3
    fill(log, 2)
    assert log.flushed_offset == 3
    log.truncate_to(4)  # durable on return
    assert log.flushed_offset == 4
    log.close()
    reopened = Log.open(tmp_path, config(), now_ms=0)
    assert reopened.flushed_offset == 4  # a recovered log is durable to its end
    reopened.close()


# --- truncation and reopening ---------------------------------------------------------------


def test_truncate_to_then_append_again(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 60)
    segments = log_files(tmp_path)
    cut = int(segments[1][:20]) + 3
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert log_files(tmp_path) == segments[:2]
    assert log.read(0, 10**9) == b"".join(appended[:cut])
    assert read_recovery_point(tmp_path).offset <= cut
    with pytest.raises(AssertionError):
        log.truncate_to(cut + 1)
    replacement = [make_batch(cut + i, 50_000 + i, epoch=2) for i in range(30)]
    for batch in replacement:
        log.append(batch, 50_000)
    expected = b"".join(appended[:cut] + replacement)
    assert log.read(0, 10**9) == expected
    log.close()
    log = Log.open(tmp_path, config(), now_ms=0)
    assert log.read(0, 10**9) == expected
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    log.append(make_batch(0, 1), 1)
    log.close()


def test_close_and_reopen_keeps_everything_without_a_rescan(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 50, count=2)
    log.close()
    log.close()  # closing twice is harmless
    reopened = Log.open(tmp_path, config(), now_ms=0)
    assert reopened.flushes_total == 0  # a clean close: nothing was scanned and fsynced again
    assert reopened.read(0, 10**9) == b"".join(appended)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 100)
    assert not read_recovery_point(tmp_path).clean_shutdown  # a crash from now on is recovered
    reopened.append(make_batch(100, 10**6), 0)
    reopened.close()


def test_open_removes_stray_tmp_and_orphan_index_files(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    fill(log, 5)
    log.close()
    strays = [f"{7:020d}.index", f"{7:020d}.timeindex", f"{0:020d}.index.tmp", RECOVERY_POINT_FILE + ".tmp"]
    for name in strays:
        (tmp_path / name).write_bytes(b"junk")
    (tmp_path / "leader-epoch-checkpoint").write_text("not ours")
    log = Log.open(tmp_path, config(), now_ms=0)
    assert not any((tmp_path / name).exists() for name in strays)
    assert (tmp_path / "leader-epoch-checkpoint").exists()
    assert log.log_end_offset == 5
    log.close()


def test_without_a_recovery_point_every_segment_is_scanned_and_cut_at_corruption(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    appended = fill(log, 60)
    segments = log_files(tmp_path)
    log.close()
    crash = tmp_path / "crash"
    shutil.copytree(tmp_path, crash, ignore=shutil.ignore_patterns("crash"))
    (crash / RECOVERY_POINT_FILE).unlink()
    middle = crash / segments[1]
    data = bytearray(middle.read_bytes())
    data[len(appended[0]) + 70] ^= 0x40  # inside the second batch of the middle segment
    middle.write_bytes(bytes(data))
    recovered = Log.open(crash, config(), now_ms=0)
    second_base = int(segments[1][:20])
    assert recovered.log_end_offset == second_base + 1
    assert log_files(crash) == segments[:2]  # later segments went with the corrupt tail
    assert recovered.read(0, 10**9) == b"".join(appended[:second_base + 1])
    recovered.close()


def test_index_entries_are_written_behind_in_one_write_and_are_on_disk_for_every_flush_and_after_close(tmp_path):
    log = background_log(tmp_path, segment_bytes_max=64 * 1024)
    fill(log, 30, value_bytes=300, now_ms=10)
    segment = log._segments[-1]
    in_memory = len(segment.offset_index)
    assert in_memory > 5
    # No write per entry: the file holds none of them yet (they are rebuilt from the .log after a crash).
    assert segment.offset_index.path.stat().st_size == 0 and segment.time_index.path.stat().st_size == 0
    pending = log.start_flush(now_ms=1000)
    sizes = {file.path: file.size for file in pending.files}
    for index in (segment.offset_index, segment.time_index):
        assert sizes[index.path] == index.path.stat().st_size == in_memory * index.ENTRY.size
    pending.run()
    assert log.finish_flush(pending)
    fill(log, 10, value_bytes=300, now_ms=1001)
    entries = len(segment.offset_index)
    assert entries > in_memory
    log.close()
    reopened = Log.open(tmp_path, config(segment_bytes_max=64 * 1024), now_ms=2000)
    assert reopened.flushes_total == 0, "a clean close leaves whole indexes: nothing is scanned"
    assert len(reopened._segments[-1].offset_index) == entries
    assert [h.base_offset for h in reopened.batch_headers()] == list(range(40))
    reopened.close()


def test_a_new_log_makes_its_directory_durable_in_its_parent_at_its_first_flush_or_at_once_in_the_foreground(
        tmp_path, monkeypatch):
    synced: list[Path] = []
    for module in ("mafka4.log.log", "mafka4.log.pending_flush"):
        real = __import__(module, fromlist=["fsync_directory"]).fsync_directory
        monkeypatch.setattr(f"{module}.fsync_directory", lambda path, real=real: (synced.append(Path(path)), real(path)))
    directory = tmp_path / "t-v0"
    log = Log.open(directory, config(), now_ms=0, flushes_in_background=True)
    assert synced == [] and not (directory / RECOVERY_POINT_FILE).exists(), "opening a new log waits for no fsync"
    assert read_recovery_point(directory) == RecoveryPoint(0, False), "a missing checkpoint reads as dirty at 0"
    fill(log, 3, now_ms=10)
    pending = log.start_flush(now_ms=1000, force=True)
    pending.run()
    assert log.finish_flush(pending) and synced == [directory, tmp_path]
    fill(log, 1, now_ms=1001)
    pending = log.start_flush(now_ms=2000, force=True)
    assert not pending.sync_parent and not pending.sync_directory
    log.close()
    synced.clear()
    Log.open(directory, config(), now_ms=0, flushes_in_background=True).close()
    assert tmp_path not in synced, "a log opened again is no new directory"
    synced.clear()
    Log.open(tmp_path / "p-0", config(), now_ms=0).close()
    assert synced[:2] == [tmp_path / "p-0", tmp_path], "a log flushing in the foreground: its new segment, then its entry"


# --- descriptors ------------------------------------------------------------------------------


def open_descriptors(directory: Path) -> list[str]:
    """Names of the files under ``directory`` this process holds open."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue
        if target.startswith(str(directory) + os.sep):
            names.append(os.path.basename(target))
    return sorted(names)


def test_a_log_opens_its_files_when_used_and_release_closes_them_all(tmp_path):
    log = Log.open(tmp_path, config(), now_ms=0)
    assert open_descriptors(tmp_path) == [] and not log.holds_descriptors, "a new log holds nothing open"
    appended = fill(log, 40)  # several segments; index entries on the way
    assert log.segment_count > 1 and log.holds_descriptors
    log.release_descriptors()
    assert open_descriptors(tmp_path) == [] and not log.holds_descriptors
    assert log.read(0, 1 << 20) == b"".join(appended), "a released log reads as before"
    log.release_descriptors()
    more = fill(log, 3, timestamp_ms=2_000)  # appends reopen the active segment and its indexes
    log.flush()
    log.release_descriptors()
    log.close()
    reopened = Log.open(tmp_path, config(), now_ms=0)
    assert reopened.read(0, 1 << 20) == b"".join(appended + more)
    assert reopened.flushes_total == 0, "closed cleanly: indexes written behind by release are trusted"
    reopened.close()


def test_a_background_flush_after_release_syncs_the_files_by_path(tmp_path):
    log = Log.open(tmp_path, config(flush_interval_ms=100), now_ms=0, flushes_in_background=True)
    fill(log, 3, now_ms=0)
    pending = log.start_flush(now_ms=1_000)
    log.release_descriptors()  # as a read node closes an idle VP's files while its worker thread fsyncs
    pending.run()
    assert log.finish_flush(pending) and log.flushed_offset == log.log_end_offset == 3
    log.close()
