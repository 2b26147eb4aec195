"""VP leader failover: when a virtual partition's leader is gone, a RISR member takes over.

``decide_failover`` (pure) picks the new leader with ``risr.state.pick_leader``: the first
replica, in preferred order, that is in the RISR recorded in etcd and is live. Every RISR member
holds every record below the VP high watermark (the leader counts a RISR change only once etcd
holds it), so no record a consumer read is lost; after a power loss too when the RISR is the
leader alone, whose HW never passes what it flushed (``risr.state``). Not survived: a RISR member
that lost its unflushed tail restarts while every other member is down, and leads with it. The new state bumps the leader epoch and drops
the dead leader from the RISR; with no qualifying member the VP stays leaderless (consumers
wait) rather than lose records readers have seen.

*Restarted* replicas are live but have no role: their read node restarted (or never heard of
the VP). A restarted leader must not simply carry on in its old epoch (the feed streams and
followers would not notice that it lost its in-memory state), so it counts as not leading: a
RISR member that kept running takes over if there is one, else a restarted RISR member (the old
leader included) leads the next epoch from the log it recovered. That is how a VP whose only
RISR member's node restarted (``read_replicas=1``) leads again.

Who carries it out: the controller (``coordinator.read_path_control``), which finds the live and
restarted replicas from the read nodes, writes the decided state by a fenced compare-and-swap
and announces the roles to the read nodes. The followers truncate what the new leader lacks
(``divergence``); the new leader's node feeds it from what its log holds (``partition_feed``);
consumers re-read etcd after a refused fetch.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from mafka4.risr.state import pick_leader
from mafka4.virtual.metadata import VirtualPartitionState


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
