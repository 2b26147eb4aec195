"""VP leader failover: when a virtual partition's leader dies, a RISR member takes over.

``decide_failover`` (pure) picks the new leader with ``risr.state.pick_leader``: the first
replica, in preferred order, that is in the RISR recorded in etcd and answers. Every RISR
member holds every record below the VP high watermark (the leader counts a RISR change only
once etcd holds it), so no record a consumer read is lost. The new state bumps the leader
epoch and drops the dead leader from the RISR; with no qualifying member the VP stays
leaderless (consumers wait) rather than lose records readers have seen.

*Restarted* replicas are RISR members that died and were started again on their own node
(by the controller) and have no role yet. A restarted leader must not simply carry on in its
old epoch (feeders and followers would not notice that it lost its in-memory state), so it
counts as not leading: a RISR member that kept running takes over if there is one, else a
restarted RISR member (the old leader included) leads the next epoch from the log it
recovered. That is how a VP whose only RISR member died (``read_replicas=1``) leads again.

``fail_over_virtual_partition`` carries it out: read the VP key, ping the replicas, decide,
compare-and-swap the new state (fenced by the controller's key when one is given; re-read
and decide again on a conflict with the leader's own RISR writes), then announce the roles
(``launcher.announce_roles``). The followers truncate what the new leader lacks
(``divergence``); feeders see the epoch change (or a failed call), re-read etcd and resume
from the new leader's recorded progress; consumers re-read etcd after a failed fetch.

Who drives it. The controller (``coordinator.read_path_control``): it watches
``keys.read_replicas_prefix`` as it watches the physical replicas' liveness keys, and when
a VP leader's key is gone and its actor does not answer a ping it calls
``fail_over_virtual_partition``; it also restarts dead VP replicas on their read nodes
(they catch up and rejoin the RISR, which their leader records) and dead feeders. Nobody
else needs to call this; it stays a plain function so that an operator can force the
decision for one VP from a driver.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterable

import ray

from mafka4.coordinator.store import Fence, MetadataStore
from mafka4.errors import MetadataConflict, UnknownTopic
from mafka4.risr.state import pick_leader
from mafka4.virtual.launcher import ROLE_TIMEOUT_S, announce_roles, vp_handle
from mafka4.virtual.metadata import VirtualPartitionState, VirtualStore

logger = logging.getLogger(__name__)

PING_TIMEOUT_S = 2.0
CAS_ATTEMPTS_MAX = 5


def decide_failover(state: VirtualPartitionState, alive: Iterable[str],
                    restarted: Iterable[str] = ()) -> VirtualPartitionState | None:
    """The VP's next state if its leader is not alive (or was restarted): a new RISR leader at the next epoch.

    Returns ``state`` unchanged while its leader is alive and was not restarted, None when no
    RISR member can lead. See the module docstring for ``restarted``.
    """
    alive = frozenset(alive)
    restarted = frozenset(restarted) & alive
    if state.leader in alive and state.leader not in restarted:
        return state
    leader = (pick_leader(state.replicas, state.risr, alive - restarted, exclude=(state.leader,))
              or pick_leader(state.replicas, state.risr, restarted))
    if leader is None:
        return None
    risr = tuple(r for r in state.risr if r != state.leader or r == leader)
    return dataclasses.replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, risr=risr)


def answering(cluster: str, topic: str, vp: int, replica_ids: Iterable[str], timeout_s: float = PING_TIMEOUT_S) -> set[str]:
    """The replicas among ``replica_ids`` whose actor answers a ping within ``timeout_s``."""
    refs = {}
    for replica_id in replica_ids:
        handle = vp_handle(cluster, topic, vp, replica_id)
        if handle is not None:
            refs[handle.ping.remote()] = replica_id
    if not refs:
        return set()
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
    alive = set()
    for ref in ready:
        try:
            ray.get(ref)
            alive.add(refs[ref])
        except ray.exceptions.RayError:
            pass
    return alive


def fail_over_virtual_partition(store: MetadataStore, cluster: str, topic: str, vp: int, fence: Fence | None = None,
                                restarted: Iterable[str] = (), ping_timeout_s: float = PING_TIMEOUT_S,
                                role_timeout_s: float | None = ROLE_TIMEOUT_S) -> VirtualPartitionState | None:
    """Elect and announce a new leader for ``vp`` if its leader does not answer; see the module docstring.

    Returns the VP's state afterwards (unchanged if its leader answers), or None if it is
    left leaderless. ``MetadataConflict`` if the VP key kept changing (or ``fence`` no longer
    holds); announcing raises what ``ray.get`` raises, after the new state is in etcd.
    """
    virtual = VirtualStore(store, cluster)
    for _ in range(CAS_ATTEMPTS_MAX):
        found = virtual.state(topic, vp)
        if found is None:
            raise UnknownTopic(f"topic {topic!r} has no virtual partition {vp}")
        state, mod_revision = found
        alive = answering(cluster, topic, vp, state.replicas, ping_timeout_s)
        decided = decide_failover(state, alive, restarted)
        if decided is None:
            logger.error("%s/v%d: leader %s is dead and no live RISR member of %s can lead", topic, vp, state.leader, state.risr)
            return None
        if decided is state:
            return state
        if virtual.swap(topic, decided, mod_revision, fence):
            logger.warning("%s/v%d: leader %s -> %s at epoch %d", topic, vp, state.leader, decided.leader, decided.leader_epoch)
            announce_roles(cluster, topic, [decided], replicas=alive, timeout_s=role_timeout_s)
            return decided
    raise MetadataConflict(f"{topic}/v{vp}: the VP key kept changing during failover (or the controller was deposed); retry")
