"""The controller: one active process per cluster that keeps partitions and the read path led and served.

Runs as its own process (``mafka4.runtime.controller_process``). Which process is active is the
election's (``controller_election``): while it is not, the loop campaigns; while it is, the loop
serves (below); when it loses the key (``SteppedDown``) it steps down and campaigns again. This
module is the event loop: watches, queue, reconciles, retries, and dispatching each item to the
code that repairs it.

**Liveness.** Replicas hold ``keys.replica_liveness`` under their own leases; nodes hold
``keys.node``. The active controller learns changes from watches on both prefixes (``watches``),
started at the revision of a full read, and reconciles in full when it becomes active, after a
watch broke (etcd went away and came back) and every ``reconcile_interval_ms``. A replica is dead
only if its liveness key is gone *and* its actor does not answer a ping within
``ping_timeout_ms``: after an etcd outage leases may expire while every actor is alive, and
those partitions must keep their leaders.

**Physical partitions** are repaired by ``PartitionRepairs`` (``partition_repairs.py``,
decisions in ``partition_decisions.py``): failover, restarts and replacements, roles announced.
On becoming active every partition is handled once. A partition whose handling is incomplete is
retried every ``retry_interval_ms``.

**The read path** of mafka4-mode topics is kept alive the same way, by ``ReadPathControl``
(``read_path_repairs.py``, decisions in ``read_path_decisions.py``): a watch on the read nodes'
liveness keys (``keys.read_nodes_prefix``) and the node registrations mark read nodes dirty; a
read node whose actor is dead (key gone, no answer to a ping) is started again and every VP with
a replica there is examined: a VP whose leader is gone or restarted fails over to a RISR member,
and every live replica is told its role. Dirty VPs of one topic are handled together. They
share the queue, the reconciles and the retries of the physical partitions; on activation every
VP is handled once, otherwise only those with a replica on a node without its liveness key.

**Read-node scaling** (``ControllerConfig.read_node_scaling``, off by default) runs inside the
upkeep (``read_scaling``): it asks Ray's autoscaler for read nodes and moves VP replicas
between live read nodes; a read node it released and stopped is not started again here.

**Metrics.** What the controller decides is counted in ``counters`` (``metrics.controller_counters``:
controller elections won, partition and VP leader elections, reshards, read-node scaling
decisions), which its process serves to Prometheus at ``metrics_address``; the active controller
names that address in its election value (``keys.controller``), where ``mafka4 status`` finds it.

**Intents.** While active, the controller runs an ``IntentWorker`` thread that executes the
clients' intents (create or delete a topic, split, merge, scale: ``metadata.intents``),
fenced by the controller's key; VPs that a read node did not take come back to this loop's
queue for repair.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from mafka4.clocks import monotonic_ms
from mafka4.coordinator.control.controller_election import ControllerElection, SteppedDown
from mafka4.coordinator.control.intent_worker import IntentWorker
from mafka4.coordinator.control.partition_repairs import PartitionId, PartitionRepairs
from mafka4.coordinator.control.read_path_decisions import (READ_NODE_EVENTS, ReadNodeItem, VirtualPartitionItem,
                                                            item_for_event)
from mafka4.coordinator.control.read_path_repairs import ReadPathControl
from mafka4.coordinator.control.read_scaling import RayReadNodeActions, RayResourceRequests, ReadScaling
from mafka4.coordinator.control.upkeep import ReadPathUpkeep
from mafka4.coordinator.control.watches import Watches
from mafka4.errors import CoordinatorUnavailable, MetadataConflict, UnknownTopic
from mafka4.limits import CONTROLLER_ETCD_BACKOFF_S, CONTROLLER_WAIT_SLICE_S
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.physical.topics import TopicStore

log = logging.getLogger("mafka4.controller")

# What the controller's queue holds: a physical partition, a read node or a VP.
Work = PartitionId | ReadNodeItem | VirtualPartitionItem


class Controller:
    def __init__(self, etcd_endpoint: str, cluster: str, controller_id: str, config: ControllerConfig = ControllerConfig(),
                 counters: ControllerCounters | None = None, metrics_address: str | None = None):
        self.cluster, self.controller_id, self.config = cluster, controller_id, config
        # What it decides, counted for its process's metrics (``metrics.controller_counters``).
        self.counters = counters if counters is not None else ControllerCounters(controller_id)
        self._store = MetadataStore(etcd_endpoint)
        self._topics = TopicStore(self._store, cluster)
        self._events: queue.Queue = queue.Queue(maxsize=config.event_queue_max)
        self._watches = Watches(MetadataStore(etcd_endpoint), self._events)
        self._election = ControllerElection(self._store, etcd_endpoint, cluster, controller_id, config,
                                            self._watches, self._events, metrics_address)
        self._partitions = PartitionRepairs(self._store, cluster, etcd_endpoint, config, self.counters)
        self._read_path = ReadPathControl(self._store, cluster, etcd_endpoint, config, counters=self.counters)
        self._etcd_endpoint = etcd_endpoint
        scaling = (ReadScaling(self._store, cluster, config, RayResourceRequests(), RayReadNodeActions(cluster),
                               self.counters) if config.read_node_scaling else None)
        self._upkeep = ReadPathUpkeep(self._store, cluster, config, scaling)
        self._next_upkeep_ms = 0
        self._intents: IntentWorker | None = None
        self._write_nodes: set[str] = set()
        self._read_nodes: set[str] = set()
        self._dirty: set[Work] = set()
        self._pending: set[Work] = set()
        self._next_reconcile_ms = self._next_retry_ms = 0
        self._etcd_down_since: float | None = None

    @property
    def active(self) -> bool:
        """True while this controller is the active one (what the controller's process runs beside it asks)."""
        return self._election.active

    # --- main loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Campaign and, while active, handle failures, until ``stop`` is set; then resign."""
        try:
            while not stop.is_set():
                try:
                    if self._election.active:
                        self._serve()
                    else:
                        self._campaign()
                    if self._etcd_down_since is not None:
                        log.info("etcd answers again after %.1f s", time.monotonic() - self._etcd_down_since)
                        self._etcd_down_since = None
                except CoordinatorUnavailable as error:
                    if self._etcd_down_since is None:
                        self._etcd_down_since = time.monotonic()
                        log.warning("etcd unavailable; metadata changes wait: %s", error)
                    self._watches.broken = True
                    stop.wait(CONTROLLER_ETCD_BACKOFF_S)
                except SteppedDown as reason:
                    self._step_down(str(reason))
        finally:
            self._step_down("stopping")
            self._watches.close()
            self._store.close()
            self._election.close()

    def _campaign(self) -> None:
        if not self._election.campaign():
            return
        self.counters.won(self._election.controller_epoch)
        self._reconcile(activation=True)
        self._intents = IntentWorker(self._etcd_endpoint, self.cluster, self.config, self._election.fence,
                                     self._push_repairs, self.counters)
        self._intents.start()

    def _step_down(self, reason: str) -> None:
        self._election.step_down(reason)
        self.counters.stepped_down()
        if self._intents is not None:
            self._intents.stop()
            self._intents = None
        self._watches.cancel_all()
        self._dirty.clear()  # a later term starts with a full reconcile
        self._pending.clear()

    def _push_repairs(self, items: set[VirtualPartitionItem]) -> None:
        """VPs the intent worker left unhosted: examine them on this loop (called from its thread)."""
        try:
            self._events.put_nowait(("repairs", list(items)))
        except queue.Full:
            self._watches.overflowed = True  # a full reconcile examines them

    # --- serving --------------------------------------------------------------------------

    def _serve(self) -> None:
        if self._election.lease_expired():
            raise SteppedDown(f"lease not refreshed for {self.config.lease_ttl_s} s")
        now_ms = monotonic_ms()
        if self._watches.broken or self._watches.overflowed or now_ms >= self._next_reconcile_ms:
            self._reconcile(activation=False)
        if now_ms >= self._next_retry_ms:
            self._dirty |= self._pending
            self._next_retry_ms = now_ms + self.config.retry_interval_ms
        if now_ms >= self._next_upkeep_ms:
            self._next_upkeep_ms = now_ms + self.config.upkeep_interval_ms
            try:
                self._dirty |= self._upkeep.run(sorted(self._read_nodes), self._election.fence, now_ms,
                                                time.time_ns() // 1_000_000)
            except CoordinatorUnavailable:
                raise
            except Exception:  # a defect in upkeep must not stop failovers
                log.exception("read-path upkeep failed; trying again in %d ms", self.config.upkeep_interval_ms)
        self._drain_events(timeout_s=0 if self._dirty else CONTROLLER_WAIT_SLICE_S)
        while self._dirty and not self._election.lease_expired():
            self._handle(self._dirty.pop())

    def _drain_events(self, timeout_s: float) -> None:
        try:
            item = self._events.get(timeout=timeout_s) if timeout_s > 0 else self._events.get_nowait()
        except queue.Empty:
            return
        while True:
            self._on_events(*item)
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return

    def _on_events(self, kind: str, events: list) -> None:
        if kind == "repairs":
            self._dirty |= set(events)
            return
        for event in events:
            if kind == "liveness":
                parsed = keys.parse_replica_liveness(self.cluster, event.key)
                if parsed is None:
                    continue
                partition_id = parsed[:2]
                # A replica gone: maybe a failover. A replica back: an incomplete failover may finish now.
                if event.value is None or partition_id in self._pending:
                    self._dirty.add(partition_id)
            elif kind == READ_NODE_EVENTS:
                item = item_for_event(self.cluster, kind, event.key)
                if item is not None and (event.value is None or item in self._pending):
                    self._dirty.add(item)
            elif kind == "nodes":
                node_id = event.key[len(keys.nodes_prefix(self.cluster)):]
                if event.value is not None and event.value.get("role") == "write":
                    self._write_nodes.add(node_id)
                    self._dirty |= self._pending  # a replacement may have a node now
                elif event.value is not None and event.value.get("role") == "read":
                    self._read_nodes.add(node_id)
                    self._dirty.add(ReadNodeItem(node_id))  # start its actor if it does not run
                    self._dirty |= self._pending  # a VP waiting for its node may go on now
                elif event.value is None:
                    self._write_nodes.discard(node_id)
                    self._read_nodes.discard(node_id)

    def _reconcile(self, activation: bool) -> None:
        """Re-read everything, watch from there, and mark partitions, read nodes and VPs to handle.

        Which ones: ``PartitionRepairs.partitions_to_examine`` and
        ``ReadPathControl.items_to_examine`` (on activation, every one).
        """
        self._watches.cancel_all()
        cluster = self.cluster
        liveness, liveness_revision = self._store.get_prefix_at(keys.replicas_prefix(cluster))
        read_liveness, read_liveness_revision = self._store.get_prefix_at(keys.read_nodes_prefix(cluster))
        nodes, nodes_revision = self._store.get_prefix_at(keys.nodes_prefix(cluster))
        self._watches.start(keys.replicas_prefix(cluster), liveness_revision + 1, "liveness")
        self._watches.start(keys.read_nodes_prefix(cluster), read_liveness_revision + 1, READ_NODE_EVENTS)
        self._watches.start(keys.nodes_prefix(cluster), nodes_revision + 1, "nodes")
        self._write_nodes = {item.value["node_id"] for item in nodes if item.value.get("role") == "write"}
        self._read_nodes = {item.value["node_id"] for item in nodes if item.value.get("role") == "read"}
        names = self._topics.names()
        self._dirty |= self._partitions.partitions_to_examine(names, liveness, activation)
        read_path = self._read_path.items_to_examine(names, sorted(self._read_nodes), read_liveness, activation)
        self._dirty |= read_path
        self._next_reconcile_ms = monotonic_ms() + self.config.reconcile_interval_ms
        log.info("reconciled: %d partition(s) and read-path item(s) to examine (%d of the read path), "
                 "write nodes %s, read nodes %s", len(self._dirty), len(read_path), sorted(self._write_nodes),
                 sorted(self._read_nodes))

    # --- one item -------------------------------------------------------------------------

    def _handle(self, work: Work) -> None:
        if isinstance(work, VirtualPartitionItem):
            self._handle_vps(work)
            return
        try:
            if isinstance(work, ReadNodeItem) and work.node_id in self._upkeep.stopped_read_nodes():
                complete = True  # released by the read-node scaling: its actor stays stopped until Ray ends the node
            elif isinstance(work, ReadNodeItem):
                complete, restarted = self._read_path.handle_node(work, sorted(self._read_nodes))
                if restarted:
                    self._dirty |= self._read_path.vp_items_on(work.node_id)
            else:
                complete = self._partitions.handle_partition(*work, sorted(self._write_nodes), self._election.fence)
        except UnknownTopic:
            complete = True  # deleted meanwhile
        except (CoordinatorUnavailable, SteppedDown):
            self._pending.add(work)
            raise
        except MetadataConflict as conflict:  # a fenced read-path CAS kept failing: are we still active?
            self._pending.add(work)
            self._election.check_still_active()
            log.warning("%s: %s; retrying in %d ms", _describe(work), conflict, self.config.retry_interval_ms)
            return
        except Exception:  # a defect must not stop failovers of every other partition
            log.exception("%s: handling failed; retrying in %d ms", _describe(work), self.config.retry_interval_ms)
            complete = False
        if complete:
            self._pending.discard(work)
        else:
            self._pending.add(work)

    def _handle_vps(self, first: VirtualPartitionItem) -> None:
        """Handle ``first`` and every other dirty VP of its topic together (``ReadPathControl.handle_vps``)."""
        batch = {first} | {item for item in self._dirty
                           if isinstance(item, VirtualPartitionItem) and item.topic == first.topic}
        self._dirty -= batch
        try:
            outcome = self._read_path.handle_vps(first.topic, {item.vp for item in batch}, sorted(self._read_nodes),
                                                 self._election.fence, self._upkeep.gone_nodes(monotonic_ms()))
        except UnknownTopic:
            self._pending -= batch  # deleted meanwhile
            return
        except (CoordinatorUnavailable, SteppedDown):
            self._pending |= batch
            raise
        except MetadataConflict as conflict:
            self._pending |= batch
            self._election.check_still_active()
            log.warning("%s: %s; retrying in %d ms", first.topic, conflict, self.config.retry_interval_ms)
            return
        except Exception:  # a defect must not stop failovers of every other partition
            log.exception("%s: handling VPs %s failed; retrying in %d ms", first.topic, sorted(i.vp for i in batch),
                          self.config.retry_interval_ms)
            self._pending |= batch
            return
        incomplete = {VirtualPartitionItem(first.topic, vp) for vp in outcome.incomplete}
        self._pending -= batch - incomplete
        self._pending |= incomplete
        self._dirty |= outcome.nodes


def _describe(work: Work) -> str:
    return str(work) if isinstance(work, (ReadNodeItem, VirtualPartitionItem)) else "%s-%d" % work
