"""A node's client port: the client protocol served from the node's watched view of the cluster.

One ``NodePort`` per serving process. It keeps a ``ClusterView`` (its own etcd client, since a
failed call on a client ends every watch on it), authenticates every connection with SCRAM
against the users the view holds, checks every request against the view's ACLs, and answers:

- ``METADATA``: the live read nodes with their client addresses and the topics asked for, from
  the view; with no topic named, every topic the principal may describe.
- the users' and ACLs' APIs (``frontend.admin_handlers``) and the topics' (``frontend.topic_handlers``:
  intents for the controller), through an etcd client of their own, for the reason the view has its own.

A refused request is a ``NotAuthorized`` answer naming the principal, the operation and the
resource; it is logged at INFO and counted (``refusals``). Users and ACLs changed in etcd take
effect on the next request, as soon as the watch delivers them; a connection already
authenticated stays so (as in Kafka) until it closes.
"""

from __future__ import annotations

import logging

from mafka4.errors import NotAuthorized, UnknownTopic
from mafka4.frontend.admin_handlers import AdminHandlers
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.topic_handlers import TopicHandlers
from mafka4.frontend.view_state import ViewState
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import (
    MetadataAnswer,
    MetadataRequest,
    NodeInfo,
    topic_info,
)
from mafka4.protocol.server import ClientPortServer
from mafka4.protocol.session import Session
from mafka4.security.acl import AclRule, AclTable, Operation, ResourceType
from mafka4.security.credentials import StoredCredential
from mafka4.security.scram import ScramServerExchange
from mafka4.security.scram_client import MECHANISM

logger = logging.getLogger(__name__)


class NodePort:
    """The client port of node ``node_id``; see the module docstring."""

    def __init__(self, etcd_endpoint: str, cluster: str, node_id: str):
        self._cluster, self._node_id = cluster, node_id
        self._store = MetadataStore(etcd_endpoint)
        self.view = ClusterView(self._store, cluster)
        self._acls: tuple[int, AclTable] = (-1, AclTable(()))
        self.refusals = 0
        self._admin_store = MetadataStore(etcd_endpoint)
        handlers = {ApiKey.METADATA: self._metadata,
                    **AdminHandlers(self._admin_store, cluster, self._check).handlers(),
                    **TopicHandlers(self._admin_store, cluster, self._check, self._allows).handlers()}
        self._server = ClientPortServer(handlers, f"client port of {node_id}", node_id, self._exchange, (MECHANISM,))

    def start_view(self) -> None:
        """Read and watch the cluster's metadata (blocks on etcd: run it off the event loop)."""
        self.view.start()

    async def start(self, host: str, port: int) -> str:
        """Serve clients on ``host``:``port`` (0: any free port); the address, ``host:port``."""
        bound_host, bound_port = await self._server.start(host, port)
        return f"{bound_host}:{bound_port}"

    @property
    def counters(self) -> dict[str, int]:
        return {**self._server.counters, "refusals": self.refusals}

    def close(self) -> None:
        self._server.close()
        self.view.close()
        self._store.close()
        self._admin_store.close()

    # --- authentication and authorization ---------------------------------------------------

    def _exchange(self, mechanism: str) -> ScramServerExchange:
        assert mechanism == MECHANISM, "the server offers only this mechanism and refuses others itself"
        return ScramServerExchange(self._credential)

    def _credential(self, user: str) -> StoredCredential | None:
        stored = self.view.read(lambda state: state.users.get(user))
        return None if stored is None else StoredCredential.from_json(stored)

    def _acl_table(self) -> AclTable:
        version, table = self._acls
        if self.view.read(lambda state: state.acls_version) != version:
            version, rules = self.view.read(lambda state: (state.acls_version, list(state.acls.values())))
            table = AclTable(AclRule.from_json(rule) for rule in rules)
            self._acls = (version, table)
        return table

    def _check(self, session: Session, operation: Operation, resource_type: ResourceType, name: str) -> None:
        try:
            self._acl_table().check(session.principal, operation, resource_type, name)
        except NotAuthorized as refusal:
            self.refusals += 1
            logger.info("refused a request from %s: %s", session.peer, refusal.message)
            raise

    def _allows(self, session: Session, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self._acl_table().allows(session.principal, operation, resource_type, name)

    # --- handlers -----------------------------------------------------------------------------

    async def _metadata(self, session: Session, request: MetadataRequest, _buffers) -> tuple[MetadataAnswer, tuple]:
        def read(state: ViewState):
            names = state.topic_names() if request.topics is None else list(request.topics)
            return state.read_node_endpoints(), {name: state.topic(name) for name in names}

        read_nodes, topics = self.view.read(read)
        if request.topics is None:
            table = self._acl_table()
            topics = {name: topic for name, topic in topics.items()
                      if table.allows(session.principal, Operation.DESCRIBE, ResourceType.TOPIC, name)}
        else:
            for name, topic in topics.items():
                self._check(session, Operation.DESCRIBE, ResourceType.TOPIC, name)
                if topic is None:
                    raise UnknownTopic(f"topic {name!r} does not exist: create it with 'mafka4 topic create {name}'")
        nodes = tuple(NodeInfo(node.node_id, "read", node.client_address) for node in read_nodes)
        return MetadataAnswer(self._cluster, nodes, tuple(topic_info(topic) for topic in topics.values())), ()
