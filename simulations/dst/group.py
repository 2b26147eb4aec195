"""One consumer group reading the VPs: its coordinator (part of "ctl") and its members.

The group coordinator keeps, as etcd would, the members' leases, the owner of each VP
and the committed offsets. Each loop it computes the target assignment with the real
assignor the seed chose (``StickyAssignor`` or ``RangeAssignor``) over the VPs the group may
read now (``TopicLayout.consumable_vps``:
parent before child), and moves VPs as DESIGN.md section 7 says: a VP changes owner only
after its owner committed and released it (``Revoke`` -> ``Released``), or after the
owner's lease expired (then without a commit: the next owner re-reads from the last
commit, at-least-once). Commits move forward only, by ``group_protocol.offsets_to_commit``,
and only from the current owner; each accepted commit is a ``Commit`` in the history.

A member (``SimConsumer``) heartbeats its lease with the assignments it holds, and once its
lease may have expired (measured from the send time of the last acknowledged heartbeat, as
``election.lease_expired`` does) it drops every VP it held, so a cut-off member is never a
zombie reader. It fetches from the RISR member ``risr.route_fetch`` picks (the leader after a
refused fetch), records every record it reads as ``Consumed`` with its physical source, and
commits every ``COMMIT_INTERVAL_MS``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.coordinator.assignors import assignor_named
from mafka4.coordinator.group_protocol import CommittedOffset, TopicPartition, offsets_to_commit
from mafka4.records import decode_batches
from mafka4.risr.state import route_fetch
from mafka4.virtual.split import source_of, strip_source
from simulations.checkers import Commit, Consumed
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

GROUP = "g"
COMMIT_INTERVAL_MS = 60
METADATA_MAX_AGE_MS = 100
FETCH_BYTES_MAX = 1024


def _tp(vp: int) -> TopicPartition:
    return TopicPartition("t", vp)


class GroupCoordinator:
    def __init__(self, env: Env, coordinator):
        self.env = env
        self.coordinator = coordinator
        self.committed: dict[int, int] = {}
        self._owners: dict[int, tuple[str, int, int]] = {}  # vp -> (member, member incarnation, assignment)
        self._revoking: dict[int, int] = {}  # vp -> when the revoke was last sent
        # member -> (last heartbeat, incarnation, the assignment ids it holds)
        self._members: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        self._assignments = 0
        self._assignor = assignor_named(env.options.assignor)

    def _live(self, member: str) -> bool:
        seen = self._members.get(member)
        return seen is not None and self.env.now_ms - seen[0] <= self.env.options.lease_ttl_ms

    def consumable(self) -> tuple[int, ...]:
        return self.coordinator.layout.consumable_vps(self.committed, self.coordinator.sealed_end_offsets)

    def step(self) -> None:
        for vp, (member, incarnation, _) in sorted(self._owners.items()):
            if not self._live(member) or self._members[member][1] != incarnation:
                del self._owners[vp]
                self._revoking.pop(vp, None)
                self.env.note(f"group: {member} lost vp{vp} (lease expired or restarted), no commit")
        live = sorted(member for member in self._members if self._live(member))
        previous = {member: [vp for vp, owner in self._owners.items() if owner[0] == member] for member in live}
        target = self._assignor.assign(live, self.consumable(), previous) if live else {}
        wanted = {vp: member for member, vps in target.items() for vp in vps}
        for vp, (member, _, assignment) in sorted(self._owners.items()):
            if wanted.get(vp) != member and self.env.now_ms - self._revoking.get(vp, -10**9) >= 2 * COMMIT_INTERVAL_MS:
                self._revoking[vp] = self.env.now_ms
                self.env.network.send(COORDINATOR, member, m.Revoke(assignment, vp))
        for vp, member in sorted(wanted.items()):
            owner = self._owners.get(vp)
            if owner is None:
                self._assignments += 1
                self._owners[vp] = owner = (member, self._members[member][1], self._assignments)
            if owner[0] == member and owner[2] not in self._members[member][2]:
                self.env.network.send(COORDINATOR, member, m.Assign(owner[2], vp, self.committed.get(vp, 0), owner[1]))

    def _commit(self, vp: int, offset: int) -> bool:
        committed = {_tp(v): CommittedOffset(o, 0) for v, o in self.committed.items()}
        moved = offsets_to_commit({_tp(vp): offset}, committed)
        if not moved:
            return False
        self.committed[vp] = moved[_tp(vp)]
        self.env.history.append(Commit(GROUP, f"vp{vp}", self.committed[vp]))
        return True

    def _owns(self, member: str, assignment: int, vp: int) -> bool:
        owner = self._owners.get(vp)
        return owner is not None and owner[0] == member and owner[2] == assignment

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.Heartbeat):  # routed here by the coordinator for group members
            self._members[message.node] = (self.env.now_ms, message.incarnation, message.running)
            self.env.network.send(COORDINATOR, source, m.HeartbeatAck(message.incarnation, message.sent_ms))
        elif isinstance(message, m.OffsetCommit):
            accepted = self._owns(message.member, message.assignment, message.vp)
            if accepted:
                self._commit(message.vp, message.offset)
            self.env.network.send(COORDINATOR, source, m.OffsetCommitResult(message.request_id, accepted))
        elif isinstance(message, m.Released):
            if self._owns(message.member, message.assignment, message.vp):
                if message.offset >= 0:
                    self._commit(message.vp, message.offset)
                del self._owners[message.vp]
                self._revoking.pop(message.vp, None)
        else:
            raise AssertionError(f"the coordinator cannot handle {message!r}")


@dataclass(slots=True)
class _Owned:
    assignment: int
    position: int
    high_watermark: int = 0
    fetch: tuple[int, int] | None = None  # (request, sent at)
    ask_leader: bool = False


class SimConsumer:
    def __init__(self, env: Env, index: int):
        self.env = env
        self.name = f"cons{index}"
        self.up = False
        self.incarnation = 0
        self.records_read = 0

    def boot(self) -> None:
        self.up = True
        self.incarnation += 1
        self._owned: dict[int, _Owned] = {}
        self._lease_until_ms = -1
        self._leased = False
        self._metadata: m.Metadata | None = None
        self._metadata_request = 0
        self._metadata_at_ms = -METADATA_MAX_AGE_MS
        self._last_commit_ms = 0
        self._last_heartbeat_ms = -10**9
        self.env.network.register(self.name, self.handle)
        self._loop(self.incarnation)

    def crash(self) -> None:
        self.up = False
        self.env.network.unregister(self.name)

    def _loop(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        now_ms = self.env.now_ms
        options = self.env.options
        if now_ms - self._last_heartbeat_ms >= options.heartbeat_interval_ms:
            self._last_heartbeat_ms = now_ms
            held = tuple(sorted(owned.assignment for owned in self._owned.values()))  # assignments, not VP ids
            self.env.network.send(self.name, COORDINATOR, m.Heartbeat(self.name, self.incarnation, held, now_ms))
        if now_ms - self._metadata_at_ms >= METADATA_MAX_AGE_MS:
            self._metadata_at_ms = now_ms
            self.env.network.send(self.name, COORDINATOR, m.MetadataRequest(self.env.request_id()))
        if self._leased and not self._lease_valid():
            self._leased = False
            self._owned.clear()  # the coordinator may hand them to others now: stop, as Kafka's onPartitionsLost
        if self._lease_valid():
            for vp in sorted(self._owned):
                self._maybe_fetch(vp)
            if now_ms - self._last_commit_ms >= COMMIT_INTERVAL_MS:
                self._last_commit_ms = now_ms
                for vp, owned in sorted(self._owned.items()):
                    self.env.network.send(self.name, COORDINATOR, m.OffsetCommit(
                        self.env.request_id(), self.name, owned.assignment, vp, owned.position))
        self.env.scheduler.after(self.env.jitter(options.tick_interval_ms), lambda: self._loop(incarnation))

    def _lease_valid(self) -> bool:
        return self.env.now_ms < self._lease_until_ms

    def _maybe_fetch(self, vp: int) -> None:
        owned = self._owned[vp]
        if owned.fetch is not None and self.env.now_ms - owned.fetch[1] < self.env.options.request_timeout_ms:
            return
        state = next((s for s in self._metadata.vps if s.vp == vp), None) if self._metadata else None
        if state is None:
            return
        if owned.ask_leader:
            replica = state.leader
        else:
            replica = route_fetch(self.name, owned.position, owned.high_watermark, state.risr, state.leader,
                                  self.env.options.risr_config, f"v{vp}").replica_id
        request_id = self.env.request_id()
        owned.fetch = (request_id, self.env.now_ms)
        self.env.network.send(self.name, replica, m.VpFetch(request_id, vp, owned.position, FETCH_BYTES_MAX))

    def _on_fetch_result(self, message: m.VpFetchResult) -> None:
        for vp, owned in self._owned.items():
            if owned.fetch is not None and owned.fetch[0] == message.request_id:
                break
        else:
            return
        owned.fetch = None
        if not self._lease_valid():
            return  # records arriving after the lease may have expired are not processed
        if message.failure is not None:
            owned.ask_leader = True
            return
        owned.ask_leader = False
        owned.high_watermark = max(owned.high_watermark, message.high_watermark)
        for record in decode_batches(message.data):
            if record.offset < owned.position:
                continue
            assert record.offset == owned.position, (vp, record.offset, owned.position)
            partition, partition_offset = source_of(record)
            plain = strip_source(record)
            self.env.history.append(Consumed(self.name, f"vp{vp}", record.offset, plain.key, plain.value,
                                             partition, partition_offset))
            owned.position = record.offset + 1
            self.records_read += 1

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.HeartbeatAck):
            if message.incarnation == self.incarnation:
                self._lease_until_ms = max(self._lease_until_ms, message.sent_ms + self.env.options.lease_ttl_ms)
                self._leased = self._lease_valid()
        elif isinstance(message, m.Metadata):
            if message.request_id > self._metadata_request:
                self._metadata_request, self._metadata = message.request_id, message
        elif isinstance(message, m.VpFetchResult):
            self._on_fetch_result(message)
        elif isinstance(message, m.OffsetCommitResult):
            pass  # a refused commit means the VP moved on; the coordinator revokes or already did
        elif isinstance(message, m.Assign):
            current = self._owned.get(message.vp)
            if message.incarnation != self.incarnation:
                return  # meant for this member before it restarted: its offset may be long committed past
            if current is None or current.assignment < message.assignment:
                self._owned[message.vp] = _Owned(message.assignment, message.offset)
        elif isinstance(message, m.Revoke):
            owned = self._owned.get(message.vp)
            offset = -1
            if owned is not None and owned.assignment == message.assignment:
                del self._owned[message.vp]
                offset = owned.position if self._lease_valid() else -1
            self.env.network.send(self.name, COORDINATOR, m.Released(self.name, message.assignment, message.vp, offset))
