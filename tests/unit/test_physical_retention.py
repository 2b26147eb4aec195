"""Unit tests of a physical replica's retention pass: held for read nodes in mafka4 mode, never
run blind when etcd is away, unchanged in mafka3 mode. No Ray and no etcd: the feed positions
come from a stand-in reader."""

from __future__ import annotations

import asyncio
import logging
import os

from mafka4 import batch_frame, batch_payload
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ReadMode
from mafka4.limits.servers import LogConfig, ReplicaConfig
from mafka4.log.log import Log
from mafka4.physical.actor import ReplicaSpec, retention_pass

HOLD_MS = 5_000
EVERYTHING_EXPIRED_MS = 990 + 1_001  # past retention_ms for every batch, within the hold


def replica(tmp_path, read_mode: ReadMode) -> tuple[Log, ReplicaSpec, list[int]]:
    """A replica log of 100 batches (timestamps 0..990) in several segments, and their bases."""
    config = LogConfig(segment_bytes_max=4096, retention_ms=1_000, unfed_hold_ms_max=HOLD_MS, flush_interval_ms=None)
    spec = ReplicaSpec(cluster="c", topic="orders", partition=0, replica_id="w0", directory=str(tmp_path),
                       log_config=config, replica_config=ReplicaConfig(), etcd_endpoint="127.0.0.1:1",
                       read_mode=read_mode)
    log = Log.open(tmp_path, config, now_ms=0)
    for i in range(100):
        batch = bytearray(batch_payload.encode_batch([(b"k", b"v" * 100, 10 * i, None)]))
        batch_frame.stamp(batch, log.log_end_offset, 0)
        log.append(batch, now_ms=10 * i)
    bases = sorted(int(name[:20]) for name in os.listdir(tmp_path) if name.endswith(".log"))
    assert len(bases) >= 4
    return log, spec, bases


def run_pass(log: Log, spec: ReplicaSpec, positions, now_ms: int = EVERYTHING_EXPIRED_MS):
    calls = []

    def read_feed_positions() -> list[int]:
        calls.append(None)
        if isinstance(positions, Exception):
            raise positions
        return list(positions)

    return asyncio.run(retention_pass(log, spec, read_feed_positions, now_ms)), len(calls)


def test_a_mafka4_topic_keeps_what_the_slowest_read_node_has_not_fed(tmp_path):
    log, spec, bases = replica(tmp_path, ReadMode.MAFKA4)
    result, reads = run_pass(log, spec, [bases[3], bases[2] + 1])
    assert reads == 1 and result.segments_deleted == 2
    assert log.log_start_offset == bases[2]
    log.close()


def test_a_mafka4_topic_without_feed_positions_keeps_everything_within_the_hold(tmp_path):
    log, spec, bases = replica(tmp_path, ReadMode.MAFKA4)
    result, _ = run_pass(log, spec, [])
    assert result.segments_deleted == 0 and log.log_start_offset == 0
    log.close()


def test_retention_waits_for_etcd_rather_than_delete_unfed_data(tmp_path):
    log, spec, bases = replica(tmp_path, ReadMode.MAFKA4)
    result, reads = run_pass(log, spec, CoordinatorUnavailable("etcd at 127.0.0.1:1 did not answer"), now_ms=10**12)
    assert reads == 1 and result is None
    assert log.log_start_offset == 0
    log.close()


def test_unfed_data_deleted_past_the_hold_is_logged_as_an_error(tmp_path, caplog):
    log, spec, bases = replica(tmp_path, ReadMode.MAFKA4)
    with caplog.at_level(logging.ERROR, logger="mafka4.physical.actor"):
        result, _ = run_pass(log, spec, [bases[1] + 3], now_ms=10**12)
    assert result.unfed_deleted == (bases[1] + 3, bases[-1])
    assert f"orders-0: retention deleted offsets [{bases[1] + 3}, {bases[-1]})" in caplog.text
    log.close()


def test_a_mafka3_topic_reads_no_positions_and_retains_as_before(tmp_path):
    log, spec, bases = replica(tmp_path, ReadMode.MAFKA3)
    result, reads = run_pass(log, spec, CoordinatorUnavailable("never asked"))
    assert reads == 0 and result.segments_deleted == len(bases) - 1
    assert log.log_start_offset == bases[-1]
    log.close()
