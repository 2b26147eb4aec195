"""A node's client port: the client protocol served from the node's watched view of the cluster.

One ``NodePort`` per serving process. It keeps a ``ClusterView`` (its own etcd client, since a
failed call on a client ends every watch on it), authenticates every connection with SCRAM
against the users the view holds, checks every request against the view's ACLs, and answers:

- ``METADATA``: the live read nodes with their client addresses and the topics asked for, each
  partition with its leader's client address, from the view; with no topic named, every topic
  the principal may describe.
- the virtual partitions' APIs (``frontend.vp_handlers``), given the node's hosted VPs;
- the consumer groups' APIs (``frontend.group_handlers``): the node coordinates the groups that
  hash to it, hosting their members' sessions (``frontend.group_sessions``);
- the users' and ACLs' APIs (``frontend.admin_handlers``) and the topics' (``frontend.topic_handlers``:
  intents for the controller, and descriptions), through an etcd client of their own, for the
  reason the view has its own; the groups' admin APIs (``frontend.group_admin_handlers``: list,
  describe, reset offsets), through the etcd clients of their reports.

Authentication and ACLs are ``frontend.port_security``'s, shared with the replicas' ports.

Beside it, a read node serves Kafka clients (``kafka.listener``) with the same view and the same
security: ``start_kafka``; Kafka's CreateTopics and DeleteTopics (``kafka.topic_handlers``) write
their intents through the same etcd client as the port's topic APIs, within the same bound of
threads. Its Kafka consumer groups are sessions of this port's own group coordinator
(``kafka.group_handlers``), so Kafka and mafka4 members of a group meet on one node.
"""

from __future__ import annotations

from mafka4.frontend.admin_handlers import AdminHandlers
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.group_admin_handlers import GroupAdminHandlers
from mafka4.frontend.group_handlers import GroupHandlers
from mafka4.frontend.group_sessions import GroupSessions
from mafka4.frontend.metadata_handler import metadata_answer
from mafka4.frontend.port_security import MECHANISMS, PortSecurity
from mafka4.frontend.thread_slots import ThreadSlots
from mafka4.frontend.topic_handlers import TopicHandlers
from mafka4.frontend.vp_handlers import ServedVps, VpHandlers
from mafka4.kafka.data_handlers import KafkaDataHandlers, KafkaServedData
from mafka4.kafka.group_handlers import KafkaGroupHandlers
from mafka4.kafka.group_offsets import KafkaGroupOffsets
from mafka4.kafka.listener import KafkaListener
from mafka4.kafka.producer_handlers import KafkaProducerHandlers
from mafka4.kafka.topic_handlers import IntentTopicChanges, KafkaTopicHandlers
from mafka4.limits import NODE_INTENT_REQUESTS_IN_FLIGHT_MAX
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import MetadataAnswer, MetadataRequest
from mafka4.protocol.server import ClientPortServer
from mafka4.protocol.session import Session


class NodePort:
    """The client port of node ``node_id``; see the module docstring."""

    def __init__(self, etcd_endpoint: str, cluster: str, node_id: str, vps: ServedVps | None = None,
                 kafka_data: KafkaServedData | None = None):
        self._cluster, self._node_id = cluster, node_id
        self._store = MetadataStore(etcd_endpoint)
        self.view = ClusterView(self._store, cluster)
        self._security = PortSecurity(self.view)
        self._admin_store = MetadataStore(etcd_endpoint)
        check, allows = self._security.check, self._security.allows
        # Topic intents of the client port and of the Kafka listener share the node's bound.
        intent_threads = ThreadSlots(NODE_INTENT_REQUESTS_IN_FLIGHT_MAX)
        self.groups = GroupSessions(etcd_endpoint, cluster, node_id)
        self._group_admin = GroupAdminHandlers(etcd_endpoint, cluster, check, allows)
        handlers = {ApiKey.METADATA: self._metadata,
                    **GroupHandlers(self.groups, self._the_view, check).handlers(),
                    **self._group_admin.handlers(),
                    **AdminHandlers(self._admin_store, cluster, check).handlers(),
                    **TopicHandlers(self._admin_store, cluster, check, allows, intent_threads).handlers(),
                    **(VpHandlers(self.view, vps, check).handlers() if vps is not None else {})}
        self._server = ClientPortServer(handlers, f"client port of {node_id}", node_id, self._security.exchange,
                                        MECHANISMS)
        self._kafka = self._kafka_offsets = None
        if kafka_data is not None:
            data_handlers = KafkaDataHandlers(self.view, self._security, kafka_data, node_id, cluster)
            topic_changes = IntentTopicChanges(self._admin_store, cluster, self.view, intent_threads)
            # Kafka members are sessions of this port's own group coordinator (``kafka.group_handlers``).
            self._kafka_offsets = KafkaGroupOffsets(etcd_endpoint, cluster)
            groups = KafkaGroupHandlers(self.groups, self.view, self._security, self._kafka_offsets, node_id)
            self._kafka = KafkaListener({**data_handlers.handlers(),
                                         **KafkaProducerHandlers(data_handlers.sessions).handlers(),
                                         **KafkaTopicHandlers(topic_changes, check, allows).handlers(),
                                         **groups.handlers()},
                                        self._security, f"Kafka listener of {node_id}")

    def start_view(self) -> None:
        """Read and watch the cluster's metadata (blocks on etcd: run it off the event loop)."""
        self.view.start()

    async def start(self, host: str, port: int) -> str:
        """Serve clients on ``host``:``port`` (0: any free port); the address, ``host:port``."""
        bound_host, bound_port = await self._server.start(host, port)
        return f"{bound_host}:{bound_port}"

    async def start_kafka(self, host: str, port: int) -> str:
        """Serve Kafka clients on ``host``:``port`` (0: any free port); the address, ``host:port``."""
        assert self._kafka is not None, "a node port made without kafka_data serves no Kafka listener"
        return await self._kafka.start(host, port)

    @property
    def counters(self) -> dict[str, int]:
        """The server's counters, but ``refusals`` counts the ACLs' (``PortSecurity``) and
        ``protocol_refusals`` the server's own (requests out of turn, APIs not served); the Kafka
        listener's as ``kafka_<name>``."""
        server = self._server.counters
        kafka = {} if self._kafka is None else {f"kafka_{name}": value for name, value in self._kafka.counters.items()}
        return {**server, "refusals": self._security.refusals, "protocol_refusals": server["refusals"], **kafka}

    def close(self) -> None:
        self._server.close()
        if self._kafka is not None:
            self._kafka.close()
        self.groups.close()
        if self._kafka_offsets is not None:
            self._kafka_offsets.close()
        self._group_admin.close()
        self.view.close()
        self._store.close()
        self._admin_store.close()

    # --- handlers -----------------------------------------------------------------------------

    async def _the_view(self) -> ClusterView:
        return self.view

    async def _metadata(self, session: Session, request: MetadataRequest, _buffers) -> tuple[MetadataAnswer, tuple]:
        return await metadata_answer(self.view, self._security, self._cluster, session, request), ()
