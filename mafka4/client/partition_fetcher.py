"""``PartitionFetcher``: long-poll fetches of a set of physical partitions, from their leaders (Mafka3 mode).

``PartitionConsumer`` reads through this class, as the VP consumers read through ``VpFetcher``.
It keeps one fetch outstanding per partition it reads, at the client port of the partition's
leader (``client.leader_routes``, ``FetchesInFlight``; an idle partition is asked less and less
often, ``client.idle_waits``; a seek sends the fetch again and the leader ends the one out,
``frontend.fetch_sessions``; a partition whose answer brought messages is sent its next
fetch at once, from the position it moved to, so the next poll finds it under way), and
decodes the whole batches that come back (``fetched_messages.take_messages``); only messages
below the high watermark (committed on the ISR) are ever returned. Positions are per
partition: the offset of the next message; the partitions read are exactly those with a
position.

A fetch that fails retriably (the leader moved: ``NotLeader``; its connection broke) closes that
leader's connection and asks a node for the metadata again before the partition is fetched
anew. A leader that a network fault (``mafka4.partition_gate``) cuts this process off from is not
asked until the fault heals or the partition's leader moves; while no leader can be asked,
``fetch`` looks again every ``LEADER_RETRY_S``. Calls run on the process's client loop
(``client.client_loop``). Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Iterable

from mafka4.client.client_loop import client_loop
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.fetched_messages import take_messages
from mafka4.client.fetches_in_flight import FetchesInFlight
from mafka4.client.idle_waits import IdleWaits
from mafka4.client.leader_routes import LeaderRoutes
from mafka4.client.message import Message
from mafka4.client.node_links import NodeLinks
from mafka4.errors import MafkaError
from mafka4.limits import LEADER_RETRY_S, LIST_OFFSETS_TIMEOUT_S, ConsumerConfig
from mafka4.protocol.data_api import FetchAnswer, ListOffsetsAnswer


class PartitionFetcher:
    def __init__(self, access: ClusterAccess, topic: str, config: ConsumerConfig):
        self.topic = topic
        self.config = config
        self._loop = client_loop()
        self._links = NodeLinks(access)
        self._routes = LeaderRoutes(self._links, topic)
        self._loop.run(self._routes.refresh())
        self._stale = False  # a fetch failed: ask for the metadata again before the next fetches
        self.positions: dict[int, int] = {}  # partition -> next offset to read; every one is fetched
        self.held: set[int] = set()  # partitions not fetched meanwhile (``hold``)
        # partition -> the offset its fetch asked for
        self._in_flight: FetchesInFlight[int, int] = FetchesInFlight()
        self._idle_waits: IdleWaits[int] = IdleWaits(config.fetch_wait_ms_max, config.fetch_idle_wait_ms_max)

    # --- metadata and offsets ---------------------------------------------------------------

    def partitions(self) -> range:
        return range(len(self._routes.metadata.partitions))

    def refresh(self) -> None:
        """Ask a node for the partitions' leaders again."""
        self._loop.run(self._routes.refresh())
        self._stale = False

    def list_offsets_many(self, partitions: list[int]) -> list[tuple[int, int]]:
        """(log start offset, high watermark) of each partition, asked of the leaders in parallel."""
        return [(answer.log_start_offset, answer.high_watermark) for answer in self._list_offsets(partitions, None)]

    def offsets_for_time(self, partitions: list[int], timestamp_ms: int) -> list[int]:
        """Per partition, its first offset at or after ``timestamp_ms``, else its high watermark."""
        return [answer.timestamp_offset if answer.timestamp_offset is not None else answer.high_watermark
                for answer in self._list_offsets(partitions, timestamp_ms)]

    def _list_offsets(self, partitions: list[int], timestamp_ms: int | None) -> list[ListOffsetsAnswer]:
        async def ask(partition: int) -> ListOffsetsAnswer:
            return await (await self._routes.leader(partition)).list_offsets(timestamp_ms)

        async def ask_all() -> list[ListOffsetsAnswer]:
            return list(await asyncio.gather(*(ask(partition) for partition in partitions)))

        return self._loop.run(ask_all(), LIST_OFFSETS_TIMEOUT_S) if partitions else []

    # --- positions --------------------------------------------------------------------------

    def hold(self, partition: int, held: bool) -> None:
        """Fetch nothing of ``partition`` while held (its position is kept; an ordered retry waits)."""
        if held:
            self.held.add(partition)
            self._in_flight.drop(partition)
        else:
            self.held.discard(partition)

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

    def close(self) -> None:
        """Close every connection; fetches out are cancelled."""
        self._in_flight.clear()
        self._loop.run(self._links.close_after_cancelled())

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, timeout_s: float, wake: concurrent.futures.Future | None = None) -> list[Message]:
        """Messages of the partitions read, waiting at most ``timeout_s`` for the first (or until ``wake``)."""
        self._issue_fetches()
        messages: list[Message] = []
        brought: list[int] = []  # partitions whose answers brought messages
        for partition, offset, call in self._in_flight.answered(timeout_s, LEADER_RETRY_S, wake):
            try:
                result: FetchAnswer = call.result()
            except MafkaError as error:
                if not error.retriable:
                    raise
                self._idle_waits.answered(partition, empty=False)
                self._loop.call_soon(self._routes.forget, partition)
                self._stale = True
                continue
            self._idle_waits.answered(partition, empty=not result.data)
            next_offset = take_messages(result.data, self.topic, partition, offset, messages,
                                        self.config.poll_messages_max, self.config.check_crcs)
            if next_offset is not None:
                self.positions[partition] = next_offset
                brought.append(partition)
        # A leader that answered with messages likely holds more: its next fetch goes out now, so
        # the next poll finds that answer under way instead of starting the round trip.
        self._send_fetches(brought)
        return messages

    def _issue_fetches(self) -> None:
        if self._stale:
            try:
                self.refresh()
            except MafkaError:  # no node answered: fetch from the leaders known, and ask again next time
                pass
        self._send_fetches(self.positions)

    def _send_fetches(self, partitions: Iterable[int]) -> None:
        """Send a fetch from its position for each of ``partitions`` read with none out (and not held)."""
        for partition in partitions:
            offset = self.positions[partition]
            if partition in self._in_flight or partition in self.held:
                continue
            # A lost fetch is not sent: asked again once the fault heals or the leader moves.
            wait_ms = self._idle_waits.wait_ms(partition)
            self._in_flight.send(partition, self._routes.leader_id(partition),
                                 lambda p=partition, o=offset, w=wait_ms: self._start_fetch(p, o, w), offset)

    def _start_fetch(self, partition: int, offset: int, wait_ms: int):
        async def fetch() -> FetchAnswer:
            leader = await self._routes.leader(partition)
            return await leader.fetch(offset, self.config.fetch_bytes_max, wait_ms)

        return asyncio.run_coroutine_threadsafe(fetch(), self._loop.loop)
