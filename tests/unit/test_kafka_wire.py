"""Kafka request and response frames (``mafka4.kafka.wire``), checked against an independent
implementation: requests are encoded by kafka-python's own protocol classes, the way its client
sends them, and responses are decoded by kafka-python's response classes."""

from __future__ import annotations

import datetime
import pickle
import struct
import subprocess
import sys
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader
from kio.schema.fetch.v12 import response as fetch_v12
from kio.schema.metadata.v12 import response as metadata_v12

from mafka4.batch_frame import stamp
from mafka4.batch_payload import encode_batch
from mafka4.errors import KafkaWireError
from mafka4.kafka.array_bounds import check_arrays
from mafka4.kafka.record_batches import mafka4_to_kafka
from mafka4.kafka.wire import (INVALID_REQUEST, UNSUPPORTED_VERSION, KafkaRequest, api_versions_body, encode_response,
                               error_response, frame_size, read_request)
from mafka4.limits import KAFKA_ARRAY_ITEMS_MAX, KAFKA_FRAME_BYTES_MAX, KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX

SERVED = {0: (3, 9), 1: (4, 12), 3: (0, 12), 18: (0, 3)}
# Every version kio knows of the APIs issue 39 asks a node to serve: what the fuzzing reads.
ISSUE_APIS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 17, 18, 19, 20, 36)
ALL_VERSIONS = {key: (min(schema_name_map[api_key_map[key]]), max(schema_name_map[api_key_map[key]]))
                for key in ISSUE_APIS}


def sent(request, correlation_id: int = 7, client_id: str | None = "mafka4-test") -> bytes:
    """``request`` as kafka-python's client puts it on the wire (``KafkaProtocol.send_request``)."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(framed=True, header=True))


def received(frame: bytes) -> KafkaRequest:
    """What the listener does with a frame: its size checked, the rest read."""
    assert frame_size(frame[:4], KAFKA_FRAME_BYTES_MAX) == len(frame) - 4
    return read_request(frame[4:], SERVED)


def produce_records() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(3):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i, headers=[])
    return bytes(builder.build())


def test_frame_sizes_outside_one_to_the_bound_are_refused():
    assert frame_size(struct.pack(">i", 1), 10) == 1
    assert frame_size(struct.pack(">i", KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX), KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX)
    for size in (0, -1, -2**31, KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX + 1):
        with pytest.raises(KafkaWireError, match=f"announces {size} bytes") as refused:
            frame_size(struct.pack(">i", size), KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX)
        assert refused.value.correlation_id is None


@pytest.mark.parametrize("version", [0, 4, 9, 12])
def test_metadata_requests_of_kafka_python_parse_with_their_header(version):
    topics = [MetadataRequest[version].MetadataRequestTopic(name="orders")] if version < 10 else [
        MetadataRequest[version].MetadataRequestTopic(name="orders", topic_id=uuid.UUID(int=0))]
    fields = {"topics": topics}
    if version >= 4:
        fields["allow_auto_topic_creation"] = False
    if 8 <= version <= 10:
        fields["include_cluster_authorized_operations"] = False
    if version >= 8:
        fields["include_topic_authorized_operations"] = False
    request = received(sent(MetadataRequest[version](**fields), correlation_id=41))
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (3, version, 41,
                                                                                                "mafka4-test")
    assert [topic.name for topic in request.body.topics] == ["orders"]


@pytest.mark.parametrize("version", [0, 3])
def test_api_versions_requests_parse_and_a_null_client_id_stays_null(version):
    fields = {"client_software_name": "kafka-python", "client_software_version": "3.0"} if version >= 3 else {}
    request = received(sent(ApiVersionsRequest[version](**fields), correlation_id=2**31 - 1, client_id=None))
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (18, version,
                                                                                                2**31 - 1, None)
    if version >= 3:
        assert request.body.client_software_name == "kafka-python"


@pytest.mark.parametrize("version", [3, 9])
def test_produce_requests_carry_their_record_batches_byte_for_byte(version):
    records = produce_records()
    cls = ProduceRequest[version]
    request = received(sent(cls(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        cls.TopicProduceData(name="orders", partition_data=[
            cls.TopicProduceData.PartitionProduceData(index=2, records=records)])])))
    (topic,) = request.body.topic_data
    (partition,) = topic.partition_data
    assert (request.body.acks, topic.name, partition.index, partition.records) == (-1, "orders", 2, records)


@pytest.mark.parametrize("version", [4, 12])
def test_fetch_requests_parse(version):
    cls = FetchRequest[version]
    partition = {"partition": 1, "fetch_offset": 1234, "partition_max_bytes": 1 << 20}
    if version >= 5:
        partition["log_start_offset"] = -1
    if version >= 9:
        partition["current_leader_epoch"] = 3
    if version >= 12:
        partition["last_fetched_epoch"] = -1
    fields = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": 0,
              "topics": [cls.FetchTopic(topic="orders", partitions=[cls.FetchTopic.FetchPartition(**partition)])]}
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
    if version >= 11:
        fields["rack_id"] = ""
    request = received(sent(cls(**fields)))
    (topic,) = request.body.topics
    assert (topic.topic, topic.partitions[0].partition, topic.partitions[0].fetch_offset) == ("orders", 1, 1234)


def test_a_metadata_response_with_the_flexible_header_parses_in_kafka_python():
    request = received(sent(MetadataRequest[12](topics=None, allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False), correlation_id=99))
    body = metadata_v12.MetadataResponse(
        throttle_time=datetime.timedelta(0),
        brokers=(metadata_v12.MetadataResponseBroker(node_id=1, host="node-1", port=9092, rack=None),),
        cluster_id="mafka4", controller_id=1,
        topics=(metadata_v12.MetadataResponseTopic(
            error_code=ErrorCode.none, name="orders", topic_id=uuid.UUID(int=5), is_internal=False,
            partitions=(metadata_v12.MetadataResponsePartition(
                error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=4, replica_nodes=(1,),
                isr_nodes=(1,), offline_replicas=()),)),))
    frame = encode_response(request, body)
    assert struct.unpack_from(">ii", frame) == (len(frame) - 4, 99)
    decoded = MetadataResponse[12].decode(frame, header=True, framed=True)
    assert decoded._header.correlation_id == 99
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(1, "node-1", 9092)]
    (topic,) = decoded.topics
    assert (topic.name, topic.partitions[0].leader_id, topic.partitions[0].leader_epoch) == ("orders", 1, 4)


def test_a_fetch_response_carries_converted_batches_that_kafka_python_reads():
    records = [(b"k%d" % i, b"v%d" % i, 1_700_000_000_000 + i, [("trace", b"t%d" % i)]) for i in range(4)]
    stored = bytearray(encode_batch(records))
    stamp(stored, 500, 2)
    request = received(sent(FetchRequest[12](
        replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[FetchRequest[12].FetchTopic(
            topic="orders", partitions=[FetchRequest[12].FetchTopic.FetchPartition(
                partition=0, current_leader_epoch=2, fetch_offset=500, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20)])])))
    body = fetch_v12.FetchResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                                   responses=(fetch_v12.FetchableTopicResponse(topic="orders", partitions=(
                                       fetch_v12.PartitionData(partition_index=0, error_code=ErrorCode.none,
                                                               high_watermark=504, last_stable_offset=504,
                                                               log_start_offset=0, aborted_transactions=None,
                                                               records=mafka4_to_kafka(bytes(stored))),)),))
    decoded = FetchResponse[12].decode(encode_response(request, body), header=True, framed=True)
    (partition,) = decoded.responses[0].partitions
    assert partition.high_watermark == 504
    batch = MemoryRecords(bytes(partition.records)).next_batch()
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in batch] == [
        (500 + i, key, value, timestamp, [tuple(pair) for pair in headers])
        for i, (key, value, timestamp, headers) in enumerate(records)]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_answers_list_what_is_served_behind_header_v0(version):
    request = received(sent(ApiVersionsRequest[version](**({"client_software_name": "x", "client_software_version": "1"}
                                                            if version >= 3 else {})), correlation_id=5))
    frame = encode_response(request, api_versions_body(SERVED, version))
    # KIP-511: header v0 whatever the version, so the body follows the correlation id at once.
    assert frame[8:10] == b"\x00\x00"
    decoded = ApiVersionsResponse[version].decode(frame, header=True, framed=True)
    assert decoded.error_code == 0
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [
        (key, low, high) for key, (low, high) in sorted(SERVED.items())]


def test_api_versions_at_an_unserved_version_gets_a_v0_answer_that_lets_the_client_downgrade():
    frame = bytearray(sent(ApiVersionsRequest[4](client_software_name="x", client_software_version="1"),
                           correlation_id=12))
    struct.pack_into(">h", frame, 6, 5)  # version 5: newer than any this node serves
    with pytest.raises(KafkaWireError, match="API key 18 version 5 is not served") as refused:
        received(bytes(frame))
    error = refused.value
    assert (error.error_code, error.api_key, error.api_version, error.correlation_id) == (UNSUPPORTED_VERSION, 18, 5,
                                                                                         12)
    answer = error_response(error.api_key, error.api_version, error.correlation_id, error.error_code, SERVED)
    decoded = ApiVersionsResponse[0].decode(answer, header=True, framed=True)
    assert decoded._header.correlation_id == 12 and decoded.error_code == UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys} == SERVED


def test_api_versions_that_does_not_parse_at_a_served_version_is_answered_with_a_v0_body():
    frame = sent(ApiVersionsRequest[3](client_software_name="x", client_software_version="1"), correlation_id=3)
    with pytest.raises(KafkaWireError, match="left after the body") as refused:
        read_request(frame[4:] + b"\x00", SERVED)  # a byte more than the request
    error = refused.value
    assert error.error_code == INVALID_REQUEST
    answer = error_response(18, 3, error.correlation_id, error.error_code, SERVED)
    # kafka-python reads an ApiVersions answer with an error as v0, whatever version it asked.
    decoded = ApiVersionsResponse[3].decode(answer, header=True, framed=True)
    assert decoded._header.correlation_id == 3 and decoded.error_code == INVALID_REQUEST and decoded.api_keys == []


def test_an_unknown_api_key_is_unsupported_and_answered_with_header_and_error_code():
    frame = bytearray(sent(MetadataRequest[0](topics=[]), correlation_id=77))
    struct.pack_into(">h", frame, 4, 9999)
    with pytest.raises(KafkaWireError, match="API key 9999 is not served") as refused:
        received(bytes(frame))
    error = refused.value
    assert (error.error_code, error.api_key, error.correlation_id) == (UNSUPPORTED_VERSION, 9999, 77)
    answer = error_response(9999, 0, 77, error.error_code, SERVED)
    assert answer == struct.pack(">iih", 6, 77, UNSUPPORTED_VERSION)


def test_a_served_api_that_does_not_parse_is_answered_with_its_versions_header():
    frame = sent(MetadataRequest[12](topics=None, allow_auto_topic_creation=False,
                                     include_topic_authorized_operations=False), correlation_id=8)
    with pytest.raises(KafkaWireError, match="the body of API key 3 version 12 does not parse") as refused:
        received(struct.pack(">i", len(frame) - 6) + frame[4:-2])
    assert refused.value.error_code == INVALID_REQUEST and refused.value.correlation_id == 8
    # Response header v1: the correlation id, no tagged fields (one 0 byte), then the error code.
    assert error_response(3, 12, 8, INVALID_REQUEST, SERVED) == struct.pack(">iibh", 7, 8, 0, INVALID_REQUEST)


@pytest.mark.parametrize("frame", [b"", b"\x00\x03", b"\x00\x03\x00\x0c\x00\x00\x00"])
def test_a_frame_too_short_for_a_header_is_refused_without_a_correlation_id(frame):
    with pytest.raises(KafkaWireError, match="too short for a request header") as refused:
        read_request(frame, SERVED)
    assert (refused.value.correlation_id, refused.value.api_key, refused.value.error_code) == (None, None,
                                                                                               INVALID_REQUEST)


def test_a_response_body_must_be_of_the_requests_api_and_version():
    request = KafkaRequest(3, 12, 1, None, None)
    with pytest.raises(AssertionError, match="answers API key 3 version 12"):
        encode_response(request, api_versions_body(SERVED, 3))


def test_the_error_keeps_its_fields_across_pickling():
    error = KafkaWireError("m", error_code=UNSUPPORTED_VERSION, correlation_id=4, api_key=18, api_version=9)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.message, copy.error_code, copy.correlation_id, copy.api_key, copy.api_version) == ("m", 35, 4, 18, 9)


VALID_FRAMES = [
    sent(MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(name="orders", topic_id=uuid.UUID(int=0))],
                             allow_auto_topic_creation=True, include_topic_authorized_operations=False))[4:],
    sent(MetadataRequest[1](topics=[MetadataRequest[1].MetadataRequestTopic(name="orders")]))[4:],
    sent(ApiVersionsRequest[3](client_software_name="librdkafka", client_software_version="2.3.0"))[4:],
    sent(ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest[9].TopicProduceData(name="t", partition_data=[
            ProduceRequest[9].TopicProduceData.PartitionProduceData(index=0, records=produce_records())])]))[4:],
]


def parses_or_refuses(frame: bytes) -> None:
    """The one rule of ``read_request`` on any bytes: a request or a ``KafkaWireError``, nothing else."""
    try:
        request = read_request(frame, SERVED)
    except KafkaWireError as error:
        assert error.error_code in (UNSUPPORTED_VERSION, INVALID_REQUEST)
        assert (error.correlation_id is None) == (len(frame) < 8)
        return
    assert request.api_key in SERVED


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_are_a_request_or_a_wire_error(frame):
    parses_or_refuses(frame)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bodies_behind_a_served_header_are_a_request_or_a_wire_error(tail):
    for api_key, (low, high) in SERVED.items():
        for version in (low, high):
            parses_or_refuses(struct.pack(">hhi", api_key, version, 1) + tail)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID_FRAMES), st.data())
def test_truncated_and_flipped_frames_are_a_request_or_a_wire_error(frame, data):
    cut = data.draw(st.integers(0, len(frame)))
    parses_or_refuses(frame[:cut])
    position = data.draw(st.integers(0, len(frame) - 1))
    flipped = bytearray(frame)
    flipped[position] ^= data.draw(st.integers(1, 255))
    parses_or_refuses(bytes(flipped))


def test_every_valid_frame_parses_whole():
    for frame in VALID_FRAMES:
        assert read_request(frame, SERVED).correlation_id == 7


def test_a_request_in_a_bytearray_parses_as_in_bytes():
    """kio reads only read-only buffers; a listener may hold a frame in a bytearray."""
    frame = sent(MetadataRequest[1](topics=[MetadataRequest[1].MetadataRequestTopic(name="orders")]))[4:]
    assert read_request(bytearray(frame), SERVED) == read_request(frame, SERVED)


def test_the_array_check_ends_where_kio_does_on_every_valid_frame():
    for frame in VALID_FRAMES:
        api_key, api_version = struct.unpack_from(">hh", frame)
        request_class = load_request_schema(api_key, api_version)
        view = memoryview(frame).toreadonly()
        _, header_size = entity_reader(request_class.__header_schema__)(view, 0)
        _, body_size = entity_reader(request_class)(view, header_size)
        assert check_arrays(request_class, view, header_size) == header_size + body_size == len(frame)


# DeleteTopics v5: an empty client id, no header tags, then a compact array of topic names claiming
# about 15 billion: kio 0.6.5 reserved 118 GB for it, and the failed allocation aborted the process.
HUGE_ARRAY_FRAME = bytes.fromhex("0014000500000001000000ffffffa53702ffff00017801b94c01")


def test_an_array_count_beyond_the_bytes_is_refused_before_kio_reserves_memory_for_it():
    """In a child process: were the check gone, kio's allocation would abort the test run itself."""
    script = ("from mafka4.errors import KafkaWireError\n"
              "from mafka4.kafka.wire import read_request\n"
              f"frame = bytes.fromhex({HUGE_ARRAY_FRAME.hex()!r})\n"
              "try:\n"
              "    read_request(frame, {20: (1, 6)})\n"
              "except KafkaWireError as error:\n"
              "    print(error.error_code, error)\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.startswith(f"{INVALID_REQUEST} the body of API key 20 version 5 does not parse")
    assert "a count of" in child.stdout


def test_an_array_of_more_items_than_the_bound_is_refused():
    cls = MetadataRequest[1]
    frame = sent(cls(topics=[cls.MetadataRequestTopic(name="t")] * (KAFKA_ARRAY_ITEMS_MAX + 1)))[4:]
    with pytest.raises(KafkaWireError, match=f"a count of {KAFKA_ARRAY_ITEMS_MAX + 1}"):
        read_request(frame, SERVED)
    assert len(read_request(sent(cls(topics=[cls.MetadataRequestTopic(name="t")] * KAFKA_ARRAY_ITEMS_MAX))[4:],
                            SERVED).body.topics) == KAFKA_ARRAY_ITEMS_MAX


def test_a_tagged_field_the_schema_does_not_name_is_refused():
    frame = bytearray(sent(ApiVersionsRequest[3](client_software_name="x", client_software_version="1"))[4:])
    assert frame[-1] == 0  # the body's tagged fields: none
    frame[-1:] = b"\x01\x05\x01\x00"  # one: tag 5, one byte
    with pytest.raises(KafkaWireError, match="tagged field 5 of ApiVersionsRequest"):
        read_request(bytes(frame), SERVED)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([(key, version) for key, (low, high) in ALL_VERSIONS.items() for version in range(low, high + 1)]),
       st.lists(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF]) | st.integers(0, 255), max_size=80))
def test_random_bodies_of_every_version_of_every_api_are_a_request_or_a_wire_error(api, tail):
    """Bytes biased to small counts, nulls and long varints: where kio reserved memory by a count."""
    frame = struct.pack(">hhi", *api, 1) + bytes(tail)
    try:
        read_request(frame, ALL_VERSIONS)
    except KafkaWireError as error:
        assert error.error_code == INVALID_REQUEST and error.correlation_id == 1
