"""``Feeder``: the Ray actor that splits one physical partition into the topic's virtual partitions.

One feeder per physical partition, on a read node: never in the physical leader's process,
so splitting (the only per-message work of the read path) costs the write path nothing but
one more fetch, and that fetch goes to an in-sync follower when there is one (``fetch(...,
from_follower=True)``, Kafka's KIP-392). The decisions live in ``feeding.py`` (pure):

* a round fetches committed batches (below the replica's high watermark) from
  ``next_offset``, splits them by the current layout (``feeding.plan_round``, i.e.
  ``split.split_batch``) and hands each VP leader its records with ``VirtualPartition.feed``
  (VPs in parallel, each VP's calls in order); the last call of a round, or a report-only
  call, carries ``fed_through`` (the next offset) and the physical HW to every VP;
* a round that fails anywhere (a fetch, a VP call) is not retried as such: the feeder backs
  off, re-reads the metadata and resumes (``feeding.resume_point``) from the smallest
  last-applied offset the VP leaders report, so it skips nothing and the VPs' ``FeedProgress``
  drops what they already hold. The same happens after a restart and whenever a VP's leader
  epoch changed (a VP failover), because a new leader may lack the old one's last records.

The feeder keeps no state of its own: killing it and starting it again (``launcher``) loses
and duplicates nothing. While it runs it holds ``keys.feeder_liveness`` under a lease of its
own (``FeederConfig.lease_ttl_s``); the controller restarts a feeder whose key is gone and
whose actor does not answer a ping. Metadata (partition leader and ISR, VP leaders, layout) is re-read
every ``metadata_max_age_ms``. Two feeders of one partition at once would still be safe
(both feed every VP in order, and each VP drops what it holds), only wasteful.

Splits and merges (``virtual.resharding``). A feeder serves the active VPs and the closed
ones not yet sealed (``feeding.served_vps``). A reshard asks every feeder of the topic to
``hold`` the VPs it splits or merges (the parents): at a round's end where no VP holds a
record at or past ``next_offset`` (``feeding.ResumePoint.fed_high``), the feeder writes the
hold key ``topics/<t>/holds/<p>`` and answers ``next_offset``, which the reshard uses as the
cut. From then on it withholds from the parents every record at or past that offset
(``feeding.withhold``) and feeds every other VP as before: a split pauses only the consumers
of the VPs it splits. The new epoch is stored only if every hold key is still at the
revision its feeder wrote (the same transaction deletes them).

Leaving a hold. On ``release`` with the stored epoch, the feeder takes the epoch and goes
back to the cut: the children get their records from there, and the other VPs drop the
ones they already hold. Otherwise (a release without it, or ``hold_ms_max`` passed) it
deletes its hold key if still at that revision and resumes from the VPs' positions under
the layout it then reads: either the epoch was stored first (and the children are fed from
the cut) or it can never be stored (and the parents get what was withheld). So no record at
or past a stored cut is ever handed to a parent. A feeder that resumes while not held
deletes its partition's hold key, which fences out a reshard that held a previous feeder of
the partition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from dataclasses import dataclass

import ray

from mafka4.client.errors import unwrap
from mafka4.coordinator import keys
from mafka4.coordinator.store import MetadataStore
from mafka4.coordinator.topics import PartitionState
from mafka4.coordinator.topics import config_from_json
from mafka4.errors import CoordinatorUnavailable, OffsetOutOfRange, RequestTimedOut, ReshardConflict, UnknownTopic
from mafka4.limits import FeederConfig
from mafka4.physical.actor import replica_actor_name
from mafka4.virtual.actor import NAMESPACE, vp_actor_name
from mafka4.virtual.feeding import Chunk, choose_source, plan_round, resume_point, served_vps, withhold
from mafka4.virtual.metadata import VirtualPartitionState, VirtualStore
from mafka4.virtual.reshard import SplitEpoch, TopicLayout

logger = logging.getLogger(__name__)


def feeder_actor_name(cluster: str, topic: str, partition: int) -> str:
    return f"{cluster}/{topic}/feeder/{partition}"


@dataclass(frozen=True, slots=True)
class FeederSpec:
    cluster: str
    topic: str
    partition: int
    node_id: str  # the read node it runs on
    etcd_endpoint: str
    config: FeederConfig


@dataclass(frozen=True, slots=True)
class _Metadata:
    partition: PartitionState
    vps: dict[int, VirtualPartitionState]  # the VPs served: active, and closed but not yet sealed
    layout: TopicLayout
    read_at: float  # time.monotonic()


@dataclass(slots=True)
class _Hold:
    """One reshard's request that the feeder hold back the parents' records (see the module docstring)."""

    token: str
    vps: frozenset[int]  # the parents: the VPs the reshard closes
    reached: asyncio.Event
    released: asyncio.Event
    fed_through: int = -1  # the offset offered as the cut: nothing at or past it goes to the parents
    mod_revision: int = 0  # of the hold key the feeder wrote
    deadline: float = 0.0  # time.monotonic() after which the feeder leaves the hold by itself
    # The epoch the reshard stored (and the states of the VPs it opened), given with the release.
    stored: tuple[SplitEpoch, tuple[VirtualPartitionState, ...]] | None = None


@ray.remote(num_cpus=0)
class Feeder:
    def __init__(self, spec: FeederSpec):
        self._spec = spec
        self._store: MetadataStore | None = None
        self._metadata: _Metadata | None = None
        self._next_offset: int | None = None  # None: resume before the next round
        self._fed_high = 0  # one past the highest record any served VP held at the last resume
        self._hold: _Hold | None = None
        self._round_ended_at = time.monotonic()
        self._resumed_epochs: dict[int, int] = {}  # VP -> leader epoch the resume asked
        self._avoid: set[str] = set()  # physical replicas that failed since the last refresh
        self._last_report: dict[int, tuple[int, int, float]] = {}  # VP -> (fed_through, HW, when)
        self._handles: dict[str, object] = {}  # actor name -> handle
        self._task: asyncio.Task | None = None
        self._liveness_task: asyncio.Task | None = None
        self._lease = None
        self._closed = False
        self._stats = {"rounds": 0, "records_fed": 0, "resumes": 0, "resumed_at": None, "errors": 0,
                       "last_error": None, "source": None}

    async def start(self) -> dict:
        """Start feeding and holding the liveness key (idempotent)."""
        loop = asyncio.get_running_loop()
        if self._liveness_task is None:
            # Registered before the answer, so whoever started the feeder finds its key.
            await self._refresh_liveness()
            self._liveness_task = loop.create_task(self._keep_alive())
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run())
        return self._describe()

    def _describe(self) -> dict:
        return {"partition": self._spec.partition, "node_id": self._spec.node_id, "next_offset": self._next_offset,
                "fed_high": self._fed_high, "held": self._hold is not None and self._hold.reached.is_set(),
                "resumed_epochs": dict(self._resumed_epochs), **self._stats}

    async def describe(self) -> dict:
        return self._describe()

    async def ping(self) -> int:
        return self._spec.partition

    async def hold(self, token: str, vps: tuple[int, ...], wait_ms_max: int) -> tuple[int, int]:
        """Hold back the records of ``vps`` from the end of the current round; ``(fed_through, hold key mod_revision)``.

        Every record of the partition below ``fed_through`` is in its VP and none at or past
        it is in ``vps``, so a new split epoch closing them may cut there. The other VPs are
        fed on. ``RequestTimedOut`` if the feeder did not get there within ``wait_ms_max``
        (e.g. a VP leader is unreachable).
        """
        if self._hold is not None and self._hold.token != token:
            raise ReshardConflict(
                f"the feeder of {self._spec.topic}-{self._spec.partition} is held by another reshard; "
                f"retry once it finished (at most hold_ms_max={self._spec.config.hold_ms_max})"
            )
        if self._hold is None:
            self._hold = _Hold(token, frozenset(vps), asyncio.Event(), asyncio.Event())
        hold = self._hold
        try:
            await asyncio.wait_for(hold.reached.wait(), wait_ms_max / 1000)
        except asyncio.TimeoutError:
            if not hold.reached.is_set():
                if self._hold is hold:
                    self._hold = None
                since_ms = round((time.monotonic() - self._round_ended_at) * 1000)
                raise RequestTimedOut(
                    f"the feeder of {self._spec.topic}-{self._spec.partition} did not reach a round's end within "
                    f"{wait_ms_max} ms (its last round ended {since_ms} ms ago, {self._stats['rounds']} rounds, last "
                    f"error: {self._stats['last_error']}); retry the reshard"
                ) from None
        return hold.fed_through, hold.mod_revision

    async def release(self, token: str, epoch: SplitEpoch | None = None,
                      children: tuple[VirtualPartitionState, ...] = ()) -> None:
        """End the hold of reshard ``token`` (if this feeder has it); feeding goes on under the layout then stored.

        ``epoch`` and ``children``: what the reshard stored, so the feeder goes on at once
        without reading etcd; without them it fences its hold key and re-reads the layout.
        """
        hold = self._hold
        if hold is not None and hold.token == token:
            hold.stored = None if epoch is None else (epoch, tuple(children))
            hold.released.set()
            if not hold.reached.is_set():
                self._hold = None

    async def close(self) -> None:
        self._closed = True
        for task in (self._task, self._liveness_task):
            if task is not None:
                task.cancel()
        if self._store is not None:
            if self._lease is not None:
                try:
                    self._store.revoke_lease(self._lease)
                except CoordinatorUnavailable:
                    pass  # the lease expires by itself
            self._store.close()

    # --- liveness -----------------------------------------------------------------------

    async def _keep_alive(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._spec.config.lease_ttl_s / 3)
            await self._refresh_liveness()

    async def _refresh_liveness(self) -> None:
        """Refresh the lease of the liveness key; register anew after an etcd outage expired it."""
        try:
            self._lease = await asyncio.get_running_loop().run_in_executor(None, self._register_liveness, self._lease)
        except CoordinatorUnavailable as error:
            logger.warning("%s-%d feeder: liveness not refreshed: %s", self._spec.topic, self._spec.partition, error)
            self._lease = None

    def _register_liveness(self, lease):
        store = self._metadata_store()
        if lease is not None and store.refresh_lease(lease) > 0:
            return lease
        lease = store.grant_lease(self._spec.config.lease_ttl_s)
        key = keys.feeder_liveness(self._spec.cluster, self._spec.topic, self._spec.partition)
        store.put(key, {"node_id": self._spec.node_id, "pid": os.getpid()}, lease=lease)
        return lease

    def _metadata_store(self) -> MetadataStore:
        if self._store is None:
            self._store = MetadataStore(self._spec.etcd_endpoint)
        return self._store

    # --- the loop -----------------------------------------------------------------------

    async def _run(self) -> None:
        backoff_s = self._spec.config.retry_backoff_ms / 1000
        while not self._closed:
            try:
                await self._refresh_if_old()
                if self._next_offset is None:
                    await self._resume()
                hold = self._hold
                if hold is not None and not hold.reached.is_set() and self._next_offset >= self._fed_high:
                    await self._reach_hold(hold)
                if hold is not None and hold.reached.is_set() and (
                        hold.released.is_set() or time.monotonic() >= hold.deadline):
                    await self._leave_hold(hold)
                    continue
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception as raised:  # every failure leads to the same safe place: resume
                error = unwrap(raised)
                self._stats["errors"] += 1
                self._stats["last_error"] = f"{type(error).__name__}: {error}"
                logger.info("%s-%d feeder: %s; resuming", self._spec.topic, self._spec.partition, self._stats["last_error"])
                if isinstance(error, OffsetOutOfRange) and self._next_offset is not None:
                    await self._skip_to_log_start()
                else:
                    self._next_offset, self._metadata = None, None
                self._handles.clear()
                await asyncio.sleep(backoff_s)

    async def _refresh_if_old(self) -> None:
        age_s = self._spec.config.metadata_max_age_ms / 1000
        if self._metadata is not None and time.monotonic() - self._metadata.read_at < age_s:
            return
        try:
            self._metadata = await asyncio.get_running_loop().run_in_executor(None, self._read_metadata)
        except CoordinatorUnavailable as error:
            if self._metadata is None:
                raise
            # The data path goes on while etcd is away: keep the metadata known, ask again later.
            logger.warning("%s-%d feeder: metadata not refreshed: %s", self._spec.topic, self._spec.partition, error)
            self._metadata = dataclasses.replace(self._metadata, read_at=time.monotonic())
            return
        self._avoid.clear()
        if self._next_offset is None:
            return
        for vp, state in self._metadata.vps.items():
            # A VP opened at or past where the feeder stands (a child of a reshard) holds nothing yet.
            if vp not in self._resumed_epochs and self._metadata.layout.source_bounds(vp, self._spec.partition)[0] \
                    >= self._next_offset:
                self._resumed_epochs[vp] = state.leader_epoch
        changed = {vp for vp, state in self._metadata.vps.items() if self._resumed_epochs.get(vp) != state.leader_epoch}
        if changed:
            logger.info("%s-%d feeder: VP leaders changed %s; resuming", self._spec.topic, self._spec.partition, sorted(changed))
            self._next_offset = None

    def _read_metadata(self) -> _Metadata:
        self._metadata_store()
        spec = self._spec
        config = self._store.get(keys.topic(spec.cluster, spec.topic))
        partition = self._store.get(keys.physical_partition(spec.cluster, spec.topic, spec.partition))
        if config is None or partition is None:
            raise UnknownTopic(f"topic {spec.topic!r} or its partition {spec.partition} is not recorded (yet)")
        topic_config = config_from_json(config.value)
        virtual = VirtualStore(self._store, spec.cluster)
        layout, states = virtual.layout_and_states(spec.topic, topic_config.partitions, topic_config.virtual_config())
        sealed = {vp for vp, (state, _) in states.items() if state.sealed_end_offset is not None}
        served = {vp: states[vp][0] for vp in served_vps(layout, sealed)}
        return _Metadata(PartitionState.from_json(spec.partition, partition.value), served, layout, time.monotonic())

    def _hold_key(self) -> str:
        return keys.feeder_hold(self._spec.cluster, self._spec.topic, self._spec.partition)

    async def _reach_hold(self, hold: _Hold) -> None:
        """Offer ``next_offset`` as the cut: record it in the hold key; the parents get nothing from it on."""
        value = {"token": hold.token, "fed_through": self._next_offset}
        hold.mod_revision = await asyncio.get_running_loop().run_in_executor(
            None, self._store.put, self._hold_key(), value)
        hold.fed_through = self._next_offset
        hold.deadline = time.monotonic() + self._spec.config.hold_ms_max / 1000
        hold.reached.set()
        logger.info("%s-%d feeder holds back VPs %s from %d for reshard %s", self._spec.topic, self._spec.partition,
                    sorted(hold.vps), hold.fed_through, hold.token)

    async def _leave_hold(self, hold: _Hold) -> None:
        """The reshard released the hold or ``hold_ms_max`` passed: feed on under the layout then stored."""
        if not hold.released.is_set():
            logger.warning("%s-%d feeder: reshard %s did not release it within hold_ms_max; going on",
                           self._spec.topic, self._spec.partition, hold.token)
        metadata = self._metadata
        if hold.stored is not None and metadata is not None and hold.stored[0].epoch == len(metadata.layout.epochs):
            # The epoch is stored (its transaction also deleted the hold key): take it as given and
            # go back to its cut for the children; the other VPs drop what they already hold.
            epoch, children = hold.stored
            self._metadata = dataclasses.replace(metadata, layout=metadata.layout.append(epoch),
                                                 vps={**metadata.vps, **{state.vp: state for state in children}})
            self._resumed_epochs.update({state.vp: state.leader_epoch for state in children})
            # From the offered cut, not the epoch's: records between the two (a cut above it is
            # legal) belong to the parents, which were held back from the offered one.
            self._fed_high = max(self._fed_high, self._next_offset)
            self._next_offset = min(self._next_offset, hold.fed_through)
            self._hold = None
            return
        # Fenced: once this delete is through, the reshard's transaction either already stored its
        # epoch (the resume reads it) or can no longer store it (the resume gives the parents
        # what was withheld). Raises while etcd is away: the hold stays.
        await asyncio.get_running_loop().run_in_executor(None, self._store.delete_if, self._hold_key(),
                                                         hold.mod_revision)
        self._hold, self._metadata, self._next_offset = None, None, None
        await self._refresh_if_old()

    # --- resume and rounds --------------------------------------------------------------

    async def _resume(self) -> None:
        if self._hold is None:
            # A reshard may still hold a previous feeder of this partition, which fed the other
            # VPs past the cut it offered: fence it out, then read the layout again, so that an
            # epoch stored before the fence is in it.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._store.delete, self._hold_key())
            self._metadata = await loop.run_in_executor(None, self._read_metadata)
        metadata = self._metadata
        vps = sorted(metadata.vps)
        positions = await self._call_all(
            [self._vp_handle(metadata.vps[vp]).feed_position.remote(metadata.vps[vp].leader_epoch, self._spec.partition)
             for vp in vps])
        resumed = resume_point(metadata.layout, self._spec.partition, dict(zip(vps, positions)))
        self._next_offset, self._fed_high = resumed.next_offset, resumed.fed_high
        self._resumed_epochs = {vp: metadata.vps[vp].leader_epoch for vp in vps}
        self._last_report.clear()
        self._stats["resumes"] += 1
        self._stats["resumed_at"] = self._next_offset
        logger.info("%s-%d feeder resumes at %d (VP positions %s)", self._spec.topic, self._spec.partition,
                    self._next_offset, dict(zip(vps, positions)))

    async def _round(self) -> None:
        config, metadata = self._spec.config, self._metadata
        source_id = choose_source(metadata.partition, self._avoid)
        self._stats["source"] = source_id
        handle = self._physical_handle(source_id)
        try:
            result = await self._call(handle.fetch.remote(
                self._next_offset, config.fetch_bytes_max, config.fetch_wait_ms_max, True))
        except Exception as error:
            if source_id == metadata.partition.leader:
                raise
            # A follower that fails (dead, deposed, behind our offset): the next round reads
            # elsewhere, no resume needed; it is tried again after the next metadata read.
            self._avoid.add(source_id)
            logger.info("%s-%d feeder: source %s failed (%s); avoiding it", self._spec.topic, self._spec.partition,
                        source_id, type(unwrap(error)).__name__)
            return
        planned = plan_round(result.data, self._spec.partition, metadata.layout, self._next_offset, config.feed_records_max)
        chunks, held_from = planned.chunks, None
        hold = self._hold
        if hold is not None and hold.reached.is_set():
            chunks, held_from = withhold(chunks, hold.vps, hold.fed_through), hold.fed_through

        def progress(vp: int) -> tuple[int, int]:
            """``(fed_through, physical HW)`` for ``vp``: a held parent hears of nothing past the offered cut."""
            if held_from is not None and vp in hold.vps:
                return min(planned.next_offset, held_from), min(result.high_watermark, held_from)
            return planned.next_offset, result.high_watermark

        # Chunks of a VP not served are skipped: it is sealed, so it holds all of its records.
        # Wait for every VP before failing: a resume must not race this round's calls.
        outcomes = await asyncio.gather(*(
            self._feed_vp(state, chunks.get(vp, ()), *progress(vp)) for vp, state in metadata.vps.items()
        ), return_exceptions=True)
        failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
        if failed:
            raise failed[0]
        self._next_offset = planned.next_offset
        self._round_ended_at = time.monotonic()
        self._stats["rounds"] += 1
        self._stats["records_fed"] += planned.records

    async def _feed_vp(self, state: VirtualPartitionState, chunks: tuple[Chunk, ...], fed_through: int,
                       high_watermark: int) -> None:
        """Hand one VP leader its chunks in order; the last call (or a report) carries ``fed_through``."""
        previous = self._last_report.get(state.vp)
        interval_s = self._spec.config.report_interval_ms / 1000
        # A VP that gets no records this round hears of the feeder's progress only every
        # report_interval_ms (enough for the RISR's feed-lag check), so the cost of a round
        # grows with the VPs it feeds, not with all of them. A closed parent still being
        # sealed hears of every change at once: its children wait for it.
        quiet = previous is not None and time.monotonic() - previous[2] < interval_s
        unchanged = previous is not None and previous[:2] == (fed_through, high_watermark)
        if not chunks and quiet and (unchanged or self._metadata.layout.is_active(state.vp)):
            return
        handle = self._vp_handle(state)
        partition, already_fed = self._spec.partition, self._next_offset
        for index, chunk in enumerate(chunks or ((),)):
            last = index == max(len(chunks), 1) - 1
            await self._call(handle.feed.remote(
                state.leader_epoch, partition, chunk, fed_through if last else already_fed, high_watermark))
        self._last_report[state.vp] = (fed_through, high_watermark, time.monotonic())

    async def _skip_to_log_start(self) -> None:
        """The physical log no longer holds ``next_offset`` (retention): continue at its start."""
        leader = self._physical_handle(self._metadata.partition.leader)
        log_start, _ = await self._call(leader.list_offsets.remote())
        logger.warning("%s-%d feeder: offsets %d..%d were deleted by retention before being fed; skipping",
                       self._spec.topic, self._spec.partition, self._next_offset, log_start - 1)
        self._next_offset = max(self._next_offset, log_start)

    # --- calls and handles --------------------------------------------------------------

    async def _call(self, ref):
        return await asyncio.wait_for(ref, self._spec.config.call_timeout_ms / 1000)

    async def _call_all(self, refs: list) -> list:
        return list(await asyncio.gather(*(self._call(ref) for ref in refs)))

    def _vp_handle(self, state: VirtualPartitionState):
        return self._handle(vp_actor_name(self._spec.cluster, self._spec.topic, state.vp, state.leader))

    def _physical_handle(self, replica_id: str):
        return self._handle(replica_actor_name(self._spec.cluster, self._spec.topic, self._spec.partition, replica_id))

    def _handle(self, name: str):
        handle = self._handles.get(name)
        if handle is None:
            handle = ray.get_actor(name, namespace=NAMESPACE)  # ValueError when not running: the round fails
            self._handles[name] = handle
        return handle
