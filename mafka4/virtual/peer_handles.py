"""``PeerHandles``: a read node's handles of the actors it calls, and the network gate they pass.

A read node calls two kinds of peers: physical replicas, whose ``fetch`` feeds the VP leaders
it hosts (``PartitionFeed``), and other read nodes, whose ``replica_fetch`` serves the VP
followers it hosts (``ReplicaFetcher``). Both answers carry batches, so those two methods go over
the peer's TCP stream (``StreamedActor``), which costs several times less CPU per MiB than a Ray
call; every other method is a Ray call.

Invariants:

* A peer is looked up by name once (``physical.handles``, ``virtual.handles``: a round trip to
  Ray's control store) and its handle and stream are kept until forgotten. One that is not
  running raises ``StreamLost`` and nothing is kept: the caller's next call looks it up again.
* A read node's handle is forgotten (its stream closed) when a call to it failed
  (``forget_read_node``), since a restarted node is another actor under the same name. A
  physical replica's is kept for the node's life.
* Every handle given out passes ``gate``, the one ``PartitionGate`` of the node, named by the
  peer's node (a physical replica is named by its replica id), so a network fault set on the
  node applies to every call it makes.
"""

from __future__ import annotations

from mafka4.errors import StreamLost
from mafka4.partition_gate import GatedHandle, PartitionGate
from mafka4.physical.handles import replica_handle
from mafka4.transport.stream_calls import StreamedActor
from mafka4.virtual.handles import read_node_handle


class PeerHandles:
    """The handles read node ``node_id`` of ``cluster`` calls its peers by; see the module docstring."""

    def __init__(self, cluster: str, node_id: str):
        self._cluster = cluster
        self.gate = PartitionGate(node_id)
        self._read_nodes: dict[str, StreamedActor] = {}  # node id -> handle
        self._replicas: dict[tuple[str, int, str], StreamedActor] = {}  # (topic, partition, replica id) -> handle

    def read_node(self, node_id: str) -> GatedHandle:
        """Read node ``node_id``'s handle, for replication."""
        handle = self._read_nodes.get(node_id)
        if handle is None:
            name = f"read node {node_id}"
            handle = self._read_nodes[node_id] = StreamedActor(
                self._running(read_node_handle(self._cluster, node_id), name), frozenset({"replica_fetch"}), name)
        return GatedHandle(handle, self.gate, node_id)

    def forget_read_node(self, node_id: str) -> None:
        """Drop ``node_id``'s handle and close its stream: the next call looks the node up again."""
        handle = self._read_nodes.pop(node_id, None)
        if handle is not None:
            handle.close()

    def replica(self, topic: str, partition: int, replica_id: str) -> GatedHandle:
        """Physical replica ``replica_id``'s handle, for feeding (``fetch``) and the Kafka listener's
        forwarded produce requests (``produce``)."""
        key = (topic, partition, replica_id)
        handle = self._replicas.get(key)
        if handle is None:
            name = f"replica {replica_id} of {topic}-{partition}"
            handle = self._replicas[key] = StreamedActor(
                self._running(replica_handle(self._cluster, topic, partition, replica_id), name),
                frozenset({"fetch", "produce"}), name)
        return GatedHandle(handle, self.gate, replica_id)

    def close(self) -> None:
        """Close every stream."""
        for handle in [*self._replicas.values(), *self._read_nodes.values()]:
            handle.close()

    @staticmethod
    def _running(actor, name: str):
        if actor is None:
            raise StreamLost(f"{name} is not running: its actor is gone, and the controller starts it again or "
                             f"moves its role; the caller retries")
        return actor
