"""Split epochs: the history of a topic's VP layout, and the split and merge rules.

A topic's layout changes only by opening a new **split epoch** (``SplitEpoch``). Epoch 0 is
the layout at creation. Epoch ``k > 0`` either splits one VP into two children at the
midpoint of its range, or merges two VPs with adjacent ranges into one child. It records:

* ``ranges``: the full layout from then on (a ``RangeMap``); every VP not named in the
  change keeps its id and range, so no other VP (and no other consumer) is touched;
* ``cut``: per physical partition, the first physical offset that uses this epoch. Record
  ``(p, offset, hash)`` belongs to the latest epoch whose ``cut[p] <= offset`` and to the VP
  of that epoch's layout holding ``hash`` (``locate``). So the parents of epoch ``k`` get the
  records below the cut, its children the records at and after it;
* ``parents`` (VPs closed by the epoch) and ``children`` (VPs opened by it). VP ids are never
  reused: a closed VP receives nothing any more.

Parent before child (Kinesis's rule). A child is readable by a consumer group only once the
group has consumed every parent to its **sealed end**: the parent's VP log end offset once
the feeder of every physical partition ``p`` has fed the parent all records below
``cut[p]`` (``is_sealed``). One key lives in one physical partition, so each key's records
below the cut are all in one parent and those at or after it in one child: reading parents
first keeps per-key order across any chain of splits and merges. Readability is transitive
(``readable_vps`` walks the epochs forward), so an empty parent cannot let a grandchild
overtake its grandparent.

Retired VPs. A closed VP whose records all passed the topic's retention has its logs deleted
(``control.upkeep_decisions.retirable``). It counts as consumed to its end by every group, as a Kafka
partition's records deleted by retention do: a group that never read it reads its children,
and it is never consumable itself. It is still readable only once its own parents are, so
retiring an empty or short-lived child never lets a grandchild overtake its grandparent.

Safety of a cut. A record the feeder of ``p`` already gave to a parent must stay the parent's,
so a new epoch's ``cut[p]`` must not be below what that feeder has fed (``fed_through[p]``,
the next physical offset it would feed), nor below the previous epoch's cut. ``plan_split``
and ``plan_merge`` refuse such a cut (``ReshardConflict``, retriable: re-read the feeders'
progress and plan again). The shell must also stop the feeder of ``p`` from passing the
proposed ``cut[p]`` under the old epoch until the new epoch is stored: ``control.resharding``
holds every feeder, cuts where each stopped, and releases them once the epoch is stored.

Invariants (asserted): epochs are numbered 0, 1, 2, ...; each layout covers the hash space
once; cuts never decrease along the history; the change of epoch ``k`` is exactly
"parents' ranges = children's ranges" against epoch ``k - 1``.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import AbstractSet, Mapping, Sequence

from mafka4.errors import InvalidReshard, ReshardConflict, UnknownVirtualPartition
from mafka4.limits import VirtualConfig
from mafka4.virtual.ranges import HashRange, RangeMap

# --- layout history ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SplitEpoch:
    """One version of a topic's VP layout; see the module docstring."""

    epoch: int
    ranges: RangeMap
    cut: tuple[int, ...]
    parents: tuple[int, ...]
    children: tuple[int, ...]

    def __post_init__(self) -> None:
        assert self.epoch >= 0 and all(offset >= 0 for offset in self.cut), (self.epoch, self.cut)
        assert set(self.children) <= set(self.ranges.vp_ids), (self.children, self.ranges.vp_ids)
        assert not set(self.parents) & set(self.ranges.vp_ids), (self.parents, self.ranges.vp_ids)
        if self.epoch == 0:
            assert not self.parents and set(self.children) == set(self.ranges.vp_ids)
            assert not any(self.cut), f"epoch 0 starts at offset 0 everywhere, not {self.cut}"
        else:
            assert sorted(len(group) for group in (self.parents, self.children)) == [1, 2], (
                f"epoch {self.epoch} must be one split or one merge: {self.parents} -> {self.children}"
            )


class TopicLayout:
    """The split epochs of one topic, oldest first; build with ``initial`` and ``append``.

    Immutable: ``append`` returns a new layout and checks only the new epoch, so a history of
    ``n`` epochs costs O(n) to build either way.
    """

    __slots__ = ("partitions", "epochs", "config", "_opened", "_closed")

    def __init__(self, partitions: int, epochs: Sequence[SplitEpoch], config: VirtualConfig = VirtualConfig()):
        """A layout from its whole history (e.g. read back from the coordinator); checks every epoch."""
        assert partitions >= 1 and epochs, (partitions, epochs)
        first, *rest = epochs
        assert first.epoch == 0, f"the history starts at epoch {first.epoch}"
        layout = TopicLayout._with(partitions, (), config, {}, {}, first)
        for epoch in rest:
            layout = layout.append(epoch)
        self.partitions: int = partitions
        self.epochs: tuple[SplitEpoch, ...] = layout.epochs
        self.config = config
        self._opened: dict[int, int] = layout._opened  # VP id -> number of the epoch that opened it
        self._closed: dict[int, int] = layout._closed  # VP id -> number of the epoch that closed it

    @classmethod
    def _with(
        cls,
        partitions: int,
        epochs: tuple[SplitEpoch, ...],
        config: VirtualConfig,
        opened: dict[int, int],
        closed: dict[int, int],
        epoch: SplitEpoch,
    ) -> "TopicLayout":
        """``epochs + (epoch,)`` with the derived indexes, checking ``epoch`` against the last one."""
        assert epoch.epoch == len(epochs), f"epoch {epoch.epoch} follows {len(epochs)} epochs"
        assert len(epoch.cut) == partitions, (epoch.cut, partitions)
        if epochs:
            _check_change(epochs[-1], epoch)
        opened, closed = dict(opened), dict(closed)
        for vp in epoch.children:
            assert vp not in opened, f"VP id {vp} reused by epoch {epoch.epoch}"
            opened[vp] = epoch.epoch
        for vp in epoch.parents:
            closed[vp] = epoch.epoch
        layout = cls.__new__(cls)
        layout.partitions, layout.epochs, layout.config = partitions, epochs + (epoch,), config
        layout._opened, layout._closed = opened, closed
        return layout

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TopicLayout) and (self.partitions, self.epochs, self.config) == (
            other.partitions, other.epochs, other.config
        )

    def __hash__(self) -> int:
        return hash((self.partitions, self.epochs))

    def __repr__(self) -> str:
        return f"TopicLayout(partitions={self.partitions}, epochs={self.epochs!r})"

    @classmethod
    def initial(
        cls, partitions: int, virtual_partitions: int, config: VirtualConfig = VirtualConfig()
    ) -> "TopicLayout":
        """Epoch 0: ``virtual_partitions`` even ranges owned by VPs 0, 1, ... in hash order."""
        if not 1 <= virtual_partitions <= config.virtual_partitions_max:
            raise InvalidReshard(
                f"a topic needs 1 to virtual_partitions_max={config.virtual_partitions_max} virtual "
                f"partitions, not {virtual_partitions}"
            )
        ranges = RangeMap.even(virtual_partitions)
        return cls(partitions, (SplitEpoch(0, ranges, (0,) * partitions, (), ranges.vp_ids),), config)

    @property
    def current(self) -> SplitEpoch:
        return self.epochs[-1]

    @property
    def next_vp_id(self) -> int:
        return max(self._opened) + 1

    def append(self, epoch: SplitEpoch) -> "TopicLayout":
        """This history with ``epoch`` (from ``plan_split``/``plan_merge``, or read back) added."""
        return TopicLayout._with(self.partitions, self.epochs, self.config, self._opened, self._closed, epoch)

    # --- where records go ---------------------------------------------------------------

    def epoch_for(self, partition: int, offset: int) -> SplitEpoch:
        """The split epoch that physical record ``(partition, offset)`` belongs to."""
        assert 0 <= partition < self.partitions and offset >= 0, (partition, offset)
        # Cuts of one partition never decrease along the history: the last epoch with cut <= offset.
        index = bisect.bisect_right(self.epochs, offset, key=lambda e: e.cut[partition]) - 1
        assert index >= 0, "epoch 0 starts at offset 0"
        return self.epochs[index]

    def locate(self, partition: int, offset: int, hash_value: int) -> tuple[int, int]:
        """``(split epoch, VP id)`` of physical record ``(partition, offset)`` with hash ``hash_value``."""
        epoch = self.epoch_for(partition, offset)
        return epoch.epoch, epoch.ranges.vp_for_hash(hash_value)

    def vp_for(self, partition: int, offset: int, hash_value: int) -> int:
        return self.locate(partition, offset, hash_value)[1]

    # --- VPs ----------------------------------------------------------------------------

    def exists(self, vp: int) -> bool:
        return vp in self._opened

    def is_active(self, vp: int) -> bool:
        """True if ``vp`` is in the current layout (still receives records)."""
        return vp in self._opened and vp not in self._closed

    def opening_epoch(self, vp: int) -> SplitEpoch:
        self._require(vp)
        return self.epochs[self._opened[vp]]

    def closing_epoch(self, vp: int) -> SplitEpoch | None:
        self._require(vp)
        number = self._closed.get(vp)
        return None if number is None else self.epochs[number]

    def parents_of(self, vp: int) -> tuple[int, ...]:
        return self.opening_epoch(vp).parents

    def source_bounds(self, vp: int, partition: int) -> tuple[int, int | None]:
        """``[first, end)`` physical offsets of ``partition`` that may feed ``vp`` (end None: open)."""
        closing = self.closing_epoch(vp)
        return self.opening_epoch(vp).cut[partition], None if closing is None else closing.cut[partition]

    # --- plans --------------------------------------------------------------------------

    def plan_split(self, vp: int, cut: Sequence[int], fed_through: Sequence[int]) -> SplitEpoch:
        """Split active ``vp`` at its range's midpoint into two new VPs, from ``cut`` on."""
        self._require_active(vp)
        if len(self.current.ranges) + 1 > self.config.virtual_partitions_max:
            raise InvalidReshard(
                f"splitting VP {vp} would make {len(self.current.ranges) + 1} virtual partitions, more "
                f"than virtual_partitions_max={self.config.virtual_partitions_max}: raise the limit or merge first"
            )
        parent_range = self.current.ranges.range_of(vp)
        assert parent_range is not None
        if not parent_range.can_split():
            raise InvalidReshard(f"VP {vp} owns the single hash {parent_range.start:#x} and cannot be split")
        left, right = parent_range.split()
        children = (self.next_vp_id, self.next_vp_id + 1)
        return self._plan((vp,), ((left, children[0]), (right, children[1])), cut, fed_through)

    def plan_merge(self, first: int, second: int, cut: Sequence[int], fed_through: Sequence[int]) -> SplitEpoch:
        """Merge active VPs with adjacent ranges into one new VP, from ``cut`` on."""
        self._require_active(first)
        self._require_active(second)
        ranges = self.current.ranges
        first_range, second_range = ranges.range_of(first), ranges.range_of(second)
        assert first_range is not None and second_range is not None
        if first == second:
            raise InvalidReshard(f"VP {first} cannot be merged with itself: name two active VPs with adjacent hash ranges")
        if not first_range.is_adjacent_to(second_range):
            raise InvalidReshard(
                f"VPs {first} {first_range} and {second} {second_range} are not adjacent: only VPs whose "
                f"hash ranges touch can be merged"
            )
        parents = tuple(sorted((first, second), key=lambda vp: ranges.range_of(vp)))
        return self._plan(parents, ((first_range.merge(second_range), self.next_vp_id),), cut, fed_through)

    def _plan(
        self,
        parents: tuple[int, ...],
        children: tuple[tuple[HashRange, int], ...],
        cut: Sequence[int],
        fed_through: Sequence[int],
    ) -> SplitEpoch:
        if len(self.epochs) + 1 > self.config.split_epochs_max:
            raise InvalidReshard(
                f"the topic already has {len(self.epochs)} split epochs, split_epochs_max="
                f"{self.config.split_epochs_max}: raise the limit"
            )
        cut = tuple(cut)
        assert len(cut) == len(fed_through) == self.partitions, (cut, fed_through, self.partitions)
        for partition, (offset, fed, previous) in enumerate(zip(cut, fed_through, self.current.cut)):
            if offset < max(fed, previous):
                raise ReshardConflict(
                    f"cut offset {offset} for physical partition {partition} is below what is already "
                    f"fed under split epoch {self.current.epoch} (fed through {fed}, epoch cut "
                    f"{previous}): re-read the feeders' progress and plan again"
                )
        ranges = self.current.ranges.replace(parents, children)
        return SplitEpoch(self.current.epoch + 1, ranges, cut, parents, tuple(vp for _, vp in children))

    # --- parent before child ------------------------------------------------------------

    def is_sealed(self, vp: int, fed_through: Sequence[int]) -> bool:
        """True once ``vp`` is closed and every partition's feeder fed it all records below the cut.

        ``fed_through[p]``: the next physical offset of ``p`` the feeder will hand to ``vp``
        (every earlier record of ``p`` is in ``vp``'s log if it belongs there). From then on
        ``vp``'s log end offset is final: it is the VP's sealed end offset.
        """
        closing = self.closing_epoch(vp)
        assert len(fed_through) == self.partitions, (fed_through, self.partitions)
        return closing is not None and all(fed >= cut for fed, cut in zip(fed_through, closing.cut))

    def readable_vps(self, committed: Mapping[int, int], sealed_end_offsets: Mapping[int, int],
                     retired: AbstractSet[int] = frozenset()) -> frozenset[int]:
        """VPs a group may read, given its committed offsets, the sealed parents' end offsets and the retired VPs.

        A VP of epoch 0 is readable; a child is readable once each parent is readable and
        either retired or sealed and consumed by the group (committed offset >= sealed end offset).
        """
        readable: set[int] = set()
        for epoch in self.epochs:
            if all(parent in readable and self._consumed(parent, committed, sealed_end_offsets, retired)
                   for parent in epoch.parents):
                readable.update(epoch.children)
        return frozenset(readable)

    def is_readable(self, vp: int, committed: Mapping[int, int], sealed_end_offsets: Mapping[int, int],
                    retired: AbstractSet[int] = frozenset()) -> bool:
        self._require(vp)
        return vp in self.readable_vps(committed, sealed_end_offsets, retired)

    def consumable_vps(
        self, committed: Mapping[int, int], sealed_end_offsets: Mapping[int, int],
        retired: AbstractSet[int] = frozenset(),
    ) -> tuple[int, ...]:
        """Readable VPs a group still has to read: all but retired VPs and closed VPs it consumed to the sealed end."""
        return tuple(sorted(
            vp for vp in self.readable_vps(committed, sealed_end_offsets, retired)
            if not self._consumed(vp, committed, sealed_end_offsets, retired)
        ))

    @staticmethod
    def _consumed(vp: int, committed: Mapping[int, int], sealed_end_offsets: Mapping[int, int],
                  retired: AbstractSet[int]) -> bool:
        """True if the group has nothing left to read in ``vp``: retired, or sealed and read to its sealed end."""
        if vp in retired:
            assert vp in sealed_end_offsets, f"VP {vp} is retired but has no sealed end"
            return True
        return vp in sealed_end_offsets and committed.get(vp, 0) >= sealed_end_offsets[vp]

    # --- internals ----------------------------------------------------------------------

    def _require(self, vp: int) -> None:
        if vp not in self._opened:
            raise UnknownVirtualPartition(
                f"virtual partition {vp} does not exist: the topic has VPs {sorted(self._opened)}"
            )

    def _require_active(self, vp: int) -> None:
        self._require(vp)
        if vp in self._closed:
            raise UnknownVirtualPartition(
                f"virtual partition {vp} was closed by split epoch {self._closed[vp]}: the active "
                f"VPs are {sorted(self.current.ranges.vp_ids)}"
            )


# --- scaling -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SplitStep:
    vp: int


@dataclass(frozen=True, slots=True)
class MergeStep:
    first: int
    second: int


def next_scale_step(layout: TopicLayout, virtual_partitions: int) -> SplitStep | MergeStep | None:
    """The next split or merge that moves the active VP count toward ``virtual_partitions``.

    It splits the widest range and merges the adjacent pair with the narrowest union (lowest
    hash first on ties), so ranges stay as even as they can: 4 -> 8 -> 4 ends with the ranges
    it started with (under new VP ids). None once the count is reached.
    """
    maximum = layout.config.virtual_partitions_max
    if not 1 <= virtual_partitions <= maximum:
        raise InvalidReshard(
            f"virtual_partitions={virtual_partitions} is out of range: a topic keeps 1 to "
            f"virtual_partitions_max={maximum} virtual partitions; choose a count in that range"
        )
    items = layout.current.ranges.items()
    if len(items) < virtual_partitions:
        _, widest = max(items, key=lambda item: (item[0].width, -item[0].start))
        return SplitStep(widest)
    if len(items) > virtual_partitions:
        (_, first), (_, second) = min(
            zip(items, items[1:]), key=lambda pair: (pair[0][0].width + pair[1][0].width, pair[0][0].start))
        return MergeStep(first, second)
    return None


def _check_change(previous: SplitEpoch, epoch: SplitEpoch) -> None:
    """Assert that ``epoch`` changes ``previous`` by exactly its parents -> children."""
    assert all(new >= old for new, old in zip(epoch.cut, previous.cut)), (previous.cut, epoch.cut)
    assert set(epoch.parents) <= set(previous.ranges.vp_ids), (epoch.parents, previous.ranges.vp_ids)
    assert not set(epoch.children) & set(previous.ranges.vp_ids), (epoch.children, previous.ranges.vp_ids)
    children = [(epoch.ranges.range_of(vp), vp) for vp in epoch.children]
    assert previous.ranges.replace(epoch.parents, children) == epoch.ranges, "an epoch touched other VPs"
    parent_ranges = sorted(previous.ranges.range_of(vp) for vp in epoch.parents)
    union = parent_ranges[0] if len(parent_ranges) == 1 else parent_ranges[0].merge(parent_ranges[1])
    child_ranges = tuple(sorted(r for r, _ in children))
    assert child_ranges == (union.split() if len(child_ranges) == 2 else (union,)), (parent_ranges, child_ranges)
