"""The running read nodes of a cluster, as the benchmarks find them (a shell).

A read node counts when it holds its liveness key in etcd (``keys.read_node_liveness``) and its
``ReadNode`` actor answers to its name; the benchmarks describe and measure exactly those.
"""

from __future__ import annotations

from mafka4.errors import NotEnoughReadNodes
from mafka4.metadata import keys
from mafka4.runtime.connect import Connection
from mafka4.virtual.handles import read_node_handle


def running_read_nodes(connection: Connection, needed: int, bench: str) -> dict[str, object]:
    """``ReadNode`` handles by node id (sorted); ``NotEnoughReadNodes`` if fewer than ``needed`` run."""
    cluster = connection.cluster
    node_ids = sorted(node for node in (keys.parse_read_node_liveness(cluster, item.key)
                                        for item in connection.store.get_prefix(keys.read_nodes_prefix(cluster)))
                      if node is not None)
    handles = {node: handle for node in node_ids if (handle := read_node_handle(cluster, node)) is not None}
    if len(handles) < needed:
        raise NotEnoughReadNodes(f"bench {bench} needs {needed} running read nodes, {len(handles)} run "
                                 f"({', '.join(handles) or 'none'}): start a cluster with "
                                 f"'mafka4 up --read-nodes {needed}'")
    return handles
