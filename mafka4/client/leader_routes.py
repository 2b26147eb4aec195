"""Where a producer sends each partition's batches: the client port of the partition's leader.

Metadata comes from any node (``METADATA`` of the topic) over one connection kept to the first
node that answered; the nodes an answer names are tried too when that one is gone, so a client
follows the cluster by the answers it gets. Each leader is reached over a connection of its own
(``LeaderLink``), opened on first use and again after it broke; ``forget`` drops a partition's.

``refresh`` asks again (the sender does before every resend: after ``NotLeader``, a stale
epoch, a lost connection); an answer never moves a partition back to an older leader epoch, so
a late answer of a lagging node cannot undo a newer one. A partition whose leader serves no
client port yet (just elected, or its node is down) is ``NotLeader``: retriable after a refresh.

Everything here runs on the producer's event loop. Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio

from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.node_connection import connect_any, connect_to
from mafka4.errors import NotLeader, RequestTimedOut, StreamLost, UnknownTopic
from mafka4.limits import Acks
from mafka4.metadata.endpoints import HostPort, parse_endpoints
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.data_api import ProduceRequest
from mafka4.protocol.metadata_api import MetadataRequest, TopicInfo, topic_of

METADATA_TIMEOUT_S = 10.0
# A produce's answer may take the leader's whole wait for its commit (``timeout_ms``); past that and
# this margin the call is given up as lost (retriable: the sender resends, deduplicated).
ANSWER_MARGIN_S = 5.0


class LeaderLink:
    """Produce calls to one partition's leader over its client port."""

    def __init__(self, connection: ClientConnection, topic: str, partition: int):
        self._connection, self._topic, self._partition = connection, topic, partition

    async def produce(self, batch: bytes, acks: Acks, timeout_ms: int) -> int:
        """The batch's base offset once ``acks`` holds; the leader's error otherwise."""
        answer, _ = await self._connection.call(ProduceRequest(self._topic, self._partition, acks.value, timeout_ms,
                                                               batch), timeout_s=timeout_ms / 1000 + ANSWER_MARGIN_S)
        return answer.base_offset

    async def produce_unanswered(self, batch: bytes, acks: Acks, timeout_ms: int) -> None:
        """Send the batch and return once it is written (acks=0): what the leader did is never heard of."""
        await self._connection.send(ProduceRequest(self._topic, self._partition, acks.value, timeout_ms, batch))

    @property
    def closed(self) -> bool:
        return self._connection.closed

    def close(self) -> None:
        self._connection.close()


class LeaderRoutes:
    """The leaders of ``topic``'s partitions, for one producer; see the module docstring."""

    def __init__(self, access: ClusterAccess, topic: str):
        self._access, self._topic = access, topic
        self._nodes: tuple[HostPort, ...] = access.nodes
        self.metadata: TopicMetadata | None = None
        self._addresses: list[str | None] = []
        self._node: ClientConnection | None = None
        self._links: dict[int, LeaderLink] = {}
        self._opening: dict[int, asyncio.Future] = {}

    async def refresh(self) -> TopicMetadata:
        """Ask a node for the topic again; ``UnknownTopic`` once it is gone."""
        info = await self._topic_info()
        read = topic_of(info)
        addresses = [p.leader_address for p in info.partitions]
        known = self.metadata
        if known is not None and len(known.partitions) == len(read.partitions):
            newer = [old.leader_epoch <= new.leader_epoch for old, new in zip(known.partitions, read.partitions)]
            read = TopicMetadata(read.name, read.config, tuple(
                new if take else old for old, new, take in zip(known.partitions, read.partitions, newer)))
            addresses = [new if take else old for old, new, take in zip(self._addresses, addresses, newer)]
        for partition, link in list(self._links.items()):
            if self._addresses[partition] != addresses[partition]:
                self.forget(partition)
        self.metadata, self._addresses = read, addresses
        return read

    def leader_id(self, partition: int) -> str:
        return self.metadata.partitions[partition].leader

    async def leader(self, partition: int) -> LeaderLink:
        """The link to the partition's leader, opened on first use (once, however many calls wait for it)."""
        link = self._links.get(partition)
        if link is not None and not link.closed:
            return link
        opening = self._opening.get(partition)
        if opening is None:
            opening = self._opening[partition] = asyncio.ensure_future(self._open(partition))
            opening.add_done_callback(lambda _: self._opening.pop(partition, None))
        return await asyncio.shield(opening)

    async def _open(self, partition: int) -> LeaderLink:
        address = self._addresses[partition]
        state = self.metadata.partitions[partition]
        if address is None:
            raise NotLeader(f"leader {state.leader} of {self._topic}-{partition} (epoch {state.leader_epoch}) serves "
                            f"no client port now; retrying after a metadata refresh")
        host_port = parse_endpoints(address, what=f"the client address of {state.leader}")[0]
        connection = await connect_to(host_port, self._access.credential)
        self._links[partition] = link = LeaderLink(connection, self._topic, partition)
        return link

    def forget(self, partition: int) -> None:
        link = self._links.pop(partition, None)
        if link is not None:
            link.close()

    def close(self) -> None:
        for partition in list(self._links):
            self.forget(partition)
        if self._node is not None:
            self._node.close()
            self._node = None

    async def _topic_info(self) -> TopicInfo:
        for attempt in range(2):  # the kept connection may have broken since its last use: one more, afresh
            if self._node is None or self._node.closed:
                self._node = await connect_any(self._nodes, self._access.credential)
            try:
                answer, _ = await self._node.call(MetadataRequest((self._topic,)), timeout_s=METADATA_TIMEOUT_S)
            except (StreamLost, RequestTimedOut):
                self._node.close()
                self._node = None
                if attempt:
                    raise
                continue
            self._learn_nodes(answer.nodes)
            for info in answer.topics:
                if info.name == self._topic:
                    return info
            raise UnknownTopic(f"topic {self._topic!r} does not exist: create it with "
                               f"'mafka4 topic create {self._topic}'")
        raise AssertionError("unreachable")

    def _learn_nodes(self, nodes) -> None:
        """Keep the bootstrap nodes first, then every node the cluster names, for the next reconnect."""
        named = [parse_endpoints(node.address, what=f"the client address of {node.node_id}")[0]
                 for node in nodes if node.address]
        self._nodes = tuple(dict.fromkeys((*self._access.nodes, *named)))
