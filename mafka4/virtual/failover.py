"""VP leader failover: when a virtual partition's leader is gone, a RISR member takes over.

``decide_failover`` (pure) picks the new leader with ``risr.state.pick_leader``: the first
replica, in preferred order, that is in the RISR recorded in etcd and is live. Every RISR member
holds every record below the VP high watermark (the leader counts a RISR change only once etcd
holds it), so no record a consumer read is lost; after a power loss too when the RISR is the
leader alone, whose HW never passes what it flushed (``risr.state``), except with one replica,
which serves its unflushed tail: it leads the next epoch and feeds what it lost again, and a
consumer that read the lost tail is told by its next fetch (``VpReplicaCore.reader_divergence``)
and reads it again. Not survived: a RISR member
that lost its unflushed tail restarts while every other member is down, and leads with it (a
reader that read the lost tail is told then too). The new state bumps the leader epoch and drops
the dead leader from the RISR; with no qualifying member the VP stays leaderless (consumers
wait) rather than lose records readers have seen.

*Restarted* replicas are live but have no role: their read node restarted (or never heard of
the VP). A restarted leader must not simply carry on in its old epoch (the feed streams and
followers would not notice that it lost its in-memory state), so it counts as not leading: a
RISR member that kept running takes over if there is one. Otherwise only restarted RISR members
are left, and any of them may have lost an unflushed tail in a power loss (the RISR does not
know, as the write side's KIP-966 does not): the VP waits until every RISR member is live again
(or gone for good), and the one with the longest recovered log leads the next epoch (ties: the
preferred order). A follower that lost power and a leader whose process merely crashed thus come
back with the leader leading, its log whole. That is also how a VP whose only RISR member's node
restarted (``read_replicas=1``) leads again.

A restarted RISR member that does not lead leaves the RISR in the next epoch (the write side's
KIP-966 rule for restarted ISR members): it may have lost its tail, and if the leader died
before its first fetch showed it, the controller would otherwise elect it with a shorter log.
It rejoins once it caught up, through the leader's RISR expansion.

Who carries it out: the controller (``control.read_path_repairs``), which finds the live and
restarted replicas from the read nodes, writes the decided state by a fenced compare-and-swap
and announces the roles to the read nodes. The followers truncate what the new leader lacks
(``divergence``); the new leader's node feeds it from what its log holds (``partition_feed``);
consumers re-read etcd after a refused fetch.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

from mafka4.risr.state import pick_leader
from mafka4.virtual.vp_state import VirtualPartitionState


def decide_failover(state: VirtualPartitionState, alive: Iterable[str], restarted: Iterable[str] = (),
                    log_end_offsets: Mapping[str, int] | None = None,
                    gone: Iterable[str] = ()) -> VirtualPartitionState | None:
    """The VP's next state: a new RISR leader at the next epoch if its leader is not alive (or was
    restarted), and restarted RISR members that do not lead out of the RISR.

    Returns ``state`` unchanged while its leader is alive and not restarted and no other RISR
    member restarted, None when no RISR member can lead yet. ``restarted``, ``log_end_offsets`` (of the restarted replicas'
    recovered logs) and ``gone`` (read nodes gone for good): see the module docstring.
    """
    alive = frozenset(alive)
    restarted = frozenset(restarted) & alive
    if state.leader in alive and state.leader not in restarted:
        leader = state.leader
    else:
        leader = pick_leader(state.replicas, state.risr, alive - restarted, exclude=(state.leader,))
    if leader is None:
        if not set(state.risr) <= alive | frozenset(gone):
            return None  # a RISR member still down may hold the longest log: wait for it
        candidates = [r for r in state.replicas if r in state.risr and r in restarted]
        if not candidates:
            return None
        known = log_end_offsets or {}
        leader = max(candidates, key=lambda r: (known.get(r, -1), -state.replicas.index(r)))
    dropped = {r for r in state.risr if r in restarted and r != leader}
    if leader != state.leader:
        dropped.add(state.leader)
    if leader == state.leader and leader not in restarted and not dropped:
        return state
    risr = tuple(r for r in state.risr if r not in dropped or r == leader)
    return dataclasses.replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, risr=risr)
