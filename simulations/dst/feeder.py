"""Feeders: the simulator's ``virtual.feeder.Feeder``, one per physical partition.

The decisions are the real ones (``feed_plan.served_vps``, ``feed_plan.resume_point``,
``feed_plan.choose_source``, ``feed_plan.plan_round``); the loop follows the actor: read
metadata, resume from the served VP leaders' last applied offsets when needed (after a
start, a failure, or a VP leader change), then rounds: fetch committed batches from an
in-sync follower (``from_follower``), split them, hand each served VP its chunks in order
(VPs in parallel; the last call or a report carries ``fed_through`` and the physical HW),
advance. Any failure resets to "resume". A feeder keeps nothing durable; it restarts empty.

Resharding (``Feeder.hold``): while the coordinator's metadata names a pending reshard, the
feeder goes on with rounds until its ``next_offset`` reaches ``fed_high`` (no VP holds a
record at or past it), then answers ``PauseAck`` with ``fed_through = next_offset`` and from
then on holds back the reshard's parents' records at or past it (``feed_plan.withhold``),
feeding every other VP on. Once the metadata shows the reshard settled (the new layout is
then in it, or it was abandoned) it resumes, so the children, or the parents, get what was
held back. Metadata answers older than the newest one applied are ignored (a real shell
compares etcd revisions).

Lanes: ``plan_round`` places each record in its lane's VPs; a record of a lane the metadata's
layout does not have yet (the lane opened since) ends the round there, and the feeder reads the
metadata again at once (after a backoff if the round moved nothing) and goes on from that
record, as ``virtual.partition_feed`` does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mafka4.virtual.feed_plan import choose_source, plan_round, resume_point, served_vps, withhold
from mafka4.virtual.vp_records import NOTHING_APPLIED
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

FETCH_BYTES_MAX = 2048
FEED_RECORDS_MAX = 8
METADATA_MAX_AGE_MS = 100
REPORT_INTERVAL_MS = 100
BACKOFF_MS = 30


@dataclass(slots=True)
class _Calls:
    """Requests in flight of one step: request id -> what it is for."""

    kind: str  # "resume", "fetch", "feed"
    # The metadata the step was planned with: its answers are read against it, as the actor
    # reads them against the metadata it held when it made the calls.
    metadata: m.Metadata | None = None
    pending: dict[int, int] = field(default_factory=dict)  # request id -> vp (or -1)
    answers: dict[int, int] = field(default_factory=dict)  # vp -> answer
    queues: dict[int, list[m.Feed]] = field(default_factory=dict)  # "feed": per VP, calls not yet sent
    failed: bool = False
    started_ms: int = 0
    next_offset: int = 0
    records: int = 0


class SimFeeder:
    def __init__(self, env: Env, partition: int):
        self.env = env
        self.partition = partition
        self.name = f"feed{partition}"
        self.up = False
        self.incarnation = 0
        self.records_fed = 0
        self.restarts = 0

    def boot(self) -> None:
        self.up = True
        self.incarnation += 1
        self._metadata: m.Metadata | None = None
        self._metadata_request = 0
        self._metadata_at_ms = -METADATA_MAX_AGE_MS
        self._next_offset: int | None = None
        self._fed_high = 0  # one past the highest record any served VP held at the last resume
        self._resumed_epochs: dict[int, int] = {}
        self._avoid: set[str] = set()
        self._last_report: dict[int, tuple[int, int, int]] = {}
        self._calls: _Calls | None = None
        self._backoff_until_ms = 0
        # (reshard id, fed through, parents) acknowledged: the parents get nothing at or past it
        self._paused: tuple[int, int, tuple[int, ...]] | None = None
        self.env.network.register(self.name, self.handle)
        self._loop(self.incarnation)

    @property
    def next_offset(self) -> int | None:
        """The next physical offset to feed (None: down, or about to resume)."""
        return self._next_offset if self.up else None

    @property
    def holding_back(self) -> bool:
        """True while it holds back a pending reshard's parents: it goes back for them (or their children) later."""
        return self.up and self._paused is not None

    def resumed_under(self, vps) -> bool:
        """True if this feeder last resumed with the leader epochs of ``vps`` (VP states):
        a VP failover since then means it still has to resume (and maybe refeed)."""
        targets = self._targets() if self.up and self._metadata is not None else {}
        return bool(targets) and all(self._resumed_epochs.get(vp) == vps[vp].leader_epoch for vp in targets)

    def crash(self) -> None:
        self.up = False
        self.restarts += 1
        self.env.network.unregister(self.name)

    def _loop(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        self._step()
        self.env.scheduler.after(self.env.jitter(self.env.options.tick_interval_ms * 2), lambda: self._loop(incarnation))

    # --- metadata ------------------------------------------------------------------------

    def _refresh(self) -> None:
        if self.env.now_ms - self._metadata_at_ms >= METADATA_MAX_AGE_MS:
            self._metadata_at_ms = self.env.now_ms
            self.env.network.send(self.name, COORDINATOR, m.MetadataRequest(self.env.request_id()))

    def _on_metadata(self, message: m.Metadata) -> None:
        if message.request_id < self._metadata_request:
            return
        self._metadata_request = message.request_id
        self._metadata = message
        self._avoid.clear()
        targets = self._targets()
        changed = {vp for vp, state in targets.items() if self._resumed_epochs.get(vp) != state.leader_epoch}
        if changed and self._next_offset is not None and self._calls is None:
            self._next_offset = None

    def _targets(self, metadata: m.Metadata | None = None) -> dict:
        """The VPs this feeder hands records or reports to (``served_vps``), with their states."""
        metadata = metadata or self._metadata
        served = served_vps(metadata.layout, dict(metadata.sealed_end_offsets))
        states = {state.vp: state for state in metadata.vps}
        return {vp: states[vp] for vp in served}

    # --- the loop ------------------------------------------------------------------------

    def _step(self) -> None:
        self._refresh()
        calls = self._calls
        if calls is not None:
            if self.env.now_ms - calls.started_ms >= self.env.options.request_timeout_ms:
                self._fail(f"{calls.kind} timed out")
            return
        metadata = self._metadata
        if metadata is None or self.env.now_ms < self._backoff_until_ms:
            return
        pending = metadata.reshard_pending
        if self._paused is not None and self._paused[0] != pending:
            # The reshard settled (stored or abandoned): resume, so that the children (or the
            # parents) get the records held back.
            self._paused, self._next_offset = None, None
        if self._next_offset is not None and any(
                self._resumed_epochs.get(vp) != state.leader_epoch for vp, state in self._targets().items()):
            self._next_offset = None  # a VP leader changed (or a VP was opened): resume first
        if self._next_offset is None:
            self._resume()
            return
        if pending is not None and self._paused is None and self._next_offset >= self._fed_high:
            # No VP holds a record at or past next_offset: a valid cut.
            self._paused = (pending, self._next_offset, metadata.reshard_parents)
        if self._paused is not None:  # (again each step: an answer may be lost)
            self.env.network.send(self.name, COORDINATOR,
                                  m.PauseAck(pending, self.partition, self.incarnation, self._paused[1]))
        self._fetch()

    def _fail(self, reason: str) -> None:
        self._calls = None
        self._next_offset = None
        self._metadata_at_ms = -METADATA_MAX_AGE_MS
        self._backoff_until_ms = self.env.now_ms + BACKOFF_MS

    def _resume(self) -> None:
        """Resume; unless holding back for a reshard, first fence out one a previous incarnation acknowledged.

        As the real feeder deletes its hold key and then reads the layout: the resume is
        planned with metadata read after the fence, so an epoch stored before it is in there.
        """
        if self._paused is not None:
            self._ask_positions()
            return
        request_id = self.env.request_id()
        self._calls = _Calls("fence", started_ms=self.env.now_ms)
        self._calls.pending[request_id] = -1
        self.env.network.send(self.name, COORDINATOR,
                              m.MetadataRequest(request_id, fence_partition=self.partition, incarnation=self.incarnation))

    def _ask_positions(self) -> None:
        calls = _Calls("resume", metadata=self._metadata, started_ms=self.env.now_ms)
        for vp, state in sorted(self._targets().items()):
            request_id = self.env.request_id()
            calls.pending[request_id] = vp
            self.env.network.send(self.name, state.leader, m.FeedPosition(request_id, vp, state.leader_epoch, self.partition))
        self._calls = calls
        self._positions_answered()

    def _positions_answered(self) -> None:
        calls = self._calls
        if calls.pending:
            return
        self._calls = None
        point = resume_point(calls.metadata.layout, self.partition, calls.answers)
        self._next_offset, self._fed_high = point.next_offset, point.fed_high
        self._resumed_epochs = {vp: state.leader_epoch for vp, state in self._targets(calls.metadata).items()}
        self._last_report.clear()

    def _fetch(self) -> None:
        state = self._metadata.partitions[self.partition]
        source = choose_source(state, self._avoid)
        request_id = self.env.request_id()
        calls = _Calls("fetch", metadata=self._metadata, started_ms=self.env.now_ms)
        calls.pending[request_id] = -1
        calls.answers[-1] = 1 if source == state.leader else 0
        self._calls = calls
        self._source = source
        self.env.network.send(self.name, source, m.Fetch(request_id, self.partition, self._next_offset, FETCH_BYTES_MAX, True))

    def _on_fetch_result(self, message: m.FetchResult) -> None:
        from_leader = self._calls.answers[-1] == 1
        if message.failure is not None:
            if from_leader:
                self._fail(f"fetch from the leader failed: {message.failure.error}")
            else:
                self._avoid.add(self._source)
                self._calls = None
            return
        metadata = self._calls.metadata
        planned = plan_round(message.data, self.partition, metadata.layout, self._next_offset, FEED_RECORDS_MAX)
        if planned.unknown_lane:  # a record of a lane opened after the layout read: read it again, then go on
            self._metadata_at_ms = -METADATA_MAX_AGE_MS
            self.env.count("feeder_unknown_lane_rounds")
            if not planned.records:  # no progress: back off, as ``PartitionFeed`` does
                self._backoff_until_ms = self.env.now_ms + BACKOFF_MS
        calls = _Calls("feed", metadata=metadata, started_ms=self.env.now_ms, next_offset=planned.next_offset,
                       records=planned.records)
        all_chunks, held, cut = planned.chunks, (), planned.next_offset
        if self._paused is not None:
            _, cut, held = self._paused
            all_chunks = withhold(all_chunks, held, cut)
        for vp, state in sorted(self._targets(metadata).items()):
            chunks = all_chunks.get(vp, ())
            if vp in held:  # a held parent hears of nothing past the offered cut
                report = (min(planned.next_offset, cut), min(message.high_watermark, cut))
            else:
                report = (planned.next_offset, message.high_watermark)
            previous = self._last_report.get(vp)
            if not chunks and previous is not None and previous[:2] == report \
                    and self.env.now_ms - previous[2] < REPORT_INTERVAL_MS:
                continue
            queue = []
            for index, chunk in enumerate(chunks or ((),)):
                last = index == max(len(chunks), 1) - 1
                queue.append(m.Feed(0, vp, state.leader_epoch, self.partition, chunk,
                                    report[0] if last else self._next_offset, report[1]))
            calls.queues[vp] = queue
            self._last_report[vp] = (*report, self.env.now_ms)
        self._calls = calls
        for vp in sorted(calls.queues):
            self._send_feed(vp)
        self._feed_answered()

    def _send_feed(self, vp: int) -> None:
        calls = self._calls
        feed = calls.queues[vp].pop(0)
        request_id = self.env.request_id()
        calls.pending[request_id] = vp
        leader = next(state.leader for state in calls.metadata.vps if state.vp == vp)
        self.env.network.send(self.name, leader, dataclasses.replace(feed, request_id=request_id))

    def _feed_answered(self) -> None:
        calls = self._calls
        if calls.pending:
            return
        self._calls = None
        if calls.failed:
            self._fail("a feed call failed")
            return
        self._next_offset = calls.next_offset
        self.records_fed += calls.records

    # --- answers -------------------------------------------------------------------------

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.Metadata):
            calls = self._calls
            if calls is not None and calls.kind == "fence" and message.request_id in calls.pending:
                self._calls = None
                self._metadata_request = max(self._metadata_request, message.request_id)
                self._metadata = message  # read after the fence, whatever answers came before it
                self._ask_positions()
            else:
                self._on_metadata(message)
            return
        calls = self._calls
        if calls is None or message.request_id not in calls.pending:
            return  # late or duplicated
        vp = calls.pending.pop(message.request_id)
        if isinstance(message, m.FetchResult):
            self._on_fetch_result(message)
        elif isinstance(message, m.FeedPositionResult):
            if message.failure is not None:
                self._fail(f"feed position of vp{vp} failed: {message.failure.error}")
                return
            assert message.last_applied >= NOTHING_APPLIED
            calls.answers[vp] = message.last_applied
            self._positions_answered()
        elif isinstance(message, m.FeedAck):
            if message.failure is not None:
                calls.failed = True
            elif calls.queues[vp] and not calls.failed:
                self._send_feed(vp)
            self._feed_answered()
