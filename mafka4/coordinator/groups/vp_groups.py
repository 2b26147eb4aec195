"""Consumer groups of mafka4-mode topics on etcd: membership, VP ownership and offsets.

The rules are pure and live in ``vp_ownership``; this module is the etcd shell around
them (no Ray: splitting and reading are the consumer's, ``client.virtual_group_consumer``).

Keys (``keys.py``): the member keys are those of Mafka3-mode groups (``members/<member>``,
with ``assignor="virtual"``, so the two kinds of member cannot share a group); ownership is
``vp_owners/<topic>/<v>`` and offsets ``vp_offsets/<topic>/<v>``. Every change is one etcd
transaction, except a claim or commit of so many VPs, with names so long, that it passes etcd's
request bound: it goes in runs of transactions, each VP's checks in its own run (``claim``, ``commit``):

* **Join.** The member key under a lease, and watches on the group prefix and on the topic's
  keys. Each member keeps a picture of its last sync's read, kept current by the events
  (``vp_pictures``), and wakes only when its plan on that picture asks it to act: claim,
  release, split, or learn a sealed end of a VP it owns (``vp_wakes.asks_to_act``). So a
  join, a leave, a lapsed lease, a new split epoch or a sealed parent wakes the members it
  asks something of; writes no plan reads (commits, RISR and leader writes, a reshard's
  bookkeeping) wake nobody (``vp_wakes``). A member that slept through a write a plan reads
  syncs once at its membership's next period anyway (``recheck``). On a coordinator
  (``frontend.group_sessions``), the lease and the watches are the coordinator's, shared by
  every member it hosts (``group_hub``); a member on its own holds them itself
  (``membership``). Both are shared with Mafka3-mode groups.
* **Sync** (in the consumer's thread). Read the group and the topic's layout and VP states
  in one transaction (``VirtualGroupStore.snapshot``), count the closed VPs this member has
  read to their sealed end (the positions it syncs with) as committed there
  (``with_read_positions``), ask ``plan_ownership``, then: release -- commit the final
  position and delete the owner key, in one transaction, only while the owner key is this
  member's (written against the committed offsets the snapshot read: no read of its own);
  claim -- create the owner keys, only if absent, only while this member's key
  exists, under its lease, reading the committed offsets in the same transaction (so they
  are the previous owner's final ones). A VP therefore never has two owners, and changes
  owner only after the old owner committed and released it or its lease lapsed. A drained
  parent thus needs no commit call: the sync's release writes its commit, and only once it
  did may the same sync claim (a child of it) or split (``OwnershipPlan.after_release``);
  other members see the children readable only once that transaction is applied.
* **Commit.** Per VP, the offset (and the VP high watermark seen, for lag) is written only
  while this member's owner key holds, and only forward: the committed offsets are read
  first (a sync's release takes those its snapshot read), only positions past them are written, and each write holds only if the offset key
  is still as read (its mod revision, or absent). A commit that reached a stopped etcd member
  and is applied there late, after a newer one went through another member, therefore
  finds the key changed and writes nothing: it cannot move the offset back.
* **Leave.** Commit and release everything, then revoke the lease (deleting the member key).
  A member that does not sync for ``rebalance_timeout_ms`` after a change revokes its own
  lease, so the others can take its VPs.
* **Seed** (a new group starting at the latest offsets): the first member records the sealed
  ends of closed VPs and the current ends of children as committed, so the group does not
  read the history below them; created only if absent.
* **Reset** (``reset_offsets``, an operator's): overwrite VP offsets in any direction, only
  while the group has no member key.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import etcd3

from mafka4.coordinator.groups.membership import GroupMembership, MembershipFactory, PendingChange
from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo
from mafka4.coordinator.groups.vp_ownership import (GroupView, OwnershipPlan, commit_moves_forward, lane_fallbacks,
                                                  plan_ownership, with_read_positions)
from mafka4.coordinator.groups.vp_pictures import Applied, WatchedGroup
from mafka4.coordinator.groups.vp_wakes import LastAnswer, Wake, WakeFilter, asks_to_act
from mafka4.errors import CoordinatorUnavailable, InconsistentGroupProtocol
from mafka4.join_trace import JOIN_TRACES, vps_detail
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.log.epochs import NO_EPOCH
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore, WatchEvent, prefix_range_end
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

logger = logging.getLogger(__name__)


def _json(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class VpOffset:
    offset: int
    high_watermark: int  # the VP high watermark the committer had seen
    # The leader epoch of the record before ``offset`` (Kafka's committed_leader_epoch): the member
    # that starts there names it in its first fetch. NO_EPOCH: not known (a commit written before
    # commits had one, a reset or a seed): only the offset is checked against the VP's log then.
    leader_epoch: int = NO_EPOCH

    @classmethod
    def from_json(cls, value: dict) -> "VpOffset":
        """The offset an etcd offset key holds (older keys lack the high watermark and the epoch)."""
        return cls(value["offset"], value.get("high_watermark", value["offset"]), value.get("leader_epoch", NO_EPOCH))


@dataclass(frozen=True, slots=True)
class VirtualGroupSnapshot:
    """A group's members, owners and offsets of one topic, with the topic's layout, at one revision."""

    members: tuple[MemberInfo, ...]  # sorted by member id
    owners: Mapping[int, str]
    offsets: Mapping[int, VpOffset]
    layout: TopicLayout
    states: Mapping[int, VirtualPartitionState]
    # The mod revision of each offset key read: a release in the same sync writes its commit
    # against them (``VirtualGroupStore.commit``'s ``committed_before``) instead of reading them again.
    offset_revisions: Mapping[int, int] = field(default_factory=dict)

    def committed_before(self) -> dict[int, tuple[VpOffset, int]]:
        """(committed offset, its key's mod revision) of each VP with one, as this snapshot read them."""
        return {vp: (offset, self.offset_revisions[vp]) for vp, offset in self.offsets.items()
                if vp in self.offset_revisions}

    def view(self) -> GroupView:
        sealed = {vp: s.sealed_end_offset for vp, s in self.states.items() if s.sealed_end_offset is not None}
        lag = {vp: max(o.high_watermark - o.offset, 0) for vp, o in self.offsets.items()}
        retired = frozenset(vp for vp, s in self.states.items() if s.retired)
        return GroupView(tuple(m.member_id for m in self.members), self.layout, sealed, dict(self.owners),
                         {vp: o.offset for vp, o in self.offsets.items()}, lag, retired,
                         member_lanes={m.member_id: m.reads for m in self.members},
                         lane_fallback=lane_fallbacks(self.layout))


class VirtualGroupStore(MetadataStore):
    """The etcd transactions of mafka4-mode groups."""

    def __init__(self, endpoint: str, cluster: str):
        super().__init__(endpoint)
        self.cluster = cluster

    def snapshot(self, group: str, topic: str, config: TopicConfig) -> VirtualGroupSnapshot:
        group_prefix = keys.group_prefix(self.cluster, group)
        epochs_prefix = keys.split_epochs_prefix(self.cluster, topic)
        states_prefix = keys.virtual_partitions_prefix(self.cluster, topic)
        found = self.get_prefixes([group_prefix, epochs_prefix, states_prefix])
        members_prefix = keys.group_members_prefix(self.cluster, group)
        owners_prefix = keys.group_vp_owners_prefix(self.cluster, group)
        offsets_prefix = keys.group_vp_offsets_prefix(self.cluster, group)
        members, owners, offsets, offset_revisions = [], {}, {}, {}
        for item in found[group_prefix]:
            if item.key.startswith(members_prefix):
                members.append(MemberInfo.from_json(item.value))
            elif (parsed := keys.parse_group_partition(owners_prefix, item.key)) is not None and parsed[0] == topic:
                owners[parsed[1]] = item.value["member_id"]
            elif (parsed := keys.parse_group_partition(offsets_prefix, item.key)) is not None and parsed[0] == topic:
                offsets[parsed[1]] = VpOffset.from_json(item.value)
                offset_revisions[parsed[1]] = item.mod_revision
        layout = VirtualStore.layout_from(topic, config.partitions, config.virtual_config(), found[epochs_prefix])
        states = {vp: state for vp, (state, _) in VirtualStore.states_from(states_prefix, found[states_prefix]).items()}
        members.sort(key=lambda m: m.member_id)
        return VirtualGroupSnapshot(tuple(members), owners, offsets, layout, states, offset_revisions)

    def claim(self, group: str, member_id: str, topic: str, vps: list[int],
              lease: etcd3.Lease) -> dict[int, VpOffset | None] | None:
        """Create the owner keys of ``vps``; the committed offsets of those claimed, or None if none
        was (one exists or I left).

        Each owner key is created only if absent and only while my member key exists, with its
        VP's committed offset read in the same transaction: what keeps a VP to one owner, reading
        from its last owner's final commit, holds per VP. So a claim too large for one transaction
        (long names) goes in runs (``txn_runs``), and a refused run ends it: the VPs of the runs
        before are claimed, the rest are not (the caller syncs again, as after a refused claim).
        """
        txn = self._client.transactions
        member_exists = txn.version(keys.group_member(self.cluster, group, member_id)) > 0
        parts = []
        for vp in vps:
            owner_key = keys.group_vp_owner(self.cluster, group, topic, vp)
            parts.append(([txn.version(owner_key) == 0],
                          [txn.put(owner_key, _json({"member_id": member_id}), lease=lease),
                           txn.get(keys.group_vp_offset(self.cluster, group, topic, vp))]))
        committed: dict[int, VpOffset | None] = {}
        for run in self._runs(parts, ([member_exists], [])):
            run_parts = [parts[index] for index in run]
            succeeded, responses = self._transaction([member_exists] + [c for compare, _ in run_parts for c in compare],
                                                     [op for _, ops in run_parts for op in ops])
            if not succeeded:
                break
            for vp, found in zip((vps[index] for index in run), responses[1::2]):
                committed[vp] = VpOffset.from_json(json.loads(found[0][0])) if found else None
        return committed or None

    def commit(self, group: str, member_id: str, topic: str, offsets: Mapping[int, VpOffset],
               release: Sequence[int] = (),
               committed_before: Mapping[int, tuple[VpOffset, int]] | None = None) -> tuple[set[int], set[int]]:
        """Write the forward-moving ``offsets`` of VPs this member owns, then delete the owner keys of
        ``release``; (committed, lost: no longer owned). A VP in neither set was not committed
        because its offset did not move forward, or moved meanwhile.

        ``committed_before``: the topic's committed offsets with their keys' mod revisions, as the
        caller read them (a sync's snapshot, ``VirtualGroupSnapshot.committed_before``); None: read
        them first (one etcd round trip more). Either way each write holds only if its offset key
        is still as read, so an older read can only make a write refused, never one go backwards.

        Every VP's write and release carries its own checks (the owner key is mine; the offset
        key is as read), so each is right alone: one transaction when they fit, else runs
        (``txn_runs``). A member that stops between two runs has committed some VPs and not the
        rest, as one that crashed between two commits: their next owner reads them again from
        their last commit (at least once), and the owner keys not released lapse with its lease.
        """
        txn = self._client.transactions
        mine = _json({"member_id": member_id})
        if committed_before is None:
            committed_before = self._committed(group, topic)
        operations, order = [], []
        for vp, offset in sorted(offsets.items()):
            before = committed_before.get(vp)
            if before is not None and not commit_moves_forward(offset.offset, offset.high_watermark,
                                                               before[0].offset, before[0].high_watermark,
                                                               offset.leader_epoch, before[0].leader_epoch):
                continue
            owner_key = keys.group_vp_owner(self.cluster, group, topic, vp)
            offset_key = keys.group_vp_offset(self.cluster, group, topic, vp)
            unchanged = txn.version(offset_key) == 0 if before is None else txn.mod(offset_key) == before[1]
            value = _json({"offset": offset.offset, "member_id": member_id, "high_watermark": offset.high_watermark,
                           "leader_epoch": offset.leader_epoch})
            write = txn.txn(compare=[unchanged], success=[txn.put(offset_key, value)], failure=[])
            operations.append(txn.txn(compare=[txn.value(owner_key) == mine], success=[write], failure=[]))
            order.append(vp)
        for vp in sorted(set(release)):
            owner_key = keys.group_vp_owner(self.cluster, group, topic, vp)
            operations.append(txn.txn(compare=[txn.value(owner_key) == mine], success=[txn.delete(owner_key)], failure=[]))
        if not operations:
            return set(), set()
        # Each VP's write nests two transactions of one op each: etcd checks them against what the
        # run's own list leaves.
        responses = []
        for run in self._runs([([], [operation]) for operation in operations], nesting_ops=2):
            responses += self._transaction([], operations[run.start:run.stop])[1]
        owned = {vp for vp, response in zip(order, responses) if response.response_txn.succeeded}
        written = {vp for vp, response in zip(order, responses)
                   if vp in owned and response.response_txn.responses[0].response_txn.succeeded}
        return written, set(order) - owned

    def _committed(self, group: str, topic: str) -> dict[int, tuple[VpOffset, int]]:
        """(committed offset, mod revision of its key) of each of ``topic``'s VPs with one."""
        offsets_prefix = keys.group_vp_offsets_prefix(self.cluster, group)
        found = {}
        for item in self.get_prefix(f"{offsets_prefix}{topic}/"):
            parsed = keys.parse_group_partition(offsets_prefix, item.key)
            if parsed is not None:
                found[parsed[1]] = (VpOffset.from_json(item.value), item.mod_revision)
        return found

    def reset_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> bool:
        """Write ``offsets`` per VP (in any direction) only if the group has no member; False otherwise."""
        txn = self._client.transactions
        members_prefix = keys.group_members_prefix(self.cluster, group)
        # A compare over a range holds for every key in it, and for an empty range as version 0.
        compare = [txn.version(members_prefix, range_end=prefix_range_end(members_prefix)) == 0]
        success = [txn.put(keys.group_vp_offset(self.cluster, group, topic, vp),
                           _json({"offset": offset, "member_id": "reset-offsets", "high_watermark": offset}))
                   for vp, offset in sorted(offsets.items())]
        succeeded, _ = self._client.transaction(compare=compare, success=success, failure=[])
        return succeeded

    def seed_offsets(self, group: str, topic: str, offsets: Mapping[int, int]) -> bool:
        """Create the offset keys of ``offsets`` if none of them exists yet (a new group's starting point)."""
        values = {keys.group_vp_offset(self.cluster, group, topic, vp): {"offset": offset, "member_id": "seed",
                                                                         "high_watermark": offset}
                  for vp, offset in offsets.items()}
        return bool(values) and self.create_all(values)


@dataclass(frozen=True, slots=True)
class VpSyncResult:
    """What one ``VirtualGroupMember.sync`` changed, for the consumer to apply to its fetch state."""

    revoked: tuple[int, ...]  # stop fetching these (released after their commit, or lost)
    claimed: Mapping[int, VpOffset | None]  # start these, from their committed offset if any
    owned: tuple[int, ...]
    snapshot: VirtualGroupSnapshot | None  # None when etcd did not answer
    plan: OwnershipPlan | None


class VirtualGroupMember:
    """One consumer's membership in a mafka4-mode group (``GroupMembership``) and its protocol steps.

    ``sync``, ``commit`` and ``leave`` run in the consumer's thread; the lease thread and the
    watch callbacks only set ``changed`` (and the lease thread enforces the rebalance timeout).
    """

    def __init__(self, store: VirtualGroupStore, group: str, topic: str, topic_config: TopicConfig,
                 member_id: str, config: ConsumerConfig, membership: MembershipFactory = GroupMembership,
                 lanes: tuple[str, ...] = ()):
        """``lanes``: the lanes the member reads (``MemberInfo.lanes``: () the trunk alone)."""
        self._store, self.group, self.topic, self._topic_config = store, group, topic, topic_config
        self.member = MemberInfo(member_id, topic, VIRTUAL_ASSIGNOR, lanes)
        self._config = config
        self._pending_change = PendingChange()
        # The wake state, guarded by ``_wakes_lock`` (the watches' callbacks may come from more than
        # one thread, and ``sync`` replaces the picture from the consumer's).
        self._wakes_lock = threading.Lock()
        self._wakes = WakeFilter(store.cluster, group, topic, member_id)
        self._picture: WatchedGroup | None = None  # None: WakeFilter alone decides (see vp_wakes)
        self._replay: list[WatchEvent] | None = None  # events since the running sync began to read
        self._answered = LastAnswer({}, None)
        self._slept = False  # an event asks_to_act called quiet since the last sync: recheck
        self.owned: set[int] = set()
        watched = [keys.group_prefix(store.cluster, group), keys.topic_children_prefix(store.cluster, topic)]
        self._membership = membership(store, group, self.member, config, watched, self._on_events, self._overdue,
                                      recheck=self._recheck)
        self.changed = self._membership.changed

    @property
    def member_id(self) -> str:
        return self.member.member_id

    def join(self) -> VirtualGroupSnapshot:
        """Register (refusing a group of Mafka3-mode members) and start watching; the snapshot before joining."""
        snapshot = self._store.snapshot(self.group, self.topic, self._topic_config)
        others = sorted({m.assignor for m in snapshot.members} - {VIRTUAL_ASSIGNOR})
        if others:
            raise InconsistentGroupProtocol(
                f"group {self.group!r} has Mafka3-mode members (assignor {others[0]!r}) reading physical partitions; "
                f"a consumer of mafka4-mode topic {self.topic!r} needs a group of its own: choose another group name")
        self._membership.join()
        return snapshot

    def sync(self, positions: Mapping[int, VpOffset]) -> VpSyncResult:
        """Read, decide and carry out releases and claims; ``positions`` are committed on release
        (an owned closed VP read to its sealed end is released so: see the module docstring).

        If etcd does not answer, ``changed`` stays set, so the next call tries again; owned VPs
        stay owned (and fetched) meanwhile, except those whose release was sent (revoked).
        """
        self._pending_change.synced()
        self.changed.clear()  # before reading: a change during the steps sets it again
        with self._wakes_lock:
            self._replay, self._slept = [], False  # replayed onto this sync's read (``_picture_from``)
        revoked: list[int] = []
        claimed: dict[int, VpOffset | None] = {}
        try:
            snapshot = self._store.snapshot(self.group, self.topic, self._topic_config)
            JOIN_TRACES.record(self.topic, "sync_read", self.member_id)
            if self.member_id not in {m.member_id for m in snapshot.members}:
                logger.info("group %s: member %s lost its registration; joining again", self.group, self.member_id)
                revoked.extend(sorted(self.owned))
                self.owned.clear()
                self._membership.register()
                snapshot = self._store.snapshot(self.group, self.topic, self._topic_config)
            plan = self._steps(snapshot, positions, revoked, claimed)
        except CoordinatorUnavailable as error:
            logger.warning("group %s: member %s could not sync: %s", self.group, self.member_id, error)
            self._forget_picture()
            self.changed.set()
            return VpSyncResult(tuple(revoked), claimed, tuple(sorted(self.owned)), None, None)
        except BaseException:
            self._forget_picture()
            raise
        self._picture_from(snapshot, plan, claimed)
        return VpSyncResult(tuple(revoked), claimed, tuple(sorted(self.owned)), snapshot, plan)

    def _forget_picture(self) -> None:
        """After a sync that failed: no picture, no replay; the events wake by ``WakeFilter`` until a sync reads."""
        with self._wakes_lock:
            self._picture, self._replay = None, None

    def _picture_from(self, snapshot: VirtualGroupSnapshot, plan: OwnershipPlan,
                      claimed: Mapping[int, VpOffset | None]) -> None:
        """The picture this sync read, with its own claims and releases, then the events since it began to read.

        The sync's own writes are in the picture at once, so a plan on it does not ask to claim
        again what was just claimed; their events confirm them. The events replayed may be older
        than the read (see ``vp_pictures``): the watches' later events make the picture exact.
        """
        picture = WatchedGroup(self._store.cluster, self.group, self.topic, snapshot.layout.partitions,
                               snapshot.layout.config)
        fits = picture.read(snapshot.members, snapshot.owners,
                            {vp: (o.offset, o.high_watermark) for vp, o in snapshot.offsets.items()},
                            snapshot.layout, snapshot.states)
        for vp in plan.release:
            if picture.owners.get(vp) == self.member_id:
                del picture.owners[vp]
        picture.owners.update({vp: self.member_id for vp in claimed})
        with self._wakes_lock:
            replay, self._replay = self._replay or [], None
            self._answered = LastAnswer(dict(snapshot.view().sealed_end_offsets), plan.split)
            self._picture = picture if fits and all(picture.apply(e) is not Applied.LOST for e in replay) else None
            act = bool(replay) and (self._picture is None or asks_to_act(self._picture, self.member_id,
                                                                         self._answered))
        if act:
            self.changed.set()  # an event during the sync asks something of this member

    def _steps(self, snapshot: VirtualGroupSnapshot, positions: Mapping[int, VpOffset], revoked: list[int],
               claimed: dict[int, VpOffset | None]) -> OwnershipPlan:
        mine = {vp for vp, owner in snapshot.owners.items() if owner == self.member_id}
        for vp in sorted(self.owned - mine):  # lost (the lease lapsed): the next owner re-reads from the commit
            revoked.append(vp)
        for vp in sorted(mine - self.owned):  # a claim that succeeded although its answer was lost
            claimed[vp] = snapshot.offsets.get(vp)
        self.owned = mine
        view = with_read_positions(snapshot.view(), self.member_id, {vp: p.offset for vp, p in positions.items()})
        plan = plan_ownership(view, self.member_id)
        if plan.release:
            # Given up before the call: if etcd's answer is lost, the release may still have
            # happened and the next owner reads from what it committed, so this member must not
            # read these VPs on; a later sync that finds them still its own claims them back
            # (above), from their last commit.
            release = list(plan.release)
            self.owned -= set(release)
            revoked.extend(release)
            # Against the offsets this sync read: the release, which the children wait for, is then
            # one etcd round trip, not two. Only this member writes them while it owns the VPs, one
            # call at a time, so they are current unless a write of its own arrived late (refused).
            written, _ = self._store.commit(self.group, self.member_id, self.topic,
                                            {vp: positions[vp] for vp in release if vp in positions}, release=release,
                                            committed_before=snapshot.committed_before())
            JOIN_TRACES.record(self.topic, "release_written", self.member_id, vps_detail(release))
            plan = plan.after_release(written)
        lease = self._membership.lease
        if plan.claim and lease is not None:
            got = self._store.claim(self.group, self.member_id, self.topic, list(plan.claim), lease) or {}
            claimed.update(got)
            self.owned |= set(got)
            if len(got) < len(plan.claim):
                self.changed.set()  # a race lost (another claim, or a release still to come): read again
        if plan.release or plan.waiting:
            self.changed.set()  # the target moves on once these settle
        return plan

    def commit(self, positions: Mapping[int, VpOffset]) -> tuple[set[int], set[int]]:
        """Commit positions of owned VPs; (committed, lost)."""
        mine = {vp: offset for vp, offset in positions.items() if vp in self.owned}
        committed, lost = self._store.commit(self.group, self.member_id, self.topic, mine)
        if lost:
            self.changed.set()
        return committed, lost

    def leave(self, positions: Mapping[int, VpOffset]) -> None:
        """Commit and release what is owned, then revoke the lease (removing the member key)."""
        self._membership.leave(lambda: self._release_all(positions))

    def _release_all(self, positions: Mapping[int, VpOffset]) -> None:
        owned = sorted(self.owned)
        if owned:
            self._store.commit(self.group, self.member_id, self.topic,
                               {vp: positions[vp] for vp in owned if vp in positions}, release=owned)
        self.owned.clear()

    # --- background: watch events and the rebalance timeout -----------------------------

    def _on_events(self, events: list[WatchEvent]) -> None:
        # Only what asks this member to act wakes it (``vp_wakes``). Another member's join or
        # leave, or a change of the topic's layout or sealed ends, may ask this member to
        # release or claim: its rebalance timeout runs from then. Owner keys (its own syncs'
        # writes included) and its own registration wake it without starting the timeout, and
        # the periodic rechecks do not start it either: a member that stops polling while
        # nothing changes stays in the group.
        with self._wakes_lock:
            wake = self._wakes.wake(events)  # every event: the rule's VP marks stay current
            if self._replay is not None:
                self._replay.extend(events)
            picture = self._picture
            if picture is not None and any(picture.apply(event) is Applied.LOST for event in events):
                picture = self._picture = None  # cannot follow: the sync this wakes reads afresh
                wake = Wake.SYNC if wake is Wake.QUIET else wake  # in doubt: a sync, not a rebalance timeout
            if wake is not Wake.QUIET and picture is not None and not asks_to_act(picture, self.member_id,
                                                                                  self._answered):
                self._slept = True
                return
        if wake is Wake.QUIET:
            return
        if wake is Wake.REBALANCE:
            self._pending_change.seen()
        self.changed.set()

    def _recheck(self) -> None:
        """Once a membership period: sync if an event was judged quiet since the last sync, in case
        the picture was wrong (a missed or misread event); no rebalance timeout starts."""
        with self._wakes_lock:
            slept, self._slept = self._slept, False
        if slept:
            self.changed.set()

    def _overdue(self) -> bool:
        """This protocol's rebalance timeout: a change that may ask this member to act waited too long for its sync."""
        return self._pending_change.overdue(self._config.rebalance_timeout_ms)
