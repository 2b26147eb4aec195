"""The demo's verdict (``mafka4.demo.verdict``): what a group read against what was acknowledged.

The demo exits non-zero when its verdict fails, so each broken promise must fail it and say
which message broke it; a clean run across a split must pass.
"""

from __future__ import annotations

from mafka4.demo.verdict import Acknowledged, Delivery, judge

A, B = b"key-a", b"key-b"


def acks(key: bytes, count: int, partition: int = 0, first_offset: int = 0, stride: int = 2) -> list[Acknowledged]:
    return [Acknowledged(key, sequence, partition, first_offset + stride * sequence) for sequence in range(count)]


def reads(member: str, vp: int, key: bytes, sequences) -> list[Delivery]:
    return [Delivery(member, vp, offset, key, sequence) for offset, sequence in enumerate(sequences)]


def test_a_group_that_read_each_key_in_order_across_a_split_passes():
    acknowledged = acks(A, 6) + acks(B, 6, first_offset=1)
    # m1 reads the parent v0 to its end, then m1 and m2 read the children.
    deliveries = (reads("m1", 0, A, [0, 1, 2]) + reads("m1", 0, B, [0, 1])
                  + reads("m2", 2, B, [2, 3, 4, 5]) + reads("m1", 1, A, [3, 4, 5]))
    verdict = judge(acknowledged, deliveries)
    assert verdict.passed and verdict.exactly_once and verdict.in_order
    assert verdict.lines() == [
        "verdict: exactly once: 12 acknowledged messages, each read once by the group",
        "verdict: per-key order: 2 keys, each written at ascending offsets of one partition and read in production order",
        "verdict: PASSED",
    ]


def test_a_missing_a_repeated_and_an_unacknowledged_message_each_fail_exactly_once():
    acknowledged = acks(A, 4)
    deliveries = reads("m1", 0, A, [0, 1, 1, 3, 9])
    verdict = judge(acknowledged, deliveries)
    assert not verdict.passed and not verdict.exactly_once
    assert (verdict.missing, verdict.read_twice, verdict.never_acknowledged) == (1, 1, 1)
    assert verdict.lines()[0] == ("verdict: exactly once: FAILED: 1 acknowledged but never read, 1 read more than once, "
                                  "1 read but never acknowledged: key-a#2 never read; key-a#1 read 2 times; "
                                  "key-a#9 never acknowledged")
    assert verdict.lines()[-1] == "verdict: FAILED"


def test_a_key_read_out_of_order_fails_and_names_both_messages():
    deliveries = reads("m1", 0, A, [0, 1]) + [Delivery("m2", 2, 0, A, 3), Delivery("m1", 0, 2, A, 2)]
    verdict = judge(acks(A, 4), deliveries)
    assert verdict.exactly_once and not verdict.in_order and not verdict.passed
    assert verdict.order_breaks == ("key-a#2 (v0@2, m1) read after key-a#3 (v2@0, m2)",)


def test_a_repeat_is_judged_once_not_as_a_reorder():
    verdict = judge(acks(A, 3), reads("m1", 0, A, [0, 1, 2, 1]))
    assert verdict.in_order and verdict.read_twice == 1 and not verdict.passed


def test_a_key_written_out_of_order_or_to_two_partitions_fails():
    swapped = [Acknowledged(A, 0, 0, 5), Acknowledged(A, 1, 0, 3)]
    assert judge(swapped, reads("m1", 0, A, [0, 1])).order_breaks == (
        "key-a#1 written at p0@3, not after key-a#0 at p0@5",)
    moved = [Acknowledged(A, 0, 0, 5), Acknowledged(A, 1, 1, 9)]
    assert not judge(moved, reads("m1", 0, A, [0, 1])).in_order


def test_nothing_acknowledged_is_no_pass():
    assert not judge([], []).passed
