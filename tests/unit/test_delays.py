"""Delayed delivery's rules (``mafka4.delays``): when a delayed message is due, what is refused and
how, the headers' strict values, message ids, and the topic's ``delay_ms_max``."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mafka4 import errors
from mafka4.batch_payload import RESERVED_HEADER_PREFIX
from mafka4.delays import (CANCEL_OF_HEADER, DELAY_MS_MIN, DELIVER_AT_HEADER, RELEASE_OF_HEADER, MessageId,
                           decode_cancel_of, decode_deliver_at, decode_release_of, due_time_ms, encode_cancel_of,
                           encode_deliver_at, encode_release_of)
from mafka4.limits import DAY_MS, DELAY_MS_MAX, DELAY_MS_MAX_DEFAULT, TopicConfig

NOW_MS = 1_765_000_000_000
WEEK_MS = 7 * DAY_MS
INT64_MAX = 2**63 - 1


def due(**kwargs):
    return due_time_ms(**{"delay_ms": None, "deliver_at_ms": None, "now_ms": NOW_MS, "delay_ms_max": WEEK_MS, **kwargs})


def test_a_delay_or_a_deliver_at_time_gives_the_due_time_and_neither_means_no_delay():
    assert due(delay_ms=5_000) == NOW_MS + 5_000
    assert due(deliver_at_ms=NOW_MS + 90_000) == NOW_MS + 90_000
    assert due() is None


def test_both_ends_of_the_range_are_allowed():
    assert due(delay_ms=DELAY_MS_MIN) == NOW_MS + DELAY_MS_MIN
    assert due(delay_ms=WEEK_MS) == NOW_MS + WEEK_MS
    assert due(deliver_at_ms=NOW_MS + DELAY_MS_MIN) == NOW_MS + DELAY_MS_MIN
    assert due(deliver_at_ms=NOW_MS + WEEK_MS) == NOW_MS + WEEK_MS


@pytest.mark.parametrize("kwargs, parts", [
    ({"delay_ms": WEEK_MS + 1}, [f"delay_ms={WEEK_MS + 1}", f"due 1000 to {WEEK_MS} ms", f"delay_ms_max={WEEK_MS}",
                                 "larger delay_ms_max"]),
    ({"delay_ms": 999}, ["delay_ms=999", "without delay_ms", "at least 1000 ms"]),
    ({"delay_ms": 0}, ["delay_ms=0", "at least 1000 ms"]),
    ({"delay_ms": -5}, ["delay_ms=-5", "past"]),
    ({"deliver_at_ms": NOW_MS - 2_000}, [f"deliver_at_ms={NOW_MS - 2_000} (2000 ms ago)", "past", "without deliver_at_ms"]),
    ({"deliver_at_ms": NOW_MS + 500}, ["(500 ms from now)", "at least 1000 ms"]),
    ({"deliver_at_ms": NOW_MS + WEEK_MS + 1}, [f"({WEEK_MS + 1} ms from now)", "shorter delay"]),
])
def test_a_delay_out_of_range_is_refused_naming_the_value_the_range_and_the_fix(kwargs, parts):
    with pytest.raises(errors.DelayOutOfRange) as raised:
        due(**kwargs)
    for part in parts:
        assert part in raised.value.message
    assert raised.value.usage_error and not raised.value.retriable


@pytest.mark.parametrize("kwargs, part", [
    ({"delay_ms": 5_000, "deliver_at_ms": NOW_MS + 5_000}, "both given"),
    ({"delay_ms": 5_000.0}, "must be an integer"),
    ({"delay_ms": True}, "must be an integer"),
    ({"deliver_at_ms": "soon"}, "must be an integer"),
])
def test_a_delay_that_is_not_one_integer_is_an_invalid_record(kwargs, part):
    with pytest.raises(errors.InvalidRecord, match=part):
        due(**kwargs)


@given(st.integers(min_value=-10 * DAY_MS, max_value=400 * DAY_MS), st.integers(min_value=DELAY_MS_MIN, max_value=DELAY_MS_MAX))
def test_a_delay_is_due_exactly_when_it_is_in_range_and_both_forms_agree(delay_ms, delay_ms_max):
    kwargs = {"now_ms": NOW_MS, "delay_ms_max": delay_ms_max}
    if DELAY_MS_MIN <= delay_ms <= delay_ms_max:
        assert due_time_ms(delay_ms=delay_ms, deliver_at_ms=None, **kwargs) == NOW_MS + delay_ms
        assert due_time_ms(delay_ms=None, deliver_at_ms=NOW_MS + delay_ms, **kwargs) == NOW_MS + delay_ms
    else:
        for form in ({"delay_ms": delay_ms, "deliver_at_ms": None}, {"delay_ms": None, "deliver_at_ms": NOW_MS + delay_ms}):
            with pytest.raises(errors.DelayOutOfRange):
                due_time_ms(**form, **kwargs)


def test_the_headers_are_the_systems_own_so_no_producer_can_send_them():
    for header in (DELIVER_AT_HEADER, RELEASE_OF_HEADER, CANCEL_OF_HEADER):
        assert header.startswith(RESERVED_HEADER_PREFIX)
    assert len({DELIVER_AT_HEADER, RELEASE_OF_HEADER, CANCEL_OF_HEADER}) == 3


@given(st.integers(min_value=0, max_value=INT64_MAX))
def test_header_numbers_read_back_as_written(number):
    assert encode_deliver_at(number) == str(number).encode("ascii")
    assert decode_deliver_at(encode_deliver_at(number)) == number
    assert decode_release_of(encode_release_of(number)) == number


@pytest.mark.parametrize("value", [b"", b"012", b"00", b" 12", b"12 ", b"+12", b"-12", b"1_2", b"1.5", b"12a",
                                   "١٢".encode(), b"\xd9\xa1", str(INT64_MAX + 1).encode(), b"9" * 40, "12"])
def test_a_header_number_is_strict_and_a_bad_one_is_a_corrupt_record(value):
    for decode, header in ((decode_deliver_at, DELIVER_AT_HEADER), (decode_release_of, RELEASE_OF_HEADER)):
        with pytest.raises(errors.CorruptRecord, match=header):
            decode(value)


def test_a_bad_header_value_is_shown_cut_short():
    with pytest.raises(errors.CorruptRecord) as raised:
        decode_deliver_at(b"7" * 10_000)
    assert len(raised.value.message) < 400


@given(st.integers(min_value=0, max_value=2**31 - 1), st.integers(min_value=0, max_value=INT64_MAX))
def test_message_ids_read_back_as_written(partition, offset):
    message_id = MessageId(partition, offset)
    assert str(message_id) == f"{partition}:{offset}"
    assert MessageId.parse(str(message_id)) == message_id
    assert decode_cancel_of(encode_cancel_of(message_id)) == message_id
    assert pickle.loads(pickle.dumps(message_id)) == message_id


@pytest.mark.parametrize("text", ["", "3", "3:", ":4", "3:4:5", "-1:4", "3:-4", " 3:4", "3: 4", "3:4 ", "a:b", "3;4",
                                  "1_0:4", "+3:4", "٣:4", f"0:{INT64_MAX + 1}", 34, None, b"3:4"])
def test_a_message_id_that_is_not_partition_colon_offset_is_refused_with_the_form(text):
    with pytest.raises(errors.InvalidMessageId, match="PARTITION:OFFSET") as raised:
        MessageId.parse(text)
    assert raised.value.usage_error


@pytest.mark.parametrize("partition, offset", [(-1, 0), (0, -1), (True, 0), (0, 1.0), ("0", 0)])
def test_a_message_id_of_something_else_than_two_non_negative_integers_is_refused(partition, offset):
    with pytest.raises(errors.InvalidMessageId, match="non-negative integer"):
        MessageId(partition, offset)


@pytest.mark.parametrize("value", [b"", b"3", b"3:-4", b"\xff:1", "3:4"])
def test_a_bad_cancel_marker_is_a_corrupt_record(value):
    with pytest.raises(errors.CorruptRecord, match=CANCEL_OF_HEADER):
        decode_cancel_of(value)


def test_a_topics_delay_ms_max_defaults_to_a_week_and_is_bounded():
    assert TopicConfig().delay_ms_max == DELAY_MS_MAX_DEFAULT == WEEK_MS
    assert TopicConfig(delay_ms_max=DELAY_MS_MIN).delay_ms_max == DELAY_MS_MIN
    assert TopicConfig(delay_ms_max=DELAY_MS_MAX, read_mode="mafka3").delay_ms_max == DELAY_MS_MAX
    for bad in (DELAY_MS_MIN - 1, DELAY_MS_MAX + 1, 0, -1):
        with pytest.raises(errors.InvalidConfig, match=f"delay_ms_max={bad} must be at least {DELAY_MS_MIN} and at most"):
            TopicConfig(delay_ms_max=bad)
    with pytest.raises(errors.InvalidConfig, match="delay_ms_max=True must be an integer"):
        TopicConfig(delay_ms_max=True)
