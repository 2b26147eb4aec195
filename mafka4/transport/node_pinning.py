"""How an actor is pinned to one mafka4 node: by the node's own resource, or by node affinity.

Shared by everything that places an actor on a given node (the partition replicas, the read
nodes). Either way the actor also takes one unit of its role's resource, so a node's 1000
units bound how many such actors it hosts (``transport.ray_names``).
"""

from __future__ import annotations

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mafka4.transport.ray_names import node_resource, pinned_ray_node


def pinned_options(node_id: str, role_resource: str) -> dict:
    """``.options(...)`` keywords that run an actor on node ``node_id`` and nowhere else.

    A node known by its Ray node id (``pinned_ray_node``) gets a hard node affinity: if that Ray
    node is gone the actor fails to schedule instead of waiting, which is what a gone node's
    repair expects. Any other node is asked for one unit of ``node_resource(node_id)``.
    """
    ray_node_id = pinned_ray_node(node_id)
    if ray_node_id is None:
        return {"resources": {node_resource(node_id): 1, role_resource: 1}}
    return {"resources": {role_resource: 1},
            "scheduling_strategy": NodeAffinitySchedulingStrategy(ray_node_id, soft=False)}
