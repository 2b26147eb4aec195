"""The admin APIs of topics: TOPIC_CREATE, TOPIC_DELETE and TOPIC_SCALE, and what a create request means.

A node does not change the topic itself: it checks the request and the principal, writes an
intent for the controller and answers with the intent's result (``frontend.topic_handlers``), so
admin changes flow client -> node -> etcd intent -> controller -> actors, and no client writes
cluster metadata (issue 36). Each needs an ACL on the topic: CREATE (or CREATE on the cluster,
as in Kafka), DELETE, ALTER to scale.

A create request carries the topic's config as JSON text (``partition_state.config_to_json``),
so a config field added later needs no new message. ``new_topic_config`` is the one meaning of
a create request's settings: the client resolves them before connecting (a bad name or value is
reported as such, not as a missing cluster), and the node resolves the text it received again
(``config_of``), since it trusts nothing the client checked. API 22 (describe) is reserved: it
needs the live offsets of the actors. Pure: message types and their conversions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mafka4.errors import InvalidConfig
from mafka4.limits import READ_MODE_DEFAULT, ReadMode, TopicConfig, replace_config
from mafka4.names import validate_topic_name
from mafka4.physical.partition_state import config_to_json
from mafka4.protocol.messages import ApiKey, register
from mafka4.protocol.metadata_api import TopicInfo


def new_topic_config(name: str, /, partitions: int = 1, replication_factor: int = 1,
                     virtual_partitions: int | None = None, read_replicas: int = 1,
                     read_mode: ReadMode | str = READ_MODE_DEFAULT, **overrides) -> TopicConfig:
    """The resolved config of a topic to create, or ``InvalidTopicName``/``InvalidConfig``.

    ``overrides`` are other ``TopicConfig`` fields (an unknown one is ``InvalidConfig``). Needs no
    cluster, so callers (the CLI) can refuse a bad request before connecting.
    """
    validate_topic_name(name)
    return replace_config(TopicConfig(), partitions=partitions, replication_factor=replication_factor,
                          virtual_partitions=virtual_partitions, read_replicas=read_replicas, read_mode=read_mode,
                          **overrides).resolved()


@dataclass(frozen=True, slots=True)
class TopicCreateRequest:
    """Create topic ``name`` with the config ``config_json`` spells (``config_to_json``'s map)."""

    name: str
    config_json: str


@dataclass(frozen=True, slots=True)
class TopicDeleteRequest:
    """Delete topic ``name`` with its data on every node."""

    name: str


@dataclass(frozen=True, slots=True)
class TopicDeleteAnswer:
    name: str


@dataclass(frozen=True, slots=True)
class TopicScaleRequest:
    """Split or merge until mafka4-mode topic ``name`` has ``virtual_partitions`` active VPs."""

    name: str
    virtual_partitions: int


@dataclass(frozen=True, slots=True)
class EpochInfo:
    """A split epoch the scale opened (``virtual.layout.SplitEpoch`` without its ranges): the VPs it
    retired (``parents``) and opened (``children``) at physical offsets ``cut``, one per partition."""

    epoch: int
    parents: tuple[int, ...]
    children: tuple[int, ...]
    cut: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicScaleAnswer:
    """The epochs opened, oldest first (none: the topic had that many VPs already)."""

    epochs: tuple[EpochInfo, ...]


def config_json(config: TopicConfig) -> str:
    """``config`` as a create request carries it."""
    return json.dumps(config_to_json(config), sort_keys=True)


def config_of(request: TopicCreateRequest) -> TopicConfig:
    """The resolved config ``request`` asks for: ``InvalidTopicName``/``InvalidConfig`` naming the
    problem, whatever the text holds."""
    try:
        settings = json.loads(request.config_json)
    except (ValueError, RecursionError) as error:  # RecursionError: nested too deep for the decoder
        raise InvalidConfig(f"the config of topic {request.name!r} is not JSON ({error}); send "
                            f"config_to_json's map of a TopicConfig") from None
    if not isinstance(settings, dict):
        raise InvalidConfig(f"the config of topic {request.name!r} is a JSON {type(settings).__name__}, not a map "
                            f"of TopicConfig fields")
    return new_topic_config(request.name, **settings)


register(ApiKey.TOPIC_CREATE, TopicCreateRequest, TopicInfo)  # the topic as the controller created it
register(ApiKey.TOPIC_DELETE, TopicDeleteRequest, TopicDeleteAnswer)
register(ApiKey.TOPIC_SCALE, TopicScaleRequest, TopicScaleAnswer)
