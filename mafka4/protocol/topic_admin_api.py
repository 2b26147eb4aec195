"""The admin APIs of topics: TOPIC_CREATE, TOPIC_DELETE, TOPIC_DESCRIBE, TOPIC_SCALE and LANE_OPEN, and what a create request means.

A node does not change the topic itself: it checks the request and the principal, writes an
intent for the controller and answers with the intent's result (``frontend.topic_handlers``), so
admin changes flow client -> node -> etcd intent -> controller -> actors, and no client writes
cluster metadata (issue 36). Each needs an ACL on the topic: CREATE (or CREATE on the cluster,
as in Kafka), DELETE, ALTER to scale, DESCRIBE to describe.

A create request carries the topic's config as JSON text (``partition_state.config_to_json``),
so a config field added later needs no new message. ``new_topic_config`` is the one meaning of
a create request's settings: the client resolves them before connecting (a bad name or value is
reported as such, not as a missing cluster), and the node resolves the text it received again
(``config_of``), since it trusts nothing the client checked.

A describe answer (``frontend.topic_description``'s report: etcd's state beside what each live
leader says) travels as JSON text per row, one for each partition and VP, for the reason a
config does: it is a report for people whose fields grow, and a row stays far below
``PROTOCOL_STR_BYTES_MAX`` where a whole topic of a thousand VPs would not.
``description_answer`` and ``description_of`` convert it. Pure: message types and their conversions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from mafka4.errors import InvalidConfig, ProtocolError
from mafka4.limits import READ_MODE_DEFAULT, ReadMode, TopicConfig, replace_config
from mafka4.names import validate_topic_name
from mafka4.physical.partition_state import config_from_json, config_to_json
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


@dataclass(frozen=True, slots=True)
class LaneOpenRequest:
    """Where lane ``lane`` of topic ``name`` is, opened if it is not yet (a producer's first message in
    it, or an admin's open). ``fallback`` ("" any) and ``priority`` (-1 any): the policy it must have
    (``layout.LanePolicy``); a lane it opens gets them (defaults for "" and -1)."""

    name: str
    lane: str
    fallback: str = ""
    priority: int = -1


@dataclass(frozen=True, slots=True)
class LaneOpenAnswer:
    """``frontend.topic_intents.OpenedLane``: the lane's id in ``name``'s layout, or (mafka3 mode) the
    topic ``name`` that holds the lane, with lane id 0."""

    name: str
    lane_id: int


@dataclass(frozen=True, slots=True)
class TopicDescribeRequest:
    """Describe topic ``name``: its config, partitions and VPs with what their leaders report."""

    name: str


@dataclass(frozen=True, slots=True)
class TopicDescribeAnswer:
    """``frontend.topic_description.describe_topic``'s report as JSON texts: the config
    (``config_to_json``'s map), a row per partition, per VP and per lane in order, the read loss
    (``{"<partition>": [[first, end], ...]}``) and the delayed messages (``keys.delay_state``'s value)."""

    name: str
    config_json: str
    partitions: tuple[str, ...]
    virtual_partitions: tuple[str, ...]
    read_loss_json: str
    lanes: tuple[str, ...] = ()
    # The delay scheduler's state of the topic's delayed messages ("null": none was ever sent).
    delays_json: str = "null"


def description_answer(description: dict) -> TopicDescribeAnswer:
    """The answer carrying ``describe_topic``'s ``description``."""
    return TopicDescribeAnswer(
        description["topic"], config_json(description["config"]),
        tuple(json.dumps(row, sort_keys=True) for row in description["partitions"]),
        tuple(json.dumps(row, sort_keys=True) for row in description["virtual_partitions"]),
        json.dumps({str(partition): ranges for partition, ranges in description["read_loss"].items()}),
        tuple(json.dumps(row, sort_keys=True) for row in description.get("lanes", ())),
        json.dumps(description.get("delays"), sort_keys=True))


def description_of(answer: TopicDescribeAnswer) -> dict:
    """The description ``answer`` carries, in ``describe_topic``'s shape (``config`` a
    ``TopicConfig``, ``read_loss`` keyed by partition number); ``ProtocolError`` if a text is not
    the JSON it should be."""
    try:
        return {"topic": answer.name, "config": config_from_json(json.loads(answer.config_json)),
                "partitions": [json.loads(row) for row in answer.partitions],
                "virtual_partitions": [json.loads(row) for row in answer.virtual_partitions],
                "lanes": [json.loads(row) for row in answer.lanes],
                "delays": json.loads(answer.delays_json),
                "read_loss": {int(partition): ranges for partition, ranges in json.loads(answer.read_loss_json).items()}}
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as error:
        raise ProtocolError(f"the description of topic {answer.name!r} is not the JSON a node sends ({error!r:.200})") from None


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
register(ApiKey.TOPIC_DESCRIBE, TopicDescribeRequest, TopicDescribeAnswer)
register(ApiKey.TOPIC_SCALE, TopicScaleRequest, TopicScaleAnswer)
register(ApiKey.LANE_OPEN, LaneOpenRequest, LaneOpenAnswer)
