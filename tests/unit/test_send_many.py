"""``Producer.send_many``'s parts: the accumulator's runs, the future, the checks of its values."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.batch_frame import HEADER_BYTES
from mafka4.client.accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from mafka4.client.futures import RecordMetadata
from mafka4.client.producer import _running_sizes, _values_as_bytes
from mafka4.client.send_many import ManyFuture, SentMessages, SentPart
from mafka4.errors import InvalidRecord, MessageTooLarge, NotEnoughReplicas
from mafka4.limits import ProducerConfig

SIZE = 1000  # each value's buffer bytes in these tests: 984 bytes and the record overhead


def values(count, start=0):
    return [b"%06d" % (start + i) + b"x" * 978 for i in range(count)]


def ends_of(count):
    return [SIZE * (i + 1) for i in range(count)]


def append_many(accumulator, value_list, key=None, partition=None, timestamp_ms=7, future=None):
    future = future or ManyFuture()
    opened, closed = accumulator.append_many(key, value_list, ends_of(len(value_list)), partition, timestamp_ms, None,
                                             0, future)
    return future, opened, closed


def drain(accumulator, partition):
    batches = []
    while (batch := accumulator.pop_ready(partition, now_ms=10**9)) is not None:
        batches.append(batch)
    return batches


def test_a_call_fills_batches_in_order_and_keyed_values_stay_in_one_partition():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=2)
    accumulator.reserve(10 * SIZE)
    sent = values(10)
    _, opened, closed = append_many(accumulator, sent, key=b"k")
    target = accumulator.partitioner.partition(b"k", None)
    assert opened == {target} and closed == {target}
    batches = drain(accumulator, target)
    assert [len(batch.records) for batch in batches] == [4, 4, 2], "4096 holds 4 records of 1000 bytes and the header"
    assert [record[2] for batch in batches for record in batch.records] == sent
    assert all(record[:2] == (0, b"k") for batch in batches for record in batch.records)
    assert [batch.size_bytes - HEADER_BYTES for batch in batches] == [4 * SIZE, 4 * SIZE, 2 * SIZE]


def test_keyless_calls_move_on_to_the_next_partition_with_each_batch_as_sends_do():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=2)
    accumulator.reserve(10 * SIZE)
    sent = values(10)
    append_many(accumulator, sent)
    first, second = drain(accumulator, 0), drain(accumulator, 1)
    assert [len(b.records) for b in first] == [4, 2] and [len(b.records) for b in second] == [4]
    assert [r[2] for r in first[0].records] == sent[0:4]
    assert [r[2] for r in second[0].records] == sent[4:8]
    assert [r[2] for r in first[1].records] == sent[8:10]


def test_a_call_first_fills_the_open_batch_a_send_started():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=1)
    accumulator.append(None, b"s" * 984, None, 5, None, SIZE, now_ms=0)
    accumulator.reserve(5 * SIZE)
    append_many(accumulator, values(5), timestamp_ms=9)
    batches = drain(accumulator, 0)
    assert [len(batch.records) for batch in batches] == [4, 2]
    assert (batches[0].first_timestamp_ms, batches[0].max_timestamp_ms) == (5, 9)
    assert [record[0] for record in batches[0].records] == [0, 4, 4, 4], "timestamps are deltas from the first"


def test_a_value_larger_than_a_batch_goes_alone():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=2048, linger_ms=10, message_bytes_max=8192),
                                    partitions=1)
    big = [b"a" * 100, b"b" * 5000, b"c" * 100]
    ends = _running_sizes(big, 16, accumulator._config)
    accumulator.reserve(ends[-1])
    future = ManyFuture()
    accumulator.append_many(b"k", big, ends, None, 1, None, 0, future)
    assert [[record[2] for record in batch.records] for batch in drain(accumulator, 0)] == [[big[0]], [big[1]], [big[2]]]


def test_the_future_gives_every_message_s_offset_in_order_once_every_part_is_answered():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=2)
    accumulator.reserve(10 * SIZE)
    seen = []
    future, _, _ = append_many(accumulator, values(10), future=ManyFuture(lambda sent, error: seen.append((sent, error))))
    batches = {0: drain(accumulator, 0), 1: drain(accumulator, 1)}
    for batch, base in ((batches[1][0], 500), (batches[0][1], 104), (batches[0][0], 100)):
        assert not future.done()
        batch.sent_time_ms = 3.0
        accumulator.complete(batch, base, None)
    assert future.done() and accumulator.reserved_bytes == 0
    sent = future.result(0)
    assert seen == [(sent, None)]
    assert [(m.partition, m.offset) for m in sent] == [(0, 100), (0, 101), (0, 102), (0, 103), (1, 500), (1, 501),
                                                       (1, 502), (1, 503), (0, 104), (0, 105)]
    assert len(sent) == 10 and sent[4] == RecordMetadata("t", 1, 500, 7, 3.0) and sent[-1].offset == 105
    assert [m.offset for m in sent[3:6]] == [103, 500, 501]
    with pytest.raises(IndexError):
        sent[10]


def test_a_failed_part_fails_the_call_once_every_part_is_answered():
    accumulator = RecordAccumulator("t", ProducerConfig(batch_bytes_max=4096, linger_ms=10), partitions=1)
    accumulator.reserve(6 * SIZE)
    seen = []
    future, _, _ = append_many(accumulator, values(6), key=b"k", future=ManyFuture(lambda *answer: seen.append(answer)))
    first, second = drain(accumulator, 0)
    error = NotEnoughReplicas("isr too small")
    accumulator.complete(first, None, error)
    assert not future.done(), "the other part is still unanswered"
    accumulator.complete(second, 104, None)
    assert seen == [(None, error)] and future.exception(0) is error
    with pytest.raises(NotEnoughReplicas):
        future.result(0)
    late = []
    future.add_callback(lambda *answer: late.append(answer))
    assert late == [(None, error)], "a callback added after the answer runs at once"


def test_a_call_without_values_is_answered_at_once_and_acks_0_offsets_stay_unknown():
    empty = ManyFuture()
    empty.seal()
    assert empty.done() and list(empty.result(0)) == []
    sent = SentMessages((SentPart(RecordMetadata("t", 0, -1, 1), 3),))
    assert [m.offset for m in sent] == [-1, -1, -1]


def test_values_must_be_bytes_and_the_error_names_the_message():
    assert _values_as_bytes((b"a", bytearray(b"b"), memoryview(b"c")), None) == [b"a", b"b", b"c"]
    assert _values_as_bytes(["a", "b"], str.encode) == [b"a", b"b"]
    with pytest.raises(InvalidRecord, match="message 1's value is None"):
        _values_as_bytes([b"a", None], None)
    with pytest.raises(InvalidRecord, match="message 2: .*type str is not bytes.*value_serializer"):
        _values_as_bytes([b"a", b"b", "c"], None)


def test_a_call_larger_than_a_message_or_the_buffer_allows_is_refused_whole():
    config = ProducerConfig(message_bytes_max=2000, buffer_bytes_max=4 * 1024 * 1024)
    assert _running_sizes([b"a" * 10, b"b" * 20], 16, config) == [26, 62]
    with pytest.raises(MessageTooLarge, match="message 1 of 2016 bytes exceeds message_bytes_max=2000"):
        _running_sizes([b"a", b"b" * 2000], 16, config)
    with pytest.raises(MessageTooLarge, match="more than buffer_bytes_max=4194304"):
        _running_sizes([b"a" * 1900] * 3000, 16, config)


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(st.tuples(st.sampled_from([None, b"k1", b"k2"]), st.lists(st.integers(1, 3000), min_size=1,
                                                                                 max_size=12), st.booleans()),
                      min_size=1, max_size=15))
def test_sends_and_send_many_calls_keep_per_key_order_fill_batches_and_account_every_byte(calls):
    """Any mix of sends and send_many calls, keyed and keyless: every value lands once, a key's values
    keep their order, no batch grows past batch_bytes_max but for a lone large value, and the
    buffer holds exactly what was appended."""
    config = ProducerConfig(batch_bytes_max=4096, linger_ms=10, message_bytes_max=8192)
    accumulator = RecordAccumulator("t", config, partitions=3)
    sent_by_key, number, reserved = {}, 0, 0
    for key, sizes, as_many in calls:
        values = []
        for size in sizes:
            values.append(b"%06d" % number + b"v" * size)
            number += 1
        sent_by_key.setdefault(key, []).extend(values)
        overhead = RECORD_OVERHEAD_BYTES + (len(key) if key else 0)
        if as_many:
            ends = _running_sizes(values, overhead, config)
            accumulator.reserve(ends[-1])
            accumulator.append_many(key, values, ends, None, 0, None, 0, ManyFuture())
            reserved += ends[-1]
        else:
            for value in values:
                accumulator.append(key, value, None, 0, None, overhead + len(value), now_ms=0)
                reserved += overhead + len(value)
    assert accumulator.reserved_bytes == reserved
    accumulator.close_all()
    batches = [batch for partition in range(3) for batch in drain(accumulator, partition)]
    assert sum(batch.size_bytes - HEADER_BYTES for batch in batches) == reserved
    assert all(batch.size_bytes <= config.batch_bytes_max or len(batch.records) == 1 for batch in batches)
    landed = [record[2] for batch in batches for record in batch.records]
    assert sorted(landed) == sorted(value for values in sent_by_key.values() for value in values), "each value once"
    for key in (b"k1", b"k2"):
        in_partition = [record[2] for batch in batches for record in batch.records if record[1] == key]
        assert in_partition == sent_by_key.get(key, []), "a key's values keep their order in its one partition"


def test_a_raising_send_many_callback_is_logged_and_the_others_still_run(caplog):
    seen = []

    def bad(sent, error):
        raise RuntimeError("boom")
    future = ManyFuture(bad)
    future.add_callback(lambda sent, error: seen.append(len(sent)))
    future.seal()
    assert seen == [0] and "send_many callback raised" in caplog.text
