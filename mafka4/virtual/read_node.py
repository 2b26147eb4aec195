"""``ReadNode``: the one Ray actor of a read node; it hosts any number of VP replicas as logs.

A virtual partition costs a log, not a process (DESIGN.md section 6): the controller starts one
``ReadNode`` per registered read node (``control.read_node_launcher``) and tells it which VP replicas to
host and in which role (``host``); creating, splitting or merging VPs opens logs inside running
nodes. Everything of one node runs on its event loop:

* **VP replicas** (``HostedVp``: a segmented log, checkpoints and the pure ``VpReplicaCore``),
  keyed by ``VpId``, their logs opened on the worker thread (``vp_opening``: opening recovers a
  log, which the other VPs' fetches and feeds should not wait for). A role notice for an older
  epoch is refused per VP (``StaleEpoch``); a repeated notice is a no-op, so the controller may
  announce roles as often as it likes.
* **Feeding** (``PartitionFeed``): per (topic, physical partition) one stream for the VP leaders
  this node hosts, created with the topic's first local leader and stopped when the node
  leads none. The streams of one topic share a ``TopicView`` of its metadata. Their fetches
  from physical replicas go over the replicas' TCP streams (``PeerHandles``), not as Ray calls,
  which cost several times the CPU per MiB.
* **Replication** (``ReplicaFetcher``): per node this node follows, one fetch session for every
  VP the pair shares; the other direction is ``replica_fetch`` (``replication.FetchSessions``).
  The session's fetches go over the leader node's stream too.
* **Consumers** call ``fetch`` once per read node for every VP they read there (long poll until
  any has data), over the node's stream (``stream_endpoint``), and ``list_offsets`` /
  ``offsets_for_time`` the same way as Ray calls; the answers are ``consumer_reads``'.
* **Network faults** (``set_partition``, ``mafka4.partition_gate``): the node's calls to other
  nodes (feed fetches, replication sessions) pass one gate (``PeerHandles``), which can drop or
  delay them.
* **Disk full** (``set_log_dir_bytes_max``, ``log.log_dir_budget``): past the node's bound every
  VP append fails before a byte is written; a feed stream resumes from the VP's fed progress and
  a follower VP fetches again, so both go on where they stopped once space returns.
* **Reshards** hold and release the topic's streams on the nodes leading a parent (``hold``,
  ``release``, or ``host_and_release`` for a node that also leads a child; the protocol is
  ``partition_feed``'s and ``control.resharding``'s).
* **Sealing.** A closed VP led here is sealed once every partition's stream fed it past its
  closing cut and its RISR holds all of it (``TopicLayout.is_sealed``, HW == log end): the node
  fsyncs its log (a sealed VP is never fed again, so a power loss must not cut it, as it may cut
  the unflushed tail a one-replica VP serves while the feed can still refill it) and records its
  sealed end offset in etcd itself, so its children become readable at once.
* **Housekeeping** (``housekeeping.VpHousekeeping``): every ``housekeeping_interval_ms`` the
  VPs that changed (appended to, cut, HW, role or RISR moved) flush by policy and checkpoint
  their HW; every ``retention_check_interval_ms`` retention looks at the VPs that changed since
  and at those whose oldest segment's ``retention_ms`` ran out; every
  ``LEADER_TICK_INTERVAL_S`` the RISR ticks the leaders with followers that changed or whose
  in-sync follower may lag out now, and sealing looks at the closed, unsealed VPs led here. A
  lone leader's fsync (its HW waits for it) runs as soon as it is owed, batched with the other
  VPs' on the worker thread, not on the event loop.
* **etcd records** (``ReadNodeRecords``): the node's liveness key under its own lease, the RISR
  of each VP led here (before its core may count it), sealed ends, feed positions (for physical
  retention), read losses and the node's load report. The controller restarts a node whose
  liveness key is gone and whose actor does not answer a ping; its VPs come back with no role
  and are announced again (a restarted leader leads only a new epoch: ``virtual.failover``).
* **Load** (``virtual.load_meter``): the feed's VP appends add their bytes to the node's
  ``LoadMeter`` and ``fetch`` the CPU it spent building each answer; every
  ``load_report_interval_ms`` the records write the load over that window with the number of VP
  replicas hosted, those of sealed VPs apart (``_measure_load``; the views of topics the node
  runs no feed stream of are read again for it once old), for the controller's read-node
  scaling (issue 38).
* **Metrics** (``metrics.exposition``): a Prometheus metrics server beside the client port,
  named in the liveness key; each scrape takes a snapshot on the loop. The lag of every group
  with an offset committed in a VP led here (``metrics.group_lag``) comes from the groups'
  offsets read from etcd at most every ``GROUP_OFFSETS_MAX_AGE_MS``, when scraped
  (``metadata.group_offsets_cache``), and one batch header per lagging group: no timer. Each
  consumer fetch observes the end-to-end latency of the batches it serves, per topic
  (``metrics.end_to_end``: one batch header per batch served).
* **Collector**: the node freezes the objects its start left (``mafka4.collector``), so that
  the full collections its per-record work causes no longer walk Ray's modules.

An idle VP costs nothing but its open files and a few objects: no per-VP task or timer
exists, and no periodic pass walks the hosted VPs. Each pass visits the VPs that changed and
those with a deadline that came, which an idle VP has only while retention will delete one of
its segments or while a follower of it may drop out of its RISR; a feed stream skips the VPs of
an idle partition (``partition_feed``), and a topic view reads the VP states again only when
etcd holds a change (``topic_view``). What still grows with the hosted VPs while idle, with
``read_replicas`` > 1 only: each replication request builds every followed VP's entry on the
follower's node, and the leader's node looks at every entry of the session and reports each
idle one to its RISR every quarter of ``read_replica_lag_ms_max`` (``replication``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass
from typing import Sequence

import ray

from mafka4 import join_trace
from mafka4.clocks import monotonic_ms, wall_ms
from mafka4.collector import freeze_what_start_up_left
from mafka4.errors import InvalidConfig, MafkaError, StaleEpoch, UnknownVirtualPartition
from mafka4.limits import END_TO_END_LATENCY_BUCKETS_S, LEADER_TICK_INTERVAL_S, TopicConfig
from mafka4.limits.servers import ReadNodeConfig, topic_log_config
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.log.replica_storage import remove_discarded, remove_trees
from mafka4.long_poll import ChangeSignal
from mafka4.metadata.group_offsets_cache import GroupOffsetsCache
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.metrics.exposition import MetricsServer, start_on_loop
from mafka4.metrics.families import read_node_families
from mafka4.metrics.group_lag import group_lag
from mafka4.metrics.histogram import LatencyHistogram
from mafka4.partition_gate import NetworkFault
from mafka4.risr.state import RisrConfig
from mafka4.stage_trace import StageTrace
from mafka4.frontend.node_port import NodePort
from mafka4.transport.remote_errors import unwrap
from mafka4.transport.stream_calls import StreamEndpoint, StreamServer
from mafka4.virtual import consumer_reads
from mafka4.virtual.consumer_reads import ConsumerAnswer, ConsumerRead
from mafka4.virtual.hosted_vp import HostedVp, VpId, vp_directory
from mafka4.virtual.housekeeping import VpHousekeeping
from mafka4.virtual.layout import SplitEpoch
from mafka4.virtual.load_meter import LoadMeter, open_and_sealed
from mafka4.virtual.partition_feed import PartitionFeed
from mafka4.virtual.peer_handles import PeerHandles
from mafka4.virtual.read_node_records import FeedKey, ReadNodeRecords
from mafka4.virtual.replica_core import Ready, VpRole
from mafka4.virtual.replication import (
    SESSION_UNKNOWN, FetchSessions, ReplicaFetcher, SessionAnswer, SessionRequest,
)
from mafka4.virtual.topic_view import TopicView
from mafka4.virtual.vp_opening import VpOpening
from mafka4.virtual.vp_state import VirtualPartitionState

logger = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class ReadNodeSpec:
    cluster: str
    node_id: str
    data_root: str
    etcd_endpoint: str
    config: ReadNodeConfig = ReadNodeConfig()


@dataclass(slots=True)
class _Topic:
    """What the node holds of one topic."""

    config: TopicConfig
    view: TopicView
    feeds: dict[int, PartitionFeed]


@ray.remote(num_cpus=0)
class ReadNode:
    def __init__(self, spec: ReadNodeSpec):
        self._spec = spec
        self._config = spec.config
        self._hosted: dict[VpId, HostedVp] = {}
        self._opening = VpOpening(self._hosted)  # opens VP logs on the worker thread (``virtual.vp_opening``)
        # One bound for every VP log of the node (``ReadNodeConfig.log_dir_bytes_max``).
        self._budget = LogDirBudget(os.path.join(spec.data_root, spec.node_id), spec.config.log_dir_bytes_max)
        self._stage_traces: dict[str, StageTrace] = {}  # traced topics (``set_stage_trace``)
        # Indexes of the roles, rebuilt whenever a role changes (``_roles_changed``), so that the
        # feed streams and the replication sessions never walk every hosted VP: per topic its VP
        # leaders here (a new dict on every change: streams compare it by identity), per leader
        # node the followers here.
        self._leaders: dict[str, dict[int, HostedVp]] = {}
        self._followers: dict[str, list[HostedVp]] = {}
        # The periodic passes over the VPs, which visit only the VPs that changed or whose
        # deadline came (the module docstring's "Housekeeping").
        self._housekeeper = VpHousekeeping(self._hosted.get)
        # Per topic: its closed, unsealed VPs led here, for the (node's leaders, view generation)
        # they were computed from.
        self._seal_candidates: dict[str, tuple[dict[int, HostedVp], int, list[int]]] = {}
        self._topics: dict[str, _Topic] = {}
        self._fetchers: dict[str, ReplicaFetcher] = {}  # leader node id -> stream
        self._peers = PeerHandles(spec.cluster, spec.node_id)
        self._records = ReadNodeRecords(spec.cluster, spec.node_id, spec.etcd_endpoint, spec.config)
        self._load = LoadMeter(spec.node_id, monotonic_ms())  # bumped by the VPs' feeds and by ``fetch``
        # When this node first answered a consumer with records (wall ms; None: not yet): a node that
        # joined serves from then on (``bench read-scale`` times a scale-up to it).
        self._first_records_served_ms: int | None = None
        # Something changed on this node: every long-polling fetch (followers' and consumers') looks again.
        self._changes = ChangeSignal()
        # Which VPs changed since when, for the fetch sessions' long polls: a global sequence and
        # the sequence of each VP's last change.
        self._change_seq = 0
        self._vp_changed_seq: dict[VpId, int] = {}
        self._sessions = FetchSessions(spec.config)
        self._sealing: dict[VpId, asyncio.Task] = {}
        self._tasks: list[asyncio.Task] = []
        self._removals: set[asyncio.Task] = set()  # dropped VPs' directories being removed (``drop``)
        self._view_reads: set[asyncio.Task] = set()  # views read again for the load report (``_measure_load``)
        self._closed = False
        # Consumers' and following nodes' fetches come over this (``stream_endpoint``): their
        # answers carry batches.
        self._stream_server = StreamServer(self, frozenset({"fetch", "replica_fetch"}), f"read node {spec.node_id}")
        # Clients' requests come to this port, in the client protocol (``frontend.node_port``).
        self._client_port = NodePort(spec.etcd_endpoint, spec.cluster, spec.node_id, self, kafka_data=self)
        self._metrics: MetricsServer | None = None  # Prometheus's, started with the client port (metrics.exposition)
        # The groups' committed offsets for the group lag metrics, read when scraped (``metadata.group_offsets_cache``).
        self._group_offsets = GroupOffsetsCache(self._records.store, spec.cluster, f"read node {spec.node_id}")
        # Per topic, the end-to-end latency of the batches consumers' fetches carried (``metrics.end_to_end``).
        self._end_to_end: dict[str, LatencyHistogram] = {}
        freeze_what_start_up_left()  # Ray's objects stay out of the collections the data path causes

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> dict:
        """Register the liveness key and start the periodic work (idempotent)."""
        if not self._records.started:
            removed = await asyncio.to_thread(remove_discarded, self._budget.root)
            if removed:
                logger.info("read node %s: removed %d VP directories a crash left discarded", self._spec.node_id, removed)
            client_address = await self._serve_clients()
            # On a free port, named in the liveness key (status lists it): no registration names one yet.
            kafka_address = await self._client_port.start_kafka(ray.util.get_node_ip_address(), 0)
            if self._metrics is None:
                self._metrics = start_on_loop(f"read node {self._spec.node_id}", read_node_families,
                                              self._metrics_snapshot, ray.util.get_node_ip_address())
            # The liveness key, naming the client, Kafka and metrics addresses, exists now (unless etcd is away).
            await self._records.start(self._feed_positions, client_address, self._measure_load,
                                      kafka_address=kafka_address,
                                      metrics_address=self._metrics.address if self._metrics is not None else None)
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._housekeeping()), loop.create_task(self._leader_ticks()),
                           loop.create_task(self._housekeeper.flush_owed_forever(wall_ms))]
        return {"node_id": self._spec.node_id, "pid": os.getpid()}

    async def _serve_clients(self) -> str:
        """Start the client port on the port the node's registration names; its address."""
        port = await asyncio.to_thread(self._records.registered_client_port)
        await asyncio.to_thread(self._client_port.start_view)
        host = ray.util.get_node_ip_address()
        try:
            return await self._client_port.start(host, port)
        except OSError as error:
            logger.error("read node %s cannot serve clients on %s:%d (%s); serving them on another port, which "
                         "clients learn from any node's metadata but not from a bootstrap list naming %d",
                         self._spec.node_id, host, port, error, port)
            return await self._client_port.start(host, 0)

    async def physical_call(self, topic: str, partition: int, leader: str, method: str, *args):
        """Call ``method`` of replica ``leader`` of ``topic``-``partition`` over its stream (``produce``,
        ``fetch``) or as a Ray call (``list_offsets``, ``offset_for_timestamp``): the Kafka listener's
        way to the physical leaders."""
        try:
            return await getattr(self._peers.replica(topic, partition, leader), method).remote(*args)
        except ray.exceptions.RayError as error:
            raise unwrap(error) from None

    async def client_port_counters(self) -> dict[str, int]:
        """The client port's counters: connections, requests, refusals, bad frames, ..."""
        return self._client_port.counters

    async def _metrics_snapshot(self) -> dict:
        """What its metrics are made of (``metrics.families.read_node_families``), on the node's loop:
        its ``describe``, the client port's counters, the lag of every group with an offset
        committed in a VP led here (``group_lag``) and per topic the end-to-end latency of the
        batches consumers were served (``end_to_end_latency``). A topic the node hosts no VP of
        any more (deleted, or its VPs moved away) is forgotten here, so its series ends."""
        offsets = await self._group_offsets.offsets(monotonic_ms())
        hosted_topics = {vp_id.topic for vp_id in self._hosted}
        for topic in self._end_to_end.keys() - hosted_topics:
            del self._end_to_end[topic]
        return {**await self.describe(), "client_port": self._client_port.counters,
                "group_lag": self._group_lags(offsets.vps, wall_ms()),
                "end_to_end_latency": {topic: latency.snapshot() for topic, latency in self._end_to_end.items()}}

    def _group_lags(self, committed: dict[tuple[str, int], dict[str, int]], now_ms: int) -> list[dict]:
        """Per group and VP led here with an offset in ``committed`` ((topic, VP) -> {group: offset}):
        its lag (``metrics.group_lag``). It walks the committed offsets, not the hosted VPs, and
        reads one batch header per group behind."""
        rows = []
        for (topic, vp), groups in sorted(committed.items()):
            hosted = self._leaders.get(topic, {}).get(vp)
            if hosted is None:
                continue
            high_watermark = hosted.core.high_watermark
            for group, offset in sorted(groups.items()):
                try:
                    timestamp_ms = hosted.timestamp_at(offset) if offset < high_watermark else None
                except MafkaError as error:  # a damaged batch: the lag in messages still stands
                    logger.warning("%s: group %s's lag in time is unknown: %s", hosted.vp_id, group, error.message)
                    timestamp_ms = None
                lag = group_lag(offset, high_watermark, timestamp_ms, now_ms)
                rows.append({"group": group, "topic": topic, "vp": vp, "committed_offset": offset,
                             "high_watermark": high_watermark, "lag_messages": lag.messages, "lag_ms": lag.ms})
        return rows

    async def ping(self) -> str:
        return self._spec.node_id

    async def stream_endpoint(self) -> StreamEndpoint:
        """Where this node serves consumers' ``fetch`` and following nodes' ``replica_fetch`` over a
        stream, on its node's address."""
        return await self._stream_server.start(ray.util.get_node_ip_address())

    async def close(self, delete_data: bool = False) -> None:
        """Stop every stream, close every log (deleting them if asked) and revoke the liveness lease."""
        self._closed = True
        self._stream_server.close()
        self._client_port.close()
        for task in self._tasks + list(self._sealing.values()) + list(self._view_reads):
            task.cancel()
        for topic in list(self._topics.values()):
            for feed in topic.feeds.values():
                feed.close()
        for fetcher in self._fetchers.values():
            fetcher.close()
        self._peers.close()
        async with self._opening.lock:  # a log being opened is closed once it is open
            for hosted in self._hosted.values():
                hosted.close(delete_data)
        self._group_offsets.close()
        self._records.close()
        if self._metrics is not None:  # last: its thread waits for the server (off the loop)
            await asyncio.to_thread(self._metrics.stop)

    # --- hosting (the controller's calls) ----------------------------------------------

    async def host(self, topic: str, config: TopicConfig, states: Sequence[VirtualPartitionState]) -> dict[int, str]:
        """Host the VP replicas of ``states`` on this node, each in the role its state gives.

        Opens the log of a VP not hosted yet (from what this node's disk holds), then makes it
        leader or follower of its epoch. Returns the VPs refused and why (e.g. a notice of an
        older epoch than the replica knows); raises ``UnknownTopic`` for a topic etcd does not
        hold and ``UnknownVirtualPartition`` for a VP its layout does not have.
        """
        join_trace.JOIN_TRACES.record(topic, "host_received", detail=self._spec.node_id)
        node_id = self._spec.node_id
        if any(node_id not in state.replicas for state in states):
            raise InvalidConfig(f"read node {node_id} was asked to host {topic} VPs "
                                f"{[s.vp for s in states if node_id not in s.replicas]} it is no replica of")
        entry = await self._topic(topic, config)
        layout = entry.view.layout
        unknown = [state.vp for state in states if not layout.exists(state.vp) and state.vp not in entry.view.states]
        if unknown:
            await entry.view.refresh()  # a child stored after the view's last read
            unknown = [vp for vp in unknown if not entry.view.layout.exists(vp)]
        if unknown:
            raise UnknownVirtualPartition(f"topic {topic!r} has no virtual partitions {unknown} in etcd")
        join_trace.JOIN_TRACES.record(topic, "children_opening", detail=node_id)
        opened = await self._open(topic, config, [state.vp for state in states])
        refused: dict[int, str] = {}
        now_ms = wall_ms()
        for index, (state, hosted) in enumerate(zip(states, opened)):
            try:
                if state.leader == node_id:
                    hosted.become_leader(state.leader_epoch, state.replicas, state.risr, now_ms)
                else:
                    hosted.become_follower(state.leader_epoch, state.leader)
            except StaleEpoch as error:
                refused[state.vp] = str(error)
            if index % 64 == 63:
                await asyncio.sleep(0)  # hosting many VPs: let fetches in between
        self._roles_changed(topic)
        join_trace.JOIN_TRACES.record(topic, "children_opened", detail=node_id)
        return refused

    async def _open(self, topic: str, config: TopicConfig, vps: Sequence[int]) -> list[HostedVp]:
        """The replica of each of ``vps`` hosted here, the logs of those not hosted yet opened on the
        worker thread (``virtual.vp_opening``): the loop serves the other VPs meanwhile."""
        now_ms = wall_ms()
        log_config = topic_log_config(config)
        risr_config = RisrConfig(read_replica_lag_ms_max=config.read_replica_lag_ms_max)

        def make(vp_id: VpId) -> HostedVp:  # on the worker thread: touches nothing of the node's
            directory = vp_directory(self._spec.data_root, self._spec.node_id, vp_id)
            return HostedVp(vp_id, self._spec.node_id, directory, log_config, risr_config, now_ms, self._on_ready,
                            self._budget, on_change=self._housekeeper.changed, owe_flush=self._housekeeper.owe_flush,
                            load=self._load)

        opened = await self._opening.open([VpId(topic, vp) for vp in vps], make)
        trace = self._stage_traces.get(topic)
        for hosted in opened:
            hosted.trace = trace
        return opened

    async def _topic(self, topic: str, config: TopicConfig) -> _Topic:
        entry = self._topics.get(topic)
        if entry is None:
            view = TopicView(self._spec.cluster, topic, config, self._records.store,
                             self._config.feeder.metadata_max_age_ms)
            await view.refresh()  # UnknownTopic for a deleted topic: nothing is opened
            entry = self._topics.setdefault(topic, _Topic(config, view, {}))
        return entry

    async def log_end_offsets(self, topic: str, config: TopicConfig, vps: Sequence[int]) -> dict[int, int]:
        """The log end offset of this node's replica of each of ``vps``, opening (without a role) a log
        not hosted yet: the controller picks the longest among restarted replicas (``failover``)."""
        await self._topic(topic, config)
        return {vp: hosted.log_end_offset for vp, hosted in zip(vps, await self._open(topic, config, vps))}

    async def roles(self, topic: str) -> dict[int, tuple[str, int]]:
        """Per hosted VP of ``topic``: (role, leader epoch)."""
        return {vp_id.vp: (hosted.core.role.value, hosted.core.leader_epoch)
                for vp_id, hosted in self._hosted.items() if vp_id.topic == topic}

    async def drop(self, topic: str, vps: Sequence[int] | None = None, delete_data: bool = False) -> list[int]:
        """Stop hosting VPs of ``topic`` (all of them if ``vps`` is None); the VPs dropped.

        With ``delete_data`` each VP's log is closed unflushed and its directory moved aside at
        once, and removed on a worker thread: a topic of 1,024 VPs took the loop 7 s to flush and
        delete inline, long enough for the node's liveness lease to lapse and the controller to
        restart the node. A VP whose log is being opened is dropped once it is open
        (``virtual.vp_opening``)."""
        async with self._opening.lock:
            return self._drop(topic, vps, delete_data)

    def _drop(self, topic: str, vps: Sequence[int] | None, delete_data: bool) -> list[int]:
        dropped = [vp_id for vp_id in self._hosted if vp_id.topic == topic and (vps is None or vp_id.vp in vps)]
        discarded = []
        for vp_id in dropped:
            hosted = self._hosted.pop(vp_id)
            if delete_data:
                discarded.append(hosted.discard())
            else:
                hosted.close()
            self._records.forget(vp_id)
            self._vp_changed_seq.pop(vp_id, None)
            self._housekeeper.forget(vp_id)
        if vps is None and topic in self._topics:
            for feed in self._topics.pop(topic).feeds.values():
                feed.close()
            self._seal_candidates.pop(topic, None)
        self._roles_changed(topic)
        if discarded:
            removal = asyncio.get_running_loop().create_task(asyncio.to_thread(remove_trees, discarded))
            self._removals.add(removal)
            removal.add_done_callback(self._removals.discard)
        return [vp_id.vp for vp_id in dropped]

    def _roles_changed(self, topic: str) -> None:
        """Rebuild the role indexes; start or stop the topic's feeds and the replication sessions to match."""
        self._leaders[topic] = {vp_id.vp: hosted for vp_id, hosted in self._hosted.items()
                                if vp_id.topic == topic and hosted.core.is_leader}
        self._followers = {}
        for hosted in self._hosted.values():
            if hosted.core.role is VpRole.FOLLOWER:
                self._followers.setdefault(hosted.core.leader_id, []).append(hosted)
        entry = self._topics.get(topic)
        if entry is not None:
            leads = bool(self._leaders[topic])
            if leads and not entry.feeds:
                entry.feeds = {p: self._new_feed(entry, p) for p in range(entry.config.partitions)}
                for feed in entry.feeds.values():
                    feed.start()
            elif not leads and entry.feeds:
                for feed in entry.feeds.values():
                    feed.close()
                entry.feeds = {}
            for feed in entry.feeds.values():
                feed.wake()
        leaders = set(self._followers)
        for leader in leaders - set(self._fetchers):
            fetcher = ReplicaFetcher(self._spec.node_id, leader, lambda leader=leader: self._followers_of(leader),
                                     lambda leader=leader: self._peers.read_node(leader),
                                     lambda leader=leader: self._peers.forget_read_node(leader), self._config)
            self._fetchers[leader] = fetcher
            fetcher.start()
        for leader in set(self._fetchers) - leaders:
            self._fetchers.pop(leader).close()
        for fetcher in self._fetchers.values():
            fetcher.wake()
        self._changes.notify()

    def _new_feed(self, entry: _Topic, partition: int) -> PartitionFeed:
        topic = entry.view.topic
        return PartitionFeed(
            entry.view, partition, self._spec.node_id, self._config.feeder,
            leaders=lambda: self._leaders_of(topic),
            physical=lambda replica_id: self._peers.replica(topic, partition, replica_id),
            open_store=self._records.store,
            record_loss=lambda lost: self._records.record_loss(topic, lost),
            on_fed=self._check_seal,
        )

    def _leaders_of(self, topic: str) -> dict[int, HostedVp]:
        return self._leaders.get(topic, {})

    def _followers_of(self, leader: str) -> list[HostedVp]:
        return self._followers.get(leader, [])

    # --- reshards -----------------------------------------------------------------------

    async def hold(self, topic: str, token: str, parents: Sequence[int], wait_ms_max: int) -> dict[int, tuple[int, int]]:
        """Hold back the records of ``parents`` in every stream of ``topic``; per partition (cut offered, hold key revision)."""
        entry = self._topics.get(topic)
        leaders = self._leaders_of(topic)
        if entry is None or not entry.feeds or not set(parents) & set(leaders):
            raise UnknownVirtualPartition(
                f"read node {self._spec.node_id} leads none of {topic} VPs {list(parents)}: re-read the VP states and retry")
        join_trace.JOIN_TRACES.record(topic, "hold_received", detail=self._spec.node_id)
        held = await asyncio.gather(*(feed.hold(token, frozenset(parents), wait_ms_max)
                                      for feed in entry.feeds.values()))
        join_trace.JOIN_TRACES.record(topic, "hold_offered", detail=self._spec.node_id)
        return dict(zip(entry.feeds, held))

    async def release(self, topic: str, token: str, epoch: SplitEpoch | None = None,
                      children: Sequence[VirtualPartitionState] = ()) -> None:
        """End reshard ``token``'s hold; with the stored ``epoch`` the streams adopt it at once."""
        entry = self._topics.get(topic)
        if entry is None:
            return
        stored = None if epoch is None else (epoch, tuple(children))
        for feed in entry.feeds.values():
            feed.release(token, stored)

    async def host_and_release(self, topic: str, config: TopicConfig, states: Sequence[VirtualPartitionState],
                               token: str, epoch: SplitEpoch, children: Sequence[VirtualPartitionState]
                               ) -> dict[int, str]:
        """``host`` a reshard's children led here, then ``release`` its hold with the stored ``epoch``.

        One call where a reshard made two to a node that holds a parent and leads a child (the
        common case: children go round-robin over the read nodes). In this order the streams
        adopt the epoch already serving the children led here, so they go back to the cut once
        and feed them from there; released first, a stream could pass the cut dropping the
        children's records and go back for them once they are hosted (``partition_feed``:
        a VP served below the stream's position makes it resume). The release happens even
        if hosting raised: the epoch is stored, and the streams must not hold on for nothing.
        """
        try:
            return await self.host(topic, config, states)
        finally:
            await self.release(topic, token, epoch, children)

    # --- replication (other read nodes' calls) -------------------------------------------

    async def replica_fetch(self, request: SessionRequest, wait_ms_max: int) -> SessionAnswer:
        """Answer one request of a node pair's fetch session; long poll while none of its VPs has
        news (see ``replication``)."""
        opened = self._sessions.open(request)
        if opened is None:
            return SessionAnswer(SESSION_UNKNOWN, ())
        session_id, session = opened
        deadline = time.monotonic() + wait_ms_max / 1000
        seen = self._change_seq
        answers = self._sessions.first_answers(request, session, self._hosted.get, wall_ms())
        while not answers:
            if not await self._changes.next_change(deadline - time.monotonic()):
                break
            since, seen = seen, self._change_seq
            answers = self._sessions.later_answers(
                session, lambda vp_id: self._vp_changed_seq.get(vp_id, 0) > since, self._hosted.get, wall_ms())
        return SessionAnswer(session_id, tuple(answers))

    # --- consumers ----------------------------------------------------------------------

    async def fetch(self, reads: Sequence[ConsumerRead], bytes_max: int, wait_ms_max: int = 0) -> list[ConsumerAnswer]:
        """Whole batches below the HW for every VP of ``reads``; long poll until one has data.

        ``bytes_max`` bounds the whole answer (at least one batch of the first VP with data).
        A VP this node does not host, or whose replica may not serve reads, answers an error
        (``consumer_reads``).
        """
        delay_ms = max((h.fault.fault.delay_ms for h in (self._hosted.get(r.vp_id) for r in reads) if h), default=0)
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        await self._changes.wait_until(lambda: consumer_reads.any_readable(reads, self._hosted.get, wall_ms()),
                                       wait_ms_max / 1000)
        # The CPU of building the answer, for the load report: a synchronous call, so this thread's
        # CPU clock counts it and no other task's (what it leaves out: ``virtual.load_meter``).
        started_ns = time.thread_time_ns()
        now_ms = wall_ms()
        answers = consumer_reads.read_all(reads, bytes_max, self._hosted.get, self._spec.node_id, now_ms)
        consumer_reads.observe_end_to_end(reads, answers, self._end_to_end_latency, now_ms)
        self._load.fetch_cpu_ns_total += time.thread_time_ns() - started_ns
        if self._first_records_served_ms is None and any(answer.read is not None and answer.read.data
                                                         for answer in answers):
            self._first_records_served_ms = wall_ms()
        return answers

    def _end_to_end_latency(self, topic: str) -> LatencyHistogram:
        latency = self._end_to_end.get(topic)
        if latency is None:
            latency = self._end_to_end[topic] = LatencyHistogram(END_TO_END_LATENCY_BUCKETS_S)
        return latency

    async def list_offsets(self, vp_ids: Sequence[VpId]) -> list[tuple[int, int] | MafkaError]:
        """Per VP: (log start offset, HW), or the error that keeps this replica from answering."""
        return consumer_reads.list_offsets(vp_ids, self._hosted.get, self._spec.node_id, wall_ms())

    async def lag_positions(self, vp_ids: Sequence[VpId], committed: dict[int, int]) -> list[tuple[int, int | None] | MafkaError]:
        """Per VP: (HW, the timestamp a group at offset ``committed[vp]`` lags from), for ``mafka4
        group describe``'s lag in seconds (``consumer_reads.lag_positions``, ``metrics.group_lag``)."""
        return consumer_reads.lag_positions(vp_ids, committed, self._hosted.get, self._spec.node_id, wall_ms())

    async def offsets_for_time(self, vp_ids: Sequence[VpId], timestamp_ms: int) -> list[int | None | MafkaError]:
        """Per VP: its first offset at or after ``timestamp_ms`` below the HW (None: none)."""
        return consumer_reads.offsets_for_time(vp_ids, timestamp_ms, self._hosted.get, self._spec.node_id)

    # --- description and faults -----------------------------------------------------------

    async def describe(self, topic: str | None = None) -> dict:
        now_ms = wall_ms()
        vps = {str(vp_id): hosted.describe(now_ms) for vp_id, hosted in sorted(
            self._hosted.items(), key=lambda item: (item[0].topic, item[0].vp)) if topic is None or vp_id.topic == topic}
        feeds = {name: {p: feed.describe() for p, feed in sorted(entry.feeds.items())}
                 for name, entry in self._topics.items() if topic is None or name == topic}
        return {"node_id": self._spec.node_id, "pid": os.getpid(), "vps": vps, "feeds": feeds,
                "replication": {leader: dict(fetcher.stats) for leader, fetcher in self._fetchers.items()},
                "hosted_vps": len(self._hosted), "first_records_served_ms": self._first_records_served_ms,
                "housekeeping": self._housekeeper.describe(),
                "load": None if self._load.last_report is None else self._load.last_report.to_json()}

    async def describe_vps(self, vp_ids: Sequence[VpId]) -> list[dict | None]:
        now_ms = wall_ms()
        return [None if (hosted := self._hosted.get(vp_id)) is None else hosted.describe(now_ms) for vp_id in vp_ids]

    async def set_stage_trace(self, topic: str, enabled: bool) -> None:
        """Start (or stop and discard) the stage trace of ``topic``'s VPs on this node (``mafka4.stage_trace``)."""
        trace = StageTrace() if enabled else None
        if trace is None:
            self._stage_traces.pop(topic, None)
        else:
            self._stage_traces[topic] = trace
        for vp_id, hosted in self._hosted.items():
            if vp_id.topic == topic:
                hosted.trace = trace

    async def take_stage_trace(self, topic: str) -> dict:
        """``topic``'s stage-trace rows on this node since the last take (empty when not traced)."""
        trace = self._stage_traces.get(topic)
        return trace.take() if trace is not None else {"rows": [], "dropped": 0}

    async def set_join_trace(self, topic: str, enabled: bool) -> None:
        """Start (or stop and discard) the join trace of ``topic`` in this node's process: the rows of
        the groups it coordinates and of the splits they ask for (``mafka4.join_trace``)."""
        # Through the module: an actor's class travels pickled, and a global it named would be a copy.
        if enabled:
            join_trace.JOIN_TRACES.start(topic)
        else:
            join_trace.JOIN_TRACES.stop(topic)

    async def take_join_trace(self, topic: str) -> dict:
        """``topic``'s join-trace rows in this node's process since the last take (empty when not traced)."""
        return join_trace.JOIN_TRACES.take(topic)

    async def set_fault(self, vp_id: VpId, delay_ms: int = 0, paused: bool = False) -> dict:
        """Delay or pause one hosted VP replica's replication and serving (``mafka4.faults``); (0, False) clears it."""
        hosted = self._hosted.get(vp_id)
        if hosted is None:
            raise consumer_reads.not_hosted(vp_id, self._spec.node_id)
        fault = hosted.fault.set(delay_ms, paused)
        logger.warning("%s: replica on %s fault set to %s", vp_id, self._spec.node_id, fault)
        for fetcher in self._fetchers.values():
            fetcher.wake()
        return fault.describe()

    async def set_partition(self, fault: NetworkFault) -> dict:
        """Cut or slow the network between this node and others (``mafka4.partition_gate``); an empty
        ``NetworkFault`` heals it."""
        self._peers.gate.set(fault)
        logger.warning("read node %s: network fault set to %s", self._spec.node_id, fault.describe())
        return fault.describe()

    async def set_log_dir_bytes_max(self, bytes_max: int | None) -> dict:
        """Bound the node's log directory (``ReadNodeConfig.log_dir_bytes_max``; None: no bound, 0: a
        full disk) until the node restarts; what the node holds now."""
        self._budget.set_bytes_max(bytes_max)
        logger.warning("read node %s: log_dir_bytes_max set to %s", self._spec.node_id, bytes_max)
        return self._budget.describe(wall_ms())

    async def set_feed_fault(self, topic: str, paused: bool) -> dict:
        """Pause (or resume) this node's feed streams of ``topic``, as if the node had stopped feeding it."""
        entry = self._topics.get(topic)
        if entry is None or not entry.feeds:
            raise InvalidConfig(f"read node {self._spec.node_id} runs no feed stream of {topic!r}: it leads none of its VPs")
        for feed in entry.feeds.values():
            feed.paused = paused
            feed.wake()
        logger.warning("%s: feed streams on %s %s", topic, self._spec.node_id, "paused" if paused else "resumed")
        return {"paused": paused, "partitions": sorted(entry.feeds)}

    # --- the cores' follow-ups ----------------------------------------------------------

    def _on_ready(self, hosted: HostedVp, ready: Ready) -> None:
        if ready.write_risr is not None:
            self._records.risr_changed(hosted)
        if ready.wake:
            self._change_seq += 1
            self._vp_changed_seq[hosted.vp_id] = self._change_seq
            self._changes.notify()
            if hosted.core.is_leader:  # the HW moved: a closed parent may be complete now
                entry = self._topics.get(hosted.vp_id.topic)
                if entry is not None and entry.view.layout is not None and not entry.view.layout.is_active(hosted.vp_id.vp):
                    self._check_seal(hosted.vp_id.topic, hosted.vp_id.vp)

    def _check_seal(self, topic: str, vp: int) -> None:
        """Record the sealed end of a closed VP led here once it is complete (see the module docstring)."""
        vp_id = VpId(topic, vp)
        entry, hosted = self._topics.get(topic), self._hosted.get(vp_id)
        if entry is None or hosted is None or not hosted.core.is_leader or vp in entry.view.sealed:
            return
        layout, core = entry.view.layout, hosted.core
        if vp_id in self._sealing and not self._sealing[vp_id].done():
            return
        if (layout.exists(vp) and not layout.is_active(vp) and layout.is_sealed(vp, core.fed_through(layout.partitions))
                and core.high_watermark == core.log_end_offset):
            hosted.flush_now()  # sealed, it is never fed again: what it holds must survive a power loss
            self._sealing[vp_id] = asyncio.get_running_loop().create_task(
                self._seal(entry, vp_id, core.log_end_offset))

    async def _seal(self, entry: _Topic, vp_id: VpId, end_offset: int) -> None:
        if await self._records.record_sealed_end(vp_id, end_offset):
            await entry.view.refresh()

    # --- periodic work ------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        interval_s = self._config.housekeeping_interval_ms / 1000
        retention_s = self._config.retention_check_interval_ms / 1000
        last_retention = time.monotonic()
        while not self._closed:
            await asyncio.sleep(interval_s)
            retention_due = time.monotonic() - last_retention >= retention_s
            if retention_due:
                last_retention = time.monotonic()
            await self._housekeeper.housekeep(wall_ms(), retention_due)

    async def _leader_ticks(self) -> None:
        while not self._closed:
            await asyncio.sleep(LEADER_TICK_INTERVAL_S)
            now_ms = wall_ms()
            self._housekeeper.tick(now_ms)
            for topic, entry in list(self._topics.items()):
                for vp in self._closed_leaders(topic, entry):
                    self._check_seal(topic, vp)

    def _closed_leaders(self, topic: str, entry: _Topic) -> list[int]:
        """``topic``'s closed VPs led here and not sealed yet: computed again only when the node's
        leaders or the topic's metadata changed, so that a tick does not walk every leader."""
        leaders = self._leaders.get(topic, {})
        cached = self._seal_candidates.get(topic)
        if cached is None or cached[0] is not leaders or cached[1] != entry.view.generation:
            layout, sealed = entry.view.layout, entry.view.sealed
            closed = [vp for vp in leaders if not layout.is_active(vp) and vp not in sealed]
            cached = self._seal_candidates[topic] = (leaders, entry.view.generation, closed)
        return cached[2]

    def _measure_load(self) -> ReadNodeLoad | None:
        """The node's load since the last report (``ReadNodeRecords``' load reports). Every hosted VP
        replica counts, leader, follower or not yet given a role: each holds a log the node serves
        or will. Replicas of sealed VPs (as the topic's view knows them) are counted apart: they are
        never fed again and only draining or replaying consumers read them, so read-node scaling
        leaves them out (``metadata.read_node_load``). A retired VP is dropped from every node
        (``control.upkeep``); until then it counts as sealed. A closed VP not sealed yet counts as
        open: it is still fed up to its closing cut."""
        self._refresh_views_unfed()
        open_replicas, sealed_replicas = open_and_sealed(
            self._hosted, {topic: entry.view.sealed for topic, entry in self._topics.items()})
        return self._load.report(open_replicas, wall_ms(), monotonic_ms(), sealed_vp_replicas=sealed_replicas)

    def _refresh_views_unfed(self) -> None:
        """Read again, in the background, the views older than ``metadata_max_age_ms`` of topics
        that this node runs no feed stream of (it only follows their VPs): no stream reads those
        again, so they would never learn that a VP's leader sealed it elsewhere, and the node
        would report its replica as open. A view's read is one etcd probe when nothing changed
        (``TopicView``); the next report sees what it read."""
        for topic, entry in self._topics.items():
            if not entry.feeds and entry.view.old:
                task = asyncio.get_running_loop().create_task(self._refresh_view_quietly(topic, entry.view))
                self._view_reads.add(task)
                task.add_done_callback(self._view_reads.discard)

    async def _refresh_view_quietly(self, topic: str, view: TopicView) -> None:
        try:
            await view.refresh()  # one read in flight per view, shared
        except Exception as error:  # etcd away or the topic deleted: the view keeps what it knew
            logger.debug("read node %s: view of %s not read again for the load report: %s: %s",
                         self._spec.node_id, topic, type(error).__name__, error)

    def _feed_positions(self) -> dict[FeedKey, int]:
        """Where each feed stream stands, for physical retention (``ReadNodeRecords``)."""
        return {(name, p): position for name, entry in self._topics.items() for p, feed in entry.feeds.items()
                if (position := feed.position_needed()) is not None}
