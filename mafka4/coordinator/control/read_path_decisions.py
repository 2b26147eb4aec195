"""The controller's read-path decisions, as pure functions over plain values (no I/O, no clock).

``read_path_repairs.py`` gathers the facts and carries the decisions out; ``controller.py``
queues the work. The read path of a mafka4-mode topic lives in read nodes, so the controller
keeps two kinds of parts alive:

* a **read node** (``ReadNodeItem``): one ``ReadNode`` actor per registered read node, holding
  ``keys.read_node_liveness`` under its own lease;
* a **virtual partition** (``VirtualPartitionItem``): its replicas, each hosted by the read node
  of the same id, in the role its etcd state gives.

**Which items to examine** (``item_for_event``, ``items_to_examine``, ``node_items``). A read
node's liveness key that disappears names its node; a node that registers names it too (its
actor is started). A full reconcile examines every registered read node without a liveness
key, every VP with a replica on such a node, and on activation every VP (a previous controller
may have died between writing a failover and announcing it; repeated role notices are no-ops in
the node). Present keys cost no ping: the controller pings only where a key is missing.

**Repairing a VP** (``decide_virtual_partition``). Facts: its ``VirtualPartitionState``, which
replicas are *live* (their node's actor holds its liveness key or answers a ping: after an etcd
outage the keys of live nodes may be gone, and such a VP must keep its leader), which live ones
are *restarted* (their node runs but has no role for the VP: the node restarted, or never heard
of it), and the registered read nodes.

* A dead replica (its node's actor is dead) whose node is registered waits for the node to be
  restarted (``restart_nodes``); one whose node is not registered waits for the node.
* The leader stays while it is live and not restarted. Otherwise the VP fails over
  (``virtual.failover``): a live RISR member leads the next epoch, a restarted one if no other.
* With no live RISR member at all the VP is *leaderless*: consumers of the VP wait until a RISR
  member's node is back; a replica outside the RISR may lack records readers have seen.

Closed VPs (parents of a split or merge) are handled like active ones until retired
(``VirtualPartitionState.retired``: their logs are deleted, nothing is left to keep alive).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Iterable, Sequence

from mafka4.metadata import keys
from mafka4.risr.state import pick_leader
from mafka4.virtual.vp_state import VirtualPartitionState

# Kinds of the controller's watch events on the read path's liveness prefix.
READ_NODE_EVENTS = "read_node_liveness"


@dataclass(frozen=True, slots=True, order=True)
class ReadNodeItem:
    """A read node whose actor the controller keeps running."""

    node_id: str

    def __str__(self) -> str:
        return f"read node {self.node_id}"


@dataclass(frozen=True, slots=True, order=True)
class VirtualPartitionItem:
    """A VP whose replicas the controller keeps hosted, with a live leader."""

    topic: str
    vp: int

    def __str__(self) -> str:
        return f"{self.topic}/v{self.vp}"


ReadPathItem = ReadNodeItem | VirtualPartitionItem


def item_for_event(cluster: str, kind: str, key: str) -> ReadNodeItem | None:
    """The read node a watch event of ``kind`` on ``key`` is about; None for keys of no item."""
    if kind == READ_NODE_EVENTS:
        node_id = keys.parse_read_node_liveness(cluster, key)
        return None if node_id is None else ReadNodeItem(node_id)
    return None


def node_items(registered_read_nodes: Iterable[str], live_node_keys: AbstractSet[str]) -> set[ReadNodeItem]:
    """The registered read nodes whose actor holds no liveness key (to ping, and restart if dead)."""
    return {ReadNodeItem(node) for node in registered_read_nodes if node not in live_node_keys}


def items_to_examine(topic: str, states: Iterable[VirtualPartitionState], live_node_keys: AbstractSet[str],
                     activation: bool) -> set[VirtualPartitionItem]:
    """The VPs of one mafka4-mode topic a full reconcile examines (``live_node_keys``: read nodes
    whose liveness key exists)."""
    return {
        VirtualPartitionItem(topic, state.vp) for state in states
        if not state.retired and (activation or any(replica not in live_node_keys for replica in state.replicas))
    }


@dataclass(frozen=True, slots=True)
class VirtualPartitionRepair:
    """What the controller does for one VP."""

    # Dead replicas whose read node is registered: the node's actor is restarted.
    restart: tuple[str, ...] = ()
    # Dead replicas whose read node is not registered: they wait for it.
    waiting_for_node: tuple[str, ...] = ()
    # The leader is dead or restarted and a live RISR member can lead: fail over.
    failover: bool = False
    # No live RISR member: restart their nodes (``restart``) and decide again; consumers wait.
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
        f"node is back ('mafka4 up' or the node agent) and the controller restarts the read node there"
    )

