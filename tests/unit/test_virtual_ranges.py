"""Hash ranges: layouts cover the key-hash space once; keyless hashes spread like a round robin."""

from __future__ import annotations

import collections

import pytest

from mafka4.batch_frame import NO_PRODUCER_ID
from mafka4.hashing import key_hash
from mafka4.virtual.ranges import (
    HASH_SPACE,
    HashRange,
    RangeMap,
    check_layout,
    even_ranges,
    keyless_hash,
    message_hash,
)


@pytest.mark.parametrize("count", [1, 2, 3, 7, 64, 1000])
def test_even_ranges_cover_the_space_once_with_widths_differing_by_at_most_one(count):
    ranges = even_ranges(count)
    check_layout(ranges)
    assert len(ranges) == count
    assert max(r.width for r in ranges) - min(r.width for r in ranges) <= 1


def test_one_virtual_partition_owns_every_hash():
    layout = RangeMap.even(1)
    assert layout.ranges == (HashRange(0, HASH_SPACE),)
    assert {layout.vp_for_hash(h) for h in (0, 1, HASH_SPACE // 2, HASH_SPACE - 1)} == {0}


def test_lookup_finds_the_range_holding_the_hash_at_every_boundary():
    layout = RangeMap.of([(r, 10 + i) for i, r in enumerate(even_ranges(5))])
    for vp, hash_range in zip(layout.vp_ids, layout.ranges):
        assert layout.vp_for_hash(hash_range.start) == vp
        assert layout.vp_for_hash(hash_range.end - 1) == vp
        assert hash_range.start in hash_range and hash_range.end not in hash_range


def test_split_halves_at_the_midpoint_and_merge_is_its_inverse():
    whole = HashRange(10, 21)
    left, right = whole.split()
    assert (left, right) == (HashRange(10, 15), HashRange(15, 21))
    assert left.merge(right) == right.merge(left) == whole
    assert not HashRange(3, 4).can_split()


def test_merge_of_ranges_that_do_not_touch_is_a_bug():
    with pytest.raises(AssertionError, match="not adjacent"):
        HashRange(0, 10).merge(HashRange(11, 20))


@pytest.mark.parametrize(
    "ranges",
    [
        [HashRange(0, 10), HashRange(11, HASH_SPACE)],  # gap
        [HashRange(0, 12), HashRange(11, HASH_SPACE)],  # overlap
        [HashRange(1, HASH_SPACE)],  # misses 0
        [HashRange(0, HASH_SPACE - 1)],  # misses the top
    ],
)
def test_layouts_with_gaps_or_overlaps_are_rejected(ranges):
    with pytest.raises(AssertionError):
        check_layout(ranges)


def test_replace_hands_the_removed_ranges_to_the_new_vps_only():
    layout = RangeMap.even(3)
    left, right = layout.range_of(1).split()
    after = layout.replace([1], [(left, 3), (right, 4)])
    assert after.vp_ids == (0, 3, 4, 2)
    assert after.range_of(0) == layout.range_of(0) and after.range_of(2) == layout.range_of(2)
    assert after.range_of(1) is None


def test_keyed_messages_use_the_producers_key_hash():
    assert message_hash(b"order-17", 3, 99, 5, 1234) == key_hash(b"order-17")


def test_keyless_hash_is_deterministic_and_depends_on_producer_partition_and_sequence():
    assert keyless_hash(7, 0, 5) == keyless_hash(7, 0, 5)
    assert len({keyless_hash(7, 0, 5), keyless_hash(8, 0, 5), keyless_hash(7, 1, 5), keyless_hash(7, 0, 6)}) == 4
    assert message_hash(None, 2, 7, 5, 1234) == keyless_hash(7, 2, 5)
    # A non-idempotent producer has no sequence: the physical offset stands in for it.
    assert message_hash(None, 2, NO_PRODUCER_ID, -1, 1234) == keyless_hash(NO_PRODUCER_ID, 2, 1234)


@pytest.mark.parametrize("virtual_partitions", [2, 3, 8, 13])
def test_consecutive_keyless_messages_of_one_producer_spread_like_a_round_robin(virtual_partitions):
    layout = RangeMap.even(virtual_partitions)
    for start in (0, 1_000_003):
        for count in (virtual_partitions * 10, 10_000):
            counts = collections.Counter(
                layout.vp_for_hash(keyless_hash(42, 1, sequence)) for sequence in range(start, start + count)
            )
            expected = count / virtual_partitions
            # Golden-ratio steps: every VP within a few messages of its fair share, at any window.
            assert max(abs(counts[vp] - expected) for vp in layout.vp_ids) <= 3, counts
