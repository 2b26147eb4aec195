"""The controller's decisions, as pure functions over plain values (no I/O, no clock).

Two decisions live here; ``partition_repairs.py`` and ``controller_election.py`` gather the facts
and carry them out.

**Partition leadership** (``decide_partition``). Facts: the partition's ``PartitionState``
from etcd, which of its replicas are *live* (their actor answers), which of those are
*fresh* (just started by the controller and not yet told their role), the registered write
nodes, and the topic's ``TopicConfig``. Rules:

* The leader stays if it is live and not fresh. Otherwise the new leader is the first
  replica, in replica order, that is a live ISR member; with none, the first live, non-fresh
  eligible leader replica (ELR, Kafka's KIP-966, see ``physical.partition_state``): a replica the leader
  removed while the ISR fell below ``min_insync_replicas``, which holds every committed
  batch because the high watermark stands still below that size. E.g. the leader shrinks
  the ISR to itself and then loses power: its restarted log lacks its unflushed tail, the
  ELR members do not. With neither, the partition is offline unless
  ``unclean_leader_election`` is set, in which case the first live replica leads (it may
  lack acknowledged batches: the decision carries a warning).
* A dead replica whose node is registered is restarted in place (same id, its log is on
  that node), which is not a change of the replica set. If it is in the ISR, the decision
  also writes a new epoch whose ISR leaves it out (Kafka's KIP-966): a machine that lost
  power lost its unflushed tail, so a restarted replica may lack acknowledged batches, and
  while it is listed in the ISR the controller could elect it, e.g. when the leader is cut
  off before it shrinks the ISR itself. It rejoins through the leader's ISR expansion once
  caught up. A restarted replica leaves the ELR for the same reason, even while the
  partition is offline (the decision then writes a new epoch of the old, dead leader with the
  smaller ELR; a restarted replica still in the ISR stays there, as the last way back
  without an unclean election). A dead replica whose node is gone
  is replaced by a registered write node that holds no replica of the partition, chosen
  round robin from the partition number so replacements spread like ``placement`` does;
  with no such node it stays in the list, dead, until one registers.
* Any change of leader, of the replica set or of the ISR bumps ``leader_epoch`` by one (a
  leader learns its followers and ISR only through ``become_leader``, which needs a new
  epoch). The ISR of a changed state is the live, non-fresh ISR members plus the new
  leader; fresh, restarted and replacement replicas join later through the leader's ISR
  expansion. Its ELR is the old ELR without the new ISR, restarted, fresh and replaced
  replicas, and empty once the ISR has ``min_insync_replicas`` members.

Invariants of every new state (asserted): the leader is a replica and in the ISR, the ISR
is a subset of the replicas, replicas are distinct, the ELR is a subset of the replicas
disjoint from the ISR, the epoch grew by exactly one.

**Controller election** (``decide_campaign``). One controller is active: the one whose
lease-bound key ``keys.controller`` exists. A candidate campaigns only while the key is absent,
with the epoch one above ``keys.controller_epoch``; an active controller whose lease was not
refreshed for a whole TTL must assume etcd expired it and step down (the rule every lease
keeper follows, ``lease.LeaseLife.expired``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import AbstractSet, Sequence

from mafka4.limits import TopicConfig
from mafka4.physical.partition_state import PartitionState, eligible_leader_replicas


@dataclass(frozen=True, slots=True)
class PartitionDecision:
    """What the controller does for one partition."""

    # The state to write (compare-and-swap) and announce; None: etcd stays as it is.
    state: PartitionState | None
    # Dead replicas to start again on their own node, with the log they have there.
    restart: tuple[str, ...] = ()
    # Replicas newly placed on a node (start empty, catch up from the leader).
    add: tuple[str, ...] = ()
    # Replicas dropped from the replica set: stop them if they still run.
    remove: tuple[str, ...] = ()
    # No replica may lead: producers wait. etcd keeps the old state unless ``state`` is set
    # (restarted replicas leaving the ELR).
    offline: bool = False
    # Set when the decision may lose acknowledged data (unclean election).
    warning: str | None = None

    @property
    def changed(self) -> bool:
        return self.state is not None


def decide_partition(
    state: PartitionState,
    live: AbstractSet[str],
    write_nodes: Sequence[str],
    config: TopicConfig,
    fresh: AbstractSet[str] = frozenset(),
) -> PartitionDecision:
    """The controller's decision for one partition; see the module docstring."""
    assert fresh <= live, (fresh, live)
    registered = set(write_nodes)
    dead = [r for r in state.replicas if r not in live]
    restart = tuple(r for r in dead if r in registered)
    replicas, add, remove = _replace_dead(state, dead, restart, sorted(registered))
    leader, warning = _choose_leader(state, live, fresh, config)
    # A restarted replica may have lost its unflushed tail: it must not stay electable.
    unsafe = frozenset(restart) | fresh
    if leader is None:
        offline_state = None
        if unsafe & set(state.elr):
            elr = tuple(r for r in state.elr if r not in unsafe)
            offline_state = replace(state, leader_epoch=state.leader_epoch + 1, elr=elr)
            _check_new_state(state, offline_state)
        return PartitionDecision(offline_state, restart=restart, offline=True, warning=_offline_text(state, live))
    restarted_electable = any(r in state.isr or r in state.elr for r in restart)
    if leader == state.leader and leader not in fresh and replicas == state.replicas and not restarted_electable:
        return PartitionDecision(None, restart=restart)
    isr = tuple(r for r in replicas if r == leader or (r in state.isr and r in live and r not in fresh))
    elr = eligible_leader_replicas(replicas, [r for r in state.elr if r not in unsafe], isr, config.min_insync_replicas)
    new_state = PartitionState(state.partition, leader, state.leader_epoch + 1, replicas, isr, elr)
    _check_new_state(state, new_state)
    return PartitionDecision(new_state, restart=restart, add=add, remove=remove, warning=warning)


def _choose_leader(state: PartitionState, live: AbstractSet[str], fresh: AbstractSet[str],
                   config: TopicConfig) -> tuple[str | None, str | None]:
    """(leader, warning); leader None when the partition must go offline."""
    if state.leader in live and state.leader not in fresh:
        return state.leader, None
    for replica in state.replicas:
        if replica in state.isr and replica in live:
            return replica, None
    for replica in state.replicas:
        if replica in state.elr and replica in live and replica not in fresh:
            return replica, None
    if config.unclean_leader_election:
        for replica in state.replicas:
            if replica in live:
                return replica, (
                    f"unclean leader election: partition {state.partition} had no live in-sync replica "
                    f"(ISR {list(state.isr)}); {replica} leads epoch {state.leader_epoch + 1} and batches "
                    f"acknowledged by the old ISR but missing on {replica} are lost"
                )
    return None, None


def _replace_dead(state: PartitionState, dead: list[str], restart: tuple[str, ...],
                  nodes: list[str]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(replicas, added, removed): dead replicas on unregistered nodes move to free nodes."""
    free = [node for node in nodes if node not in state.replicas]
    replicas = list(state.replicas)
    added, removed = [], []
    for replica in dead:
        if replica in restart or not free:
            continue
        # Round robin from the partition number, as placement starts each partition elsewhere.
        node = free.pop(state.partition % len(free))
        replicas[replicas.index(replica)] = node
        added.append(node)
        removed.append(replica)
    return tuple(replicas), tuple(added), tuple(removed)


def _offline_text(state: PartitionState, live: AbstractSet[str]) -> str:
    return (
        f"partition {state.partition} is offline: no in-sync replica of {list(state.isr)} and no "
        f"eligible leader replica of {list(state.elr)} is live and unrestarted "
        f"(live replicas: {sorted(live) or 'none'}); it leads again when one returns, or set "
        f"unclean_leader_election on the topic to accept losing acknowledged batches"
    )


def _check_new_state(old: PartitionState, new: PartitionState) -> None:
    assert len(set(new.replicas)) == len(new.replicas), new.replicas
    assert new.leader in new.replicas and new.leader in new.isr, new
    assert set(new.isr) <= set(new.replicas), new
    assert set(new.elr) <= set(new.replicas) and not set(new.elr) & set(new.isr), new
    assert new.leader_epoch == old.leader_epoch + 1, (old, new)


# --- controller election ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Campaign:
    """Try to become the active controller with this controller epoch."""

    controller_epoch: int


@dataclass(frozen=True, slots=True)
class Standby:
    """Another controller is active; wait until its key disappears."""

    active_controller_id: str
    controller_epoch: int


def decide_campaign(controller_value: dict | None, epoch_counter: int | None) -> Campaign | Standby:
    """Campaign while no controller key exists, with an epoch above every epoch handed out."""
    if controller_value is not None:
        return Standby(controller_value["controller_id"], controller_value["controller_epoch"])
    latest = -1 if epoch_counter is None else epoch_counter
    assert latest >= -1, latest
    return Campaign(latest + 1)
