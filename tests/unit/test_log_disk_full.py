"""A node's ``log_dir_bytes_max``: appends past it fail as on a full disk, and leave nothing half-written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.errors import InvalidConfig
from mafka4.limits import LOG_DIR_SCAN_INTERVAL_MS
from mafka4.limits.servers import LogConfig, ReadNodeConfig
from mafka4.log.log import Log
from mafka4.log.log_dir_budget import LogDirBudget, directory_bytes

CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None, flush_interval_messages=None)


def make_batch(base_offset: int, value_bytes: int = 300, count: int = 1) -> bytes:
    batch = bytearray(batch_payload.encode_batch([(b"k", b"v" * value_bytes, 1_000 + i, None) for i in range(count)]))
    batch_frame.stamp(batch, base_offset, 0)
    return bytes(batch)


def files(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in sorted(directory.iterdir())}


def whole_log(log: Log) -> bytes:
    return log.read(log.log_start_offset, 1 << 30)


def test_appends_pass_under_the_bound_and_fail_with_enospc_past_it_leaving_the_log_as_it_was(tmp_path):
    budget = LogDirBudget(tmp_path)
    log = Log.open(tmp_path / "t-0", CONFIG, now_ms=0, budget=budget)
    kept = [make_batch(i) for i in range(3)]
    for batch in kept:
        log.append(batch, now_ms=0)
    budget.set_bytes_max(directory_bytes(tmp_path) + len(kept[0]))  # room for one more batch
    fourth = make_batch(3)
    log.append(fourth, now_ms=0)
    kept.append(fourth)
    before = files(tmp_path / "t-0")

    with pytest.raises(OSError) as refused:
        log.append(make_batch(4), now_ms=0)
    assert refused.value.errno == errno.ENOSPC and "log_dir_bytes_max" in str(refused.value)
    assert log.log_end_offset == 4 and files(tmp_path / "t-0") == before  # not a byte written
    assert whole_log(log) == b"".join(kept)
    log.close()
    assert whole_log(Log.open(tmp_path / "t-0", CONFIG, now_ms=0)) == b"".join(kept)  # reopens cleanly


def test_a_follower_append_spanning_a_roll_is_refused_whole(tmp_path):
    budget = LogDirBudget(tmp_path)
    log = Log.open(tmp_path / "t-0", CONFIG, now_ms=0, budget=budget)
    log.append(make_batch(0, 2000), now_ms=0)
    data = b"".join(make_batch(offset, 2000) for offset in range(1, 4))  # would roll twice
    budget.set_bytes_max(directory_bytes(tmp_path) + len(data) - 1)
    with pytest.raises(OSError, match="No space left on device"):
        log.append_batches(data, now_ms=0)
    assert log.log_end_offset == 1 and log.segment_count == 1
    assert sorted(name for name in os.listdir(tmp_path / "t-0") if name.endswith(".log")) == [f"{0:020d}.log"]

    budget.set_bytes_max(None)  # space again: the same append goes through
    assert [header.base_offset for header in log.append_batches(data, now_ms=0)] == [1, 2, 3]


def test_every_log_of_a_node_draws_on_one_budget(tmp_path):
    budget = LogDirBudget(tmp_path)
    first = Log.open(tmp_path / "a-v0", CONFIG, now_ms=0, budget=budget)
    second = Log.open(tmp_path / "a-v1", CONFIG, now_ms=0, budget=budget)
    batch = make_batch(0)
    budget.set_bytes_max(directory_bytes(tmp_path) + 2 * len(batch))
    first.append(batch, now_ms=0)
    second.append(batch, now_ms=0)
    with pytest.raises(OSError):
        first.append(make_batch(1), now_ms=0)
    with pytest.raises(OSError):
        second.append(make_batch(1), now_ms=0)


def test_bytes_written_by_other_processes_count_from_the_next_measure(tmp_path):
    budget = LogDirBudget(tmp_path)
    log = Log.open(tmp_path / "t-0", CONFIG, now_ms=0, budget=budget)
    batch = make_batch(0)
    budget.set_bytes_max(directory_bytes(tmp_path) + 10 * len(batch))
    log.append(batch, now_ms=0)
    (tmp_path / "t-1").mkdir()
    (tmp_path / "t-1" / "other.log").write_bytes(b"x" * 10 * len(batch))  # another replica of the node
    log.append(make_batch(1), now_ms=LOG_DIR_SCAN_INTERVAL_MS - 1)  # not measured again yet
    with pytest.raises(OSError):
        log.append(make_batch(2), now_ms=LOG_DIR_SCAN_INTERVAL_MS)


def test_a_bound_of_zero_is_a_full_disk_and_a_bad_bound_is_refused(tmp_path):
    budget = LogDirBudget(tmp_path, bytes_max=0)
    log = Log.open(tmp_path / "t-0", CONFIG, now_ms=0, budget=budget)
    with pytest.raises(OSError):
        log.append(make_batch(0), now_ms=0)
    assert log.log_end_offset == 0
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(InvalidConfig, match="log_dir_bytes_max"):
            budget.set_bytes_max(bad)
    assert budget.bytes_max == 0


def test_a_read_node_takes_its_bound_from_its_config():
    assert ReadNodeConfig().log_dir_bytes_max is None  # no bound unless asked
    assert ReadNodeConfig(log_dir_bytes_max=0).log_dir_bytes_max == 0
    with pytest.raises(InvalidConfig, match="log_dir_bytes_max"):
        ReadNodeConfig(log_dir_bytes_max=-1)
