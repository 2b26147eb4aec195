"""Dead letters: the topic a group's exhausted messages go to, the headers that say where each came
from and why it died, read back for ``dlq list``/``show``, and the headers of its replay."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mafka4.batch_payload import LANE_HEADER, RESERVED_HEADER_PREFIX, SOURCE_HEADER
from mafka4.dead_letters import (DEAD_AT_HEADER, DELIVERY_COUNT_HEADER, ERROR_HEADER, GROUP_HEADER, OFFSET_HEADER,
                                 ORIGINAL_LANE_HEADER, PARTITION_HEADER, REPLAY_KEY_HEADER, TOPIC_HEADER, DeadLetter,
                                 dead_letter_headers, dlq_topic_name, error_text, parse_dead_letter, replay_headers,
                                 replay_key_of)
from mafka4.errors import InvalidDeadLetter, InvalidGroupName, InvalidTopicName
from mafka4.limits import DEAD_LETTER_ERROR_BYTES_MAX, TOPIC_NAME_CHARS_MAX
from mafka4.names import validate_topic_name

WHERE = {"group": "billing", "topic": "orders", "partition": 3, "offset": 1234, "delivery_count": 16,
         "error": "ValueError: no such customer", "now_ms": 1_764_000_000_000}


def test_the_dead_letter_topic_is_topic_dot_group_dot_dlq():
    assert dlq_topic_name("orders", "billing") == "orders.billing.dlq"
    longest_group = "g" * (TOPIC_NAME_CHARS_MAX - len("orders") - len("..dlq"))
    assert len(dlq_topic_name("orders", longest_group)) == TOPIC_NAME_CHARS_MAX


def test_a_group_name_too_long_for_the_topic_is_refused_saying_how_long_it_may_be():
    with pytest.raises(InvalidGroupName, match=r"group 'g{190}' cannot have a dead-letter topic of topic 'orders': "
                                               r".* would have 201 characters, a topic name at "
                                               r"most 200; use a group name of at most 189 characters"):
        dlq_topic_name("orders", "g" * 190)
    with pytest.raises(InvalidGroupName, match=r"no group name fits: .* needs a name of at most 194 characters"):
        dlq_topic_name("t" * 196, "g")


@pytest.mark.parametrize("group, error", [("", "must be a non-empty string"), ("a/b", "contains '/'"),
                                          ("..", "is reserved"), (None, "must be a non-empty string")])
def test_a_bad_group_name_is_refused_as_a_group_name(group, error):
    with pytest.raises(InvalidGroupName, match=f"group name .*{error}"):
        dlq_topic_name("orders", group)


def test_a_bad_topic_name_is_refused_as_a_topic_name():
    with pytest.raises(InvalidTopicName, match="topic name"):
        dlq_topic_name("orders/eu", "billing")


def test_two_pairs_may_name_one_dead_letter_topic_and_the_headers_tell_them_apart():
    assert dlq_topic_name("orders.eu", "billing") == dlq_topic_name("orders", "eu.billing")
    first = parse_dead_letter(dead_letter_headers(None, **{**WHERE, "topic": "orders.eu", "group": "billing"}))
    second = parse_dead_letter(dead_letter_headers(None, **{**WHERE, "topic": "orders", "group": "eu.billing"}))
    assert (first.topic, first.group) == ("orders.eu", "billing") and (second.topic, second.group) == ("orders", "eu.billing")


def test_a_dead_letter_says_where_its_original_is_how_often_it_was_delivered_why_and_when_it_died():
    original = [("trace", b"t-1"), ("tenant", b"\xff\x00")]
    headers = dead_letter_headers(original, **WHERE)
    assert headers == [(GROUP_HEADER, b"billing"), (TOPIC_HEADER, b"orders"), (PARTITION_HEADER, b"3"),
                       (OFFSET_HEADER, b"1234"), (DELIVERY_COUNT_HEADER, b"16"),
                       (ERROR_HEADER, b"ValueError: no such customer"), (DEAD_AT_HEADER, b"1764000000000"),
                       ("trace", b"t-1"), ("tenant", b"\xff\x00")]
    assert parse_dead_letter(headers) == DeadLetter(
        group="billing", topic="orders", partition=3, offset=1234, delivery_count=16,
        error="ValueError: no such customer", dead_at_ms=1_764_000_000_000, lane="", headers=tuple(original))


def test_an_original_s_lane_moves_to_a_dead_letter_header_and_its_other_system_headers_are_dropped():
    original = [(LANE_HEADER, b"vip"), ("trace", b"t-1"), (SOURCE_HEADER, b"\x00" * 12), (REPLAY_KEY_HEADER, b"o/1/2")]
    headers = dead_letter_headers(original, **WHERE)
    assert LANE_HEADER not in dict(headers), "a lane header would open a lane of the dead-letter topic"
    assert [name for name, _ in headers if name.startswith(RESERVED_HEADER_PREFIX)][-1] == ORIGINAL_LANE_HEADER
    dead = parse_dead_letter(headers)
    assert dead.lane == "vip" and dead.headers == (("trace", b"t-1"),)


def test_a_long_error_is_cut_at_a_character_boundary_and_says_so():
    for text in ("x" * 10_000, "é" * 10_000, "€" * 10_000, "x" + "😀" * 3_000):
        data = error_text(text)
        assert len(data) <= DEAD_LETTER_ERROR_BYTES_MAX and data.endswith("…".encode())
        kept = data.decode()  # raises if a character was cut
        assert text.startswith(kept[:-1]) and len(data) > DEAD_LETTER_ERROR_BYTES_MAX - 4 - 3
    exact = "x" * DEAD_LETTER_ERROR_BYTES_MAX
    assert error_text(exact) == exact.encode(), "a text that fits is kept whole"
    assert error_text("lone \udc80 surrogate") == b"lone ? surrogate"


def test_replay_gives_back_the_original_s_headers_with_its_replay_key_and_the_lane_for_the_send():
    headers = dead_letter_headers([(LANE_HEADER, b"vip"), ("trace", b"t-1")], **WHERE)
    replay = replay_headers(headers)
    assert replay == [("trace", b"t-1"), (REPLAY_KEY_HEADER, b"orders/3/1234")]
    assert replay_key_of(replay) == b"orders/3/1234" and replay_key_of([("trace", b"t")]) is None
    assert replay_key_of(None) is None and parse_dead_letter(headers).lane == "vip"


def test_replaying_one_original_twice_or_from_two_groups_carries_one_key():
    first = replay_headers(dead_letter_headers(None, **WHERE))
    again = replay_headers(dead_letter_headers(None, **{**WHERE, "group": "audit", "now_ms": 5, "delivery_count": 2}))
    other = replay_headers(dead_letter_headers(None, **{**WHERE, "offset": 1235}))
    assert replay_key_of(first) == replay_key_of(again) != replay_key_of(other)


def test_a_replayed_message_that_dies_again_is_a_new_dead_letter_with_its_own_key():
    replayed = replay_headers(dead_letter_headers([("trace", b"t")], **WHERE))
    dead_again = dead_letter_headers(replayed, **{**WHERE, "offset": 9000})
    assert replay_headers(dead_again) == [("trace", b"t"), (REPLAY_KEY_HEADER, b"orders/3/9000")]


@pytest.mark.parametrize("change, error", [
    (lambda h: [x for x in h if x[0] != ERROR_HEADER], r"lacks the dead-letter header\(s\) mafka4.dlq.error"),
    (lambda h: [x for x in h if not x[0].startswith("mafka4.")], r"lacks .* mafka4.dlq.group, mafka4.dlq.topic"),
    (lambda h: [*h, (OFFSET_HEADER, b"7")], r"carries header 'mafka4.dlq.offset' twice"),
    (lambda h: [(n, b"-3" if n == PARTITION_HEADER else v) for n, v in h], r"mafka4.dlq.partition=b'-3' is not a"),
    (lambda h: [(n, b"" if n == DEAD_AT_HEADER else v) for n, v in h], r"mafka4.dlq.dead_at_ms=b'' is not a"),
    (lambda h: [(n, b"9" * 20 if n == OFFSET_HEADER else v) for n, v in h], r"mafka4.dlq.offset=b'9{20}' is not"),
    (lambda h: [(n, b"0" if n == DELIVERY_COUNT_HEADER else v) for n, v in h], r"delivery_count=0: a dead letter"),
    (lambda h: [(n, b"\xff" if n == TOPIC_HEADER else v) for n, v in h], r"mafka4.dlq.topic=b'\\xff' is not UTF-8"),
])
def test_a_record_that_is_no_dead_letter_is_refused_naming_the_header(change, error):
    with pytest.raises(InvalidDeadLetter, match=error):
        parse_dead_letter(change(dead_letter_headers([("trace", b"t")], **WHERE)))
    with pytest.raises(InvalidDeadLetter, match=error):
        replay_headers(change(dead_letter_headers([("trace", b"t")], **WHERE)))


names = st.text(st.sampled_from("abcXYZ019._-"), min_size=1, max_size=40).filter(lambda n: n not in (".", ".."))
user_headers = st.lists(st.tuples(st.text(max_size=12).filter(lambda n: not n.startswith(RESERVED_HEADER_PREFIX)),
                                  st.binary(max_size=16)), max_size=6)


@given(names, names, names | st.just(""), user_headers, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1),
       st.integers(1, 1000), st.text(max_size=5000), st.integers(0, 2**63 - 1))
def test_every_dead_letter_reads_back_as_written(topic, group, lane, headers, partition, offset, count, error, now_ms):
    original = [(LANE_HEADER, lane.encode()), *headers] if lane else headers
    written = dead_letter_headers(original, group=group, topic=topic, partition=partition, offset=offset,
                                  delivery_count=count, error=error, now_ms=now_ms)
    dead = parse_dead_letter(written)
    assert (dead.group, dead.topic, dead.partition, dead.offset) == (group, topic, partition, offset)
    assert (dead.delivery_count, dead.dead_at_ms, dead.lane, dead.headers) == (count, now_ms, lane, tuple(headers))
    assert dead.error == error_text(error).decode()
    assert replay_headers(written) == [*headers, (REPLAY_KEY_HEADER, f"{topic}/{partition}/{offset}".encode())]
    assert validate_topic_name(dlq_topic_name(topic, group)).endswith(f".{group}.dlq")
