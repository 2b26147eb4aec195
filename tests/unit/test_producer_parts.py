"""The producer's pure parts: partitioner, accumulator (batching, buffer bound), futures, stats."""

import threading

import numpy as np
import pytest

from mafka4.batch_payload import RESERVED_HEADER_PREFIX, SOURCE_HEADER
from mafka4.bench.stats import percentiles_ms
from mafka4.client.accumulator import RecordAccumulator
from mafka4.client.futures import BatchResult, RecordMetadata
from mafka4.client.partitioner import Partitioner
from mafka4.client.producer import _checked_headers, _checked_timestamp_ms
from mafka4.errors import BufferFull, InvalidRecord, NotEnoughReplicas
from mafka4.limits import ProducerConfig
from mafka4.virtual.vp_records import LOST_HEADER


def test_a_key_always_lands_in_the_same_partition_and_keys_spread():
    partitioner = Partitioner("t", 8)
    keys = [f"key-{i}".encode() for i in range(2000)]
    first = [partitioner.partition(k, None) for k in keys]
    assert first == [Partitioner("t", 8).partition(k, None) for k in keys]
    counts = np.bincount(first, minlength=8)
    assert counts.min() > 150  # 250 expected per partition


def test_keyless_messages_stick_to_a_partition_until_its_batch_closes():
    partitioner = Partitioner("t", 3)
    assert partitioner.partition(None, None) == 0
    partitioner.batch_closed(1)
    assert partitioner.partition(None, None) == 0
    partitioner.batch_closed(0)
    assert partitioner.partition(None, None) == 1


def test_explicit_partition_must_exist():
    with pytest.raises(InvalidRecord, match="partitions 0..1"):
        Partitioner("t", 2).partition(None, 2)


def record(size, partition=0):
    """append's record arguments: (key, value, partition, timestamp_ms, headers)."""
    return (None, b"x" * size, partition, 0, None)


def test_batches_close_when_full_and_keep_order():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=1)
    closed_count = 0
    for _ in range(10):
        _, _, _, closed = accumulator.append(*record(984), 1000, now_ms=0)
        closed_count += closed
    assert closed_count == 2  # 4096 holds 4 records of 1000 bytes plus the header
    first, second = accumulator.pop_ready(0, now_ms=0), accumulator.pop_ready(0, now_ms=0)
    assert len(first.records) == 4 and len(second.records) == 4 and accumulator.pop_ready(0, now_ms=0) is None


def test_a_lingered_batch_keeps_growing_until_the_sender_takes_it():
    accumulator = RecordAccumulator("t", ProducerConfig(linger_ms=10), partitions=1)
    accumulator.append(*record(84), 100, now_ms=1000)
    assert accumulator.linger_remaining_ms(0, now_ms=1004) == pytest.approx(6)
    assert accumulator.pop_ready(0, now_ms=1004) is None, "not sendable before linger_ms"
    accumulator.append(*record(84), 100, now_ms=1012)  # lingered, but no free slot took it yet
    assert len(accumulator.pop_ready(0, now_ms=1012).records) == 2
    assert accumulator.pop_ready(0, now_ms=1012) is None


@pytest.mark.parametrize("name", ["mafka4.lost", "mafka4.src", "mafka4.anything"])
def test_a_header_in_mafka4_s_own_namespace_is_refused_at_send(name):
    with pytest.raises(InvalidRecord, match=f"header '{name}': names starting with 'mafka4.' are mafka4's own"):
        _checked_headers([("trace", b"1"), (name, b"x")])
    assert _checked_headers([("mafka4", b"1"), ("trace", bytearray(b"2"))]) == [("mafka4", b"1"), ("trace", b"2")]
    assert SOURCE_HEADER.startswith(RESERVED_HEADER_PREFIX) and LOST_HEADER.startswith(RESERVED_HEADER_PREFIX)


@pytest.mark.parametrize("timestamp_ms", [-1, 2**63, "soon", None.__class__])
def test_a_timestamp_that_is_not_epoch_milliseconds_is_refused_at_send(timestamp_ms):
    with pytest.raises(InvalidRecord, match="timestamp_ms=.* is not milliseconds since the epoch"):
        _checked_timestamp_ms(timestamp_ms)
    assert _checked_timestamp_ms(1_700_000_000_000.0) == 1_700_000_000_000


def test_buffer_full_raises_with_on_full_error_and_frees_on_answer():
    config = ProducerConfig(buffer_bytes_max=4096, batch_bytes_max=4096, on_full="error")
    accumulator = RecordAccumulator("t", config, partitions=1)
    accumulator.append(*record(3984), 4000, now_ms=0)
    with pytest.raises(BufferFull, match="buffer_bytes_max=4096"):
        accumulator.append(*record(184), 200, now_ms=0)
    accumulator.close_all()
    batch = accumulator.pop_ready(0, now_ms=0)
    accumulator.answered(batch, 4000)
    accumulator.reserve(200)
    assert accumulator.reserved_bytes == 200


def test_blocking_buffer_times_out_then_waits_for_space():
    config = ProducerConfig(buffer_bytes_max=4096, batch_bytes_max=4096, block_ms_max=50)
    accumulator = RecordAccumulator("t", config, partitions=1)
    accumulator.append(*record(3984), 4000, now_ms=0)
    with pytest.raises(BufferFull):
        accumulator.append(*record(184), 200, now_ms=0)
    blocking = RecordAccumulator("t", ProducerConfig(buffer_bytes_max=4096, batch_bytes_max=4096, block_ms_max=5000),
                                 partitions=1)
    blocking.append(*record(3984), 4000, now_ms=0)
    blocking.close_all()
    pending = blocking.pop_ready(0, now_ms=0)
    threading.Timer(0.02, blocking.answered, (pending, 4000)).start()
    blocking.append(*record(184), 200, now_ms=0)  # returns once the answered batch gave its bytes back
    assert blocking.reserved_bytes == 200


def test_append_picks_the_partition_and_moves_keyless_traffic_on_when_it_opens_or_closes_a_batch():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=2)
    placed = [accumulator.append(None, b"x" * 984, None, 0, None, 1000, now_ms=0)[1] for _ in range(7)]
    # 1 and 2 open batches in 0 and 1; 3-5 fill 0's batch (4 records); 6 finds it full, so it
    # closes it and opens the next in 0, and 7 moves on to 1
    assert placed == [0, 1, 0, 0, 0, 0, 1]
    keyed = accumulator.append(b"k", b"x", None, 0, None, 100, now_ms=0)[1]
    assert keyed == accumulator.partitioner.partition(b"k", None), "a key picks its partition; no sticky move"
    assert accumulator.append(None, b"x", 0, 0, None, 100, now_ms=0)[1] == 0


def test_a_send_to_a_partition_that_does_not_exist_takes_no_buffer_bytes():
    accumulator = RecordAccumulator("t", ProducerConfig(), partitions=2)
    with pytest.raises(InvalidRecord, match="partitions 0..1"):
        accumulator.append(None, b"x", 2, 0, None, 100, now_ms=0)
    assert accumulator.reserved_bytes == 0


def test_record_futures_share_their_batch_result_and_run_callbacks_once():
    result = BatchResult("t", 1)
    seen = []
    result.add_callback(0, 11, lambda metadata, error: seen.append(metadata.offset))
    result.complete(100, None)
    result.add_callback(2, 12, lambda metadata, error: seen.append(metadata.offset))
    assert seen == [100, 102]
    assert result.metadata(3, 5).offset == 103
    failed = BatchResult("t", 0)
    failed.complete(None, NotEnoughReplicas("isr too small"))
    with pytest.raises(NotEnoughReplicas):
        failed.metadata(0, 0)


def test_a_callback_given_to_append_is_answered_with_its_record_s_metadata_or_the_batch_s_error():
    accumulator = RecordAccumulator("t", ProducerConfig(linger_ms=0), partitions=2)
    seen = []
    for value, stamp in ((b"a", 1000), (b"b", 990), (b"c", 1007)):
        accumulator.append(None, value, 0, stamp, None, 100, now_ms=0,
                           callback=lambda metadata, error: seen.append((metadata, error)))
    batch = accumulator.pop_ready(0, now_ms=0)
    assert (batch.first_timestamp_ms, batch.max_timestamp_ms) == (1000, 1007)
    assert [record[0] for record in batch.records] == [0, -10, 7], "timestamps kept as deltas from the first"
    batch.sent_time_ms = 5.5
    accumulator.complete(batch, 40, None)
    assert seen == [(RecordMetadata("t", 0, 40 + index, stamp, 5.5), None)
                    for index, stamp in enumerate((1000, 990, 1007))]
    seen.clear()
    accumulator.append(None, b"d", 1, 1, None, 100, now_ms=0, callback=lambda metadata, error: seen.append((metadata, error)))
    error = NotEnoughReplicas("isr too small")
    accumulator.complete(accumulator.pop_ready(1, now_ms=0), None, error)
    assert seen == [(None, error)] and accumulator.reserved_bytes == 0


def test_a_raising_callback_does_not_keep_the_others_from_running(caplog):
    result = BatchResult("t", 0)
    seen = []
    result.add_callback_while_open(0, 1, lambda metadata, error: 1 / 0)
    result.add_callback_while_open(1, 1, lambda metadata, error: seen.append(metadata.offset))
    result.complete(7, None)
    assert seen == [8] and "producer callback raised" in caplog.text


def test_percentiles_are_exact_nearest_rank():
    samples_ns = np.arange(1, 1001) * 1_000_000  # 1..1000 ms
    assert percentiles_ms(samples_ns) == {"p50": 500.0, "p99": 990.0, "p99.9": 999.0}
    assert percentiles_ms([7_000_000]) == {"p50": 7.0, "p99": 7.0, "p99.9": 7.0}
