"""Which VP replicas move when a read node joins or is released (pure).

Two plans, each a list of ``replica_moves.ReplicaMove`` that ``replica_moves.next_move_step``
then carries out one write at a time:

* ``plan_moves_onto``: a new read node joined (issue 38: read nodes scale with consumers).
  Replicas move onto it, one at a time from the read node that hosts the most, until no live
  node with a movable replica hosts more than one replica above it. Followers move first (a
  follower's move needs no leader change), then leaders; within each, by topic and VP id.
* ``plan_moves_off``: a read node is to be released (idle past a stated delay). Every replica
  it hosts goes to the live read node, not the leaving one and not already a replica of that
  VP, that hosts the fewest replicas (moves planned so far included): a replica of an open VP to
  the one hosting the fewest of open VPs (then the fewest in all), a replica of a sealed VP to
  the one hosting the fewest in all (then the fewest of open VPs), so that sealed ones spread
  too; a replica with no such node is reported stuck, and the node must not be released while
  one is.

Load is the count of hosted replicas of open VPs (neither sealed nor retired) per live read
node, leaders and followers alike: the measure the read-node scaling decides on
(``metadata.read_node_load``'s ``hosted_vp_replicas``), so that the balance the moves reach is
the one the decision assumes when it judges whether the other nodes could carry a node's load.
Replicas of sealed VPs are left out on purpose: they never move onto a new node (below), so
counting them would make a node heavy with them give all its open replicas to a new node, and
the open ones, the ones fed and read, would end up less even; they weigh little (no feeding,
only draining and replays) and retire. ``hosted_replicas(..., sealed_too=True)`` counts them as
well: whether a node to release still hosts anything. Retired VPs hold no log: they never move
and count for no node. Replicas on read nodes that are not live count for no node either.

What moves onto a new node: a VP neither retired nor sealed (a sealed VP is only drained until it
is retired: copying its log gains nothing), with every replica on a live read node (a VP under
repair is the repair's), none on the new node (never two replicas of one VP on one node), and
not named in ``busy`` (VPs with a move in flight: one move per VP at a time). What moves off a
released node: every replica it hosts of a VP not retired and not busy, sealed ones included
(else the node would wait for their retention).

Ties are broken by node id, then topic, then VP id, so one input always gives one plan.

Invariants (asserted): every move's target is live, not its source, and holds no replica of the
VP; a plan moves each VP at most once; after ``plan_moves_onto``, no live node with a movable
replica hosts more than one replica above the new node.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import AbstractSet, Iterable, Mapping

from mafka4.coordinator.control.replica_moves import MovePurpose, ReplicaMove
from mafka4.virtual.vp_state import VirtualPartitionState

StatesByTopic = Mapping[str, Iterable[VirtualPartitionState]]


@dataclass(frozen=True, slots=True)
class StuckOnLeavingNode:
    """A replica on a read node to release that has nowhere to go."""

    topic: str
    vp: int
    node: str

    def __str__(self) -> str:
        return (f"replica of {self.topic}/v{self.vp} on read node {self.node} cannot move: every other live read "
                f"node already holds a replica of it; the node stays until another read node joins")


@dataclass(frozen=True, slots=True)
class MovesOff:
    """The outcome of ``plan_moves_off``."""

    moves: tuple[ReplicaMove, ...]  # by topic and VP id
    stuck: tuple[StuckOnLeavingNode, ...]  # by topic and VP id

    @property
    def releasable(self) -> bool:
        """The node holds nothing that cannot move: once ``moves`` are done it may be released."""
        return not self.stuck


def _kept(states_by_topic: StatesByTopic) -> list[tuple[str, VirtualPartitionState]]:
    """Every VP not retired, by topic and VP id."""
    kept = []
    for topic in sorted(states_by_topic):
        states = sorted((state for state in states_by_topic[topic] if not state.retired), key=lambda s: s.vp)
        assert len({state.vp for state in states}) == len(states), f"{topic}: one state per VP"
        kept.extend((topic, state) for state in states)
    return kept


def hosted_replicas(states_by_topic: StatesByTopic, live_read_nodes: Iterable[str], *,
                    sealed_too: bool = False) -> Counter:
    """Per live read node, the replicas of open VPs it hosts (with ``sealed_too``, of sealed VPs as
    well; retired VPs never count); 0 for a node hosting none."""
    live = frozenset(live_read_nodes)
    hosted = Counter({node: 0 for node in live})
    hosted.update(node for _, state in _kept(states_by_topic) if sealed_too or state.sealed_end_offset is None
                  for node in state.replicas if node in live)
    return hosted


def plan_moves_onto(states_by_topic: StatesByTopic, live_read_nodes: Iterable[str], new_node: str,
                    busy: AbstractSet[tuple[str, int]] = frozenset()) -> tuple[ReplicaMove, ...]:
    """The moves that even out hosted replicas with ``new_node`` (live, maybe empty); see the module
    docstring. ``busy``: (topic, VP id) of VPs with a move in flight. Moves in plan order."""
    live = frozenset(live_read_nodes)
    assert new_node in live, f"the new read node {new_node} is not among the live ones"
    hosted = hosted_replicas(states_by_topic, live)
    movable: dict[str, list[tuple[bool, str, int]]] = {node: [] for node in live - {new_node}}
    for topic, state in _kept(states_by_topic):
        if (state.sealed_end_offset is not None or (topic, state.vp) in busy or new_node in state.replicas
                or not set(state.replicas) <= live):
            continue
        for node in state.replicas:
            movable[node].append((node == state.leader, topic, state.vp))  # followers (False) first
    for candidates in movable.values():
        candidates.sort(reverse=True)  # pop() takes the next one
    moves: list[ReplicaMove] = []
    moved: set[tuple[str, int]] = set()
    donors = set(movable)
    while True:
        for node in donors:  # a VP that moved has a replica on the new node now: none of its others may move
            while movable[node] and movable[node][-1][1:] in moved:
                movable[node].pop()
        donors = {node for node in donors if movable[node]}
        if not donors:
            break
        donor = min(donors, key=lambda node: (-hosted[node], node))
        if hosted[donor] - hosted[new_node] <= 1:
            break
        _, topic, vp = movable[donor].pop()
        moves.append(ReplicaMove(topic, vp, donor, new_node, MovePurpose.BALANCE))
        moved.add((topic, vp))
        hosted[donor] -= 1
        hosted[new_node] += 1
    assert len({(m.topic, m.vp) for m in moves}) == len(moves), moves
    assert all(hosted[node] - hosted[new_node] <= 1 for node in donors), (hosted, donors)
    return tuple(moves)


def plan_moves_off(states_by_topic: StatesByTopic, live_read_nodes: Iterable[str], leaving_node: str,
                   busy: AbstractSet[tuple[str, int]] = frozenset()) -> MovesOff:
    """Where each replica on ``leaving_node`` goes before the node is released; see the module docstring.
    ``busy``: (topic, VP id) of VPs with a move in flight (they are planned again once it ends)."""
    destinations = frozenset(live_read_nodes) - {leaving_node}
    hosted = hosted_replicas(states_by_topic, destinations)
    held = hosted_replicas(states_by_topic, destinations, sealed_too=True)
    moves: list[ReplicaMove] = []
    stuck: list[StuckOnLeavingNode] = []
    for topic, state in _kept(states_by_topic):
        if leaving_node not in state.replicas or (topic, state.vp) in busy:
            continue
        eligible = destinations - set(state.replicas)
        if not eligible:
            stuck.append(StuckOnLeavingNode(topic, state.vp, leaving_node))
            continue
        sealed = state.sealed_end_offset is not None
        target = min(eligible, key=lambda node: (held[node], hosted[node], node) if sealed
                     else (hosted[node], held[node], node))
        moves.append(ReplicaMove(topic, state.vp, leaving_node, target, MovePurpose.RELEASE))
        held[target] += 1
        if not sealed:
            hosted[target] += 1
    return MovesOff(tuple(moves), tuple(stuck))
