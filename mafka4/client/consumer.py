"""``Consumer``: reads committed messages of every partition of a topic (no group yet).

    consumer = Consumer("orders", from_beginning=True)
    for message in consumer.poll(timeout_ms=500): ...
    consumer.seek(0, 1234); consumer.seek_to_time(1_700_000_000_000)

Each poll keeps one long-poll fetch outstanding per partition leader and decodes the
whole batches that come back; only messages below the high watermark (committed on the
ISR) are ever returned. Positions are per partition: the offset of the next message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray

from mafka4.client.errors import unwrap
from mafka4.client.routing import Routing
from mafka4.errors import MafkaError
from mafka4.limits import ConsumerConfig
from mafka4.names import validate_topic_name
from mafka4.records import decode_batches
from mafka4.runtime.connect import Connection, connect

LIST_OFFSETS_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


class Consumer:
    def __init__(self, topic: str, connection: Connection | None = None, from_beginning: bool = False, **settings: Any):
        """``settings`` are ``ConsumerConfig`` fields (fetch_bytes_max, fetch_wait_ms_max, poll_messages_max)."""
        self.topic = validate_topic_name(topic)
        self.config = ConsumerConfig(**settings)
        self._routing = Routing(connection or connect(), topic)
        self._positions: dict[int, int] = {}
        self._pending: dict[int, tuple[ray.ObjectRef, int]] = {}
        for partition in range(len(self._routing.metadata.partitions)):
            start, high_watermark = self._list_offsets(partition)
            self._positions[partition] = start if from_beginning else high_watermark

    def assignment(self) -> list[int]:
        return sorted(self._positions)

    def position(self, partition: int) -> int:
        return self._positions[partition]

    def seek(self, partition: int, offset: int) -> None:
        self._positions[partition] = offset
        self._pending.pop(partition, None)

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every partition to its first message at or after ``timestamp_ms`` (or its end)."""
        for partition in self.assignment():
            leader = self._routing.leader(partition)
            offset = ray.get(leader.offset_for_timestamp.remote(timestamp_ms), timeout=LIST_OFFSETS_TIMEOUT_S)
            self.seek(partition, offset if offset is not None else self._list_offsets(partition)[1])

    def _list_offsets(self, partition: int) -> tuple[int, int]:
        return ray.get(self._routing.leader(partition).list_offsets.remote(), timeout=LIST_OFFSETS_TIMEOUT_S)

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._issue_fetches()
            refs = [ref for ref, _ in self._pending.values()]
            remaining = max(deadline - time.monotonic(), 0)
            ready, _ = ray.wait(refs, num_returns=1, timeout=remaining)
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                messages = self._collect(set(ready))
                if messages or time.monotonic() >= deadline:
                    return messages
            elif time.monotonic() >= deadline:
                return []

    def _issue_fetches(self) -> None:
        for partition, offset in self._positions.items():
            if partition in self._pending:
                continue
            try:
                leader = self._routing.leader(partition)
            except MafkaError:
                self._routing.refresh()
                continue
            ref = leader.fetch.remote(offset, self.config.fetch_bytes_max, self.config.fetch_wait_ms_max)
            self._pending[partition] = (ref, offset)

    def _collect(self, ready: set) -> list[Message]:
        messages: list[Message] = []
        for partition, (ref, offset) in list(self._pending.items()):
            if ref not in ready:
                continue
            del self._pending[partition]
            try:
                result = ray.get(ref)
            except (MafkaError, ray.exceptions.RayActorError) as raised:
                error = unwrap(raised)
                if isinstance(error, MafkaError) and not error.retriable:
                    raise error from None
                self._routing.forget(partition)
                continue
            for record in decode_batches(result.data):
                if record.offset >= offset and len(messages) < self.config.poll_messages_max:
                    messages.append(Message(self.topic, partition, record.offset, record.timestamp_ms,
                                            record.key, record.value, record.headers))
                    self._positions[partition] = record.offset + 1
        return messages

    def close(self) -> None:
        self._pending.clear()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
