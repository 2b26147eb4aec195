"""The controller's read path: read nodes kept running, VP failover, roles announced.

``ReadPathControl`` carries out the decisions of ``read_path_decisions`` on etcd and Ray;
``Controller`` owns the watches and the queue (which items are dirty, which are pending and
retried every ``retry_interval_ms``), as it does for physical partitions. Only topics in
mafka4 read mode have VPs.

**A read node** (``handle_node``): its actor is alive if its liveness key exists or it answers a
ping within ``ping_timeout_ms`` (so an etcd outage that expired leases restarts nothing). A dead
one on a registered node is killed (a hung actor must not come back) and started again; the
caller then examines every VP with a replica there (they come back with no role: *restarted*).

**VPs** (``handle_vps``), a topic's dirty VPs at once, so that a node restart with a thousand
VPs costs a few calls, not thousands: read their states, ask each live node which roles it
holds (``ReadNode.roles``), decide per VP (``decide_virtual_partition``, ``decide_failover``),
write every changed state with a compare-and-swap fenced by the controller's key, then announce
the roles to every live replica in one ``host`` call per node (repeated notices are no-ops, so
this also finishes what a previous controller left half done).

Failures are values (items left incomplete, retried later), not exceptions, except
``CoordinatorUnavailable`` and ``MetadataConflict`` (a fenced CAS that kept losing, maybe because
this controller was deposed), which the controller turns into a retry or a step-down.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import ray

from mafka4.coordinator.control.read_node_launcher import host_states, start_read_node
from mafka4.coordinator.control.read_path_decisions import (ReadNodeItem, VirtualPartitionItem,
                                                            decide_virtual_partition, items_to_examine,
                                                            leaderless_text, node_items)
from mafka4.errors import MetadataConflict
from mafka4.limits import ReadMode, TopicConfig
from mafka4.limits.servers import ControllerConfig, ReadNodeConfig
from mafka4.metadata import keys
from mafka4.metadata.store import Fence, MetadataStore, Versioned
from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.physical.partition_state import config_from_json
from mafka4.physical.topics import TopicStore
from mafka4.virtual.failover import decide_failover
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

log = logging.getLogger("mafka4.controller")


@dataclass(slots=True)
class VpRepairOutcome:
    """What handling a topic's VPs left: VPs to retry and read nodes to restart first."""

    incomplete: set[int] = field(default_factory=set)
    nodes: set[ReadNodeItem] = field(default_factory=set)


class ReadPathControl:
    def __init__(self, store: MetadataStore, cluster: str, etcd_endpoint: str, config: ControllerConfig,
                 node_config: ReadNodeConfig = ReadNodeConfig(), counters: ControllerCounters | None = None):
        self._store, self._cluster, self._etcd_endpoint, self._config = store, cluster, etcd_endpoint, config
        self._counters = counters if counters is not None else ControllerCounters("")  # VP leader elections
        self._node_config = node_config
        self._topics = TopicStore(store, cluster)
        self._virtual = VirtualStore(store, cluster)

    # --- what to examine ------------------------------------------------------------------

    def items_to_examine(self, topic_names: Iterable[str], registered_read_nodes: Iterable[str],
                         node_liveness: Iterable[Versioned], activation: bool) -> set:
        """The read nodes and VPs a full reconcile examines (``read_path_decisions``)."""
        live_keys = {node for item in node_liveness
                     if (node := keys.parse_read_node_liveness(self._cluster, item.key)) is not None}
        items: set = node_items(registered_read_nodes, live_keys)
        for name in topic_names:
            if self.mafka4_config(name) is None:
                continue
            states = [state for state, _ in self._virtual.states(name).values()]
            items |= items_to_examine(name, states, live_keys, activation)
        return items

    def vp_items_on(self, node_id: str) -> set[VirtualPartitionItem]:
        """Every VP (not retired) with a replica on ``node_id``."""
        items = set()
        for name in self._topics.names():
            if self.mafka4_config(name) is None:
                continue
            items |= {VirtualPartitionItem(name, state.vp) for state, _ in self._virtual.states(name).values()
                      if node_id in state.replicas and not state.retired}
        return items

    def mafka4_config(self, topic: str) -> TopicConfig | None:
        """The topic's config if it exists and is in mafka4 read mode, else None (nothing to keep alive)."""
        found = self._store.get(keys.topic(self._cluster, topic))
        if found is None:
            return None
        config = config_from_json(found.value)
        return config if config.read_mode is ReadMode.MAFKA4 else None

    # --- read nodes -----------------------------------------------------------------------

    def node_alive(self, node_id: str) -> bool:
        """The node's actor holds its liveness key or answers a ping."""
        if self._store.get(keys.read_node_liveness(self._cluster, node_id)) is not None:
            return True
        return bool(self._answering([node_id]))

    def handle_node(self, item: ReadNodeItem, registered_read_nodes: Sequence[str]) -> tuple[bool, bool]:
        """Keep ``item``'s actor running; (complete, restarted: its VPs must be examined)."""
        node_id = item.node_id
        if self.node_alive(node_id):
            return True, False
        if node_id not in registered_read_nodes:
            log.warning("read node %s is down and not registered; its VPs wait for it (or move once it is gone "
                        "for good)", node_id)
            return True, True  # its VPs fail over to replicas elsewhere
        stale = read_node_handle(self._cluster, node_id)
        if stale is not None:
            ray.kill(stale)  # no key and no answer: hung; it must not come back next to its replacement
        try:
            start_read_node(self._cluster, self._etcd_endpoint, node_id, self._topics.data_root(), self._node_config,
                            timeout_s=self._config.replica_call_timeout_ms / 1000)
        except ValueError as error:  # the killed actor's name is not released yet
            log.warning("read node %s: cannot start yet: %s", node_id, error)
            return False, False
        except ray.exceptions.RayError as error:  # GetTimeoutError included: examined again later
            log.warning("read node %s did not start: %s", node_id, error)
            return False, False
        log.warning("read node %s was not running; started it", node_id)
        return True, True

    def _answering(self, node_ids: Iterable[str]) -> set[str]:
        """The nodes among ``node_ids`` whose actor answers a ping within ``ping_timeout_ms``."""
        refs = {handle.ping.remote(): node for node in node_ids
                if (handle := read_node_handle(self._cluster, node)) is not None}
        return self._wait_all(refs, self._config.ping_timeout_ms)

    @staticmethod
    def _wait_all(refs: dict, timeout_ms: int) -> set:
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

    # --- VPs ------------------------------------------------------------------------------

    def handle_vps(self, topic: str, vps: set[int], read_nodes: Sequence[str], fence: Fence,
                   gone: Iterable[str] = ()) -> VpRepairOutcome:
        """Bring ``vps`` of ``topic`` to a live leader and hosted live replicas; see the module docstring.

        ``gone``: read nodes gone for good (``upkeep_decisions``): a VP whose only live RISR members
        restarted does not wait for RISR members there (``failover.decide_failover``).
        """
        outcome = VpRepairOutcome()
        config = self.mafka4_config(topic)
        if config is None:
            return outcome  # deleted meanwhile
        for _ in range(self._config.cas_attempts_max):
            found = self._virtual.states(topic)
            current = {vp: found[vp] for vp in vps if vp in found and not found[vp][0].retired}
            nodes = {replica for state, _ in current.values() for replica in state.replicas}
            live_nodes = {node for node in nodes if self.node_alive(node)}
            roles = self._roles(topic, live_nodes)
            announce: list[VirtualPartitionState] = []
            conflict = False
            outcome = VpRepairOutcome()
            unknown = live_nodes - set(roles)  # alive, but did not say which roles it holds: ask again later
            for vp, (state, mod_revision) in sorted(current.items()):
                if unknown & set(state.replicas):
                    outcome.incomplete.add(vp)
                    continue
                live = set(state.replicas) & live_nodes
                restarted = {r for r in live if roles.get(r, {}).get(vp, ("none", -1))[0] == "none"}
                repair = decide_virtual_partition(state, live, read_nodes, restarted)
                outcome.nodes |= {ReadNodeItem(node) for node in repair.restart}
                if repair.leaderless:
                    log.error("%s/v%d: %s", topic, vp, leaderless_text(state, live, repair.waiting_for_node))
                    outcome.incomplete.add(vp)
                    continue
                if repair.failover or restarted & set(state.risr):
                    log_ends = self._log_end_offsets(topic, config, vp, restarted) if restarted else {}
                    decided = decide_failover(state, live, restarted, log_ends, gone)
                    if decided is None:
                        log.error("%s/v%d: only restarted RISR members are live (%s); waiting for the other RISR "
                                  "members %s, one may hold the longest log", topic, vp, sorted(restarted),
                                  sorted(set(state.risr) - live))
                        outcome.incomplete.add(vp)
                        continue
                    if decided is not state:
                        if not self._virtual.swap(topic, decided, mod_revision, fence):
                            conflict = True
                            break
                        log.warning("%s/v%d: leader %s (%s) -> %s at epoch %d, RISR %s%s", topic, vp, state.leader,
                                    "restarted" if state.leader in restarted else
                                    "dead" if state.leader not in live else "live", decided.leader,
                                    decided.leader_epoch, list(decided.risr),
                                    f" (recovered log ends {log_ends})" if log_ends else "")
                        if decided.leader_epoch != state.leader_epoch:
                            self._counters.leader_elected("vp")
                        state = decided
                if repair.restart or repair.waiting_for_node:
                    outcome.incomplete.add(vp)
                announce.append(state)
            if conflict:
                continue  # the leader's RISR write or another controller moved the key: read again
            refused = host_states(self._cluster, topic, config, announce, replicas=live_nodes,
                                  timeout_s=self._config.replica_call_timeout_ms / 1000)
            for node, failures in refused.items():
                log.warning("%s: read node %s did not take roles: %s", topic, node, failures)
                on_node = {state.vp for state in announce if node in state.replicas}
                outcome.incomplete |= on_node if -1 in failures else set(failures) & on_node
            return outcome
        raise MetadataConflict(f"{topic}: VP keys kept changing during repair (or the controller was deposed); retry")

    def _log_end_offsets(self, topic: str, config: TopicConfig, vp: int, replicas: Iterable[str]) -> dict[str, int]:
        """The log end offset each of ``replicas`` (restarted: no role) recovered for ``vp`` (its node opens the log)."""
        refs = {handle.log_end_offsets.remote(topic, config, [vp]): node for node in replicas
                if (handle := read_node_handle(self._cluster, node)) is not None}
        found: dict[str, int] = {}
        if refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self._config.replica_call_timeout_ms / 1000)
            for ref in ready:
                try:
                    found[refs[ref]] = ray.get(ref, timeout=0)[vp]
                except Exception:  # not known: counts as the shortest log
                    pass
        return found

    def _roles(self, topic: str, nodes: Iterable[str]) -> dict[str, dict[int, tuple[str, int]]]:
        """Per live node, the roles it holds for ``topic``'s VPs (a node that does not answer holds none)."""
        refs = {handle.roles.remote(topic): node for node in nodes
                if (handle := read_node_handle(self._cluster, node)) is not None}
        roles: dict[str, dict[int, tuple[str, int]]] = {}
        if refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self._config.replica_call_timeout_ms / 1000)
            for ref in ready:
                try:
                    roles[refs[ref]] = ray.get(ref, timeout=0)
                except Exception:  # treated as holding no role: announced again below
                    pass
        return roles
