"""Where a producer sends each partition's batches: the client port of the partition's leader.

Metadata comes from any node (``METADATA`` of the topic, ``client.node_links``: the nodes an
answer names are tried too when the first is gone, so a client follows the cluster by the
answers it gets). Each leader is reached over its client port (``LeaderLink``: produce, fetch,
list offsets), its connection opened on first use and again after it broke; ``forget`` closes a
partition's after a failed call.

``refresh`` asks again (the sender does before every resend: after ``NotLeader``, a stale
epoch, a lost connection); an answer never moves a partition back to an older leader epoch, so
a late answer of a lagging node cannot undo a newer one. A partition whose leader serves no
client port yet (just elected, or its node is down) is ``NotLeader``: retriable after a refresh.

Everything here runs on the client's event loop. Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

from mafka4.client.node_links import NodeLinks
from mafka4.errors import NotLeader, UnknownTopic
from mafka4.limits import LIST_OFFSETS_TIMEOUT_S, PROTOCOL_ANSWER_MARGIN_S, Acks
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.data_api import FetchRequest, ListOffsetsRequest, ProduceRequest
from mafka4.protocol.metadata_api import MetadataRequest
from mafka4.protocol.metadata_topics import topic_of



class LeaderLink:
    """Calls to one partition's leader over its client port."""

    def __init__(self, connection: ClientConnection, topic: str, partition: int):
        self._connection, self._topic, self._partition = connection, topic, partition

    async def produce(self, batch: bytes, acks: Acks, timeout_ms: int) -> int:
        """The batch's base offset once ``acks`` holds; the leader's error otherwise."""
        answer, _ = await self._connection.call(ProduceRequest(self._topic, self._partition, acks.value, timeout_ms,
                                                               batch), timeout_s=timeout_ms / 1000 + PROTOCOL_ANSWER_MARGIN_S)
        return answer.base_offset

    async def produce_unanswered(self, batch: bytes, acks: Acks, timeout_ms: int) -> None:
        """Send the batch and return once it is written (acks=0): what the leader did is never heard of."""
        await self._connection.send(ProduceRequest(self._topic, self._partition, acks.value, timeout_ms, batch))

    async def fetch(self, offset: int, bytes_max: int, wait_ms_max: int):
        """Whole committed batches from ``offset`` (a ``FetchAnswer``); a long poll of up to ``wait_ms_max``."""
        answer, _ = await self._connection.call(
            FetchRequest(self._topic, self._partition, offset, bytes_max, wait_ms_max, False),
            timeout_s=wait_ms_max / 1000 + PROTOCOL_ANSWER_MARGIN_S)
        return answer

    async def list_offsets(self, timestamp_ms: int | None = None):
        """The partition's readable range, and with ``timestamp_ms`` its first offset stamped at or after it."""
        answer, _ = await self._connection.call(ListOffsetsRequest(self._topic, self._partition, timestamp_ms),
                                                timeout_s=LIST_OFFSETS_TIMEOUT_S)
        return answer


class LeaderRoutes:
    """The leaders of ``topic``'s partitions; see the module docstring."""

    def __init__(self, links: NodeLinks, topic: str):
        self._links, self._topic = links, topic
        self.metadata: TopicMetadata | None = None
        self._addresses: list[str | None] = []

    async def refresh(self) -> TopicMetadata:
        """Ask a node for the topic again; ``UnknownTopic`` once it is gone."""
        answer = await self._links.ask_any(MetadataRequest((self._topic,)))
        self._links.learn(answer.nodes)
        info = next((info for info in answer.topics if info.name == self._topic), None)
        if info is None:
            raise UnknownTopic(f"topic {self._topic!r} does not exist: create it with 'mafka4 topic create {self._topic}'")
        read = topic_of(info)
        addresses = [p.leader_address for p in info.partitions]
        known = self.metadata
        if known is not None and len(known.partitions) == len(read.partitions):
            newer = [old.leader_epoch <= new.leader_epoch for old, new in zip(known.partitions, read.partitions)]
            read = TopicMetadata(read.name, read.config, tuple(
                new if take else old for old, new, take in zip(known.partitions, read.partitions, newer)))
            addresses = [new if take else old for old, new, take in zip(self._addresses, addresses, newer)]
        self.metadata, self._addresses = read, addresses
        return read

    def leader_id(self, partition: int) -> str:
        return self.metadata.partitions[partition].leader

    async def leader(self, partition: int) -> LeaderLink:
        """The link to the partition's leader (its connection opened on first use)."""
        address = self._addresses[partition]
        if address is None:
            state = self.metadata.partitions[partition]
            raise NotLeader(f"leader {state.leader} of {self._topic}-{partition} (epoch {state.leader_epoch}) serves "
                            f"no client port now; retrying after a metadata refresh")
        return LeaderLink(await self._links.connection(address), self._topic, partition)

    def forget(self, partition: int) -> None:
        """Close the connection to the partition's leader (after a failed call: it is opened afresh)."""
        address = self._addresses[partition] if partition < len(self._addresses) else None
        if address is not None:
            self._links.forget(address)
