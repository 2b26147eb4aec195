"""A read node's answers to the virtual partitions' APIs (``protocol.vp_api``).

``VP_METADATA`` is answered from the node's watched view; ``VP_FETCH`` and ``VP_LIST_OFFSETS``
by the VPs the node hosts (``ServedVps``: the read node's own coroutines, on its event loop), as
the nodes' streams answered them. Each VP's error travels in its own answer, so one VP that
moved does not fail the others of a fetch; so does a VP's "diverging" (the reader's last epoch
is not where the log has it: ``HostedVp.read``), and a read of a negative offset or of an epoch
below -1 refuses the fetch, naming the read. A connection has one ``VP_FETCH`` of a topic out: a
newer one replaces it (``frontend.fetch_sessions``). ``VP_FETCH`` needs ``consume`` on the topic; the
other two ``describe``.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from mafka4.errors import InvalidConfig, MafkaError, UnknownTopic
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.fetch_sessions import FetchSessions
from mafka4.limits import PROTOCOL_FETCH_BYTES_MAX, PROTOCOL_FETCH_WAIT_MS_MAX
from mafka4.log.epochs import NO_EPOCH
from mafka4.protocol.error_codes import error_answer
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import NodeInfo
from mafka4.protocol.session import Session
from mafka4.protocol.vp_api import (VpDiverging, VpFetchAnswer, VpFetchRequest, VpListOffsetsAnswer,
                                    VpListOffsetsRequest, VpMetadataAnswer, VpMetadataRequest, VpOffsetsAnswer,
                                    VpReadAnswer, VpStateInfo)
from mafka4.security.acl import Operation, ResourceType
from mafka4.virtual.consumer_reads import ConsumerAnswer, ConsumerRead
from mafka4.virtual.hosted_vp import VpId

Check = Callable[[Session, Operation, ResourceType, str], None]


class ServedVps(Protocol):
    """What a read node does for these requests (``virtual.read_node.ReadNode``'s own calls)."""

    async def fetch(self, reads: Sequence[ConsumerRead], bytes_max: int, wait_ms_max: int) -> list[ConsumerAnswer]: ...

    async def list_offsets(self, vp_ids: Sequence[VpId]) -> list[tuple[int, int] | MafkaError]: ...

    async def offsets_for_time(self, vp_ids: Sequence[VpId], timestamp_ms: int) -> list[int | None | MafkaError]: ...


class VpHandlers:
    def __init__(self, view: ClusterView, vps: ServedVps, check: Check):
        self._view, self._vps, self._check = view, vps, check
        self._fetches = FetchSessions()  # one VP_FETCH of a topic out per connection: a newer one replaces it

    def handlers(self) -> dict:
        return {ApiKey.VP_METADATA: self._metadata, ApiKey.VP_FETCH: self._fetch,
                ApiKey.VP_LIST_OFFSETS: self._list_offsets}

    async def _metadata(self, session: Session, request: VpMetadataRequest, _buffers) -> tuple[VpMetadataAnswer, tuple]:
        self._check(session, Operation.DESCRIBE, ResourceType.TOPIC, request.topic)
        def layout(state):
            return state.virtual_layout(request.topic), state.read_node_endpoints()

        found, nodes = self._view.read(layout)
        if found is None and await self._view.topics_caught_up((request.topic,)):  # created a moment ago?
            found, nodes = self._view.read(layout)
        if found is None:
            raise UnknownTopic(f"topic {request.topic!r} has no virtual-partition layout: it does not exist or is in "
                               f"mafka3 mode")
        epochs, states = found
        return VpMetadataAnswer(request.topic, tuple(epochs),
                                tuple(VpStateInfo(vp, state) for vp, state in sorted(states.items())),
                                tuple(NodeInfo(node.node_id, "read", node.client_address) for node in nodes)), ()

    async def _fetch(self, session: Session, request: VpFetchRequest, _buffers) -> tuple[VpFetchAnswer, tuple]:
        self._check(session, Operation.CONSUME, ResourceType.TOPIC, request.topic)
        if not 1 <= request.bytes_max <= PROTOCOL_FETCH_BYTES_MAX or not 0 <= request.wait_ms_max <= PROTOCOL_FETCH_WAIT_MS_MAX:
            raise InvalidConfig(f"a fetch of bytes_max={request.bytes_max}, wait_ms_max={request.wait_ms_max}: "
                                f"ask for 1 to {PROTOCOL_FETCH_BYTES_MAX} bytes and wait 0 to "
                                f"{PROTOCOL_FETCH_WAIT_MS_MAX} ms")
        for read in request.reads:
            if read.offset < 0 or read.last_epoch < NO_EPOCH:
                raise InvalidConfig(f"a fetch of {request.topic}/v{read.vp} at offset {read.offset} after leader epoch "
                                    f"{read.last_epoch}: the offset is at least 0, the epoch at least {NO_EPOCH} "
                                    f"({NO_EPOCH}: no record read yet)")
        reads = [ConsumerRead(VpId(request.topic, read.vp), read.offset, read.last_epoch) for read in request.reads]
        answers = await self._fetches.run(session.peer, request.topic,
                                          self._vps.fetch(reads, request.bytes_max, request.wait_ms_max))
        return VpFetchAnswer(tuple(
            VpReadAnswer(b"", 0, 0, 0, error_answer(answer.error), None) if answer.error is not None
            else VpReadAnswer(answer.read.data, answer.read.high_watermark, answer.read.log_start_offset,
                              answer.read.log_end_offset, None,
                              None if answer.read.diverging is None else VpDiverging(*answer.read.diverging))
            for answer in answers)), ()

    async def _list_offsets(self, session: Session, request: VpListOffsetsRequest,
                            _buffers) -> tuple[VpListOffsetsAnswer, tuple]:
        self._check(session, Operation.DESCRIBE, ResourceType.TOPIC, request.topic)
        vp_ids = [VpId(request.topic, vp) for vp in request.vps]
        ranges = await self._vps.list_offsets(vp_ids)
        stamped = (await self._vps.offsets_for_time(vp_ids, request.timestamp_ms) if request.timestamp_ms is not None
                   else [None] * len(vp_ids))
        offsets = []
        for found, at_time in zip(ranges, stamped):
            error = found if isinstance(found, MafkaError) else at_time if isinstance(at_time, MafkaError) else None
            if error is not None:
                offsets.append(VpOffsetsAnswer(0, 0, None, error_answer(error)))
            else:
                offsets.append(VpOffsetsAnswer(found[0], found[1], at_time, None))
        return VpListOffsetsAnswer(tuple(offsets)), ()
