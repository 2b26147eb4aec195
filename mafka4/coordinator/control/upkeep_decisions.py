"""The controller's upkeep of a topic's read path, as pure decisions (inputs and ``now_ms`` in).

Three kinds of upkeep run besides repairs (``control.read_path_decisions``), each decided
here and carried out by the controller:

* **Replicas off gone read nodes.** A read node whose registration has been missing longer
  than ``ControllerConfig.read_node_gone_ms`` is *gone for good* (``NodeAbsence``); a shorter
  absence (a restart, a brief partition) keeps its replicas, which the repair restarts in
  place once it is back. ``plan_replica_moves`` replaces every follower replica on a gone node
  by the live read node, not yet a replica of that VP, that hosts the fewest replicas. The new
  replica starts empty, outside the RISR, and copies the VP's log from the leader.
* **Merging when groups shrink.** A topic needs ``target_virtual_partitions`` active VPs: its
  creation count, or more while a group has more members. Once it has had more active VPs
  than that continuously for ``ControllerConfig.vp_merge_delay_ms`` (``ShrinkWatch``), one
  pair is merged (``merge_step``); the next waits as long again, so every merge settles (its
  parents drained) before the next, and a group that shrinks and grows back within the delay
  keeps its VPs. Splits are not decided here: a group splits for itself (``partition_groups.vp_ownership``).
* **Retiring closed VPs.** A closed, sealed VP whose newest record passed the topic's
  retention (or that holds none) is ``retirable``: the controller deletes its logs on every read
  node and sets ``VirtualPartitionState.retired``. The key stays: readers count a retired VP as
  consumed to its end (``TopicLayout.readable_vps``), so its children never wait for it.

Invariants (asserted): ``now_ms`` never goes back within one tracker; a moved VP state keeps
its leader, leader epoch and replica count, and its replicas stay distinct; only closed,
sealed VPs are retired.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from dataclasses import dataclass
from typing import AbstractSet, Iterable, Mapping

from mafka4.virtual.layout import MergeStep, TopicLayout, next_scale_step
from mafka4.virtual.vp_state import VirtualPartitionState

# --- read nodes gone for good ------------------------------------------------------------------


class NodeAbsence:
    """Since when each known read node has been missing from the registrations.

    A node is known once it was seen registered, or named by the metadata (``observe``'s
    ``named_nodes``: a controller that takes over while a node is down never saw it
    registered, yet must move its replicas away). A node never known is not tracked; a known
    node seen registered again is not missing, and its clock starts afresh when it next
    disappears. Memory: one entry per read node id ever known.
    """

    __slots__ = ("read_node_gone_ms", "_known", "_missing_since_ms", "_now_ms")

    def __init__(self, read_node_gone_ms: int):
        assert read_node_gone_ms >= 1, read_node_gone_ms
        self.read_node_gone_ms = read_node_gone_ms
        self._known: set[str] = set()
        self._missing_since_ms: dict[str, int] = {}
        self._now_ms: int | None = None

    def observe(self, registered_nodes: Iterable[str], now_ms: int, named_nodes: Iterable[str] = ()) -> None:
        """The read nodes registered at ``now_ms``, and those the VP states name as replicas."""
        self._advance(now_ms)
        registered = frozenset(registered_nodes)
        self._known |= registered
        self._known.update(named_nodes)
        for node in self._known:
            if node in registered:
                self._missing_since_ms.pop(node, None)
            else:
                self._missing_since_ms.setdefault(node, now_ms)

    def gone(self, now_ms: int) -> frozenset[str]:
        """The nodes missing for longer than ``read_node_gone_ms`` at ``now_ms``."""
        self._advance(now_ms)
        return frozenset(node for node, since_ms in self._missing_since_ms.items()
                         if now_ms - since_ms > self.read_node_gone_ms)

    def _advance(self, now_ms: int) -> None:
        assert self._now_ms is None or now_ms >= self._now_ms, f"the clock went back from {self._now_ms} to {now_ms}"
        self._now_ms = now_ms


# --- replica moves ------------------------------------------------------------------------------


class MoveBlocked(enum.Enum):
    """Why a replica on a gone read node stays where it is."""

    # The VP's leader is on a gone node: the controller fails the VP over to a live RISR
    # member first (control.read_path_decisions); its followers move in a later pass.
    LEADER_GONE = "its leader is on a gone read node: the VP fails over first"
    # Every live read node already holds a replica of the VP: start another read node.
    NO_SPARE_NODE = "every live read node already holds a replica of the VP"
    # A move between live read nodes is in flight (control.replica_moves): its steps rewrite the
    # replicas too, and the two writers could leave the VP one replica short (the move removing
    # its source after this replaced it). The replica moves once that move ended.
    MOVE_IN_FLIGHT = "a replica move of the VP is in flight: it moves once that ends"


@dataclass(frozen=True, slots=True)
class StuckReplica:
    """A replica on a gone read node that ``plan_replica_moves`` could not move, and why."""

    vp: int
    node: str
    reason: MoveBlocked

    def __str__(self) -> str:
        return f"replica of v{self.vp} on gone read node {self.node} stays: {self.reason.value}"


@dataclass(frozen=True, slots=True)
class ReplicaMoves:
    """The outcome of ``plan_replica_moves``."""

    states: tuple[VirtualPartitionState, ...]  # new states of the VPs that move a replica, by VP id
    stuck: tuple[StuckReplica, ...]  # replicas on gone nodes that stay, by VP id and position


def plan_replica_moves(states: Iterable[VirtualPartitionState], live_read_nodes: Iterable[str],
                       gone_nodes: Iterable[str], busy: AbstractSet[int] = frozenset()) -> ReplicaMoves:
    """New states of one topic's VPs that move their follower replicas off ``gone_nodes``.

    Each follower replica on a gone node is replaced, at the same position in ``replicas``, by
    the live read node not already a replica of the VP that hosts the fewest replicas (over
    every VP in ``states``, moves planned so far included; ties: the smallest node id), and
    leaves the RISR. The leader and leader epoch stay, so the leader keeps serving. A VP
    whose leader is on a gone node is not moved here: the controller fails it over first, and
    its followers move in a later pass. A replica with no spare live node stays and is
    reported in ``stuck``, as is each replica of a VP whose leader is gone. Retired VPs hold
    no log: nothing of theirs moves, and they count for no node's load. A VP in ``busy`` (ids of
    VPs with a replica move in flight) keeps its replicas, each on a gone node reported stuck; its
    replicas still count for their nodes' load.
    """
    live, gone = frozenset(live_read_nodes), frozenset(gone_nodes)
    assert not live & gone, f"read nodes both live and gone: {sorted(live & gone)}"
    kept = sorted((state for state in states if not state.retired), key=lambda state: state.vp)
    assert len({state.vp for state in kept}) == len(kept), "one state per VP"
    hosted = Counter(node for state in kept for node in state.replicas)
    moved: list[VirtualPartitionState] = []
    stuck: list[StuckReplica] = []
    for state in kept:
        leaving = [node for node in state.replicas if node in gone]
        if not leaving:
            continue
        if state.vp in busy:
            stuck.extend(StuckReplica(state.vp, node, MoveBlocked.MOVE_IN_FLIGHT) for node in leaving)
            continue
        if state.leader in gone:
            stuck.extend(StuckReplica(state.vp, node, MoveBlocked.LEADER_GONE) for node in leaving)
            continue
        replicas = list(state.replicas)
        for position, node in enumerate(state.replicas):
            if node not in gone:
                continue
            spare = live - set(replicas)
            if not spare:
                stuck.append(StuckReplica(state.vp, node, MoveBlocked.NO_SPARE_NODE))
                continue
            replacement = min(spare, key=lambda candidate: (hosted[candidate], candidate))
            replicas[position] = replacement
            hosted[replacement] += 1
        if replicas != list(state.replicas):
            # The stuck replicas keep their RISR membership: the leader alone decides who is in sync.
            risr = tuple(node for node in state.risr if node in replicas)
            moved.append(dataclasses.replace(state, replicas=tuple(replicas), risr=risr))
    return ReplicaMoves(tuple(moved), tuple(stuck))


# --- merging when groups shrink -----------------------------------------------------------------


def target_virtual_partitions(created_with: int, group_member_counts: Iterable[int]) -> int:
    """Active VPs a topic needs: its creation count, or the largest live group's member count if more."""
    counts = tuple(group_member_counts)
    assert created_with >= 1 and all(count >= 0 for count in counts), (created_with, counts)
    return max((created_with, *counts))


def merge_step(layout: TopicLayout, target: int) -> MergeStep | None:
    """The pair of active VPs to merge toward ``target``; None unless more than ``target`` are active."""
    if len(layout.current.ranges) <= target:
        return None
    step = next_scale_step(layout, target)
    assert isinstance(step, MergeStep), step
    return step


class ShrinkWatch:
    """Whether one topic has had more active VPs than its target for ``vp_merge_delay_ms``.

    ``observe`` answers True when one merge step is due. The clock restarts whenever the
    topic is at or below its target, and after every True: the next step waits a full delay
    again, for the merge just reported to settle (or, if it failed, before it is retried).
    """

    __slots__ = ("vp_merge_delay_ms", "_over_since_ms", "_now_ms")

    def __init__(self, vp_merge_delay_ms: int):
        assert vp_merge_delay_ms >= 1, vp_merge_delay_ms
        self.vp_merge_delay_ms = vp_merge_delay_ms
        self._over_since_ms: int | None = None
        self._now_ms: int | None = None

    def observe(self, active: int, target: int, now_ms: int) -> bool:
        """True if one merge step is due now, with ``active`` VPs against ``target`` at ``now_ms``."""
        assert active >= 1 and target >= 1, (active, target)
        assert self._now_ms is None or now_ms >= self._now_ms, f"the clock went back from {self._now_ms} to {now_ms}"
        self._now_ms = now_ms
        if active <= target:
            self._over_since_ms = None
            return False
        if self._over_since_ms is None:
            self._over_since_ms = now_ms
        if now_ms - self._over_since_ms < self.vp_merge_delay_ms:
            return False
        self._over_since_ms = now_ms
        return True


# --- retiring closed VPs ------------------------------------------------------------------------


def retirable(layout: TopicLayout, states: Iterable[VirtualPartitionState],
              newest_timestamp_ms: Mapping[int, int | None], retention_ms: int | None, now_ms: int) -> tuple[int, ...]:
    """Closed VPs whose logs may be deleted now, by VP id.

    A VP is retirable when it is closed by a split or merge, sealed (its sealed end offset is
    recorded, so no record can still arrive), not retired yet, and its newest record is older
    than ``retention_ms`` at ``now_ms`` or it holds no record (``newest_timestamp_ms[vp]`` is
    None). A VP missing from ``newest_timestamp_ms`` is unknown and stays; with
    ``retention_ms`` None nothing is ever retired.
    """
    if retention_ms is None:
        return ()
    assert retention_ms >= 1, retention_ms
    found = []
    for state in states:
        assert layout.exists(state.vp), f"v{state.vp} has a state but is not in the layout"
        if state.retired or layout.is_active(state.vp) or state.sealed_end_offset is None:
            continue
        if state.vp not in newest_timestamp_ms:
            continue
        newest_ms = newest_timestamp_ms[state.vp]
        if newest_ms is None or now_ms - newest_ms > retention_ms:
            found.append(state.vp)
    return tuple(sorted(found))

