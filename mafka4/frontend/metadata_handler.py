"""The METADATA answer, from a node's watched view: the live read nodes, and the topics asked for
with each partition's leader and the client address it serves on.

Every port answers it the same way: a read node's (``node_port``) and a replica's
(``replica_port``, so a cluster with no read node still answers its clients). With no topic
named, the answer lists every topic the principal may describe; a named one it may not describe
is ``NotAuthorized``, a named one that does not exist ``UnknownTopic``: after the view caught up
with etcd (``ClusterView.topics_caught_up``), so that a topic created a moment ago is found.
"""

from __future__ import annotations

from mafka4.errors import UnknownTopic
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.port_security import PortSecurity
from mafka4.frontend.view_state import ViewState
from mafka4.protocol.metadata_api import MetadataAnswer, MetadataRequest, NodeInfo
from mafka4.protocol.metadata_topics import topic_info
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType


async def metadata_answer(view: ClusterView, security: PortSecurity, cluster: str, session: Session,
                          request: MetadataRequest) -> MetadataAnswer:
    """What answers ``request`` of ``session``, read from ``view``; see the module docstring."""
    try:
        return _answer_from_view(view, security, cluster, session, request)
    except UnknownTopic:
        if not await view.topics_caught_up(request.topics):
            raise
    return _answer_from_view(view, security, cluster, session, request)


def _answer_from_view(view: ClusterView, security: PortSecurity, cluster: str, session: Session,
                      request: MetadataRequest) -> MetadataAnswer:
    def read(state: ViewState):
        names = state.topic_names() if request.topics is None else list(request.topics)
        topics = {name: state.topic(name) for name in names}
        leaders = {name: [state.replica_address(name, p.partition, p.leader) for p in topic.partitions]
                   for name, topic in topics.items() if topic is not None}
        return state.read_node_endpoints(), topics, leaders

    read_nodes, topics, leaders = view.read(read)
    if request.topics is None:
        table = security.acl_table()
        topics = {name: topic for name, topic in topics.items()
                  if table.allows(session.principal, Operation.DESCRIBE, ResourceType.TOPIC, name)}
    else:
        for name, topic in topics.items():
            security.check(session, Operation.DESCRIBE, ResourceType.TOPIC, name)
            if topic is None:
                raise UnknownTopic(f"topic {name!r} does not exist: create it with 'mafka4 topic create {name}'")
    nodes = tuple(NodeInfo(node.node_id, "read", node.client_address) for node in read_nodes)
    return MetadataAnswer(cluster, nodes, tuple(topic_info(topic, leaders[name]) for name, topic in topics.items()))
