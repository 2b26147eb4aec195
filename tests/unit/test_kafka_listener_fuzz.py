"""The Kafka listener (``mafka4.kafka.listener``) on 127.0.0.1, fed malformed frames (issue 39).

Behind it: real SCRAM (``ScramServerExchange`` over users held in a dict) and stand-in handlers
that record what they are asked: a Metadata handler answering a fixed description, a Produce
handler that records what it was asked to write, and the real CreateTopics/DeleteTopics handlers
over stand-in topic changes that record every change. Clients are raw sockets with a timeout,
sending what kafka-python's protocol classes encode and reading answers with its response
classes. After every malformed frame the connection got either an answer a Kafka client can
read, with the right error code, or a close, never a hang; a good client is still served on a
new connection; and nothing was written (no produce, no topic change).

The listener runs on a loop thread of its own and is closed on that loop: asyncio servers are
not thread-safe.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import (SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
                                 SaslHandshakeResponse)

from mafka4.client.loop_thread import LoopThread
from mafka4.errors import NotAuthorized
from mafka4.kafka import error_codes
from mafka4.kafka.listener import SERVED, KafkaListener
from mafka4.kafka.topic_handlers import KafkaTopicHandlers
from mafka4.limits import KAFKA_FRAME_BYTES_MAX, KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX, TopicConfig
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType
from mafka4.security.credentials import make_credential
from mafka4.security.scram import ScramServerExchange
from mafka4.security.scram_client import MECHANISM, ScramClientExchange

WAIT_S = 30  # every socket read's bound: reached only when the listener hangs
USER, PASSWORD = "alice", "alice-secret"
USERS = {USER: make_credential(PASSWORD)}
TOPIC = "orders"


def metadata(port: int) -> dict:
    """The fixed answer: broker 7 is the listener itself, and it leads the one partition of TOPIC."""
    return {"throttle_time": datetime.timedelta(0), "cluster_id": "c", "controller_id": 7,
            "brokers": [{"node_id": 7, "host": "127.0.0.1", "port": port}],
            "topics": [{"name": TOPIC, "error_code": 0, "partitions": [
                {"error_code": 0, "partition_index": 0, "leader_id": 7, "leader_epoch": 1, "replica_nodes": [7],
                 "isr_nodes": [7]}]}]}


class StandInSecurity:
    """What the listener asks of ``PortSecurity``: the server's side of a SCRAM exchange."""

    def exchange(self, mechanism: str) -> ScramServerExchange:
        assert mechanism == MECHANISM
        return ScramServerExchange(USERS.get)


@dataclass
class Recorder:
    """The stand-in handlers, and what they were asked."""

    port: int = 0  # the listener's, once it listens
    metadata: list = field(default_factory=list)
    produced: list = field(default_factory=list)
    changes: list = field(default_factory=list)

    async def answer_metadata(self, session: Session, request) -> dict:
        self.metadata.append(session.principal)
        return metadata(self.port)

    async def produce(self, session: Session, request) -> dict:
        self.produced.append(request)
        return {"throttle_time": datetime.timedelta(0), "responses": []}

    async def refuse(self, session: Session, request) -> dict:
        raise AssertionError("no test sends this API")

    async def create(self, name: str, config: TopicConfig, wait_s: float, validate_only: bool) -> None:
        self.changes.append(("create", name, config, validate_only))

    async def delete(self, name: str, wait_s: float) -> None:
        self.changes.append(("delete", name))


def allow_everything(session: Session, operation: Operation, resource_type: ResourceType, name: str) -> bool:
    return True


def check_nothing(session: Session, operation: Operation, resource_type: ResourceType, name: str) -> None:
    if not allow_everything(session, operation, resource_type, name):
        raise NotAuthorized("never")


@dataclass
class Served:
    address: tuple[str, int]
    recorder: Recorder
    listener: KafkaListener

    def connect(self) -> socket.socket:
        connection = socket.create_connection(self.address, timeout=WAIT_S)
        connection.settimeout(WAIT_S)
        return connection


async def _closed(listener: KafkaListener) -> None:
    listener.close()


@pytest.fixture(scope="module")
def served():
    recorder = Recorder()
    topics = KafkaTopicHandlers(recorder, check_nothing, allow_everything).handlers()
    listener = KafkaListener({3: recorder.answer_metadata, 0: recorder.produce, 1: recorder.refuse,
                              2: recorder.refuse, 22: recorder.refuse, **topics,
                              **dict.fromkeys((8, 9, 10, 11, 12, 13, 14), recorder.refuse)},  # the group APIs
                             StandInSecurity(), "test Kafka listener")
    loop = LoopThread("kafka-listener-test")
    try:
        host, port = loop.run(listener.start("127.0.0.1"), WAIT_S).rsplit(":", 1)
        recorder.port = int(port)
        yield Served((host, int(port)), recorder, listener)
        loop.run(_closed(listener), WAIT_S)  # on the listener's own loop
    finally:
        loop.stop()


@pytest.fixture
def connection(served):
    with contextlib.closing(served.connect()) as connection:
        yield connection


# --- the client's side -------------------------------------------------------------------------


def encoded(request, correlation_id: int) -> bytes:
    """``request`` as kafka-python's client puts it on the wire."""
    request.with_header(correlation_id=correlation_id, client_id="fuzz")
    return bytes(request.encode(framed=True, header=True))


def read_frame(connection: socket.socket) -> bytes | None:
    """The next whole frame (with its size prefix), or None at the end of the stream."""
    prefix = read_exactly(connection, 4)
    if prefix is None:
        return None
    body = read_exactly(connection, struct.unpack(">i", prefix)[0])
    assert body is not None, "a frame cut short by the listener"
    return prefix + body


def read_exactly(connection: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        try:
            chunk = connection.recv(size - len(data))  # socket.timeout here is the hang this test forbids
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def ask(connection: socket.socket, request, response_class, correlation_id: int = 1):
    connection.sendall(encoded(request, correlation_id))
    frame = read_frame(connection)
    assert frame is not None, f"no answer to {request}"
    answer = response_class.decode(frame, header=True, framed=True)
    assert answer._header.correlation_id == correlation_id
    return answer


def assert_closed(connection: socket.socket) -> None:
    """The listener closed the connection: end of stream (any frame before it is not expected)."""
    assert read_frame(connection) is None, "the connection was left open"


def authenticate(connection: socket.socket, password: str = PASSWORD, version: int = 2) -> SaslAuthenticateResponse:
    handshake = ask(connection, SaslHandshakeRequest[1](mechanism=MECHANISM), SaslHandshakeResponse[1])
    assert handshake.error_code == 0 and handshake.mechanisms == [MECHANISM]
    client = ScramClientExchange(USER, password)
    first = ask(connection, SaslAuthenticateRequest[version](auth_bytes=client.first()),
                SaslAuthenticateResponse[version], 2)
    assert first.error_code == 0, first.error_message
    final = ask(connection, SaslAuthenticateRequest[version](auth_bytes=client.respond(first.auth_bytes)),
                SaslAuthenticateResponse[version], 3)
    if final.error_code == 0:
        client.finish(final.auth_bytes)
    return final


def metadata_request():
    return MetadataRequest[12](topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def assert_still_serving(served: Served) -> None:
    """A good client is served on a new connection, and nothing was written."""
    with contextlib.closing(served.connect()) as connection:
        versions = ask(connection, ApiVersionsRequest[3](client_software_name="kafka-python",
                                                         client_software_version="3"), ApiVersionsResponse[3])
        assert {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys} == dict(SERVED)
        assert authenticate(connection).error_code == 0
        described = ask(connection, metadata_request(), MetadataResponse[12], 4)
        assert [(b.node_id, b.host, b.port) for b in described.brokers] == [(7, "127.0.0.1", served.address[1])]
        assert [topic.name for topic in described.topics] == [TOPIC]
    assert served.recorder.produced == [] and served.recorder.changes == [], "nothing is written"


def produce_request():
    return ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest[9].TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest[9].TopicProduceData.PartitionProduceData(index=0, records=b"")])])


# --- sizes and truncation ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, -1, -2**31, KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX + 1, 2**31 - 1])
def test_a_frame_size_out_of_bounds_before_authentication_closes_the_connection(served, connection, size):
    connection.sendall(struct.pack(">i", size) + b"\x00" * 16)
    assert_closed(connection)
    assert_still_serving(served)


@pytest.mark.parametrize("size", [0, -1, KAFKA_FRAME_BYTES_MAX + 1])
def test_a_frame_size_out_of_bounds_after_authentication_closes_the_connection(served, connection, size):
    assert authenticate(connection).error_code == 0
    connection.sendall(struct.pack(">i", size))
    assert_closed(connection)
    assert_still_serving(served)


def test_a_frame_beyond_the_unauthenticated_bound_is_read_once_the_connection_authenticated(served, connection):
    assert authenticate(connection).error_code == 0
    body = struct.pack(">hhi", 3, 12, 9) + b"\xff" * KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX
    connection.sendall(struct.pack(">i", len(body)) + body)
    frame = read_frame(connection)
    assert frame is not None, "read and answered, not refused by its size"
    # Response header v1 (correlation id, no tagged fields), then the error code.
    assert frame[4:] == struct.pack(">ibh", 9, 0, error_codes.INVALID_REQUEST)
    assert_closed(connection)
    assert_still_serving(served)


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 12, -1])
def test_a_truncated_frame_then_the_end_of_the_stream_closes_the_connection(served, connection, cut):
    frame = encoded(metadata_request(), 5)
    connection.sendall(frame[:cut])
    connection.shutdown(socket.SHUT_WR)
    assert_closed(connection)
    assert_still_serving(served)


# --- unserved APIs and versions -------------------------------------------------------------------


@pytest.mark.parametrize("authenticated", [False, True])
def test_an_unknown_api_key_is_answered_unsupported_version_then_closed(served, connection, authenticated):
    if authenticated:
        assert authenticate(connection).error_code == 0
    connection.sendall(struct.pack(">ihhih", 10, 9999, 0, 41, -1))  # header v1: a null client id
    # Header v0 (the API is unknown: no version of it has another), then the error code.
    assert read_frame(connection) == struct.pack(">iih", 6, 41, error_codes.UNSUPPORTED_VERSION)
    assert_closed(connection)
    assert_still_serving(served)


@pytest.mark.parametrize("api_key, version", [(3, 0), (0, 2), (1, 3), (19, 1), (20, 0), (36, 3)])
def test_a_served_api_at_an_unserved_version_is_answered_unsupported_version_then_closed(served, connection, api_key,
                                                                                          version):
    assert authenticate(connection).error_code == 0
    connection.sendall(struct.pack(">ihhih", 10, api_key, version, 42, -1))
    assert read_frame(connection) == struct.pack(">iih", 6, 42, error_codes.UNSUPPORTED_VERSION)
    assert_closed(connection)
    assert_still_serving(served)


def test_api_versions_at_an_unserved_version_gets_the_list_and_the_connection_stays_open(served, connection):
    asked = ApiVersionsRequest[4](client_software_name="kafka-python", client_software_version="3")
    refused = ask(connection, asked, ApiVersionsResponse[0], 11)  # KIP-511: the answer is v0
    assert refused.error_code == error_codes.UNSUPPORTED_VERSION
    assert {k.api_key: (k.min_version, k.max_version) for k in refused.api_keys} == dict(SERVED)
    # The client downgrades to a version in the list and asks again, on the same connection.
    answer = ask(connection, ApiVersionsRequest[3](client_software_name="kafka-python", client_software_version="3"),
                 ApiVersionsResponse[3], 12)
    assert answer.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys} == dict(SERVED)
    assert authenticate(connection).error_code == 0, "and goes on to authenticate on it"
    assert_still_serving(served)


# --- authentication -----------------------------------------------------------------------------


@pytest.mark.parametrize("request_", [metadata_request(), produce_request(),
                                      CreateTopicsRequest[7](topics=[], timeout_ms=1000, validate_only=False)],
                         ids=["metadata", "produce", "create-topics"])
def test_a_request_before_authentication_closes_the_connection_and_reaches_no_handler(served, connection, request_):
    served.recorder.metadata.clear()
    connection.sendall(encoded(request_, 3))
    assert_closed(connection)
    assert served.recorder.metadata == []
    assert_still_serving(served)


def test_sasl_authenticate_before_the_handshake_is_an_illegal_sasl_state(served, connection):
    answer = ask(connection, SaslAuthenticateRequest[2](auth_bytes=b"n,,n=alice,r=abc"), SaslAuthenticateResponse[2])
    assert answer.error_code == error_codes.ILLEGAL_SASL_STATE and "SaslHandshake" in answer.error_message
    assert_closed(connection)
    assert_still_serving(served)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_wrong_password_is_refused_with_a_message_then_closed(served, connection, version):
    refused = authenticate(connection, password="not-the-password", version=version)
    assert refused.error_code == error_codes.SASL_AUTHENTICATION_FAILED and refused.error_message
    assert_closed(connection)
    assert_still_serving(served)


def test_a_wrong_password_after_a_v0_handshake_closes_the_connection(served, connection):
    handshake = ask(connection, SaslHandshakeRequest[0](mechanism=MECHANISM), SaslHandshakeResponse[0])
    assert handshake.error_code == 0
    client = ScramClientExchange(USER, "not-the-password")
    first = client.first()
    connection.sendall(struct.pack(">i", len(first)) + first)  # bare tokens after a v0 handshake
    server_first = read_frame(connection)
    assert server_first is not None
    final = client.respond(server_first[4:])
    connection.sendall(struct.pack(">i", len(final)) + final)
    assert_closed(connection)  # Kafka answers a failed bare exchange with the close alone
    assert_still_serving(served)


def test_an_unknown_mechanism_is_refused_with_the_served_ones(served, connection):
    answer = ask(connection, SaslHandshakeRequest[1](mechanism="PLAIN"), SaslHandshakeResponse[1])
    assert answer.error_code == error_codes.UNSUPPORTED_SASL_MECHANISM and answer.mechanisms == [MECHANISM]
    assert_closed(connection)
    assert_still_serving(served)


# --- random bytes ---------------------------------------------------------------------------------


def answered_or_closed(connection: socket.socket) -> list[bytes]:
    """Every frame the listener sent until it closed the connection (the client has stopped
    writing, so a listener waiting for more bytes sees the end of the stream and closes)."""
    frames = []
    while (frame := read_frame(connection)) is not None:
        assert len(frame) >= 8, "every answer holds at least a correlation id"
        frames.append(frame)
    return frames


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_random_bytes_before_authentication_are_answered_or_closed(served, data):
    with contextlib.closing(served.connect()) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        answered_or_closed(connection)
    assert served.recorder.produced == [] and served.recorder.changes == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([(3, 1), (3, 12), (18, 3)]), st.binary(max_size=300))
def test_random_bodies_behind_a_served_header_after_authentication_are_answered_or_closed(served, header, tail):
    api_key, version = header
    body = struct.pack(">hhi", api_key, version, 77) + tail
    with contextlib.closing(served.connect()) as connection:
        assert authenticate(connection).error_code == 0
        connection.sendall(struct.pack(">i", len(body)) + body)
        connection.shutdown(socket.SHUT_WR)
        frames = answered_or_closed(connection)
    assert len(frames) <= 1 and all(struct.unpack_from(">i", frame, 4)[0] == 77 for frame in frames)
    assert served.recorder.produced == [] and served.recorder.changes == []


def test_the_listener_still_serves_after_the_fuzzing(served):
    assert_still_serving(served)
    assert served.listener.counters["bad_frames"] > 0 and served.listener.counters["auth_failures"] > 0


# --- topics through the listener ---------------------------------------------------------------


def test_create_topics_through_the_listener_reaches_the_topic_changes(served, connection):
    assert authenticate(connection).error_code == 0
    topic = CreateTopicsRequest[7].CreatableTopic(name="made", num_partitions=3, replication_factor=-1, assignments=[],
                                                  configs=[])
    answer = ask(connection, CreateTopicsRequest[7](topics=[topic], timeout_ms=5000, validate_only=False),
                 CreateTopicsResponse[7], 8)
    try:
        (result,) = answer.topics
        assert (result.name, result.error_code, result.num_partitions, result.replication_factor) == ("made", 0, 3, 1)
        ((kind, name, config, validate_only),) = served.recorder.changes
        assert (kind, name, config.partitions, config.virtual_partition_count, validate_only) == ("create", "made", 3,
                                                                                                 3, False)
    finally:
        served.recorder.changes.clear()


def test_kafka_pythons_admin_client_creates_and_deletes_topics_through_the_listener(served):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=[f"127.0.0.1:{served.address[1]}"], security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=USER, sasl_plain_password=PASSWORD,
                             request_timeout_ms=WAIT_S * 1000)
    try:
        created = admin.create_topics({"made-by-admin": {"num_partitions": 3, "configs": {"retention.ms": "60000"}}})
        refused = admin.create_topics({"refused": {"num_partitions": 2, "configs": {"cleanup.policy": "compact"}}},
                                      raise_errors=False)
        deleted = admin.delete_topics(["made-by-admin"])
    finally:
        admin.close()
        changes, served.recorder.changes[:] = list(served.recorder.changes), []
    (result,) = created["topics"]
    assert (result["name"], result["error_code"], result["num_partitions"], result["replication_factor"]) == (
        "made-by-admin", 0, 3, 1)
    assert result["configs"]["retention.ms"]["value"] == "60000"
    (refusal,) = refused["topics"]
    assert refusal["error_code"] == error_codes.INVALID_CONFIG and "cleanup.policy" in refusal["error_message"]
    assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [("made-by-admin", 0)]
    assert [(change[0], change[1]) for change in changes] == [("create", "made-by-admin"), ("delete", "made-by-admin")]
    assert changes[0][2].retention_ms == 60_000 and changes[0][2].virtual_partition_count == 3
