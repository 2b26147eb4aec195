"""The controller's read path: VP failover and restarts of dead VP replicas and feeders.

``ReadPathControl`` carries out the decisions of ``read_path_repair`` on etcd and Ray for one
``ReadPathItem`` at a time; ``Controller`` owns the watches and the queue (which items are
dirty, which are pending and retried every ``retry_interval_ms``), as it does for physical
partitions. Only topics in mafka4 read mode have items.

**Liveness.** As on the write path, a VP replica or feeder is dead only if its liveness key
is gone *and* its actor does not answer a ping within ``ping_timeout_ms``; present keys cost
no ping. So an etcd outage that expired leases moves no VP leader and restarts nothing.

**A VP** (``_handle_virtual_partition``): read its key, find the live replicas, decide.
Leaderless: restart dead replicas on their read nodes and decide again with them as
restarted. Failover: ``virtual.failover.fail_over_virtual_partition``, fenced by the
controller's key. Then start the other dead replicas on their nodes (they recover their
log and catch up from the leader, truncating what it lacks; the leader's RISR takes them
back and records it in etcd) and tell every live replica its role (repeated notices are
no-ops in the actor, so this also finishes what a previous controller left half done).

**A feeder** (``_handle_feeder``): a feeder keeps no state, so a dead one is started again
on a live read node (``launcher.feeder_node``); it resumes from what the VPs hold.

Actors started for a topic deleted meanwhile are stopped again. Failures are values (an item
left incomplete), not exceptions, except ``CoordinatorUnavailable`` and ``MetadataConflict``
(a failover CAS that kept losing, maybe because this controller was deposed), which the
controller turns into a retry or a step-down.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import ray

from mafka4.coordinator import keys
from mafka4.coordinator.read_path_repair import (
    ReadPathItem, ReadPathPart, decide_virtual_partition, items_to_examine, leaderless_text,
)
from mafka4.coordinator.store import Fence, MetadataStore, Versioned
from mafka4.coordinator.topics import TopicStore, config_from_json
from mafka4.limits import ControllerConfig, TopicConfig
from mafka4.physical.placement import topic_start
from mafka4.virtual.failover import fail_over_virtual_partition
from mafka4.virtual.launcher import feeder_handle, feeder_node, start_feeder, start_vp_replica, vp_handle
from mafka4.virtual.metadata import VirtualPartitionState, VirtualStore

log = logging.getLogger("mafka4.controller")


class ReadPathControl:
    def __init__(self, store: MetadataStore, cluster: str, etcd_endpoint: str, config: ControllerConfig):
        self._store, self._cluster, self._etcd_endpoint, self._config = store, cluster, etcd_endpoint, config
        self._topics = TopicStore(store, cluster)
        self._virtual = VirtualStore(store, cluster)

    # --- what to examine ------------------------------------------------------------------

    def items_to_examine(self, topic_names: Iterable[str], replica_liveness: Iterable[Versioned],
                         feeder_liveness: Iterable[Versioned], activation: bool) -> set[ReadPathItem]:
        """The items of every mafka4-mode topic a full reconcile examines (``read_path_repair.items_to_examine``)."""
        registered_replicas = {parsed for item in replica_liveness
                               if (parsed := keys.parse_read_replica_liveness(self._cluster, item.key)) is not None}
        registered_feeders = {parsed for item in feeder_liveness
                              if (parsed := keys.parse_feeder_liveness(self._cluster, item.key)) is not None}
        items: set[ReadPathItem] = set()
        for name in topic_names:
            config = self._mafka4_config(name)
            if config is None:
                continue
            states = [state for state, _ in self._virtual.states(name).values()]
            items |= items_to_examine(name, states, config.partitions, registered_replicas, registered_feeders, activation)
        return items

    def _mafka4_config(self, topic: str) -> TopicConfig | None:
        """The topic's config if it exists and is in mafka4 read mode, else None (nothing to keep alive)."""
        found = self._store.get(keys.topic(self._cluster, topic))
        if found is None:
            return None
        config = config_from_json(found.value)
        return config if config.read_mode == "mafka4" else None

    # --- one item -------------------------------------------------------------------------

    def handle(self, item: ReadPathItem, read_nodes: Sequence[str], fence: Fence) -> bool:
        """Bring one item to a live leader and live replicas (or a live feeder); True if nothing is left to do."""
        if self._mafka4_config(item.topic) is None:
            return True  # deleted meanwhile
        if item.part is ReadPathPart.VIRTUAL_PARTITION:
            return self._handle_virtual_partition(item.topic, item.index, read_nodes, fence)
        return self._handle_feeder(item.topic, item.index, read_nodes)

    def _handle_virtual_partition(self, topic: str, vp: int, read_nodes: Sequence[str], fence: Fence) -> bool:
        restarted: set[str] = set()
        for _ in range(self._config.cas_attempts_max):
            found = self._virtual.state(topic, vp)
            if found is None:
                return True
            state = found[0]
            live = self._live_replicas(topic, state) | restarted
            repair = decide_virtual_partition(state, live, read_nodes, restarted)
            if repair.leaderless:
                started = self._start_replicas(topic, vp, repair.restart)
                if not started:
                    log.error("%s/v%d: %s", topic, vp, leaderless_text(state, live, repair.waiting_for_node))
                    return False
                log.warning("%s/v%d: no live RISR member; restarted %s on their read nodes", topic, vp, sorted(started))
                restarted |= started
                continue
            if repair.failover:
                log.warning("%s/v%d: leader %s is %s; failing over", topic, vp, state.leader,
                            "restarted" if state.leader in restarted else "dead (no liveness key, no answer to a ping)")
                after = fail_over_virtual_partition(
                    self._store, self._cluster, topic, vp, fence=fence, restarted=restarted,
                    ping_timeout_s=self._config.ping_timeout_ms / 1000,
                    role_timeout_s=self._config.replica_call_timeout_ms / 1000)
                if after is None or after.leader_epoch == state.leader_epoch:
                    continue  # the replicas answered otherwise than just now: decide again
                state = after
            return self._complete_replicas(topic, state, live, repair.restart, restarted, repair.waiting_for_node)
        return False

    def _complete_replicas(self, topic: str, state: VirtualPartitionState, live: set[str], restart: Sequence[str],
                           restarted: set[str], waiting: Sequence[str]) -> bool:
        """Start dead replicas as followers and tell every live replica its role; True if all took it."""
        vp = state.vp
        started = self._start_replicas(topic, vp, [r for r in restart if r not in restarted])
        if started:
            if self._virtual.state(topic, vp) is None:
                self._stop(topic, vp, started)  # the topic was deleted meanwhile
                return True
            log.info("%s/v%d: restarted %s to follow %s in epoch %d", topic, vp, sorted(started), state.leader,
                     state.leader_epoch)
        if waiting:
            log.warning("%s/v%d: replicas %s wait for their read nodes to register", topic, vp, list(waiting))
        failed = self._announce(topic, state, live | started)
        return not failed and set(state.replicas) <= live | started

    def _live_replicas(self, topic: str, state: VirtualPartitionState) -> set[str]:
        prefix = f"{keys.read_replicas_prefix(self._cluster)}{topic}/{state.vp}/"
        registered = {
            parsed[2] for item in self._store.get_prefix(prefix)
            if (parsed := keys.parse_read_replica_liveness(self._cluster, item.key)) is not None
        }
        unregistered = [r for r in state.replicas if r not in registered]
        answering = self._answering([(vp_handle(self._cluster, topic, state.vp, r), r) for r in unregistered])
        if answering:
            log.info("%s/v%d: %s have no liveness key but answer a ping: alive", topic, state.vp, sorted(answering))
        return (registered & set(state.replicas)) | answering

    # --- actors ---------------------------------------------------------------------------

    def _answering(self, handles: list[tuple[object, str]]) -> set[str]:
        """The names of the handles (None: no actor) whose actor answers a ping within ``ping_timeout_ms``."""
        return self._wait_all({handle.ping.remote(): name for handle, name in handles if handle is not None},
                              self._config.ping_timeout_ms)

    def _wait_all(self, refs: dict, timeout_ms: int) -> set[str]:
        """The values of ``refs`` whose call succeeded within ``timeout_ms``."""
        if not refs:
            return set()
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_ms / 1000)
        succeeded = set()
        for ref in ready:
            try:
                ray.get(ref, timeout=0)
                succeeded.add(refs[ref])
            except Exception:  # the call failed: dead actor or an error inside it
                pass
        return succeeded

    def _start_replicas(self, topic: str, vp: int, replica_ids: Sequence[str]) -> set[str]:
        """Start each replica on its read node, from the log there; the ones that answered (no role yet).

        An actor still holding the name is killed first: the controller found it dead (no
        liveness key, no answer), so a survivor is hung and must not come back.
        """
        if not replica_ids:
            return set()
        metadata, data_root = self._topics.get(topic), self._topics.data_root()
        refs = {}
        for replica_id in replica_ids:
            self._stop(topic, vp, [replica_id])
            try:
                handle = start_vp_replica(self._cluster, self._etcd_endpoint, metadata, vp, replica_id, data_root)
            except ValueError as error:  # the killed actor's name is not released yet
                log.warning("%s/v%d: cannot start %s yet: %s", topic, vp, replica_id, error)
                continue
            refs[handle.ping.remote()] = replica_id
        started = self._wait_all(refs, self._config.replica_call_timeout_ms)
        for replica_id in set(refs.values()) - started:
            log.warning("%s/v%d: %s did not start within %d ms", topic, vp, replica_id, self._config.replica_call_timeout_ms)
            self._stop(topic, vp, [replica_id])
        return started

    def _stop(self, topic: str, vp: int, replica_ids: Iterable[str]) -> None:
        for replica_id in replica_ids:
            handle = vp_handle(self._cluster, topic, vp, replica_id)
            if handle is not None:
                ray.kill(handle)

    def _announce(self, topic: str, state: VirtualPartitionState, replica_ids: set[str]) -> set[str]:
        """Tell the leader (first) and then the followers among ``replica_ids`` their roles; those that did not take it."""
        timeout_ms = self._config.replica_call_timeout_ms
        if state.leader in replica_ids:
            leader = vp_handle(self._cluster, topic, state.vp, state.leader)
            refs = {} if leader is None else {
                leader.become_leader.remote(state.leader_epoch, list(state.replicas), list(state.risr)): state.leader}
            if not self._wait_all(refs, timeout_ms):
                log.warning("%s/v%d: %s did not take the leadership of epoch %d", topic, state.vp, state.leader,
                            state.leader_epoch)
                return {state.leader}
        followers = [r for r in state.replicas if r != state.leader and r in replica_ids]
        handles = {r: vp_handle(self._cluster, topic, state.vp, r) for r in followers}
        refs = {h.become_follower.remote(state.leader_epoch, state.leader): r for r, h in handles.items() if h is not None}
        failed = set(followers) - self._wait_all(refs, timeout_ms)
        if failed:
            log.warning("%s/v%d: %s did not become follower(s) of %s in epoch %d", topic, state.vp, sorted(failed),
                        state.leader, state.leader_epoch)
        return failed

    def _handle_feeder(self, topic: str, partition: int, read_nodes: Sequence[str]) -> bool:
        if self._store.get(keys.feeder_liveness(self._cluster, topic, partition)) is not None:
            return True
        handle = feeder_handle(self._cluster, topic, partition)
        if handle is not None:
            if self._answering([(handle, "feeder")]):
                log.info("%s-%d: the feeder has no liveness key but answers a ping: alive", topic, partition)
                return True
            ray.kill(handle)  # hung: it must not feed on next to its replacement
        if not read_nodes:
            log.error("%s-%d: the feeder is dead and no read node is registered to restart it on", topic, partition)
            return False
        node = feeder_node(read_nodes, partition, topic_start(topic))
        try:
            start_feeder(self._cluster, self._etcd_endpoint, topic, partition, node,
                         timeout_s=self._config.replica_call_timeout_ms / 1000)
        except ValueError as error:  # the killed actor's name is not released yet
            log.warning("%s-%d: cannot start the feeder yet: %s", topic, partition, error)
            return False
        except ray.exceptions.RayError as error:  # GetTimeoutError included: examined again later
            log.warning("%s-%d: the feeder did not start on %s: %s", topic, partition, node, error)
            return False
        if self._mafka4_config(topic) is None:  # the topic was deleted meanwhile
            started = feeder_handle(self._cluster, topic, partition)
            if started is not None:
                ray.kill(started)
            return True
        log.warning("%s-%d: the feeder was dead; restarted it on %s", topic, partition, node)
        return True
