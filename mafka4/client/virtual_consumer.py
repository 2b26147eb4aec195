"""``VirtualConsumer``: reads every virtual partition (VP) of a mafka4-mode topic, without a group.

    consumer = VirtualConsumer("orders", from_beginning=True)
    for message in consumer.poll(timeout_ms=500): ...      # message.partition is the VP id
    consumer.seek(vp, offset); consumer.position(vp); consumer.close()

The same interface as the group-less ``Consumer`` (``poll``, ``seek``, ``seek_to_time``,
``position``, ``assignment``, ``close``), with VP ids and VP offsets in place of physical
partitions and offsets. Messages are the producer's records: the source header the feeder
added (``split.SOURCE_HEADER``) is stripped.

Each poll keeps one long-poll fetch outstanding per VP, sent to the RISR member
``risr.state.route_fetch`` picks for this reader's position (the leader's half for real-time
readers, the other half for readers far behind), from the VP leaders and RISRs in etcd,
re-read every ``metadata_max_age_ms`` and after any failed fetch. A replica that failed is
avoided (its VP's leader is asked instead) until the next metadata read. Only records below
the VP high watermark are ever returned, so what a reader saw survives a VP failover.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from mafka4.client.consumer import Message, new_member_id
from mafka4.client.errors import unwrap
from mafka4.coordinator.topics import TopicStore
from mafka4.errors import CoordinatorUnavailable, MafkaError, NotLeader, PartitionNotAssigned, WrongReadMode
from mafka4.limits import ConsumerConfig
from mafka4.names import validate_topic_name
from mafka4.records import decode_batches
from mafka4.risr.state import RisrConfig, route_fetch
from mafka4.runtime.connect import Connection, connect
from mafka4.virtual.launcher import vp_handle
from mafka4.virtual.metadata import VirtualPartitionState, VirtualStore
from mafka4.virtual.split import strip_source

LIST_OFFSETS_TIMEOUT_S = 30


class VirtualConsumer:
    def __init__(self, topic: str, connection: Connection | None = None, from_beginning: bool = False, **settings: Any):
        """``settings`` are ``ConsumerConfig`` fields (fetch_bytes_max, fetch_wait_ms_max, ...)."""
        self.topic = validate_topic_name(topic)
        self.config = ConsumerConfig(**settings)
        self._connection = connection or connect()
        metadata = TopicStore(self._connection.store, self._connection.cluster).get(topic)
        if metadata.config.read_mode != "mafka4":
            raise WrongReadMode(
                f"topic {topic!r} is in read_mode={metadata.config.read_mode!r}: it has no virtual partitions; "
                f"read it with Consumer (physical partitions)"
            )
        self._risr_config = RisrConfig(read_replica_lag_ms_max=metadata.config.read_replica_lag_ms_max)
        self._virtual = VirtualStore(self._connection.store, self._connection.cluster)
        self.reader_id = new_member_id()
        self._states: dict[int, VirtualPartitionState] = {}
        self._metadata_read_at = 0.0
        self._avoid: dict[int, str] = {}  # VP -> replica whose fetch failed since the last metadata read
        self._high_watermarks: dict[int, int] = {}
        self._pending: dict[int, tuple[ray.ObjectRef, int, str]] = {}  # VP -> (fetch, offset, replica)
        self._refresh()
        self._positions: dict[int, int] = {}
        vps = sorted(self._states)
        for vp, (start, high_watermark) in zip(vps, self._list_offsets_many(vps)):
            self._positions[vp] = start if from_beginning else high_watermark
            self._high_watermarks[vp] = high_watermark

    # --- positions ------------------------------------------------------------------------

    def assignment(self) -> list[int]:
        return sorted(self._positions)

    def position(self, vp: int) -> int:
        return self._positions[vp]

    def seek(self, vp: int, offset: int) -> None:
        if vp not in self._positions:
            raise PartitionNotAssigned(
                f"virtual partition {vp} of {self.topic!r} does not exist (virtual partitions: {self.assignment()})")
        self._positions[vp] = offset
        self._pending.pop(vp, None)

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every VP to its first message at or after ``timestamp_ms`` (or its end)."""
        vps = self.assignment()
        refs = [self._leader(vp).offset_for_timestamp.remote(timestamp_ms) for vp in vps]
        offsets = ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S)
        ends = self._list_offsets_many([vp for vp, offset in zip(vps, offsets) if offset is None])
        for vp, offset in zip(vps, offsets):
            self.seek(vp, offset if offset is not None else ends.pop(0)[1])

    def _list_offsets_many(self, vps: list[int]) -> list[tuple[int, int]]:
        """(log start offset, VP high watermark) of each VP, asked of the leaders in parallel."""
        refs = [self._leader(vp).list_offsets.remote() for vp in vps]
        return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S) if refs else []

    # --- routing ----------------------------------------------------------------------------

    def _refresh(self) -> None:
        try:
            self._states = {vp: state for vp, (state, _) in self._virtual.states(self.topic).items()}
        except CoordinatorUnavailable:
            if not self._states:
                raise
            # Reads go on while etcd is away, from the replicas known; ask again later.
        else:
            self._avoid.clear()
        self._metadata_read_at = time.monotonic()

    def _leader(self, vp: int):
        state = self._states[vp]
        handle = vp_handle(self._connection.cluster, self.topic, vp, state.leader)
        if handle is None:
            raise NotLeader(f"leader {state.leader} of {self.topic}/v{vp} is not running; retry after a VP failover")
        return handle

    def _route(self, vp: int) -> str:
        state = self._states[vp]
        route = route_fetch(self.reader_id, self._positions[vp], self._high_watermarks.get(vp, 0),
                            state.risr, state.leader, self._risr_config, state.name)
        return state.leader if route.replica_id == self._avoid.get(vp) else route.replica_id

    # --- polling ----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if time.monotonic() - self._metadata_read_at > self.config.metadata_max_age_ms / 1000:
                self._refresh()
            self._issue_fetches()
            refs = [ref for ref, _, _ in self._pending.values()]
            remaining = max(deadline - time.monotonic(), 0)
            ready, _ = ray.wait(refs, num_returns=1, timeout=remaining) if refs else ([], [])
            if ready:
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                messages = self._collect(set(ready))
                if messages or time.monotonic() >= deadline:
                    return messages
            elif time.monotonic() >= deadline:
                return []
            elif not refs:
                time.sleep(min(remaining, self.config.fetch_wait_ms_max / 1000))

    def _issue_fetches(self) -> None:
        for vp, offset in self._positions.items():
            if vp in self._pending:
                continue
            replica = self._route(vp)
            handle = vp_handle(self._connection.cluster, self.topic, vp, replica)
            if handle is None:
                self._avoid[vp] = replica
                continue
            ref = handle.fetch.remote(offset, self.config.fetch_bytes_max, self.config.fetch_wait_ms_max)
            self._pending[vp] = (ref, offset, replica)

    def _collect(self, ready: set) -> list[Message]:
        messages: list[Message] = []
        for vp, (ref, offset, replica) in list(self._pending.items()):
            if ref not in ready:
                continue
            del self._pending[vp]
            try:
                result = ray.get(ref)
            except (MafkaError, ray.exceptions.RayActorError) as raised:
                error = unwrap(raised)
                if isinstance(error, MafkaError) and not error.retriable:
                    raise error from None
                self._refresh()  # a failover or a RISR change: read where to go now
                self._avoid[vp] = replica
                continue
            self._high_watermarks[vp] = result.high_watermark
            for record in decode_batches(result.data):
                if record.offset >= offset and len(messages) < self.config.poll_messages_max:
                    plain = strip_source(record)
                    messages.append(Message(self.topic, vp, plain.offset, plain.timestamp_ms,
                                            plain.key, plain.value, plain.headers))
                    self._positions[vp] = record.offset + 1
        return messages

    def close(self) -> None:
        """Stop fetching (there is no group to leave)."""
        self._pending.clear()

    def __enter__(self) -> "VirtualConsumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
