"""mafka4's errors as Kafka's error codes, for the Kafka listener's answers (pure).

A Kafka client acts on the code alone: it retries a retriable one (after refreshing its metadata
for the "not leader" family) and fails the request on the others. So each mafka4 error maps to
the Kafka code whose client behaviour is right for it: a replica that moved or is not in sync
yet is ``NOT_LEADER_OR_FOLLOWER`` (refresh and retry), a missing topic
``UNKNOWN_TOPIC_OR_PARTITION``, a refused ACL ``TOPIC_AUTHORIZATION_FAILED`` (or the group's or
the cluster's, by resource). What has no Kafka equivalent is ``UNKNOWN_SERVER_ERROR``, and the
message (where the version carries one) says what happened.
"""

from __future__ import annotations

from mafka4 import errors

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RECORD_LIST_TOO_LARGE = 18
INVALID_TOPIC_EXCEPTION = 17
NOT_ENOUGH_REPLICAS = 19
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
KAFKA_STORAGE_ERROR = 56
SASL_AUTHENTICATION_FAILED = 58
UNKNOWN_PRODUCER_ID = 59
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100

# Most specific class first: the first class an error is an instance of names its code.
_CODES = (
    (errors.UnknownCodec, UNSUPPORTED_COMPRESSION_TYPE),
    (errors.CorruptRecord, CORRUPT_MESSAGE),
    (errors.InvalidRecord, INVALID_RECORD),
    (errors.MessageTooLarge, RECORD_LIST_TOO_LARGE),  # a request's records beyond the bound (record_batches)
    (errors.KafkaWireError, INVALID_REQUEST),
    (errors.UnknownTopic, UNKNOWN_TOPIC_OR_PARTITION),
    (errors.UnknownVirtualPartition, UNKNOWN_TOPIC_OR_PARTITION),
    (errors.NotLeader, NOT_LEADER_OR_FOLLOWER),
    (errors.StaleEpoch, NOT_LEADER_OR_FOLLOWER),
    (errors.ReadReplicaNotInSync, NOT_LEADER_OR_FOLLOWER),
    (errors.StreamLost, NOT_LEADER_OR_FOLLOWER),
    (errors.NotEnoughReplicas, NOT_ENOUGH_REPLICAS),
    (errors.RequestTimedOut, REQUEST_TIMED_OUT),
    (errors.OffsetOutOfRange, OFFSET_OUT_OF_RANGE),
    (errors.UnknownProducer, UNKNOWN_PRODUCER_ID),
    (errors.OutOfOrderSequence, OUT_OF_ORDER_SEQUENCE_NUMBER),
    (errors.DiskFull, KAFKA_STORAGE_ERROR),
    (errors.TopicExists, TOPIC_ALREADY_EXISTS),
    (errors.InvalidTopicName, INVALID_TOPIC_EXCEPTION),
    (errors.InvalidGroupName, INVALID_GROUP_ID),
    (errors.UnknownMember, UNKNOWN_MEMBER_ID),
    (errors.InconsistentGroupProtocol, INCONSISTENT_GROUP_PROTOCOL),
    (errors.InvalidConfig, INVALID_CONFIG),
    (errors.AuthenticationFailed, SASL_AUTHENTICATION_FAILED),
    (errors.UnsupportedVersion, UNSUPPORTED_VERSION),
)

_AUTHORIZATION_BY_RESOURCE = {"topic": TOPIC_AUTHORIZATION_FAILED, "group": GROUP_AUTHORIZATION_FAILED}


def kafka_error_code(error: BaseException, resource: str = "topic") -> int:
    """The Kafka error code that answers a request that raised ``error``.

    ``resource`` is what the request named ("topic", "group" or "cluster"): a refused ACL is that
    resource's authorization failure.
    """
    if isinstance(error, errors.NotAuthorized):
        return _AUTHORIZATION_BY_RESOURCE.get(resource, CLUSTER_AUTHORIZATION_FAILED)
    for cls, code in _CODES:
        if isinstance(error, cls):
            return code
    return UNKNOWN_SERVER_ERROR


def kafka_error_message(error: BaseException) -> str:
    """The message that goes beside the code where the answer's version has room for one."""
    if isinstance(error, errors.MafkaError):
        return str(error)
    return f"the server failed: {type(error).__name__}: {error}"
