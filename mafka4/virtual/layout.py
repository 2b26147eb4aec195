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

Lanes (queue merging). A record may carry a lane (a swimlane, an environment, a SET); the
trunk is lane 0, the records without one. Every lane has its own layout of the hash space
(``SplitEpoch.lane_ranges``): the trunk's is ``ranges``, and each opened lane's is in
``lanes``, in opening order, so lane id ``i >= 1`` is ``lanes[i - 1]``. A lane's VPs take VP
ids from the topic's one sequence and split and merge only with each other, so per-key order
holds within a lane exactly as in the trunk. A lane's ``LanePolicy`` (its fallback and its
priority, for consumer groups) is set when it opens, in the same epoch. A third kind of epoch **opens a lane**: no
parents, one child owning the lane's whole hash space. Its cut may be anything from the
previous epoch's cut up to the partitions' log ends when it is stored: a lane's first record
is produced only once its epoch is stored, so no record of the lane lies below it, and every
other lane's layout is unchanged, so a record of theirs lands in the same VP under either
epoch and no feeder has to stop. The controller takes where the feed streams stand
(``control.resharding``), so that a restarted lane VP is fed from there and not from the topic's
first offsets. Lanes are never closed.

Invariants (asserted): epochs are numbered 0, 1, 2, ...; each lane's layout covers the hash
space once; cuts never decrease along the history; the change of epoch ``k`` is exactly
"parents' ranges = children's ranges" within one lane against epoch ``k - 1``, or one lane
opened.

Pure: no I/O.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import AbstractSet, Mapping, Sequence

from mafka4.errors import InvalidConfig, InvalidReshard, LanesExhausted, ReshardConflict, UnknownLane, UnknownVirtualPartition
from mafka4.limits import LANE_PRIORITY_MAX, VirtualConfig
from mafka4.virtual.ranges import HashRange, RangeMap

TRUNK = ""  # the trunk's lane name: the records that carry no lane
TRUNK_ID = 0  # its lane id; lane i >= 1 is SplitEpoch.lanes[i - 1]
FALLBACK_TRUNK = "trunk"  # swimlane semantics: with no reader of its own, a group's trunk readers read the lane
FALLBACK_NONE = "none"  # environment/SET semantics: the lane's messages wait for its own readers
FALLBACKS = (FALLBACK_TRUNK, FALLBACK_NONE)


@dataclass(frozen=True, slots=True)
class LanePolicy:
    """How consumer groups treat a lane: who reads it when none of a group's members reads it
    (``fallback``), and its ``priority`` for a member that reads several lanes. Fixed when the
    lane opens (it is part of the opening epoch, which every group reads anyway)."""

    fallback: str = FALLBACK_TRUNK
    priority: int = 0

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise InvalidConfig(f"lane fallback={self.fallback!r}: choose {FALLBACK_TRUNK!r} (the trunk's readers read "
                                f"the lane while it has none) or {FALLBACK_NONE!r} (its messages wait for its readers)")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int) or not 0 <= self.priority <= LANE_PRIORITY_MAX:
            raise InvalidConfig(f"lane priority={self.priority!r}: choose an integer from 0 to {LANE_PRIORITY_MAX} "
                                f"(higher is served first)")


DEFAULT_POLICY = LanePolicy()

# --- layout history ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SplitEpoch:
    """One version of a topic's VP layout; see the module docstring."""

    epoch: int
    ranges: RangeMap  # the trunk's layout (lane 0)
    cut: tuple[int, ...]
    parents: tuple[int, ...]
    children: tuple[int, ...]
    lanes: tuple[tuple[str, RangeMap], ...] = ()  # (name, layout) of each opened lane, lane id = index + 1
    # The lanes' policies, by the same index (filled with DEFAULT_POLICY when given short).
    policies: tuple[LanePolicy, ...] = ()
    # Lane name -> lane id and active VP -> lane name, built on first use (``_lookups``): a reader
    # asks the current epoch, so a history of L lanes does not keep L indexes of L lanes.
    _index: tuple[dict[str, int], dict[int, str]] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        assert self.epoch >= 0 and all(offset >= 0 for offset in self.cut), (self.epoch, self.cut)
        active = self.vp_ids
        assert len(set(active)) == len(active), f"a VP id in two lanes: {active}"
        assert len({name for name, _ in self.lanes}) == len(self.lanes) and all(name for name, _ in self.lanes), self.lanes
        assert set(self.children) <= set(active), (self.children, active)
        assert not set(self.parents) & set(active), (self.parents, active)
        assert len(self.policies) <= len(self.lanes), (self.policies, self.lanes)
        if len(self.policies) < len(self.lanes):  # one policy per lane, so that equal epochs compare equal
            object.__setattr__(self, "policies", self.policies + (DEFAULT_POLICY,) * (len(self.lanes) - len(self.policies)))
        if self.epoch == 0:
            assert not self.parents and set(self.children) == set(self.ranges.vp_ids) and not self.lanes
            assert not any(self.cut), f"epoch 0 starts at offset 0 everywhere, not {self.cut}"
        else:
            assert sorted(len(group) for group in (self.parents, self.children)) in ([1, 2], [0, 1]), (
                f"epoch {self.epoch} must be one split, one merge or one lane opened: {self.parents} -> {self.children}"
            )

    @property
    def opens_lane(self) -> bool:
        """True if this epoch opened a lane (no parents, one child)."""
        return self.epoch > 0 and not self.parents

    @property
    def vp_ids(self) -> tuple[int, ...]:
        """Every active VP: the trunk's in hash order, then each lane's in hash order."""
        return self.ranges.vp_ids + tuple(vp for _, ranges in self.lanes for vp in ranges.vp_ids)

    @property
    def lane_names(self) -> tuple[str, ...]:
        """The opened lanes' names, in opening order (the trunk, "", is not one)."""
        return tuple(name for name, _ in self.lanes)

    def lane_ranges(self, lane_id: int) -> RangeMap | None:
        """The layout of lane ``lane_id`` (0: the trunk), or None if it is not open in this epoch."""
        if lane_id == TRUNK_ID:
            return self.ranges
        return self.lanes[lane_id - 1][1] if 0 < lane_id <= len(self.lanes) else None

    def _lookups(self) -> tuple[dict[str, int], dict[int, str]]:
        index = self._index
        if index is None:
            vp_lanes = dict.fromkeys(self.ranges.vp_ids, TRUNK)
            for name, ranges in self.lanes:
                vp_lanes.update(dict.fromkeys(ranges.vp_ids, name))
            index = ({name: number + 1 for number, (name, _) in enumerate(self.lanes)}, vp_lanes)
            object.__setattr__(self, "_index", index)
        return index

    def lane_policy(self, name: str) -> LanePolicy:
        """The policy of lane ``name`` (the trunk and a lane not open here: the default)."""
        lane_id = self.lane_id(name)
        return self.policies[lane_id - 1] if lane_id else DEFAULT_POLICY

    def lane_id(self, name: str) -> int | None:
        """The id of lane ``name`` ("" the trunk: 0), or None if it is not open in this epoch."""
        if name == TRUNK:
            return TRUNK_ID
        return self._lookups()[0].get(name)

    def lane_of(self, vp: int) -> str | None:
        """The lane ("" the trunk) of active VP ``vp``, or None if ``vp`` is not active."""
        return self._lookups()[1].get(vp)

    def range_of(self, vp: int) -> HashRange | None:
        """The hash range of active ``vp`` within its lane, or None if it is not active."""
        lane = self.lane_of(vp)
        return None if lane is None else self.lane_ranges(self.lane_id(lane)).range_of(vp)

    def with_lane_ranges(self, lane: str, ranges: RangeMap) -> tuple[RangeMap, tuple[tuple[str, RangeMap], ...]]:
        """(trunk ranges, lanes) with lane ``lane``'s layout replaced by ``ranges``."""
        if lane == TRUNK:
            return ranges, self.lanes
        return self.ranges, tuple((name, ranges if name == lane else kept) for name, kept in self.lanes)


class TopicLayout:
    """The split epochs of one topic, oldest first; build with ``initial`` and ``append``.

    Immutable: ``append`` returns a new layout and checks only the new epoch, so a history of
    ``n`` epochs costs O(n) to build either way.
    """

    __slots__ = ("partitions", "epochs", "config", "_opened", "_closed", "_lanes")

    def __init__(self, partitions: int, epochs: Sequence[SplitEpoch], config: VirtualConfig = VirtualConfig()):
        """A layout from its whole history (e.g. read back from the coordinator); checks every epoch."""
        assert partitions >= 1 and epochs, (partitions, epochs)
        first, *rest = epochs
        assert first.epoch == 0, f"the history starts at epoch {first.epoch}"
        layout = TopicLayout._with(partitions, (), config, {}, {}, {}, first)
        for epoch in rest:
            layout = layout.append(epoch)
        self.partitions: int = partitions
        self.epochs: tuple[SplitEpoch, ...] = layout.epochs
        self.config = config
        self._opened: dict[int, int] = layout._opened  # VP id -> number of the epoch that opened it
        self._closed: dict[int, int] = layout._closed  # VP id -> number of the epoch that closed it
        self._lanes: dict[int, str] = layout._lanes  # VP id -> its lane, for ever

    @classmethod
    def _with(
        cls,
        partitions: int,
        epochs: tuple[SplitEpoch, ...],
        config: VirtualConfig,
        opened: dict[int, int],
        closed: dict[int, int],
        lanes: dict[int, str],
        epoch: SplitEpoch,
    ) -> "TopicLayout":
        """``epochs + (epoch,)`` with the derived indexes, checking ``epoch`` against the last one."""
        assert epoch.epoch == len(epochs), f"epoch {epoch.epoch} follows {len(epochs)} epochs"
        assert len(epoch.cut) == partitions, (epoch.cut, partitions)
        if epochs:
            _check_change(epochs[-1], epoch)
        opened, closed, lanes = dict(opened), dict(closed), dict(lanes)
        # A child is in its parents' lane, or in the lane its epoch opens (epoch 0: the trunk).
        lane = (epoch.lanes[-1][0] if epoch.opens_lane else lanes[epoch.parents[0]] if epoch.parents else TRUNK)
        for vp in epoch.children:
            assert vp not in opened, f"VP id {vp} reused by epoch {epoch.epoch}"
            opened[vp] = epoch.epoch
            lanes[vp] = lane
        for vp in epoch.parents:
            closed[vp] = epoch.epoch
        layout = cls.__new__(cls)
        layout.partitions, layout.epochs, layout.config = partitions, epochs + (epoch,), config
        layout._opened, layout._closed, layout._lanes = opened, closed, lanes
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
        return TopicLayout._with(self.partitions, self.epochs, self.config, self._opened, self._closed, self._lanes,
                                 epoch)

    # --- where records go ---------------------------------------------------------------

    def epoch_for(self, partition: int, offset: int) -> SplitEpoch:
        """The split epoch that physical record ``(partition, offset)`` belongs to."""
        assert 0 <= partition < self.partitions and offset >= 0, (partition, offset)
        # Cuts of one partition never decrease along the history: the last epoch with cut <= offset.
        index = bisect.bisect_right(self.epochs, offset, key=lambda e: e.cut[partition]) - 1
        assert index >= 0, "epoch 0 starts at offset 0"
        return self.epochs[index]

    def locate(self, partition: int, offset: int, hash_value: int, lane_id: int = TRUNK_ID) -> tuple[int, int]:
        """``(split epoch, VP id)`` of physical record ``(partition, offset)`` with hash ``hash_value`` in lane ``lane_id``.

        ``UnknownLane`` if the lane is not open at that record's epoch: this layout is older
        than the record (a reader that has not seen the lane's epoch yet waits for it).
        """
        epoch = self.epoch_for(partition, offset)
        ranges = epoch.lane_ranges(lane_id)
        if ranges is None:
            raise UnknownLane(
                f"record {partition}:{offset} is in lane id {lane_id}, which split epoch {epoch.epoch} "
                f"does not have (it has {len(epoch.lanes)} lanes): the layout read is older than the record"
            )
        return epoch.epoch, ranges.vp_for_hash(hash_value)

    def vp_for(self, partition: int, offset: int, hash_value: int, lane_id: int = TRUNK_ID) -> int:
        return self.locate(partition, offset, hash_value, lane_id)[1]

    def lane_of(self, vp: int) -> str:
        """The lane ("" the trunk) of ``vp``, active or closed: a VP never changes lane."""
        self._require(vp)
        return self._lanes[vp]

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
        if len(self.current.vp_ids) + 1 > self.config.virtual_partitions_max:
            raise InvalidReshard(
                f"splitting VP {vp} would make {len(self.current.vp_ids) + 1} virtual partitions, more "
                f"than virtual_partitions_max={self.config.virtual_partitions_max}: raise the limit or merge first"
            )
        parent_range = self.current.range_of(vp)
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
        if self.current.lane_of(first) != self.current.lane_of(second):
            raise InvalidReshard(
                f"VPs {first} and {second} are in different lanes ({self.current.lane_of(first)!r}, "
                f"{self.current.lane_of(second)!r}): only VPs of one lane can be merged"
            )
        ranges = self.current.lane_ranges(self.current.lane_id(self.current.lane_of(first)))
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
        lane = self.current.lane_of(parents[0])
        replaced = self.current.lane_ranges(self.current.lane_id(lane)).replace(parents, children)
        ranges, lanes = self.current.with_lane_ranges(lane, replaced)
        return SplitEpoch(self.current.epoch + 1, ranges, cut, parents, tuple(vp for _, vp in children), lanes,
                          self.current.policies)

    def plan_open_lane(self, lane: str, policy: LanePolicy = DEFAULT_POLICY,
                       cut: Sequence[int] | None = None) -> SplitEpoch:
        """The epoch that opens lane ``lane`` with ``policy`` and one VP owning its whole hash space.

        ``cut``: per partition, an offset no record of the lane can lie below (at most the log end
        when the epoch is stored; see the module docstring), raised to the current cut where it is
        below it; None: the current cut. ``LanesExhausted`` past ``lanes_max``; a lane already open
        is the caller's to reuse.
        """
        assert lane != TRUNK and self.current.lane_id(lane) is None, f"lane {lane!r} is open already"
        if len(self.current.lanes) + 1 > self.config.lanes_max:
            raise LanesExhausted(
                f"the topic has {len(self.current.lanes)} lanes, lanes_max={self.config.lanes_max}: lane "
                f"{lane!r} cannot be opened; send it to an existing lane or raise lanes_max"
            )
        if len(self.current.vp_ids) + 1 > self.config.virtual_partitions_max:
            raise InvalidReshard(
                f"opening lane {lane!r} would make {len(self.current.vp_ids) + 1} virtual partitions, more "
                f"than virtual_partitions_max={self.config.virtual_partitions_max}: raise the limit or merge first"
            )
        if len(self.epochs) + 1 > self.config.split_epochs_max:
            raise InvalidReshard(
                f"the topic already has {len(self.epochs)} split epochs, split_epochs_max="
                f"{self.config.split_epochs_max}: raise the limit"
            )
        vp = self.next_vp_id
        current = self.current
        cut = current.cut if cut is None else tuple(max(offset, previous) for offset, previous in zip(cut, current.cut))
        assert len(cut) == self.partitions, (cut, self.partitions)
        return SplitEpoch(current.epoch + 1, current.ranges, cut, (), (vp,),
                          current.lanes + ((lane, RangeMap.even(1, vp)),), current.policies + (policy,))

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
                f"VPs are {sorted(self.current.vp_ids)}"
            )


# --- scaling -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SplitStep:
    vp: int


@dataclass(frozen=True, slots=True)
class MergeStep:
    first: int
    second: int


def next_scale_step(layout: TopicLayout, virtual_partitions: int, lane: str = TRUNK) -> SplitStep | MergeStep | None:
    """The next split or merge that moves lane ``lane``'s active VP count (the trunk's unless
    named) toward ``virtual_partitions``.

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
    lane_id = layout.current.lane_id(lane)
    if lane_id is None:
        raise UnknownLane(f"lane {lane!r} is not open: it opens with its first message")
    items = layout.current.lane_ranges(lane_id).items()
    if len(items) < virtual_partitions:
        _, widest = max(items, key=lambda item: (item[0].width, -item[0].start))
        return SplitStep(widest)
    if len(items) > virtual_partitions:
        (_, first), (_, second) = min(
            zip(items, items[1:]), key=lambda pair: (pair[0][0].width + pair[1][0].width, pair[0][0].start))
        return MergeStep(first, second)
    return None


def _check_change(previous: SplitEpoch, epoch: SplitEpoch) -> None:
    """Assert that ``epoch`` changes ``previous`` by exactly its parents -> children, or opens one lane."""
    assert all(new >= old for new, old in zip(epoch.cut, previous.cut)), (previous.cut, epoch.cut)
    assert set(epoch.parents) <= set(previous.vp_ids), (epoch.parents, previous.vp_ids)
    assert not set(epoch.children) & set(previous.vp_ids), (epoch.children, previous.vp_ids)
    if epoch.opens_lane:
        (vp,) = epoch.children
        assert epoch.ranges == previous.ranges, "opening a lane changes no other lane's layout"
        assert epoch.lanes[:-1] == previous.lanes and epoch.lanes[-1][1] == RangeMap.even(1, vp), epoch.lanes
        assert epoch.policies[:-1] == previous.policies, "opening a lane changes no other lane's policy"
        return
    lane = previous.lane_of(epoch.parents[0])
    assert all(previous.lane_of(vp) == lane for vp in epoch.parents), f"parents in two lanes: {epoch.parents}"
    before = previous.lane_ranges(previous.lane_id(lane))
    after = epoch.lane_ranges(epoch.lane_id(lane))
    assert (epoch.ranges, epoch.lanes) == previous.with_lane_ranges(lane, after), "an epoch touched another lane"
    assert epoch.policies == previous.policies, "a split or merge changes no lane's policy"
    children = [(after.range_of(vp), vp) for vp in epoch.children]
    assert before.replace(epoch.parents, children) == after, "an epoch touched other VPs"
    parent_ranges = sorted(before.range_of(vp) for vp in epoch.parents)
    union = parent_ranges[0] if len(parent_ranges) == 1 else parent_ranges[0].merge(parent_ranges[1])
    child_ranges = tuple(sorted(r for r, _ in children))
    assert child_ranges == (union.split() if len(child_ranges) == 2 else (union,)), (parent_ranges, child_ranges)
