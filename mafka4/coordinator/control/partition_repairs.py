"""The controller's physical partitions: leader failover, restarts, replacements, roles announced.

``PartitionRepairs`` carries out the decisions of ``partition_decisions`` on etcd and, through
``ReplicaControl``, on the replica actors; ``Controller`` owns the watches and the queue (which
partitions are dirty, which are pending and retried every ``retry_interval_ms``), as it does
for the read path (``read_path_repairs``).

**What to examine** (``partitions_to_examine``): on activation every partition, so that its
roles are announced again, which finishes the notices a previous controller may not have
(repeated notices are no-ops in the actor); otherwise only partitions with a replica whose
liveness key is missing.

**One partition** (``handle_partition``): read its key, find the live replicas (a replica is
dead only if its liveness key is gone *and* its actor does not answer a ping within
``ping_timeout_ms``), ask ``partition_decisions.decide_partition``; if it is offline but dead
in-sync replicas can be restarted on their nodes, restart them and decide again with them as
*fresh*. Write a changed state with a fenced compare-and-swap on the key's mod_revision
(re-read and decide again on conflict: the leader also writes the ISR), tell the leader
``become_leader`` and the followers ``become_follower``, restart dead replicas on their nodes
and start replacements (both catch up from the leader; its ISR expansion records them in etcd),
and stop replaced replicas.

Failures are values (False: handle it again later), except ``CoordinatorUnavailable``,
``UnknownTopic`` (deleted meanwhile) and ``SteppedDown`` (a CAS lost because this controller
was deposed), which the controller turns into a retry, nothing, or a step-down.
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

from mafka4.coordinator.control.controller_election import check_fence
from mafka4.coordinator.control.partition_decisions import PartitionDecision, decide_partition
from mafka4.coordinator.control.replica_control import ReplicaControl
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import keys
from mafka4.metadata.store import Fence, MetadataStore, Versioned
from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.physical.partition_state import PartitionState, TopicMetadata
from mafka4.physical.topics import TopicStore

log = logging.getLogger("mafka4.controller")

PartitionId = tuple[str, int]


class PartitionRepairs:
    def __init__(self, store: MetadataStore, cluster: str, etcd_endpoint: str, config: ControllerConfig,
                 counters: ControllerCounters | None = None):
        self._store, self._cluster, self._config = store, cluster, config
        self._counters = counters if counters is not None else ControllerCounters("")  # leader elections
        self._topics = TopicStore(store, cluster)
        self._control = ReplicaControl(cluster, etcd_endpoint, config)

    def partitions_to_examine(self, topic_names: Iterable[str], liveness: Iterable[Versioned],
                              activation: bool) -> set[PartitionId]:
        """The partitions a full reconcile examines, given the replicas' liveness keys; see the module docstring."""
        registered = {keys.parse_replica_liveness(self._cluster, item.key) for item in liveness}
        partitions: set[PartitionId] = set()
        for name in topic_names:
            prefix = keys.physical_prefix(self._cluster, name)
            for item in self._store.get_prefix(prefix):
                state = PartitionState.from_json(int(item.key[len(prefix):]), item.value)
                if activation or any((name, state.partition, r) not in registered for r in state.replicas):
                    partitions.add((name, state.partition))
        return partitions

    def handle_partition(self, topic: str, partition: int, write_nodes: Sequence[str], fence: Fence) -> bool:
        """Bring one partition to a live leader and live replicas; True if nothing is left to do."""
        key = keys.physical_partition(self._cluster, topic, partition)
        fresh: set[str] = set()
        for _ in range(self._config.cas_attempts_max):
            metadata = self._topics.get(topic)
            current = self._store.get(key)
            if current is None:
                return True
            state = PartitionState.from_json(partition, current.value)
            live = self._live_replicas(topic, state) | fresh
            decision = decide_partition(state, live, write_nodes, metadata.config, fresh)
            if decision.offline:
                # The state drops restarted replicas from the ELR: written before they run again.
                if decision.changed and not self._write_state(key, current.mod_revision, state, decision, fence):
                    continue
                restarted = self._control.start(metadata, partition, decision.restart, self._topics.data_root())
                if not restarted:
                    log.error("%s-%d: %s", topic, partition, decision.warning)
                    return False
                fresh |= restarted
                continue
            if decision.changed:
                if not self._write_state(key, current.mod_revision, state, decision, fence):
                    continue
                if decision.state.leader_epoch != state.leader_epoch:
                    self._counters.leader_elected("partition")
                state = decision.state
            announcement = self._control.announce(topic, state, live)
            if decision.changed:
                log.info("%s-%d: %s leads epoch %d", topic, partition, state.leader, state.leader_epoch)
            if announcement.leader_refused_epoch:
                fresh.add(state.leader)
                continue
            return self._complete_replicas(metadata, state, decision, live, announcement.failed)
        return False

    def _write_state(self, key: str, mod_revision: int, old: PartitionState, decision: PartitionDecision,
                     fence: Fence) -> bool:
        """CAS the decided state, fenced by our controller key; False on a conflict (re-read and decide again)."""
        if not self._store.compare_and_swap(key, decision.state.to_json(), mod_revision, fence):
            check_fence(self._store, fence)
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
        started = self._control.start(metadata, partition, to_start, self._topics.data_root()) if to_start else set()
        if started:
            failed = failed | self._control.announce(metadata.name, state, started).failed
            log.info("%s-%d: started %s to follow %s in epoch %d", metadata.name, partition, sorted(started),
                     state.leader, state.leader_epoch)
            if self._store.get(keys.physical_partition(self._cluster, metadata.name, partition)) is None:
                self._control.stop(metadata.name, partition, started)  # the topic was deleted meanwhile
                return True
        return not failed and set(state.replicas) <= live | started

    def _live_replicas(self, topic: str, state: PartitionState) -> set[str]:
        registered = {
            parsed[2] for item in self._store.get_prefix(f"{keys.replicas_prefix(self._cluster)}{topic}/{state.partition}/")
            if (parsed := keys.parse_replica_liveness(self._cluster, item.key)) is not None
        }
        unregistered = [r for r in state.replicas if r not in registered]
        answering = self._control.answering(topic, state.partition, unregistered) if unregistered else set()
        if answering:
            log.info("%s-%d: %s have no liveness key but answer a ping: alive", topic, state.partition, sorted(answering))
        return (registered & set(state.replicas)) | answering
