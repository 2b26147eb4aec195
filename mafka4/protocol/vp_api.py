"""The virtual partitions' APIs, served by read nodes: VP_METADATA, VP_FETCH and VP_LIST_OFFSETS.

A consumer of a mafka4-mode topic reads its VPs from the read nodes that host them, as it did over
the nodes' streams, now through their client ports:

- ``VP_METADATA``: the topic's split epochs and every VP's state (its leader, RISR, sealed end),
  as the JSON etcd holds (the client parses them in order with ``vp_state.epochs_from_json`` and
  ``VirtualPartitionState.from_json``, so a field added later needs no new message), and the read
  nodes' client addresses. Answered from the node's watched view.
- ``VP_FETCH``: whole batches of several VPs hosted by this node, below each VP's high
  watermark, each VP's answer its data (out of band) or its error; a long poll, answered as
  soon as any VP has data or after ``wait_ms_max``. Each read names, beside its offset, the
  leader epoch of the last record the reader read before it (``NO_EPOCH``, -1: none known);
  a replica whose log does not hold that history answers ``diverging`` instead of data, the
  ``(epoch, end offset)`` the reader moves back to (Kafka's KIP-320; protocol version 2).
- ``VP_LIST_OFFSETS``: per VP, its log start offset and high watermark, and with
  ``timestamp_ms`` its first offset stamped at or after it; or the error that keeps this
  replica from answering.

Pure: message types.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.protocol.messages import ApiKey, Buffer, ErrorAnswer, register
from mafka4.protocol.metadata_api import NodeInfo


@dataclass(frozen=True, slots=True)
class VpMetadataRequest:
    topic: str


@dataclass(frozen=True, slots=True)
class VpStateInfo:
    vp: int
    state_json: str


@dataclass(frozen=True, slots=True)
class VpMetadataAnswer:
    topic: str
    split_epochs_json: tuple[str, ...]
    vps: tuple[VpStateInfo, ...]
    nodes: tuple[NodeInfo, ...]


@dataclass(frozen=True, slots=True)
class VpOffset:
    vp: int
    offset: int
    last_epoch: int  # of the last record read before ``offset``; -1 (``NO_EPOCH``): none known


@dataclass(frozen=True, slots=True)
class VpDiverging:
    """The reader's history is not a prefix of the replica's log: it read ``epoch`` up to ``end_offset`` at most."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class VpFetchRequest:
    topic: str
    reads: tuple[VpOffset, ...]
    bytes_max: int
    wait_ms_max: int


@dataclass(frozen=True, slots=True)
class VpReadAnswer:
    """One VP's part of a fetch: its batches and offsets, or (``error`` or ``diverging`` set, ``data``
    empty) why not."""

    data: Buffer
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    error: ErrorAnswer | None
    diverging: VpDiverging | None


@dataclass(frozen=True, slots=True)
class VpFetchAnswer:
    answers: tuple[VpReadAnswer, ...]  # one per read, in the request's order


@dataclass(frozen=True, slots=True)
class VpListOffsetsRequest:
    topic: str
    vps: tuple[int, ...]
    timestamp_ms: int | None


@dataclass(frozen=True, slots=True)
class VpOffsetsAnswer:
    log_start_offset: int
    high_watermark: int
    timestamp_offset: int | None
    error: ErrorAnswer | None


@dataclass(frozen=True, slots=True)
class VpListOffsetsAnswer:
    offsets: tuple[VpOffsetsAnswer, ...]  # one per VP, in the request's order


register(ApiKey.VP_METADATA, VpMetadataRequest, VpMetadataAnswer)
register(ApiKey.VP_FETCH, VpFetchRequest, VpFetchAnswer)
register(ApiKey.VP_LIST_OFFSETS, VpListOffsetsRequest, VpListOffsetsAnswer)
