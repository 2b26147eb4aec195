"""What ``mafka4 deploy`` runs where on an existing Ray cluster, from Ray's node list (pure).

A deployment is etcd, the controller and the node agents (``runtime.node_agents``, which the
controller keeps). This module decides, from Ray's node list and what already runs:

* **the mafka4 nodes**: a deployment needs at least one alive write node and one alive read
  node (``identify_node``); without them it is refused before anything starts, saying how to
  give a node its resources.
* **head-type nodes**: the alive Ray nodes that offer ``mafka4_head`` (``HEAD_NODE_RESOURCE``);
  if none does, Ray's own head (the node offering Ray's ``node:__internal_head__``).
* **the etcd members** (``place_etcd_members``): three, one on each of the first three
  head-type nodes (by Ray node id, so two deploys pick the same ones), where there are three;
  else one, on the first, with a warning said loudly: that node then holds all metadata.
  The controller runs on the node of the first member.
* **what to start** (``plan_deploy``): a deployment whose members all run is kept as it is,
  even if the head-type nodes changed since (deploy never changes a running etcd's members:
  ``mafka4 undeploy`` and deploy again to move it); none running starts them all; some but not
  all of a member set running is refused, since a member missing from a running cluster
  cannot simply bootstrap again. The controller is started if it does not run.
  So a second deploy starts nothing new.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterable

from mafka4.errors import InvalidNodeId, NotDeployable
from mafka4.runtime.agent_plan import RayNode
from mafka4.runtime.node_identity import ROLE_RESOURCES, NodeRole, identify_node
from mafka4.transport.ray_names import HEAD_NODE_RESOURCE, NODE_RESOURCE_UNITS

# The resource only Ray's head node offers (Ray 2.x).
RAY_HEAD_NODE_RESOURCE = "node:__internal_head__"
# A quorum survives the loss of any one of three members; five would survive two, which no
# deployment here asks for.
ETCD_MEMBERS_SPREAD = 3
# A path on every node (ray_cluster.yaml's deploy uses it): etcd's data, the controller's log, the data root.
DATA_DIR_DEFAULT = "~/mafka4-data"
# Member names: a lone member keeps the name of a local cluster's (runtime.etcd_member).
LONE_MEMBER_NAME = "mafka4"


@dataclass(frozen=True, slots=True)
class MemberPlace:
    name: str  # the etcd member's name, also in its actor's name
    ray_node_id: str  # the head-type node it runs on


@dataclass(frozen=True, slots=True)
class EtcdPlacement:
    members: tuple[MemberPlace, ...]
    warning: str | None  # said loudly when the members are fewer than ETCD_MEMBERS_SPREAD

    @property
    def controller_ray_node_id(self) -> str:
        return self.members[0].ray_node_id


@dataclass(frozen=True, slots=True)
class DeployStep:
    start_members: tuple[MemberPlace, ...]  # empty: the running members are kept
    keep_members: tuple[str, ...]  # names of the running members kept
    start_controller: bool
    note: str | None = None  # why the running etcd differs from a fresh placement, if it does


def member_names(count: int) -> tuple[str, ...]:
    return (LONE_MEMBER_NAME,) if count == 1 else tuple(f"{LONE_MEMBER_NAME}-{i}" for i in range(count))


def head_type_nodes(ray_nodes: Iterable[RayNode]) -> tuple[RayNode, ...]:
    """The alive head-type nodes (module docstring), sorted by Ray node id."""
    alive = sorted((node for node in ray_nodes if node.alive), key=lambda node: node.ray_node_id)
    marked = tuple(node for node in alive if node.resources.get(HEAD_NODE_RESOURCE, 0) > 0)
    return marked or tuple(node for node in alive if node.resources.get(RAY_HEAD_NODE_RESOURCE, 0) > 0)


def require_mafka4_nodes(ray_nodes: Iterable[RayNode]) -> dict[NodeRole, list[str]]:
    """Role -> the node ids of the alive mafka4 nodes; NotDeployable if a role has none."""
    found: dict[NodeRole, list[str]] = {role: [] for role in NodeRole}
    for node in ray_nodes:
        if not node.alive:
            continue
        try:
            identity = identify_node(node.resources, node.ray_node_id)
        except InvalidNodeId:
            continue  # the node agent keeper logs why such a node gets no agent
        if identity is not None:
            found[identity.role].append(identity.node_id)
    missing = [role for role in NodeRole if not found[role]]
    if missing:
        example = {ROLE_RESOURCES[missing[0]]: NODE_RESOURCE_UNITS}
        raise NotDeployable(
            f"the Ray cluster has no alive {' and no '.join(ROLE_RESOURCES[role] for role in missing)} node "
            f"(found write nodes {sorted(found[NodeRole.WRITE]) or 'none'}, read nodes "
            f"{sorted(found[NodeRole.READ]) or 'none'}): start such workers with "
            f"ray start --resources '{_json(example)}'")
    return {role: sorted(ids) for role, ids in found.items()}


def place_etcd_members(ray_nodes: Iterable[RayNode]) -> EtcdPlacement:
    """Where etcd's members go (module docstring); NotDeployable if no node is head-type."""
    ray_nodes = list(ray_nodes)
    heads = head_type_nodes(ray_nodes)
    if not heads:
        raise NotDeployable(f"no alive head-type node: no Ray node offers {HEAD_NODE_RESOURCE!r} and Ray's head "
                            f"is not listed alive; give three nodes --resources '{{\"{HEAD_NODE_RESOURCE}\": 1}}'")
    if len(heads) >= ETCD_MEMBERS_SPREAD:
        chosen = heads[:ETCD_MEMBERS_SPREAD]
        return EtcdPlacement(tuple(MemberPlace(name, node.ray_node_id)
                                   for name, node in zip(member_names(len(chosen)), chosen)), None)
    marked = any(node.resources.get(HEAD_NODE_RESOURCE, 0) > 0 for node in heads)
    which = (f"{len(heads)} Ray node{'s offer' if len(heads) > 1 else ' offers'} {HEAD_NODE_RESOURCE!r}" if marked
             else f"no Ray node offers {HEAD_NODE_RESOURCE!r}, so Ray's head is the only head-type node")
    warning = (f"WARNING: etcd runs as ONE member, on Ray node {heads[0].ray_node_id} ({which}): all of mafka4's "
               f"metadata lives on that node and the cluster stops if it is lost. For {ETCD_MEMBERS_SPREAD} members, "
               f"which survive the loss of any one, give {ETCD_MEMBERS_SPREAD} nodes "
               f"--resources '{{\"{HEAD_NODE_RESOURCE}\": 1}}', then 'mafka4 undeploy' and 'mafka4 deploy'")
    return EtcdPlacement((MemberPlace(LONE_MEMBER_NAME, heads[0].ray_node_id),), warning)


def plan_deploy(placement: EtcdPlacement, running_members: Collection[str], controller_running: bool) -> DeployStep:
    """What to start (module docstring); NotDeployable if only part of a member set runs."""
    running = set(running_members)
    if not running:
        return DeployStep(placement.members, (), not controller_running)
    for count in (1, ETCD_MEMBERS_SPREAD):
        names = set(member_names(count))
        if running == names:
            note = None
            if count != len(placement.members):
                note = (f"etcd keeps its {count} running member{'s' if count > 1 else ''}, though the head-type "
                        f"nodes now call for {len(placement.members)}: 'mafka4 undeploy', then 'mafka4 deploy', "
                        f"to change that")
            return DeployStep((), tuple(sorted(running)), not controller_running, note)
    raise NotDeployable(f"only etcd members {sorted(running)} of an earlier deployment run: a missing member "
                        f"cannot rejoin by itself; run 'mafka4 undeploy' (its data stays), then 'mafka4 deploy'")


def _json(resources: dict[str, int]) -> str:
    return "{" + ", ".join(f'"{name}": {amount}' for name, amount in resources.items()) + "}"
