"""Split epochs: where records go across splits and merges, cut safety, parent before child."""

from __future__ import annotations

import pytest

from mafka4.errors import InvalidConfig
from mafka4.virtual.layout import (InvalidReshard, MergeStep, ReshardConflict, SplitEpoch, SplitStep, TopicLayout,
                                   UnknownVirtualPartition, VirtualConfig, next_scale_step)
from mafka4.virtual.ranges import HASH_SPACE, RangeMap

QUARTER = HASH_SPACE // 4
LOW, HIGH = QUARTER // 2, HASH_SPACE // 2 - 1  # hashes in the left and right halves of VP 0 of two


def split_vp0(layout: TopicLayout, cut=(10, 20)) -> TopicLayout:
    return layout.append(layout.plan_split(0, cut, fed_through=cut))


def test_a_new_topic_has_one_epoch_of_even_ranges_starting_at_offset_zero():
    layout = TopicLayout.initial(partitions=3, virtual_partitions=4)
    assert layout.current.epoch == 0 and layout.current.cut == (0, 0, 0)
    assert layout.current.ranges == RangeMap.even(4)
    assert layout.vp_for(2, 0, 0) == 0 and layout.vp_for(2, 10**9, HASH_SPACE - 1) == 3


def test_split_sends_records_below_the_cut_to_the_parent_and_the_rest_to_the_children():
    layout = split_vp0(TopicLayout.initial(partitions=2, virtual_partitions=2))
    epoch = layout.current
    assert (epoch.epoch, epoch.parents, epoch.children, epoch.cut) == (1, (0,), (2, 3), (10, 20))
    assert layout.locate(0, 9, LOW) == (0, 0)
    assert layout.locate(0, 10, LOW) == (1, 2)
    assert layout.locate(0, 10, HIGH) == (1, 3)
    assert layout.locate(1, 19, HIGH) == (0, 0)  # each partition has its own cut
    assert layout.locate(1, 20, HIGH) == (1, 3)


def test_a_split_touches_no_other_virtual_partition():
    layout = TopicLayout.initial(partitions=2, virtual_partitions=2)
    after = split_vp0(layout)
    assert after.current.ranges.range_of(1) == layout.current.ranges.range_of(1)
    for offset in (0, 9, 10, 10**6):
        assert after.vp_for(0, offset, HASH_SPACE - 1) == 1


def test_merge_is_the_inverse_of_split_and_uses_a_new_vp_id():
    layout = split_vp0(TopicLayout.initial(partitions=2, virtual_partitions=2))
    merged = layout.append(layout.plan_merge(3, 2, (15, 20), (12, 20)))
    epoch = merged.current
    assert (epoch.parents, epoch.children) == ((2, 3), (4,))
    assert epoch.ranges.range_of(4) == TopicLayout.initial(2, 2).current.ranges.range_of(0)
    assert merged.locate(0, 14, HIGH) == (1, 3)
    assert merged.locate(0, 15, HIGH) == (2, 4) and merged.locate(0, 15, LOW) == (2, 4)
    assert merged.locate(1, 20, LOW) == (2, 4)  # an epoch may open at the same offset as the previous one
    assert merged.source_bounds(3, 0) == (10, 15) and merged.source_bounds(4, 0) == (15, None)


def test_only_adjacent_active_virtual_partitions_merge():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=3)
    with pytest.raises(InvalidReshard, match="not adjacent"):
        layout.plan_merge(0, 2, (0,), (0,))
    with pytest.raises(InvalidReshard, match="VP 1 cannot be merged with itself"):
        layout.plan_merge(1, 1, (0,), (0,))
    after = layout.append(layout.plan_merge(1, 0, (5,), (5,)))
    with pytest.raises(UnknownVirtualPartition, match="closed by split epoch 1"):
        after.plan_split(0, (5,), (5,))
    with pytest.raises(UnknownVirtualPartition, match="does not exist"):
        after.plan_split(17, (5,), (5,))


def test_a_cut_below_what_the_feeder_already_fed_is_refused_as_retriable():
    layout = TopicLayout.initial(partitions=2, virtual_partitions=2)
    with pytest.raises(ReshardConflict, match="cut offset 5 for physical partition 1 is below") as error:
        layout.plan_split(0, (10, 5), fed_through=(10, 6))
    assert error.value.retriable
    layout = split_vp0(layout, cut=(10, 20))
    with pytest.raises(ReshardConflict, match="epoch cut 20"):
        layout.plan_split(1, (10, 19), fed_through=(0, 0))


def test_bounds_on_virtual_partitions_and_epochs_are_enforced():
    layout = TopicLayout.initial(1, 2, VirtualConfig(virtual_partitions_max=2))
    with pytest.raises(InvalidReshard, match="virtual_partitions_max=2"):
        layout.plan_split(0, (0,), (0,))
    layout = TopicLayout.initial(1, 2, VirtualConfig(split_epochs_max=2))
    layout = layout.append(layout.plan_merge(0, 1, (0,), (0,)))
    with pytest.raises(InvalidReshard, match="split_epochs_max=2"):
        layout.plan_split(2, (0,), (0,))
    with pytest.raises(InvalidReshard):
        TopicLayout.initial(1, 3, VirtualConfig(virtual_partitions_max=2))
    with pytest.raises(InvalidConfig, match="virtual_partitions_max=0"):
        VirtualConfig(virtual_partitions_max=0)


def test_an_epoch_that_changes_other_vps_or_lowers_a_cut_is_a_bug():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=3)
    planned = layout.plan_merge(0, 1, (5,), (5,))
    sneaky = RangeMap.of([(planned.ranges.range_of(3), 3), (layout.current.ranges.range_of(2), 9)])
    with pytest.raises(AssertionError):
        layout.append(SplitEpoch(1, sneaky, (5,), (0, 1), (3,)))
    layout = layout.append(planned)
    with pytest.raises(AssertionError):
        layout.append(SplitEpoch(2, layout.plan_split(2, (5,), (5,)).ranges, (4,), (2,), (4, 5)))


def test_a_parent_is_sealed_once_every_partition_was_fed_up_to_the_cut():
    layout = split_vp0(TopicLayout.initial(partitions=2, virtual_partitions=2), cut=(10, 20))
    assert not layout.is_sealed(1, (10**6, 10**6))  # still active
    assert not layout.is_sealed(0, (10, 19))
    assert layout.is_sealed(0, (10, 20))


def test_children_become_readable_only_after_the_parent_was_consumed_to_its_sealed_end():
    layout = split_vp0(TopicLayout.initial(partitions=2, virtual_partitions=2))
    assert layout.readable_vps({}, {}) == {0, 1}
    assert not layout.is_readable(2, {0: 1_000}, {})  # not sealed yet: more may come
    assert not layout.is_readable(2, {0: 6}, {0: 7})
    assert layout.readable_vps({0: 7}, {0: 7}) == {0, 1, 2, 3}
    assert layout.consumable_vps({0: 7}, {0: 7}) == (1, 2, 3)  # the parent is done
    assert layout.consumable_vps({0: 6}, {0: 7}) == (0, 1)


def test_readability_is_transitive_through_empty_parents():
    layout = split_vp0(TopicLayout.initial(partitions=1, virtual_partitions=1), cut=(10,))
    layout = layout.append(layout.plan_split(1, (10,), (10,)))  # VP 1 is empty and sealed at 0
    sealed = {0: 4, 1: 0}
    assert not layout.is_readable(3, {}, sealed), "a grandchild overtook its grandparent"
    assert layout.readable_vps({0: 4}, sealed) == {0, 1, 2, 3, 4}


def test_a_merged_child_waits_for_both_parents():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
    layout = layout.append(layout.plan_merge(0, 1, (8,), (8,)))
    sealed = {0: 3, 1: 5}
    assert not layout.is_readable(2, {0: 3, 1: 4}, sealed)
    assert not layout.is_readable(2, {0: 3, 1: 5}, {0: 3})
    assert layout.is_readable(2, {0: 3, 1: 5}, sealed)


def test_a_retired_parent_counts_as_consumed_so_a_group_that_never_read_it_reads_its_children():
    layout = split_vp0(TopicLayout.initial(partitions=2, virtual_partitions=2))
    assert layout.consumable_vps({}, {0: 7}) == (0, 1)
    assert layout.readable_vps({}, {0: 7}, retired={0}) == {0, 1, 2, 3}
    assert layout.consumable_vps({}, {0: 7}, retired={0}) == (1, 2, 3), "a retired VP is never read"
    assert layout.consumable_vps({0: 3}, {0: 7}, retired={0}) == (1, 2, 3), "nor finished by a group halfway"


def test_retired_grandparents_let_a_new_group_start_at_the_oldest_vps_still_kept():
    layout = split_vp0(TopicLayout.initial(partitions=1, virtual_partitions=1), cut=(10,))  # 0 -> 1, 2
    layout = layout.append(layout.plan_split(1, (20,), (20,)))  # 1 -> 3, 4
    sealed = {0: 5, 1: 9}
    assert layout.consumable_vps({}, sealed, retired={0, 1}) == (2, 3, 4)
    assert layout.consumable_vps({}, sealed, retired={0}) == (1, 2), "the kept parent is read before its children"
    assert layout.consumable_vps({1: 9}, sealed, retired={0}) == (2, 3, 4)


def test_a_retired_empty_parent_never_lets_a_grandchild_overtake_its_unread_grandparent():
    layout = split_vp0(TopicLayout.initial(partitions=1, virtual_partitions=1), cut=(10,))
    layout = layout.append(layout.plan_split(1, (10,), (10,)))  # VP 1 is empty, sealed at 0, and retired
    sealed = {0: 4, 1: 0}
    assert not layout.is_readable(3, {}, sealed, retired={1}), "a grandchild overtook its grandparent"
    assert layout.consumable_vps({}, sealed, retired={1}) == (0,)
    assert layout.consumable_vps({0: 4}, sealed, retired={1}) == (2, 3, 4)


def test_a_merged_child_with_one_retired_parent_waits_for_the_other():
    layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
    layout = layout.append(layout.plan_merge(0, 1, (8,), (8,)))
    sealed = {0: 3, 1: 5}
    assert layout.consumable_vps({}, sealed, retired={0}) == (1,)
    assert layout.consumable_vps({1: 5}, sealed, retired={0}) == (2,)


def scale(layout: TopicLayout, count: int) -> TopicLayout:
    """Apply ``next_scale_step`` until ``count`` VPs are active, cutting at offset 0 each time."""
    cut = (0,) * layout.partitions
    while (step := next_scale_step(layout, count)) is not None:
        if isinstance(step, SplitStep):
            layout = layout.append(layout.plan_split(step.vp, cut, cut))
        else:
            layout = layout.append(layout.plan_merge(step.first, step.second, cut, cut))
    return layout


def test_scaling_splits_the_widest_and_merges_the_narrowest_pair_so_4_to_8_to_4_ends_where_it_started():
    layout = TopicLayout.initial(partitions=2, virtual_partitions=4)
    assert next_scale_step(layout, 5) == SplitStep(0) and next_scale_step(layout, 3) == MergeStep(0, 1)
    assert next_scale_step(layout, 4) is None
    eight = scale(layout, 8)
    assert len(eight.epochs) == 5 and eight.current.ranges.ranges == TopicLayout.initial(2, 8).current.ranges.ranges
    four = scale(eight, 4)
    assert len(four.epochs) == 9 and four.current.ranges.ranges == layout.current.ranges.ranges
    assert set(four.current.ranges.vp_ids).isdisjoint(range(12)), "merged VPs get new ids"
    three = scale(TopicLayout.initial(partitions=1, virtual_partitions=1), 3)
    widths = sorted(r.width for r in three.current.ranges.ranges)
    assert widths[-1] == 2 * widths[0], "uneven counts leave ranges within a factor of two"


def test_scaling_to_zero_or_past_the_maximum_is_refused_with_the_range():
    layout = TopicLayout.initial(1, 2, VirtualConfig(virtual_partitions_max=4))
    with pytest.raises(InvalidReshard, match="virtual_partitions=0 is out of range: a topic keeps 1 to "
                                             "virtual_partitions_max=4"):
        next_scale_step(layout, 0)
    with pytest.raises(InvalidReshard, match="virtual_partitions=5 is out of range"):
        next_scale_step(layout, 5)
