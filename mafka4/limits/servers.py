"""The bounds of the servers: a node's logs, physical replicas, read nodes, feed streams and client
port, the controller, and the shape of a local cluster.

Configs as ``mafka4.limits`` describes them, kept apart from it because no client uses them:
building a frozen dataclass costs about a millisecond at import, and a client command, which
starts a new interpreter every time, builds none of these (issue 36). Every constant, and the
configs of topics, producers, consumers and virtual layouts, are ``mafka4.limits``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from mafka4.errors import InvalidConfig
from mafka4.limits import (DAY_MS, ETCD_MEMBER_COUNTS, FEED_RECORDS_MAX, PRODUCER_BATCHES_REMEMBERED_DEFAULT,
                           PROTOCOL_FRAME_BYTES_MAX, PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX, SECOND_MS, KiB, MiB,
                           TopicConfig, _check_optional_range, _check_range, replace_config)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Bounds of one replica's segmented log."""

    # A segment rolls when its next append would pass this size.
    segment_bytes_max: int = 64 * MiB
    # A non-empty segment rolls when its first batch is older than this.
    segment_age_ms_max: int = 7 * DAY_MS
    # Whole segments whose newest batch is older than this are deleted (None: keep).
    retention_ms: int | None = 7 * DAY_MS
    # Oldest segments are deleted while the log is larger than this (None: no limit).
    retention_bytes: int | None = None
    # Used only when retention is given a fed floor (physical replicas of mafka4-mode topics):
    # a segment that retention would delete but that some read node has not fed yet is kept
    # until its newest batch is this much older than retention_ms (than this alone when only
    # retention_bytes applies). Then it is deleted anyway, the replica logs the offsets as an
    # error and read nodes report them (RecordsLost). 0: no hold. None: hold for ever -- a
    # read node that never returns then keeps the partition growing until its disk is full.
    unfed_hold_ms_max: int | None = DAY_MS
    # Retention (above) runs this often on a physical replica (Kafka's log.retention.check.interval.ms).
    retention_check_interval_ms: int = 60 * SECOND_MS
    # fsync when this many ms passed since the last fsync (None: not by time).
    flush_interval_ms: int | None = 1000
    # fsync when this many messages were appended since the last fsync (1: every batch).
    flush_interval_messages: int | None = None
    # One sparse offset-index and time-index entry per this many log bytes.
    index_interval_bytes: int = 4 * KiB

    def __post_init__(self) -> None:
        _check_range(self, "segment_bytes_max", 4 * KiB, 1024 * MiB)
        _check_range(self, "segment_age_ms_max", 1)
        _check_optional_range(self, "retention_ms", 1)
        _check_optional_range(self, "retention_bytes", 0)
        _check_optional_range(self, "unfed_hold_ms_max", 0)
        _check_range(self, "retention_check_interval_ms", 100, DAY_MS)
        _check_optional_range(self, "flush_interval_ms", 0)
        _check_optional_range(self, "flush_interval_messages", 1)
        _check_range(self, "index_interval_bytes", 1, self.segment_bytes_max)


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Bounds of the physical-partition replica protocol."""

    # A follower whose log end offset has not reached the leader's for this long leaves the ISR.
    replica_lag_ms_max: int = 10 * SECOND_MS
    # acks=all is refused (NotEnoughReplicas) while the ISR is smaller than this.
    min_insync_replicas: int = 1
    # A fetch with no new data waits at most this long before answering empty.
    fetch_wait_ms_max: int = 500
    # A fetch answers at most this many bytes (but always at least one whole batch).
    fetch_bytes_max: int = 8 * MiB
    # Pause of a follower after a failed fetch before it tries again.
    fetch_backoff_ms: int = 100
    # Recent batches remembered per producer id to answer retried batches (Kafka keeps 5).
    producer_batches_remembered: int = PRODUCER_BATCHES_REMEMBERED_DEFAULT
    # Producer ids remembered per partition; the least recently used is forgotten beyond this.
    producer_ids_max: int = 10_000
    # A replica's liveness key in etcd expires this long after the replica stops refreshing it.
    replica_lease_ttl_s: int = 5
    # A batch whose sequence is ahead of its producer's next one waits this long for the
    # batches before it (Ray may start an async actor's calls out of submission order);
    # then it is refused with OutOfOrderSequence.
    sequence_wait_ms_max: int = 2000

    def __post_init__(self) -> None:
        _check_range(self, "replica_lag_ms_max", 1)
        _check_range(self, "min_insync_replicas", 1, 7)
        _check_range(self, "fetch_wait_ms_max", 0, 60 * SECOND_MS)
        _check_range(self, "fetch_bytes_max", 1 * KiB, 256 * MiB)
        _check_range(self, "fetch_backoff_ms", 0, 60 * SECOND_MS)
        _check_range(self, "producer_batches_remembered", 1, 100)
        _check_range(self, "producer_ids_max", 1)
        _check_range(self, "sequence_wait_ms_max", 0, 60 * SECOND_MS)
        _check_range(self, "replica_lease_ttl_s", 2, 600)


def topic_log_config(topic: TopicConfig, base: LogConfig | None = None) -> LogConfig:
    """The log config of ``topic``'s replicas: ``base`` (default ``LogConfig()``) with the topic's overrides."""
    return replace_config(
        base or LogConfig(),
        retention_ms=topic.retention_ms,
        retention_bytes=topic.retention_bytes,
        unfed_hold_ms_max=topic.unfed_hold_ms_max,
        retention_check_interval_ms=topic.retention_check_interval_ms,
        segment_bytes_max=topic.segment_bytes_max,
    )


def topic_replica_config(topic: TopicConfig, base: ReplicaConfig | None = None) -> ReplicaConfig:
    """The config of ``topic``'s physical replicas: ``base`` (default ``ReplicaConfig()``) with its overrides."""
    return replace_config(base or ReplicaConfig(), min_insync_replicas=topic.min_insync_replicas,
                          replica_lag_ms_max=topic.replica_lag_ms_max)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Shape of a local cluster started by ``mafka4 up``."""

    write_nodes: int = 3
    read_nodes: int = 2
    # A node registration disappears from etcd this long after its process stops refreshing it.
    node_lease_ttl_s: int = 10
    # How long ``mafka4 up`` waits for etcd and Ray to answer before giving up.
    start_timeout_s: int = 120
    # etcd members on loopback, one of ETCD_MEMBER_COUNTS: 3 survive the loss of any one member
    # (the leader included); 1 is a single point of failure but costs a third of the memory.
    etcd_members: int = 1
    # ControllerConfig fields the cluster's controller runs with instead of the defaults, as
    # (name, value) pairs (``mafka4 up --controller-setting vp_merge_delay_ms=5000``).
    controller_settings: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        _check_range(self, "write_nodes", 1, 16)
        _check_range(self, "read_nodes", 0, 16)
        _check_range(self, "node_lease_ttl_s", 2, 600)
        _check_range(self, "start_timeout_s", 5, 3600)
        if self.etcd_members not in ETCD_MEMBER_COUNTS:
            raise InvalidConfig(f"etcd_members={self.etcd_members!r} must be one of "
                                f"{', '.join(map(str, ETCD_MEMBER_COUNTS))}: an even count survives no more "
                                f"member losses than one member fewer")
        settings = self.controller_settings
        if not isinstance(settings, (tuple, list)) or not all(
                isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str) for pair in settings):
            raise InvalidConfig(f"controller_settings={settings!r} must be (name, value) pairs, "
                                f"e.g. (('vp_merge_delay_ms', 5000),)")
        self.controller_config()  # InvalidConfig names a bad setting before anything starts

    def controller_config(self) -> "ControllerConfig":
        return replace_config(ControllerConfig(), **dict(self.controller_settings))


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Bounds of the controller (``mafka4.coordinator.control.controller``)."""

    # The active controller's key expires this long after its last refresh; a standby then
    # takes over. An active controller that could not refresh for this long steps down.
    lease_ttl_s: int = 5
    # A replica (physical or VP) or feeder whose liveness key is gone is dead unless its
    # actor answers a ping this fast.
    ping_timeout_ms: int = 2000
    # become_leader / become_follower / starting a replica or feeder: a call not answered this
    # fast is abandoned and the partition (or VP, or feeder) is examined again after retry_interval_ms.
    replica_call_timeout_ms: int = 20_000
    # Partitions whose failover is incomplete (offline, a replica not restarted, no free
    # node for a replacement), and VPs and feeders not yet repaired, are examined again this often.
    retry_interval_ms: int = 2000
    # A full reconcile runs this often as a safety net for missed watch events (besides the
    # one on becoming active and the one after etcd answers again).
    reconcile_interval_ms: int = 60_000
    # A partition CAS that keeps losing against the leader's ISR writes is left for the
    # next retry after this many attempts.
    cas_attempts_max: int = 5
    # Watch events waiting for the controller loop; beyond this, events are dropped and a
    # full reconcile replaces them.
    event_queue_max: int = 10_000
    # A read node whose registration has been missing this long is gone for good: every VP
    # follower replica on it is moved to a live read node (control.upkeep_decisions.plan_replica_moves).
    # Shorter absences (a restart, a brief partition) keep the replicas and their logs.
    read_node_gone_ms: int = 10 * 60 * SECOND_MS
    # A topic with more active VPs than its groups need (its creation count, or the largest
    # group's member count) for this long, continuously, merges one pair of VPs; the next merge
    # waits as long again (control.upkeep_decisions.ShrinkWatch), so a group that shrinks and grows back
    # within it keeps its VPs.
    vp_merge_delay_ms: int = 60 * SECOND_MS
    # The read path's upkeep (replicas moved off read nodes gone for good, merges after groups
    # shrank, closed VPs retired after their retention) looks at every mafka4-mode topic this often.
    upkeep_interval_ms: int = 10 * SECOND_MS
    # The result of an executed intent (metadata.intents) is kept this long for its client to
    # read; one nobody collected disappears with its lease.
    intent_result_ttl_s: int = 300
    # --- read-node scaling (control.read_node_scaling, issue 38): how many read nodes the
    # controller asks Ray's autoscaler for. Integers, so that ``--controller-setting`` reaches them.
    # Upper bounds of one read node's load, as the node reports it (metadata.read_node_load). When
    # the read nodes' total passes (their count x a bound), the controller asks for ceil(total /
    # bound) read nodes; one node alone over a bound, with the total within, is evened out by
    # moving replicas, not by a new node. Each sits below what a node manages at its limit, so
    # the nodes keep up while the new one starts (minutes on a cloud VM).
    # Replicas of open VPs a read node hosts (replicas of sealed VPs, only drained until their
    # retention retires them, count for no bound: metadata.read_node_load). Not a memory bound:
    # an idle VP costs ~6 KiB and ~2e-7 cores (one node held 100,352, README), so this bounds
    # what one node's loss leaves to rebuild elsewhere and the per-VP work of busy VPs
    # (housekeeping, appends), which the other two measures see only once it is spent. 4096:
    # four topics of the most VPs a topic has.
    read_node_vp_replicas_max: int = 4096
    # Bytes/s of committed physical records a read node splits into its VPs. The feed-lag bench
    # (docs/performance.md) saw feeding fall behind, unbounded, under one producer at ~75 MiB/s
    # on the 2-core machine; under half of that a node's feeding keeps up with room for fetches.
    read_node_fed_bytes_per_s_max: int = 32 * MiB
    # CPU a read node spends answering consumers' fetches, in thousandths of a core. The ReadNode
    # is one Python process (one GIL) that also feeds and replicates: past half a core on
    # fetches alone, feeding and replication start to queue behind them.
    read_node_fetch_millicores_max: int = 500
    # A read node counts idle while its fresh report shows at most this much feeding and fetch
    # CPU (both). Hosted replicas do not make a node busy (an idle VP costs almost nothing, and a
    # released node's replicas move off first); a release waits instead until the other nodes
    # could take them within read_node_vp_replicas_max. Far below the upper bounds, so a release
    # moves little work and the load left does not bring a node straight back.
    # 256 KiB/s: a trickle, 1/128 of the upper bound.
    read_node_idle_fed_bytes_per_s_max: int = 256 * KiB
    # 0.05 core, a tenth of the upper bound: consumers that only long-poll and find nothing new
    # should cost a node less than this (an estimate; no bench measures it yet).
    read_node_idle_fetch_millicores_max: int = 50
    # A read node idle continuously for this long is released (one at a time; its replicas move
    # off first). A node costs minutes to start again (boot, setup commands, its agent), so an
    # idle one is kept through a group's lull; and ten times vp_merge_delay_ms, so the merges of
    # a shrinking group have settled before its nodes' load is judged.
    read_node_idle_release_delay_ms: int = 10 * 60 * SECOND_MS
    # Read nodes never released below, and asked for when fewer are registered: two, as
    # ray_cluster.yaml's read_node min_workers and ``mafka4 up``'s read_nodes, so one node's loss
    # leaves one to fail VPs over to (a VP with two read replicas needs two nodes).
    read_nodes_min: int = 2
    # Read nodes never asked for above, however high the load (a runaway consumer count must not
    # run up a bill); the reason of each capped decision says so. Ray's max_workers caps too.
    read_nodes_max: int = 16
    # After asking for more read nodes, the same count is not asked for again until this passed
    # or the nodes registered: a cloud VM (ray_cluster.yaml's m5.xlarge) boots, installs and
    # starts its agent in a few minutes (Ray's fake multi-node provider in ~5 s). A larger count
    # (the load grew again) is asked for at once.
    read_node_add_cooldown_ms: int = 5 * 60 * SECOND_MS
    # A load report measured longer ago than this is ignored, and the decision says so: its node
    # counts as capacity without load and is never released on it. Several report windows: a
    # node whose reporting stalled that long is itself in trouble.
    read_node_load_stale_ms: int = 60 * SECOND_MS
    # --- the wiring of read-node scaling and replica moves (control.read_scaling). 0: off (the
    # default: nothing above is asked of Ray, no replica moves between live read nodes); 1: on, at
    # every upkeep pass. Off by default because it asks Ray's autoscaler for nodes and moves
    # replicas: a cluster opts in (``mafka4 up --controller-setting read_node_scaling=1``).
    read_node_scaling: int = 0
    # Replica moves in flight at once (each copies one VP's log onto its target, outside the
    # RISR, from its leader's node). More are planned as these end. 8: a new node fills in a few
    # upkeep passes without its catch-up fetches crowding the leaders' nodes.
    replica_moves_in_flight_max: int = 8
    # A move still waiting this long after it started (its target never caught up, or its VP's
    # leader stayed down) is taken back where that is safe (replica_moves.take_back), so a stuck
    # target does not hold an extra replica and the VP's busy mark forever. 30 min: a VP log of
    # several GiB copies within it at a read node's fetch rate.
    replica_move_time_ms_max: int = 30 * 60 * SECOND_MS

    def __post_init__(self) -> None:
        _check_range(self, "lease_ttl_s", 2, 600)
        _check_range(self, "ping_timeout_ms", 10, 60 * SECOND_MS)
        _check_range(self, "replica_call_timeout_ms", 100, 600 * SECOND_MS)
        _check_range(self, "retry_interval_ms", 10, 600 * SECOND_MS)
        _check_range(self, "reconcile_interval_ms", 100)
        _check_range(self, "cas_attempts_max", 1, 100)
        _check_range(self, "event_queue_max", 1, 1_000_000)
        _check_range(self, "read_node_gone_ms", 1)
        _check_range(self, "vp_merge_delay_ms", 1)
        _check_range(self, "upkeep_interval_ms", 100, 3600 * SECOND_MS)
        _check_range(self, "intent_result_ttl_s", 1, 86_400)
        self._check_read_node_scaling()

    def _check_read_node_scaling(self) -> None:
        _check_range(self, "read_node_vp_replicas_max", 1, 1_000_000)
        _check_range(self, "read_node_fed_bytes_per_s_max", 1 * KiB, 100 * 1024 * MiB)
        _check_range(self, "read_node_fetch_millicores_max", 1, 1_000_000)
        _check_range(self, "read_node_idle_fed_bytes_per_s_max", 0)
        _check_range(self, "read_node_idle_fetch_millicores_max", 0)
        for idle, upper in (("read_node_idle_fed_bytes_per_s_max", "read_node_fed_bytes_per_s_max"),
                            ("read_node_idle_fetch_millicores_max", "read_node_fetch_millicores_max")):
            if getattr(self, idle) >= getattr(self, upper):
                raise InvalidConfig(f"{idle}={getattr(self, idle)} must be below {upper}={getattr(self, upper)}: "
                                    f"a node would count idle and overloaded at once; lower {idle}")
        _check_range(self, "read_node_idle_release_delay_ms", 1)
        _check_range(self, "read_nodes_min", 0, 1024)
        _check_range(self, "read_nodes_max", 1, 1024)
        if self.read_nodes_min > self.read_nodes_max:
            raise InvalidConfig(f"read_nodes_min={self.read_nodes_min} is above read_nodes_max={self.read_nodes_max}: "
                                f"raise read_nodes_max or lower read_nodes_min")
        _check_range(self, "read_node_add_cooldown_ms", 1)
        _check_range(self, "read_node_load_stale_ms", 1)
        _check_range(self, "read_node_scaling", 0, 1)
        _check_range(self, "replica_moves_in_flight_max", 1, 10_000)
        _check_range(self, "replica_move_time_ms_max", 1)


@dataclass(frozen=True, slots=True)
class ReshardConfig:
    """Bounds of one split or merge (``mafka4.coordinator.control.resharding``)."""

    # The feed streams of the nodes leading a parent must reach a cut within this; otherwise the
    # reshard is abandoned (ReshardConflict, retriable) and they go on under the old layout.
    hold_wait_ms_max: int = 20 * SECOND_MS
    # Hosting the children's replicas on their read nodes (opening logs, no process starts) and
    # releasing the held streams: calls to read nodes not answered within this fail the step.
    call_timeout_ms: int = 30 * SECOND_MS
    # A scale step (one split or merge) that fails retriably is tried this often in a row, then
    # the error is raised (the steps done so far stay done).
    step_attempts_max: int = 3

    def __post_init__(self) -> None:
        _check_range(self, "hold_wait_ms_max", 1, 600 * SECOND_MS)
        _check_range(self, "call_timeout_ms", 1, 3600 * SECOND_MS)
        _check_range(self, "step_attempts_max", 1, 100)


@dataclass(frozen=True, slots=True)
class FeederConfig:
    """Bounds of one feed stream (``mafka4.virtual.partition_feed``): a read node's reader of one
    physical partition, which splits it into the VPs the node leads."""

    # One fetch of committed physical data returns at most this many bytes (at least one batch).
    fetch_bytes_max: int = 16 * MiB
    # A fetch with nothing committed past the stream's offset waits at most this long. It answers
    # as soon as something is committed, and a hold, a release or a role change cuts the wait
    # (``PartitionFeed._round``), so the bound only says how often an idle partition's stream
    # asks again (at 500 ms, twice a second per topic for nothing).
    fetch_wait_ms_max: int = 5 * SECOND_MS
    # Records of one VP are appended in batches of at most this many records.
    feed_records_max: int = 5000
    # A VP that got no records in a round hears of the stream's new progress within this long,
    # so the VP leaders can tell a partition the stream keeps up with from a stalled stream
    # (RisrConfig.feed_lag_ms_max, 10 s). A VP hears nothing while nothing changes for it.
    report_interval_ms: int = 2500
    # Physical and VP metadata (leaders, ISR, layout) are re-read from etcd at least this often; a
    # failed fetch, a role notice and a reshard's release make the read node read it at once.
    metadata_max_age_ms: int = 30 * SECOND_MS
    # A fetch not answered this fast counts as failed; the stream backs off and resumes from the
    # VPs' recorded progress.
    call_timeout_ms: int = 30 * SECOND_MS
    # Pause after a failed round before the stream resumes.
    retry_backoff_ms: int = 200
    # A stream held for a reshard that is not released within this long cancels the hold itself,
    # fenced in etcd so that the reshard then fails instead of using a cut the stream passed; it
    # then goes on feeding.
    hold_ms_max: int = 30 * SECOND_MS

    def __post_init__(self) -> None:
        _check_range(self, "fetch_bytes_max", 1 * KiB, 256 * MiB)
        _check_range(self, "fetch_wait_ms_max", 0, 60 * SECOND_MS)
        _check_range(self, "feed_records_max", 1, FEED_RECORDS_MAX)
        _check_range(self, "report_interval_ms", 1, 600 * SECOND_MS)
        _check_range(self, "metadata_max_age_ms", 1)
        _check_range(self, "call_timeout_ms", self.fetch_wait_ms_max + 1)
        _check_range(self, "retry_backoff_ms", 0, 60 * SECOND_MS)
        _check_range(self, "hold_ms_max", 1, 600 * SECOND_MS)


@dataclass(frozen=True, slots=True)
class ReadNodeConfig:
    """Bounds of one read node (``mafka4.virtual.read_node``): the actor that hosts VP replicas."""

    # One replication fetch between two read nodes (every VP the pair shares) returns at most
    # this many bytes, and at most replica_vp_fetch_bytes_max of them for one VP.
    replica_fetch_bytes_max: int = 8 * MiB
    replica_vp_fetch_bytes_max: int = 1 * MiB
    # A replication fetch with nothing new for any of its VPs waits at most this long.
    replica_fetch_wait_ms_max: int = 500
    # After a failed replication fetch (the leader's node dead or restarting) the follower
    # node waits this long before it asks again.
    replica_fetch_backoff_ms: int = 100
    # A call to another read node not answered this fast counts as failed.
    call_timeout_ms: int = 30 * SECOND_MS
    # Every VP replica that changed flushes by its log's policy and checkpoints its HW this often
    # (an idle one is not visited: virtual.housekeeping).
    housekeeping_interval_ms: int = 1 * SECOND_MS
    # Log retention of the VP replicas that changed or whose oldest segment expired runs this often.
    retention_check_interval_ms: int = 60 * SECOND_MS
    # Where each feed stream stands is written to etcd (keys.feed_position) this often, for
    # physical retention, which keeps what no read node has fed yet.
    feed_position_interval_ms: int = 5 * SECOND_MS
    # The node writes its load over the last interval (keys.read_node_load, under its liveness
    # lease; virtual.load_meter) this often, for the controller's read-node scaling (issue 38):
    # long enough that a report's rates smooth out consumers' bursts and that etcd takes one small
    # put per read node per interval, short enough that the controller sees a load rise within
    # a few reports of it.
    load_report_interval_ms: int = 10 * SECOND_MS
    # The node holds its liveness key (keys.read_node_liveness) under a lease of this TTL,
    # refreshed every third of it: the controller learns of a dead read node at most this long
    # after it died, then restarts it and fails its VPs over.
    lease_ttl_s: int = 5
    # The node's log directory (every VP log it hosts) holds at most this many bytes; past it VP
    # appends fail as on a full disk (``log.log_dir_budget``): feeding and replication to the
    # node's VPs stop and resume once space returns. None: no bound. ``set_log_dir_bytes_max``
    # changes it on a running node (the chaos runs' disk-full fault).
    log_dir_bytes_max: int | None = None
    feeder: FeederConfig = FeederConfig()

    def __post_init__(self) -> None:
        _check_range(self, "replica_fetch_bytes_max", 1 * KiB, 256 * MiB)
        _check_range(self, "replica_vp_fetch_bytes_max", 1 * KiB, self.replica_fetch_bytes_max)
        _check_range(self, "replica_fetch_wait_ms_max", 0, 60 * SECOND_MS)
        _check_range(self, "replica_fetch_backoff_ms", 0, 60 * SECOND_MS)
        _check_range(self, "call_timeout_ms", self.replica_fetch_wait_ms_max + 1)
        _check_range(self, "housekeeping_interval_ms", 10, 60 * SECOND_MS)
        _check_range(self, "retention_check_interval_ms", 1 * SECOND_MS)
        _check_range(self, "feed_position_interval_ms", 100, 600 * SECOND_MS)
        _check_range(self, "load_report_interval_ms", 100, 600 * SECOND_MS)
        _check_range(self, "lease_ttl_s", 2, 600)
        _check_optional_range(self, "log_dir_bytes_max", 0)


@dataclass(frozen=True, slots=True)
class ClientPortConfig:
    """Bounds of a node's client port (``mafka4.protocol.server.ClientPortServer``)."""

    # A frame announcing more than this is refused and its connection dropped.
    frame_bytes_max: int = PROTOCOL_FRAME_BYTES_MAX
    # Requests of one connection running at once; beyond it the server reads nothing more from that
    # connection until one ends (back-pressure on the client, not an error).
    requests_in_flight_max: int = 64
    # Open client connections; a new one beyond it is closed at once (and logged).
    connections_max: int = 4096
    # A connection that has not authenticated this long after it opened is closed.
    auth_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        _check_range(self, "frame_bytes_max", PROTOCOL_UNAUTHENTICATED_FRAME_BYTES_MAX, 1024 * MiB)
        _check_range(self, "requests_in_flight_max", 1, 1_000_000)
        _check_range(self, "connections_max", 1, 1_000_000)
        if isinstance(self.auth_timeout_s, bool) or not isinstance(self.auth_timeout_s, (int, float)) \
                or not 0 < self.auth_timeout_s <= 3600:
            raise InvalidConfig(f"auth_timeout_s={self.auth_timeout_s!r} must be a number of seconds above 0 "
                                f"and at most 3600")
