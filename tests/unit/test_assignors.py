"""The partition assignors: pure functions, no etcd."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mafka4.coordinator.groups.assignors import ASSIGNORS, RangeAssignor, StickyAssignor

member_sets = st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=3), min_size=1, max_size=12, unique=True)
previous_maps = st.dictionaries(st.text(alphabet="abcdefgh", min_size=1, max_size=3),
                                st.lists(st.integers(0, 40), max_size=12), max_size=12)


def counts(assignment) -> list[int]:
    return [len(partitions) for partitions in assignment.values()]


def test_range_matches_kafkas_range_assignor():
    # Kafka: 3 members on 8 partitions -> 3, 3, 2 consecutive partitions in member-id order.
    assert RangeAssignor().assign(["c2", "c0", "c1"], range(8)) == {
        "c0": (0, 1, 2), "c1": (3, 4, 5), "c2": (6, 7)}


def test_range_gives_members_beyond_the_partition_count_nothing():
    assignment = RangeAssignor().assign(["a", "b", "c", "d", "e"], range(3))
    assert assignment == {"a": (0,), "b": (1,), "c": (2,), "d": (), "e": ()}


def test_range_ignores_the_previous_assignment():
    assert RangeAssignor().assign(["a", "b"], range(4), {"a": [2, 3], "b": [0, 1]}) == {"a": (0, 1), "b": (2, 3)}


def test_sticky_keeps_every_partition_of_members_that_stay_when_one_joins():
    previous = {"a": [0, 1, 2, 3], "b": [4, 5, 6, 7], "c": [8, 9, 10, 11]}
    assignment = StickyAssignor().assign(["a", "b", "c", "d"], range(12), previous)
    assert counts(assignment) == [3, 3, 3, 3]
    for member in "abc":
        assert set(assignment[member]) <= set(previous[member]), "members that stay only lose partitions"
    assert len(assignment["d"]) == 3


def test_sticky_moves_only_the_leaving_members_partitions():
    previous = {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7, 8], "d": [9, 10, 11]}
    assignment = StickyAssignor().assign(["a", "b", "d"], range(12), previous)
    assert counts(assignment) == [4, 4, 4]
    for member in "abd":
        assert set(previous[member]) <= set(assignment[member]), "no partition moves between staying members"


def test_sticky_gives_the_extra_partitions_to_the_members_that_held_more():
    # 7 partitions, 3 members: quotas 3, 2, 2; "b" held 4, so "b" keeps 3 and only one moves.
    assignment = StickyAssignor().assign(["a", "b", "c"], range(7), {"a": [0, 1], "b": [2, 3, 4, 5], "c": [6]})
    assert assignment == {"a": (0, 1), "b": (2, 3, 4), "c": (5, 6)}


def test_sticky_without_history_is_balanced_and_deterministic():
    assert StickyAssignor().assign(["b", "a"], range(5)) == {"a": (0, 2, 4), "b": (1, 3)}


def test_sticky_drops_partitions_that_no_longer_exist_and_duplicates():
    assignment = StickyAssignor().assign(["a", "b"], range(2), {"a": [0, 7], "b": [0, 1]})
    assert assignment == {"a": (0,), "b": (1,)}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_no_members_means_no_assignment(name):
    assert ASSIGNORS[name].assign([], range(4)) == {}


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
@settings(max_examples=200, deadline=None)
@given(members=member_sets, partition_count=st.integers(0, 40), previous=previous_maps)
def test_every_partition_once_balanced_and_independent_of_input_order(name, members, partition_count, previous):
    assignor = ASSIGNORS[name]
    assignment = assignor.assign(members, range(partition_count), previous)
    assert sorted(assignment) == sorted(members)
    assert sorted(p for ps in assignment.values() for p in ps) == list(range(partition_count))
    assert max(counts(assignment)) - min(counts(assignment)) <= 1
    assert assignor.assign(list(reversed(members)), reversed(range(partition_count)), previous) == assignment


@st.composite
def group_histories(draw):
    """Members, a partition count and a well-formed previous assignment (each partition held by
    at most one member, possibly by members that left, possibly of partitions that no longer exist)."""
    members = draw(member_sets)
    partition_count = draw(st.integers(1, 40))
    holders = members + draw(st.lists(st.sampled_from(["gone1", "gone2"]), max_size=2)) + [None]
    previous: dict[str, list[int]] = {}
    for partition in range(partition_count + draw(st.integers(0, 3))):
        holder = draw(st.sampled_from(holders))
        if holder is not None:
            previous.setdefault(holder, []).append(partition)
    return members, partition_count, previous


@settings(max_examples=300, deadline=None)
@given(history=group_histories())
def test_sticky_keeps_as_many_pairs_as_balance_allows(history):
    """Kept pairs equal the optimum: each member keeps min(valid previous, its quota), with the
    larger quotas going to the members that held the most."""
    members, partition_count, previous = history
    assignment = StickyAssignor().assign(members, range(partition_count), previous)
    kept = sum(len(set(assignment[m]) & set(previous.get(m, ()))) for m in members)
    seen: set[int] = set()
    held = []
    for member in sorted(members):
        valid = {p for p in previous.get(member, ()) if p < partition_count} - seen
        seen |= valid
        held.append(len(valid))
    base, extra = divmod(partition_count, len(members))
    quotas = [base + 1] * extra + [base] * (len(members) - extra)
    optimum = sum(min(h, q) for h, q in zip(sorted(held, reverse=True), quotas))
    assert kept == optimum
