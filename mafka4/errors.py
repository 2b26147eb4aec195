"""Every error mafka4 raises on purpose, under one base class.

Each error says whether retrying the same request can succeed (``retriable``), whether it
means the request itself was wrong (``usage_error``: bad input, not a cluster problem; the
``mafka4`` command exits 2 for these and 1 for the others), and carries a message that names
the problem and the fix. Errors cross Ray actor boundaries by pickling, so every constructor
takes exactly one positional argument: the message (``KafkaWireError`` takes more as keywords,
with defaults, and pickles them too).

Broken invariants are not errors: they are ``assert`` statements.
"""


class MafkaError(Exception):
    """Base of every mafka4 error."""

    retriable = False
    usage_error = False

    def __init__(self, message: str):
        super().__init__(message)

    @property
    def message(self) -> str:
        return self.args[0]


# --- configuration and user input ---------------------------------------------------


class InvalidConfig(MafkaError):
    """A configuration value is out of range or of the wrong type."""

    usage_error = True


class InvalidTopicName(MafkaError):
    """A topic name breaks the naming rules in ``mafka4.names``."""

    usage_error = True


class InvalidRecord(MafkaError):
    """A record cannot be sent as given (e.g. a value that is not bytes and no serializer)."""

    usage_error = True


class MessageTooLarge(MafkaError):
    """A message or batch exceeds ``message_bytes_max`` / ``batch_bytes_max``."""

    usage_error = True


class DelayOutOfRange(MafkaError):
    """A delayed message asked to be due sooner than ``limits.DELAY_MS_MIN`` or later than its
    topic's ``delay_ms_max`` (``mafka4.delays.due_time_ms``); the message names the value, the
    range and the fix."""

    usage_error = True


class InvalidMessageId(MafkaError):
    """A message id is not ``PARTITION:OFFSET`` (``mafka4.delays.MessageId``): a physical partition
    and offset, as a producer's acknowledgement gives them."""

    usage_error = True


# --- cluster and metadata -------------------------------------------------------------


class ClusterNotRunning(MafkaError):
    """No local cluster is running, or the cluster's etcd/Ray cannot be reached."""


class ClusterAlreadyRunning(MafkaError):
    """``mafka4 up`` was asked for a home whose recorded cluster is alive."""


class NotDeployable(MafkaError):
    """``mafka4 deploy`` cannot bring mafka4 up on this Ray cluster: it lacks write or read nodes, a
    head-type node, or an etcd binary on a node, or a deployment there is half gone."""


class CoordinatorUnavailable(MafkaError):
    """etcd did not answer in time; metadata operations can be retried."""

    retriable = True


class UnknownTopic(MafkaError):
    """The topic does not exist."""

    usage_error = True


class TopicExists(MafkaError):
    """A topic with this name already exists."""


class NotEnoughWriteNodes(MafkaError):
    """The replication factor is larger than the number of live write nodes."""


class NotEnoughReadNodes(MafkaError):
    """``read_replicas`` is larger than the number of live read nodes."""

    usage_error = True


class MetadataConflict(MafkaError):
    """A compare-and-swap on metadata lost against a concurrent change; re-read and retry."""

    retriable = True


# --- write path -----------------------------------------------------------------------


class NotLeader(MafkaError):
    """The replica asked is not (or no longer) the partition leader; refresh metadata."""

    retriable = True


class StaleEpoch(MafkaError):
    """A request carried a leader epoch older than the replica's; the sender is fenced."""

    retriable = True


class NotEnoughReplicas(MafkaError):
    """acks=all refused: the ISR is smaller than ``min_insync_replicas``."""

    retriable = True


class DiskFull(MafkaError):
    """A replica could not append: its node's log directory is full (ENOSPC, or past the node's
    ``log_dir_bytes_max``). Nothing of the batch was written, so a retry cannot duplicate it;
    retriable, since space comes back (retention, an operator) or the leadership moves."""

    retriable = True


class OutOfOrderSequence(MafkaError):
    """An idempotent producer's batch skipped a sequence number.

    Retriable because it is the expected answer for batches that were in flight behind a
    failed one: the producer resends them in sequence order.
    """

    retriable = True


class UnknownProducer(OutOfOrderSequence):
    """The partition holds no state of the batch's producer id and the batch does not start at
    sequence 0 (Kafka's UNKNOWN_PRODUCER_ID).

    Usually an earlier batch is still on its way (the producer resends in sequence order and
    it is appended). If the producer's *oldest* unacknowledged batch gets this answer, the
    partition lost or expired the producer's state (retention, a new leader that never had
    its batches, more producers than ``producer_ids_max``): the producer continues under a
    new producer id from sequence 0.
    """

    retriable = True


class CorruptRecord(MafkaError):
    """A batch failed its CRC or framing check (it is never appended or served), or a reader
    found that its payload does not decompress or decode (the broker never decodes payloads)."""


class UnknownCodec(CorruptRecord):
    """A batch names a compression codec id this version does not know (``mafka4.compression``).

    A ``CorruptRecord``: its records cannot be read here, and whoever handles a corrupt batch
    (a leader refusing a produce, a feeder refetching) handles this one alike.
    """


class OffsetOutOfRange(MafkaError):
    """A fetch asked for an offset outside [log start offset, log end offset]."""


class RequestTimedOut(MafkaError):
    """A request did not complete within its deadline."""

    retriable = True


class FetchReplaced(MafkaError):
    """A consumer's newer fetch on the same connection replaced this one before it was answered
    (``frontend.fetch_sessions``): a connection has at most one fetch out per topic (per
    partition, Mafka3 mode). The consumer that sent the newer fetch no longer waits for this one."""

    retriable = True


class StreamLost(MafkaError):
    """A stream call's connection broke or could not be made (``runtime.stream_calls``): its
    outcome is unknown, as a call to an actor that died."""

    retriable = True


class BufferFull(MafkaError):
    """The producer buffer holds ``buffer_bytes_max`` and ``on_full="error"`` was chosen."""

    retriable = True


class ProducerClosed(MafkaError):
    """``send()`` was called after ``close()``."""


# --- consumer groups ------------------------------------------------------------------


class InvalidGroupName(MafkaError):
    """A consumer group name breaks the naming rules (those of topic names)."""

    usage_error = True


class UnknownGroup(MafkaError):
    """The group has no members and no committed offsets."""

    usage_error = True


class GroupNotEmpty(MafkaError):
    """The operation (e.g. resetting offsets) needs a group without active members."""


class InconsistentGroupProtocol(MafkaError):
    """A member asked for another partition assignor than the group's members use."""


class UnknownMember(MafkaError):
    """The coordinator has no session of this member: it expired (no heartbeat within the session
    timeout, or no sync within the rebalance timeout after a change) or the coordinator restarted.
    The member joins again; what it owned is another member's to claim."""


class CommitFailed(MafkaError):
    """A commit lost against a rebalance: this member no longer owns the partition, so its
    position was not committed and the new owner starts from the last committed offset."""


class PartitionNotAssigned(MafkaError):
    """``seek`` or ``nack`` named a partition this group member does not currently own."""


# --- read path --------------------------------------------------------------------------


class WrongReadMode(MafkaError):
    """The operation needs the other read mode (e.g. virtual partitions of a mafka3-mode topic)."""

    usage_error = True


class UnknownVirtualPartition(MafkaError):
    """A split, merge or read named a VP that does not exist (or no longer exists)."""

    usage_error = True


class InvalidLaneName(MafkaError):
    """A lane name broke the naming rules (a topic's: letters, digits, '.', '_' and '-')."""

    usage_error = True


class LanesExhausted(MafkaError):
    """A message named a new lane on a topic that already has ``lanes_max`` lanes."""

    usage_error = True


class UnknownLane(MafkaError):
    """A lane that is not open on the topic (or not yet in the layout a reader holds)."""

    usage_error = True


class InvalidReshard(MafkaError):
    """A split, merge or scale cannot be done as asked (ranges not adjacent, too many VPs, ...)."""

    usage_error = True


class ReshardConflict(MafkaError):
    """Another reshard of the topic runs, or a proposed cut is behind what the feeders already
    fed; re-read the layout and the feeders' progress and retry."""

    retriable = True


class ReadReplicaNotInSync(MafkaError):
    """The read replica asked is not in its virtual partition's RISR, so it serves no reads;
    fetch from another RISR member (re-read the VP's metadata)."""

    retriable = True


class RecordsLost(MafkaError):
    """Physical retention deleted records before every read node had fed them into the topic's
    virtual partitions (they were held for the topic's ``unfed_hold_ms_max`` first). The
    consumer raises it and then continues after the lost offsets; retrying cannot bring them back."""

    @classmethod
    def of(cls, topic: str, partition: int, first_offset: int, end_offset: int, vp: int | None = None) -> "RecordsLost":
        """The error for physical offsets ``[first_offset, end_offset)`` of ``partition``, as
        seen by the consumer of ``vp`` (None: by the whole topic)."""
        reader = f"virtual partition {vp} of topic {topic!r}" if vp is not None else f"topic {topic!r}"
        return cls(
            f"{reader} lost the messages at physical offsets [{first_offset}, {end_offset}) of partition "
            f"{partition}: retention deleted them before every read node had fed them. Nothing can bring them "
            f"back; the consumer continues after them. To prevent it, keep the read nodes running, or raise the "
            f"topic's unfed_hold_ms_max (None holds unfed data for ever, at the risk of filling the disk)"
        )


class InvalidDeadLetter(MafkaError):
    """A record of a dead-letter topic lacks a dead-letter header or holds one that does not read
    (``mafka4.dead_letters``): mafka4 did not dead-letter it."""


# --- experiments and analysis -----------------------------------------------------------


class InvalidEventLog(MafkaError):
    """An event log does not match ``simulations.schema.EVENT_SCHEMA``: a missing, unknown,
    mistyped or short column (on write), or a Parquet file with another schema (on read)."""

    usage_error = True


class NoEventLogs(MafkaError):
    """The directory to analyze does not exist or holds no event-log Parquet files; run an
    experiment or the fleet model first."""

    usage_error = True


class RunInTwoEventLogs(MafkaError):
    """Two event-log files hold rows of the same run (experiment, mode, consumers, topics, seed and
    repetition), e.g. a repetition measured again next to its first file: their rows would merge
    into one run. Move one of the files out of the directory analysed."""

    usage_error = True


class JoinTrialFailed(MafkaError):
    """A join trial's member (``bench vp-join``, ``bench rebalance``) failed, or its process ended
    before the trial did, or the trial's producer failed; the message carries the error, and its
    traceback is on the bench's stderr."""


class ProcessNotVisible(MafkaError):
    """A benchmark measures a process (a read node, a reference actor) through this machine's
    ``/proc``, and the process is not there: it runs on another machine, or it exited. Run the
    benchmark on the machine that runs the read nodes (``mafka4 up`` runs them all locally)."""


# --- fleet model (simulations/fleet) ----------------------------------------------------


class PlacementInfeasible(MafkaError):
    """Replicas cannot be placed rack-aware on the given nodes (fewer racks than the
    replication factor, or fewer nodes than racks)."""


class FleetTargetUnreachable(MafkaError):
    """No node count lets a design meet the produce tp999 target (its fixed latency already
    exceeds it); raise the target or lower the latency the calibration measured."""


class MissingDependency(MafkaError):
    """An optional dependency of the command is not installed; the message names what to install."""

    usage_error = True


# --- node agent (mafka4.runtime.node) ----------------------------------------------------


class InvalidNodeId(MafkaError):
    """A node id breaks the naming rules of ``mafka4.runtime.node_identity.validate_node_id`` (it
    names the node's Ray resource, its etcd key and its data directory)."""


# --- security (mafka4.security) --------------------------------------------------------


class NotAuthorized(MafkaError):
    """No ACL allows the authenticated principal the operation on the resource, or one denies it;
    the message names the principal, the operation, the resource and the ``mafka4 acl`` fix."""


class UserExists(MafkaError):
    """``mafka4 user add`` of a user that exists; remove it first or replace its password."""

    usage_error = True


class UnknownUser(MafkaError):
    """The user is not in the cluster's credentials (``mafka4 user list``)."""

    usage_error = True


class UnknownAclRule(MafkaError):
    """``mafka4 acl remove`` of a rule the cluster does not hold (``mafka4 acl list``)."""

    usage_error = True


class MissingCredential(MafkaError):
    """A credential file (``$MAFKA4_HOME/credentials``) is absent or unreadable; the message
    names the file and how to get one."""

    usage_error = True


# --- client protocol (mafka4.protocol) ---------------------------------------------------


class ProtocolError(MafkaError):
    """A frame of the client protocol is not what the protocol allows (not msgpack, an unknown key
    or API, a wrong type, beyond a bound); the message names what was wrong. The peer is not a
    mafka4 client or server of this version, or is broken: the server answers it, then closes."""


class UnsupportedVersion(ProtocolError):
    """The peer speaks another version of the client protocol, or asks for an API this node does
    not serve; use a client and a cluster of matching versions."""


class NotAuthenticated(MafkaError):
    """A request came before the connection authenticated (or a SASL step came out of turn):
    open the connection with a credential (``ClientConnection.open(..., exchange)``)."""


class AuthenticationFailed(MafkaError):
    """The connection's authentication failed (wrong secret, unknown user, a mechanism the server
    does not offer, or a server that could not prove it knows the credential); the server closes
    the connection. Check the credential (``mafka4 user add``)."""


# --- admin APIs (users and ACLs through the client port) ---


class ProtectedUser(MafkaError):
    """``mafka4 user remove`` or ``user add`` of the admin user: its credential is the operator's
    way in, kept by ``mafka4 up`` from ``$MAFKA4_HOME/credentials``, and changing it through the
    client port would lock the operator out."""

    usage_error = True


# --- Kafka protocol (mafka4.kafka) ----------------------------------------------------------


class KafkaWireError(MafkaError):
    """A Kafka request frame that cannot be served: an API key or version the node does not serve,
    or bytes that are not the request its header names (``kafka.wire.read_request``).

    ``error_code`` is Kafka's code for the answer (35 UNSUPPORTED_VERSION, 42 INVALID_REQUEST);
    ``correlation_id``, ``api_key`` and ``api_version`` are the header's, when the frame was long
    enough to hold them (None otherwise: then nothing can be answered, and the listener closes the
    connection). The client is not a Kafka client of a version this node serves, or is broken.
    """

    def __init__(self, message: str, *, error_code: int = 42, correlation_id: int | None = None,
                 api_key: int | None = None, api_version: int | None = None):
        super().__init__(message)
        self.error_code = error_code
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version

    def __reduce__(self):
        fields = {"error_code": self.error_code, "correlation_id": self.correlation_id, "api_key": self.api_key,
                  "api_version": self.api_version}
        return _kafka_wire_error, (type(self), self.message, fields)


def _kafka_wire_error(cls: type, message: str, fields: dict) -> KafkaWireError:
    return cls(message, **fields)
