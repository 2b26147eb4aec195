"""The consumer group's keys at the coordinator ("ctl"), as etcd holds them for ``partition_groups.vp_groups``.

Production's mafka4-mode groups have no group coordinator: every member reads the group in
one transaction and applies ``vp_ownership.plan_ownership`` itself (``consumer.py``); etcd only
holds the keys and applies each change as one conditional transaction. This module is that
etcd: the keys and the transactions' conditions, nothing that decides.

Keys: leases (lease id -> member id, last refresh), member keys (member id, under its lease),
owner keys (VP -> member id, under the claimer's lease) and offset keys (VP -> committed offset
and the VP high watermark its committer had seen, for lag). Operations, each one
transaction with production's conditions:

* ``Register``: a new lease and the member key under it, naming the lanes the member reads;
* ``LeaseKeepAlive``: refreshes a live lease; a lapsed one answers ``alive=False``. A lease
  not refreshed for ``lease_ttl_ms`` lapses and takes its member key and owner keys with it
  (checked before every operation and every controller loop, as etcd's timer would);
* ``GroupSnapshotRequest``: members (with their lanes), owners and offsets with the topic's layout and sealed
  end offsets, at one moment (``VirtualGroupStore.snapshot``);
* ``Claim``: create every owner key asked for, only if all are absent and the member key
  exists, reading the committed offsets in the same transaction;
* ``CommitOffsets``: write each offset only while its owner key is the member's and only if
  it moves the stored one forward (or, at the same offset, records a newer high watermark),
  then delete the owner keys to release that are the member's. Production reads the stored
  offsets and writes only if they are unchanged since (``VirtualGroupStore.commit``); here a
  member's requests are applied in order, so that comes down to the forward check, made
  with production's ``vp_ownership.commit_moves_forward``. ``check_commits_monotonic`` judges the outcome.
  Every offset written that changes the stored one is a ``Commit`` in the history; each offset
  carries the leader epoch of the record before it, which a member that starts from it sends
  with its first fetch (Kafka's ``committed_leader_epoch``);
* ``RevokeLease``: the lease and every key under it go (a member leaving).

A member's requests are applied once and in request order: etcd's client sends them in
order over one connection, where this network may deliver them late or twice; a request
older than one already applied is dropped unanswered (``messages``). Not modelled: a
3-member etcd, where a request to a stopped member can be applied after a later one the
client sent to another member (chaos seed 102 met it; the read-then-compare above is what
makes it harmless in production).
"""

from __future__ import annotations

from mafka4.coordinator.groups.vp_ownership import commit_moves_forward
from mafka4.log.epochs import NO_EPOCH
from simulations.checkers import Commit
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

GROUP = "g"


class GroupStore:
    def __init__(self, env: Env, coordinator):
        self.env = env
        self.coordinator = coordinator
        self._leases: dict[int, tuple[str, int]] = {}  # lease id -> (member id, last refresh)
        self._members: dict[str, int] = {}  # member key: member id -> the lease it is under
        self._member_lanes: dict[str, tuple[str, ...]] = {}  # member key's value: the lanes it reads
        self._owners: dict[int, tuple[str, int]] = {}  # owner key: VP -> (member id, the lease it is under)
        # offset key: VP -> (committed offset, high watermark seen, leader epoch of the record before the offset)
        self._offsets: dict[int, tuple[int, int, int]] = {}
        self._applied: dict[str, int] = {}  # member id -> the last request id applied
        self._lease_ids = 0

    @property
    def committed(self) -> dict[int, int]:
        """VP -> the group's committed offset."""
        return {vp: offset for vp, (offset, _, _) in self._offsets.items()}

    def step(self) -> None:
        self._expire_leases()

    def _expire_leases(self) -> None:
        ttl_ms = self.env.options.lease_ttl_ms
        for lease_id, (member_id, refreshed_ms) in sorted(self._leases.items()):
            if self.env.now_ms - refreshed_ms > ttl_ms:
                self._drop_lease(lease_id)
                self.env.count("member_leases_lapsed")
                self.env.note(f"group: lease {lease_id} of {member_id} lapsed")

    def _drop_lease(self, lease_id: int) -> None:
        """Revoke a lease: every key under it goes."""
        member_id, _ = self._leases.pop(lease_id)
        if self._members.get(member_id) == lease_id:
            del self._members[member_id]
        for vp in [vp for vp, owner in self._owners.items() if owner[1] == lease_id]:
            del self._owners[vp]

    def _fresh(self, member_id: str, request_id: int) -> bool:
        """True once per request, and only if no later request of the member was applied."""
        if request_id <= self._applied.get(member_id, 0):
            return False
        self._applied[member_id] = request_id
        return True

    def handle(self, source: str, message: object) -> None:
        self._expire_leases()
        if isinstance(message, m.LeaseKeepAlive):
            lease = self._leases.get(message.lease_id)
            if lease is not None:
                self._leases[message.lease_id] = (lease[0], self.env.now_ms)
            self.env.network.send(COORDINATOR, source, m.LeaseKeepAliveResult(message.lease_id, lease is not None))
            return
        if not self._fresh(message.member_id, message.request_id):
            return
        if isinstance(message, m.Register):
            self._lease_ids += 1
            self._leases[self._lease_ids] = (message.member_id, self.env.now_ms)
            self._members[message.member_id] = self._lease_ids
            self._member_lanes[message.member_id] = message.lanes
            answer = m.Registered(message.request_id, self._lease_ids)
        elif isinstance(message, m.GroupSnapshotRequest):
            answer = self._snapshot(message.request_id)
        elif isinstance(message, m.Claim):
            answer = m.ClaimResult(message.request_id, self._claim(message))
        elif isinstance(message, m.CommitOffsets):
            answer = self._commit(message)
        elif isinstance(message, m.RevokeLease):
            if message.lease_id in self._leases:
                self._drop_lease(message.lease_id)
            return
        else:
            raise AssertionError(f"the group store cannot handle {message!r}")
        self.env.network.send(COORDINATOR, source, answer)

    def _owner(self, vp: int) -> str | None:
        owner = self._owners.get(vp)
        return None if owner is None else owner[0]

    def _snapshot(self, request_id: int) -> m.GroupSnapshot:
        coordinator = self.coordinator
        return m.GroupSnapshot(
            request_id, tuple(sorted(self._members)), coordinator.layout,
            tuple(sorted(coordinator.sealed_end_offsets.items())),
            tuple((vp, member_id) for vp, (member_id, _) in sorted(self._owners.items())),
            tuple((vp, *stored) for vp, stored in sorted(self._offsets.items())),
            tuple((member, self._member_lanes[member]) for member in sorted(self._members)),
        )

    def _claim(self, message: m.Claim) -> tuple[tuple[int, int | None, int], ...] | None:
        # A put under a lapsed lease fails the whole transaction in etcd ("lease not found").
        if (message.member_id not in self._members or message.lease_id not in self._leases
                or any(vp in self._owners for vp in message.vps)):
            return None
        for vp in message.vps:
            self._owners[vp] = (message.member_id, message.lease_id)
            self.env.count("ownership_claims")
        self.env.note(f"group: {message.member_id} claims {['vp%d' % vp for vp in message.vps]}")
        return tuple((vp, *self._offsets[vp][::2]) if vp in self._offsets else (vp, None, NO_EPOCH)
                     for vp in message.vps)

    def _commit(self, message: m.CommitOffsets) -> m.CommitResult:
        committed, lost = [], []
        for vp, offset, high_watermark, leader_epoch in message.offsets:
            if self._owner(vp) != message.member_id:
                lost.append(vp)
                continue
            committed.append(vp)
            stored = self._offsets.get(vp)
            if stored is not None and not commit_moves_forward(offset, high_watermark, stored[0], stored[1],
                                                               leader_epoch, stored[2]):
                continue
            if stored is None or stored[0] != offset:
                self.env.history.append(Commit(GROUP, f"vp{vp}", offset))
            self._offsets[vp] = (offset, high_watermark, leader_epoch)
        released = [vp for vp in sorted(set(message.release)) if self._owner(vp) == message.member_id]
        for vp in released:
            del self._owners[vp]
            self.env.count("ownership_releases")
        if released:
            self.env.note(f"group: {message.member_id} releases {['vp%d' % vp for vp in released]}")
        return m.CommitResult(message.request_id, tuple(committed), tuple(lost))
