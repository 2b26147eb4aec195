"""A virtual partition's state and a topic's split epochs, as plain values (pure).

``VirtualPartitionState`` is what etcd holds per VP (``topics/<topic>/vp/<v>``: hash range,
leader, leader_epoch, replicas, RISR, once the VP is closed and complete its
sealed_end_offset, and once its logs are deleted by retention ``retired``); ``epoch_to_json``
and ``epoch_from_json`` are the form of one ``layout.SplitEpoch`` there. ``ReadPathPlan`` is a
new topic's read path before it is stored. ``coordinator.metadata.vp_store`` reads and writes
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from mafka4.virtual.layout import LanePolicy, SplitEpoch, TopicLayout
from mafka4.virtual.ranges import HashRange, RangeMap


@dataclass(frozen=True, slots=True)
class VirtualPartitionState:
    """Who leads a virtual partition, in which epoch, on which read nodes, and its RISR."""

    vp: int
    hash_range: HashRange
    leader: str
    leader_epoch: int
    replicas: tuple[str, ...]
    risr: tuple[str, ...]
    # Set once the VP is closed and complete: its log end offset, which never changes again
    # (reshard.TopicLayout.is_sealed; recorded by the parent leader's read node).
    sealed_end_offset: int | None = None
    # Set once a closed VP's records are past the topic's retention and its logs were deleted on
    # every read node (control.upkeep_decisions.retirable). The key stays so that readers know the VP was
    # there and count it as consumed to its end (TopicLayout.readable_vps).
    retired: bool = False

    def __post_init__(self) -> None:
        assert self.leader in self.replicas and self.leader in self.risr, (self.leader, self.replicas, self.risr)
        assert set(self.risr) <= set(self.replicas) and len(set(self.replicas)) == len(self.replicas), self
        assert self.leader_epoch >= 0, self.leader_epoch
        assert self.sealed_end_offset is None or self.sealed_end_offset >= 0, self.sealed_end_offset
        assert isinstance(self.retired, bool), self.retired
        assert not self.retired or self.sealed_end_offset is not None, f"v{self.vp} is retired before it was sealed"

    @property
    def name(self) -> str:
        return f"v{self.vp}"

    def to_json(self) -> dict:
        value = {"range": [self.hash_range.start, self.hash_range.end], "leader": self.leader,
                 "leader_epoch": self.leader_epoch, "replicas": list(self.replicas), "risr": list(self.risr)}
        if self.sealed_end_offset is not None:
            value["sealed_end_offset"] = self.sealed_end_offset
        if self.retired:
            value["retired"] = True
        return value

    @classmethod
    def from_json(cls, vp: int, value: dict) -> "VirtualPartitionState":
        start, end = value["range"]
        return cls(vp, HashRange(start, end), value["leader"], value["leader_epoch"],
                   tuple(value["replicas"]), tuple(value["risr"]), value.get("sealed_end_offset"),
                   value.get("retired", False))


def epoch_to_json(epoch: SplitEpoch, previous: SplitEpoch | None = None) -> dict:
    """``epoch`` as etcd holds it. Its lanes are written as a change of ``previous`` (the epoch
    before it): the lanes it opened or reshaped only, with ``lane_count``, so that a topic of ``L``
    lanes stores O(L) of lane layouts over its epochs, not O(L^2), and readers share the unchanged
    lanes' objects (``epochs_from_json``). Without ``previous`` every lane is written (an intent's
    result, read alone)."""
    value = {
        "epoch": epoch.epoch,
        "ranges": _ranges_to_json(epoch.ranges),
        "cut": list(epoch.cut),
        "parents": list(epoch.parents),
        "children": list(epoch.children),
    }
    if epoch.lanes:  # absent in a topic without lanes, as in every epoch written before lanes existed
        assert previous is None or previous.epoch == epoch.epoch - 1, (previous.epoch, epoch.epoch)
        value["lane_count"] = len(epoch.lanes)
        value["lanes"] = [[name, _ranges_to_json(ranges), _policy_to_json(epoch.lane_policy(name))]
                          for name, ranges in epoch.lanes
                          if previous is None or _lane_layout(previous, name) != ranges]
    return value


def epoch_from_json(value: dict, previous: SplitEpoch | None = None) -> SplitEpoch:
    """The epoch of ``value``; ``previous``, the epoch before it, supplies the lanes it did not
    change (``epoch_to_json``). ``ValueError`` if it names fewer lanes than it has and ``previous``
    is not the epoch before it."""
    listed = value.get("lanes", ())
    count = value.get("lane_count", len(listed))
    if len(listed) == count:
        lanes = [(lane[0], _ranges_from_json(lane[1])) for lane in listed]
        policies = [LanePolicy(**lane[2]) for lane in listed]
    else:
        if previous is None or previous.epoch != value["epoch"] - 1:
            raise ValueError(f"split epoch {value['epoch']} changes {len(listed)} of its {count} lanes: it is read "
                             f"after split epoch {value['epoch'] - 1}")
        lanes, policies = list(previous.lanes), list(previous.policies)
        for name, ranges, policy in listed:
            lane_id = previous.lane_id(name)
            if lane_id is None:
                lanes.append((name, _ranges_from_json(ranges)))
                policies.append(LanePolicy(**policy))
            else:
                lanes[lane_id - 1] = (name, _ranges_from_json(ranges))
        if len(lanes) != count:
            raise ValueError(f"split epoch {value['epoch']} has {count} lanes, not the {len(lanes)} it names")
    return SplitEpoch(value["epoch"], _ranges_from_json(value["ranges"]), tuple(value["cut"]),
                      tuple(value["parents"]), tuple(value["children"]), tuple(lanes), tuple(policies))


def epochs_from_json(values: Iterable[dict]) -> list[SplitEpoch]:
    """Every epoch of ``values`` (a topic's, in any order), oldest first, each read after the one before it."""
    epochs: list[SplitEpoch] = []
    for value in sorted(values, key=lambda value: value["epoch"]):
        epochs.append(epoch_from_json(value, epochs[-1] if epochs else None))
    return epochs


def epochs_to_json(epochs: Sequence[SplitEpoch]) -> list[dict]:
    """``epochs`` (oldest first, a whole history) as etcd holds them: each after the one before it."""
    return [epoch_to_json(epoch, epochs[index - 1] if index else None) for index, epoch in enumerate(epochs)]


def _lane_layout(epoch: SplitEpoch, name: str) -> RangeMap | None:
    lane_id = epoch.lane_id(name)
    return None if lane_id is None else epoch.lane_ranges(lane_id)


def _policy_to_json(policy: LanePolicy) -> dict:
    return {"fallback": policy.fallback, "priority": policy.priority}


def _ranges_to_json(ranges: RangeMap) -> list:
    return [[hash_range.start, hash_range.end, vp] for hash_range, vp in ranges.items()]


def _ranges_from_json(value: list) -> RangeMap:
    return RangeMap.of((HashRange(start, end), vp) for start, end, vp in value)


@dataclass(frozen=True, slots=True)
class ReadPathPlan:
    """A new mafka4-mode topic's layout (epoch 0) and the initial state of each VP."""

    layout: TopicLayout
    states: tuple[VirtualPartitionState, ...]
