"""Starting read nodes and telling them what to host: the only processes of the read path.

A read node is one detached, named ``ReadNode`` actor (``<cluster>/read_node/<node id>``) with
``num_cpus=0``, pinned to its node (``transport.node_pinning``). The controller starts it when
the node registers and restarts it when it dies; every VP replica lives inside one
(``host_states``). Nothing here starts a process per VP.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Collection, Iterable, Sequence

import ray

from mafka4.limits import READ_NODE_CALL_TIMEOUT_S, READ_NODE_STOP_TIMEOUT_S, TopicConfig
from mafka4.limits.servers import ReadNodeConfig
from mafka4.transport.node_pinning import pinned_options
from mafka4.transport.ray_names import NAMESPACE, READ_NODE_RESOURCE, read_node_actor_name
from mafka4.virtual.handles import ReadNodeHandles, read_node_handle, states_by_node
from mafka4.virtual.layout import SplitEpoch
from mafka4.virtual.read_node import ReadNode, ReadNodeSpec
from mafka4.virtual.vp_state import VirtualPartitionState

logger = logging.getLogger(__name__)


def start_read_node(cluster: str, etcd_endpoint: str, node_id: str, data_root: str,
                    config: ReadNodeConfig = ReadNodeConfig(), timeout_s: float | None = READ_NODE_CALL_TIMEOUT_S):
    """Start the read node actor of ``node_id`` and wait until it holds its liveness key; returns its handle."""
    handle = ReadNode.options(
        name=read_node_actor_name(cluster, node_id), namespace=NAMESPACE, lifetime="detached", num_cpus=0,
        **pinned_options(node_id, READ_NODE_RESOURCE), max_restarts=0, max_concurrency=10_000,
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


@dataclass(frozen=True, slots=True)
class Release:
    """A reshard's held streams to release with its stored epoch (``control.resharding``, ``ReadNode.release``)."""

    holders: tuple[str, ...]  # the nodes holding the reshard's parents
    token: str
    epoch: SplitEpoch
    children: tuple[VirtualPartitionState, ...]


def host_states(cluster: str, topic: str, config: TopicConfig, states: Sequence[VirtualPartitionState],
                replicas: Collection[str] | None = None, timeout_s: float | None = READ_NODE_CALL_TIMEOUT_S,
                handles: ReadNodeHandles | None = None, then_release: Release | None = None
                ) -> dict[str, dict[int, str]]:
    """Tell every read node named in ``states`` (or only ``replicas``) to host its replicas in their roles.

    Returns, per node, the VPs it refused and why; a node that is not running or did not answer
    is reported under the VP id -1. Leaders are told before followers, so a follower's first
    fetch finds its leader leading. Each node is looked up once (in ``handles``, if the caller
    keeps some; a node whose call failed is forgotten there).

    ``then_release``: a reshard's holds, released in the leaders' round: a holder that leads
    some of ``states`` hosts them and then releases in one call (``ReadNode.host_and_release``),
    the others release at the same time. Only the order on one node matters: its streams then
    adopt the epoch already serving the children led there. A child led on another node is fed
    by that node's streams, whenever it is hosted, and its followers only copy its leader.
    A release that fails is logged: a stream not told leaves its hold after ``hold_ms_max``.
    """
    handles = ReadNodeHandles(cluster) if handles is None else handles
    refused: dict[str, dict[int, str]] = {}
    by_node = states_by_node(states, replicas)
    leaders = {node: [s for s in group if s.leader == node] for node, group in by_node.items()}
    followers = {node: [s for s in group if s.leader != node] for node, group in by_node.items()}
    releasing = set() if then_release is None else set(then_release.holders)
    for phase, release_in in ((leaders, releasing), (followers, set())):
        calls = {}
        for node_id in sorted({node for node, group in phase.items() if group} | release_in):
            group, handle = phase.get(node_id, []), handles.get(node_id)
            if handle is None:
                if group:
                    refused.setdefault(node_id, {})[-1] = f"read node {node_id} is not running"
                continue
            if node_id not in release_in:
                calls[node_id] = handle.host.remote(topic, config, list(group))
            elif group:
                calls[node_id] = handle.host_and_release.remote(topic, config, list(group), then_release.token,
                                                                then_release.epoch, list(then_release.children))
            else:
                calls[node_id] = handle.release.remote(topic, then_release.token, then_release.epoch,
                                                       list(then_release.children))
        for node_id, ref in calls.items():
            try:
                answer = ray.get(ref, timeout=timeout_s)
            except (ray.exceptions.RayError, TimeoutError) as error:
                handles.forget(node_id)
                if phase.get(node_id):
                    refused.setdefault(node_id, {})[-1] = f"{type(error).__name__}: {error}"
                if node_id in release_in:
                    logger.warning("%s: releasing reshard %s on %s failed: %s", topic, then_release.token, node_id,
                                   error)
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


