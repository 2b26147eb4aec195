"""Which node agents to start and which registrations to drop, from what Ray and etcd show (pure).

The node agent keeper (``runtime.node_agents``) runs one Ray actor per mafka4 node, pinned to
its Ray node, that keeps the node registered (``runtime.registration``). Each pass it shows
``plan_agents`` Ray's node list, the agents that answered and the registered node ids, and
executes the ``AgentPlan`` it returns:

* **start** an agent on every alive Ray node that ``identify_node`` names a mafka4 node and whose
  id has no agent answering. Two alive Ray nodes offering one id get no second agent: if one of
  them already has the agent it keeps it, otherwise neither gets one (which one is the node is
  the operator's to say). A node whose resources name no usable id is skipped with the reason.
* **drop** the registration of a node id that has left Ray: it is registered, no alive Ray node
  offers it and no agent for it answers, and Ray shows where it went: the Ray node its agent
  ran on (``homes``: from the registration and the keeper's memory; for an id named after its
  Ray node, that node) is dead or no longer listed, or a dead Ray node offers it (Ray 2.60's node list does not show what a dead node
  offered, so ``homes`` is what finds most). A list without any alive node (not even the head
  this process is joined through) is a failed read: it drops nothing. Without
  such evidence (an id Ray never showed: a shell agent's, or a node still joining) nothing is
  dropped: the registration's lease ends it if its node is really gone.

* **withhold** the agent of a read node the controller released (``withheld``): its agent would
  keep the Ray node busy (Ray does not end a node that runs any actor), so it is stopped and
  none is started again while the mark lasts.

Invariants (``tests/unit/test_agent_plan.py``): at most one start per node id, none for an id
with an answering agent, each on an alive Ray node offering that id and role; no drop of an id
an alive Ray node offers or an agent answers for.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Collection, Iterable, Mapping

from mafka4.errors import InvalidNodeId
from mafka4.runtime.node_identity import NodeIdentity, NodeRole, identify_node
from mafka4.transport.ray_names import pinned_ray_node


@dataclass(frozen=True, slots=True)
class RayNode:
    """One entry of Ray's node list (``ray.nodes()``); a dead node stays listed for a while."""

    ray_node_id: str  # hex, what NodeAffinitySchedulingStrategy takes
    alive: bool
    resources: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class AgentStart:
    node_id: str
    role: NodeRole
    ray_node_id: str  # the Ray node to pin the agent to


@dataclass(frozen=True, slots=True)
class SkippedNode:
    ray_node_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class AgentPlan:
    start: tuple[AgentStart, ...] = ()
    drop: tuple[str, ...] = ()  # node ids whose registration to delete
    skipped: tuple[SkippedNode, ...] = ()
    stop: tuple[str, ...] = ()  # withheld node ids whose agent answers: stop it (it revokes the registration)
    forget: tuple[str, ...] = ()  # withheld node ids no alive Ray node offers any more: the mark can go


def plan_agents(ray_nodes: Iterable[RayNode], agents: Mapping[str, str], registered: Collection[str],
                homes: Mapping[str, str] | None = None, withheld: Collection[str] = ()) -> AgentPlan:
    """The plan for one pass (module docstring).

    ``agents``: node id -> Ray node id of every agent that answered this pass.
    ``registered``: node ids with a registration in etcd.
    ``homes``: node id -> Ray node id its agent last ran on, as far as the caller remembers.
    ``withheld``: node ids the controller released (``keys.released_read_node``): none gets an
    agent, an answering one is stopped, so that nothing of mafka4 keeps the Ray node busy and
    Ray's autoscaler can end it; once no alive Ray node offers the id, its mark is forgotten.
    """
    homes = homes or {}
    withheld = frozenset(withheld)
    alive_by_id: dict[str, list[tuple[RayNode, NodeIdentity]]] = defaultdict(list)
    dead_ids: set[str] = set()
    status: dict[str, bool] = {}  # Ray node id -> alive
    skipped: list[SkippedNode] = []
    for node in ray_nodes:
        status[node.ray_node_id] = node.alive
        try:
            identity = identify_node(node.resources, node.ray_node_id)
        except InvalidNodeId as error:
            if node.alive:
                skipped.append(SkippedNode(node.ray_node_id, error.message))
            continue
        if identity is None:
            continue
        if node.alive:
            alive_by_id[identity.node_id].append((node, identity))
        else:
            dead_ids.add(identity.node_id)

    start = []
    for node_id, carriers in sorted(alive_by_id.items()):
        if len(carriers) > 1:
            others = [node for node, _ in carriers if node.ray_node_id != agents.get(node_id)]
            reason = (f"{len(carriers)} alive Ray nodes offer node id {node_id!r}: "
                      f"give each its own mafka4_node_<id> resource")
            skipped.extend(SkippedNode(node.ray_node_id, reason) for node in others)
        elif node_id not in agents and node_id not in withheld:
            node, identity = carriers[0]
            start.append(AgentStart(node_id, identity.role, node.ray_node_id))
    stop = tuple(sorted(withheld & set(agents)))
    forget = tuple(sorted(withheld - set(alive_by_id)))

    def left_ray(node_id: str) -> bool:
        if node_id in alive_by_id or node_id in agents:
            return False
        home = homes.get(node_id) or pinned_ray_node(node_id)
        return node_id in dead_ids or (home is not None and not status.get(home, False))

    if not any(status.values()):  # a failed read: nothing is gone, nothing forgotten
        return AgentPlan(tuple(start), (), tuple(skipped), stop)
    drop = tuple(sorted(node_id for node_id in registered if left_ray(node_id)))
    return AgentPlan(tuple(start), drop, tuple(skipped), stop, forget)
