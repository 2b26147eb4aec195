"""Ack -> reader: how soon after a producer's acknowledgement a waiting consumer has the message.

``fleet calibrate`` takes the fleet model's ``physical_read_base_latency_ms`` (Mafka3: a consumer
reads the partition's leader) and ``virtual_read_base_latency_ms`` (Mafka4: a consumer reads a VP
on a read node, after the feed) from these trials. Both sides go the way the product's clients
go, over the client ports (DESIGN section 8), each on connections of its own as a producer
process and a consumer process have them (``client.node_links``):

* the reader parks one long-polling fetch, from the end of what it may read, at the node that
  serves the partition: ``FETCH`` at the leader's port (``LeaderLink.fetch``, what
  ``PartitionFetcher`` sends) or one ``VP_FETCH`` naming every VP of the topic that a read node
  leads (what ``VpFetcher`` sends a node: one fetch out per node, answered as soon as any of its
  VPs has data). A topic whose VPs two read nodes lead gets a reader per node; the first to
  receive counts;
* once it is parked (``PARK_S``), one single-message batch (1 KiB, acks=all) is produced to the
  topic's leader over its port (``LeaderLink.produce``, what the ``Producer``'s sender sends);
* the delay is from the producer's acknowledgement to the reader's answer with data, both
  stamped on this process's one event loop.

Why not Ray calls, as these trials went until 2026-12-04: no reader of the product reads by Ray
call, nor does a producer produce by one, and a Ray call's reply path put a delay and a jitter
of its own between the two stamps. On the 2-core machine, one cluster, the two ways
interleaved, 20 trials each: through the physical partition 0.24 ms (median; 0.044 to 1.367)
by Ray call against 0.037 ms (0.028 to 0.070) over the ports, where the leader answers the
parked fetch and the produce on the same high-watermark advance; through the VPs 1.43 ms by
Ray call against 1.22 ms over the ports. So the VP / physical ratio that issue 37's goal bounds
(at most 2x) is about 33x over the ports, not the 6 to 14x the Ray calls showed.

A reader whose answer came before the produce (another writer on the topic) fails the trial; a
reader's error is raised. Runs in the calibrating process; imports no ``ray``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import defaultdict
from typing import Awaitable, Callable, Protocol, Sequence

from mafka4.batch_payload import encode_batch
from mafka4.client.cluster_access import ClusterAccess
from mafka4.client.leader_routes import LeaderLink, LeaderRoutes
from mafka4.client.node_links import NodeLinks
from mafka4.client.sender import new_producer_id
from mafka4.limits import LIST_OFFSETS_TIMEOUT_S, PROTOCOL_ANSWER_MARGIN_S, Acks
from mafka4.log.epochs import NO_EPOCH
from mafka4.protocol.connection import ClientConnection
from mafka4.protocol.error_codes import raised_error
from mafka4.protocol.vp_api import (VpFetchRequest, VpListOffsetsRequest, VpMetadataRequest, VpOffset,
                                    VpReadAnswer)
from mafka4.virtual.vp_state import VirtualPartitionState

PARK_S = 0.1  # after the readers' fetches are sent: each is parked in its long poll at the node
ANSWER_WAIT_S_MAX = 10.0  # for the first reader to have the message
FETCH_WAIT_MS_MAX = 3000  # a parked fetch's long poll; an empty answer is sent again
FETCH_BYTES_MAX = 1024 * 1024
PRODUCE_TIMEOUT_MS = 10_000
MESSAGE_BYTES = 1024
# What the calibration document records beside the trials' figures, so that they are not set
# beside figures of the Ray-call trials without saying so.
WAKE_TRIALS_OVER = ("client ports: acks=all PRODUCE at the leader's; a parked FETCH at the leader's (physical), "
                    "VP_FETCH at the read node's (VPs)")


class Reader(Protocol):
    """A consumer's fetch at one node, from the end of what it may read there."""

    async def move_to_end(self) -> None:
        """Read from the current high watermark(s) on."""

    async def poll(self) -> bool:
        """One long-polling fetch from the position; whether it brought data."""


def ack_to_reader_ms(acked_s: float, answered_s: float) -> float:
    """ms from the acknowledgement to the reader's answer, 0 when the reader was first (a leader
    wakes its waiting fetches and answers the produce on the same high-watermark advance)."""
    return round(max(answered_s - acked_s, 0.0) * 1000, 3)


def vp_answers_bring_data(answers: Sequence[VpReadAnswer]) -> bool:
    """Whether a ``VP_FETCH`` answer brought any VP data; the first VP's error is raised, and so is a
    diverging answer, which a reader that sends no epoch (``NO_EPOCH``) is never given."""
    for answer in answers:
        if answer.error is not None:
            raise raised_error(answer.error)
        assert answer.diverging is None, f"a VP answered diverging {answer.diverging} to a fetch without an epoch"
    return any(answer.data for answer in answers)


def vps_by_leader(states: Sequence[VirtualPartitionState]) -> dict[str, list[int]]:
    """The topic's readable VPs (not retired) grouped by the read node leading them, each list sorted."""
    grouped: dict[str, list[int]] = defaultdict(list)
    for state in sorted(states, key=lambda s: s.vp):
        if not state.retired:
            grouped[state.leader].append(state.vp)
    return dict(grouped)


class PartitionReader:
    """A Mafka3-mode consumer of one partition: ``FETCH`` at its leader's client port."""

    def __init__(self, leader: LeaderLink):
        self._leader, self._position = leader, 0

    async def move_to_end(self) -> None:
        self._position = (await self._leader.list_offsets()).high_watermark

    async def poll(self) -> bool:
        return bool((await self._leader.fetch(self._position, FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX)).data)


class VpNodeReader:
    """A Mafka4-mode consumer of VPs one read node leads: one ``VP_FETCH`` of them all at its client port."""

    def __init__(self, connection: ClientConnection, topic: str, vps: Sequence[int]):
        self._connection, self._topic, self._vps = connection, topic, tuple(vps)
        self._reads: tuple[VpOffset, ...] = ()

    async def move_to_end(self) -> None:
        answer, _ = await self._connection.call(VpListOffsetsRequest(self._topic, self._vps, None),
                                                timeout_s=LIST_OFFSETS_TIMEOUT_S)
        for offsets in answer.offsets:
            if offsets.error is not None:
                raise raised_error(offsets.error)
        self._reads = tuple(VpOffset(vp, offsets.high_watermark, NO_EPOCH)
                            for vp, offsets in zip(self._vps, answer.offsets))

    async def poll(self) -> bool:
        request = VpFetchRequest(self._topic, self._reads, FETCH_BYTES_MAX, FETCH_WAIT_MS_MAX)
        answer, _ = await self._connection.call(request, timeout_s=FETCH_WAIT_MS_MAX / 1000 + PROTOCOL_ANSWER_MARGIN_S)
        return vp_answers_bring_data(answer.answers)


async def partition_readers(links: NodeLinks, topic: str) -> list[Reader]:
    """The reader of partition 0 of ``topic`` at its leader."""
    return [PartitionReader(await _leader_of(links, topic))]


async def vp_readers(links: NodeLinks, topic: str) -> list[Reader]:
    """A reader per read node leading VPs of ``topic``, as any node's ``VP_METADATA`` names them."""
    answer = await links.ask_any(VpMetadataRequest(topic))
    addresses = {node.node_id: node.address for node in answer.nodes}
    states = [VirtualPartitionState.from_json(info.vp, json.loads(info.state_json)) for info in answer.vps]
    grouped = vps_by_leader(states)
    assert grouped, f"topic {topic!r} has no readable VP"
    missing = sorted(node for node in grouped if not addresses.get(node))
    assert not missing, f"read nodes {missing} leading VPs of {topic!r} serve no client port"
    return [VpNodeReader(await links.connection(addresses[node]), topic, vps) for node, vps in grouped.items()]


async def _leader_of(links: NodeLinks, topic: str) -> LeaderLink:
    routes = LeaderRoutes(links, topic)
    await routes.refresh()
    return await routes.leader(0)


async def _answered_at(reader: Reader) -> float:
    """Poll like a consumer until a fetch brings data; the ``perf_counter`` time it did."""
    while not await reader.poll():
        pass
    return time.perf_counter()


async def wake_trial(produce: Callable[[], Awaitable[object]], readers: Sequence[Reader]) -> float:
    """ms from the acknowledgement of ``produce()`` until the first of ``readers`` has the message."""
    for reader in readers:
        await reader.move_to_end()
    polls = [asyncio.ensure_future(_answered_at(reader)) for reader in readers]
    try:
        await asyncio.sleep(PARK_S)
        early = [poll for poll in polls if poll.done()]
        if early:
            early[0].result()  # a reader's error, if that ended it
            raise AssertionError("a reader had data before the produce: something else writes to the topic")
        await produce()
        acked = time.perf_counter()
        done, _ = await asyncio.wait(polls, timeout=ANSWER_WAIT_S_MAX, return_when=asyncio.FIRST_COMPLETED)
        assert done, f"no reader received the produced message within {ANSWER_WAIT_S_MAX} s"
        return ack_to_reader_ms(acked, min(poll.result() for poll in done))
    finally:
        for poll in polls:
            poll.cancel()  # its fetch, if still parked, is replaced by the next trial's (one per connection) or closed


def _one_message_batch() -> bytes:
    """1 KiB, keyless, from a fresh producer id: the leader never takes it for a retried batch."""
    return encode_batch([(None, os.urandom(MESSAGE_BYTES), time.time_ns() // 1_000_000, None)], new_producer_id(), 0)


ReaderOpener = Callable[[NodeLinks, str], Awaitable[list[Reader]]]


def ack_to_reader_trials(access: ClusterAccess, topic: str, open_readers: ReaderOpener, trials: int) -> list[float]:
    """``trials`` wake trials on ``topic`` (``open_readers``: ``partition_readers`` or ``vp_readers``),
    the producer and the readers each on connections of their own; every connection closed after."""

    async def run() -> list[float]:
        producer_links, reader_links = NodeLinks(access), NodeLinks(access)
        try:
            leader = await _leader_of(producer_links, topic)
            readers = await open_readers(reader_links, topic)

            async def produce() -> int:
                return await leader.produce(_one_message_batch(), Acks.ALL, PRODUCE_TIMEOUT_MS)

            return [await wake_trial(produce, readers) for _ in range(trials)]
        finally:
            await reader_links.close_after_cancelled()
            producer_links.close()

    return asyncio.run(run())
