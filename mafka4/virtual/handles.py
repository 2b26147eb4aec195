"""Finding read nodes and asking the ones that lead VPs (clients, tools and the controller).

A read node is one detached, named ``ReadNode`` actor (``<cluster>/read_node/<node id>``);
any process finds it by name. Finding one is a round trip to Ray's control store
(``ray.get_actor``); a caller that calls the same nodes several times in a row keeps the
handles in a ``ReadNodeHandles``. Starting, stopping and telling it what to host is the
controller's (``coordinator.control.read_node_launcher``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Collection, Iterable, Mapping

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


class ReadNodeHandles:
    """Read node handles of one cluster, each looked up by name once (``read_node_handle``) and kept.

    A node that is not running is not kept: the next ``get`` looks it up again. A kept handle
    may outlive its actor (a restarted node is another actor under the same name), so it is
    forgotten, and the next ``get`` finds the actor running now:

    * when a call to it failed (the caller says so: ``forget``);
    * when its node's liveness key (``keys.read_node_liveness``) is gone or was written again
      since the lookup (``follow_liveness``, for a caller that keeps handles across reads of
      etcd): every new actor writes that key as it starts (``ReadNode.start``; the controller
      waits for it), so a key still at its revision of the lookup means the same actor, unless
      that one died and none started yet, and then the call fails as it would have failed to
      find the node.

    Not thread-safe: one caller (thread) per instance.
    """

    def __init__(self, cluster: str):
        self._cluster = cluster
        self._handles: dict[str, object] = {}
        self._liveness: dict[str, int] = {}  # node id -> revision of its liveness key, as last followed
        self._looked_up_at: dict[str, int | None] = {}  # node id -> its liveness revision when looked up

    def get(self, node_id: str):
        """The handle of ``node_id``'s ``ReadNode``, or None if it is not running."""
        handle = self._handles.get(node_id)
        if handle is None:
            handle = read_node_handle(self._cluster, node_id)
            if handle is not None:
                self._handles[node_id] = handle
                self._looked_up_at[node_id] = self._liveness.get(node_id)
        return handle

    def forget(self, node_id: str) -> None:
        """Look ``node_id`` up again at the next ``get``."""
        self._handles.pop(node_id, None)
        self._looked_up_at.pop(node_id, None)

    def follow_liveness(self, revisions: Mapping[str, int]) -> None:
        """Forget the handles of nodes whose liveness key is not in ``revisions`` (node id -> the
        key's mod_revision, all read at once) at the revision it had when they were looked up."""
        self._liveness = dict(revisions)
        for node_id, revision in list(self._looked_up_at.items()):
            if revision is None or revisions.get(node_id) != revision:
                self.forget(node_id)


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
