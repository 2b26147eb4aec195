"""What Kafka clients see of the cluster: brokers from read nodes, partitions from VPs or physical
partitions, records routed by mafka4's partitioner, mafka4's errors as Kafka's codes."""

from __future__ import annotations

import io

from kafka.protocol.metadata import MetadataResponse as KafkaPythonMetadataResponse
from kio.index import load_response_schema
from kio.serial import entity_writer

from mafka4 import errors
from mafka4.hashing import key_hash
from mafka4.kafka import error_codes
from mafka4.kafka.error_codes import kafka_error_code
from mafka4.kafka.produce_routing import ProduceRouting
from mafka4.kafka.shapes import shaped
from mafka4.kafka.topology import KafkaPartition, broker_id, brokers, physical_partitions, vp_partitions
from mafka4.virtual.ranges import HashRange
from mafka4.virtual.vp_state import VirtualPartitionState


def vp(number: int, leader: str, replicas=("r0", "r1"), retired=False) -> VirtualPartitionState:
    return VirtualPartitionState(number, HashRange(0, 1), leader, 3, tuple(replicas), tuple(replicas),
                                 10 if retired else None, retired)


def test_brokers_are_the_read_nodes_with_a_listener_with_ids_every_node_derives_alike():
    found, clashing = brokers([("r1", "127.0.0.1:9093"), ("r0", "127.0.0.1:9092"), ("r2", None)])
    assert [(b.read_node, b.host, b.port) for b in found] == [("r0", "127.0.0.1", 9092), ("r1", "127.0.0.1", 9093)]
    assert [b.node_id for b in found] == [broker_id("r0"), broker_id("r1")] and clashing == []
    assert all(0 <= b.node_id < 2**31 for b in found)


def test_a_mafka4_topics_partitions_are_its_vps_led_where_the_vps_are_led():
    live = {"r0": 10, "r1": 11}
    states = {0: vp(0, "r0"), 1: vp(1, "r1"), 2: vp(2, "r9", replicas=("r9", "r1")), 3: vp(3, "r0", retired=True)}
    partitions = vp_partitions(states, live)
    assert [p.index for p in partitions] == [0, 1, 2, 3]
    assert partitions[0] == KafkaPartition(0, 10, 3, (10, 11), (10, 11))
    assert partitions[1].leader == 11
    assert partitions[2].leader == -1 and partitions[2].error_code == error_codes.LEADER_NOT_AVAILABLE, \
        "a leader without a listener is not available: the client retries"
    assert partitions[3].leader in (10, 11) and partitions[3].error_code == error_codes.NONE, \
        "a retired VP keeps its partition, served empty by a live broker"


def test_a_mafka3_topics_partitions_spread_over_the_brokers_that_forward_them():
    partitions = physical_partitions(3, {"r0": 10, "r1": 11})
    assert [(p.index, p.leader) for p in partitions] == [(0, 10), (1, 11), (2, 10)]
    (lonely,) = physical_partitions(1, {})
    assert lonely.leader == -1 and lonely.error_code == error_codes.LEADER_NOT_AVAILABLE


def test_records_go_by_key_as_mafka4s_partitioner_sends_them_and_keyless_batches_take_turns():
    routing = ProduceRouting()
    records = [(b"k%d" % i, b"v", 0, None) for i in range(20)]
    routed = routing.route(records, 3)
    for partition, group in routed.items():
        assert all(key_hash(key) % 3 == partition for key, _, _, _ in group)
    assert sorted(r for group in routed.values() for r in group) == sorted(records)
    keyless = [(None, b"v%d" % i, 0, None) for i in range(4)]
    firsts = [next(iter(routing.route(keyless, 3))) for _ in range(4)]
    assert firsts == [0, 1, 2, 0], "one keyless batch to one partition, round robin"


def test_mafka4_errors_become_the_kafka_codes_whose_client_behaviour_fits():
    assert kafka_error_code(errors.NotLeader("moved")) == error_codes.NOT_LEADER_OR_FOLLOWER
    assert kafka_error_code(errors.ReadReplicaNotInSync("lag")) == error_codes.NOT_LEADER_OR_FOLLOWER
    assert kafka_error_code(errors.UnknownTopic("t")) == error_codes.UNKNOWN_TOPIC_OR_PARTITION
    assert kafka_error_code(errors.UnknownCodec("c")) == error_codes.UNSUPPORTED_COMPRESSION_TYPE
    assert kafka_error_code(errors.NotAuthorized("no")) == error_codes.TOPIC_AUTHORIZATION_FAILED
    assert kafka_error_code(errors.NotAuthorized("no"), "group") == error_codes.GROUP_AUTHORIZATION_FAILED
    assert kafka_error_code(ValueError("bug")) == error_codes.UNKNOWN_SERVER_ERROR


def test_one_description_shapes_every_metadata_version_that_kafka_python_reads_back():
    description = {"brokers": [{"node_id": 7, "host": "127.0.0.1", "port": 9092}], "controller_id": 7,
                   "cluster_id": "c", "topics": [{"name": "t", "error_code": 0, "partitions": [
                       {"partition_index": 0, "leader_id": 7, "replica_nodes": [7], "isr_nodes": [7],
                        "error_code": 0}]}]}
    for version in range(1, 9):  # the versions kafka-python's own Metadata responses decode
        cls = load_response_schema(3, version)
        buffer = io.BytesIO()
        entity_writer(cls)(buffer, shaped(cls, description))
        decoded = KafkaPythonMetadataResponse[version].decode(io.BytesIO(buffer.getvalue()))
        assert decoded.brokers[0].node_id == 7 and decoded.brokers[0].port == 9092, version
        assert decoded.topics[0].partitions[0].leader_id == 7, version
