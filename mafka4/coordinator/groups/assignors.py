"""Partition assignors of consumer groups: which member consumes which partitions of one topic.

Pure functions of their inputs (no I/O, clock or randomness), so every member of a group
computes the same assignment from the same membership:

* ``RangeAssignor`` is Kafka's range assignor: members sorted by id, partitions sorted by
  number; member ``i`` of ``M`` gets a consecutive run of ``P // M`` partitions, and the
  first ``P % M`` members one more. It ignores the previous assignment.
* ``StickyAssignor`` is balanced (member counts differ by at most one) and keeps as many
  partitions of the previous assignment with their member as balance allows.

Invariants of every result (asserted): every member appears (with no partitions when there
are more members than partitions), and every partition is assigned to exactly one member.
The result depends on the *set* of members, never on the order they were given in.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from mafka4.limits import ASSIGNOR_NAMES

Assignment = dict[str, tuple[int, ...]]


def _checked_inputs(members: Sequence[str], partitions: Sequence[int]) -> tuple[list[str], list[int]]:
    sorted_members, sorted_partitions = sorted(members), sorted(partitions)
    assert len(set(sorted_members)) == len(sorted_members), f"duplicate member ids in {sorted_members}"
    assert len(set(sorted_partitions)) == len(sorted_partitions), f"duplicate partitions in {sorted_partitions}"
    return sorted_members, sorted_partitions


def _assert_complete(assignment: Assignment, members: list[str], partitions: list[int]) -> Assignment:
    assert sorted(assignment) == members, "every member appears in the assignment"
    assigned = sorted(p for owned in assignment.values() for p in owned)
    assert assigned == partitions, "every partition is assigned to exactly one member"
    return assignment


class RangeAssignor:
    name = "range"

    def assign(self, members: Sequence[str], partitions: Sequence[int],
               previous: Mapping[str, Sequence[int]] | None = None) -> Assignment:
        members_sorted, partitions_sorted = _checked_inputs(members, partitions)
        if not members_sorted:
            return {}
        base, extra = divmod(len(partitions_sorted), len(members_sorted))
        assignment: Assignment = {}
        start = 0
        for index, member in enumerate(members_sorted):
            count = base + (1 if index < extra else 0)
            assignment[member] = tuple(partitions_sorted[start:start + count])
            start += count
        return _assert_complete(assignment, members_sorted, partitions_sorted)


class StickyAssignor:
    """Balanced, and keeps the most previous (member, partition) pairs that balance allows.

    Each member's quota is ``P // M``; the ``P % M`` quotas of one more go to the members that
    held the most valid partitions before (ties: smaller member id), which maximises the pairs
    kept: ``sum(min(previously held, quota))``. Each member keeps its lowest previous partitions
    up to its quota; the rest go, lowest partition first, to the member with room holding the
    fewest so far (ties: smaller member id).
    """

    name = "sticky"

    def assign(self, members: Sequence[str], partitions: Sequence[int],
               previous: Mapping[str, Sequence[int]] | None = None) -> Assignment:
        members_sorted, partitions_sorted = _checked_inputs(members, partitions)
        if not members_sorted:
            return {}
        held = self._valid_previous(members_sorted, set(partitions_sorted), previous or {})
        quotas = self._quotas(members_sorted, len(partitions_sorted), held)
        kept = {member: held[member][:quotas[member]] for member in members_sorted}
        taken = {p for owned in kept.values() for p in owned}
        assignment = {member: list(owned) for member, owned in kept.items()}
        for partition in partitions_sorted:
            if partition in taken:
                continue
            open_members = [m for m in members_sorted if len(assignment[m]) < quotas[m]]
            receiver = min(open_members, key=lambda m: (len(assignment[m]), m))
            assignment[receiver].append(partition)
        result = {member: tuple(sorted(owned)) for member, owned in assignment.items()}
        return _assert_complete(result, members_sorted, partitions_sorted)

    @staticmethod
    def _valid_previous(members: list[str], partitions: set[int],
                        previous: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
        """Previous partitions per current member that still exist; a partition listed for two
        members (a malformed input) counts only for the smaller member id."""
        seen: set[int] = set()
        held: dict[str, list[int]] = {}
        for member in members:
            mine = sorted(p for p in set(previous.get(member, ())) if p in partitions and p not in seen)
            seen.update(mine)
            held[member] = mine
        return held

    @staticmethod
    def _quotas(members: list[str], partition_count: int, held: dict[str, list[int]]) -> dict[str, int]:
        base, extra = divmod(partition_count, len(members))
        by_claim = sorted(members, key=lambda m: (-len(held[m]), m))
        larger = set(by_claim[:extra])
        return {member: base + (1 if member in larger else 0) for member in members}


ASSIGNORS = {assignor.name: assignor for assignor in (RangeAssignor(), StickyAssignor())}
assert tuple(sorted(ASSIGNORS)) == tuple(sorted(ASSIGNOR_NAMES)), "limits.ASSIGNOR_NAMES lists every assignor"


def assignor_named(name: str) -> RangeAssignor | StickyAssignor:
    return ASSIGNORS[name]
