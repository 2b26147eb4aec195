"""Consumer groups of Mafka3 mode on etcd: membership, eager rebalance, ownership and offsets.

The rules are pure and live in ``partition_protocol``; this module is the etcd shell around them.

Protocol (keys in ``keys.py``; every change is one etcd transaction, except a commit too large
for one, below):

* **Join.** A member puts its member key under a lease and watches the group prefix, so a
  join, a leave or an expired lease wakes every member: its coordinator's lease and watch,
  shared by every member it hosts (``group_hub``), or, on its own, a lease and watch of its
  own (``membership``); both shared with mafka4-mode groups.
* **Rebalance (eager).** After any change a member reads the whole group at one revision and
  asks ``decide`` for its next step. When the membership differs from the generation key, every
  member stops fetching, commits the positions of everything it owns and deletes its owner keys
  -- in one transaction (or runs of them, **Commit**), so an owner key disappears only with or
  after its final commit. A
  member owning nothing writes the next generation (members, assignment from the assignor, the
  revision the membership was read at) by compare-and-swap on the generation key.
* **Sync barrier and claim.** Once no owner key of an older generation is left, each member
  creates the owner keys of its assigned partitions in one transaction that succeeds only if
  none exists, the generation key is unchanged and its member key is alive; the keys are bound
  to its lease, so a crashed member's partitions free themselves. The same transaction reads
  the committed offsets, which are therefore the previous owner's final ones. Only then does the
  member fetch those partitions: a partition never has two owners.
* **Commit.** A compare-and-swap per partition that holds only while the committer owns the
  partition under its generation and the offset key is unchanged since read; an offset only
  moves forward (``offsets_to_commit``). Each partition's write and release carry their own
  checks, so a commit too large for one transaction (every partition of a topic, long names)
  goes in runs (``metadata.txn_runs``), every release after its partition's write: a member that
  stops between two runs is one that stopped between two commits (at least once).
* **Leave.** Commit and release, then revoke the lease (deleting the member key). A member that
  does not call ``sync`` for ``rebalance_timeout_ms`` after a change revokes its own lease
  (its uncommitted positions are lost; delivery stays at-least-once).
* **Reset offsets** writes offsets backwards or forwards, but only while the group has no
  member key (checked inside the same transaction), as Kafka requires.

Who runs what: ``GroupMember.sync`` runs in the consumer's thread (inside ``poll()``), so
positions never change under a commit; the lease thread and the watch only raise ``changed``
(and the lease thread enforces the rebalance timeout, by this protocol's rule: a change by
another member waits for this member's sync).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import etcd3

from mafka4.coordinator.groups.membership import GroupMembership, MembershipFactory, PendingChange
from mafka4.coordinator.groups.partition_protocol import (VIRTUAL_ASSIGNOR, Claim, CommittedOffset, GroupSnapshot,
                                                          MemberInfo, Propose, Rejoin, Revoke, Stable, TopicPartition,
                                                          Wait, decide, next_generation, offsets_to_commit)
from mafka4.errors import CoordinatorUnavailable, InconsistentGroupProtocol, UnknownTopic
from mafka4.limits import GROUP_SYNC_STEPS_MAX, ConsumerConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore, WatchEvent, _etcd_call, prefix_range_end
from mafka4.physical.topics import TopicStore

logger = logging.getLogger(__name__)


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


class GroupStore(MetadataStore):
    """The etcd transactions of the group protocol."""

    def __init__(self, endpoint: str, cluster: str):
        super().__init__(endpoint)
        self.cluster = cluster

    def snapshot(self, group: str) -> GroupSnapshot:
        items, revision = self.get_prefix_at(keys.group_prefix(self.cluster, group))
        return GroupSnapshot.parse(self.cluster, group, revision, [(i.key, i.value, i.mod_revision) for i in items])

    def group_names(self) -> list[str]:
        found = (keys.group_name_of(self.cluster, item.key) for item in self.get_prefix(keys.groups_prefix(self.cluster)))
        return sorted({name for name in found if name})

    @_etcd_call(repeatable=False)
    def claim(self, group: str, member_id: str, claim: Claim, generation_mod_revision: int,
              lease: etcd3.Lease) -> dict[TopicPartition, CommittedOffset | None] | None:
        """Create the owner keys of ``claim``; their committed offsets, or None if any precondition failed."""
        txn = self._client.transactions
        owner_keys = [keys.group_owner(self.cluster, group, tp.topic, tp.partition) for tp in claim.partitions]
        offset_keys = [keys.group_offset(self.cluster, group, tp.topic, tp.partition) for tp in claim.partitions]
        owner_value = _json({"member_id": member_id, "generation": claim.generation})
        compare = [txn.version(keys.group_member(self.cluster, group, member_id)) > 0,
                   txn.mod(keys.group_generation(self.cluster, group)) == generation_mod_revision]
        compare += [txn.version(key) == 0 for key in owner_keys]
        success = [txn.put(key, owner_value, lease=lease) for key in owner_keys] + [txn.get(key) for key in offset_keys]
        succeeded, responses = self._client.transaction(compare=compare, success=success, failure=[])
        if not succeeded:
            return None
        committed: dict[TopicPartition, CommittedOffset | None] = {}
        for tp, found in zip(claim.partitions, responses[len(owner_keys):]):
            committed[tp] = None if not found else CommittedOffset(json.loads(found[0][0])["offset"], found[0][1].mod_revision)
        return committed

    def commit(self, group: str, member_id: str, generation: int, positions: Mapping[TopicPartition, int],
               release: Iterable[TopicPartition] = ()) -> tuple[set[TopicPartition], set[TopicPartition]]:
        """Commit forward-moving ``positions`` of partitions owned under ``generation``, then delete
        the owner keys of ``release``, in one transaction or, too large for one, in runs (see the
        module docstring). Returns (committed, not committed because no longer owned)."""
        txn = self._client.transactions
        committed_before = self._committed(group, positions)
        to_commit = offsets_to_commit(positions, committed_before)
        owner_value = _json({"member_id": member_id, "generation": generation})
        operations, order = [], []
        for tp, offset in sorted(to_commit.items()):
            owner_key = keys.group_owner(self.cluster, group, tp.topic, tp.partition)
            offset_key = keys.group_offset(self.cluster, group, tp.topic, tp.partition)
            before = committed_before.get(tp)
            unchanged = txn.version(offset_key) == 0 if before is None else txn.mod(offset_key) == before.mod_revision
            value = _json({"offset": offset, "member_id": member_id, "generation": generation})
            operations.append(txn.txn(compare=[txn.value(owner_key) == owner_value, unchanged],
                                      success=[txn.put(offset_key, value)], failure=[]))
            order.append(tp)
        for tp in sorted(set(release)):
            owner_key = keys.group_owner(self.cluster, group, tp.topic, tp.partition)
            operations.append(txn.txn(compare=[txn.value(owner_key) == owner_value],
                                      success=[txn.delete(owner_key)], failure=[]))
        if not operations:
            return set(), set()
        # etcd checks each partition's nested write (two compares) against what the run's list leaves.
        responses = []
        for run in self._runs([([], [operation]) for operation in operations], nesting_ops=2):
            responses += self._transaction([], operations[run.start:run.stop])[1]
        succeeded = {tp for tp, response in zip(order, responses) if response.response_txn.succeeded}
        return succeeded, set(order) - succeeded

    def _committed(self, group: str, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, CommittedOffset]:
        found: dict[TopicPartition, CommittedOffset] = {}
        for topic in sorted({tp.topic for tp in positions}):
            prefix = keys.group_offsets_prefix(self.cluster, group) + f"{topic}/"
            for item in self.get_prefix(prefix):
                parsed = keys.parse_group_partition(keys.group_offsets_prefix(self.cluster, group), item.key)
                if parsed is not None:
                    found[TopicPartition(*parsed)] = CommittedOffset(item.value["offset"], item.mod_revision)
        return found

    @_etcd_call(repeatable=False)
    def reset_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> bool:
        """Write ``offsets`` (in any direction) only if the group has no member; False otherwise."""
        txn = self._client.transactions
        members_prefix = keys.group_members_prefix(self.cluster, group)
        # A compare over a range holds for every key in it, and for an empty range as version 0.
        compare = [txn.version(members_prefix, range_end=prefix_range_end(members_prefix)) == 0]
        success = [txn.put(keys.group_offset(self.cluster, group, tp.topic, tp.partition),
                           _json({"offset": offset, "member_id": "reset-offsets", "generation": 0}))
                   for tp, offset in sorted(offsets.items())]
        succeeded, _ = self._client.transaction(compare=compare, success=success, failure=[])
        return succeeded


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one ``GroupMember.sync`` changed, for the consumer to apply to its fetch state."""

    revoked: tuple[TopicPartition, ...]  # stop fetching these (already committed if still owned)
    claimed: Mapping[TopicPartition, CommittedOffset | None]  # start these from these offsets
    owned: tuple[TopicPartition, ...]  # everything owned now
    waiting: str | None  # why the assignment is not complete yet, or None when stable


class GroupMember:
    """One consumer's membership in ``group`` (``GroupMembership``) and its protocol steps.

    ``sync`` and ``commit`` are called from the consumer's thread only; the lease thread and
    the watch callback only set ``changed`` (and, after ``rebalance_timeout_ms`` without a
    sync, revoke the lease).
    """

    def __init__(self, store: GroupStore, group: str, member: MemberInfo, config: ConsumerConfig,
                 membership: MembershipFactory = GroupMembership):
        """``membership`` makes the member's key, lease and watches: its own (``GroupMembership``) or its
        coordinator's (``group_hub.GroupHub.membership``)."""
        self._store, self.group, self.member, self._config = store, group, member, config
        self._pending_change = PendingChange()
        self._owned: dict[TopicPartition, int] = {}  # partition -> generation it was claimed in
        self._membership = membership(store, group, member, config, [keys.group_prefix(store.cluster, group)],
                                      self._on_events, self._overdue)
        self.changed = self._membership.changed

    @property
    def member_id(self) -> str:
        return self.member.member_id

    @property
    def owned(self) -> tuple[TopicPartition, ...]:
        return tuple(sorted(self._owned))

    def join(self) -> None:
        """Register (refusing a member whose assignor differs from the group's) and start watching."""
        snapshot = self._store.snapshot(self.group)
        others = sorted({m.assignor for m in snapshot.members} - {self.member.assignor})
        if VIRTUAL_ASSIGNOR in others:
            raise InconsistentGroupProtocol(
                f"group {self.group!r} has members reading a mafka4-mode topic by virtual partitions; a consumer of "
                f"the physical partitions of {self.member.topic!r} needs a group of its own: choose another group name")
        if others:
            raise InconsistentGroupProtocol(
                f"group {self.group!r} uses assignor {others[0]!r}, this consumer asked for "
                f"{self.member.assignor!r}: use assignor={others[0]!r} or another group name")
        self._membership.join()

    def sync(self, positions: Mapping[TopicPartition, int]) -> SyncResult:
        """Run protocol steps until this member is stable or must wait for others.

        ``positions`` are the consumer's positions of owned partitions, committed on revoke.
        If etcd does not answer, returns what was done so far and leaves ``changed`` set, so
        the next call continues; the owned partitions stay owned (and fetched) meanwhile.
        """
        self._pending_change.synced()
        self.changed.clear()  # before reading: a change during the steps sets it again
        revoked: list[TopicPartition] = []
        claimed: dict[TopicPartition, CommittedOffset | None] = {}
        try:
            waiting = self._steps(positions, revoked, claimed)
        except CoordinatorUnavailable as error:
            logger.warning("group %s: rebalance of member %s paused: %s", self.group, self.member_id, error)
            self.changed.set()
            waiting = f"etcd unavailable: {error}"
        return SyncResult(tuple(revoked), claimed, self.owned, waiting)

    def _steps(self, positions: Mapping[TopicPartition, int], revoked: list[TopicPartition],
               claimed: dict[TopicPartition, CommittedOffset | None]) -> str | None:
        """Protocol steps, recording what changed in ``revoked`` and ``claimed``; why it waits, or None."""
        for _ in range(GROUP_SYNC_STEPS_MAX):
            snapshot = self._store.snapshot(self.group)
            self._reconcile(snapshot, revoked, claimed)
            decision = decide(snapshot, self.member_id)
            if isinstance(decision, Rejoin):
                logger.info("group %s: member %s lost its registration; joining again", self.group, self.member_id)
                self._membership.register()
            elif isinstance(decision, Revoke):
                self._revoke(snapshot, decision, positions)
                self._drop(list(decision.partitions), revoked, claimed)
            elif isinstance(decision, Propose):
                proposal = next_generation(snapshot, self._partition_counts(snapshot))
                self._store.compare_and_swap(keys.group_generation(self._store.cluster, self.group),
                                             proposal.to_json(), snapshot.generation_mod_revision)
            elif isinstance(decision, Claim):
                self._claim(snapshot, decision, claimed)
            elif isinstance(decision, Wait):
                return decision.reason
            else:
                assert isinstance(decision, Stable) and set(decision.partitions) == set(self._owned)
                return None
        self.changed.set()  # steps left over: continue at the next call
        return f"more than {GROUP_SYNC_STEPS_MAX} steps"

    def _claim(self, snapshot: GroupSnapshot, decision: Claim, claimed: dict[TopicPartition, CommittedOffset | None]) -> None:
        lease = self._membership.lease
        if lease is None:
            return  # left after a rebalance timeout: the next read says Rejoin
        offsets = self._store.claim(self.group, self.member_id, decision, snapshot.generation_mod_revision, lease)
        for tp, committed in (offsets or {}).items():
            self._owned[tp] = decision.generation
            claimed[tp] = committed

    def _reconcile(self, snapshot: GroupSnapshot, revoked: list[TopicPartition],
                   claimed: dict[TopicPartition, CommittedOffset | None]) -> None:
        """Make ``_owned`` match the owner keys: drop lost ones (lease expired), adopt ones whose
        claim succeeded although its answer was lost (their committed offset is in the snapshot)."""
        mine = snapshot.owned_by(self.member_id)
        self._drop(sorted(set(self._owned) - set(mine)), revoked, claimed)
        for tp in sorted(set(mine) - set(self._owned)):
            self._owned[tp] = mine[tp].generation
            claimed[tp] = snapshot.offsets.get(tp)

    def _drop(self, partitions: list[TopicPartition], revoked: list[TopicPartition],
              claimed: dict[TopicPartition, CommittedOffset | None]) -> None:
        for tp in partitions:
            if self._owned.pop(tp, None) is not None:
                revoked.append(tp)
            claimed.pop(tp, None)

    def _revoke(self, snapshot: GroupSnapshot, decision: Revoke, positions: Mapping[TopicPartition, int]) -> None:
        """Commit and release, grouped by the generation each owner key was created in."""
        by_generation: dict[int, list[TopicPartition]] = {}
        for tp in decision.partitions:
            by_generation.setdefault(snapshot.owners[tp].generation, []).append(tp)
        for generation, partitions in sorted(by_generation.items()):
            mine = {tp: positions[tp] for tp in partitions if tp in positions}
            self._store.commit(self.group, self.member_id, generation, mine, release=partitions)

    def _partition_counts(self, snapshot: GroupSnapshot) -> dict[str, int]:
        topics = TopicStore(self._store, self._store.cluster)
        counts = {}
        for topic in {m.topic for m in snapshot.members}:
            try:
                counts[topic] = len(topics.get(topic).partitions)
            except UnknownTopic:
                counts[topic] = 0  # deleted under the group: nothing of it to assign
        return counts

    def commit(self, positions: Mapping[TopicPartition, int]) -> tuple[set[TopicPartition], set[TopicPartition]]:
        """Commit positions of owned partitions; (committed, lost) as ``GroupStore.commit``."""
        committed: set[TopicPartition] = set()
        lost: set[TopicPartition] = set()
        for generation in sorted(set(self._owned.values())):
            mine = {tp: offset for tp, offset in positions.items() if self._owned.get(tp) == generation}
            done, failed = self._store.commit(self.group, self.member_id, generation, mine)
            committed |= done
            lost |= failed
        if lost:
            self.changed.set()
        return committed, lost

    def leave(self, positions: Mapping[TopicPartition, int]) -> None:
        """Commit and release what is owned, then revoke the lease (removing the member key)."""
        self._membership.leave(lambda: self._release_all(positions))

    def _release_all(self, positions: Mapping[TopicPartition, int]) -> None:
        for generation in sorted(set(self._owned.values())):
            partitions = [tp for tp, g in self._owned.items() if g == generation]
            mine = {tp: positions[tp] for tp in partitions if tp in positions}
            self._store.commit(self.group, self.member_id, generation, mine, release=partitions)
        self._owned.clear()

    # --- background: watch events and the rebalance timeout -----------------------------

    def _on_events(self, events: list[WatchEvent]) -> None:
        offsets_prefix = keys.group_offsets_prefix(self._store.cluster, self.group)
        relevant = [event for event in events if not event.key.startswith(offsets_prefix)]
        if not relevant:
            return  # commits do not change membership or ownership
        # Only another member's join or leave, or a new generation, asks this member to act;
        # the rebalance timeout runs from then (not from this member's own claims).
        members_prefix = keys.group_members_prefix(self._store.cluster, self.group)
        own_key = keys.group_member(self._store.cluster, self.group, self.member_id)
        generation_key = keys.group_generation(self._store.cluster, self.group)
        if any((e.key.startswith(members_prefix) and e.key != own_key) or e.key == generation_key for e in relevant):
            self._pending_change.seen()
        self.changed.set()

    def _overdue(self) -> bool:
        """This protocol's rebalance timeout: another member's change waited too long for this member's sync."""
        return self._pending_change.overdue(self._config.rebalance_timeout_ms)
