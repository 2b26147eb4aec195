"""A CreateTopics request's topic as a mafka4 ``TopicConfig`` (``mafka4.kafka.topic_configs``): what
is created, and what is refused with which Kafka error code."""

from __future__ import annotations

import pytest

from mafka4.kafka import error_codes
from mafka4.kafka.topic_configs import (CONFIGS, DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, Refused, created_config,
                                        described_configs, kafka_partitions)
from mafka4.limits import PARTITIONS_MAX, REPLICATION_FACTOR_MAX, ReadMode, TopicConfig


def test_a_kafka_topic_is_a_mafka4_mode_topic_with_one_vp_per_partition_by_default():
    config = created_config("orders", 3, -1, 0, [])
    assert isinstance(config, TopicConfig)
    assert (config.partitions, config.replication_factor, config.read_mode) == (3, 1, ReadMode.MAFKA4)
    assert (config.virtual_partitions, config.read_replicas) == (3, 1), "mafka4's defaults, spelled out"
    assert kafka_partitions(config) == 3, "a Kafka client sees as many partitions as it asked for"


def test_the_defaults_of_minus_one_are_mafka4s():
    config = created_config("orders", -1, -1, 0, [])
    assert (config.partitions, config.replication_factor) == (1, 1)


def test_mafka4_configs_set_the_read_path():
    config = created_config("orders", 2, 3, 0, [("mafka4.virtual.partitions", "8"), ("mafka4.read.replicas", "2"),
                                                ("min.insync.replicas", "2")])
    assert (config.partitions, config.virtual_partitions, config.read_replicas) == (2, 8, 2)
    assert config.min_insync_replicas == 2 and kafka_partitions(config) == 8, "its VPs are its Kafka partitions"
    mafka3 = created_config("orders", 4, 1, 0, [("mafka4.read.mode", "mafka3")])
    assert mafka3.read_mode is ReadMode.MAFKA3 and kafka_partitions(mafka3) == 4 and mafka3.virtual_partitions == 0


def test_kafkas_configs_map_to_mafka4s_fields_with_minus_one_for_no_limit():
    config = created_config("orders", 1, 1, 0, [("retention.ms", "-1"), ("retention.bytes", "1048576"),
                                                ("segment.bytes", "1048576"),
                                                ("unclean.leader.election.enable", "TRUE")])
    assert (config.retention_ms, config.retention_bytes, config.segment_bytes_max) == (None, 1 << 20, 1 << 20)
    assert config.unclean_leader_election is True
    assert created_config("orders", 1, 1, 0, [("retention.ms", "3600000")]).retention_ms == 3_600_000


@pytest.mark.parametrize("num_partitions", [0, -2, PARTITIONS_MAX + 1])
def test_partitions_out_of_range_are_invalid_partitions(num_partitions):
    refused = created_config("orders", num_partitions, 1, 0, [])
    assert isinstance(refused, Refused) and refused.error_code == error_codes.INVALID_PARTITIONS
    assert f"num_partitions={num_partitions}" in refused.message


@pytest.mark.parametrize("replication_factor", [0, -2, REPLICATION_FACTOR_MAX + 1])
def test_a_replication_factor_out_of_range_is_invalid_replication_factor(replication_factor):
    refused = created_config("orders", 1, replication_factor, 0, [])
    assert refused.error_code == error_codes.INVALID_REPLICATION_FACTOR
    assert f"replication_factor={replication_factor}" in refused.message


def test_replica_assignments_are_refused_since_mafka4_places_replicas_itself():
    refused = created_config("orders", -1, -1, 2, [])
    assert refused.error_code == error_codes.INVALID_REPLICA_ASSIGNMENT and "assignments" in refused.message


def test_an_invalid_name_is_invalid_topic_exception():
    refused = created_config("no spaces", 1, 1, 0, [])
    assert refused.error_code == error_codes.INVALID_TOPIC_EXCEPTION and "no spaces" in refused.message


@pytest.mark.parametrize("configs, named", [
    ([("cleanup.policy", "compact")], "unknown config 'cleanup.policy'"),
    ([("retention.ms", None)], "null value"),
    ([("retention.ms", "1"), ("retention.ms", "2")], "given twice"),
    ([("retention.ms", "soon")], "retention.ms='soon' is not valid"),
    ([("retention.ms", "1" * 30)], "is not valid"),
    ([("unclean.leader.election.enable", "yes")], "is not valid"),
    ([("mafka4.read.mode", "mafka5")], "mafka4.read.mode='mafka5' is not valid"),
    ([("retention.ms", "0")], "retention_ms=0"),
    ([("min.insync.replicas", "2")], "min.insync.replicas is min_insync_replicas"),
    ([("mafka4.read.mode", "mafka3"), ("mafka4.virtual.partitions", "4")], "mafka4.virtual.partitions is virtual"),
    ([("mafka4.virtual.partitions", "5"), ("mafka4.virtual.partitions.max", "4")], "virtual_partitions=5"),
])
def test_bad_configs_are_invalid_config_naming_them(configs, named):
    refused = created_config("orders", 1, 1, 0, configs)
    assert isinstance(refused, Refused) and refused.error_code == error_codes.INVALID_CONFIG
    assert named in refused.message


def test_an_unknown_config_is_refused_with_every_accepted_name():
    refused = created_config("orders", 1, 1, 0, [("compression.type", "zstd")])
    assert all(entry.kafka_name in refused.message for entry in CONFIGS)


def test_the_checks_run_in_kafkas_order_name_first_configs_last():
    assert created_config("a b", 0, 0, 1, [("x", None)]).error_code == error_codes.INVALID_TOPIC_EXCEPTION
    assert created_config("ab", 0, 0, 1, [("x", None)]).error_code == error_codes.INVALID_REPLICA_ASSIGNMENT
    assert created_config("ab", 0, 0, 0, [("x", None)]).error_code == error_codes.INVALID_PARTITIONS
    assert created_config("ab", 1, 0, 0, [("x", None)]).error_code == error_codes.INVALID_REPLICATION_FACTOR
    assert created_config("ab", 1, 1, 0, [("x", None)]).error_code == error_codes.INVALID_CONFIG


def test_the_described_configs_give_every_config_with_its_source():
    config = created_config("orders", 2, 1, 0, [("retention.ms", "-1"), ("mafka4.virtual.partitions", "4")])
    described = {entry["name"]: entry for entry in described_configs(config, ["retention.ms",
                                                                              "mafka4.virtual.partitions"])}
    assert set(described) == {entry.kafka_name for entry in CONFIGS}
    assert described["retention.ms"]["value"] == "-1"
    assert described["mafka4.virtual.partitions"]["value"] == "4"
    assert described["mafka4.read.mode"]["value"] == "mafka4"
    assert described["unclean.leader.election.enable"]["value"] == "false"
    assert described["retention.ms"]["config_source"] == DYNAMIC_TOPIC_CONFIG
    assert described["segment.bytes"]["config_source"] == DEFAULT_CONFIG


def test_every_config_reads_back_what_it_describes():
    config = created_config("orders", 2, 3, 0, [])
    again = created_config("orders", 2, 3, 0, [(entry["name"], entry["value"])
                                               for entry in described_configs(config, [])])
    assert again == config
