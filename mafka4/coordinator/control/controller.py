"""The controller: one active process per cluster that elects partition leaders after failures.

Runs as its own process (``mafka4.runtime.controller_process``).

**Election.** Candidates race for ``keys.controller`` in one etcd transaction that creates it
under the candidate's lease only while it is absent and moves ``keys.controller_epoch`` one up
(compare-and-swap, so the epoch never decreases). The winner's key revision fences every
partition write it makes (``MetadataStore.compare_and_swap(fence=...)``): a controller whose
key expired writes nothing. Standbys watch the key and campaign when it disappears. A thread
refreshes the lease every third of ``lease_ttl_s`` (``lease_holder.LeaseThread``); after a whole
TTL without a confirmed refresh the controller steps down (``lease.LeaseLife.expired``). SIGTERM
revokes the lease so a standby takes over at once.

**Liveness.** Replicas hold ``keys.replica_liveness`` under their own leases; nodes hold
``keys.node``. The active controller learns changes from watches on both prefixes, started
at the revision of a full read, and reconciles in full when it becomes active, after a watch
broke (etcd went away and came back) and every ``reconcile_interval_ms``. A replica is dead
only if its liveness key is gone *and* its actor does not answer a ping within
``ping_timeout_ms``: after an etcd outage leases may expire while every actor is alive, and
those partitions must keep their leaders.

**Failover** of one partition (``_handle_partition``): read its key, find the live replicas,
ask ``partition_decisions.decide_partition``; if it is offline but dead in-sync replicas can be restarted
on their nodes, restart them and decide again with them as *fresh*. Write a changed state with
a fenced compare-and-swap on the key's mod_revision (re-read and decide again on conflict:
the leader also writes the ISR), tell the leader ``become_leader`` and the followers
``become_follower``, restart dead replicas on their nodes and start replacements (both catch
up from the leader; its ISR expansion records them in etcd), and stop replaced replicas.
On becoming active every partition is handled once, which also repeats the role notices a
previous controller may not have finished (repeated notices are no-ops in the actor). A
partition whose handling is incomplete is retried every ``retry_interval_ms``.

**The read path** of mafka4-mode topics is kept alive the same way, by ``ReadPathControl``
(``read_path_repairs.py``, decisions in ``read_path_decisions.py``): a watch on the read nodes'
liveness keys (``keys.read_nodes_prefix``) and the node registrations mark read nodes dirty; a
read node whose actor is dead (key gone, no answer to a ping) is started again and every VP with
a replica there is examined: a VP whose leader is gone or restarted fails over to a RISR member,
and every live replica is told its role. Dirty VPs of one topic are handled together. They
share the queue, the reconciles and the retries of the physical partitions; on activation every
VP is handled once, otherwise only those with a replica on a node without its liveness key.

**Intents.** While active, the controller runs an ``IntentWorker`` thread that executes the
clients' intents (create or delete a topic, split, merge, scale: ``metadata.intents``),
fenced by the controller's key; VPs that a read node did not take come back to this loop's
queue for repair.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time

from mafka4.clocks import monotonic_ms
from mafka4.coordinator.control.intent_worker import IntentWorker
from mafka4.coordinator.control.partition_decisions import (Campaign, PartitionDecision, decide_campaign,
                                                            decide_partition)
from mafka4.coordinator.control.read_path_decisions import (READ_NODE_EVENTS, ReadNodeItem, VirtualPartitionItem,
                                                            item_for_event)
from mafka4.coordinator.control.read_path_repairs import ReadPathControl
from mafka4.coordinator.control.replica_control import ReplicaControl
from mafka4.coordinator.control.upkeep import ReadPathUpkeep
from mafka4.errors import CoordinatorUnavailable, MetadataConflict, UnknownTopic
from mafka4.limits import (CONTROLLER_ETCD_BACKOFF_S, CONTROLLER_WAIT_SLICE_S, ETCD_REQUEST_TIMEOUT_S_DEFAULT,
                           LEASE_REFRESHES_PER_TTL, ControllerConfig)
from mafka4.metadata import keys
from mafka4.metadata.lease_holder import LeaseHolder, LeaseThread
from mafka4.metadata.store import Fence, MetadataStore
from mafka4.physical.partition_state import PartitionState, TopicMetadata
from mafka4.physical.topics import TopicStore

log = logging.getLogger("mafka4.controller")

PartitionId = tuple[str, int]
# What the controller's queue holds: a physical partition, a read node or a VP.
Work = PartitionId | ReadNodeItem | VirtualPartitionItem


class _SteppedDown(Exception):
    """The controller's key is gone or another controller's: stop acting at once."""


class _Watches:
    """The watches of this controller, on a client of their own (a failed call on a client ends its watches).

    Callbacks only queue events; when the queue is full the loop reconciles in full instead.
    """

    def __init__(self, store: MetadataStore, events: "queue.Queue"):
        self._store, self._events = store, events
        self._ids: list[int] = []
        self.broken = False
        self.overflowed = False

    def start(self, prefix: str, start_revision: int | None, kind: str) -> None:
        self._ids.append(self._store.watch_prefix(
            prefix, lambda events: self._push((kind, events)), self._on_broken, start_revision))

    @property
    def watching(self) -> bool:
        return bool(self._ids) and not self.broken

    def _push(self, item) -> None:
        try:
            self._events.put_nowait(item)
        except queue.Full:
            self.overflowed = True

    def _on_broken(self) -> None:
        self.broken = True
        self._push(("broken", []))

    def cancel_all(self) -> None:
        for watch_id in self._ids:
            self._store.cancel_watch(watch_id)
        self._ids.clear()
        self.broken = self.overflowed = False
        while not self._events.empty():  # events of cancelled watches
            self._events.get_nowait()

    def close(self) -> None:
        self.cancel_all()
        self._store.close()


class Controller:
    def __init__(self, etcd_endpoint: str, cluster: str, controller_id: str, config: ControllerConfig = ControllerConfig()):
        self.cluster, self.controller_id, self.config = cluster, controller_id, config
        self._store = MetadataStore(etcd_endpoint)
        # A refresh must fail fast enough for the next one to come within the TTL.
        self._lease_store = MetadataStore(
            etcd_endpoint, timeout_s=min(ETCD_REQUEST_TIMEOUT_S_DEFAULT, config.lease_ttl_s / LEASE_REFRESHES_PER_TTL))
        self._topics = TopicStore(self._store, cluster)
        self._events: queue.Queue = queue.Queue(maxsize=config.event_queue_max)
        self._watches = _Watches(MetadataStore(etcd_endpoint), self._events)
        self._control = ReplicaControl(cluster, etcd_endpoint, config)
        self._read_path = ReadPathControl(self._store, cluster, etcd_endpoint, config)
        self._etcd_endpoint = etcd_endpoint
        self._upkeep = ReadPathUpkeep(self._store, cluster, config)
        self._next_upkeep_ms = 0
        self._intents: IntentWorker | None = None
        self._lease: LeaseThread | None = None
        self._fence: Fence | None = None
        self._controller_epoch: int | None = None
        self._unrevoked: list[LeaseThread] = []  # leases of past terms that etcd was not there to revoke
        self._write_nodes: set[str] = set()
        self._read_nodes: set[str] = set()
        self._dirty: set[Work] = set()
        self._pending: set[Work] = set()
        self._next_reconcile_ms = self._next_retry_ms = 0
        self._etcd_down_since: float | None = None

    @property
    def active(self) -> bool:
        return self._fence is not None

    # --- main loop ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Campaign and, while active, handle failures, until ``stop`` is set; then resign."""
        try:
            while not stop.is_set():
                try:
                    if self.active:
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
                except _SteppedDown as reason:
                    self._step_down(str(reason))
        finally:
            self._step_down("stopping")
            self._watches.close()
            for store in (self._store, self._lease_store):
                store.close()

    def _step_down(self, reason: str) -> None:
        if self._lease is not None:
            log.warning("controller %s steps down (epoch %s): %s", self.controller_id, self._controller_epoch, reason)
            if not self._lease.close():
                self._unrevoked.append(self._lease)
        if self._intents is not None:
            self._intents.stop()
            self._intents = None
        self._lease = self._fence = None
        self._watches.cancel_all()
        self._dirty.clear()  # a later term starts with a full reconcile
        self._pending.clear()

    # --- election -------------------------------------------------------------------------

    def _campaign(self) -> None:
        # A key of our own past term would otherwise block everyone, us included, for a TTL.
        self._unrevoked = [lease for lease in self._unrevoked if not lease.close()]
        key, epoch_key = keys.controller(self.cluster), keys.controller_epoch(self.cluster)
        # One read of both keys (the epoch key shares the controller key's prefix).
        items, revision = self._store.get_prefix_at(key)
        current = next((item for item in items if item.key == key), None)
        counter = next((item for item in items if item.key == epoch_key), None)
        decision = decide_campaign(current.value if current else None, counter.value if counter else None)
        if not isinstance(decision, Campaign):
            self._wait_for_vacancy(revision)
            return
        lease = LeaseThread(LeaseHolder(self._lease_store, self.config.lease_ttl_s, "controller lease"), "controller-lease")
        # The pid lets an operator (or a chaos run) find the active controller's process.
        value = {"controller_id": self.controller_id, "controller_epoch": decision.controller_epoch, "pid": os.getpid()}
        swaps = {epoch_key: (decision.controller_epoch, counter.mod_revision if counter else 0)}
        granted = lease.holder.grant()
        try:
            revision = self._store.create_leased(key, value, granted, swaps)
        except CoordinatorUnavailable:
            self._unrevoked.append(lease)  # the key may exist under it, unanswered: revoke it before campaigning again
            raise
        if revision is None:
            lease.close()  # another candidate won the race
            return
        lease.start()
        self._lease, self._fence, self._controller_epoch = lease, (key, revision), decision.controller_epoch
        log.info("controller %s is active with controller epoch %d", self.controller_id, decision.controller_epoch)
        self._reconcile(activation=True)
        self._intents = IntentWorker(self._etcd_endpoint, self.cluster, self.config, self._fence,
                                     lambda items: self._push_repairs(items))
        self._intents.start()

    def _push_repairs(self, items: set[VirtualPartitionItem]) -> None:
        """VPs the intent worker left unhosted: examine them on this loop (called from its thread)."""
        try:
            self._events.put_nowait(("repairs", list(items)))
        except queue.Full:
            self._watches.overflowed = True  # a full reconcile examines them

    def _wait_for_vacancy(self, read_revision: int) -> None:
        """Sleep until the controller key is deleted, or a TTL passed (then look again)."""
        key = keys.controller(self.cluster)
        if not self._watches.watching:
            self._watches.cancel_all()
            # From just after our read: a deletion before the watch exists is still delivered.
            self._watches.start(key, read_revision + 1, "controller")
        deadline = time.monotonic() + self.config.lease_ttl_s
        while time.monotonic() < deadline:
            try:
                kind, events = self._events.get(timeout=CONTROLLER_WAIT_SLICE_S)
            except queue.Empty:
                continue
            if kind == "broken" or any(e.key == key and e.value is None for e in events):
                return

    def _check_still_active(self) -> None:
        """Raise ``_SteppedDown`` unless our controller key is still the one we created."""
        current = self._store.get(self._fence[0])
        if current is None or current.mod_revision != self._fence[1]:
            raise _SteppedDown("the controller key expired or belongs to another controller")

    # --- serving --------------------------------------------------------------------------

    def _serve(self) -> None:
        if self._lease.holder.expired():
            raise _SteppedDown(f"lease not refreshed for {self.config.lease_ttl_s} s")
        now_ms = monotonic_ms()
        if self._watches.broken or self._watches.overflowed or now_ms >= self._next_reconcile_ms:
            self._reconcile(activation=False)
        if now_ms >= self._next_retry_ms:
            self._dirty |= self._pending
            self._next_retry_ms = now_ms + self.config.retry_interval_ms
        if now_ms >= self._next_upkeep_ms:
            self._next_upkeep_ms = now_ms + self.config.upkeep_interval_ms
            try:
                self._dirty |= self._upkeep.run(sorted(self._read_nodes), self._fence, now_ms, time.time_ns() // 1_000_000)
            except CoordinatorUnavailable:
                raise
            except Exception:  # a defect in upkeep must not stop failovers
                log.exception("read-path upkeep failed; trying again in %d ms", self.config.upkeep_interval_ms)
        self._drain_events(timeout_s=0 if self._dirty else CONTROLLER_WAIT_SLICE_S)
        while self._dirty and not self._lease.holder.expired():
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
        """Re-read everything, watch from there, and mark partitions to handle.

        On activation every partition is handled (its roles are announced again); otherwise
        only partitions with a replica whose liveness key is missing. The same for the read
        path (``ReadPathControl.items_to_examine``).
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
        registered = {keys.parse_replica_liveness(cluster, item.key) for item in liveness}
        names = self._topics.names()
        for name in names:
            prefix = keys.physical_prefix(cluster, name)
            for item in self._store.get_prefix(prefix):
                state = PartitionState.from_json(int(item.key[len(prefix):]), item.value)
                if activation or any((name, state.partition, r) not in registered for r in state.replicas):
                    self._dirty.add((name, state.partition))
        read_path = self._read_path.items_to_examine(names, sorted(self._read_nodes), read_liveness, activation)
        self._dirty |= read_path
        self._next_reconcile_ms = monotonic_ms() + self.config.reconcile_interval_ms
        log.info("reconciled: %d partition(s) and read-path item(s) to examine (%d of the read path), "
                 "write nodes %s, read nodes %s", len(self._dirty), len(read_path), sorted(self._write_nodes),
                 sorted(self._read_nodes))

    # --- one partition --------------------------------------------------------------------

    def _handle(self, work: Work) -> None:
        if isinstance(work, VirtualPartitionItem):
            self._handle_vps(work)
            return
        try:
            if isinstance(work, ReadNodeItem):
                complete, restarted = self._read_path.handle_node(work, sorted(self._read_nodes))
                if restarted:
                    self._dirty |= self._read_path.vp_items_on(work.node_id)
            else:
                complete = self._handle_partition(*work)
        except UnknownTopic:
            complete = True  # deleted meanwhile
        except (CoordinatorUnavailable, _SteppedDown):
            self._pending.add(work)
            raise
        except MetadataConflict as conflict:  # a fenced read-path CAS kept failing: are we still active?
            self._pending.add(work)
            self._check_still_active()
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
                                                 self._fence, self._upkeep.gone_nodes(monotonic_ms()))
        except UnknownTopic:
            self._pending -= batch  # deleted meanwhile
            return
        except (CoordinatorUnavailable, _SteppedDown):
            self._pending |= batch
            raise
        except MetadataConflict as conflict:
            self._pending |= batch
            self._check_still_active()
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

    def _handle_partition(self, topic: str, partition: int) -> bool:
        """Bring one partition to a live leader and live replicas; True if nothing is left to do."""
        key = keys.physical_partition(self.cluster, topic, partition)
        fresh: set[str] = set()
        for _ in range(self.config.cas_attempts_max):
            metadata = self._topics.get(topic)
            current = self._store.get(key)
            if current is None:
                return True
            state = PartitionState.from_json(partition, current.value)
            live = self._live_replicas(topic, state) | fresh
            decision = decide_partition(state, live, sorted(self._write_nodes), metadata.config, fresh)
            if decision.offline:
                # The state drops restarted replicas from the ELR: written before they run again.
                if decision.changed and not self._write_state(key, current.mod_revision, state, decision):
                    continue
                restarted = self._control.start(metadata, partition, decision.restart, self._data_root())
                if not restarted:
                    log.error("%s-%d: %s", topic, partition, decision.warning)
                    return False
                fresh |= restarted
                continue
            if decision.changed:
                if not self._write_state(key, current.mod_revision, state, decision):
                    continue
                state = decision.state
            announcement = self._control.announce(topic, state, live)
            if decision.changed:
                log.info("%s-%d: %s leads epoch %d", topic, partition, state.leader, state.leader_epoch)
            if announcement.leader_refused_epoch:
                fresh.add(state.leader)
                continue
            return self._complete_replicas(metadata, state, decision, live, announcement.failed)
        return False

    def _write_state(self, key: str, mod_revision: int, old: PartitionState, decision: PartitionDecision) -> bool:
        """CAS the decided state, fenced by our controller key; False on a conflict (re-read and decide again)."""
        if not self._store.compare_and_swap(key, decision.state.to_json(), mod_revision, self._fence):
            self._check_still_active()
            return False
        level = logging.WARNING if decision.warning else logging.INFO
        log.log(level, "%s: %s -> %s%s", key, old.to_json(), decision.state.to_json(),
                f"; {decision.warning}" if decision.warning else "")
        return True

    def _complete_replicas(self, metadata: TopicMetadata, state: PartitionState, decision: PartitionDecision,
                           live: set[str], failed: set[str]) -> bool:
        """Stop replaced replicas, start restarted and added ones as followers; True if every replica took its role."""
        partition = state.partition
        self._control.stop(metadata.name, partition, decision.remove)
        to_start = [r for r in decision.restart + decision.add if r in state.replicas]
        started = self._control.start(metadata, partition, to_start, self._data_root()) if to_start else set()
        if started:
            failed = failed | self._control.announce(metadata.name, state, started).failed
            log.info("%s-%d: started %s to follow %s in epoch %d", metadata.name, partition, sorted(started),
                     state.leader, state.leader_epoch)
            if self._store.get(keys.physical_partition(self.cluster, metadata.name, partition)) is None:
                self._control.stop(metadata.name, partition, started)  # the topic was deleted meanwhile
                return True
        return not failed and set(state.replicas) <= live | started

    def _live_replicas(self, topic: str, state: PartitionState) -> set[str]:
        registered = {
            parsed[2] for item in self._store.get_prefix(f"{keys.replicas_prefix(self.cluster)}{topic}/{state.partition}/")
            if (parsed := keys.parse_replica_liveness(self.cluster, item.key)) is not None
        }
        unregistered = [r for r in state.replicas if r not in registered]
        answering = self._control.answering(topic, state.partition, unregistered) if unregistered else set()
        if answering:
            log.info("%s-%d: %s have no liveness key but answer a ping: alive", topic, state.partition, sorted(answering))
        return (registered & set(state.replicas)) | answering

    def _data_root(self) -> str:
        return self._topics.data_root()


def _describe(work: Work) -> str:
    return str(work) if isinstance(work, (ReadNodeItem, VirtualPartitionItem)) else "%s-%d" % work
