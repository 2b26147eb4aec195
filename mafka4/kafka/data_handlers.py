"""The Kafka listener's answers to METADATA, PRODUCE, FETCH and LIST_OFFSETS, on a read node.

Each handler takes the ``Session`` (who asked) and the decoded request (a ``kio`` message of the
version the client sent) and returns the answer as a version-agnostic description, which the
listener shapes to that version (``kafka.shapes``). What Kafka clients see of the cluster is
``kafka.topology``'s. Every request is checked against the ACLs as on the client port:
``produce`` on the topic for PRODUCE, ``consume`` for FETCH, ``describe`` for METADATA and
LIST_OFFSETS; a refusal is that partition's (or topic's) ``TOPIC_AUTHORIZATION_FAILED``.

- **PRODUCE**: the records of every partition of the request are routed again by key over the
  topic's physical partitions (``kafka.produce_routing``), encoded as mafka4 batches and appended
  at each physical leader with the request's acks (-1: all in-sync replicas, 1: the leader, 0:
  the client is not answered, as Kafka does). A Kafka partition's answer is its first failure, or
  the base offset of its first physical batch (an offset in a physical partition, not in the VP
  the client named: a Kafka client only logs it). A non-idempotent producer's retry after a lost
  answer appends again (at least once, as on Kafka).
- **Idempotent PRODUCE** (a batch with a producer id, from ``InitProducerId``,
  ``kafka.producer_handlers``): the batch goes through the listener's ``ProducerSessions``
  before anything is appended: a retry of a remembered batch is answered its first base offset
  and appended nothing, a gap is OUT_OF_ORDER_SEQUENCE_NUMBER, an older epoch
  INVALID_PRODUCER_EPOCH. One entry's admission, append and recording run one at a time (a
  connection's requests are served one at a time; a lock per entry covers a client retrying on
  another connection while the first append runs), which keeps its sequences in order. Its
  records are routed by key over the physical partitions like any others. The guarantee:
  **exactly once per (producer, Kafka partition) while the same read node serves that partition
  and remembers the producer**. A retry after the partition's Kafka leader (a read node)
  changed, after the node restarted, or after the node forgot the producer
  (``KAFKA_PRODUCER_SESSIONS_MAX``) meets no state and is appended again, as a Kafka broker
  without a producer's state does (``producer_sessions``: UNKNOWN): at least once across that.
  So is a retry of a batch whose append failed at one of its physical partitions after others
  took their share (the share that went in goes in twice). A Kafka partition's leadership is
  its term: the VP's leader epoch, or for a partition forwarded by number the set of live
  brokers, whose change may move it; an entry of an earlier term is dropped.
- **FETCH** of a Mafka4-mode topic reads the VPs this node hosts, long-polling until one has
  records (``ReadNode.fetch``); a VP led elsewhere is ``NOT_LEADER_OR_FOLLOWER``, so the client
  refreshes its metadata. A retired VP answers empty at its sealed end. A Mafka3-mode topic's
  partitions are read at their physical leaders. Batches are re-encoded in Kafka's record-batch
  format with their own offsets (``kafka.record_batches``).
- **LIST_OFFSETS**: -2 (earliest) is the log start offset, -1 (latest) the high watermark, a
  timestamp the first offset at or after it (the high watermark where there is none).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import logging
import zlib
from dataclasses import dataclass
from typing import Protocol, Sequence

from mafka4.batch_payload import encode_batch
from mafka4.errors import MafkaError, UnknownTopic, UnknownVirtualPartition
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.port_security import PortSecurity
from mafka4.frontend.view_state import ViewState
from mafka4.kafka import error_codes, topology
from mafka4.kafka.error_codes import kafka_error_code, kafka_error_message
from mafka4.kafka.produce_routing import ProduceRouting
from mafka4.kafka.producer_sessions import Decision, ProducerSessions
from mafka4.kafka.record_batches import (NO_PRODUCER_ID, KafkaBatch, kafka_records_as_mafka4, mafka4_to_kafka,
                                         read_kafka_batches)
from mafka4.limits import KAFKA_PRODUCER_SESSIONS_MAX, PROTOCOL_FETCH_BYTES_MAX, PROTOCOL_FETCH_WAIT_MS_MAX, Acks
from mafka4.physical.topics import TopicMetadata
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType
from mafka4.virtual.consumer_reads import ConsumerAnswer, ConsumerRead
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.vp_state import VirtualPartitionState

logger = logging.getLogger(__name__)

EARLIEST, LATEST = -2, -1  # LIST_OFFSETS' special timestamps
_ACKS = {-1: Acks.ALL, 0: Acks.NONE, 1: Acks.LEADER}
_RECORDS_PER_REQUEST_MAX = 1_000_000  # a produce request's records, decompressed: bounds the decode


class KafkaServedData(Protocol):
    """What the listener's read node does for its data requests: its hosted VPs' reads, and calls
    to the physical leaders (the node's own coroutines, on its event loop)."""

    async def fetch(self, reads: Sequence[ConsumerRead], bytes_max: int, wait_ms_max: int) -> list[ConsumerAnswer]: ...

    async def list_offsets(self, vp_ids: Sequence[VpId]) -> list[tuple[int, int] | MafkaError]: ...

    async def offsets_for_time(self, vp_ids: Sequence[VpId], timestamp_ms: int) -> list[int | None | MafkaError]: ...

    async def physical_call(self, topic: str, partition: int, leader: str, method: str, *args): ...


@dataclass(frozen=True, slots=True)
class _Topic:
    metadata: TopicMetadata
    vps: dict[int, VirtualPartitionState] | None  # None: a Mafka3-mode topic


class KafkaDataHandlers:
    def __init__(self, view: ClusterView, security: PortSecurity, data: KafkaServedData, node_id: str, cluster: str,
                 sessions: ProducerSessions | None = None):
        self._view, self._security, self._data = view, security, data
        self._node_id, self._cluster = node_id, cluster
        self._routing = ProduceRouting()
        self.sessions = ProducerSessions(KAFKA_PRODUCER_SESSIONS_MAX) if sessions is None else sessions
        # (producer id, topic, partition) -> [lock, requests holding or awaiting it]; an entry
        # lives while a request of its producer and partition does.
        self._entry_locks: dict[tuple[int, str, int], list] = {}

    def handlers(self) -> dict:
        return {3: self.metadata, 0: self.produce, 1: self.fetch, 2: self.list_offsets}

    # --- the view --------------------------------------------------------------------------

    def _brokers(self, state: ViewState) -> list[topology.KafkaBroker]:
        listeners = [(node_id, value.get("kafka")) for node_id, value in state.read_nodes.items()]
        found, clashing = topology.brokers(listeners)
        if clashing:
            logger.warning("read nodes %s have the Kafka broker id of another read node: Kafka clients do not see "
                           "them (rename one of each pair)", clashing)
        return found

    def _topic(self, state: ViewState, name: str) -> _Topic | None:
        metadata = state.topic(name)
        if metadata is None:
            return None
        layout = state.virtual_layout(name)
        if layout is None:
            return _Topic(metadata, None)
        vps = {vp: VirtualPartitionState.from_json(vp, json.loads(text)) for vp, text in layout[1].items() if text}
        return _Topic(metadata, vps)

    def _read(self, names: Sequence[str] | None):
        def read(state: ViewState):
            brokers = self._brokers(state)
            wanted = state.topic_names() if names is None else names
            return brokers, {name: self._topic(state, name) for name in wanted}
        return self._view.read(read)

    # --- METADATA --------------------------------------------------------------------------

    async def metadata(self, session: Session, request) -> dict:
        names = None if request.topics is None else [topic.name for topic in request.topics]
        brokers, topics = self._read(names)
        if names is not None and any(topic is None for topic in topics.values()):
            if await self._view.topics_caught_up(names):  # created a moment ago?
                brokers, topics = self._read(names)
        live = {broker.read_node: broker.node_id for broker in brokers}
        table = self._security.acl_table()
        described = []
        for name, topic in topics.items():
            if not table.allows(session.principal, Operation.DESCRIBE, ResourceType.TOPIC, name):
                if names is not None:
                    described.append({"name": name, "error_code": error_codes.TOPIC_AUTHORIZATION_FAILED})
                continue
            if topic is None:
                described.append({"name": name, "error_code": error_codes.UNKNOWN_TOPIC_OR_PARTITION})
                continue
            partitions = (topology.physical_partitions(len(topic.metadata.partitions), live) if topic.vps is None
                          else topology.vp_partitions(topic.vps, live))
            described.append({"name": name, "error_code": error_codes.NONE, "partitions": [
                {"error_code": p.error_code, "partition_index": p.index, "leader_id": p.leader,
                 "leader_epoch": p.leader_epoch, "replica_nodes": p.replicas, "isr_nodes": p.isr}
                for p in partitions]})
        own = topology.broker_id(self._node_id)
        return {"throttle_time": datetime.timedelta(0), "cluster_id": self._cluster,
                "controller_id": own if own in live.values() else (brokers[0].node_id if brokers else -1),
                "brokers": [{"node_id": b.node_id, "host": b.host, "port": b.port} for b in brokers],
                "topics": described}

    # --- PRODUCE ---------------------------------------------------------------------------

    async def produce(self, session: Session, request) -> dict | None:
        acks = _ACKS.get(request.acks)
        timeout_ms = max(1, int(request.timeout.total_seconds() * 1000))
        answers = []
        for topic_data in request.topic_data:
            partitions = [self._produce_partition(session, topic_data.name, data.index, data.records, acks, timeout_ms)
                          for data in topic_data.partition_data]
            answers.append((topic_data.name, await asyncio.gather(*partitions)))
        if acks is Acks.NONE:
            return None
        return {"throttle_time": datetime.timedelta(0), "responses": [
            {"name": name, "partition_responses": partitions} for name, partitions in answers]}

    async def _produce_partition(self, session: Session, topic: str, index: int, records: bytes | None,
                                 acks: Acks | None, timeout_ms: int) -> dict:
        try:
            if acks is None:
                return _partition_error(index, error_codes.INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1")
            self._security.check(session, Operation.PRODUCE, ResourceType.TOPIC, topic)
            metadata, term = self._view.read(lambda state: self._produce_target(state, topic, index))
            if metadata is None:
                raise UnknownTopic(f"topic {topic!r} does not exist: create it first ('mafka4 topic create {topic}' "
                                   f"or a CreateTopics request); topics are not created by producing to them")
            batches = read_kafka_batches(records or b"", _RECORDS_PER_REQUEST_MAX)
            kafka_records = _as_mafka4_records(batches)
            if any(batch.producer_id != NO_PRODUCER_ID for batch in batches):
                if len(batches) != 1:
                    return _partition_error(index, error_codes.INVALID_RECORD, (
                        f"an idempotent producer's request carries one record batch per partition, not "
                        f"{len(batches)} (as Kafka requires from Produce v3)"))
                return await self._produce_idempotent(topic, index, term, metadata, batches[0], kafka_records, acks,
                                                      timeout_ms)
            if not kafka_records:
                return {"index": index, "error_code": error_codes.NONE, "base_offset": -1}
            base_offset = await self._append_records(metadata, kafka_records, acks, timeout_ms)
            return {"index": index, "error_code": error_codes.NONE, "base_offset": base_offset,
                    "log_start_offset": -1}
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return _partition_error(index, kafka_error_code(error), kafka_error_message(error), error)

    def _produce_target(self, state: ViewState, topic: str, index: int) -> tuple[TopicMetadata | None, int]:
        """The topic's metadata and the term of Kafka partition ``index``'s leadership (see the
        module docstring): the VP's leader epoch, or a number of the live brokers' ids."""
        metadata = state.topic(topic)
        if metadata is None:
            return None, 0
        layout = state.virtual_layout(topic)
        text = None if layout is None else layout[1].get(index)
        if text:
            vp = VirtualPartitionState.from_json(index, json.loads(text))
            if not vp.retired:
                return metadata, vp.leader_epoch
        listeners = [(node_id, value.get("kafka")) for node_id, value in state.read_nodes.items()]
        live = sorted(broker.node_id for broker in topology.brokers(listeners)[0])
        return metadata, zlib.crc32(repr(live).encode())

    async def _produce_idempotent(self, topic: str, index: int, term: int, metadata: TopicMetadata,
                                  batch: KafkaBatch, kafka_records: list, acks: Acks, timeout_ms: int) -> dict:
        """Admit ``batch`` through the producer sessions, append it if it is new, remember it."""
        producer = (batch.producer_id, batch.producer_epoch, topic, index, batch.base_sequence, len(batch.records))
        async with self._entry_lock(batch.producer_id, topic, index):
            admission = self.sessions.admit(*producer, term=term)
            if admission.decision is Decision.DUPLICATE:
                return {"index": index, "error_code": error_codes.NONE, "base_offset": admission.base_offset,
                        "log_start_offset": -1}
            if admission.decision is Decision.OUT_OF_ORDER:
                return _partition_error(index, error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER, admission.reason)
            if admission.decision is Decision.FENCED:
                return _partition_error(index, error_codes.INVALID_PRODUCER_EPOCH, admission.reason)
            if admission.decision is Decision.UNKNOWN:
                logger.info("%s", admission.reason)
            base_offset = await self._append_records(metadata, kafka_records, acks, timeout_ms)
            self.sessions.recorded(*producer, base_offset, term=term)
        return {"index": index, "error_code": error_codes.NONE, "base_offset": base_offset, "log_start_offset": -1}

    @contextlib.asynccontextmanager
    async def _entry_lock(self, producer_id: int, topic: str, index: int):
        key = (producer_id, topic, index)
        held = self._entry_locks.get(key)
        if held is None:
            held = self._entry_locks[key] = [asyncio.Lock(), 0]
        held[1] += 1
        try:
            async with held[0]:
                yield
        finally:
            held[1] -= 1
            if not held[1]:
                del self._entry_locks[key]

    async def _append_records(self, metadata: TopicMetadata, kafka_records: list, acks: Acks, timeout_ms: int) -> int:
        """Route the records by key over the physical partitions and append them there; the base
        offset of the first physical batch (-1 when nothing is answered: acks 0)."""
        routed = self._routing.route(kafka_records, len(metadata.partitions))
        appends = [self._append(metadata, partition, routed_records, acks, timeout_ms)
                   for partition, routed_records in sorted(routed.items())]
        base_offsets = await asyncio.gather(*appends)
        return base_offsets[0] if isinstance(base_offsets[0], int) else -1

    async def _append(self, metadata: TopicMetadata, partition: int, records: list, acks: Acks, timeout_ms: int) -> int:
        leader = metadata.partitions[partition].leader
        batch = encode_batch(records)
        return await self._data.physical_call(metadata.name, partition, leader, "produce", batch, acks, timeout_ms)

    # --- FETCH -----------------------------------------------------------------------------

    async def fetch(self, session: Session, request) -> dict:
        wait_ms = min(max(0, int(request.max_wait.total_seconds() * 1000)), PROTOCOL_FETCH_WAIT_MS_MAX)
        bytes_max = min(max(1, getattr(request, "max_bytes", PROTOCOL_FETCH_BYTES_MAX)), PROTOCOL_FETCH_BYTES_MAX)
        names = [topic.topic for topic in request.topics]
        _, topics = self._read(names)
        vp_reads, physical_reads, answers = [], [], {}
        for fetched in request.topics:
            name = fetched.topic
            topic = topics.get(name)
            for partition in fetched.partitions:
                key = (name, partition.partition)
                try:
                    self._security.check(session, Operation.CONSUME, ResourceType.TOPIC, name)
                    if topic is None:
                        raise UnknownTopic(f"topic {name!r} does not exist")
                    answers[key] = self._plan_read(topic, partition.partition, partition.fetch_offset,
                                                   vp_reads, physical_reads)
                except MafkaError as error:
                    answers[key] = _fetch_error(partition.partition, error)
        # One long poll: a fetch of both kinds looks at its physical partitions first, without waiting,
        # then long-polls its VPs unless a physical partition had records (never a loop of empty answers).
        physical_has_records = False
        if physical_reads:
            results = await asyncio.gather(*(self._physical_fetch(topic, partition, offset, bytes_max,
                                                                  0 if vp_reads else wait_ms)
                                             for topic, partition, offset in physical_reads))
            for (topic, partition, _), answer in zip(physical_reads, results):
                answers[(topic.metadata.name, partition)] = answer
                physical_has_records = physical_has_records or bool(answer["records"])
        if vp_reads:
            reads = [ConsumerRead(VpId(name, vp), offset, -1) for name, vp, offset in vp_reads]
            found = await self._data.fetch(reads, bytes_max, 0 if physical_has_records else wait_ms)
            for (name, vp, _), answer in zip(vp_reads, found):
                answers[(name, vp)] = _vp_answer(vp, answer)
        return {"throttle_time": datetime.timedelta(0), "error_code": error_codes.NONE, "session_id": 0,
                "responses": [{"topic": fetched.topic, "partitions": [answers[(fetched.topic, p.partition)]
                                                                     for p in fetched.partitions]}
                              for fetched in request.topics]}

    def _plan_read(self, topic: _Topic, partition: int, offset: int, vp_reads: list, physical_reads: list) -> dict | None:
        name = topic.metadata.name
        if topic.vps is None:
            if not 0 <= partition < len(topic.metadata.partitions):
                raise UnknownTopic(f"topic {name!r} has partitions 0..{len(topic.metadata.partitions) - 1}")
            physical_reads.append((topic, partition, offset))
            return None
        state = topic.vps.get(partition)
        if state is None and partition > max(topic.vps, default=-1):
            raise UnknownVirtualPartition(f"topic {name!r} has no VP v{partition}")
        if state is None or state.retired:
            end = 0 if state is None else state.sealed_end_offset
            if offset > end:
                return _fetch_error(partition, None, error_codes.OFFSET_OUT_OF_RANGE, end, end)
            return _empty(partition, end, end)
        vp_reads.append((name, partition, offset))
        return None

    async def _physical_fetch(self, topic: _Topic, partition: int, offset: int, bytes_max: int, wait_ms: int) -> dict:
        try:
            leader = topic.metadata.partitions[partition].leader
            result = await self._data.physical_call(topic.metadata.name, partition, leader, "fetch", offset,
                                                    bytes_max, wait_ms)
            if not result.log_start_offset <= offset <= result.high_watermark:
                return _fetch_error(partition, None, error_codes.OFFSET_OUT_OF_RANGE, result.high_watermark,
                                    result.log_start_offset)
            return {"partition_index": partition, "error_code": error_codes.NONE,
                    "high_watermark": result.high_watermark, "last_stable_offset": result.high_watermark,
                    "log_start_offset": result.log_start_offset, "records": mafka4_to_kafka(result.data)}
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return _fetch_error(partition, error)

    # --- LIST_OFFSETS ----------------------------------------------------------------------

    async def list_offsets(self, session: Session, request) -> dict:
        names = [topic.name for topic in request.topics]
        _, topics = self._read(names)
        answered = []
        for listed in request.topics:
            partitions = []
            for partition in listed.partitions:
                try:
                    self._security.check(session, Operation.DESCRIBE, ResourceType.TOPIC, listed.name)
                    topic = topics.get(listed.name)
                    if topic is None:
                        raise UnknownTopic(f"topic {listed.name!r} does not exist")
                    offset = await self._offset(topic, partition.partition_index, partition.timestamp)
                    partitions.append({"partition_index": partition.partition_index, "error_code": error_codes.NONE,
                                       "timestamp": -1, "offset": offset, "old_style_offsets": (offset,)})
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    partitions.append({"partition_index": partition.partition_index,
                                       "error_code": kafka_error_code(error), "timestamp": -1, "offset": -1})
            answered.append({"name": listed.name, "partitions": partitions})
        return {"throttle_time": datetime.timedelta(0), "topics": answered}

    async def _offset(self, topic: _Topic, partition: int, timestamp: int) -> int:
        name = topic.metadata.name
        if topic.vps is None:
            if not 0 <= partition < len(topic.metadata.partitions):
                raise UnknownTopic(f"topic {name!r} has partitions 0..{len(topic.metadata.partitions) - 1}")
            leader = topic.metadata.partitions[partition].leader
            start, high_watermark = await self._data.physical_call(name, partition, leader, "list_offsets")
            if timestamp in (EARLIEST, LATEST):
                return start if timestamp == EARLIEST else high_watermark
            found = await self._data.physical_call(name, partition, leader, "offset_for_timestamp", timestamp)
            return high_watermark if found is None else found
        state = topic.vps.get(partition)
        if state is None or state.retired:
            if state is None and partition > max(topic.vps, default=-1):
                raise UnknownVirtualPartition(f"topic {name!r} has no VP v{partition}")
            return 0 if state is None else state.sealed_end_offset
        (found,) = await self._data.list_offsets([VpId(name, partition)])
        if isinstance(found, MafkaError):
            raise found
        start, high_watermark = found
        if timestamp in (EARLIEST, LATEST):
            return start if timestamp == EARLIEST else high_watermark
        (at_time,) = await self._data.offsets_for_time([VpId(name, partition)], timestamp)
        if isinstance(at_time, MafkaError):
            raise at_time
        return high_watermark if at_time is None else at_time


def _as_mafka4_records(batches: list[KafkaBatch]) -> list:
    """The batches' records as ``produce_routing`` routes them: (key, value, timestamp_ms, headers)."""
    kafka_records = []
    for batch in batches:
        first_timestamp_ms, arrays = kafka_records_as_mafka4(batch)
        kafka_records.extend((key, value, first_timestamp_ms + delta, headers) for delta, key, value, headers in arrays)
    return kafka_records


def _partition_error(index: int, code: int, message: str, error: BaseException | None = None) -> dict:
    if code == error_codes.UNKNOWN_SERVER_ERROR and error is not None:
        logger.warning("a Kafka produce failed: %s", message, exc_info=error)
    return {"index": index, "error_code": code, "base_offset": -1, "error_message": message}


def _fetch_error(partition: int, error: BaseException | None, code: int | None = None, high_watermark: int = -1,
                 log_start_offset: int = -1) -> dict:
    if code is None:
        code = kafka_error_code(error)
        if code == error_codes.UNKNOWN_SERVER_ERROR:
            logger.warning("a Kafka fetch failed: %s", kafka_error_message(error), exc_info=error)
    return {"partition_index": partition, "error_code": code, "high_watermark": high_watermark,
            "last_stable_offset": high_watermark, "log_start_offset": log_start_offset, "records": None}


def _empty(partition: int, high_watermark: int, log_start_offset: int) -> dict:
    return {"partition_index": partition, "error_code": error_codes.NONE, "high_watermark": high_watermark,
            "last_stable_offset": high_watermark, "log_start_offset": log_start_offset, "records": b""}


def _vp_answer(vp: int, answer: ConsumerAnswer) -> dict:
    if answer.error is not None:
        return _fetch_error(vp, answer.error)
    read = answer.read
    return {"partition_index": vp, "error_code": error_codes.NONE, "high_watermark": read.high_watermark,
            "last_stable_offset": read.high_watermark, "log_start_offset": read.log_start_offset,
            "records": mafka4_to_kafka(read.data)}
