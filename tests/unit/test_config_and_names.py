"""Bad input gets a clear, actionable error before anything is created."""

import pickle

import pytest

from mafka4 import errors
from mafka4.coordinator.control.placement import assign_replicas
from mafka4.limits import Acks, ProducerConfig, TopicConfig, replace_config
from mafka4.limits.servers import ClusterConfig, LogConfig, topic_log_config
from mafka4.names import validate_topic_name


@pytest.mark.parametrize("name", ["", ".", "..", "a b", "orders/eu", "x" * 201, "é", None, 5])
def test_invalid_topic_names_are_refused_with_the_rule(name):
    with pytest.raises(errors.InvalidTopicName, match="topic name"):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["orders", "a.b-c_d", "X" * 200, "0"])
def test_valid_topic_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("value", ["2", "none", "", 3, None])
def test_invalid_acks_names_the_choices(value):
    with pytest.raises(errors.InvalidConfig, match="'all', '1' or '0'"):
        Acks.parse(value)


def test_acks_accepts_kafka_spellings():
    assert Acks.parse(-1) is Acks.ALL and Acks.parse("ALL") is Acks.ALL and Acks.parse(1) is Acks.LEADER


@pytest.mark.parametrize("acks", list(Acks))
def test_acks_travel_to_the_replica_as_the_enum_itself(acks):
    # Ray pickles the arguments of an actor call; the replica compares with ``is``.
    assert pickle.loads(pickle.dumps(acks)) is acks
    assert Acks.parse(acks) is acks and ProducerConfig(acks=acks.value).acks is acks


@pytest.mark.parametrize("settings", [None, "0", (("vp_merge_delay_ms",),), ((1, 5000),)])
def test_controller_settings_that_are_not_name_value_pairs_are_refused(settings):
    with pytest.raises(errors.InvalidConfig, match=r"must be \(name, value\) pairs"):
        ClusterConfig(controller_settings=settings)
    assert ClusterConfig(controller_settings=(("vp_merge_delay_ms", 5000),)).controller_config().vp_merge_delay_ms == 5000


def test_producer_config_checks_ranges_and_relations():
    with pytest.raises(errors.InvalidConfig, match="linger_ms=-1"):
        ProducerConfig(linger_ms=-1)
    with pytest.raises(errors.InvalidConfig, match="buffer_bytes_max=1024 must be at least 4096"):
        ProducerConfig(batch_bytes_max=4096, buffer_bytes_max=1024)
    with pytest.raises(errors.InvalidConfig, match="on_full"):
        ProducerConfig(on_full="drop")
    with pytest.raises(errors.InvalidConfig, match="must be an integer"):
        ProducerConfig(linger_ms="5")


def test_topic_config_refuses_impossible_min_insync_replicas():
    with pytest.raises(errors.InvalidConfig, match="acks=all could never succeed"):
        TopicConfig(replication_factor=2, min_insync_replicas=3)
    with pytest.raises(errors.InvalidConfig, match="partitions=0"):
        TopicConfig(partitions=0)


def test_replace_config_names_unknown_settings():
    with pytest.raises(errors.InvalidConfig, match="unknown setting.*bogus"):
        replace_config(LogConfig(), bogus=1)


def test_replication_factor_larger_than_live_write_nodes():
    with pytest.raises(errors.NotEnoughWriteNodes, match="needs 3 live write nodes, 2 are live"):
        assign_replicas(4, 3, ["w0", "w1"])


@pytest.mark.parametrize("nodes", [1, 2, 3, 5])
def test_placement_spreads_leaders_and_never_doubles_a_replica(nodes):
    names = [f"w{i}" for i in range(nodes)]
    for rf in range(1, nodes + 1):
        assignment = assign_replicas(nodes * 4, rf, names)
        assert all(len(set(replicas)) == rf for replicas in assignment)
        leaders = [replicas[0] for replicas in assignment]
        assert {leaders.count(n) for n in names} == {4}


def test_every_error_survives_pickling_with_its_message_and_flag():
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.MafkaError):
            copy = pickle.loads(pickle.dumps(cls("why and how to fix")))
            assert type(copy) is cls and copy.message == "why and how to fix" and copy.retriable == cls.retriable
    assert errors.NotEnoughReplicas.retriable and not errors.InvalidTopicName.retriable


def test_exactly_the_errors_that_mean_bad_input_are_usage_errors_and_retrying_them_is_futile():
    usage_errors = {name for name, cls in vars(errors).items()
                    if isinstance(cls, type) and issubclass(cls, errors.MafkaError) and cls.usage_error}
    assert usage_errors == {"InvalidConfig", "InvalidTopicName", "InvalidRecord", "MessageTooLarge", "UnknownTopic",
                            "InvalidGroupName", "UnknownGroup", "InvalidReshard", "UnknownVirtualPartition",
                            "WrongReadMode", "NotEnoughReadNodes", "InvalidEventLog", "NoEventLogs", "RunInTwoEventLogs",
                            "MissingDependency", "UserExists", "UnknownUser", "UnknownAclRule", "MissingCredential",
                            "ProtectedUser", "InvalidLaneName", "LanesExhausted", "UnknownLane",
                            "DelayOutOfRange", "InvalidMessageId"}
    assert not any(getattr(errors, name).retriable for name in usage_errors)
    assert not errors.ClusterNotRunning.usage_error and not errors.UnknownProducer.usage_error


def test_the_unfed_hold_is_validated_and_reaches_the_log():
    with pytest.raises(errors.InvalidConfig, match="unfed_hold_ms_max=-1"):
        LogConfig(unfed_hold_ms_max=-1)
    with pytest.raises(errors.InvalidConfig, match="unfed_hold_ms_max=-1"):
        TopicConfig(unfed_hold_ms_max=-1)
    assert topic_log_config(TopicConfig()).unfed_hold_ms_max == 24 * 3600 * 1000
    assert topic_log_config(TopicConfig(unfed_hold_ms_max=None)).unfed_hold_ms_max is None


def test_records_lost_names_what_was_lost_and_what_to_do():
    error = errors.RecordsLost.of("orders", 2, 100, 250, vp=7)
    assert not error.retriable
    for part in ("virtual partition 7 of topic 'orders'", "[100, 250) of partition 2", "Nothing can bring them back",
                 "continues after them", "keep the read nodes running", "unfed_hold_ms_max"):
        assert part in error.message
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is errors.RecordsLost and copy.message == error.message
    assert "topic 'orders' lost" in errors.RecordsLost.of("orders", 0, 1, 2).message
