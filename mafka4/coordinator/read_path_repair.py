"""The controller's read-path decisions, as pure functions over plain values (no I/O, no clock).

``read_path_control.py`` gathers the facts and carries the decisions out; ``controller.py``
queues the work. The read path of a mafka4-mode topic has two kinds of parts the controller
keeps alive, each named by a ``ReadPathItem``:

* a **virtual partition** (its replicas, ``keys.read_replica_liveness``, one key per replica);
* the **feeder** of a physical partition (``keys.feeder_liveness``, one key per feeder).

**Which items to examine** (``item_for_event``, ``items_to_examine``). A liveness key that
disappears names its item; a key that appears names it only while its handling is pending
(an incomplete repair may finish now). A full reconcile examines every item with a missing
key, and on activation every VP (a previous controller may have died between writing a
failover and announcing it; repeated role notices are no-ops in the actor). Present keys
cost no ping: the controller pings only where a key is missing.

**Repairing a VP** (``decide_virtual_partition``). Facts: its ``VirtualPartitionState`` from
etcd, which replicas are *live* (a liveness key, or the actor answers a ping: after an etcd
outage the keys of live actors may be gone, and such a VP must keep its leader), which live
ones were *restarted* by this controller and have no role yet, and the registered read nodes.

* A dead replica (not live) whose read node is registered is restarted in place: same id,
  the log it has on that node. One whose node is gone waits for the node.
* The leader stays while it is live and not restarted. Otherwise the VP fails over
  (``virtual.failover``): a live RISR member leads the next epoch.
* With no live RISR member at all, the VP is *leaderless*: restart its dead replicas first
  and decide again with them as restarted; a restarted RISR member may then lead (a VP
  with ``read_replicas=1`` whose only replica died). Until one is restarted, consumers of
  the VP wait: a replica outside the RISR may lack records readers have seen.

Closed VPs (parents of a split or merge) are handled like active ones: a group that has not
consumed a parent to its sealed end, or a new group starting from the earliest offset, reads
it before its children (parent before child); an unsealed parent also still receives records
below the cut. Only a *retired* VP (``virtual.upkeep.retirable``: its logs deleted by
retention, its key kept) needs nothing: it is never examined and never repaired, since a
restarted replica would have no log to serve and no reader asks for one.

**Repairing a feeder** needs no decision beyond ``launcher.feeder_node``: a feeder keeps no
state, so a dead one is started on a live read node, round robin from its partition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import AbstractSet, Iterable, Sequence

from mafka4.coordinator import keys
from mafka4.risr.state import pick_leader
from mafka4.virtual.metadata import VirtualPartitionState

# Kinds of the controller's watch events on the read path's liveness prefixes.
READ_REPLICA_EVENTS = "read_replica_liveness"
FEEDER_EVENTS = "feeder_liveness"


class ReadPathPart(enum.Enum):
    VIRTUAL_PARTITION = "virtual partition"
    FEEDER = "feeder"


@dataclass(frozen=True, slots=True)
class ReadPathItem:
    """One part of a topic's read path the controller keeps alive: VP ``index`` or the feeder of partition ``index``."""

    part: ReadPathPart
    topic: str
    index: int

    def __str__(self) -> str:
        if self.part is ReadPathPart.VIRTUAL_PARTITION:
            return f"{self.topic}/v{self.index}"
        return f"{self.topic}-{self.index} feeder"


def virtual_partition_item(topic: str, vp: int) -> ReadPathItem:
    return ReadPathItem(ReadPathPart.VIRTUAL_PARTITION, topic, vp)


def feeder_item(topic: str, partition: int) -> ReadPathItem:
    return ReadPathItem(ReadPathPart.FEEDER, topic, partition)


def item_for_event(cluster: str, kind: str, key: str) -> ReadPathItem | None:
    """The item a watch event of ``kind`` on ``key`` is about; None for keys of no item."""
    if kind == READ_REPLICA_EVENTS:
        parsed = keys.parse_read_replica_liveness(cluster, key)
        return None if parsed is None else virtual_partition_item(parsed[0], parsed[1])
    if kind == FEEDER_EVENTS:
        parsed = keys.parse_feeder_liveness(cluster, key)
        return None if parsed is None else feeder_item(*parsed)
    return None


def items_to_examine(
    topic: str,
    states: Iterable[VirtualPartitionState],
    partitions: int,
    registered_replicas: AbstractSet[tuple[str, int, str]],
    registered_feeders: AbstractSet[tuple[str, int]],
    activation: bool,
) -> set[ReadPathItem]:
    """The items of one mafka4-mode topic a full reconcile hands to the controller.

    ``registered_replicas``: (topic, vp, replica) of every VP replica liveness key;
    ``registered_feeders``: (topic, partition) of every feeder liveness key.
    """
    items = {
        virtual_partition_item(topic, state.vp) for state in states
        if not state.retired and (
            activation or any((topic, state.vp, replica) not in registered_replicas for replica in state.replicas))
    }
    items |= {feeder_item(topic, p) for p in range(partitions) if (topic, p) not in registered_feeders}
    return items


@dataclass(frozen=True, slots=True)
class VirtualPartitionRepair:
    """What the controller does for one VP."""

    # Dead replicas to start again on their own (registered) read node.
    restart: tuple[str, ...] = ()
    # Dead replicas whose read node is not registered: they wait for it.
    waiting_for_node: tuple[str, ...] = ()
    # The leader is dead or restarted and a live RISR member can lead: fail over.
    failover: bool = False
    # No live RISR member: restart replicas (``restart``) and decide again; consumers wait.
    leaderless: bool = False

    @property
    def complete(self) -> bool:
        """Nothing to do: the leader leads and every replica is live."""
        return not (self.restart or self.waiting_for_node or self.failover or self.leaderless)


def decide_virtual_partition(
    state: VirtualPartitionState,
    live: AbstractSet[str],
    read_nodes: Sequence[str],
    restarted: AbstractSet[str] = frozenset(),
) -> VirtualPartitionRepair:
    """The controller's decision for one VP; see the module docstring."""
    assert restarted <= live, (restarted, live)
    if state.retired:
        return VirtualPartitionRepair()
    registered = set(read_nodes)
    dead = [r for r in state.replicas if r not in live]
    restart = tuple(r for r in dead if r in registered)
    waiting = tuple(r for r in dead if r not in registered)
    if state.leader in live and state.leader not in restarted:
        return VirtualPartitionRepair(restart, waiting)
    if pick_leader(state.replicas, state.risr, live) is None:
        return VirtualPartitionRepair(restart, waiting, leaderless=True)
    return VirtualPartitionRepair(restart, waiting, failover=True)


def leaderless_text(state: VirtualPartitionState, live: AbstractSet[str], waiting: Sequence[str]) -> str:
    """What an operator reads when a VP has no live RISR member and none could be restarted."""
    nodes = f"; read nodes of {list(waiting)} are not registered" if waiting else ""
    return (
        f"virtual partition {state.vp} has no leader: no RISR member of {list(state.risr)} is live "
        f"(live replicas: {sorted(live) or 'none'}){nodes}; its consumers wait until a RISR member's read "
        f"node is back ('mafka4 up' or the node agent) and the controller restarts it there"
    )

