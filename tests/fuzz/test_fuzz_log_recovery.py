"""Fuzzing log recovery (``mafka4.log.log``): damaged files never make the log serve a bad batch.

A log is written, stopped (uncleanly: the descriptors are just closed, as when the process
dies; or cleanly with ``close``), its files damaged (truncated, bits flipped), and opened
again. What recovery promises (log.py's docstring) is checked: ``open`` does not raise, the
log it recovers is a prefix of what was written, and every batch a read returns is whole,
CRC-valid, contiguous, and holds the records that were written at those offsets.

Damage confined to what recovery scans (the segments after the recovery point, any file
when the checkpoint is gone, indexes anywhere) is always survived. Bit rot inside a segment
that recovery trusts (fsynced before a clean shutdown) is caught by the read path, which
checks every batch's CRC: the batches before the damage are served, the damaged one never.

``MAFKA4_FUZZ_EXAMPLES`` (default 40) scales the number of examples of every fuzz test here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mafka4.batch_frame import CRC_START, check_batch, iter_batches, stamp
from mafka4.batch_payload import decode_batches, encode_batch
from mafka4.errors import CorruptRecord
from mafka4.limits.servers import LogConfig
from mafka4.log.log import Log
from mafka4.log.recovery_point import RECOVERY_POINT_FILE

from scratch_dirs import memory_scratch  # tmpfs: the fsyncs are real and return at once

EXAMPLES = int(os.environ.get("MAFKA4_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write_log(directory: Path, batches: int, config: LogConfig) -> tuple[list[bytes], Log]:
    """Append ``batches`` one- or two-record batches; return every value in offset order and the log."""
    log = Log.open(directory, config, 0)
    values: list[bytes] = []
    for index in range(batches):
        records = [(b"k%d" % (index % 3), b"value-%d-%d" % (index, i), 1000 + index, None) for i in range(1 + index % 2)]
        batch = bytearray(encode_batch(records))
        stamp(batch, log.log_end_offset, 0)
        log.append(batch, 1000 + index)
        values += [value for _, value, _, _ in records]
    return values, log


def die(log: Log, directory: Path) -> None:
    """The process dies: its descriptors close, nothing is flushed or marked clean."""
    prefix = str(directory) + os.sep
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(prefix):
            os.close(int(name))


def read_everything(log: Log) -> bytes:
    chunks, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        assert data, f"no batch readable at {offset} below the log end {log.log_end_offset}"
        chunks.append(data)
        *_, (_, last) = iter_batches(data, check_crc=False)
        offset = last.next_offset
    return b"".join(chunks)


def assert_serves_a_prefix(log: Log, values: list[bytes]) -> None:
    data = read_everything(log)
    position, expected_offset = 0, log.log_start_offset
    while position < len(data):
        header = check_batch(data, position)  # raises CorruptRecord: a corrupt batch was served
        assert header.base_offset == expected_offset, (header.base_offset, expected_offset)
        expected_offset = header.next_offset
        position += header.size_bytes
    assert expected_offset == log.log_end_offset
    assert [record.value for record in decode_batches(data)] == values[:log.log_end_offset]


def damage(path: Path, data: st.DataObject) -> None:
    size = path.stat().st_size
    if data.draw(st.booleans(), label="truncate") or size == 0:
        os.truncate(path, data.draw(st.integers(0, size), label="kept bytes"))
        return
    with open(path, "r+b") as handle:
        for _ in range(data.draw(st.integers(1, 3), label="flips")):
            position = data.draw(st.integers(0, size - 1), label="byte")
            handle.seek(position)
            byte = handle.read(1)[0] ^ (1 << data.draw(st.integers(0, 7), label="bit"))
            handle.seek(position)
            handle.write(bytes([byte]))


log_configs = st.builds(
    LogConfig, segment_bytes_max=st.just(4096), retention_ms=st.none(),
    flush_interval_ms=st.none(), flush_interval_messages=st.sampled_from([None, 1, 7]),
    index_interval_bytes=st.sampled_from([32, 256, 1024]),
)


@FUZZ
@given(st.integers(1, 120), log_configs, st.data())
def test_damage_that_recovery_scans_never_makes_the_log_serve_a_bad_batch(batches, config, data):
    with memory_scratch() as tmp:
        directory = Path(tmp)
        values, log = write_log(directory, batches, config)
        segments = sorted(directory.glob("*.log"))
        die(log, directory)
        lose_checkpoint = data.draw(st.booleans(), label="lose the recovery point")
        if lose_checkpoint:
            (directory / RECOVERY_POINT_FILE).unlink(missing_ok=True)
        # Without a checkpoint every segment is scanned; with one, the last one surely is.
        candidates = segments if lose_checkpoint else segments[-1:]
        victims = data.draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=2), label="segments")
        for segment in victims:
            suffix = data.draw(st.sampled_from([".log", ".log", ".index", ".timeindex"]), label="file")
            path = segment.with_suffix(suffix)
            if path.exists():
                damage(path, data)
        recovered = Log.open(directory, config, 5000)
        try:
            assert_serves_a_prefix(recovered, values)
        finally:
            recovered.close()


@FUZZ
@given(st.integers(1, 120), log_configs, st.booleans(), st.data())
def test_damaged_indexes_or_checkpoint_never_change_what_is_read(batches, config, clean, data):
    with memory_scratch() as tmp:
        directory = Path(tmp)
        values, log = write_log(directory, batches, config)
        if clean:
            log.close()
        else:
            log.flush()
            die(log, directory)
        files = sorted(directory.glob("*.index")) + sorted(directory.glob("*.timeindex"))
        files.append(directory / RECOVERY_POINT_FILE)
        for path in data.draw(st.lists(st.sampled_from(files), min_size=1, max_size=3), label="files"):
            damage(path, data)
        recovered = Log.open(directory, config, 5000)
        try:
            assert recovered.log_end_offset == len(values)
            assert_serves_a_prefix(recovered, values)
            for offset in range(0, len(values), 7):  # lookups through the damaged indexes
                assert decode_batches(recovered.read(offset, 1))[0].offset <= offset
        finally:
            recovered.close()


@FUZZ
@given(st.integers(2, 120), log_configs, st.data())
def test_a_bit_flipped_in_a_trusted_segment_is_never_served(batches, config, data):
    with memory_scratch() as tmp:
        directory = Path(tmp)
        values, log = write_log(directory, batches, config)
        log.close()  # a clean shutdown: recovery trusts every segment and scans none
        segment = data.draw(st.sampled_from(sorted(directory.glob("*.log"))), label="segment")
        file_bytes = segment.read_bytes()
        position, victim = data.draw(st.sampled_from(list(iter_batches(file_bytes))), label="batch")
        # A byte the CRC covers, so the damage is detectable (the header stays parseable).
        byte = data.draw(st.integers(position + CRC_START, position + victim.size_bytes - 1), label="byte")
        with open(segment, "r+b") as handle:
            handle.seek(byte)
            handle.write(bytes([file_bytes[byte] ^ (1 << data.draw(st.integers(0, 7), label="bit"))]))
        recovered = Log.open(directory, config, 5000)
        try:
            if recovered.log_end_offset <= victim.base_offset:
                # Damage in the walked tail of the last segment: recovery scanned it and cut there.
                assert_serves_a_prefix(recovered, values)
                return
            assert recovered.log_end_offset == len(values), "recovery trusted the segment"
            served = read_up_to_the_damage(recovered, victim.base_offset)
            assert [record.value for record in decode_batches(served)] == values[:victim.base_offset]
            with pytest.raises(CorruptRecord, match=f"{segment.name}: the batch at byte {position} is damaged"):
                recovered.read(victim.base_offset, 1 << 20)
            for offset in range(victim.base_offset, victim.next_offset):
                with pytest.raises(CorruptRecord):
                    recovered.read(offset, 1)
        finally:
            recovered.close()


def read_up_to_the_damage(log: Log, damaged_offset: int) -> bytes:
    """Everything readable below ``damaged_offset``, checking that no read passes it."""
    chunks, offset = [], log.log_start_offset
    while offset < damaged_offset:
        data = log.read(offset, data_bytes_max := 1 << 10)
        assert data and len(data) <= max(data_bytes_max, len(data))
        *_, (_, last) = iter_batches(data)  # every batch served passes its CRC
        assert last.next_offset <= damaged_offset, "a read went past the damaged batch"
        chunks.append(data)
        offset = last.next_offset
    return b"".join(chunks)
