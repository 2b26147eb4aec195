"""``VpFetcher``: long-poll fetches of a set of virtual partitions, one call per read node.

``VirtualConsumer`` (no group) and ``VirtualGroupConsumer`` (a member of a mafka4-mode group)
differ only in *which* VPs they read; both read them through this class. For every VP in
``fetching`` it picks the RISR member ``risr.state.route_fetch`` gives for the reader's position
(the leader's half for real-time readers, the other half for readers far behind); the VP
replicas of one read node are then fetched together, with one long-polling ``VP_FETCH``
outstanding per node on its client port (``protocol.vp_api``), which answers as soon as any of
them has data (``FetchesInFlight``, as ``PartitionFetcher`` fetches from leaders); an idle node
is asked less and less often (``client.idle_waits``). A fetch out never asks for less or other
than the consumer wants: when a VP is added, sought or routed elsewhere while its node's
fetch is out, the fetch is sent again with what is wanted now, and the node ends the one out
(``frontend.fetch_sessions``); what the dropped one would have answered is read by the new one.
A node whose answer brought messages is sent its next fetch at once, before ``fetch`` returns
them, so the next poll finds it under way (a node that has data likely has more); it asks
from the positions the answer moved, and an answer is taken only if the VP is still fetched
from the position it asked for (a VP stopped or sought meanwhile is fetched again). Only
records below each VP's high watermark are ever returned, so what a reader saw survives a VP
failover. Positions are per VP: the VP offset of the next message, with the leader epoch of the
record before it (``last_epochs``), which every fetch sends: a VP whose log diverged from what
this reader read there (a one-replica VP that lost its unflushed tail in a power loss and fed
it again, with records at other offsets) answers "diverging", and the position moves back to
where the logs part (``positions.rewound``; Kafka's KIP-320). So a reader reads some records
twice after a power loss, and skips none.

Each answer is decoded straight into messages by ``vp_messages.take_vp_messages``. A loss marker
in a VP (physical retention deleted records before a read node fed them,
``vp_records.lost_range_of``) ends the messages returned for that VP; the next ``fetch`` raises
``RecordsLost`` naming the offsets, and reading goes on after the marker.

Lanes of several priorities (``client.lane_shares``): when the VPs fetched belong to lanes of
different priorities, each poll takes each VP's messages only up to its lane's remaining share
of the poll (``ConsumerConfig.lane_order``), and leaves the rest unread: its position moves over
what was taken only, so the rest is fetched again, and nothing is skipped. Weighted, the poll's
rest then goes to the VPs cut short, higher lanes first; strict, the lanes held back are not
fetched at all while a higher one has a backlog. A VP's messages keep their order, so per-key
order holds within each lane. A topic without lanes, or a reader of one priority, takes every
answer as before (one check a poll).

Metadata (the layout, every VP's leader, RISR and sealed end, and where each read node serves
clients) comes from any node's ``VP_METADATA`` answer, read by ``refresh``, or for the VPs a
group sync claimed from that sync's answer (``learn``); while no node answers, reading goes on
from what is known. A replica whose fetch failed is avoided (its VP's
leader is asked instead) until the next refresh, which also follows a failed fetch. So is a node
that a network fault cuts this process off from (``mafka4.partition_gate``); one it slows is
asked after the delay. A VP that has nowhere to go (its leader's node serves no client port in
the metadata held, as after a node died and before its VPs failed over) makes the fetcher ask
for the metadata again, every ``VP_UNROUTABLE_REFRESH_S`` at most, until the failover shows.
Connections to the nodes are kept between fetches (``client.node_links``)
and one that failed is opened afresh; a group member that owns nothing yet opens them ahead of
its first claim (``connect_ahead``). Calls run on the process's client loop
(``client.client_loop``). Imports neither ``ray`` nor ``etcd3``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from collections import defaultdict

from mafka4.client.client_loop import client_loop
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.fetches_in_flight import FetchesInFlight
from mafka4.client.idle_waits import IdleWaits
from mafka4.client.lane_shares import WEIGHTED, LaneShares, fetch_order, lane_readings, lane_shares
from mafka4.client.message import Message
from mafka4.client.node_links import NodeLinks
from mafka4.client.positions import rewound
from mafka4.client.vp_messages import VpTake, take_vp_messages
from mafka4.errors import MafkaError, NotLeader, RecordsLost
from mafka4.join_trace import JOIN_TRACES, vps_detail
from mafka4.limits import LIST_OFFSETS_TIMEOUT_S, PROTOCOL_ANSWER_MARGIN_S, VP_UNROUTABLE_REFRESH_S, ConsumerConfig
from mafka4.log.epochs import NO_EPOCH
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.error_codes import raised_error
from mafka4.protocol.vp_api import (VpDiverging, VpFetchRequest, VpListOffsetsRequest, VpMetadataAnswer,
                                    VpMetadataRequest, VpOffset, VpOffsetsAnswer, VpReadAnswer)
from mafka4.risr.state import RisrConfig, route_fetch
from mafka4.virtual.layout import TRUNK, TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState, epochs_from_json

logger = logging.getLogger(__name__)


class VpFetcher:
    def __init__(self, access: ClusterAccess, metadata: TopicMetadata, config: ConsumerConfig, reader_id: str,
                 links: NodeLinks | None = None):
        """``links``: connections shared with a group member's link, which its consumer closes (one
        ``VP_FETCH`` of a topic is out per connection: never share them with another fetcher)."""
        self.topic = metadata.name
        self.config = config
        self.reader_id = reader_id
        self._loop = client_loop()
        self._links = NodeLinks(access, self._opened) if links is None else links
        self._owns_links = links is None
        self._topic_config = metadata.config
        self._risr_config = RisrConfig(read_replica_lag_ms_max=metadata.config.read_replica_lag_ms_max)
        self._addresses: dict[str, str | None] = {}  # read node -> its client address
        self.layout: TopicLayout | None = None
        self.states: dict[int, VirtualPartitionState] = {}
        self.read_at = 0.0  # time.monotonic() of the last metadata read
        self.positions: dict[int, int] = {}  # VP -> next offset to read; fetched only if in ``fetching``
        self.last_epochs: dict[int, int] = {}  # VP -> leader epoch of the record before its position
        self.fetching: set[int] = set()
        self.held: set[int] = set()  # VPs in ``fetching`` not fetched meanwhile (``hold``)
        self.high_watermarks: dict[int, int] = {}
        self._avoid: dict[int, str] = {}  # VP -> replica whose fetch failed since the last metadata read
        # node -> the (VP, offset, last epoch) its fetch asked for, in order
        self._in_flight: FetchesInFlight[str, list[tuple[int, int, int]]] = FetchesInFlight()
        self._idle_waits: IdleWaits[str] = IdleWaits(config.fetch_wait_ms_max, config.fetch_idle_wait_ms_max)
        self._lost: RecordsLost | None = None  # raised by the next fetch
        # Lanes (``client.lane_shares``): each VP's (lane, priority), fixed once the layout knows
        # it (a VP never changes lane, a lane's policy is set when it opens); this poll's shares
        # (None: one priority read, nothing capped) and the lanes not fetched meanwhile (strict).
        self._vp_lanes: dict[int, tuple[str, int]] = {}
        self._lane_rank: dict[str, int] = {}  # weighted: each lane's place in the next requests
        self._lane_credits: dict[str, int] = {}  # weighted: the deficit round robin's credits
        self._shares: LaneShares | None = None
        self._paused: frozenset[str] = frozenset()
        # Join traces (``mafka4.join_trace``): the member id rows name, and the VPs whose first
        # fetch and first data are still to be stamped (only while the topic is traced).
        self.traced_as = reader_id
        self._first_data_pending: set[int] = set()
        self.refresh()

    # --- metadata -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Ask a node for the layout and the VP states again; while none answers, keep reading from what is known."""
        try:
            answer = self._loop.run(self._links.ask_any(VpMetadataRequest(self.topic)))
        except MafkaError as error:
            if self.layout is None or not error.retriable:
                raise
        else:
            self._take_metadata(answer, whole=True)
            self._avoid.clear()
            JOIN_TRACES.record(self.topic, "metadata_read", self.traced_as)
        self.read_at = time.monotonic()

    def learn(self, answer: VpMetadataAnswer) -> None:
        """Take the VP states and node addresses ``answer`` names (a group sync's, naming the VPs it
        claimed) on top of what is known, and its layout unless it is older than the one held."""
        self._take_metadata(answer, whole=False)

    def _take_metadata(self, answer: VpMetadataAnswer, whole: bool) -> None:
        self._links.learn(answer.nodes)
        epochs = epochs_from_json(json.loads(epoch) for epoch in answer.split_epochs_json)
        if whole or self.layout is None or len(epochs) >= len(self.layout.epochs):
            self.layout = TopicLayout(self._topic_config.partitions, epochs, self._topic_config.virtual_config())
        states = {info.vp: VirtualPartitionState.from_json(info.vp, json.loads(info.state_json)) for info in answer.vps}
        addresses = {node.node_id: node.address for node in answer.nodes}
        self.states = states if whole else {**self.states, **states}
        self._addresses = addresses if whole else {**self._addresses, **addresses}

    def _opened(self, address: str) -> None:
        JOIN_TRACES.record(self.topic, "connected", self.traced_as, address)

    def connect_ahead(self, nodes_max: int) -> None:
        """Open, in the background, the connections to the read nodes that lead this topic's VPs
        now (at most ``nodes_max`` of them, by address), so the first fetch of a VP claimed later
        finds its leader's connection open. One that fails is opened again on first use."""
        leaders = {state.leader for state in self.states.values() if not state.retired}
        addresses = sorted({self._addresses[node] for node in leaders if self._addresses.get(node)})
        for address in addresses[:nodes_max]:
            self._loop.submit(self._connect_quietly(address))

    async def _connect_quietly(self, address: str) -> None:
        try:
            await self._links.connection(address)
        except (MafkaError, OSError) as error:
            logger.info("%s: no connection to %s ahead of a claim (%s); the first fetch there opens one", self.topic,
                        address, error)

    def trace_first_data(self, vp: int) -> None:
        """Stamp the first fetch of ``vp`` and its first data (the topic is join-traced)."""
        self._first_data_pending.add(vp)

    def close(self) -> None:
        """Close every connection; fetches out are cancelled."""
        self._in_flight.clear()
        if self._owns_links:
            self._loop.run(self._links.close_after_cancelled())

    @property
    def metadata_age_s(self) -> float:
        return time.monotonic() - self.read_at

    @property
    def sealed_end_offsets(self) -> dict[int, int]:
        return {vp: s.sealed_end_offset for vp, s in self.states.items() if s.sealed_end_offset is not None}

    @property
    def retired(self) -> frozenset[int]:
        return frozenset(vp for vp, s in self.states.items() if s.retired)

    def _ask_leaders(self, vps: list[int], timestamp_ms: int | None) -> dict[int, VpOffsetsAnswer]:
        """``VP_LIST_OFFSETS`` at each VP's leader node, one call per node; raises the first error."""
        by_node: dict[str, list[int]] = defaultdict(list)
        for vp in vps:
            by_node[self.states[vp].leader].append(vp)

        async def ask(node: str, node_vps: list[int]) -> list[VpOffsetsAnswer]:
            address = self._addresses.get(node)
            if address is None:
                raise NotLeader(f"read node {node} leading {self.topic}/v{node_vps[0]} serves no client port now; "
                                f"retry after the VP failed over")
            connection = await self._links.connection(address)
            answer, _ = await connection.call(VpListOffsetsRequest(self.topic, tuple(node_vps), timestamp_ms),
                                              timeout_s=LIST_OFFSETS_TIMEOUT_S)
            return answer.offsets

        async def ask_all() -> list[list[VpOffsetsAnswer]]:
            return list(await asyncio.gather(*(ask(node, node_vps) for node, node_vps in by_node.items())))

        found: dict[int, VpOffsetsAnswer] = {}
        for node_vps, answers in zip(by_node.values(), self._loop.run(ask_all(), LIST_OFFSETS_TIMEOUT_S)):
            for vp, answer in zip(node_vps, answers):
                if answer.error is not None:
                    raise raised_error(answer.error)
                found[vp] = answer
        return found

    def list_offsets_many(self, vps: list[int]) -> list[tuple[int, int]]:
        """(log start offset, VP high watermark) of each VP, asked of the leaders' nodes."""
        found = self._ask_leaders(vps, None)
        return [(found[vp].log_start_offset, found[vp].high_watermark) for vp in vps]

    def offsets_for_time(self, vps: list[int], timestamp_ms: int) -> list[int]:
        """Per VP, its first offset at or after ``timestamp_ms``, else its high watermark."""
        found = self._ask_leaders(vps, timestamp_ms)
        return [found[vp].timestamp_offset if found[vp].timestamp_offset is not None else found[vp].high_watermark
                for vp in vps]

    # --- positions ------------------------------------------------------------------------

    def seek(self, vp: int, offset: int, last_epoch: int = NO_EPOCH) -> None:
        """Read ``vp`` from ``offset`` on (an answer for its old position still in flight is ignored);
        ``last_epoch``: the leader epoch of the record before it, if known (a committed offset's)."""
        self.positions[vp] = offset
        self.last_epochs[vp] = last_epoch

    def position_epoch(self, vp: int) -> int:
        """The leader epoch of the record before ``vp``'s position (``NO_EPOCH``: not known)."""
        return self.last_epochs.get(vp, NO_EPOCH)

    def hold(self, vp: int, held: bool) -> None:
        """Fetch nothing of ``vp`` while held (its position is kept; an answer for it in flight is
        dropped by the ``seek`` that comes with a hold)."""
        if held:
            self.held.add(vp)
        else:
            self.held.discard(vp)

    def stop(self, vp: int) -> None:
        """Stop fetching ``vp`` (its position is kept)."""
        self.fetching.discard(vp)

    def clear(self) -> None:
        self._in_flight.clear()

    # --- fetching ---------------------------------------------------------------------------

    def fetch(self, timeout_s: float, wake: concurrent.futures.Future | None = None) -> list[Message]:
        """Messages of the VPs in ``fetching``, waiting at most ``timeout_s`` for the first (or until ``wake``)."""
        if self._lost is not None:
            lost, self._lost = self._lost, None
            raise lost
        self._weigh_lanes()
        self._issue_fetches()
        messages, brought = self._collect(timeout_s, wake)
        if brought:
            # A node whose answer brought messages likely holds more: its next fetch goes out now,
            # so the next poll finds that answer under way instead of starting the round trip.
            if self._shares is not None:
                self._weigh_lanes()  # a lane that just caught up no longer holds a lower one back
            self._issue_fetches(only=brought)
        if not messages and self._lost is not None:
            lost, self._lost = self._lost, None
            raise lost
        return messages

    def _lane_of(self, vp: int) -> tuple[str, int]:
        """``vp``'s (lane, priority); a VP the layout held does not know yet counts as the trunk's."""
        known = self._vp_lanes.get(vp)
        if known is not None:
            return known
        layout = self.layout
        if layout is None or not layout.exists(vp):
            return TRUNK, 0
        lane = layout.lane_of(vp)
        known = self._vp_lanes[vp] = (lane, layout.current.lane_policy(lane).priority)
        return known

    def _weigh_lanes(self) -> None:
        """This poll's shares of the lanes read (``client.lane_shares``); None while they are of one priority."""
        layout = self.layout
        if layout is None or not layout.current.lanes or len(self.fetching) < 2:
            self._shares, self._paused, self._lane_rank = None, frozenset(), {}  # no lanes, or one VP: nothing to weigh
            return
        readings = []
        for vp in self.fetching:
            lane, priority = self._lane_of(vp)
            high_watermark = self.high_watermarks.get(vp)
            readings.append((lane, priority, None if high_watermark is None else self.positions[vp] < high_watermark))
        lanes = lane_readings(readings)
        self._shares = lane_shares(lanes, self.config.lane_order, self.config.poll_messages_max)
        self._paused = frozenset() if self._shares is None else self._shares.paused()
        self._lane_rank = {}
        if self._shares is not None and self.config.lane_order == WEIGHTED:
            order, self._lane_credits = fetch_order(lanes, self._lane_credits)
            self._lane_rank = {lane: index for index, lane in enumerate(order)}

    def _route(self, vp: int) -> str:
        state = self.states[vp]
        route = route_fetch(self.reader_id, self.positions[vp], self.high_watermarks.get(vp, 0),
                            state.risr, state.leader, self._risr_config, state.name)
        return state.leader if route.replica_id == self._avoid.get(vp) else route.replica_id

    def _issue_fetches(self, only: set[str] | None = None) -> None:
        """Send each node the fetch of what is wanted there now, unless the fetch out asks for just
        that. ``only``: send to these nodes alone (those that just answered: the fetches out to
        the others, and a metadata read, are left to the next poll)."""
        wanted: dict[str, list[tuple[int, int, int]]] = defaultdict(list)  # node -> (VP, offset, last epoch)
        paused, rank = self._paused, self._lane_rank
        # Weighted lane order: the lanes take turns at the head of the request (``lane_shares.fetch_order``).
        for vp in sorted(self.fetching, key=(lambda vp: (rank.get(self._lane_of(vp)[0], 0), vp)) if rank else None):
            if paused and self._lane_of(vp)[0] in paused:
                continue  # strict lane order: a lane of higher priority has a backlog
            if vp in self.held:
                continue  # an ordered retry of a message of it waits
            wanted[self._route(vp)].append((vp, self.positions[vp], self.position_epoch(vp)))
        if only is None:
            for node in [node for node in self._in_flight.destinations() if node not in wanted]:
                self._in_flight.drop(node)  # nothing to read there any more
        unroutable = False
        for node, sent in wanted.items():
            if only is not None and node not in only:
                continue
            out = self._in_flight.sent_to(node)
            if out == sent:
                continue
            if out is not None:
                # What the node should be asked for changed while its fetch waited (a VP claimed
                # in a join, a position sought, a route that moved): waiting for the long poll
                # to end could take fetch_idle_wait_ms_max. The fetch is sent again and the node
                # ends the one out (frontend.fetch_sessions). No position moves until an answer
                # is taken, so the dropped one loses and repeats nothing.
                self._in_flight.drop(node)
            address = self._addresses.get(node)
            reads = tuple(VpOffset(vp, offset, last_epoch) for vp, offset, last_epoch in sent)
            if self._first_data_pending and any(read.vp in self._first_data_pending for read in reads):
                JOIN_TRACES.record(self.topic, "fetch_sent", self.traced_as,
                                   vps_detail(read.vp for read in reads if read.vp in self._first_data_pending))
            wait_ms = self._idle_waits.wait_ms(node)
            if address is None or not self._in_flight.send(
                    node, node, lambda a=address, r=reads, w=wait_ms: self._start_fetch(a, r, w), sent):
                self._avoid.update({vp: node for vp, _, _ in sent})
                unroutable = True
        # A VP routed to a node that serves no client port (or that a network fault cuts off) is
        # read again only once the metadata names another: ask for it, a few times a second at most.
        if unroutable and only is None and self.metadata_age_s >= VP_UNROUTABLE_REFRESH_S:
            self.refresh()

    def _start_fetch(self, address: str, reads: tuple[VpOffset, ...], wait_ms: int):
        request = VpFetchRequest(self.topic, reads, self.config.fetch_bytes_max, wait_ms)

        async def fetch() -> tuple[VpReadAnswer, ...]:
            connection = await self._links.connection(address)
            answer, _ = await connection.call(request, timeout_s=request.wait_ms_max / 1000 + PROTOCOL_ANSWER_MARGIN_S)
            return answer.answers

        return asyncio.run_coroutine_threadsafe(fetch(), self._loop.loop)

    def _collect(self, timeout_s: float, wake: concurrent.futures.Future | None) -> tuple[list[Message], set[str]]:
        """The messages of the fetches answered, and the nodes whose answers brought some."""
        messages: list[Message] = []
        brought: set[str] = set()
        shares = self._shares
        left = None if shares is None else dict(shares.caps)  # lane -> what it may still take in the first pass
        # (node, lane, VP, its position and last epoch then, data) of the VPs cut short by their lane's share
        cut: list[tuple[str, str, int, int, int, bytes]] = []
        for node, sent, call in self._in_flight.answered(timeout_s, self.config.fetch_wait_ms_max / 1000, wake):
            try:
                answers = call.result()
            except MafkaError as error:  # the node died or its connection broke: a failover moves its VPs
                if not error.retriable:
                    raise
                self._idle_waits.answered(node, empty=False)
                address = self._addresses.get(node)
                if address is not None:
                    self._loop.call_soon(self._links.forget, address)
                self.refresh()
                self._avoid.update({vp: node for vp, _, _ in sent})
                continue
            self._idle_waits.answered(node, empty=not any(answer.data or answer.error for answer in answers))
            taken_before = len(messages)
            for (vp, offset, last_epoch), answer in zip(sent, answers):
                if vp not in self.fetching or (self.positions.get(vp), self.position_epoch(vp)) != (offset, last_epoch):
                    continue  # stopped or moved while the fetch was out
                if answer.error is not None:
                    error = raised_error(answer.error)
                    if not error.retriable:
                        raise error
                    self.refresh()  # a failover or a RISR change: read where to go now
                    self._avoid[vp] = node
                    continue
                self.high_watermarks[vp] = answer.high_watermark
                if answer.diverging is not None:
                    self._rewind(vp, offset, answer.diverging)
                    continue
                if answer.data and vp in self._first_data_pending:
                    self._first_data_pending.discard(vp)
                    JOIN_TRACES.record(self.topic, "first_data", self.traced_as, str(vp))
                if left is None:
                    self._take(vp, offset, answer.data, messages, self.config.poll_messages_max)
                elif answer.data:
                    self._take_share(node, vp, offset, answer.data, messages, left, cut)
            if len(messages) > taken_before:
                brought.add(node)
        if cut and shares.rest_order:
            self._take_rest(cut, shares.rest_order, messages, brought)
        return messages, brought

    def _take_share(self, node: str, vp: int, offset: int, data: bytes, messages: list[Message],
                    left: dict[str, int], cut: list[tuple[str, str, int, int, int, bytes]]) -> None:
        """Take ``vp``'s messages up to what its lane may still take this poll; note it in ``cut`` if
        its lane's share ran out (the rest may go to it after every answer was taken)."""
        lane = self._lane_of(vp)[0]
        share = left.get(lane, 0)
        if share > 0:
            before = len(messages)
            taken = self._take(vp, offset, data, messages, min(before + share, self.config.poll_messages_max))
            left[lane] = share = share - (len(messages) - before)
            if taken.lost is not None:
                return  # a loss marker ended the take: RecordsLost is raised before anything after it
        if share <= 0:
            cut.append((node, lane, vp, self.positions[vp], self.position_epoch(vp), data))

    def _take_rest(self, cut: list[tuple[str, str, int, int, int, bytes]], rest_order: tuple[str, ...],
                   messages: list[Message], brought: set[str]) -> None:
        """Fill the poll up to ``poll_messages_max`` from the VPs cut short by their lane's share, lanes
        in ``rest_order`` (higher priorities first), each lane's VPs in the order they were answered."""
        rank = {lane: index for index, lane in enumerate(rest_order)}
        for node, lane, vp, offset, last_epoch, data in sorted(cut, key=lambda entry: rank.get(entry[1], len(rank))):
            if len(messages) >= self.config.poll_messages_max:
                return
            if lane not in rank or (self.positions[vp], self.position_epoch(vp)) != (offset, last_epoch):
                continue  # the same VP answered twice (two nodes) and taken already
            before = len(messages)
            self._take(vp, offset, data, messages, self.config.poll_messages_max)
            if len(messages) > before:
                brought.add(node)

    def _take(self, vp: int, offset: int, data: bytes, messages: list[Message], messages_max: int) -> VpTake:
        """Decode one VP's batches into ``messages`` from ``offset``, until it holds ``messages_max``."""
        taken = take_vp_messages(data, self.topic, vp, offset, messages, messages_max, self.config.check_crcs)
        self.positions[vp] = taken.next_offset
        if taken.leader_epoch is not None:
            self.last_epochs[vp] = taken.leader_epoch
        if taken.lost is not None:
            self._lost = RecordsLost.of(self.topic, *taken.lost, vp=vp)
        return taken

    def _rewind(self, vp: int, offset: int, diverging: VpDiverging) -> None:
        """The VP's log no longer holds what this reader read before ``offset``: read again from
        where it parts (duplicates, never a gap)."""
        position, last_epoch = rewound(offset, (diverging.epoch, diverging.end_offset))
        logger.warning("%s/v%d: the log diverged from what this reader read (leader epoch %d ends at %d); "
                       "reading again from %d instead of %d", self.topic, vp, diverging.epoch, diverging.end_offset,
                       position, offset)
        self.positions[vp], self.last_epochs[vp] = position, last_epoch
