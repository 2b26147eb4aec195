"""Rack-aware replica placement with balanced replica and leader counts, by maximum flow (pure).

Nodes are numbered 0..N-1; node ``i`` is in rack ``i % racks`` (racks differ in size by at
most one node). Two flow problems, solved with ``networkx.maximum_flow`` (shortest augmenting
paths, the fastest of networkx's algorithms on these unit-capacity bipartite graphs):

1. **Replicas to racks.** source -> partition ``p`` (capacity RF) -> rack ``r`` (capacity 1)
   -> sink (capacity ``slots * nodes_in(r)``). A flow of RF * P puts the RF replicas of every
   partition in RF distinct racks (the capacity-1 arcs) with at most ``slots`` replicas per
   node on average in each rack. ``slots`` starts at ceil(RF * P / N), the perfect balance,
   and is raised by binary search only if that is infeasible. Inside a rack the replicas go
   to its nodes in turn (all nodes of a rack are interchangeable), so a node's count differs
   from its rack-mates' by at most one, and no node holds two replicas of one partition.
2. **Leaders.** source -> partition (capacity 1) -> each of its replica nodes (capacity 1) ->
   sink (capacity floor(P / N)), plus one arc per node to a hub that takes the P mod N leaders
   left: a saturating flow gives every partition one leader among its replicas and every node
   floor(P / N) or one more. If the replica sets do not allow that, the sink arcs get capacity
   ``leaders`` from ceil(P / N) upwards (binary search) instead.

Invariants (asserted): every partition has RF replicas on RF distinct racks, its leader is
one of them and listed first. Flows count replicas, not load: partitions of unequal rate leave
some load imbalance, which ``node_loads`` measures for the capacity model. Deterministic: the
graphs are built in a fixed order and the flow algorithm has no randomness.

So ``place`` is a function of its four arguments alone, and it keeps its last
``PLACEMENTS_CACHED`` answers (a ``Placement`` is immutable, so callers can share one). The
flows cost seconds for thousands of partitions, and the capacity model asks the same question
again and again: every consumer scale of a sweep places the same Mafka4 write partitions, and
with as few read nodes as racks the whole VP fleet is placed, the same at every scale that
keeps the VP count.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import networkx as nx
from networkx.algorithms.flow import shortest_augmenting_path
import numpy as np

from mafka4.errors import PlacementInfeasible

SOURCE, SINK = "source", "sink"
# Placements kept by ``place``: each holds a tuple per partition (a few MB at 10,000 partitions).
PLACEMENTS_CACHED = 64


@dataclass(frozen=True, slots=True)
class Placement:
    """Replica nodes of each partition, leader first; ``node_racks[n]`` is node n's rack."""

    node_racks: tuple[int, ...]
    replicas: tuple[tuple[int, ...], ...]

    @property
    def nodes(self) -> int:
        return len(self.node_racks)

    def replicas_per_node(self) -> np.ndarray:
        return np.bincount([n for nodes in self.replicas for n in nodes], minlength=self.nodes)

    def leaders_per_node(self) -> np.ndarray:
        return np.bincount([nodes[0] for nodes in self.replicas], minlength=self.nodes)

    def node_loads(self, leader_load: np.ndarray, follower_load: np.ndarray) -> np.ndarray:
        """Per-node sum of the leader load of the partitions it leads and the follower load of the rest."""
        loads = np.zeros(self.nodes)
        for partition, nodes in enumerate(self.replicas):
            loads[nodes[0]] += leader_load[partition]
            for node in nodes[1:]:
                loads[node] += follower_load[partition]
        return loads


def node_racks(nodes: int, racks: int) -> tuple[int, ...]:
    return tuple(node % racks for node in range(nodes))


def _check(partitions: int, replication_factor: int, nodes: int, racks: int) -> None:
    if partitions < 1 or replication_factor < 1:
        raise PlacementInfeasible(f"cannot place {partitions} partitions of replication factor {replication_factor}: "
                                  f"both must be >= 1")
    if racks < replication_factor:
        raise PlacementInfeasible(
            f"replication factor {replication_factor} needs {replication_factor} racks for rack-aware placement, "
            f"the fleet has {racks}: add racks or lower the replication factor")
    if nodes < racks:
        raise PlacementInfeasible(f"{nodes} nodes cannot fill {racks} racks: use at least {racks} nodes")


def _saturating_flow(build, capacity: int) -> dict | None:
    graph, demand = build(capacity)
    value, flow = nx.maximum_flow(graph, SOURCE, SINK, flow_func=shortest_augmenting_path)
    return flow if value == demand else None


def _max_flow_at(build, low: int, high: int) -> tuple[int, dict]:
    """Smallest capacity in [low, high] at which ``build(capacity)`` saturates; (capacity, flow).

    ``low`` (perfect balance) is tried first: it is feasible whenever racks are of equal size.
    """
    flow = _saturating_flow(build, low)
    if flow is not None:
        return low, flow
    best = None
    low += 1
    while low <= high:  # binary search: feasibility is monotone in the capacity
        middle = (low + high) // 2
        flow = _saturating_flow(build, middle)
        if flow is not None:
            best, high = (middle, flow), middle - 1
        else:
            low = middle + 1
    if best is None:
        raise PlacementInfeasible(f"no placement even with {high} replicas per node")
    return best


def _rack_graph(partitions: int, replication_factor: int, rack_sizes: list[int], slots: int):
    graph = nx.DiGraph()
    for partition in range(partitions):
        graph.add_edge(SOURCE, ("p", partition), capacity=replication_factor)
        for rack in range(len(rack_sizes)):
            graph.add_edge(("p", partition), ("r", rack), capacity=1)
    for rack, size in enumerate(rack_sizes):
        graph.add_edge(("r", rack), SINK, capacity=slots * size)
    return graph, partitions * replication_factor


def _leader_graph(replicas: list[list[int]], nodes: int, leaders: int, exact: bool = False):
    """Leader choice; ``exact``: every node leads floor(P / N) or one more (``leaders`` is ignored):
    each node's arc to the sink carries floor(P / N) and a hub takes the P mod N extra leaders, at
    most one per node, so a saturating flow is a perfect balance."""
    graph = nx.DiGraph()
    for partition, replica_nodes in enumerate(replicas):
        graph.add_edge(SOURCE, ("p", partition), capacity=1)
        for node in replica_nodes:
            graph.add_edge(("p", partition), ("n", node), capacity=1)
    base, extras = divmod(len(replicas), nodes)
    for node in range(nodes):
        graph.add_edge(("n", node), SINK, capacity=base if exact else leaders)
        if exact and extras:
            graph.add_edge(("n", node), "extra", capacity=1)
    if exact and extras:
        graph.add_edge("extra", SINK, capacity=extras)
    return graph, len(replicas)


def _leaders(replicas: list[list[int]], nodes: int) -> dict:
    """A leader flow: perfectly balanced if the replica sets allow it, else the smallest maximum."""
    flow = _saturating_flow(lambda _: _leader_graph(replicas, nodes, 0, exact=True), 0)
    if flow is not None:
        return flow
    partitions = len(replicas)
    return _max_flow_at(lambda leaders: _leader_graph(replicas, nodes, leaders), math.ceil(partitions / nodes), partitions)[1]


@functools.lru_cache(maxsize=PLACEMENTS_CACHED)
def place(partitions: int, replication_factor: int, nodes: int, racks: int) -> Placement:
    """Rack-aware, replica- and leader-balanced placement of ``partitions`` partitions."""
    _check(partitions, replication_factor, nodes, racks)
    racks_of = node_racks(nodes, racks)
    members = [[n for n in range(nodes) if racks_of[n] == rack] for rack in range(racks)]
    balanced = math.ceil(partitions * replication_factor / nodes)
    _, flow = _max_flow_at(lambda slots: _rack_graph(partitions, replication_factor, [len(m) for m in members], slots),
                           balanced, partitions)
    turn = [0] * racks  # next node of each rack, in turn
    replicas: list[list[int]] = []
    for partition in range(partitions):
        chosen = []
        for (_, rack), units in flow[("p", partition)].items():
            if units:
                chosen.append(members[rack][turn[rack] % len(members[rack])])
                turn[rack] += 1
        replicas.append(sorted(chosen))
    leader_flow = _leaders(replicas, nodes)
    ordered = []
    for partition, replica_nodes in enumerate(replicas):
        leader = next(node for (_, node), units in leader_flow[("p", partition)].items() if units)
        ordered.append((leader, *(n for n in replica_nodes if n != leader)))
    placement = Placement(racks_of, tuple(ordered))
    for replica_nodes in placement.replicas:
        assert len(replica_nodes) == replication_factor, replica_nodes
        assert len({racks_of[n] for n in replica_nodes}) == replication_factor, replica_nodes
    return placement
