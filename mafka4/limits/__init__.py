"""Every bound and default in mafka4, in one place: this module and ``limits.servers``.

Each config is a frozen dataclass validated on construction: a bad value raises
``InvalidConfig`` naming the field, the value and the allowed range. Units are the last
part of every name (``linger_ms``, ``batch_bytes_max``). The comment on a field says what
happens when the bound is hit. The bounds callers do not set (timeouts, poll intervals and
retries of the drivers around the cores) are named constants in the last section.

The configs of the servers' parts (logs, replicas, read nodes, feed streams, client ports, the
controller, a local cluster's shape) are ``limits.servers``'s: a client never uses them, and a
client command should not pay to build them at every start (issue 36). Every constant is here.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, fields

from mafka4.compression import Codec
from mafka4.errors import InvalidConfig

KiB = 1024
MiB = 1024 * KiB
SECOND_MS = 1000
DAY_MS = 24 * 3600 * SECOND_MS


class Acks(enum.Enum):
    """How many replicas must have a batch before the producer is answered."""

    NONE = "0"  # fire and forget: answered before the leader appends
    LEADER = "1"  # answered once the leader appended
    ALL = "all"  # answered once every ISR member has it (and the ISR is big enough)

    @classmethod
    def parse(cls, value: object) -> "Acks":
        """``value`` as given by a user ("all", "-1", 1, ...); an ``Acks`` is returned as it is."""
        if isinstance(value, Acks):
            return value
        text = str(value).strip().lower()
        if text == "-1":
            text = "all"
        for acks in cls:
            if acks.value == text:
                return acks
        raise InvalidConfig(f"acks={value!r} is not valid: use one of 'all', '1' or '0'")


class OnFull(enum.Enum):
    """What ``Producer.send`` does when the buffer holds ``buffer_bytes_max``."""

    BLOCK = "block"  # wait up to block_ms_max for space, then raise BufferFull
    ERROR = "error"  # raise BufferFull at once

    @classmethod
    def parse(cls, value: object) -> "OnFull":
        for mode in cls:
            if mode.value == value or mode is value:
                return mode
        raise InvalidConfig(f"on_full={value!r} is not valid: use 'block' or 'error'")


class OffsetReset(enum.Enum):
    """Where a group member starts a partition that has no committed offset, or one below the
    log start offset (deleted by retention)."""

    EARLIEST = "earliest"  # the log start offset: read everything still kept
    LATEST = "latest"  # the high watermark: only messages committed from now on

    @classmethod
    def parse(cls, value: object) -> "OffsetReset":
        for reset in cls:
            if reset.value == value or reset is value:
                return reset
        raise InvalidConfig(f"auto_offset_reset={value!r} is not valid: use 'earliest' or 'latest'")


class ReadMode(enum.StrEnum):
    """How consumers read a topic (DESIGN.md section 6).

    A ``StrEnum`` because the values are what etcd's topic configs, the ``--read-mode`` flag and
    the experiments' event logs hold: a member is written as its plain string and equals it.
    """

    MAFKA4 = "mafka4"  # from virtual partitions fed from the physical ones, on read nodes
    MAFKA3 = "mafka3"  # from the physical partitions: no virtual partitions, no read replicas

    @classmethod
    def parse(cls, value: object) -> "ReadMode":
        """``value`` as a user or a stored config gives it ("mafka4"); a ``ReadMode`` as it is."""
        try:
            return cls(value)
        except (TypeError, ValueError):
            choices = ", ".join(repr(mode.value) for mode in cls)
            raise InvalidConfig(f"read_mode={value!r} is not valid: use one of {choices}") from None


# Names of the partition assignors of consumer groups (mafka4.coordinator.groups.assignors).
ASSIGNOR_NAMES = ("range", "sticky")
# How a consumer that reads lanes of several priorities orders them (ConsumerConfig.lane_order, client.lane_shares).
LANE_ORDERS = ("strict", "weighted")


def _check_range(config: object, name: str, low: int, high: int | None = None) -> None:
    value = getattr(config, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfig(f"{name}={value!r} must be an integer")
    if value < low or (high is not None and value > high):
        upper = "" if high is None else f" and at most {high}"
        raise InvalidConfig(f"{name}={value} must be at least {low}{upper}")


def _check_optional_range(config: object, name: str, low: int) -> None:
    if getattr(config, name) is not None:
        _check_range(config, name, low)


def parse_setting(text: str) -> tuple[str, int]:
    """``NAME=VALUE`` (an integer setting, as ``--controller-setting`` takes it) as ``(name, value)``."""
    name, separator, value = text.partition("=")
    if not separator or not name or not value.lstrip("-").isdigit():
        raise InvalidConfig(f"setting {text!r} is not NAME=INTEGER (e.g. vp_merge_delay_ms=5000)")
    return name, int(value)


def replace_config(config, /, **changes):
    """``dataclasses.replace`` that names unknown fields in an ``InvalidConfig``.

    ``config`` is positional-only so that a setting named ``config`` lands in ``changes``
    and is refused like any other unknown setting, instead of raising ``TypeError``.
    """
    known = {f.name for f in fields(config)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise InvalidConfig(
            f"unknown setting(s) {', '.join(unknown)} for {type(config).__name__}; "
            f"known: {', '.join(sorted(known))}"
        )
    values = {f.name: getattr(config, f.name) for f in fields(config)}
    values.update(changes)
    return type(config)(**values)


# Topic shape bounds: they bound actors per topic on a small cluster.
PARTITIONS_MAX = 1024
REPLICATION_FACTOR_MAX = 7
TOPIC_NAME_CHARS_MAX = 200
# The ``--read-mode`` choices, in the order its help lists them.
READ_MODES = tuple(mode.value for mode in ReadMode)
# The read mode of a topic created without one, by ``Admin.create_topic`` and ``mafka4 topic
# create`` alike. TopicConfig's own field keeps MAFKA3: a stored config without the field was
# written before read modes existed, and is a Mafka3 topic.
READ_MODE_DEFAULT = ReadMode.MAFKA4
# Virtual partitions of one topic: the default and the ceiling of TopicConfig.virtual_partitions_max.
# Three etcd writes name every VP of a topic at once: the topic's creation, a one-member group's
# claim of every VP, and that member's commit (and closing commit) of every VP
# (tests/unit/test_etcd_requests.py). Each goes in transactions of at most ETCD_TXN_BYTES_MAX
# (``metadata.txn_runs``), so names and node ids of any allowed length fit; with everyday ones
# each is still one transaction, of 0.4-1.0 MB at 1,024 VPs. Raising the ceiling still means
# raising ETCD_TXN_OPS_MAX with it, a flag of a running etcd (restart it; ray_cluster.yaml's too),
# and checking what else takes every VP of a topic at once (the reads of a group's snapshot and a
# node's view, the client protocol's VP_METADATA answer): not measured past 1,024.
VIRTUAL_PARTITIONS_MAX = 1024
# Lanes of one topic (``virtual.layout``): the default and the ceiling of TopicConfig.lanes_max.
# Each open lane is at least one VP (21.5 KB and 7.7e-5 idle cores on a read node), and every VP
# counts against virtual_partitions_max; a lane id travels in a batch as an unsigned 16-bit value.
LANES_MAX_DEFAULT = 256
LANES_MAX = VIRTUAL_PARTITIONS_MAX - 1
LANE_NAME_CHARS_MAX = 200
# Lane priorities are 0..LANE_PRIORITY_MAX, higher served first: Mafka3's ten message priority levels.
LANE_PRIORITY_MAX = 9
# Delayed delivery (``mafka4.delays``): a delayed message is due DELAY_MS_MIN to its topic's
# delay_ms_max after it is sent. Below a second a delay is within the scheduler's release precision
# (the goal is 1 s at p99), so it would promise what the timer cannot keep. DELAY_MS_MAX_DEFAULT, a
# week, is the default retention too (issue 41); DELAY_MS_MAX, the ceiling of TopicConfig.delay_ms_max,
# a year: every pending message costs scheduler memory (``scheduling.delay_schedule``) for as long as it
# waits, and its delay topic segment must outlive its delay.
DELAY_MS_MIN = SECOND_MS
DELAY_MS_MAX_DEFAULT = 7 * DAY_MS
DELAY_MS_MAX = 365 * DAY_MS
# The widths of the slots of a delay schedule (``scheduling.delay_schedule``): the entries
# due within one slot are held in one array. Near slots (due within the current far slot) are
# sorted when they come due: narrower ones cost less to sort, and a second is the release
# precision the schedule aims at. Far slots only hold entries until their time comes near (then
# they are spread into near slots): wider ones cost less memory per entry when few are due per
# second (an array and a dict entry per slot), a minute keeps that under 2 bytes per entry at 1M
# entries over a week, and spreading one is a pass over a minute's entries.
DELAY_SLOT_MS = SECOND_MS
DELAY_FAR_SLOT_MS = 60 * SECOND_MS
# The delay scheduler (``scheduling.delay_service``). A worker's poll waits at most DELAY_POLL_MS_MAX
# (less when a message is due sooner): the lateness a release may add to its due time, beyond the
# produce and the read of its copy. It releases at most DELAY_RELEASES_PER_POLL_MAX messages between
# two polls, so that markers and cancels are read while a backlog of due messages drains. It writes
# its state (where to read again, what waits, which ``topic describe`` shows) every
# DELAY_STATE_INTERVAL_MS. It looks for new delay topics every DELAY_TOPICS_SCAN_INTERVAL_S.
DELAY_POLL_MS_MAX = 100
DELAY_RELEASES_PER_POLL_MAX = 1000
DELAY_STATE_INTERVAL_MS = SECOND_MS
DELAY_TOPICS_SCAN_INTERVAL_S = 2
# How often the active controller looks whether its delay scheduler child still runs (and a standby
# whether it became active): the longest a scheduler that died stays down.
DELAY_SCHEDULER_CHECK_INTERVAL_S = 1
# etcd refuses a request larger than its --max-request-bytes, 1.5 MiB unless raised; mafka4's etcd
# keeps that default (a transaction is one request, every operation in it counted).
ETCD_REQUEST_BYTES_MAX = 3 * MiB // 2
# The most a transaction of mafka4 takes, as encoded: etcd checks the request wrapped in its raft
# entry, whose header (an id, and with etcd's own auth a user name and a revision) takes tens of
# bytes; 4 KiB leave room for any user name. A write too large for it is sent in runs of
# transactions, each safe alone (``metadata.txn_runs``; the stores say why each is).
ETCD_TXN_BYTES_MAX = ETCD_REQUEST_BYTES_MAX - 4 * KiB
# Operations etcd accepts in one transaction (its --max-txn-ops, which mafka4's etcd gets; etcd's
# own default of 128 would refuse topics of more than ~120 VPs). It counts the longest of a
# transaction's compare, success and failure lists, and a nested transaction may have only what
# its parent left. The most: creating a topic (its config, every partition key, its split epoch
# and every VP key) and a one-member group's closing commit (an offset write, nested two deep,
# and an owner release per VP).
ETCD_TXN_OPS_MAX = max(2 + PARTITIONS_MAX + VIRTUAL_PARTITIONS_MAX, 2 * VIRTUAL_PARTITIONS_MAX + 2)
# Replicas of one virtual partition, each on its own read node.
READ_REPLICAS_MAX = 7
# A fault injected into a replica actor (set_fault) delays its loops by at most this.
FAULT_DELAY_MS_MAX = 60 * 1000
# Rows one actor keeps of a stage trace (``mafka4.stage_trace``) until they are taken: ~100 bytes
# each, so at most ~100 MB per traced topic on an actor; an experiment of 50,000 messages over
# 32 VPs writes about 2 rows a message on a read node. Rows beyond it are counted, not kept.
STAGE_TRACE_ROWS_MAX = 1_000_000
# Topics one process join-traces at once (``mafka4.join_trace``): a bench traces one per trial and
# stops it; a start beyond this stops the oldest, so traces a crashed bench left on cannot pile up.
JOIN_TRACE_TOPICS_MAX = 16


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's shape and per-topic overrides, stored in etcd at creation."""

    partitions: int = 1
    replication_factor: int = 1
    min_insync_replicas: int = 1
    retention_ms: int | None = 7 * DAY_MS
    retention_bytes: int | None = None
    segment_bytes_max: int = 64 * MiB
    replica_lag_ms_max: int = 10 * SECOND_MS
    # Elect a leader outside the ISR when no ISR member is alive (may lose acknowledged data).
    unclean_leader_election: bool = False
    # Given as a ReadMode or its string; held as a ReadMode. Topics are created with
    # READ_MODE_DEFAULT unless the caller says otherwise.
    read_mode: ReadMode = ReadMode.MAFKA3
    # Virtual partitions at creation (None: one per physical partition; 0 in mafka3 mode).
    virtual_partitions: int | None = None
    # Replicas of each virtual partition on distinct live read nodes (creation fails with
    # NotEnoughReadNodes beyond them; ignored in mafka3 mode).
    read_replicas: int = 1
    # A read replica not caught up with its VP leader this long leaves the RISR and stops serving reads.
    read_replica_lag_ms_max: int = 10 * SECOND_MS
    # Active virtual partitions of the topic: creation, a split and a scale beyond it are refused
    # with InvalidReshard (merge first, or raise it at creation).
    virtual_partitions_max: int = VIRTUAL_PARTITIONS_MAX
    # Lanes the topic may open (each on its first message; a message naming one more is refused
    # with LanesExhausted; ignored in mafka3 mode, where a lane is a topic of its own).
    lanes_max: int = LANES_MAX_DEFAULT
    # The longest delay a message of the topic may ask for (``Producer.send(delay_ms=...)``); a
    # longer one (or one below DELAY_MS_MIN) is refused with DelayOutOfRange.
    delay_ms_max: int = DELAY_MS_MAX_DEFAULT
    # Segments a read node has not fed yet outlive retention by up to this (LogConfig.unfed_hold_ms_max:
    # past it they are deleted and consumers get RecordsLost; None holds for ever and risks a
    # full disk while a read node is gone; ignored in mafka3 mode).
    unfed_hold_ms_max: int | None = DAY_MS
    # How often the physical replicas apply retention (LogConfig.retention_check_interval_ms).
    retention_check_interval_ms: int = 60 * SECOND_MS

    def __post_init__(self) -> None:
        if not isinstance(self.unclean_leader_election, bool):
            raise InvalidConfig(f"unclean_leader_election={self.unclean_leader_election!r} must be true or false")
        _check_range(self, "partitions", 1, PARTITIONS_MAX)
        _check_range(self, "replica_lag_ms_max", 1)
        _check_range(self, "replication_factor", 1, REPLICATION_FACTOR_MAX)
        _check_range(self, "min_insync_replicas", 1, REPLICATION_FACTOR_MAX)
        if self.min_insync_replicas > self.replication_factor:
            raise InvalidConfig(
                f"min_insync_replicas={self.min_insync_replicas} is larger than "
                f"replication_factor={self.replication_factor}: acks=all could never succeed; "
                f"lower min_insync_replicas or raise the replication factor"
            )
        _check_optional_range(self, "retention_ms", 1)
        _check_optional_range(self, "retention_bytes", 0)
        _check_optional_range(self, "unfed_hold_ms_max", 0)
        _check_range(self, "retention_check_interval_ms", 100, DAY_MS)
        _check_range(self, "segment_bytes_max", 4 * KiB, 1024 * MiB)
        _check_range(self, "delay_ms_max", DELAY_MS_MIN, DELAY_MS_MAX)
        self._check_read_path()

    def _check_read_path(self) -> None:
        object.__setattr__(self, "read_mode", ReadMode.parse(self.read_mode))
        _check_range(self, "read_replica_lag_ms_max", 1)
        _check_range(self, "read_replicas", 0, READ_REPLICAS_MAX)
        if self.read_mode is ReadMode.MAFKA3:
            if self.virtual_partitions not in (None, 0):
                raise InvalidConfig(
                    f"virtual_partitions={self.virtual_partitions}: a read_mode='mafka3' topic has no virtual "
                    f"partitions (consumers read the physical ones); use read_mode='mafka4' or drop virtual_partitions"
                )
            return
        _check_range(self, "virtual_partitions_max", 1, VIRTUAL_PARTITIONS_MAX)
        _check_range(self, "lanes_max", 0, LANES_MAX)
        if self.virtual_partitions is not None:
            _check_range(self, "virtual_partitions", 1, self.virtual_partitions_max)
        _check_range(self, "read_replicas", 1, READ_REPLICAS_MAX)

    @property
    def virtual_partition_count(self) -> int:
        """Virtual partitions at creation: 0 in mafka3 mode, else ``virtual_partitions`` or P."""
        if self.read_mode is ReadMode.MAFKA3:
            return 0
        return self.partitions if self.virtual_partitions is None else self.virtual_partitions

    @property
    def read_replica_count(self) -> int:
        return 0 if self.read_mode is ReadMode.MAFKA3 else self.read_replicas

    def resolved(self) -> "TopicConfig":
        """This config with the read-path defaults spelled out, as stored at creation."""
        return replace_config(self, virtual_partitions=self.virtual_partition_count, read_replicas=self.read_replica_count)

    def virtual_config(self) -> "VirtualConfig":
        return VirtualConfig(virtual_partitions_max=self.virtual_partitions_max, lanes_max=self.lanes_max)


# The one default an environment variable sets: the compression codec of every Producer that
# does not choose one, for the whole process, so that one run of the whole test suite (the
# integration and chaos tests included) can send every batch compressed.
COMPRESSION_ENV = "MAFKA4_COMPRESSION"


def default_compression() -> Codec:
    """The codec a Producer uses when not told: ``$MAFKA4_COMPRESSION``, else none."""
    return Codec.parse(os.environ.get(COMPRESSION_ENV) or str(Codec.NONE), setting=COMPRESSION_ENV)


# Batches a partition leader remembers per producer id to answer retried batches, unless its
# ReplicaConfig (``limits.servers``) says otherwise: a Producer keeps no more in flight per partition.
PRODUCER_BATCHES_REMEMBERED_DEFAULT = 5


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """Bounds of one ``Producer``."""

    acks: Acks = Acks.ALL
    # Codec of every batch the producer sends: "none", "lz4" or "zstd" (mafka4.compression).
    # None: default_compression(), read when a Producer starts, not here, so that a bad
    # $MAFKA4_COMPRESSION fails the producer, not every import that builds a ProducerConfig.
    # batch_bytes_max and buffer_bytes_max count bytes before compression, so a codec never
    # changes which messages fit.
    compression: Codec | None = None
    # A partition's open batch is sent when it is this old, even if not full.
    linger_ms: int = 5
    # A batch is sent when adding the next message would pass this size (a larger message
    # travels alone in its own batch, as in Kafka).
    batch_bytes_max: int = 1 * MiB
    # One message (key + value + headers) larger than this is refused with MessageTooLarge.
    message_bytes_max: int = 1 * MiB
    # Bytes held by unsent and unacknowledged messages; on_full decides what happens beyond.
    buffer_bytes_max: int = 64 * MiB
    on_full: OnFull = OnFull.BLOCK
    # With on_full="block", send() waits at most this long for buffer space.
    block_ms_max: int = 60 * SECOND_MS
    # Unacknowledged batches per partition; more wait in the accumulator. At most the number
    # of batches a leader remembers per producer (PRODUCER_BATCHES_REMEMBERED_DEFAULT), so that
    # any retry is recognised as one.
    in_flight_batches_max: int = 5
    # First and largest pause before resending a batch that failed retriably.
    retry_backoff_ms: int = 50
    retry_backoff_ms_max: int = 1 * SECOND_MS
    # A message not acknowledged this long after send() fails with RequestTimedOut.
    delivery_timeout_ms: int = 120 * SECOND_MS
    # Metadata is re-read at least this often even without errors.
    metadata_max_age_ms: int = 30 * SECOND_MS

    def __post_init__(self) -> None:
        object.__setattr__(self, "acks", Acks.parse(self.acks))
        if self.compression is not None:
            object.__setattr__(self, "compression", Codec.parse(self.compression))
        object.__setattr__(self, "on_full", OnFull.parse(self.on_full))
        _check_range(self, "linger_ms", 0, 60 * SECOND_MS)
        _check_range(self, "batch_bytes_max", 1 * KiB, 64 * MiB)
        _check_range(self, "message_bytes_max", 1, 64 * MiB)
        _check_range(self, "buffer_bytes_max", self.batch_bytes_max)
        _check_range(self, "block_ms_max", 0)
        _check_range(self, "in_flight_batches_max", 1, PRODUCER_BATCHES_REMEMBERED_DEFAULT)
        _check_range(self, "retry_backoff_ms", 0)
        _check_range(self, "retry_backoff_ms_max", self.retry_backoff_ms)
        _check_range(self, "delivery_timeout_ms", 1)
        _check_range(self, "metadata_max_age_ms", 1)

    def resolved(self) -> "ProducerConfig":
        """This config with the process defaults spelled out, as a Producer runs it."""
        if self.compression is not None:
            return self
        return replace_config(self, compression=default_compression())


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Bounds of one ``Consumer``."""

    # One fetch returns at most this many bytes per partition (at least one whole batch).
    fetch_bytes_max: int = 4 * MiB
    # A fetch with nothing new waits at most this long (Kafka's fetch.max.wait.ms default), while
    # the consumer reads: data ends the wait at once, and a VP added while its node's fetch is
    # out is fetched at once.
    fetch_wait_ms_max: int = 500
    # A fetch answered empty is followed by one that may wait twice as long, up to this (data or
    # an error brings the wait back to fetch_wait_ms_max; a value below it means no backing off):
    # an idle consumer then asks each node (each leader, Mafka3 mode) every 30 s, as often as a
    # group member heartbeats (GROUP_HEARTBEAT_WAIT_MS). Data still ends every wait at once, a
    # role change on the node ends it too (long_poll), and a fetch that should ask for something
    # else is sent again at once (client.idle_waits). A node whose host vanishes is noticed by
    # TCP keepalive (PROTOCOL_PEER_SILENT_S_MAX); one that hangs with its connection open only
    # when the fetch to it times out, after this wait.
    fetch_idle_wait_ms_max: int = 30 * SECOND_MS
    # poll() returns at most this many messages (a member reading more lanes than this with
    # lane_order="weighted" may take one message of each: none starves).
    poll_messages_max: int = 10_000
    # The settings below apply only to a consumer in a group.
    # Positions are committed by poll() when this long passed since the last commit (None:
    # only commit() and close() commit, and a rebalance commits what is owned before release).
    # Positions that have not moved since a commit the coordinator answered are not sent again
    # (as librdkafka; Kafka's Java client sends them), so an idle member sends no commits and
    # its poll() does not wake for them; after a sync of the group, or a commit not answered,
    # the next one is sent whatever the positions.
    auto_commit_interval_ms: int | None = 5 * SECOND_MS
    # The member's session timeout: its coordinator ends the session (releasing every partition
    # or VP it owns, uncommitted) this long after the member's last request ended or the
    # connection its heartbeat waited on was lost, and the group then rebalances without it. A
    # heartbeat waiting at the coordinator keeps the session (GROUP_HEARTBEAT_WAIT_MS); while a
    # sync is pending the member sends a bare heartbeat every third of it.
    member_lease_ttl_s: int = 10
    # A member that has not called poll() this long after a change that asks it to act (another
    # member's join or leave; in mafka4 mode also a change of the topic's VPs) is dropped from
    # the group by its coordinator (its uncommitted positions are lost: the new owners re-read
    # from the committed offsets); its next poll joins again.
    # While nothing changes, a member that does not poll stays.
    rebalance_timeout_ms: int = 60 * SECOND_MS
    # Where to start a partition without a committed offset (Kafka's default: latest).
    auto_offset_reset: OffsetReset = OffsetReset.LATEST
    # Partition assignor of the group: "range" (Kafka's default) or "sticky".
    assignor: str = "range"
    # A VirtualConsumer (no group) re-reads the leaders and RISRs of its virtual partitions at
    # least this often. A group member (VirtualGroupConsumer) reads them on no timer, so an idle
    # one sends no metadata requests: changes of the VP layout reach it through its coordinator
    # (a sync), and a fetch that fails (a replica that died, left the RISR or lost the VP) or a VP
    # with no live leader makes it read them again. What it learns only by then: a replica that
    # joined a RISR (it would spread readers), or a leader that moved to another replica while
    # the old one stays in the RISR (it keeps serving the member, correctly).
    metadata_max_age_ms: int = 5 * SECOND_MS
    # Check the CRC of every fetched batch (Kafka's check.crcs, on by default there too): it
    # catches a batch corrupted between the server's log and this process. The server checks
    # each batch it serves against its CRC already, so turning it off leaves only the transfer
    # unchecked, and saves a pass over every fetched byte (a fifth of a draining consumer's
    # main thread in a profile here). A batch whose structure is bad is refused either way.
    check_crcs: bool = True
    # How a member that reads several lanes orders them (mafka4 mode; client.lane_shares), when
    # they differ in priority (0..9, set when a lane opens): "strict" reads a lane only while no
    # lane of higher priority has a backlog; "weighted" gives every lane a share of each poll in
    # proportion to its priority + 1, one message at least (none starves), and what a lane leaves
    # of its share to the others, higher priorities first. Order is per key within a lane, never
    # across lanes. Lanes of one priority are read as one (no cap, no cost).
    lane_order: str = "strict"

    def __post_init__(self) -> None:
        object.__setattr__(self, "auto_offset_reset", OffsetReset.parse(self.auto_offset_reset))
        _check_range(self, "fetch_bytes_max", 1 * KiB, 256 * MiB)
        _check_range(self, "fetch_wait_ms_max", 0, 60 * SECOND_MS)
        _check_range(self, "fetch_idle_wait_ms_max", 0, 60 * SECOND_MS)
        _check_range(self, "poll_messages_max", 1, 1_000_000)
        _check_optional_range(self, "auto_commit_interval_ms", 1)
        _check_range(self, "member_lease_ttl_s", 2, 600)
        _check_range(self, "rebalance_timeout_ms", 1, 3600 * SECOND_MS)
        _check_range(self, "metadata_max_age_ms", 1)
        if not isinstance(self.check_crcs, bool):
            raise InvalidConfig(f"check_crcs={self.check_crcs!r} must be true or false")
        if self.assignor not in ASSIGNOR_NAMES:
            raise InvalidConfig(f"assignor={self.assignor!r} is not valid: use one of {', '.join(map(repr, ASSIGNOR_NAMES))}")
        if self.lane_order not in LANE_ORDERS:
            raise InvalidConfig(f"lane_order={self.lane_order!r} is not valid: use {LANE_ORDERS[0]!r} (a lane is "
                                f"read only while no lane of higher priority has a backlog) or {LANE_ORDERS[1]!r} "
                                f"(every lane gets a share of each poll by its priority, one message at least)")


# Retries of a consumer group (``client.retry_policy.RetryPolicy``, issue 41). The default back-off
# schedule before the 2nd, 3rd, ... delivery of a message its group nacked; past its last step the
# delay doubles up to the policy's backoff_ms_max.
RETRY_BACKOFF_MS_DEFAULT = (1 * SECOND_MS, 5 * SECOND_MS, 10 * SECOND_MS, 30 * SECOND_MS, 60 * SECOND_MS,
                            120 * SECOND_MS)
# The default longest wait between two deliveries: RocketMQ's default schedule of 16 deliveries
# ends at 2 h too. With the default steps and RETRY_DELIVERIES_MAX_DEFAULT, a message that always
# fails reaches its dead-letter topic about 10 h after its first delivery: it outlasts a downstream
# outage of a night, and stays far inside a topic's default retention (7 days), so the original
# is still in the log when it is dead-lettered. In ordered mode the key's VP waits that long too.
RETRY_BACKOFF_MS_MAX_DEFAULT = 2 * 3600 * SECOND_MS
# The longest wait before a redelivery anyone may ask for (a step, backoff_ms_max, a nack's
# retry_after_ms): the longest delay of a delayed message (issue 41: 7 days), so that a retry can
# be scheduled by the same timer as a delayed message.
RETRY_DELAY_MS_MAX = 7 * DAY_MS
# Steps of a back-off schedule: four times the default deliveries; a longer schedule is better said
# by its doubling past the last step and backoff_ms_max, and the policy is stored as group config.
RETRY_BACKOFF_STEPS_MAX = 64
# Deliveries of a message to a group before it goes to the group's dead-letter topic (RocketMQ's
# default: 16), and the ceiling of RetryPolicy.deliveries_max: at the default
# backoff_ms_max, 1,000 deliveries take 83 days, past any sensible retention, so a larger limit
# would mean "retry for ever" and end as a message deleted by retention instead of dead-lettered.
RETRY_DELIVERIES_MAX_DEFAULT = 16
RETRY_DELIVERIES_MAX = 1000
# The last error text a dead letter carries (``mafka4.dead_letters``), UTF-8; a longer one is cut
# at a character boundary and ends in "…". A traceback's last lines fit; a dead letter adds it and
# at most about 1 KiB of other headers (the group's, topic's and lane's names among them) to the
# original message, so its producer needs that much room above the original's message_bytes_max.
DEAD_LETTER_ERROR_BYTES_MAX = 4 * KiB
# A group member that retries (``client.retrying``) looks this often whether its group's retry topic
# exists yet (another member's first nack creates it), until it does; then it reads it.
RETRY_TOPIC_CHECK_INTERVAL_S = 5
# A member reading its topic and its group's retry topic waits on one at most this long before it
# looks at the other: what a retry may wait beyond its due time for a member with nothing else to read.
RETRY_READERS_POLL_SLICE_MS = 100
# ``mafka4 dlq`` reads a dead-letter topic to its end with polls that wait at most this long.
DEAD_LETTERS_POLL_MS = 500


@dataclass(frozen=True, slots=True)
class VirtualConfig:
    """Bounds of a topic's virtual-partition layout (``virtual.layout.TopicLayout``)."""

    # VPs in one layout; a split that would pass this is refused with InvalidReshard.
    virtual_partitions_max: int = VIRTUAL_PARTITIONS_MAX
    # Split epochs kept per topic; a split or merge that would pass this is refused.
    split_epochs_max: int = 10_000
    # Lanes one layout may open (each opening is one epoch).
    lanes_max: int = LANES_MAX_DEFAULT

    def __post_init__(self) -> None:
        _check_range(self, "virtual_partitions_max", 1, 1 << 20)
        _check_range(self, "split_epochs_max", 1, 1_000_000)
        _check_range(self, "lanes_max", 0, 65_535)


# Records a feeder hands to one VP leader in one call; a VP leader refuses more (MessageTooLarge).
FEED_RECORDS_MAX = 100_000


# --- Bounds of the drivers ---------------------------------------------------------------------
# Timeouts, poll intervals, backoffs and retry counts of the code around the cores: the log's
# file reads, etcd clients, the controller's threads, clients' calls to actors, the local runtime.
# They are not settings a caller passes (the configs above hold those): a change here changes
# every cluster. Each comment says why the value is what it is.

# Log layer.
# Reads while scanning a whole segment (recovery, rebuilding an index): large enough to amortise
# syscalls, small enough to bound memory while a 1 GiB segment is recovered.
SEGMENT_SCAN_CHUNK_BYTES = 1 * MiB
# A partition's epoch checkpoint has one entry per leader change, far fewer than this in any real
# life span: a checkpoint claiming more is treated as garbage rather than allocated.
EPOCH_CHECKPOINT_ENTRIES_MAX = 10_000_000
# A directory's fsync records (log.fsync_points, chaos runs only) are pruned of deleted files when
# they double, never below this: a replica directory holds a handful of files per segment.
FSYNC_POINTS_PRUNE_ENTRIES_MIN = 64
# A node with a log_dir_bytes_max measures its log directory at most this often (a walk of its
# files) and counts its own appends in between: other processes' writes show within a second.
LOG_DIR_SCAN_INTERVAL_MS = 1000

# Replica actors and read nodes.
# A leader's high watermark checkpoint is written at most this often: a restarted replica takes
# the HW back from it, and one second of HW it lacks is re-learned from the leader at once.
HIGH_WATERMARK_CHECKPOINT_INTERVAL_S = 1.0
# A produce call that gives no timeout waits this long for its acks (Kafka's request.timeout.ms).
PRODUCE_TIMEOUT_MS_DEFAULT = 30_000
# A leader whose ISR or RISR write to etcd failed tries again after this (etcd away): short enough
# that the write lands within a second of etcd's return, long enough not to spin.
IN_SYNC_WRITE_BACKOFF_S = 0.5
# An ISR write that keeps losing its compare-and-swap (a failover racing it) gives up after this
# many tries, as a RISR write does (RISR_WRITE_ATTEMPTS_MAX).
ISR_WRITE_ATTEMPTS_MAX = 10
# Read nodes tick their VP leaders' RISR (followers that stopped catching up) and check closed VPs
# for sealing this often: well within read_replica_lag_ms_max (10 s by default, 1 s at the least
# a test uses). A tick visits only the leaders whose RISR changed or may change by time now
# (virtual.housekeeping), so it costs nothing per idle VP.
LEADER_TICK_INTERVAL_S = 0.5

# etcd and leases.
# A lease is refreshed this many times per TTL (coordinator.metadata.lease): two refreshes in a
# row may go unanswered before it is at risk, and a keeper never calls an etcd that is away more
# often than that.
LEASE_REFRESHES_PER_TTL = 3
# An etcd request not answered this fast fails (CoordinatorUnavailable): etcd answers a healthy
# request in milliseconds, so this is a dead or partitioned etcd, and callers retry or back off.
ETCD_REQUEST_TIMEOUT_S_DEFAULT = 5.0
# A client of an etcd cluster names at most this many members (host:port[,host:port...]); etcd
# itself advises at most 7 voting members, so more is a typo or a list of the wrong thing.
ETCD_ENDPOINTS_MAX = 9
# gRPC keepalive on every etcd connection with a call in flight (a watch, a lease refresh): a
# member that stopped answering (SIGSTOP, a hung machine, a dropped link) breaks its watches
# after at most INTERVAL + TIMEOUT, so their owners watch again on a live member. etcd refuses
# pings more often than every 5 s (--grpc-keepalive-min-time), so the interval stays above
# that. Any ping unanswered for TIMEOUT drops the connection: long enough that a busy machine
# does not break healthy watches, short enough to notice a stopped member within seconds.
ETCD_KEEPALIVE_INTERVAL_MS = 10_000
# The largest etcd answer a client takes. A read of a prefix comes back in one gRPC message, and
# the topics prefix grows by about 220 bytes per VP: 20,480 VPs made it 4.4 MB, past gRPC's
# default of 4 MiB, and every full read of it failed (each node's metadata view, the controller's
# reconciliation, topic listings). 256 MiB is over a million VPs; etcd's own quota bounds the rest.
ETCD_RESPONSE_BYTES_MAX = 256 * MiB
ETCD_KEEPALIVE_TIMEOUT_MS = 5_000
# A process refreshing a registration lease gives each etcd request at most this (less for short
# TTLs: one refresh period), or one slow call could let every lease expire.
REGISTRATION_ETCD_TIMEOUT_S_MAX = 5.0
# A RISR or sealed-end write that keeps losing its compare-and-swap against concurrent writes (a
# failover) gives up after this many tries with CoordinatorUnavailable (retriable): ten lost races
# in a row mean the key is contended, not that one more try would win.
RISR_WRITE_ATTEMPTS_MAX = 10

# Controller.
# Pause of the controller's loop and intent worker after etcd failed: long enough not to spin
# against an etcd that is away, short enough to resume within a second once it is back.
CONTROLLER_ETCD_BACKOFF_S = 0.5
# The controller's loop looks at its lease, timers and the stop flag at least this often: well
# within the shortest lease TTL (2 s), so a lost lease is noticed in time.
CONTROLLER_WAIT_SLICE_S = 0.5
# The intent worker looks for intents this often even without a watch event (a watch can break).
INTENT_IDLE_LOOK_INTERVAL_S = 1.0
# A client waiting for an intent's result reads it at least this often besides watching it (a
# watch can break): one read of one small key, cheap enough to keep a broken watch's delay short.
INTENT_RESULT_POLL_INTERVAL_S_MAX = 0.1
# A read node asked to close, or to drop a topic's VPs, has this long to answer (closing files takes
# seconds on a busy machine); then a closing node is killed anyway and a drop is left to the node.
READ_NODE_STOP_TIMEOUT_S = 30
# Physical replicas being stopped (their topic deleted, or its creation undone) have this long to
# close and delete their logs, as read nodes have; then they are killed anyway.
PHYSICAL_REPLICA_STOP_TIMEOUT_S = 30
# A call from the controller or a client to a read node (start it, host VPs, ask the leaders of
# VPs) not answered within this fails: it covers opening logs on a busy node.
READ_NODE_CALL_TIMEOUT_S = 60
# A describe call to a replica actor or read node (Admin.describe_topic, the upkeep's look at
# closed VPs) not answered within this is reported as failed: a describe is cheap, so a slower
# answer is a stuck actor.
DESCRIBE_TIMEOUT_S = 10
# A Prometheus scrape of a node (``metrics.exposition``) waits this long for the node's event loop to
# take its snapshot: a loop that busy is stuck, and the scrape fails (Prometheus reports the target
# down) rather than waiting on; Prometheus's own scrape timeout is 10 s by default.
METRICS_SNAPSHOT_TIMEOUT_S = 5.0
# The buckets (upper bounds, seconds) of a replica's produce latency histogram (``metrics.histogram``):
# from the batch's arrival at the leader to its acknowledgement. Fixed, so the histogram is a few
# integers whatever the traffic; they span an acks=1 append (0.1-0.5 ms here) to a produce that
# waited for a slow follower near ``PRODUCE_TIMEOUT_MS_DEFAULT``.
PRODUCE_LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                             30.0)
# The buckets (upper bounds, seconds) of the end-to-end latency histogram (``metrics.end_to_end``): from a
# batch's newest record's producer timestamp to a consumer's fetch answer carrying it. From a consumer
# long-polling at the HW (a few ms after the produce) to one reading an hour-old backlog; older reads
# count in +Inf.
END_TO_END_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                                60.0, 300.0, 3600.0)
# A feed stream remembers at most this many (physical high watermark, when first seen) pairs for
# its lag in seconds (``virtual.feed_lag``); past it the newest pair is overwritten, which can only
# make the reported lag smaller, never larger, than the true one.
FEED_LAG_SAMPLES_MAX = 64
# A node's group lag metrics (``metrics.group_lag``) read the groups' committed offsets from etcd at
# most this often, when scraped: one etcd read of every group's keys per node per this interval
# whatever the scrape rate, and nothing between scrapes. A committed offset is therefore at most this
# old in the lag, which reads up to this much more than the truth right after a commit.
GROUP_OFFSETS_MAX_AGE_MS = 5_000
# A scrape waits this long for that read; past it (etcd slow or away) the scrape shows the offsets
# read before (none at first) and the read goes on for the next one, so a scrape never fails, nor
# takes METRICS_SNAPSHOT_TIMEOUT_S, because etcd is away.
GROUP_OFFSETS_READ_WAIT_S = 1.0

# With no fetch out (every owned partition's leader unknown, not running or cut off), a
# Mafka3-mode consumer's poll() looks for a leader again this often instead of spinning until
# its deadline.
LEADER_RETRY_S = 0.05

# Consumer groups.
# A Mafka3 group member's sync runs at most this many protocol steps before it waits for a
# change: a rebalance needs revoke, propose, claim and a final read, plus a few lost races.
GROUP_SYNC_STEPS_MAX = 16
# The TTL of a coordinator's one lease over every member it hosts (``coordinator.groups.group_hub``):
# how long a dead coordinator's members keep their partitions and VPs before others may claim them.
GROUP_HUB_LEASE_TTL_S = 10
# A mafka4-mode member keeps a picture of its group and topic (``coordinator.groups.vp_pictures``)
# to wake only when its plan asks it to act. Each watch event costs every member of the group one
# plan, about members + VPs work each (measured: 0.37 ms at 128 members and 128 VPs), on the
# coordinator's watch thread: at this bound a coordinator hosting a whole group spends up to about
# 60 ms per event. A picture with more entries than this (members, owner keys, offsets, split
# epochs and VP states together) is dropped: its member then wakes on every write a plan reads
# (``vp_wakes.WakeFilter``), as before pictures.
GROUP_PICTURE_ENTRIES_MAX = 512
# A coordinator runs its members' group steps (which block on etcd) on this many threads.
GROUP_SESSION_THREADS = 4
# A coordinator that closes waits this long for its members to leave their groups; the leases
# of those that did not run out by their TTL instead.
GROUP_SESSION_CLOSE_WAIT_S = 5.0
# How long a member's heartbeat waits at its coordinator for a change (a long poll, answered at
# once when the member must sync). A waiting heartbeat keeps its session alive, and a dead peer
# is noticed by its connection, not by this: a process that dies closes it at once, a host that
# vanished is found by TCP keepalive (PROTOCOL_PEER_SILENT_S_MAX). So it paces idle members:
# 1,000 of them send 33 heartbeats a second at 30 s (300 at a third of a 10 s session timeout).
# It bounds only a process that hangs with its connections open (its kernel answers keepalive
# probes): a hung coordinator is noticed by its members after this plus PROTOCOL_ANSWER_MARGIN_S,
# a hung member keeps its session up to this plus its session timeout.
# At most PROTOCOL_FETCH_WAIT_MS_MAX (the coordinator refuses longer).
GROUP_HEARTBEAT_WAIT_MS = 30_000
# A member's call to its coordinator (a sync runs up to GROUP_SYNC_STEPS_MAX etcd transactions)
# not answered within this fails: the member finds its coordinator again.
GROUP_CALL_TIMEOUT_S = 30.0
# After a failed heartbeat or coordinator lookup, a member waits this long before the next.
GROUP_RETRY_BACKOFF_S = 0.5
# A group member with a claimed partition (Mafka3) or VP (mafka4) whose start position its leader
# did not give yet asks again this often while it polls. (A change of the group ends a member's
# wait at once: its heartbeat's answer wakes the fetch it waits on.)
CLAIMED_START_RETRY_S = 0.05
# After a failed split, a Mafka4 group member waits this long before asking for one again, so a
# refused split (e.g. at virtual_partitions_max) is not asked for in a loop.
VP_GROUP_SPLIT_RETRY_INTERVAL_S = 5.0

# Clients.
# How long Admin waits for the controller to create or delete a topic: creating one starts its
# physical replica actors, a few seconds each on a busy machine.
TOPIC_INTENT_WAIT_S = 300
# How long a split, merge or scale request (Admin, or a group member asking for a split) waits for
# the controller: a reshard first waits for the feed streams to reach a cut and for read nodes to
# host the children (ReshardConfig bounds each step).
RESHARD_INTENT_WAIT_S = 120
# A call asking replicas or read nodes for offsets (list offsets, offsets for a timestamp) not
# answered within this fails: a leader answers in milliseconds, so this is a stuck leader.
LIST_OFFSETS_TIMEOUT_S = 30
# A node's watched metadata view (frontend.cluster_view) tries to read and watch again this often
# while etcd is away; meanwhile it answers clients from the view it had.
METADATA_REWATCH_BACKOFF_S = 1.0
# A node asked for a topic its watched view does not hold yet, but etcd does (created a moment
# ago), waits at most this long for its watch to bring it before it answers; a watch delivers
# in milliseconds, so this bounds only a node whose watch is stuck.
METADATA_CATCH_UP_WAIT_S = 5.0
# The TCP port a read node of a Ray-launched cluster serves clients on (``mafka4.runtime.node
# --client-port``); a local cluster gives each of its read nodes a free port of its own, since
# they share one address. Taken by another process, the read node cannot serve clients and says so.
CLIENT_PORT_DEFAULT = 9192
# While a parent VP read to its end waits to be sealed, a VirtualConsumer looks at etcd this often:
# the parent's leader node records the seal once the parent is complete, so the wait is short.
RESHARD_CHECK_INTERVAL_S = 0.1

# Local runtime (``mafka4 up``/``down``, node agents).
# Each chosen loopback port can be taken by someone else before etcd binds it; three tries make
# that race a non-issue without hiding an etcd that cannot start at all.
ETCD_START_ATTEMPTS_MAX = 3
# etcd keeps its history (every revision of every key) this long, then compacts it (each member
# runs with --auto-compaction-mode periodic): without compaction the history only grows, +2.1
# MiB/h in a chaos soak, until etcd hits its 2 GiB quota and refuses every write. mafka4 itself
# needs seconds of history: every watch starts at the present or at a revision just read, and a
# watch whose start was compacted ends as a broken one (its owner reads again). An hour leaves
# room for a slow watcher etcd must replay and for an operator's `etcdctl watch --rev`. etcd's
# leader compacts every hour, to the revision of an hour before, so the history holds one to two
# hours of writes (the freed pages are reused; the file does not shrink), and a run shorter than
# an hour from the leader's start sees no compaction.
ETCD_HISTORY_RETENTION_S = 60 * 60
# Member counts of a local etcd (``mafka4 up --etcd-members``): odd, since an even count survives
# no more member losses than one member fewer; 5 would only crowd a small machine.
ETCD_MEMBER_COUNTS = (1, 3)
# A starting etcd member is asked whether it is healthy (has a leader) this often, each answer
# waited for at most ETCD_HEALTH_PROBE_TIMEOUT_S: an answer on loopback takes milliseconds.
ETCD_HEALTH_PROBE_INTERVAL_S = 0.05
ETCD_HEALTH_PROBE_TIMEOUT_S = 1.0
# Ray nodes of a local cluster must register within this: a node starts in a few seconds, so
# longer is a broken Ray install or an overloaded machine, better reported than waited for.
RAY_NODE_START_TIMEOUT_S = 60
# Ray's fake multi-node cluster (mafka4/runtime/fake_ray_cluster.py)
# must have its head up and ray_cluster.yaml's minimum workers launched within this. The
# autoscaler decides every few seconds (Ray's update interval is 5 s) and each worker is a
# raylet of this machine: one or two rounds and a few raylet starts on 2 busy cores take well
# under a minute, so longer than this is a broken config or Ray install, reported with the logs.
FAKE_RAY_CLUSTER_START_TIMEOUT_S = 180
# Plasma store per Ray node; it lives in /dev/shm, so it bounds shared memory per node (a small
# machine runs several nodes).
OBJECT_STORE_BYTES_PER_NODE = 256 * MiB
# Ray passes a call's argument or return value smaller than this inside the call's own message
# instead of through the object store (Ray's max_direct_call_object_size, 100 KiB by default).
# A produce batch (batch_bytes_max, 1 MiB by default) and a follower's or consumer's fetch
# answer then cross from node to node in one gRPC message, not as an object stored on one node
# and pulled by the other. Measured here (1 MiB calls, two Ray nodes on one machine):
# 1.5-1.6x the rate over one hop, 2.1-2.5x over two (a leader passing it to a follower).
RAY_INLINE_OBJECT_BYTES_MAX = 4 * MiB
# A stream call's frame (``runtime.stream_calls``): a produce batch or a fetch answer and its
# few fields. Far above every batch and fetch bound; a bigger length means a peer that does not
# speak the protocol, and its connection is dropped.
STREAM_FRAME_BYTES_MAX = 256 * MiB
# A ``bytes`` or ``bytearray`` this large in a stream call's arguments or answer travels out of
# band (``transport.stream_pickles``): written to the socket as it lies and read straight into the
# ``bytearray`` its receiver gets, not copied through the pickle. Low, so that every receiver of
# batches and fetched data meets bytearray in tests too, not only at MiB sizes; a key, a token
# or an offset stays in the pickle.
STREAM_OUT_OF_BAND_BYTES_MIN = 1 * KiB
# Out-of-band buffers of one stream frame: as many as fit, each being at least
# STREAM_OUT_OF_BAND_BYTES_MIN; a peer announcing more does not speak the protocol.
STREAM_FRAME_BUFFERS_MAX = STREAM_FRAME_BYTES_MAX // STREAM_OUT_OF_BAND_BYTES_MIN
# A stream's received bytes land in a buffer of this size, from which frame heads and small parts
# are taken; a part at least this large is read straight into its own bytearray, never copied.
STREAM_STAGING_BYTES = 256 * KiB
# An out-of-band buffer this large is written to the socket as a view of itself; smaller ones are
# joined to the parts before them: copying 64 KiB costs less than a write call of its own.
STREAM_WRITTEN_APART_BYTES_MIN = 64 * KiB
# A thread's msgpack packer for batch payloads (``batch_payload.encode_record_arrays``) is kept
# between batches (a fresh one costs page faults on every batch); one that grew past this, packing
# an unusually large batch, is dropped rather than kept holding that memory.
PAYLOAD_PACKER_KEPT_BYTES_MAX = 8 * MiB
# SIGTERM grace for a local etcd before it is SIGKILLed: etcd stops cleanly on SIGTERM, so longer
# means it hangs.
ETCD_STOP_TIMEOUT_S = 10
# ``mafka4 up`` and ``down`` look at the daemon's processes this often while they wait for them.
LOCAL_CLUSTER_POLL_INTERVAL_S = 0.2
# SIGTERM grace for the daemon, which stops its cluster in order, before everything is SIGKILLed.
DAEMON_STOP_TIMEOUT_S = 30.0
# After SIGKILL, ``down`` waits at most this long for the processes to be gone: the kernel ends
# them in well under a second, so longer is a process ``down`` cannot help.
KILLED_PROCESSES_WAIT_S = 10.0
# ``mafka4 status`` gives etcd this long: it reports an unreachable etcd rather than hanging.
STATUS_ETCD_TIMEOUT_S = 2.0
# ``mafka4 status`` scrapes every metrics target it lists for its figures (``metrics.scrape``): each
# gets this long (a node's loop takes its snapshot in milliseconds; longer is a stuck or unreachable
# node, listed as not answering); this many at once; and no new scrape starts past the deadline, so a
# cluster with many unreachable hosts still gets its status in about deadline + timeout.
STATUS_SCRAPE_TIMEOUT_S = 2.0
STATUS_SCRAPE_THREADS_MAX = 8
STATUS_SCRAPES_DEADLINE_S = 10.0
# A target whose exposition is larger is listed as not answering rather than read whole: a read node
# hosting 100,000 VPs serves tens of MB, which status would hold and parse in memory.
STATUS_SCRAPE_BYTES_MAX = 64 * 1024 * 1024
# SIGTERM grace for the controller process: it revokes its lease and leaves Ray.
CONTROLLER_STOP_TIMEOUT_S = 15.0
# The daemon looks this often whether the controller has started the read nodes yet.
READ_NODE_START_POLL_INTERVAL_S = 0.1
# How long a node agent's config-only command waits for etcd before exiting 1; the head starts
# etcd just before it runs the command.
NODE_CONFIG_WAIT_S_DEFAULT = 60
# Between attempts to reach etcd before the config is written (a node agent then retries for as
# long as it runs).
NODE_CONFIG_RETRY_INTERVAL_S = 1.0
# The controller's node agent keeper (runtime.node_agents) compares Ray's nodes with the running
# agents this often: a node that joined Ray is registered, and one that left is dropped, within
# about this long. A pass costs one read of Ray's node list, one call per agent and one etcd read.
NODE_AGENT_RECONCILE_INTERVAL_S = 5.0
# A node agent actor not answering a call within this (where it runs, its start) counts as not
# running this pass; an agent answers from memory, so a slower answer is a stuck or dying actor.
NODE_AGENT_CALL_TIMEOUT_S = 10.0
# An agent told to stop revokes its lease (one etcd call, at most REGISTRATION_ETCD_TIMEOUT_S_MAX)
# within this; then it is killed anyway and its registration ends with its lease.
NODE_AGENT_STOP_TIMEOUT_S = 15.0
# mafka4 deploy (runtime.deploy): an etcd member started on its node answers /health within this
# or its start fails (a member of three needs the other two started meanwhile: all start at once).
DEPLOY_ETCD_START_TIMEOUT_S = 60.0
# The actor that owns the deployed controller's process looks this often whether it exited, and
# starts it again: the controller is down for at most about this long after a crash.
DEPLOY_CONTROLLER_CHECK_INTERVAL_S = 2.0
# A deploy or status call to one of the deployment's actors (they answer from memory, or after
# one etcd /health probe): a slower answer counts as not running.
DEPLOY_CALL_TIMEOUT_S = 15.0
# How often deploy looks whether every node is registered and every read node serves clients.
DEPLOY_READY_POLL_INTERVAL_S = 0.5


# --- security ---------------------------------------------------------------------------------
# PBKDF2 rounds of a new SCRAM-SHA-256 credential: RFC 7677's minimum, and the least a stored
# credential or a server's first message may ask for. Each authentication costs the client this
# many HMACs (a few ms); the server stores only the derived keys and never repeats them.
SCRAM_ITERATIONS_DEFAULT = 4096
# The most rounds a client computes when a server asks (SCRAM lets the server choose): a server
# asking more is refused with AuthenticationFailed rather than pinning the client's CPU.
SCRAM_ITERATIONS_MAX = 1_000_000
# Salted passwords a client process keeps derived (``security.scram_client.PasswordKeys``): one
# per user, password, salt and count; a process speaks as one or two users, so a few suffice.
SCRAM_CLIENT_KEYS_MAX = 8
# A SCRAM message is a few hundred bytes (a user name, two nonces, a proof); a longer one is
# refused with AuthenticationFailed before it is parsed.
SCRAM_MESSAGE_BYTES_MAX = 4 * KiB
# A user name (a principal) is ASCII, so bytes and characters agree; a longer one is refused with
# InvalidConfig. It names an etcd key and appears in every ACL refusal.
USER_NAME_BYTES_MAX = 64
# A password shorter than this is refused with InvalidConfig when the user is added.
PASSWORD_CHARS_MIN = 8
# ACL rules of one cluster: every node holds them all in memory and reads them all when it starts
# watching; 'mafka4 acl add' beyond this is refused with InvalidConfig (remove rules, or use
# prefixed rules, which cover many names each).
ACL_RULES_MAX = 10_000


# --- client protocol (mafka4.protocol) ---

# The client protocol's version, in every frame's "v": a frame of another version is refused with
# UnsupportedVersion (the API_VERSIONS answer lists the versions a node speaks). Version 2: VP
# fetches and group positions carry leader epochs (Kafka's KIP-320), answers may say "diverging".
# Version 3: a GROUP_SYNC answer that claims VPs carries the topic's VP metadata
# (``protocol.group_api``). Version 4: a GROUP_DESCRIBE answer's rows carry the lag in time
# (``lag_ms``: ``metrics.group_lag``). Version 5: lanes -- LANE_OPEN, a GROUP_JOIN names the lanes
# its member reads, and the VP metadata answers say each VP's lane.
PROTOCOL_VERSION = 5
# A whole client frame (its msgpack body and its out-of-band buffers): above every produce batch
# and fetch bound; a peer announcing more is answered with nothing and dropped.
PROTOCOL_FRAME_BYTES_MAX = 64 * MiB
# A client frame's msgpack body (batches travel beside it, out of band). Decoding builds Python
# objects of up to ~64x a body's bytes (an empty map is one byte and a dict), so this bounds the
# memory one frame can take: a larger body is refused (ProtocolError) before it is decoded.
PROTOCOL_BODY_BYTES_MAX = 4 * MiB
# Until a connection has authenticated, its frames may only be API_VERSIONS and SASL steps, which
# are small: a bigger frame is refused before its bytes are read, so an anonymous peer cannot make
# the server hold PROTOCOL_FRAME_BYTES_MAX for it.
PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX = 64 * KiB
# Out-of-band buffers in one client frame; a frame with more is refused (a fetch answer carries one
# buffer per partition or VP read).
PROTOCOL_FRAME_BUFFERS_MAX = 4096
# A str in a client message (names, mechanisms, error messages), in UTF-8 bytes; a longer one is
# refused (ProtocolError naming the field).
PROTOCOL_STR_BYTES_MAX = 64 * KiB
# Inline bytes in a client message (SASL messages, keys); bulk data travels out of band as a
# Buffer field instead. Longer is refused (ProtocolError naming the field).
PROTOCOL_BIN_BYTES_MAX = 1 * MiB
# Items of one tuple or dict field of a client message (topics of a metadata answer, partitions of
# a fetch); more is refused (ProtocolError naming the field).
PROTOCOL_ITEMS_MAX = 100_000
# A client connection's bytes land in a staging buffer of this size (a part this large or larger
# is read into its own bytearray); small, since a server holds one per client connection.
PROTOCOL_STAGING_BYTES = 64 * KiB
# A FETCH may ask for at most this many bytes (its answer must fit in a frame) and wait at most this
# long; beyond either it is refused with InvalidConfig naming the field.
PROTOCOL_FETCH_BYTES_MAX = 32 * MiB
PROTOCOL_FETCH_WAIT_MS_MAX = 60_000
assert GROUP_HEARTBEAT_WAIT_MS <= PROTOCOL_FETCH_WAIT_MS_MAX, "a heartbeat is a long poll within the fetch bound"
# A client's call whose answer may wait out a server-side bound (a produce's commit wait, a fetch's
# long poll) is given up that bound plus this margin after it was sent: as lost, so retried.
PROTOCOL_ANSWER_MARGIN_S = 5.0
# TCP keepalive on every client-port connection, at both ends (``transport.framed_connection``):
# the kernel probes a connection that received nothing for IDLE, then every INTERVAL, and
# drops it after PROBES unanswered, so a peer that vanished without closing (its host lost, the
# network cut) is noticed within PROTOCOL_PEER_SILENT_S_MAX (11 s) with no Python running for an
# idle connection (a process that dies closes its sockets at once). Then the calls on it fail
# (StreamLost) on the client, and their handlers are cancelled on the server: a group member's
# waiting heartbeat ends, so its session's timeout starts. Shorter would drop connections over
# brief network stalls; a probe costs the kernel one small packet each way per idle connection.
PROTOCOL_KEEPALIVE_IDLE_S = 5
PROTOCOL_KEEPALIVE_INTERVAL_S = 2
PROTOCOL_KEEPALIVE_PROBES = 3
PROTOCOL_PEER_SILENT_S_MAX = PROTOCOL_KEEPALIVE_IDLE_S + PROTOCOL_KEEPALIVE_INTERVAL_S * PROTOCOL_KEEPALIVE_PROBES
# A client's metadata request to any node is given up after this long (retriable: the next node).
PROTOCOL_METADATA_TIMEOUT_S = 10.0
# A consumer with a VP it cannot fetch from anywhere (its leader serves no client port in the
# metadata it holds: a read node died before its VPs failed over) asks for the metadata again
# at most this often, until the failover shows.
VP_UNROUTABLE_REFRESH_S = 0.5
# A group member that joined owning no VP (a joiner waiting for the split that makes its child)
# opens connections to at most this many of the read nodes leading its topic's VPs, ahead of its
# first claim (``VpFetcher.connect_ahead``): the child's leader is likely one of them, and a
# connection (TCP, versions, SCRAM: four round trips) opened after the claim delayed the joiner's
# first message by 5-10 ms. More nodes than this are left to connect on first use.
VP_CONNECTIONS_AHEAD_MAX = 8
# ``ClientConnection.open`` gives up after this long (connect, versions, authentication) with a
# retriable RequestTimedOut naming the address.
PROTOCOL_OPEN_TIMEOUT_S_DEFAULT = 10.0


# --- Kafka protocol (mafka4.kafka) ---
# A whole Kafka request frame, the 4 bytes of its size not counted: Kafka's own
# socket.request.max.bytes, so that a request a broker accepts is accepted here. A peer announcing
# more is refused (``kafka.wire.frame_size``) and its connection closed, as a broker does. The
# batches of one produce request decompress to at most this much too (``kafka.record_batches``):
# a decompression bomb makes a node hold no more than a frame of that size would.
KAFKA_FRAME_BYTES_MAX = 100 * MiB
# Until a Kafka connection has authenticated, its requests may only be ApiVersions and the SASL
# steps (SaslHandshake, SaslAuthenticate: a SCRAM message is a few hundred bytes): a bigger frame
# is refused before its bytes are read, so an anonymous peer cannot make a node hold
# KAFKA_FRAME_BYTES_MAX for it. The same bound as the client port's.
KAFKA_UNAUTHENTICATED_FRAME_BYTES_MAX = PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX
# zstd frames of Kafka clients need not say their decompressed size, so a batch is decompressed
# this many compressed bytes at a time, its output counted against the bound above after each
# step. A zstd block of 4 bytes (an RLE block) expands to 128 KiB, so one step of this size
# makes at most 8 MiB: how far past the bound a bomb gets before it is refused. Smaller steps
# cost more calls (about 5 ms per compressed MiB at 256 bytes, measured here).
KAFKA_ZSTD_STEP_BYTES = 256
# Items of one array of a Kafka request (topics of a metadata request, partitions of a fetch),
# as the client protocol's PROTOCOL_ITEMS_MAX: more is refused (INVALID_REQUEST) before the
# request is parsed (``kafka.array_bounds``), so one frame cannot make a node build tens of
# millions of objects of a few bytes each.
KAFKA_ARRAY_ITEMS_MAX = 100_000
# The largest window a Kafka client's zstd frame may ask for: zstd's levels up to 19 use at most
# 8 MiB, and a decompressor allocates the window a frame asks for, so a frame asking more (levels
# 20-22, or a hostile one asking zstd's 2 GiB) is refused as corrupt before anything is allocated.
KAFKA_ZSTD_WINDOW_BYTES_MAX = 8 * MiB
# What a read node's Kafka listener remembers of idempotent Kafka producers
# (``kafka.producer_sessions``): one entry per (producer id, topic, Kafka partition) it took
# batches for, each with its last KAFKA_PRODUCER_BATCHES_REMEMBERED batches, about 1 KiB. Past
# this many entries the least recently used is forgotten: that producer's next batch there is
# appended as a new producer's (as a Kafka broker without its state does), so a retry of one of
# its batches that was already appended is appended again. 50,000 entries (about 50 MiB at most)
# cover, e.g., 500 producers each writing to 100 partitions led by one node.
KAFKA_PRODUCER_SESSIONS_MAX = 50_000
# Batches remembered per entry, as a Kafka broker does (its ProducerStateEntry keeps 5): an
# idempotent Kafka client has at most 5 requests in flight per connection
# (max.in.flight.requests.per.connection <= 5 with idempotence), so the batch it may retry is
# always one of its last 5.
KAFKA_PRODUCER_BATCHES_REMEMBERED = 5
# A Kafka member's SyncGroup waits up to this long (and at most a third of its session timeout)
# for its coordinator's sync to settle: while the target gives it a VP another member still owns
# (the other releases it once its own heartbeat told it to rejoin, within its heartbeat interval,
# librdkafka's 3 s), or while a Mafka3-mode rebalance waits for its barrier, the listener syncs
# again instead of answering a partial assignment that the next heartbeat would take back. Kafka's
# own SyncGroup blocks until the leader's assignment is in, so clients wait for it (librdkafka:
# session.timeout.ms plus 3 s). Past it the assignment answered is what the member owns then.
KAFKA_GROUP_SYNC_SETTLE_S = 5.0
# The pause between two of those syncs, doubling from the first to the last value.
KAFKA_GROUP_SYNC_RETRY_S = (0.05, 0.5)


# --- admin APIs (users and ACLs through the client port) ---
# The random salt of a new credential (security.credentials.make_credential), as long as the
# salts the server's SCRAM library makes itself.
SCRAM_SALT_BYTES = 32
# A SCRAM credential's salt, in bytes (this mafka4 makes 32): a client sends the credential of a
# new user (USER_ADD), and the salt goes into every server-first message of that user, so a
# longer one is refused with InvalidConfig before it is stored.
SCRAM_SALT_BYTES_MAX = 256


# --- topic admin APIs (topic create, delete and scale through the client port) ---
# Topic intents one node waits on for its clients at once (each for up to TOPIC_INTENT_WAIT_S or
# RESHARD_INTENT_WAIT_S, on a thread): more wait their turn on the event loop, so that clients
# waiting for the controller never hold every thread the port's other handlers need. The
# controller carries out one intent at a time anyway.
NODE_INTENT_REQUESTS_IN_FLIGHT_MAX = 2


# --- group admin APIs (group list, describe and reset offsets through the client port) ---
# Group admin requests one node serves at once, each on a thread (a description asks every
# partition's leader of each topic the group reads, each call for up to LIST_OFFSETS_TIMEOUT_S):
# more wait their turn on the event loop, so that a stuck leader never holds every thread the
# port's other handlers need.
NODE_GROUP_ADMIN_REQUESTS_IN_FLIGHT_MAX = 2
