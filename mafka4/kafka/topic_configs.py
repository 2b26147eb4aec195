"""A Kafka CreateTopics request's topic as a mafka4 ``TopicConfig``, and back (pure).

Kafka names a topic's shape in the request's fields and its settings as config entries of
strings; mafka4 has one ``TopicConfig``. ``created_config`` maps one to the other, and refuses
what mafka4 cannot honour with the Kafka error code a Kafka client acts on:

    num_partitions       -1: mafka4's default (1); else 1 to PARTITIONS_MAX   INVALID_PARTITIONS
    replication_factor   -1: mafka4's default (1, as ``mafka4 topic create``);
                         else 1 to REPLICATION_FACTOR_MAX                      INVALID_REPLICATION_FACTOR
    assignments          refused: mafka4 places replicas itself               INVALID_REPLICA_ASSIGNMENT
    configs              ``CONFIGS`` only; an unknown name, a null value, a
                         name given twice or a value out of range              INVALID_CONFIG
    name                 mafka4's (Kafka's) naming rules                       INVALID_TOPIC_EXCEPTION

A topic created through Kafka is a Mafka4-mode topic (``READ_MODE_DEFAULT``) with mafka4's
defaults for its virtual partitions (one per partition, one read replica each), unless a
``mafka4.*`` config says otherwise; so a Kafka client that asks for 3 partitions sees 3
(its VPs). ``kafka_partitions`` is that count, ``described_configs`` the config entries a
CreateTopics v5+ answer lists for the topic as created.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from mafka4.errors import InvalidConfig, InvalidTopicName
from mafka4.kafka import error_codes
from mafka4.limits import PARTITIONS_MAX, READ_MODE_DEFAULT, REPLICATION_FACTOR_MAX, ReadMode, TopicConfig
from mafka4.names import validate_topic_name

DEFAULT = -1  # num_partitions / replication_factor: the server's default
PARTITIONS_DEFAULT = 1
REPLICATION_FACTOR_DEFAULT = 1
# Kafka's ConfigSource values, as DescribeConfigs and CreateTopics v5+ answer them.
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5
_INTEGER = re.compile(r"-?[0-9]{1,19}")  # Kafka's LONG: at most 19 digits


@dataclass(frozen=True, slots=True)
class TopicConfigEntry:
    """One config a Kafka client may set: its Kafka name, the ``TopicConfig`` field it sets, and
    how the string becomes the field's value (and back)."""

    kafka_name: str
    field: str
    parse: Callable[[str], object]
    text: Callable[[object], str]


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a topic is not created: a Kafka error code and the message that goes with it."""

    error_code: int
    message: str


def _integer(value: str) -> int:
    if not _INTEGER.fullmatch(value.strip()):
        raise ValueError("not an integer")
    return int(value.strip())


def _integer_or_unlimited(value: str) -> int | None:
    """Kafka's -1 for "no limit" (retention.ms, retention.bytes) is mafka4's None."""
    number = _integer(value)
    return None if number == -1 else number


def _boolean(value: str) -> bool:
    text = value.strip().lower()
    if text not in ("true", "false"):
        raise ValueError("not true or false")
    return text == "true"


def _read_mode(value: str) -> ReadMode:
    try:
        return ReadMode(value.strip())
    except ValueError:
        raise ValueError(f"use one of {', '.join(mode.value for mode in ReadMode)}") from None


def _integer_text(value: object) -> str:
    return "-1" if value is None else str(value)


def _boolean_text(value: object) -> str:
    return "true" if value else "false"


CONFIGS: tuple[TopicConfigEntry, ...] = (
    # Kafka's own topic configs that mafka4 has.
    TopicConfigEntry("retention.ms", "retention_ms", _integer_or_unlimited, _integer_text),
    TopicConfigEntry("retention.bytes", "retention_bytes", _integer_or_unlimited, _integer_text),
    TopicConfigEntry("min.insync.replicas", "min_insync_replicas", _integer, _integer_text),
    TopicConfigEntry("segment.bytes", "segment_bytes_max", _integer, _integer_text),
    TopicConfigEntry("unclean.leader.election.enable", "unclean_leader_election", _boolean, _boolean_text),
    # mafka4's own: the read path, and the bounds Kafka keeps per broker but mafka4 per topic.
    TopicConfigEntry("mafka4.read.mode", "read_mode", _read_mode, str),
    TopicConfigEntry("mafka4.virtual.partitions", "virtual_partitions", _integer, _integer_text),
    TopicConfigEntry("mafka4.virtual.partitions.max", "virtual_partitions_max", _integer, _integer_text),
    TopicConfigEntry("mafka4.read.replicas", "read_replicas", _integer, _integer_text),
    TopicConfigEntry("mafka4.read.replica.lag.max.ms", "read_replica_lag_ms_max", _integer, _integer_text),
    TopicConfigEntry("mafka4.replica.lag.max.ms", "replica_lag_ms_max", _integer, _integer_text),
    TopicConfigEntry("mafka4.unfed.hold.max.ms", "unfed_hold_ms_max", _integer_or_unlimited, _integer_text),
    TopicConfigEntry("mafka4.retention.check.interval.ms", "retention_check_interval_ms", _integer, _integer_text),
)
_BY_KAFKA_NAME = {entry.kafka_name: entry for entry in CONFIGS}
assert len(_BY_KAFKA_NAME) == len(CONFIGS) and len({entry.field for entry in CONFIGS}) == len(CONFIGS)


def created_config(name: str, num_partitions: int, replication_factor: int, assignments: int,
                   configs: Iterable[tuple[str, str | None]]) -> TopicConfig | Refused:
    """The resolved config of topic ``name`` as a CreateTopics request asks for it (``assignments``:
    how many replica assignments it sends; ``configs``: its (name, value) entries), or why not.

    The checks run in Kafka's order: the name, the assignments, the partitions, the replication
    factor, then the configs; the first refusal is the answer."""
    try:
        validate_topic_name(name)
    except InvalidTopicName as error:
        return Refused(error_codes.INVALID_TOPIC_EXCEPTION, error.message)
    if assignments:
        return Refused(error_codes.INVALID_REPLICA_ASSIGNMENT,
                       f"topic {name!r}: mafka4 places every partition's replicas itself (on the write nodes, and "
                       f"each virtual partition on read nodes); send num_partitions and replication_factor without "
                       f"assignments")
    if num_partitions != DEFAULT and not 1 <= num_partitions <= PARTITIONS_MAX:
        return Refused(error_codes.INVALID_PARTITIONS,
                       f"topic {name!r}: num_partitions={num_partitions}; a topic has 1 to {PARTITIONS_MAX} "
                       f"partitions, or -1 for the default ({PARTITIONS_DEFAULT})")
    if replication_factor != DEFAULT and not 1 <= replication_factor <= REPLICATION_FACTOR_MAX:
        return Refused(error_codes.INVALID_REPLICATION_FACTOR,
                       f"topic {name!r}: replication_factor={replication_factor}; mafka4 keeps 1 to "
                       f"{REPLICATION_FACTOR_MAX} replicas of a partition, or -1 for the default "
                       f"({REPLICATION_FACTOR_DEFAULT})")
    settings = _settings(name, configs)
    if isinstance(settings, Refused):
        return settings
    fields = {"partitions": PARTITIONS_DEFAULT if num_partitions == DEFAULT else num_partitions,
              "replication_factor": REPLICATION_FACTOR_DEFAULT if replication_factor == DEFAULT else replication_factor,
              "read_mode": READ_MODE_DEFAULT, **settings}
    try:
        return TopicConfig(**fields).resolved()
    except InvalidConfig as error:
        named = ", ".join(f"{entry.kafka_name} is {entry.field}" for entry in CONFIGS if entry.field in settings)
        return Refused(error_codes.INVALID_CONFIG, f"topic {name!r}: {error.message}" + (
            f" (of the configs given, {named})" if named else ""))


def _settings(name: str, configs: Iterable[tuple[str, str | None]]) -> dict | Refused:
    """``TopicConfig`` fields from the request's config entries, or the first refusal."""
    settings, seen = {}, set()
    for config_name, value in configs:
        entry = _BY_KAFKA_NAME.get(config_name)
        if entry is None:
            return Refused(error_codes.INVALID_CONFIG,
                           f"topic {name!r}: unknown config {config_name!r}; mafka4 accepts "
                           f"{', '.join(entry.kafka_name for entry in CONFIGS)}")
        if config_name in seen:
            return Refused(error_codes.INVALID_CONFIG, f"topic {name!r}: config {config_name!r} is given twice")
        seen.add(config_name)
        if value is None:
            return Refused(error_codes.INVALID_CONFIG,
                           f"topic {name!r}: config {config_name!r} has a null value; leave it out for the default")
        try:
            settings[entry.field] = entry.parse(value)
        except ValueError as error:
            return Refused(error_codes.INVALID_CONFIG,
                           f"topic {name!r}: config {config_name}={value[:100]!r} is not valid ({error})")
    return settings


def kafka_partitions(config: TopicConfig) -> int:
    """The partitions Kafka clients see of a topic created with ``config``: its VPs in Mafka4 mode,
    its physical partitions in Mafka3 mode (``kafka.topology``)."""
    return config.partitions if config.read_mode is ReadMode.MAFKA3 else config.virtual_partition_count


def described_configs(config: TopicConfig, given: Iterable[str]) -> list[dict]:
    """The config entries of a topic created with ``config``, as a CreateTopics v5+ answer lists
    them: every config of ``CONFIGS``, sourced from the topic where the request gave it
    (``given``: Kafka names), else from the defaults."""
    given = set(given)
    return [{"name": entry.kafka_name, "value": entry.text(getattr(config, entry.field)), "read_only": False,
             "config_source": DYNAMIC_TOPIC_CONFIG if entry.kafka_name in given else DEFAULT_CONFIG,
             "is_sensitive": False}
            for entry in CONFIGS]
