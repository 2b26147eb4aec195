"""``PartitionFeed``: a read node's one fetch stream of one physical partition, split into its VP leaders.

A read node runs one feed per (topic, physical partition ``p``) for which it leads a VP. The
stream fetches committed batches of ``p`` (below the HW) from an in-sync follower when there
is one (``feed_plan.choose_source``, Kafka's KIP-392: never on the leader's write path), splits
them by the topic's layout (``feed_plan.plan_round``) and appends each VP's records to the VP
leaders this node hosts, in process (``HostedVp.feed``): no remote call per VP, no process per
VP. Records of VPs led elsewhere are dropped here: their node's own stream feeds them. The
decisions are ``feed_plan.py``'s (pure); this is their shell.

* **Served VPs.** The VPs this node leads (by its own cores: a deposed leader that does not
  know it yet only fills a log that will be truncated) among the active ones and the closed
  ones not yet sealed (``feed_plan.served_vps``).
* **Resume** (``feed_plan.resume_point``): after a start, a failed round, and whenever a served
  VP's leader epoch changed or a VP started being served below where the stream stands, the
  stream goes back to the smallest offset some served VP may lack; every VP drops what its
  ``FeedProgress`` already holds, so nothing is applied twice and nothing skipped. A VP that
  starts being served at or past the stream's position (a child of a split) holds nothing
  yet and needs no resume.
* **Rounds** hand each served VP its records in physical offset order and report
  ``fed_through`` (the next offset) and the physical HW (capped at the closing cut for a
  closed VP) to the VPs that got records, to the closed ones still being sealed, and to the
  others within ``report_interval_ms`` of a change (for the RISR's feed-lag check). A VP hears
  nothing while nothing changes for it, and a round that fetched nothing, once every served VP
  heard the positions, walks no VP: an idle partition costs its stream's long poll, not a
  visit of each of its VPs (the RISR reads a partition whose last report reached its HW as idle).

**A lane the layout lacks.** A round that reaches a record of a lane the view's layout does not
have hands over nothing from it on (``feed_plan.plan_round``): the view is read again before the
next round, which starts at that record, after a backoff if the round moved nothing (the lane's
epoch is stored before its first record is produced, so one read finds it; a producer's bogus
lane would stall the partition here, counted in ``unknown_lane_rounds``).

**Holds for a reshard** (``control.resharding``). The node leading a VP that a split or merge
closes (a parent) is asked to ``hold`` it: once no served VP holds a record at or past the
stream's next offset (``ResumePoint.fed_high``), the stream withholds from the parents every
record at or past that offset (``feed_plan.withhold``) and feeds every other VP on; it records
the offset in its hold key ``topics/<t>/holds/<p>/<node>`` and offers it as the cut. A split
therefore pauses only the consumers of the VP it splits. On ``release`` with the stored epoch
the stream adopts it and goes back to the offered cut: the children get their records from
there, the other VPs drop the repeats, and a parent gets the records between its offered cut
and the epoch's (a merge's cut is the larger of two nodes' offers). Without it (the reshard
failed, or ``hold_ms_max`` passed) the stream deletes its hold key if still at its revision
and resumes under the layout it then reads: either the epoch was stored first (the children
are fed from the cut) or it can never be stored (the parents get what was withheld). A
stream that resumes because it starts leading a VP that led elsewhere (a failover) first
deletes the partition's hold keys: a reshard holding that VP's old node can then no longer
store its epoch, so no record at or past a stored cut is ever handed to a parent.

**Retention and loss.** The node records where each stream stands
(``keys.feed_position``) so that physical retention keeps what it has not fed. If the source
no longer holds ``next_offset`` anyway (the hold's bound passed), the stream records the lost
range in etcd (``keys.read_loss``), appends a loss marker (``vp_records.lost_marker``) to every
served VP that lacked records there, so its consumers get ``RecordsLost`` in order, and goes
on from the log start. Nothing is skipped silently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from mafka4.clocks import wall_ms
from mafka4.errors import NotLeader, OffsetOutOfRange, RequestTimedOut, ReshardConflict, StaleEpoch
from mafka4.limits.servers import FeederConfig
from mafka4.log.read_loss import LostRange
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.transport.remote_errors import unwrap
from mafka4.virtual.feed_lag import FeedLag
from mafka4.virtual.feed_plan import Chunk, choose_source, plan_round, resume_point, served_vps, withhold
from mafka4.virtual.hosted_vp import HostedVp
from mafka4.virtual.layout import TRUNK, SplitEpoch
from mafka4.virtual.node_loop import NodeLoop
from mafka4.virtual.topic_view import TopicView
from mafka4.virtual.vp_records import lost_marker
from mafka4.virtual.vp_state import VirtualPartitionState

logger = logging.getLogger(__name__)
# A stream stopped at a lane no epoch opened says so once per this many rounds (a few a minute).
UNKNOWN_LANE_WARN_EVERY = 100


@dataclass(slots=True)
class _Hold:
    """One reshard's request that the stream hold back the parents' records (see the module docstring)."""

    token: str
    vps: frozenset[int]  # the parents: the VPs the reshard closes
    reached: asyncio.Event
    released: asyncio.Event
    # The offset offered as the cut; from the moment it is set no record at or past it goes to a parent.
    withhold_from: int | None = None
    mod_revision: int = 0  # of the hold key the stream wrote
    reaching: asyncio.Task | None = None  # writing the hold key
    deadline: float = 0.0  # time.monotonic() after which the stream leaves the hold by itself
    # The epoch the reshard stored (and the states of the VPs it opened), given with the release.
    stored: tuple[SplitEpoch, tuple[VirtualPartitionState, ...]] | None = None


class PartitionFeed(NodeLoop):
    """The stream of one (topic, partition) on one read node; see the module docstring."""

    def __init__(self, view: TopicView, partition: int, node_id: str, config: FeederConfig,
                 leaders: Callable[[], Mapping[int, HostedVp]], physical: Callable[[str], object],
                 open_store: Callable[[], MetadataStore], record_loss: Callable[[LostRange], None],
                 on_fed: Callable[[str, int], None]):
        """``leaders()``: the node's VP leaders of the topic, a new mapping whenever a role changes
        (the stream compares it by identity); ``physical(replica_id)``: a physical replica's handle."""
        super().__init__()
        self.view, self.partition, self.node_id, self.config = view, partition, node_id, config
        self._leaders, self._physical, self._open_store = leaders, physical, open_store
        self._record_loss, self._on_fed = record_loss, on_fed
        self.next_offset: int | None = None  # None: resume before the next round
        # The smallest physical offset this stream may still need (for physical retention); None
        # while it serves no VP.
        self._needed: int | None = None
        self._fed_high = 0  # one past the highest record any served VP held at the last resume
        self._resumed_epochs: dict[int, int] = {}  # served VP -> the leader epoch it was resumed with
        self._served_cache: dict[int, HostedVp] = {}
        self._served_for: tuple[int, int] | None = None  # (view generation, id of the node's leaders dict)
        self._noticed: dict[int, HostedVp] | None = None  # the served dict last looked at for changes
        # The lanes of the layout the stream last resumed or planned a round under: it met no record of
        # any other lane below ``next_offset`` (a round stops at one, ``feed_plan``).
        self._lanes_fed: frozenset[str] = frozenset()
        self._hold: _Hold | None = None
        self._avoid: set[str] = set()  # physical replicas that failed since the last metadata read
        self._avoid_since = float("-inf")  # the view's read_at when ``_avoid`` was last cleared
        self._last_report: dict[int, tuple[int, int, float]] = {}  # VP -> (fed_through, HW, when)
        # (served VPs, positions) that every served VP was last told, if all were: the next round
        # with nothing new to hand over skips them (``_round``).
        self._settled: tuple[Mapping[int, HostedVp], tuple[int, int, int | None]] | None = None
        self._round_positions: tuple[int, int] | None = None  # (fed through, physical HW) after the last round
        self._round_ended_at = time.monotonic()
        self._lag = FeedLag()  # behind the partition's HW, in messages and seconds (``describe``, the node's metrics)
        # Fault injection (``ReadNode.set_feed_fault``): a paused stream fetches and feeds nothing,
        # as a read node that stopped would; its position stays where it was.
        self.paused = False
        # resumed_at: the offset the stream last resumed at (None until it resumed with something to feed).
        self.stats = {"rounds": 0, "records_fed": 0, "resumes": 0, "resumed_at": None, "errors": 0,
                      "last_error": None, "source": None, "lost_ranges": 0,
                      "bad_key_hash_columns": 0, "unknown_lane_rounds": 0}

    @property
    def topic(self) -> str:
        return self.view.topic

    def close(self) -> None:
        super().close()
        if self._hold is not None:
            self._hold.released.set()

    def position_needed(self) -> int | None:
        """The physical offset from which this stream may still need the partition's data."""
        return self._needed

    def describe(self) -> dict:
        """Where the stream stands; ``high_watermark``: the partition's HW in the last fetch answer, and
        the lag behind it (``virtual.feed_lag``: None while the stream has no position)."""
        return {"partition": self.partition, "next_offset": self.next_offset, "fed_high": self._fed_high,
                "high_watermark": self._lag.high_watermark, "lag_messages": self._lag.lag_messages(self.next_offset),
                "lag_ms": self._lag.lag_ms(self.next_offset, wall_ms()), "paused": self.paused,
                "held": self._hold is not None and self._hold.reached.is_set(),
                "served": sorted(self._resumed_epochs), **self.stats}

    # --- holds (called by the read node for a reshard) ----------------------------------

    async def hold(self, token: str, vps: frozenset[int], wait_ms_max: int) -> tuple[int, int]:
        """Hold back the records of ``vps`` from where the stream stands; ``(fed_through, hold key revision)``.

        ``RequestTimedOut`` if the stream did not get there within ``wait_ms_max``.
        """
        if self._hold is not None and self._hold.token != token:
            raise ReshardConflict(
                f"the feed of {self.topic}-{self.partition} on {self.node_id} is held by another reshard; retry once "
                f"it finished (at most hold_ms_max={self.config.hold_ms_max})")
        if self._hold is None:
            self._hold = _Hold(token, vps, asyncio.Event(), asyncio.Event())
        hold = self._hold
        self._offer_cut(hold)  # at once if the stream stands where it may cut: no round to wait for
        self._kick.set()
        try:
            if hold.withhold_from is not None:
                await asyncio.wait_for(self._reach_hold(hold), wait_ms_max / 1000)
            await asyncio.wait_for(hold.reached.wait(), wait_ms_max / 1000)
        except asyncio.TimeoutError:
            if not hold.reached.is_set():
                if self._hold is hold and hold.withhold_from is None:
                    self._hold = None
                since_ms = round((time.monotonic() - self._round_ended_at) * 1000)
                raise RequestTimedOut(
                    f"the feed of {self.topic}-{self.partition} on {self.node_id} did not reach a cut within "
                    f"{wait_ms_max} ms (its last round ended {since_ms} ms ago; last error: "
                    f"{self.stats['last_error']}); retry the reshard") from None
        return hold.withhold_from, hold.mod_revision

    def release(self, token: str, stored: tuple[SplitEpoch, tuple[VirtualPartitionState, ...]] | None) -> None:
        """End the hold of reshard ``token`` (if this stream has it); with the stored epoch, adopt it."""
        hold = self._hold
        if hold is None or hold.token != token:
            return
        hold.stored = stored
        hold.released.set()
        if hold.withhold_from is None:
            self._hold = None
        self._kick.set()

    def _offer_cut(self, hold: _Hold) -> None:
        """Start withholding at ``next_offset`` if no served VP holds a record at or past it.

        Synchronous on purpose: between two awaits no round hands anything over, so from this
        instant on no parent gets a record at or past the offered cut.
        """
        if hold.withhold_from is None and self.next_offset is not None and self.next_offset >= self._fed_high:
            hold.withhold_from = self.next_offset

    async def _reach_hold(self, hold: _Hold) -> None:
        """Record the offered cut in the hold key (once, whoever asks first: the loop or ``hold``)."""
        if hold.reaching is None:
            hold.reaching = asyncio.get_running_loop().create_task(self._write_hold_key(hold))
        await asyncio.shield(hold.reaching)

    async def _write_hold_key(self, hold: _Hold) -> None:
        value = {"token": hold.token, "fed_through": hold.withhold_from}
        key = keys.feeder_hold(self.view.cluster, self.topic, self.partition, self.node_id)
        hold.mod_revision = await self._etcd(lambda store: store.put(key, value))
        hold.deadline = time.monotonic() + self.config.hold_ms_max / 1000
        hold.reached.set()
        logger.info("%s-%d on %s holds back VPs %s from %d for reshard %s", self.topic, self.partition,
                    self.node_id, sorted(hold.vps), hold.withhold_from, hold.token)

    async def _leave_hold(self, hold: _Hold) -> None:
        if not hold.released.is_set():
            logger.warning("%s-%d on %s: reshard %s did not release it within hold_ms_max; going on", self.topic,
                           self.partition, self.node_id, hold.token)
        view = self.view
        if hold.stored is not None and view.layout is not None and hold.stored[0].epoch <= len(view.layout.epochs):
            # The epoch is stored (its transaction also deleted the hold keys): take it and go back to
            # the offered cut; the children get their records from there, the other VPs drop repeats.
            view.adopt(*hold.stored)
            self._fed_high = max(self._fed_high, self.next_offset or 0)
            if self.next_offset is not None:
                self.next_offset = min(self.next_offset, hold.withhold_from)
            self._hold = None
            for parent in hold.vps:  # a parent fed up to its cut is complete now: its children wait for that
                self._on_fed(self.topic, parent)
            return
        # Fenced: once this delete is through, the reshard's transaction either already stored its
        # epoch (the resume reads it) or can no longer store it (the resume gives the parents what
        # was withheld). Raises while etcd is away: the hold stays.
        key = keys.feeder_hold(self.view.cluster, self.topic, self.partition, self.node_id)
        await self._etcd(lambda store: store.delete_if(key, hold.mod_revision))
        self._hold, self.next_offset = None, None
        await view.refresh()

    # --- the loop -----------------------------------------------------------------------

    async def _run(self) -> None:
        backoff_s = self.config.retry_backoff_ms / 1000
        while not self._closed:
            served: Mapping[int, HostedVp] = {}
            self._kick.clear()  # from here on, a hold, a release or a role change ends the round's wait
            try:
                if self.paused:
                    await self._idle_until_needed()
                    continue
                await self.view.refresh_if_old()
                served = self._served()
                if not served:
                    self.next_offset, self._resumed_epochs, self._needed = None, {}, None
                    await self._idle_until_needed()
                    continue
                self._notice_changes(served)
                if self.next_offset is None:
                    await self._resume(served)
                hold = self._hold
                if hold is not None and hold.withhold_from is None:
                    self._offer_cut(hold)
                if hold is not None and hold.withhold_from is not None and not hold.reached.is_set():
                    await self._reach_hold(hold)
                if hold is not None and hold.reached.is_set() and (
                        hold.released.is_set() or time.monotonic() >= hold.deadline):
                    await self._leave_hold(hold)
                    continue
                await self._round(served)
            except asyncio.CancelledError:
                raise
            except Exception as raised:  # every failure leads to the same safe place: resume
                error = unwrap(raised)
                self.stats["errors"] += 1
                self.stats["last_error"] = f"{type(error).__name__}: {error}"
                if not isinstance(error, (NotLeader, StaleEpoch)):
                    logger.info("%s-%d on %s: %s; resuming", self.topic, self.partition, self.node_id,
                                self.stats["last_error"])
                if isinstance(error, OffsetOutOfRange) and self.next_offset is not None:
                    try:
                        await self._skip_lost(served)
                        continue
                    except Exception as failed:  # the log start was not learned: retry the whole step
                        logger.warning("%s-%d: could not skip deleted offsets yet: %s", self.topic, self.partition,
                                       unwrap(failed))
                self.next_offset = None
                self.view.invalidate()
                await asyncio.sleep(backoff_s)

    async def _idle_until_needed(self) -> None:
        """Nothing to feed here: wait for a role change, a hold, or the next metadata read."""
        try:
            await asyncio.wait_for(self._kick.wait(), self.config.metadata_max_age_ms / 1000)
        except asyncio.TimeoutError:
            pass

    def _served(self) -> dict[int, HostedVp]:
        """The VPs this stream feeds; the same dict until the layout or the node's roles change (then a new one)."""
        view, leaders = self.view, self._leaders()
        if self._served_for != (view.generation, id(leaders)):
            self._served_cache = {vp: leaders[vp] for vp in served_vps(view.layout, view.sealed) if vp in leaders}
            self._served_for = (view.generation, id(leaders))
        return self._served_cache

    def _notice_changes(self, served: Mapping[int, HostedVp]) -> None:
        """Resume when a served VP's leader epoch changed or a VP joined below the stream's position."""
        if self.next_offset is None or served is self._noticed:
            return
        self._noticed = served
        layout = self.view.layout
        for vp, hosted in served.items():
            # A VP opened at or past where the stream stands (a child of a reshard) holds nothing yet,
            # nor does one of a lane the stream had not heard of: it met no record of that lane.
            if vp not in self._resumed_epochs and (layout.source_bounds(vp, self.partition)[0] >= self.next_offset
                                                   or layout.lane_of(vp) not in self._lanes_fed | {TRUNK}):
                self._resumed_epochs[vp] = hosted.core.leader_epoch
        changed = {vp for vp, hosted in served.items() if self._resumed_epochs.get(vp) != hosted.core.leader_epoch}
        gone = set(self._resumed_epochs) - set(served)
        for vp in gone:
            del self._resumed_epochs[vp]
        if changed:
            logger.info("%s-%d on %s: served VPs changed %s; resuming", self.topic, self.partition, self.node_id,
                        sorted(changed))
            self.next_offset = None

    async def _resume(self, served: Mapping[int, HostedVp]) -> None:
        # A VP past leader epoch 0 may have been led by another node, whose stream a reshard may
        # hold: fence that reshard out, then read the layout again so that an epoch stored before
        # the fence is in it. A VP still at epoch 0 was led here since it was created.
        moved = [vp for vp, hosted in served.items()
                 if hosted.core.leader_epoch > 0 and self._resumed_epochs.get(vp) != hosted.core.leader_epoch]
        if self._hold is None and moved:
            prefix = keys.feeder_holds_prefix(self.view.cluster, self.topic, self.partition)
            await self._etcd(lambda store: store.delete_prefix(prefix))
            await self.view.refresh()
            served = self._served()
            if not served:
                return
        epochs = {vp: hosted.core.leader_epoch for vp, hosted in served.items()}
        positions = {vp: hosted.core.last_applied(epochs[vp], self.partition) for vp, hosted in served.items()}
        self._lanes_fed = frozenset(self.view.layout.current.lane_names)
        resumed = resume_point(self.view.layout, self.partition, positions)
        self._resumed_epochs = epochs
        self._last_report.clear()
        self._settled = None
        self.stats["resumes"] += 1
        if resumed is None:  # every served VP is closed and holds all its records of this partition
            self.next_offset, self._fed_high = None, 0
            await self._idle_until_needed()
            return
        self.next_offset, self._fed_high = resumed.next_offset, resumed.fed_high
        self.stats["resumed_at"] = resumed.next_offset
        self._needed = self.next_offset
        logger.info("%s-%d on %s resumes at %d (VP positions %s)", self.topic, self.partition, self.node_id,
                    self.next_offset, positions)

    async def _round(self, served: Mapping[int, HostedVp]) -> None:
        config, view = self.config, self.view
        if view.read_at != self._avoid_since:  # a metadata read: try the failed replicas again
            self._avoid.clear()
            self._avoid_since = view.read_at
        source_id = choose_source(view.partitions[self.partition], self._avoid)
        self.stats["source"] = source_id
        handle = self._physical(source_id)
        fetch_from = self.next_offset
        fetch = asyncio.ensure_future(asyncio.wait_for(
            handle.fetch.remote(fetch_from, config.fetch_bytes_max, config.fetch_wait_ms_max, True),
            config.call_timeout_ms / 1000))
        kicked = asyncio.ensure_future(self._kick.wait())
        try:
            await asyncio.wait({fetch, kicked}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            kicked.cancel()
        if not fetch.done():
            fetch.cancel()  # a hold, a release or a role change: look at it now, fetch again after
            return
        try:
            result = fetch.result()
        except Exception as error:
            if source_id == view.partitions[self.partition].leader or isinstance(unwrap(error), OffsetOutOfRange):
                raise
            # A follower that fails (dead, deposed, behind our offset): the next round reads
            # elsewhere, no resume needed; it is tried again after the next metadata read.
            self._avoid.add(source_id)
            logger.info("%s-%d on %s: source %s failed (%s); avoiding it", self.topic, self.partition, self.node_id,
                        source_id, type(unwrap(error)).__name__)
            return
        self._lag.observed(result.high_watermark, wall_ms())
        if self.next_offset != fetch_from or self._served_changed(served):
            return  # roles or the position changed while the fetch was out: look again before handing anything over
        self._lanes_fed |= frozenset(view.layout.current.lane_names)
        planned = plan_round(result.data, self.partition, view.layout, self.next_offset, config.feed_records_max, served)
        for problem in planned.bad_columns:  # split by their keys all the same: reported, not retried
            logger.warning("%s-%d on %s: %s", self.topic, self.partition, self.node_id, problem)
        self.stats["bad_key_hash_columns"] += len(planned.bad_columns)
        chunks, hold = planned.chunks, self._hold
        held_from = hold.withhold_from if hold is not None else None
        if held_from is not None:
            chunks = withhold(chunks, hold.vps, held_from)
        now_ms, now_s = wall_ms(), time.monotonic()
        positions = (planned.next_offset, result.high_watermark, held_from)
        before, self._round_positions = self._round_positions, positions[:2]
        # An idle round (nothing fetched, nothing moved) after every served VP heard the current
        # positions walks no VP: an idle VP costs nothing, however many the node serves.
        settled_for = self._settled
        if chunks or settled_for is None or settled_for[0] is not served or settled_for[1] != positions:
            settled = True
            for vp, hosted in served.items():
                vp_chunks = chunks.get(vp, ())
                self._feed(vp, hosted, vp_chunks, now_ms)
                fed_through, high_watermark = planned.next_offset, result.high_watermark
                if held_from is not None and vp in hold.vps:
                    fed_through, high_watermark = min(fed_through, held_from), min(high_watermark, held_from)
                settled &= self._report(vp, hosted, bool(vp_chunks), fed_through, high_watermark, now_ms, now_s,
                                        before)
            self._settled = (served, positions) if settled else None
        self.next_offset = planned.next_offset
        self._lag.fed(self.next_offset)
        self._needed = self.next_offset if self._hold is None else min(self.next_offset, self._needed or 0)
        self._round_ended_at = now_s
        self.stats["rounds"] += 1
        self.stats["records_fed"] += planned.records
        if planned.unknown_lane:
            # A record of a lane the layout read lacks: its epoch was stored before the record was
            # produced, so the next round starts at it under the layout read again (``feed_plan``).
            self.stats["unknown_lane_rounds"] += 1
            self.view.invalidate()
            if not planned.records:  # no progress: not in etcd yet either (or a producer's bogus lane)
                if self.stats["unknown_lane_rounds"] % UNKNOWN_LANE_WARN_EVERY == 0:
                    logger.warning("%s-%d on %s: the record at offset %d names a lane the topic's layout does not have "
                                   "after %d reads: feeding this partition waits for it (a client that wrote a lane "
                                   "it never opened: open it with 'mafka4 topic lane %s LANE')", self.topic,
                                   self.partition, self.node_id, planned.next_offset,
                                   self.stats["unknown_lane_rounds"], self.topic)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)

    def _served_changed(self, served: Mapping[int, HostedVp]) -> bool:
        return self._served() is not served

    def _feed(self, vp: int, hosted: HostedVp, chunks: tuple[Chunk, ...], now_ms: int) -> None:
        epoch = self._resumed_epochs[vp]
        for chunk in chunks:
            hosted.feed(epoch, chunk, now_ms)

    def _report(self, vp: int, hosted: HostedVp, got_records: bool, fed_through: int, high_watermark: int,
                now_ms: int, now_s: float, before: tuple[int, int] | None) -> bool:
        """Tell a served VP how far the stream fed it; quiet active VPs hear a change within
        ``report_interval_ms``, and nothing while nothing changes (the RISR reads a partition whose
        last report reached its HW as idle, not lagging). ``before``: where the stream stood after
        the previous round. True if the VP knows the current values."""
        layout = self.view.layout
        closing = layout.closing_epoch(vp)
        if closing is not None:  # nothing past the closing cut is meant for a closed VP
            high_watermark = min(high_watermark, closing.cut[self.partition])
        previous = self._last_report.get(vp)
        if not got_records and previous is not None and previous[:2] == (fed_through, high_watermark):
            return True
        quiet = previous is not None and now_s - previous[2] < self.config.report_interval_ms / 1000
        # A closed parent still being sealed hears of every change at once: its children wait for it.
        if not got_records and quiet and closing is None:
            return False
        epoch = self._resumed_epochs[vp]
        if not quiet and previous is not None and previous[:2] == before and previous[0] >= previous[1]:
            # Told where the stream stood until this round, and caught up there, the VP was idle,
            # not stalled, until this round's fetch: say so as of now before the news, or its RISR
            # would date its last catch-up to that old report and call the stream lagging at once
            # (``RisrState.feed_lagging_partitions``).
            hosted.core.fed(epoch, self.partition, previous[0], previous[1], now_ms)
        hosted.core.fed(epoch, self.partition, fed_through, high_watermark, now_ms)
        self._last_report[vp] = (fed_through, high_watermark, now_s)
        if closing is not None:
            self._on_fed(self.topic, vp)
        return True

    async def _skip_lost(self, served: Mapping[int, HostedVp]) -> None:
        """The source no longer holds ``next_offset`` (retention passed its bound): record the loss,
        mark it in every served VP that lacked records there, go on at the log start."""
        state = self.view.partitions[self.partition]
        log_start, _ = await asyncio.wait_for(self._physical(state.leader).list_offsets.remote(),
                                              self.config.call_timeout_ms / 1000)
        if log_start <= self.next_offset:
            self.next_offset = None  # not a loss after all (e.g. a lagging follower answered): resume
            return
        lost = LostRange(self.partition, self.next_offset, log_start)
        logger.error("%s-%d on %s: physical offsets %d..%d were deleted by retention before this node fed them; "
                     "recording the loss", self.topic, self.partition, self.node_id, lost.first_offset,
                     lost.end_offset - 1)
        self._record_loss(lost)
        layout, now_ms = self.view.layout, wall_ms()
        for vp, hosted in served.items():
            first, end = layout.source_bounds(vp, self.partition)
            epoch = self._resumed_epochs[vp]
            lacks_from = max(hosted.core.last_applied(epoch, self.partition) + 1, first, lost.first_offset)
            lacks_to = log_start if end is None else min(end, log_start)
            if lacks_from < lacks_to:
                hosted.feed(epoch, (lost_marker(self.partition, lacks_from, lacks_to, now_ms),), now_ms)
        self.stats["lost_ranges"] += 1
        self.next_offset = log_start
        self._fed_high = max(self._fed_high, log_start)

    # --- etcd ---------------------------------------------------------------------------

    async def _etcd(self, call: Callable[[MetadataStore], object]):
        store = self._open_store()
        return await asyncio.get_running_loop().run_in_executor(None, call, store)

