"""Finding read nodes and asking the ones that lead VPs (clients, tools and the controller).

A read node is one detached, named ``ReadNode`` actor (``<cluster>/read_node/<node id>``);
any process finds it by name. Starting, stopping and telling it what to host is the
controller's (``coordinator.control.read_node_launcher``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Collection, Iterable

import ray

from mafka4.errors import NotLeader
from mafka4.limits import READ_NODE_CALL_TIMEOUT_S
from mafka4.transport.ray_names import NAMESPACE, read_node_actor_name
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.vp_state import VirtualPartitionState


def read_node_handle(cluster: str, node_id: str):
    """The live ``ReadNode`` actor of ``node_id``, or None if it is not running."""
    try:
        return ray.get_actor(read_node_actor_name(cluster, node_id), namespace=NAMESPACE)
    except ValueError:
        return None


def states_by_node(states: Iterable[VirtualPartitionState], replicas: Collection[str] | None = None
                   ) -> dict[str, list[VirtualPartitionState]]:
    """The states each read node must be told about: every VP it is a replica of (optionally only ``replicas``)."""
    by_node: dict[str, list[VirtualPartitionState]] = defaultdict(list)
    for state in states:
        for node_id in state.replicas:
            if replicas is None or node_id in replicas:
                by_node[node_id].append(state)
    return dict(by_node)


def ask_leader_nodes(cluster: str, topic: str, states: Iterable[VirtualPartitionState], method: str, *args,
                     timeout_s: float = READ_NODE_CALL_TIMEOUT_S) -> dict[int, object]:
    """Call ``ReadNode.<method>(vp_ids, *args)`` once per node leading some of ``states``.

    Per VP: the node's answer for it (which may be a ``MafkaError``), or the ``NotLeader`` or Ray
    error met reaching its node.
    """
    by_node: dict[str, list[int]] = defaultdict(list)
    for state in states:
        by_node[state.leader].append(state.vp)
    refs, answers = {}, {}
    for node_id, vps in by_node.items():
        handle = read_node_handle(cluster, node_id)
        if handle is None:
            answers.update({vp: NotLeader(f"read node {node_id} leading {topic}/v{vp} is not running; retry after "
                                          f"the VP failed over") for vp in vps})
            continue
        refs[node_id] = getattr(handle, method).remote([VpId(topic, vp) for vp in vps], *args)
    for node_id, ref in refs.items():
        try:
            found = ray.get(ref, timeout=timeout_s)
        except (ray.exceptions.RayError, TimeoutError) as error:
            found = [error] * len(by_node[node_id])
        answers.update(zip(by_node[node_id], found))
    return answers
