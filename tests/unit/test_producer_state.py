"""Idempotent-producer table: retries are answered, gaps refused, memory bounded."""

import pytest

from mafka4.batch_frame import BatchHeader
from mafka4.errors import OutOfOrderSequence, UnknownProducer
from mafka4.log.producer_state import ProducerStateTable


def header(base_offset: int, producer_id: int, base_sequence: int, count: int = 1) -> BatchHeader:
    return BatchHeader(base_offset, 100, 0, 0, 0, count, 0, 0, producer_id, base_sequence)


def table_with(*headers: BatchHeader, batches: int = 5, ids: int = 10) -> ProducerStateTable:
    table = ProducerStateTable(batches, ids)
    for item in headers:
        table.record(item)
    return table


def test_a_batch_without_producer_id_is_always_appended():
    table = table_with(header(0, -1, -1))
    assert table.check(header(0, -1, -1)) is None
    assert len(table) == 0


def test_an_unknown_producer_is_accepted_at_sequence_0_only():
    table = table_with(header(0, 7, 0))
    assert table.check(header(0, 8, 0)) is None
    with pytest.raises(UnknownProducer, match="unknown to this partition") as error:
        table.check(header(0, 8, 41))
    assert isinstance(error.value, OutOfOrderSequence) and error.value.retriable


def test_the_next_sequence_is_appended():
    table = table_with(header(0, 7, 0, count=3))
    assert table.check(header(0, 7, 3)) is None


def test_a_retried_batch_gets_its_original_base_offset():
    table = table_with(header(10, 7, 0, count=3), header(13, 7, 3, count=2), header(20, 7, 5))
    assert table.check(header(0, 7, 3, count=2)) == 13
    assert table.check(header(0, 7, 0, count=3)) == 10
    assert table.check(header(0, 7, 5)) == 20


def test_a_sequence_gap_is_out_of_order():
    table = table_with(header(0, 7, 0, count=3))
    with pytest.raises(OutOfOrderSequence, match="expects 3") as error:
        table.check(header(0, 7, 4))
    assert error.value.retriable


def test_a_batch_overlapping_a_remembered_one_is_out_of_order():
    table = table_with(header(0, 7, 0, count=3))
    with pytest.raises(OutOfOrderSequence):
        table.check(header(0, 7, 0, count=2))


def test_an_old_batch_no_longer_remembered_is_out_of_order():
    table = table_with(*(header(offset, 7, offset) for offset in range(4)), batches=2)
    assert [batch.base_sequence for batch in table.remembered(7)] == [2, 3]
    assert table.check(header(0, 7, 2)) == 2
    with pytest.raises(OutOfOrderSequence, match="too old"):
        table.check(header(0, 7, 1))


def test_the_least_recently_used_producer_is_forgotten_beyond_the_bound():
    table = table_with(header(0, 1, 0), header(1, 2, 0), batches=5, ids=2)
    table.record(header(2, 1, 1))  # producer 1 is now the most recently used
    table.record(header(3, 3, 0))  # evicts producer 2
    assert len(table) == 2
    assert table.remembered(2) == ()
    assert table.check(header(0, 2, 0)) is None  # forgotten: a retry would be appended again
    assert table.check(header(0, 1, 1)) == 2


def test_truncate_from_forgets_batches_past_the_offset():
    table = table_with(header(0, 7, 0), header(1, 8, 0), header(2, 7, 1), header(3, 8, 1))
    table.truncate_from(2)
    assert table.check(header(0, 7, 1)) is None  # truncated: the retry must be appended
    assert table.check(header(0, 7, 0)) == 0
    table.truncate_from(0)
    assert len(table) == 0


def test_truncation_moves_the_next_sequence_back_to_the_first_one_dropped():
    table = table_with(*(header(offset, 7, 2 * offset, count=2) for offset in range(8)), batches=3)
    table.truncate_from(6)
    assert table.next_sequence(7) == 12
    assert table.check(header(0, 7, 10, count=2)) == 5, "the remaining remembered batch is still deduplicated"
    table.truncate_from(5)  # every remembered batch went; older ones (sequences 0..9) are in the log
    assert table.next_sequence(7) == 10
    with pytest.raises(OutOfOrderSequence, match="too old"):
        table.check(header(0, 7, 8, count=2))  # in the log: never appended twice
    assert table.check(header(0, 7, 10, count=2)) is None
