"""The names by which the cluster's processes find each other in Ray: the namespace, the names of
the detached actors, and the custom resources that pin an actor to a node.

One place, so that the process that starts an actor and every process that looks it up agree
(``ray.get_actor(name, namespace=NAMESPACE)``). Names are unique per mafka4 cluster, so two
clusters may share one Ray cluster.

Node resources: a write node offers ``{"write_node": 1000, "mafka4_node_<id>": 1000}``, a read
node ``{"read_node": 1000, "mafka4_node_<id>": 1000}``. An actor is pinned to node ``id`` by
asking for one unit of ``node_resource(id)``; the 1000 units bound how many such actors fit on
one node.

A node that offers its role's resource but no ``mafka4_node_<id>`` is known by its Ray node id:
every node Ray's autoscaler launches from one node type offers the same resources, so none
can carry an id of its own. Its mafka4 id is ``ray_node_node_id(<Ray node id>)``
(``ray-<hex>``), and its actors are pinned to it by node affinity (``pinned_ray_node``).
"""

from __future__ import annotations

NAMESPACE = "mafka4"

NODE_RESOURCE_PREFIX = "mafka4_node_"
WRITE_NODE_RESOURCE = "write_node"
READ_NODE_RESOURCE = "read_node"
# A node offering this resource is head-type: ``mafka4 deploy`` runs etcd members and the controller
# there (``runtime.deploy_plan``), never a replica, since it offers no write_node / read_node.
HEAD_NODE_RESOURCE = "mafka4_head"
# Units of each role/node resource a node offers: the most actors pinned to one node.
NODE_RESOURCE_UNITS = 1000
# The mafka4 id of a node known by its Ray node id is this prefix and that id's hex; Ray's
# node ids are 28 bytes, so the id has 60 characters, within a DNS label's 63.
RAY_NODE_ID_PREFIX = "ray-"
_RAY_NODE_ID_HEX_CHARS = 56


def replica_actor_name(cluster: str, topic: str, partition: int, replica_id: str) -> str:
    """The Ray actor name of one physical partition replica."""
    return f"{cluster}/{topic}/{partition}/{replica_id}"


def read_node_actor_name(cluster: str, node_id: str) -> str:
    """The Ray actor name of the ``ReadNode`` of one read node."""
    return f"{cluster}/read_node/{node_id}"


def node_agent_actor_name(cluster: str, node_id: str) -> str:
    """The Ray actor name of the node agent that keeps node ``node_id`` registered (``runtime.node_agents``)."""
    return f"{cluster}/node_agent/{node_id}"


def etcd_member_actor_name(cluster: str, member: str) -> str:
    """The Ray actor name of the actor that owns etcd member ``member``'s process (``runtime.deploy_actors``)."""
    return f"{cluster}/deploy/etcd/{member}"


def controller_host_actor_name(cluster: str) -> str:
    """The Ray actor name of the actor that owns the deployed controller's process (``runtime.deploy_actors``)."""
    return f"{cluster}/deploy/controller"


def node_resource(node_id: str) -> str:
    """The custom resource only node ``node_id`` carries (Ray reserves the "node:" prefix)."""
    assert node_id and not node_id.startswith("node:"), node_id
    return f"{NODE_RESOURCE_PREFIX}{node_id}"


def ray_node_node_id(ray_node_id: str) -> str:
    """The mafka4 id of a node that offers no ``mafka4_node_<id>``: its Ray node id, prefixed."""
    assert len(ray_node_id) == _RAY_NODE_ID_HEX_CHARS and _is_hex(ray_node_id), ray_node_id
    return f"{RAY_NODE_ID_PREFIX}{ray_node_id}"


def pinned_ray_node(node_id: str) -> str | None:
    """The Ray node id that node ``node_id`` is named after (``ray_node_node_id``), else None: then
    the node offers ``node_resource(node_id)`` and actors are pinned by that resource."""
    hex_id = node_id[len(RAY_NODE_ID_PREFIX):]
    if node_id.startswith(RAY_NODE_ID_PREFIX) and len(hex_id) == _RAY_NODE_ID_HEX_CHARS and _is_hex(hex_id):
        return hex_id
    return None


def _is_hex(text: str) -> bool:
    return all(char in "0123456789abcdef" for char in text)
