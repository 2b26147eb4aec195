"""``PartitionFetcher``: long-poll fetches of a set of physical partitions, from their leaders (Mafka3 mode).

``PartitionConsumer`` reads through this class, as the VP consumers read through ``VpFetcher``.
It keeps one fetch outstanding per partition it reads, at the partition's leader
(``FetchesInFlight``), and decodes the whole batches that come back
(``fetched_messages.take_messages``); only messages below the high watermark (committed on the
ISR) are ever returned. Positions are per partition: the offset of the next message; the
partitions read are exactly those with a position.

A leader that fails a fetch is looked up again (``Routing.forget``); one that is not running
makes the routing re-read the metadata. A leader that a network fault
(``mafka4.partition_gate``) cuts this process off from is not asked until the fault heals or the
partition's leader moves; while no leader can be asked, ``fetch`` looks again every
``LEADER_RETRY_S``.
"""

from __future__ import annotations

import ray

from mafka4.client.fetched_messages import take_messages
from mafka4.client.fetches_in_flight import FetchesInFlight
from mafka4.client.message import Message
from mafka4.client.routing import Routing
from mafka4.errors import MafkaError
from mafka4.limits import LEADER_RETRY_S, LIST_OFFSETS_TIMEOUT_S, ConsumerConfig
from mafka4.runtime.connect import Connection
from mafka4.transport.ray_names import replica_actor_name
from mafka4.transport.remote_errors import unwrap


class PartitionFetcher:
    def __init__(self, connection: Connection, topic: str, config: ConsumerConfig):
        self.topic = topic
        self.config = config
        self._routing = Routing(connection, topic)
        self._cluster = connection.cluster
        self.positions: dict[int, int] = {}  # partition -> next offset to read; every one is fetched
        # partition -> the offset its fetch asked for
        self._in_flight: FetchesInFlight[int, int] = FetchesInFlight(config)

    # --- metadata and offsets ---------------------------------------------------------------

    def partitions(self) -> range:
        return range(len(self._routing.metadata.partitions))

    def refresh(self) -> None:
        """Re-read the partitions' leaders."""
        self._routing.refresh()

    def list_offsets_many(self, partitions: list[int]) -> list[tuple[int, int]]:
        """(log start offset, high watermark) of each partition, asked of the leaders in parallel."""
        refs = [self._routing.leader(p).list_offsets.remote() for p in partitions]
        return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S) if refs else []

    def offsets_for_time(self, partitions: list[int], timestamp_ms: int) -> list[int]:
        """Per partition, its first offset at or after ``timestamp_ms``, else its high watermark."""
        refs = [self._routing.leader(p).offset_for_timestamp.remote(timestamp_ms) for p in partitions]
        found = ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S)
        ends = self.list_offsets_many([p for p, offset in zip(partitions, found) if offset is None])
        return [offset if offset is not None else ends.pop(0)[1] for offset in found]

    # --- positions --------------------------------------------------------------------------

    def seek(self, partition: int, offset: int) -> None:
        """Read ``partition`` from ``offset`` on; a fetch for its old position is not waited for."""
        self.positions[partition] = offset
        self._in_flight.drop(partition)

    def stop(self, partition: int) -> None:
        """Stop reading ``partition`` and forget its position."""
        self.positions.pop(partition, None)
        self._in_flight.drop(partition)

    def clear(self) -> None:
        """Stop every fetch out (the positions are kept)."""
        self._in_flight.clear()

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, timeout_s: float) -> list[Message]:
        """Messages of the partitions read, waiting at most ``timeout_s`` for the first."""
        self._issue_fetches()
        messages: list[Message] = []
        for partition, offset, call in self._in_flight.answered(timeout_s, LEADER_RETRY_S):
            try:
                result = call.result()
            except (MafkaError, ray.exceptions.RayActorError) as raised:
                error = unwrap(raised)
                if isinstance(error, MafkaError) and not error.retriable:
                    raise error from None
                self._routing.forget(partition)
                continue
            next_offset = take_messages(result.data, self.topic, partition, offset, messages,
                                        self.config.poll_messages_max, self.config.check_crcs)
            if next_offset is not None:
                self.positions[partition] = next_offset
        return messages

    def _issue_fetches(self) -> None:
        for partition, offset in self.positions.items():
            if partition in self._in_flight:
                continue
            try:
                leader = self._routing.leader(partition)
            except MafkaError:
                self._routing.refresh()
                continue
            leader_id = self._routing.metadata.partitions[partition].leader
            # A lost fetch is not sent: asked again once the fault heals or the leader moves.
            self._in_flight.send(partition, leader_id, leader,
                                 replica_actor_name(self._cluster, self.topic, partition, leader_id), offset, offset)
