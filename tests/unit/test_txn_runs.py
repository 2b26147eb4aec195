"""Cutting a long list of etcd writes into transactions etcd accepts (``metadata.txn_runs``, pure)."""

from __future__ import annotations

import random

import pytest

from mafka4.metadata.txn_runs import TxnPart, field_bytes, runs_within, varint_bytes


def test_parts_fill_runs_in_order_up_to_the_byte_bound_with_the_shared_bytes_in_each():
    parts = [TxnPart(40, 0, 1)] * 5
    assert runs_within(parts, TxnPart(20, 1, 1), bytes_max=100, ops_max=100) == [range(0, 2), range(2, 4), range(4, 5)]
    assert runs_within(parts, TxnPart(0), bytes_max=200, ops_max=100) == [range(0, 5)], "all fit: one transaction"
    assert runs_within([], TxnPart(0), bytes_max=1, ops_max=1) == []


def test_the_longest_of_the_compare_and_success_lists_is_bounded_with_room_left_for_nesting():
    parts = [TxnPart(1, 1, 2)] * 4  # a claim's part: a compare, a put and a get
    assert runs_within(parts, TxnPart(0, 1, 0), bytes_max=1000, ops_max=4) == [range(0, 2), range(2, 4)]
    nested = [TxnPart(1, 0, 1)] * 4  # a commit's part: one transaction nested two deep
    assert runs_within(nested, TxnPart(0), bytes_max=1000, ops_max=4, nesting_ops=2) == [range(0, 2), range(2, 4)]


def test_runs_cover_every_part_once_and_each_is_within_both_bounds():
    rng = random.Random(7)
    print("seed 7")
    for _ in range(200):
        parts = [TxnPart(rng.randint(1, 50), rng.randint(0, 2), rng.randint(0, 3)) for _ in range(rng.randint(0, 40))]
        shared = TxnPart(rng.randint(0, 20), rng.randint(0, 2), rng.randint(0, 2))
        runs = runs_within(parts, shared, bytes_max=80, ops_max=8)
        assert [index for run in runs for index in run] == list(range(len(parts)))
        for run in runs:
            assert shared.bytes + sum(parts[i].bytes for i in run) <= 80
            assert shared.compares + sum(parts[i].compares for i in run) <= 8
            assert shared.operations + sum(parts[i].operations for i in run) <= 8
        for before, after in zip(runs, runs[1:]):  # filled: the next part did not fit the run before it
            following = parts[after.start]
            assert (shared.bytes + sum(parts[i].bytes for i in before) + following.bytes > 80
                    or shared.compares + sum(parts[i].compares for i in before) + following.compares > 8
                    or shared.operations + sum(parts[i].operations for i in before) + following.operations > 8)


def test_a_part_that_cannot_fit_alone_is_a_defect():
    with pytest.raises(AssertionError, match="cannot fit"):
        runs_within([TxnPart(90)], TxnPart(20), bytes_max=100, ops_max=10)


def test_a_repeated_field_element_takes_its_tag_its_length_varint_and_its_payload():
    assert [varint_bytes(n) for n in (0, 127, 128, 16383, 16384)] == [1, 1, 2, 2, 3]
    assert field_bytes(10) == 12 and field_bytes(300) == 303
