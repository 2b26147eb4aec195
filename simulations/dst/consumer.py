"""Group members: the simulator's ``VirtualGroupConsumer`` with its ``VirtualGroupMember``, and their churn.

Every member takes its own decisions with the real rule, ``vp_ownership.plan_ownership``, over a
``GroupView`` built from what the group store (``group.py``, etcd) answers; nothing else
assigns VPs. The steps follow production's:

* **Join.** A member id of its own per process start (``new_member_id``), then a lease with
  the member key under it (``Register``). The lease is refreshed every
  ``heartbeat_interval_ms`` and every refresh asks for a sync, as production's lease thread
  does ("a missed watch event must not stall the group"); the simulator has no watches, the
  refresh is what wakes a member.
* **Sync.** Read a ``GroupSnapshot``. If the member key is gone (the lease lapsed): stop every
  VP, register again and read again. VPs owned in etcd but not here are claims whose answer
  was lost (they start from the committed offset); VPs owned here but not in etcd were lost
  (they stop). Then, with the closed VPs it has read to their sealed end counted as committed
  there (``with_read_positions``), ``plan_ownership(view, me)``: release (commit the positions
  and delete the owner keys, one transaction), claim (create the owner keys if absent, reading
  the committed offsets) -- only if the release stored the commits of those drained VPs
  (``OwnershipPlan.after_release``) -- and sync again while a release or a wait is pending.
* **Where a claimed VP starts**: its committed offset; else a child at its log start, and,
  since this group reads from the earliest offset, any other VP at its log start too.
* **Commits**: every ``COMMIT_INTERVAL_MS``, on release and on leaving. An owned closed parent
  read to its sealed end is synced for at once: the sync's release commits it (its children
  wait for that commit).
* **Splits**: when the plan names one (the member with the smallest id, more members than
  active VPs), a ``SplitRequest`` to the resharding (``Resharder.split``); one at a time, and
  not again for ``SPLIT_RETRY_INTERVAL_MS`` after one failed.
* **Leave**: stop reading, commit and release everything, then revoke the lease.

As production's consumer thread, a member makes one etcd call at a time (the lease refresh
runs beside it, as the lease thread does). A call not answered within ``request_timeout_ms``
failed (``CoordinatorUnavailable``): a sync stops where it was and runs again later, and the
VPs stay as they were -- but a VP whose release was sent is not read again, as in production,
until a sync tells whether the release happened (it may have: its next owner then reads from
the offset it committed) or not (then it is owned still, and read from the last commit).
Production keeps reading while its lease may have lapsed, until a sync finds the member key
gone; so does this member.

Deviation: production's poll thread reads nothing while it syncs; here a member reads the
VPs a sync does not touch meanwhile.

Reading (``VpFetcher``): from the RISR member ``risr.route_fetch`` picks (the leader after a
refused fetch), every record read recorded as ``Consumed`` with its physical source and its
batch's leader epoch. Each fetch carries the epoch of the last record read before the position
(a committed offset's epoch, for a VP started from its commit); a replica whose log diverged
from that answers "diverging" and the member moves back as ``VpFetcher`` does
(``positions.rewound``), recording ``Rewound``. Commits carry the position's epoch.

Lanes: member ``i`` reads ``options.consumer_lanes[i]`` (the trunk, "", past its end), named in
its member key (``Register``) as production's ``Consumer(lane=/lanes=)`` names them; the view gets
every member's lanes and each lane's fallback (``lane_fallbacks``), and every record read is
``Consumed`` with its lane (its first header).

``MemberChurn`` makes members join and leave during the chaos phase (never the last running
one), so that the group grows past its active VPs and the plan's splits happen. While the run
drains (``cover_lanes``), idle members join so that the trunk and every lane with fallback "none"
has a reader: their messages are read by a drained run.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from mafka4.batch_frame import iter_batches
from mafka4.batch_payload import decode_checked_batch, lane_of_headers
from mafka4.client.positions import rewound
from mafka4.coordinator.groups.vp_ownership import GroupView, OwnershipPlan, lane_fallbacks, with_read_positions
from mafka4.log.epochs import NO_EPOCH
from mafka4.risr.state import route_fetch
from mafka4.virtual.vp_records import source_of, strip_source
from simulations.checkers import Consumed, Rewound
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

COMMIT_INTERVAL_MS = 60
METADATA_MAX_AGE_MS = 100
FETCH_BYTES_MAX = 1024
SPLIT_RETRY_INTERVAL_MS = 300
# A split not answered within this is taken as failed (a reshard is abandoned well before).
SPLIT_WAIT_MS_MAX = 1500
# Simulated VP logs delete nothing (``virtual.VP_LOG_CONFIG``): every VP log starts at offset 0.
VP_LOG_START_OFFSET = 0


class MemberState(enum.Enum):
    IDLE = "idle"  # not started yet, or left the group
    RUNNING = "running"
    LEAVING = "leaving"  # committing and releasing before it revokes its lease
    CRASHED = "crashed"  # the nemesis boots it again


@dataclass(slots=True)
class _Fetching:
    """A VP this member reads: its position and the fetch in flight."""

    position: int
    last_epoch: int = NO_EPOCH  # of the record before ``position``
    high_watermark: int = 0
    fetch: tuple[int, int] | None = None  # (request, sent at)
    ask_leader: bool = False


@dataclass(frozen=True, slots=True)
class _Call:
    """The member's one etcd call in flight, and what to do with its answer or its timeout."""

    request_id: int
    sent_ms: int
    on_answer: Callable[[object], None]
    on_timeout: Callable[[], None]


def view_of(snapshot: m.GroupSnapshot) -> GroupView:
    """The ``GroupView`` of a snapshot, as ``VirtualGroupSnapshot.view`` builds it."""
    lag = {vp: max(high_watermark - offset, 0) for vp, offset, high_watermark, _ in snapshot.offsets}
    return GroupView(snapshot.members, snapshot.layout, dict(snapshot.sealed_end_offsets), dict(snapshot.owners),
                     {vp: offset for vp, offset, _, _ in snapshot.offsets}, lag,
                     member_lanes={member: frozenset(lanes) for member, lanes in snapshot.member_lanes},
                     lane_fallback=lane_fallbacks(snapshot.layout))


def start_offset(committed: int | None) -> int:
    """Where a claimed VP starts: its committed offset, else its log start (a child continues its
    parents from there; any other VP starts there because this group reads from the earliest)."""
    return committed if committed is not None else VP_LOG_START_OFFSET


class SimConsumer:
    def __init__(self, env: Env, index: int):
        self.env = env
        self.name = f"cons{index}"
        lanes = env.options.consumer_lanes
        self.lanes: tuple[str, ...] = lanes[index] if index < len(lanes) else ("",)  # the lanes it reads
        self.state = MemberState.IDLE
        self.incarnation = 0
        self.leave_requested = False

    @property
    def up(self) -> bool:
        return self.state in (MemberState.RUNNING, MemberState.LEAVING)

    @property
    def member_id(self) -> str:
        return f"{self.name}.{self.incarnation}"

    def boot(self) -> None:
        self.state = MemberState.RUNNING
        self.incarnation += 1
        self.leave_requested = False
        self._lease_id: int | None = None
        self._owned: set[int] = set()  # VPs whose owner key is this member's, as far as it knows
        self._fetching: dict[int, _Fetching] = {}
        self._snapshot: m.GroupSnapshot | None = None
        self._changed = True  # a sync is due
        self._call: _Call | None = None
        self._metadata: m.Metadata | None = None
        self._metadata_request = 0
        self._metadata_at_ms = -METADATA_MAX_AGE_MS
        self._last_commit_ms = self.env.now_ms
        self._last_keepalive_ms = -10**9
        self._split: tuple[int, int] | None = None  # (request, sent at)
        self._split_failed_ms = -10**9
        self.env.network.register(self.name, self.handle)
        self._loop(self.incarnation)

    def crash(self) -> None:
        self.state = MemberState.CRASHED
        self.env.network.unregister(self.name)

    def leave(self) -> None:
        """Close the consumer: it leaves once no etcd call is in flight (its thread is free)."""
        self.leave_requested = True

    def _stopped(self) -> None:
        self.state = MemberState.IDLE
        self.env.network.unregister(self.name)

    # --- the loop ------------------------------------------------------------------------

    def _loop(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        now_ms = self.env.now_ms
        call = self._call
        if call is not None and now_ms - call.sent_ms >= self.env.options.request_timeout_ms:
            self._call = None
            call.on_timeout()
        if self.state is MemberState.RUNNING:
            self._keep_alive()
            if now_ms - self._metadata_at_ms >= METADATA_MAX_AGE_MS:
                self._metadata_at_ms = now_ms
                self._send(COORDINATOR, m.MetadataRequest(self.env.request_id()))
            if self._call is None:
                if self.leave_requested:
                    self._start_leave()
                else:
                    self._group_duties()
            for vp in sorted(self._fetching):
                self._maybe_fetch(vp)
        self.env.scheduler.after(self.env.jitter(self.env.options.tick_interval_ms), lambda: self._loop(incarnation))

    def _send(self, destination: str, message: object) -> None:
        self.env.network.send(self.name, destination, message)

    def _etcd(self, message, on_answer: Callable[[object], None], on_timeout: Callable[[], None]) -> None:
        assert self._call is None, (self.member_id, self._call, message)
        self._call = _Call(message.request_id, self.env.now_ms, on_answer, on_timeout)
        self._send(COORDINATOR, message)

    def _keep_alive(self) -> None:
        if self._lease_id is None or self.env.now_ms - self._last_keepalive_ms < self.env.options.heartbeat_interval_ms:
            return
        self._last_keepalive_ms = self.env.now_ms
        self._send(COORDINATOR, m.LeaseKeepAlive(self.member_id, self._lease_id))
        self._changed = True

    def _group_duties(self) -> None:
        if self._changed or self._drained_parent():
            self._sync()
        elif self.env.now_ms - self._last_commit_ms >= COMMIT_INTERVAL_MS:
            self._commit_positions()

    # --- sync ----------------------------------------------------------------------------

    def _sync(self) -> None:
        self._changed = False  # before reading: a change during the steps sets it again
        self._etcd(m.GroupSnapshotRequest(self.env.request_id(), self.member_id), self._on_snapshot, self._sync_failed)

    def _sync_failed(self) -> None:
        self._changed = True

    def _on_snapshot(self, snapshot: m.GroupSnapshot) -> None:
        if self.member_id in snapshot.members:
            self._steps(snapshot)
            return
        lapsed = self._lease_id is not None
        reads = "" if self.lanes == ("",) else f" (reads lanes {list(self.lanes)})"
        self.env.note(f"group: {self.member_id} {'lost its registration; joins again' if lapsed else 'joins'}{reads}")
        self._stop(sorted(self._owned))
        self._owned.clear()
        self._etcd(m.Register(self.env.request_id(), self.member_id, self.lanes), self._on_registered,
                   self._sync_failed)

    def _on_registered(self, answer: m.Registered) -> None:
        self._lease_id = answer.lease_id
        self._changed = True
        self._etcd(m.GroupSnapshotRequest(self.env.request_id(), self.member_id), self._steps, self._sync_failed)

    def _steps(self, snapshot: m.GroupSnapshot) -> None:
        self._snapshot = snapshot
        owners = dict(snapshot.owners)
        mine = {vp for vp, owner in owners.items() if owner == self.member_id}
        self._stop(sorted(self._owned - mine))  # lost (the lease lapsed): the next owner re-reads from the commit
        committed = {vp: (offset, leader_epoch) for vp, offset, _, leader_epoch in snapshot.offsets}
        for vp in sorted(mine - self._owned):  # a claim that succeeded although its answer was lost
            self._start(vp, *committed.get(vp, (None, NO_EPOCH)))
        self._owned = mine
        positions = {vp: fetching.position for vp, fetching in self._fetching.items()}
        view = with_read_positions(view_of(snapshot), self.member_id, positions)
        plan = self.env.options.ownership_rule(view, self.member_id)
        if plan.release:
            # Stopped before the call: if its answer is lost, the release may still have happened,
            # and the next owner reads from what it commits (production: ``VirtualGroupMember._steps``).
            release = tuple(plan.release)
            offsets = tuple(self._offset(vp) for vp in release if vp in self._fetching)
            self._owned -= set(release)
            self._stop(release)
            self._etcd(m.CommitOffsets(self.env.request_id(), self.member_id, offsets, release),
                       lambda answer: self._claim(plan.after_release(set(answer.committed))), self._sync_failed)
        else:
            self._claim(plan)

    def _claim(self, plan: OwnershipPlan) -> None:
        if plan.claim and self._lease_id is not None:
            self._etcd(m.Claim(self.env.request_id(), self.member_id, self._lease_id, tuple(plan.claim)),
                       lambda answer: self._claimed(plan, answer), self._sync_failed)
        else:
            self._synced(plan)

    def _claimed(self, plan: OwnershipPlan, answer: m.ClaimResult) -> None:
        if answer.committed is None:
            self._changed = True  # a race lost (another claim, or a release still to come): read again
        else:
            for vp, committed, leader_epoch in answer.committed:
                self._owned.add(vp)
                self._start(vp, committed, leader_epoch)
        self._synced(plan)

    def _synced(self, plan: OwnershipPlan) -> None:
        if plan.release or plan.waiting:
            self._changed = True  # the target moves on once these settle
        if plan.split is not None:
            self._start_split(plan.split)

    def _start(self, vp: int, committed: int | None, leader_epoch: int) -> None:
        self._fetching[vp] = _Fetching(start_offset(committed), leader_epoch if committed is not None else NO_EPOCH)

    def _stop(self, vps) -> None:
        for vp in vps:
            self._fetching.pop(vp, None)

    # --- commits, splits, leaving ---------------------------------------------------------

    def _offset(self, vp: int) -> tuple[int, int, int, int]:
        fetching = self._fetching[vp]
        return vp, fetching.position, max(fetching.high_watermark, fetching.position), fetching.last_epoch

    def _commit_positions(self) -> None:
        self._last_commit_ms = self.env.now_ms
        offsets = tuple(self._offset(vp) for vp in sorted(self._fetching) if vp in self._owned)
        if offsets:
            self._etcd(m.CommitOffsets(self.env.request_id(), self.member_id, offsets), self._on_committed, lambda: None)

    def _on_committed(self, answer: m.CommitResult) -> None:
        if answer.lost:
            self._changed = True

    def _drained_parent(self) -> bool:
        """Whether an owned closed VP was read to its sealed end and is not committed there: its
        children wait for the sync that commits and releases it."""
        if self._snapshot is None:
            return False
        sealed = dict(self._snapshot.sealed_end_offsets)
        committed = {vp: offset for vp, offset, _, _ in self._snapshot.offsets}
        return any(vp in sealed and fetching.position >= sealed[vp] and committed.get(vp, -1) < sealed[vp]
                   for vp, fetching in self._fetching.items())

    def _start_split(self, vp: int) -> None:
        now_ms = self.env.now_ms
        if self._split is not None and now_ms - self._split[1] < SPLIT_WAIT_MS_MAX:
            return
        if now_ms - self._split_failed_ms < SPLIT_RETRY_INTERVAL_MS:
            return
        request_id = self.env.request_id()
        self._split = (request_id, now_ms)
        self.env.note(f"group: {self.member_id} asks for a split of vp{vp}")
        self._send(COORDINATOR, m.SplitRequest(request_id, vp))

    def _on_split_result(self, message: m.SplitResult) -> None:
        if self._split is None or self._split[0] != message.request_id:
            return
        self._split = None
        if not message.done:
            self._split_failed_ms = self.env.now_ms
        self._changed = True

    def _start_leave(self) -> None:
        self.state = MemberState.LEAVING
        offsets = tuple(self._offset(vp) for vp in sorted(self._fetching) if vp in self._owned)
        owned = tuple(sorted(self._owned))
        self._fetching.clear()
        self.env.note(f"group: {self.member_id} leaves, releasing {['vp%d' % vp for vp in owned]}")
        self._etcd(m.CommitOffsets(self.env.request_id(), self.member_id, offsets, owned), self._left, self._stopped)

    def _left(self, answer: m.CommitResult) -> None:
        if self._lease_id is not None:
            self._send(COORDINATOR, m.RevokeLease(self.env.request_id(), self.member_id, self._lease_id))
        self._stopped()

    # --- reading -------------------------------------------------------------------------

    def _maybe_fetch(self, vp: int) -> None:
        fetching = self._fetching[vp]
        if fetching.fetch is not None and self.env.now_ms - fetching.fetch[1] < self.env.options.request_timeout_ms:
            return
        state = next((s for s in self._metadata.vps if s.vp == vp), None) if self._metadata else None
        if state is None:
            return
        if fetching.ask_leader:
            replica = state.leader
        else:
            replica = route_fetch(self.member_id, fetching.position, fetching.high_watermark, state.risr, state.leader,
                                  self.env.options.risr_config, f"v{vp}").replica_id
        request_id = self.env.request_id()
        fetching.fetch = (request_id, self.env.now_ms)
        self._send(replica, m.VpFetch(request_id, vp, fetching.position, FETCH_BYTES_MAX, fetching.last_epoch))

    def _on_fetch_result(self, message: m.VpFetchResult) -> None:
        for vp, fetching in self._fetching.items():
            if fetching.fetch is not None and fetching.fetch[0] == message.request_id:
                break
        else:
            return
        fetching.fetch = None
        if message.failure is not None:
            fetching.ask_leader = True
            return
        fetching.ask_leader = False
        fetching.high_watermark = max(fetching.high_watermark, message.high_watermark)
        if message.diverging is not None:
            # This replica's HW, not the largest seen: a committed offset past it was in the lost tail,
            # and the commit of the position behind it may then move back (``commit_moves_forward``).
            fetching.high_watermark = message.high_watermark
            before = fetching.position
            fetching.position, fetching.last_epoch = rewound(before, message.diverging)
            self.env.count("reader_rewinds")
            self.env.note(f"group: {self.member_id} reads vp{vp} again from {fetching.position} (was {before}): "
                          f"epoch {message.diverging[0]} ends at {message.diverging[1]} there")
            self.env.history.append(Rewound(self.member_id, f"vp{vp}", fetching.position))
            return
        for position, header in iter_batches(message.data):
            for record in decode_checked_batch(message.data, position, header):
                if record.offset < fetching.position:
                    continue
                assert record.offset == fetching.position, (vp, record.offset, fetching.position)
                partition, partition_offset = source_of(record)
                plain = strip_source(record)
                lane = lane_of_headers(plain.headers)
                self.env.history.append(Consumed(self.member_id, f"vp{vp}", record.offset, plain.key, plain.value,
                                                 partition, partition_offset, header.leader_epoch, lane))
                if lane:
                    self.env.count("lane_messages_read" if lane in self.lanes else "lane_messages_read_by_fallback")
                fetching.position, fetching.last_epoch = record.offset + 1, header.leader_epoch

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.Metadata):
            if message.request_id > self._metadata_request:
                self._metadata_request, self._metadata = message.request_id, message
        elif isinstance(message, m.VpFetchResult):
            self._on_fetch_result(message)
        elif isinstance(message, m.SplitResult):
            self._on_split_result(message)
        elif isinstance(message, (m.Registered, m.GroupSnapshot, m.ClaimResult, m.CommitResult)):
            call = self._call
            if call is not None and call.request_id == message.request_id:
                self._call = None
                call.on_answer(message)


class MemberChurn:
    """Members join and leave the group during the chaos phase, at ``options.member_churn_interval_ms``
    on average (None: never), keeping at least one running member."""

    def __init__(self, env: Env, consumers: list[SimConsumer]):
        self.env = env
        self.consumers = consumers

    def start(self) -> None:
        if self.env.options.member_churn_interval_ms is not None:
            self.env.scheduler.after(self._interval(), self._step)

    def _interval(self) -> int:
        mean = self.env.options.member_churn_interval_ms
        return self.env.rng.randint(mean // 2, mean * 3 // 2)

    def cover_lanes(self) -> None:
        """Boot idle members until the trunk and every lane with fallback "none" has a running reader."""
        for lane in [""] + [name for name, fallback in self.env.options.lanes if fallback == "none"]:
            readers = [c for c in self.consumers if lane in c.lanes]
            if any(c.up and not c.leave_requested for c in readers):
                continue
            idle = [c for c in readers if c.state is MemberState.IDLE]
            if idle:  # (a crashed one is booted by the nemesis's heal)
                idle[0].boot()
                self.env.count("members_joined_for_lanes")
                self.env.note(f"churn: {idle[0].member_id} joins to read lane {lane!r}")

    def _step(self) -> None:
        if self.env.now_ms >= self.env.options.chaos_ms:
            return
        rng = self.env.rng
        idle = [c for c in self.consumers if c.state is MemberState.IDLE]
        running = [c for c in self.consumers if c.state is MemberState.RUNNING and not c.leave_requested]
        if idle and (len(running) < 2 or rng.random() < 0.5):
            consumer = rng.choice(idle)
            consumer.boot()
            self.env.count("members_joined")
            self.env.note(f"churn: {consumer.member_id} joins")
        elif len(running) >= 2:
            consumer = rng.choice(running)
            consumer.leave()
            self.env.count("members_left")
            self.env.note(f"churn: {consumer.member_id} leaves")
        self.env.scheduler.after(self._interval(), self._step)
