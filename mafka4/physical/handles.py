"""Finding the replica actor of a physical partition by name (clients, tools and the controller).

Replica actors are detached and named (``replica_actor_name``), so they outlive the process
that created them and any client finds them by name. Starting and stopping them is the
controller's (``coordinator.control.physical_launcher``).
"""

from __future__ import annotations

import ray

from mafka4.transport.ray_names import NAMESPACE, replica_actor_name


def replica_handle(cluster: str, topic: str, partition: int, replica_id: str):
    """The live actor of one replica, or None if it is not running."""
    try:
        return ray.get_actor(replica_actor_name(cluster, topic, partition, replica_id), namespace=NAMESPACE)
    except ValueError:
        return None
