"""The controller's Ray side: which replica actors answer, starting and stopping them, roles.

``ReplicaControl`` is what ``Controller`` does to actors; it holds no decisions. Every call
is bounded by ``ControllerConfig`` timeouts and reports failure as a value (a replica that
did not answer) rather than an exception, because one unreachable replica must not stop the
controller from handling the others. Actor names come from ``physical_launcher`` so that the
controller, ``Admin`` and clients find the same actors.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import ray

from mafka4.coordinator.control.physical_launcher import start_replica
from mafka4.errors import StaleEpoch
from mafka4.limits.servers import ControllerConfig
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState, TopicMetadata
from mafka4.transport.remote_errors import unwrap

log = logging.getLogger("mafka4.controller")


@dataclass(slots=True)
class Announcement:
    """How replicas took their roles for one partition state."""

    # The leader refused the epoch because it already knows it: a replica that was
    # restarted after leading this epoch. The controller must elect again with a new epoch.
    leader_refused_epoch: bool = False
    # Replicas that did not take their role (dead, slow, or refusing): examine again later.
    failed: set[str] = field(default_factory=set)


class ReplicaControl:
    def __init__(self, cluster: str, etcd_endpoint: str, config: ControllerConfig):
        self._cluster = cluster
        self._etcd_endpoint = etcd_endpoint
        self._config = config

    def answering(self, topic: str, partition: int, replica_ids) -> set[str]:
        """The replicas among ``replica_ids`` whose actor answers a ping within ``ping_timeout_ms``."""
        refs = {}
        for replica_id in replica_ids:
            handle = replica_handle(self._cluster, topic, partition, replica_id)
            if handle is not None:
                refs[handle.ping.remote()] = replica_id
        if not refs:
            return set()
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self._config.ping_timeout_ms / 1000)
        return {refs[ref] for ref in ready if self._succeeded(ref)}

    def announce(self, topic: str, state: PartitionState, replica_ids) -> Announcement:
        """Tell the leader (first) and then the followers among ``replica_ids`` their roles in ``state``."""
        outcome = Announcement()
        timeout_s = self._config.replica_call_timeout_ms / 1000
        if state.leader in replica_ids:
            leader = replica_handle(self._cluster, topic, state.partition, state.leader)
            try:
                if leader is None:
                    raise ValueError(f"actor of {state.leader} not found")
                ray.get(leader.become_leader.remote(state.leader_epoch, list(state.replicas), list(state.isr)), timeout=timeout_s)
            except Exception as raised:  # any failure leaves the partition for the next retry
                error = unwrap(raised)
                outcome.leader_refused_epoch = isinstance(error, StaleEpoch)
                outcome.failed.add(state.leader)
                log.warning("%s-%d: %s did not take the leadership of epoch %d: %s",
                            topic, state.partition, state.leader, state.leader_epoch, error)
                return outcome
        followers = [r for r in state.replicas if r != state.leader and r in replica_ids]
        outcome.failed |= self._followers(topic, state, followers)
        return outcome

    def _followers(self, topic: str, state: PartitionState, followers: list[str]) -> set[str]:
        refs, failed = {}, set()
        for follower in followers:
            handle = replica_handle(self._cluster, topic, state.partition, follower)
            if handle is None:
                failed.add(follower)
            else:
                refs[handle.become_follower.remote(state.leader_epoch, state.leader)] = follower
        if refs:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self._config.replica_call_timeout_ms / 1000)
            failed |= {follower for ref, follower in refs.items() if ref not in ready or not self._succeeded(ref)}
        if failed:
            log.warning("%s-%d: %s did not become follower(s) of %s in epoch %d",
                        topic, state.partition, sorted(failed), state.leader, state.leader_epoch)
        return failed

    def start(self, topic: TopicMetadata, partition: int, replica_ids, data_root: str) -> set[str]:
        """Start each replica on its node (from the log there, if any); the ones that answered.

        An actor still holding the name is killed first: the controller decided it is dead
        (no liveness key, no answer), so a survivor is a hung replica that must not come back.
        """
        refs = {}
        for replica_id in replica_ids:
            self.stop(topic.name, partition, [replica_id])
            try:
                handle = start_replica(self._cluster, self._etcd_endpoint, topic, partition, replica_id, data_root)
            except ValueError as error:  # the killed actor's name is not released yet
                log.warning("%s-%d: cannot start %s yet: %s", topic.name, partition, replica_id, error)
                continue
            refs[handle.ping.remote()] = replica_id
        if not refs:
            return set()
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self._config.replica_call_timeout_ms / 1000)
        started = {refs[ref] for ref in ready if self._succeeded(ref)}
        for replica_id in set(refs.values()) - started:
            log.warning("%s-%d: %s did not start within %d ms", topic.name, partition, replica_id,
                        self._config.replica_call_timeout_ms)
            self.stop(topic.name, partition, [replica_id])
        return started

    def stop(self, topic: str, partition: int, replica_ids) -> None:
        """Kill the actors of ``replica_ids`` if they run (their data stays on disk)."""
        for replica_id in replica_ids:
            handle = replica_handle(self._cluster, topic, partition, replica_id)
            if handle is not None:
                log.info("%s-%d: stopping replica %s", topic, partition, replica_id)
                ray.kill(handle)

    @staticmethod
    def _succeeded(ref) -> bool:
        try:
            ray.get(ref, timeout=0)
            return True
        except Exception:  # the call failed: dead actor or an error inside it
            return False
