"""Starting read nodes and telling them what to host: the only processes of the read path.

A read node is one detached, named ``ReadNode`` actor (``<cluster>/read_node/<node id>``) with
``num_cpus=0``, pinned to its node by the node's custom resource. The controller starts it when
the node registers and restarts it when it dies; every VP replica lives inside one
(``host_states``). Nothing here starts a process per VP.
"""

from __future__ import annotations

import time
from typing import Collection, Iterable, Sequence

import ray

from mafka4.limits import READ_NODE_CALL_TIMEOUT_S, READ_NODE_STOP_TIMEOUT_S, ReadNodeConfig, TopicConfig
from mafka4.transport.ray_names import NAMESPACE, READ_NODE_RESOURCE, node_resource, read_node_actor_name
from mafka4.virtual.handles import ReadNodeHandles, read_node_handle, states_by_node
from mafka4.virtual.read_node import ReadNode, ReadNodeSpec
from mafka4.virtual.vp_state import VirtualPartitionState


def start_read_node(cluster: str, etcd_endpoint: str, node_id: str, data_root: str,
                    config: ReadNodeConfig = ReadNodeConfig(), timeout_s: float | None = READ_NODE_CALL_TIMEOUT_S):
    """Start the read node actor of ``node_id`` and wait until it holds its liveness key; returns its handle."""
    handle = ReadNode.options(
        name=read_node_actor_name(cluster, node_id), namespace=NAMESPACE, lifetime="detached", num_cpus=0,
        resources={node_resource(node_id): 1, READ_NODE_RESOURCE: 1}, max_restarts=0, max_concurrency=10_000,
    ).remote(ReadNodeSpec(cluster, node_id, data_root, etcd_endpoint, config))
    ray.get(handle.start.remote(), timeout=timeout_s)
    return handle


def ensure_read_node(cluster: str, etcd_endpoint: str, node_id: str, data_root: str,
                     config: ReadNodeConfig = ReadNodeConfig(), timeout_s: float | None = READ_NODE_CALL_TIMEOUT_S):
    """The running read node actor of ``node_id``, started if there is none (a node that just
    registered, before the controller's loop got to it); its handle."""
    handle = read_node_handle(cluster, node_id)
    if handle is not None:
        return handle
    try:
        return start_read_node(cluster, etcd_endpoint, node_id, data_root, config, timeout_s)
    except ValueError:  # started by someone else meanwhile (the name is taken)
        handle = read_node_handle(cluster, node_id)
        if handle is None:
            raise
        ray.get(handle.start.remote(), timeout=timeout_s)
        return handle


def stop_read_node(cluster: str, node_id: str, timeout_s: float = READ_NODE_STOP_TIMEOUT_S) -> None:
    """Close and kill the read node actor of ``node_id`` (if it runs) and wait until its name is free."""
    handle = read_node_handle(cluster, node_id)
    if handle is None:
        return
    try:
        ray.get(handle.close.remote(), timeout=timeout_s)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # a dead actor has nothing to close; kill below still frees its name
    ray.kill(handle)
    deadline = time.monotonic() + timeout_s
    while read_node_handle(cluster, node_id) is not None:  # Ray frees a name once it saw the death
        if time.monotonic() > deadline:
            raise TimeoutError(f"read node {node_id} did not stop within {timeout_s} s")
        time.sleep(0.05)


def host_states(cluster: str, topic: str, config: TopicConfig, states: Sequence[VirtualPartitionState],
                replicas: Collection[str] | None = None, timeout_s: float | None = READ_NODE_CALL_TIMEOUT_S,
                handles: ReadNodeHandles | None = None) -> dict[str, dict[int, str]]:
    """Tell every read node named in ``states`` (or only ``replicas``) to host its replicas in their roles.

    Returns, per node, the VPs it refused and why; a node that is not running or did not answer
    is reported under the VP id -1. Leaders are told before followers, so a follower's first
    fetch finds its leader leading. Each node is looked up once (in ``handles``, if the caller
    keeps some; a node whose call failed is forgotten there).
    """
    handles = ReadNodeHandles(cluster) if handles is None else handles
    refused: dict[str, dict[int, str]] = {}
    by_node = states_by_node(states, replicas)
    leaders = {node: [s for s in group if s.leader == node] for node, group in by_node.items()}
    followers = {node: [s for s in group if s.leader != node] for node, group in by_node.items()}
    for phase in (leaders, followers):
        calls = {}
        for node_id, group in phase.items():
            if not group:
                continue
            handle = handles.get(node_id)
            if handle is None:
                refused.setdefault(node_id, {})[-1] = f"read node {node_id} is not running"
                continue
            calls[node_id] = handle.host.remote(topic, config, list(group))
        for node_id, ref in calls.items():
            try:
                answer = ray.get(ref, timeout=timeout_s)
            except (ray.exceptions.RayError, TimeoutError) as error:
                handles.forget(node_id)
                refused.setdefault(node_id, {})[-1] = f"{type(error).__name__}: {error}"
                continue
            if answer:
                refused.setdefault(node_id, {}).update(answer)
    return refused


def drop_everywhere(cluster: str, topic: str, nodes: Iterable[str], vps: Sequence[int] | None = None,
                    delete_data: bool = True, timeout_s: float = READ_NODE_STOP_TIMEOUT_S) -> None:
    """Tell each running node of ``nodes`` to stop hosting ``vps`` of ``topic`` (all of them if None)."""
    refs = [handle.drop.remote(topic, None if vps is None else list(vps), delete_data)
            for handle in (read_node_handle(cluster, node) for node in set(nodes)) if handle is not None]
    try:
        ray.get(refs, timeout=timeout_s)
    except (ray.exceptions.RayError, TimeoutError):
        pass  # a node that is down opens nothing of a deleted topic again: the controller no longer names it


