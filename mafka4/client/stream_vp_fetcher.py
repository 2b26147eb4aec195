"""``StreamVpFetcher``: a mafka4-mode group member's VP fetches, over the read nodes' Ray streams.

A group member still joins Ray and etcd for its membership (issue 36's coordinator will move
that to the cluster). Its fetches stay on the path they had before the client ports: with
``VpFetcher``'s port path a group member stopped syncing with etcd after the chaos run's etcd
restart (its group store's calls kept failing as refused while etcd was back), which a member
fetching this way does not; until that is understood, members fetch here. A consumer without a
group reads through ``VpFetcher`` (the client ports).

What follows is ``VpFetcher``'s own description of this path, as it was.


``VirtualConsumer`` (no group) and ``VirtualGroupConsumer`` (a member of a mafka4-mode group)
differ only in *which* VPs they read; both read them through this class. For every VP in
``fetching`` it picks the RISR member ``risr.state.route_fetch`` gives for the reader's position
(the leader's half for real-time readers, the other half for readers far behind); the VP
replicas of one read node are then fetched together, with one long-polling
``ReadNode.fetch`` outstanding per node, which answers as soon as any of them has data
(``FetchesInFlight``, over the nodes' streams, as ``PartitionFetcher`` fetches from leaders). Only
records below each VP's high watermark are ever returned, so what a reader saw survives a VP
failover. Positions are per VP: the VP offset of the next message.

Each answer is decoded straight into messages by ``vp_messages.take_vp_messages``. A loss marker
in a VP (physical retention deleted records before a read node fed them,
``vp_records.lost_range_of``) ends the messages returned for that VP; the next ``fetch`` raises
``RecordsLost`` naming the offsets, and reading goes on after the marker.

Metadata (the layout and every VP's leader, RISR and sealed end) is read from etcd in one
transaction by ``refresh``; a replica whose fetch failed is avoided (its VP's leader is asked
instead) until the next refresh, which also follows a failed fetch. So is a node that a network
fault cuts this process off from (``mafka4.partition_gate``); one it slows is asked after the
delay.

Read node handles are kept per node between fetches (``ray.get_actor`` is a round trip to Ray's
GCS: looked up on every fetch, it took a twentieth of a draining member's main thread). A
node's handles are dropped on every ``refresh``, which follows any failed call, so a restarted
read node is looked up again.
"""

from __future__ import annotations

import time
from collections import defaultdict

import ray

from mafka4.client.fetches_in_flight import FetchesInFlight
from mafka4.client.stream_caller import stream_caller
from mafka4.client.message import Message
from mafka4.client.vp_messages import take_vp_messages
from mafka4.errors import CoordinatorUnavailable, RecordsLost, StreamLost
from mafka4.limits import LIST_OFFSETS_TIMEOUT_S, ConsumerConfig
from mafka4.physical.partition_state import TopicMetadata
from mafka4.risr.state import RisrConfig, route_fetch
from mafka4.runtime.connect import Connection
from mafka4.transport.ray_names import read_node_actor_name
from mafka4.virtual.consumer_reads import ConsumerRead
from mafka4.virtual.handles import ask_leader_nodes, read_node_handle
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore


class StreamVpFetcher:
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
        # node -> the (VP, offset) its fetch asked for, in order
        self._in_flight: FetchesInFlight[str, list[tuple[int, int]]] = FetchesInFlight()
        self._lost: RecordsLost | None = None  # raised by the next fetch
        self._handles: dict[str, object] = {}  # read node -> its actor handle (see the module doc)
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
        self._handles.clear()
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

    def _ask_leaders(self, vps: list[int], method: str, *args) -> dict[int, object]:
        """``ReadNode.<method>`` on each VP's leader node, one call per node; raises the first error."""
        found = ask_leader_nodes(self._connection.cluster, self.topic, [self.states[vp] for vp in vps], method, *args,
                                 timeout_s=LIST_OFFSETS_TIMEOUT_S)
        for answer in found.values():
            if isinstance(answer, BaseException):
                raise answer
        return found

    def list_offsets_many(self, vps: list[int]) -> list[tuple[int, int]]:
        """(log start offset, VP high watermark) of each VP, asked of the leaders' nodes."""
        found = self._ask_leaders(vps, "list_offsets")
        return [found[vp] for vp in vps]

    def offsets_for_time(self, vps: list[int], timestamp_ms: int) -> list[int]:
        """Per VP, its first offset at or after ``timestamp_ms``, else its high watermark."""
        found = self._ask_leaders(vps, "offsets_for_time", timestamp_ms)
        ends = dict(zip(missing := [vp for vp in vps if found[vp] is None], self.list_offsets_many(missing)))
        return [found[vp] if found[vp] is not None else ends[vp][1] for vp in vps]

    # --- positions ------------------------------------------------------------------------

    def seek(self, vp: int, offset: int) -> None:
        """Read ``vp`` from ``offset`` on (an answer for its old position still in flight is ignored)."""
        self.positions[vp] = offset

    def stop(self, vp: int) -> None:
        """Stop fetching ``vp`` (its position is kept)."""
        self.fetching.discard(vp)

    def clear(self) -> None:
        self._in_flight.clear()

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, timeout_s: float) -> list[Message]:
        """Messages of the VPs in ``fetching``, waiting at most ``timeout_s`` for the first."""
        if self._lost is not None:
            lost, self._lost = self._lost, None
            raise lost
        self._issue_fetches()
        messages = self._collect(timeout_s)
        if not messages and self._lost is not None:
            lost, self._lost = self._lost, None
            raise lost
        return messages

    def _route(self, vp: int) -> str:
        state = self.states[vp]
        route = route_fetch(self.reader_id, self.positions[vp], self.high_watermarks.get(vp, 0),
                            state.risr, state.leader, self._risr_config, state.name)
        return state.leader if route.replica_id == self._avoid.get(vp) else route.replica_id

    def _issue_fetches(self) -> None:
        in_flight = {vp for sent in self._in_flight.sent() for vp, _ in sent}
        by_node: dict[str, list[int]] = defaultdict(list)
        for vp in sorted(self.fetching - in_flight):
            by_node[self._route(vp)].append(vp)
        for node, vps in by_node.items():
            if node in self._in_flight:
                continue  # this node's fetch is out: these VPs join the next one
            handle = self._node_handle(node)
            sent = [(vp, self.positions[vp]) for vp in vps]
            reads = [ConsumerRead(VpId(self.topic, vp), offset) for vp, offset in sent]
            name = read_node_actor_name(self._connection.cluster, node)
            if handle is None or not self._in_flight.send(node, node, self._fetch_call(handle, name, reads), sent):
                self._avoid.update({vp: node for vp in vps})

    def _fetch_call(self, handle, name: str, reads: list[ConsumerRead]):
        """What starts the fetch of ``reads`` over the stream of read node ``name``."""
        return lambda: stream_caller().call(handle, name, "fetch", reads, self.config.fetch_bytes_max,
                                            self.config.fetch_wait_ms_max)

    def close(self) -> None:
        """Stop every fetch out (the streams are the process's, ``client.stream_caller``)."""
        self._in_flight.clear()

    def _node_handle(self, node: str):
        """The handle of read node ``node``, looked up once until ``refresh`` (None: not running)."""
        handle = self._handles.get(node)
        if handle is None:
            handle = read_node_handle(self._connection.cluster, node)
            if handle is not None:
                self._handles[node] = handle
        return handle

    def _collect(self, timeout_s: float) -> list[Message]:
        messages: list[Message] = []
        for node, sent, call in self._in_flight.answered(timeout_s, self.config.fetch_wait_ms_max / 1000):
            try:
                answers = call.result()
            except (ray.exceptions.RayActorError, StreamLost):  # the node died: a failover moves its VPs
                self.refresh()
                self._avoid.update({vp: node for vp, _ in sent})
                continue
            for (vp, offset), answer in zip(sent, answers):
                if vp not in self.fetching or self.positions.get(vp) != offset:
                    continue  # stopped or moved while the fetch was out
                if answer.error is not None:
                    if not answer.error.retriable:
                        raise answer.error
                    self.refresh()  # a failover or a RISR change: read where to go now
                    self._avoid[vp] = node
                    continue
                self.high_watermarks[vp] = answer.read.high_watermark
                self._take(vp, offset, answer.read.data, messages)
        return messages

    def _take(self, vp: int, offset: int, data: bytes, messages: list[Message]) -> None:
        """Decode one VP's batches into ``messages`` from ``offset``, up to ``poll_messages_max``."""
        taken = take_vp_messages(data, self.topic, vp, offset, messages, self.config.poll_messages_max,
                                 self.config.check_crcs)
        self.positions[vp] = taken.next_offset
        if taken.lost is not None:
            self._lost = RecordsLost.of(self.topic, *taken.lost, vp=vp)
