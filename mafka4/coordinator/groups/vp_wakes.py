"""Which watch events wake a member of a mafka4-mode group: only those after which its plan asks it to act.

Two rules, the second within the first:

* ``WakeFilter``: whether an event may change any plan at all (below). Events it calls quiet
  wake nobody.
* ``asks_to_act``: of the events that may, whether the member's plan on its picture of the
  group (``vp_pictures.WatchedGroup``, its last sync's read with every event since applied)
  asks *this* member to act: claim, release, split a VP it did not split already, or learn a
  sealed end (or its change) of a VP it owns, which its consumer reads to. A member whose VP is
  not split sees a join go by without a sync, so its polls and fetches are untouched. When
  there is no picture (before the first sync, after a picture was lost, or a group too large
  for one), ``WakeFilter`` alone decides. A member that slept through an event this rule
  called quiet syncs once at its membership's next period anyway (``VirtualGroupMember``),
  so a wrong quiet delays and never strands; every etcd step stays conditional, so it
  cannot corrupt ownership.

A member watches its group's prefix and its topic's (``vp_groups``). Each wake-up costs a sync
in the member's poll: a read of the group and of the topic's layout and VP states (one etcd
round trip, on one of the coordinator's few group threads), then ``plan_ownership``. A join
that splits a VP writes a dozen keys below the topic; waking on each made every member of
the group sync 5-8 times per join, although only the new split epoch and the parent's sealed
end can change what anyone owns.

What a plan reads (``VirtualGroupSnapshot.view``, and the sync's answer to the consumer), and
so what wakes:

* **Member keys** (``groups/<g>/members/``): the members' ids. Every write wakes; another
  member's join or leave starts this member's rebalance timeout (``Wake.REBALANCE``), its own
  registration does not (``Wake.SYNC``).
* **Owner keys** of the topic (``groups/<g>/vp_owners/<topic>/<v>``): who owns what. Every
  write wakes, as a ``Wake.SYNC`` (a release may free a VP this member waits for). Owner keys
  of another topic are quiet: the snapshot drops them.
* **Split epochs** (``topics/<t>/virtual/<epoch>``): the layout. Written once each; a new one
  is a ``Wake.REBALANCE``.
* **VP state keys** (``topics/<t>/vp/<v>``): of these only ``sealed_end_offset`` and
  ``retired`` (``VpMark``). They decide which closed VPs are consumed, hence which VPs are
  consumable; the sealed ends also go back to the consumer, which syncs at once for a parent
  read to its end. A write that changes either, a key created or deleted, or one whose
  previous value this member did not see wakes (``Wake.REBALANCE``); the RISR writes of VP
  leaders and the leader and ``leader_epoch`` writes of failovers are quiet. Neither the
  plan nor the sync's answer holds a leader or a RISR (ranges come from the layout):
  consumers route their fetches by the read nodes' ``VP_METADATA``, which ``VpFetcher``
  reads again after a failed fetch.

What is quiet, and why no plan can change with it:

* **Committed offsets** (``groups/<g>/vp_offsets/``). The plan reads them at each sync: the
  lags rank the VPs a split may pick, and a committed offset at a sealed end makes the
  parent consumed. A member that read a parent to its end syncs by itself
  (``VirtualGroupConsumer._sync_drained_parents``); the sync commits and releases the parent in
  one transaction, and the deletion of its owner key wakes the others. Commits are frequent
  and would keep every member syncing.
* **Feed positions** (``topics/<t>/feed_positions/``): the read nodes rewrite them all the time.
* **Physical partition states** (``topics/<t>/physical/``), **feeder holds**
  (``topics/<t>/holds/``) and **read losses** (``topics/<t>/read_loss/``): the write path and
  a reshard's own bookkeeping. No plan reads them; a reshard shows in a plan only through its
  split epoch and sealed ends.

A key this module does not name wakes, below the topic as a ``Wake.REBALANCE``, below the
group as a ``Wake.SYNC`` (as every key did before): when in doubt, a member syncs once more.

Why a VP's previous value is known: a watch delivers every write of a key in revision order,
so the last ``VpMark`` seen for a VP is its value right before the next event. A member
knows none for a VP written before it watched (its first event wakes it), nor after a
deletion or an unparsable value. A watch that broke and was set up again may have missed
writes; the membership then wakes the member after watching again, and its sync reads what
was missed (a sealed end and ``retired`` are only ever added, so a later write cannot make an
old mark look current). The marks are bounded by the topic's VPs: a deleted key's mark goes.

Pure: no I/O. Not thread-safe: the caller serialises calls (``VirtualGroupMember``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mafka4.coordinator.groups.vp_ownership import plan_ownership
from mafka4.metadata import keys
from mafka4.virtual.vp_state import VirtualPartitionState

if TYPE_CHECKING:
    from mafka4.coordinator.groups.vp_pictures import WatchedGroup
    from mafka4.metadata.store import WatchEvent


class Wake(enum.Enum):
    QUIET = "quiet"  # nothing any plan reads changed
    SYNC = "sync"  # sync; no rebalance timeout (this member's own registration, an owner key)
    REBALANCE = "rebalance"  # sync, and the rebalance timeout runs: the group or the topic's layout changed


@dataclass(frozen=True, slots=True)
class VpMark:
    """What a plan reads of one VP's state key."""

    sealed_end_offset: int | None
    retired: bool


def quiet_topic_prefixes(cluster: str, topic: str) -> tuple[str, ...]:
    """The prefixes below ``topic`` that no plan reads: feed positions, physical partition states,
    feeder holds and read losses (the module docstring says why). Quiet for ``WakeFilter``, ignored
    by ``vp_pictures.WatchedGroup``."""
    return (keys.topic_feed_positions_prefix(cluster, topic),
            keys.physical_prefix(cluster, topic),
            keys.feeder_holds_of_topic(cluster, topic),
            keys.read_losses_prefix(cluster, topic))


def mark_of(vp: int, value: Any) -> VpMark | None:
    """The ``VpMark`` of a VP state key's value; None if the value is not a VP state.

    A broken value is not asserted on here, in the watch thread: it wakes the member, whose
    sync reads the same value through the same parser and fails there, in the consumer's call.
    """
    try:
        state = VirtualPartitionState.from_json(vp, value)
    except (AssertionError, AttributeError, KeyError, TypeError, ValueError):
        return None
    return VpMark(state.sealed_end_offset, state.retired)


class WakeFilter:
    """The wake rule of one member of ``group`` reading ``topic``; see the module docstring."""

    def __init__(self, cluster: str, group: str, topic: str, member_id: str):
        self._topic = topic
        self._members_prefix = keys.group_members_prefix(cluster, group)
        self._own_key = keys.group_member(cluster, group, member_id)
        self._owners_prefix = keys.group_vp_owners_prefix(cluster, group)
        self._offsets_prefix = keys.group_vp_offsets_prefix(cluster, group)
        self._topic_prefix = keys.topic_children_prefix(cluster, topic)
        self._states_prefix = keys.virtual_partitions_prefix(cluster, topic)
        self._quiet_topic_prefixes = quiet_topic_prefixes(cluster, topic)
        self._marks: dict[int, VpMark] = {}  # VP -> its mark at the last event seen of its key

    def wake(self, events: Iterable[WatchEvent]) -> Wake:
        """What ``events`` (one watch delivery, in revision order) ask of the member."""
        wakes = {self._wake_of(event) for event in events}  # every event: each VP's mark stays current
        for wake in (Wake.REBALANCE, Wake.SYNC):
            if wake in wakes:
                return wake
        return Wake.QUIET

    def _wake_of(self, event: WatchEvent) -> Wake:
        key = event.key
        if key.startswith(self._topic_prefix):
            if key.startswith(self._states_prefix):
                return self._vp_wake(key[len(self._states_prefix):], event.value)
            if key.startswith(self._quiet_topic_prefixes):
                return Wake.QUIET
            return Wake.REBALANCE  # a split epoch, or a key not named here
        if key.startswith(self._offsets_prefix):
            return Wake.QUIET
        owner = keys.parse_group_partition(self._owners_prefix, key)
        if owner is not None:
            return Wake.SYNC if owner[0] == self._topic else Wake.QUIET
        if key.startswith(self._members_prefix) and key != self._own_key:
            return Wake.REBALANCE
        return Wake.SYNC

    def _vp_wake(self, vp_text: str, value: Any) -> Wake:
        if not vp_text.isdigit():
            return Wake.REBALANCE  # not a VP state key as ``keys`` spells them
        vp = int(vp_text)
        before = self._marks.pop(vp, None)
        mark = None if value is None else mark_of(vp, value)
        if mark is None:
            return Wake.REBALANCE  # deleted or unparsable: no mark kept, so its next write wakes too
        self._marks[vp] = mark
        return Wake.QUIET if mark == before else Wake.REBALANCE


@dataclass(frozen=True, slots=True)
class LastAnswer:
    """What a member's last sync answered, against which a plan on its picture is judged."""

    sealed_end_offsets: Mapping[int, int]  # of the closed VPs, as the consumer learned them
    split: int | None  # the VP that sync's plan split (asked the controller for), if any


def asks_to_act(picture: WatchedGroup, member_id: str, answered: LastAnswer) -> bool:
    """Whether ``member_id``'s plan on ``picture`` asks it to sync now; see the module docstring.

    A picture a plan cannot read (a broken invariant) asks: when in doubt, the member syncs.
    """
    view = picture.view()
    if member_id not in view.members:
        return True  # dropped, or its lease lapsed: its sync registers it again
    try:
        plan = plan_ownership(view, member_id)
    except (AssertionError, KeyError, ValueError):
        return True
    if plan.claim or plan.release:
        return True
    if plan.split is not None and plan.split != answered.split:
        return True
    # A split asked for already is not asked again: one done shows as a new split epoch, one
    # refused wakes its member once it may ask again, and one not asked because another was
    # still under way wakes its member when that one ends (``frontend.hosted_members``).
    owned = (vp for vp, owner in view.owners.items() if owner == member_id)
    return any(view.sealed_end_offsets.get(vp) != answered.sealed_end_offsets.get(vp) for vp in owned)
