"""``VpFetcher``: long-poll fetches of a set of virtual partitions, shared by the VP readers.

``VirtualConsumer`` (no group) and ``VirtualGroupConsumer`` (a member of a mafka4-mode group)
differ only in *which* VPs they read; both read them through this class. It keeps one
long-poll fetch outstanding per VP in ``fetching``, sent to the RISR member
``risr.state.route_fetch`` picks for the reader's position (the leader's half for real-time
readers, the other half for readers far behind), and decodes whole batches, of which only
records below the VP high watermark are ever returned, so what a reader saw survives a VP
failover. Positions are per VP: the VP offset of the next message.

Metadata (the layout and every VP's leader, RISR and sealed end) is read from etcd in one
transaction by ``refresh``; a replica whose fetch failed is avoided (its VP's leader is asked
instead) until the next refresh, which also follows a failed fetch.
"""

from __future__ import annotations

import time

import ray

from mafka4.client.errors import unwrap
from mafka4.client.message import Message
from mafka4.coordinator.topics import TopicMetadata
from mafka4.errors import CoordinatorUnavailable, MafkaError, NotLeader
from mafka4.limits import ConsumerConfig
from mafka4.records import decode_batches
from mafka4.risr.state import RisrConfig, route_fetch
from mafka4.runtime.connect import Connection
from mafka4.virtual.launcher import vp_handle
from mafka4.virtual.metadata import VirtualPartitionState, VirtualStore
from mafka4.virtual.reshard import TopicLayout
from mafka4.virtual.split import strip_source

LIST_OFFSETS_TIMEOUT_S = 30


class VpFetcher:
    def __init__(self, connection: Connection, metadata: TopicMetadata, config: ConsumerConfig, reader_id: str):
        self.topic = metadata.name
        self.config = config
        self.reader_id = reader_id
        self._connection = connection
        self._topic_config = metadata.config
        self._risr_config = RisrConfig(read_replica_lag_ms_max=metadata.config.read_replica_lag_ms_max)
        self._virtual = VirtualStore(connection.store, connection.cluster)
        self.layout: TopicLayout | None = None
        self.states: dict[int, VirtualPartitionState] = {}
        self.read_at = 0.0  # time.monotonic() of the last metadata read
        self.positions: dict[int, int] = {}  # VP -> next offset to read; fetched only if in ``fetching``
        self.fetching: set[int] = set()
        self.high_watermarks: dict[int, int] = {}
        self._avoid: dict[int, str] = {}  # VP -> replica whose fetch failed since the last metadata read
        self._pending: dict[int, tuple[ray.ObjectRef, int, str]] = {}  # VP -> (fetch, offset, replica)
        self.refresh()

    # --- metadata -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the layout and the VP states; while etcd is away, keep reading from what is known."""
        try:
            self.layout, found = self._virtual.layout_and_states(
                self.topic, self._topic_config.partitions, self._topic_config.virtual_config())
        except CoordinatorUnavailable:
            if self.layout is None:
                raise
        else:
            self.states = {vp: state for vp, (state, _) in found.items()}
            self._avoid.clear()
        self.read_at = time.monotonic()

    @property
    def metadata_age_s(self) -> float:
        return time.monotonic() - self.read_at

    @property
    def sealed_end_offsets(self) -> dict[int, int]:
        return {vp: s.sealed_end_offset for vp, s in self.states.items() if s.sealed_end_offset is not None}

    @property
    def retired(self) -> frozenset[int]:
        return frozenset(vp for vp, s in self.states.items() if s.retired)

    def leader(self, vp: int):
        state = self.states[vp]
        handle = vp_handle(self._connection.cluster, self.topic, vp, state.leader)
        if handle is None:
            raise NotLeader(f"leader {state.leader} of {self.topic}/v{vp} is not running; retry after a VP failover")
        return handle

    def list_offsets_many(self, vps: list[int]) -> list[tuple[int, int]]:
        """(log start offset, VP high watermark) of each VP, asked of the leaders in parallel."""
        refs = [self.leader(vp).list_offsets.remote() for vp in vps]
        return ray.get(refs, timeout=LIST_OFFSETS_TIMEOUT_S) if refs else []

    def offsets_for_time(self, vps: list[int], timestamp_ms: int) -> list[int]:
        """Per VP, its first offset at or after ``timestamp_ms``, else its high watermark."""
        offsets = ray.get([self.leader(vp).offset_for_timestamp.remote(timestamp_ms) for vp in vps],
                          timeout=LIST_OFFSETS_TIMEOUT_S)
        ends = self.list_offsets_many([vp for vp, offset in zip(vps, offsets) if offset is None])
        return [offset if offset is not None else ends.pop(0)[1] for offset in offsets]

    # --- positions ------------------------------------------------------------------------

    def seek(self, vp: int, offset: int) -> None:
        self.positions[vp] = offset
        self._pending.pop(vp, None)

    def stop(self, vp: int) -> None:
        """Stop fetching ``vp`` (its position is kept)."""
        self.fetching.discard(vp)
        self._pending.pop(vp, None)

    def clear(self) -> None:
        self._pending.clear()

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, timeout_s: float) -> list[Message]:
        """Messages of the VPs in ``fetching``, waiting at most ``timeout_s`` for the first."""
        self._issue_fetches()
        refs = [ref for ref, _, _ in self._pending.values()]
        if not refs:
            time.sleep(min(timeout_s, self.config.fetch_wait_ms_max / 1000))
            return []
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout_s)
        if not ready:
            return []
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        return self._collect(set(ready))

    def _route(self, vp: int) -> str:
        state = self.states[vp]
        route = route_fetch(self.reader_id, self.positions[vp], self.high_watermarks.get(vp, 0),
                            state.risr, state.leader, self._risr_config, state.name)
        return state.leader if route.replica_id == self._avoid.get(vp) else route.replica_id

    def _issue_fetches(self) -> None:
        for vp in sorted(self.fetching):
            if vp in self._pending:
                continue
            replica = self._route(vp)
            handle = vp_handle(self._connection.cluster, self.topic, vp, replica)
            if handle is None:
                self._avoid[vp] = replica
                continue
            ref = handle.fetch.remote(self.positions[vp], self.config.fetch_bytes_max, self.config.fetch_wait_ms_max)
            self._pending[vp] = (ref, self.positions[vp], replica)

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
                self.refresh()  # a failover or a RISR change: read where to go now
                self._avoid[vp] = replica
                continue
            self.high_watermarks[vp] = result.high_watermark
            for record in decode_batches(result.data):
                if record.offset >= offset and len(messages) < self.config.poll_messages_max:
                    plain = strip_source(record)
                    messages.append(Message(self.topic, vp, plain.offset, plain.timestamp_ms,
                                                  plain.key, plain.value, plain.headers))
                    self.positions[vp] = record.offset + 1
        return messages
