"""Prometheus metric families from a process's plain snapshot (pure).

A node's metrics are made at scrape time from a snapshot: the plain dict its own ``describe``
and counters give (``metrics.exposition`` takes it on the process's event loop and calls these
functions with it). Nothing here registers a global or keeps state between scrapes: each call
builds new ``prometheus_client.metrics_core`` families from the snapshot alone.

Names are ``mafka4_*`` with the unit last (``_seconds``, ``_bytes``, ``_messages``; counters end
in ``_total``). Labels: ``topic``, ``partition``, ``vp``, ``node``, ``group``, ``controller``, ``kind``
and ``reason``; a replica's ``node`` is its replica id (replicas are named by their node). The families of each process:

* a physical replica (``replica_families``): produce requests, bytes and messages and the produce
  latency histogram (arrival at the leader to acknowledgement); fetches and their bytes
  (consumers' and read nodes'; followers' apart); the end-to-end latency histogram of the batches
  consumers' fetches carried (``metrics.end_to_end``: Mafka3-mode consumers); role, leader epoch
  (every election bumps it: ``changes(mafka4_replica_leader_epoch[1h])`` counts them), log start
  and end offsets, HW and size; on the leader only, the ISR size, the replica count, and the 0/1
  gauges under-replicated (ISR smaller than the replicas) and under-min-ISR (smaller than
  ``min_insync_replicas``: acks=all produce is refused). A follower's view of the ISR is not the
  partition's, so it exposes none of those.
* a read node (``read_node_families``): VP replicas hosted; per hosted VP its role, HW and log end
  offset, reads in consumers' fetches and their bytes, and on the leader its RISR size and replica
  count; per feed stream (one per physical partition it feeds) its lag behind the partition's HW in
  messages and in seconds (``virtual.feed_lag``), records fed and errors; per topic it hosts VPs of,
  the end-to-end latency histogram of the batches consumers' fetches carried (labelled ``topic``
  and ``node``, not per VP: 20 series per VP would weigh on a node hosting 100,000 of them).
* the leader of a partition, per group with an offset committed in it (``group_lag_families``):
  the group's lag in messages and in seconds (``metrics.group_lag``), labelled ``group``,
  ``topic`` and ``vp`` (a read node, for its VPs) or ``partition`` (a replica, Mafka3-mode
  groups). No ``node`` label: the series stays one across a failover of the partition's leader.
* a controller process (``controller_families``, from ``metrics.controller_counters``): whether it
  is the active controller and its controller epoch, the controller elections it won, and the
  partition and VP leader elections, reshards (splits, merges) and read-node scaling decisions
  it made, labelled ``controller`` (its id) and ``kind``.
* both (``client_port_families``): the client port's connections, requests, error answers, and
  refusals by reason (``authentication``, ``not_authorized``: an ACL said no, ``bad_frame``,
  ``out_of_turn``: a request its session may not make yet or an API the node does not serve,
  ``connections_max``: a connection closed at once).

A value the snapshot lacks (an older process, a stream with no position yet) is left out, never
exposed as 0.
"""

from __future__ import annotations

from typing import Mapping

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

# The client port's counters (``protocol.server.ClientPortServer.counters`` and the ports' own) that
# count a refusal, and the reason each is exposed under.
REFUSAL_REASONS = {"auth_failures": "authentication", "refusals": "not_authorized", "bad_frames": "bad_frame",
                   "protocol_refusals": "out_of_turn", "connections_refused": "connections_max"}


class _Families:
    """Families by name, each made at its first sample with that sample's label names."""

    def __init__(self):
        self._families: dict[str, Metric] = {}

    def _family(self, kind, name: str, documentation: str, labels: Mapping[str, str]) -> Metric:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = kind(name, documentation, labels=list(labels))
        return family

    def gauge(self, name: str, documentation: str, labels: Mapping[str, str], value: float | None) -> None:
        if value is not None:
            self._family(GaugeMetricFamily, name, documentation, labels).add_metric(list(labels.values()), value)

    def counter(self, name: str, documentation: str, labels: Mapping[str, str], value: float | None) -> None:
        if value is not None:
            self._family(CounterMetricFamily, name, documentation, labels).add_metric(list(labels.values()), value)

    def histogram(self, name: str, documentation: str, labels: Mapping[str, str], snapshot: Mapping | None) -> None:
        if snapshot is not None:
            buckets, sum_s = histogram_buckets(snapshot)
            self._family(HistogramMetricFamily, name, documentation, labels).add_metric(
                list(labels.values()), buckets, sum_s)

    def all(self) -> list[Metric]:
        return list(self._families.values())


def histogram_buckets(snapshot: Mapping) -> tuple[list[tuple[str, float]], float]:
    """Prometheus's cumulative ``le`` buckets (``+Inf`` last) and the sum, from a
    ``metrics.histogram.LatencyHistogram`` snapshot."""
    bounds, counts = snapshot["bounds_s"], snapshot["counts"]
    assert len(counts) == len(bounds) + 1, (bounds, counts)
    buckets, running = [], 0
    for bound, count in zip([*map(_bucket_bound, bounds), "+Inf"], counts):
        running += count
        buckets.append((bound, running))
    return buckets, snapshot["sum_s"]


def _bucket_bound(bound: float) -> str:
    return repr(float(bound))


END_TO_END_FAMILY = "mafka4_end_to_end_latency_seconds"
END_TO_END_HELP = ("End-to-end latency of the batches consumers' fetches carried: from a batch's newest record's "
                   "producer timestamp to the fetch answer, on the node serving it; one observation per batch "
                   "served, a re-read counted again. Producer and node clocks differ across machines, so "
                   "approximate there (their skew is in it).")


def _leader(snapshot: Mapping) -> bool:
    return snapshot.get("role") == "leader"


# --- a physical replica ---------------------------------------------------------------------

def replica_families(snapshot: Mapping) -> list[Metric]:
    """The families of one physical replica's snapshot: its ``topic``, ``partition`` (number), ``node``
    (the replica id), ``replica`` (its ``describe``), ``min_insync_replicas``, ``traffic``
    (``physical.replica_traffic``), ``client_port`` (the port's counters) and, on the leader,
    ``group_lag`` (``group_lag_families``)."""
    families = _Families()
    labels = {"topic": snapshot["topic"], "partition": str(snapshot["partition"]), "node": snapshot["node"]}
    traffic = snapshot.get("traffic") or {}
    described = snapshot["replica"]
    for name, what in (("produce_requests", "produced batches acknowledged"),
                       ("produce_bytes", "bytes of the produced batches acknowledged"),
                       ("produce_messages", "messages of the produced batches acknowledged"),
                       ("fetch_requests", "fetches answered to consumers and read nodes' feeds"),
                       ("fetch_bytes", "bytes of batches in fetches answered to consumers and feeds"),
                       ("follower_fetch_requests", "followers' replication fetches answered"),
                       ("follower_fetch_bytes", "bytes of batches in followers' fetches answered")):
        families.counter(f"mafka4_replica_{name}_total", f"A physical replica's {what}.", labels, traffic.get(name))
    families.histogram("mafka4_replica_produce_latency_seconds",
                       "A physical replica's produce latency: a batch's arrival to its acknowledgement "
                       "(for acks=all, the ISR's replication included).", labels, traffic.get("produce_latency"))
    families.histogram(END_TO_END_FAMILY, END_TO_END_HELP, labels, traffic.get("end_to_end_latency"))
    leader = _leader(described)
    families.gauge("mafka4_replica_leader", "1 if this replica leads its partition, else 0.", labels, int(leader))
    families.gauge("mafka4_replica_leader_epoch", "The partition's leader epoch as this replica knows it "
                   "(each election bumps it).", labels, described.get("leader_epoch"))
    for name, key, what in (("log_start_offset", "log_start_offset", "first offset its log holds"),
                            ("log_end_offset", "log_end_offset", "offset after its log's last message"),
                            ("high_watermark", "high_watermark", "high watermark: messages below it are committed"),
                            ("log_size_bytes", "size_bytes", "log size")):
        families.gauge(f"mafka4_replica_{name}", f"A physical replica's {what}.", labels, described.get(key))
    if leader:
        isr, replicas = len(described["isr"]), len(described["replicas"])
        families.gauge("mafka4_replica_isr_size", "In-sync replicas of the partition (on its leader).", labels, isr)
        families.gauge("mafka4_replica_replicas", "Replicas of the partition (on its leader).", labels, replicas)
        families.gauge("mafka4_replica_under_replicated", "1 if the partition's ISR is smaller than its replicas "
                       "(on its leader), else 0.", labels, int(isr < replicas))
        min_isr = snapshot.get("min_insync_replicas")
        families.gauge("mafka4_replica_under_min_isr", "1 if the partition's ISR is smaller than "
                       "min_insync_replicas, so acks=all produce is refused (on its leader), else 0.", labels,
                       None if min_isr is None else int(isr < min_isr))
    group_lag_families(families, "partition", snapshot.get("group_lag"))
    client_port_families(families, labels, snapshot.get("client_port"))
    return families.all()


# --- a read node ----------------------------------------------------------------------------

def read_node_families(snapshot: Mapping) -> list[Metric]:
    """The families of one read node's snapshot: its ``describe`` (``node_id``, ``hosted_vps``, ``vps``
    by ``str(VpId)``, ``feeds`` by topic and partition) with ``client_port`` (the port's counters)
    and ``group_lag`` (the VPs led here: ``group_lag_families``)."""
    families = _Families()
    node = snapshot["node_id"]
    families.gauge("mafka4_read_node_hosted_vps", "VP replicas this read node hosts.", {"node": node},
                   snapshot.get("hosted_vps"))
    for name, described in snapshot.get("vps", {}).items():
        topic, _, vp = name.rpartition("/v")
        _vp_families(families, {"topic": topic, "vp": vp, "node": node}, described)
    for topic, feeds in snapshot.get("feeds", {}).items():
        for partition, described in feeds.items():
            _feed_families(families, {"topic": topic, "partition": str(partition), "node": node}, described)
    for topic, latency in sorted((snapshot.get("end_to_end_latency") or {}).items()):
        families.histogram(END_TO_END_FAMILY, END_TO_END_HELP, {"topic": topic, "node": node}, latency)
    group_lag_families(families, "vp", snapshot.get("group_lag"))
    client_port_families(families, {"node": node}, snapshot.get("client_port"))
    return families.all()


def group_lag_families(families: _Families, number_label: str, rows: list[Mapping] | None) -> None:
    """Each group's lag behind a partition led here, from rows with ``group``, ``topic``, the partition's
    number under ``number_label`` (``vp`` or ``partition``), ``lag_messages`` and ``lag_ms``."""
    for row in rows or ():
        labels = {"group": row["group"], "topic": row["topic"], number_label: str(row[number_label])}
        families.gauge("mafka4_group_lag_messages", "Messages of a partition below its high watermark that a "
                       "consumer group has not committed (on the partition's leader).", labels,
                       row.get("lag_messages"))
        lag_ms = row.get("lag_ms")
        families.gauge("mafka4_group_lag_seconds", "Age of the oldest message of a partition a consumer group has "
                       "not committed: now minus the timestamp of the first record at or after its committed "
                       "offset (0: caught up; on the partition's leader).", labels,
                       None if lag_ms is None else lag_ms / 1000)


def _vp_families(families: _Families, labels: Mapping[str, str], described: Mapping) -> None:
    leader = _leader(described)
    families.gauge("mafka4_vp_leader", "1 if this replica leads its VP, else 0.", labels, int(leader))
    families.gauge("mafka4_vp_high_watermark", "A VP replica's high watermark: consumers read below it.", labels,
                   described.get("high_watermark"))
    families.gauge("mafka4_vp_log_end_offset", "Offset after a VP replica's last message.", labels,
                   described.get("log_end_offset"))
    if leader and "risr" in described:
        families.gauge("mafka4_vp_risr_size", "Read in-sync replicas of the VP (on its leader).", labels,
                       len(described["risr"]))
    if leader and "replicas" in described:
        families.gauge("mafka4_vp_replicas", "Read replicas of the VP (on its leader).", labels,
                       len(described["replicas"]))
    families.counter("mafka4_vp_fetch_requests_total", "Reads of this VP replica in consumers' fetches (one "
                     "fetch reads every VP its consumer reads on the node).", labels, described.get("fetch_requests"))
    families.counter("mafka4_vp_fetch_bytes_total", "Bytes of batches read from this VP replica by consumers.",
                     labels, described.get("fetch_bytes"))


def _feed_families(families: _Families, labels: Mapping[str, str], described: Mapping) -> None:
    families.gauge("mafka4_feed_lag_messages", "Committed messages of the physical partition this read node's "
                   "feed has not fed yet.", labels, described.get("lag_messages"))
    lag_ms = described.get("lag_ms")
    families.gauge("mafka4_feed_lag_seconds", "Age of the oldest committed message of the physical partition this "
                   "read node's feed has not fed yet (0: none).", labels, None if lag_ms is None else lag_ms / 1000)
    families.gauge("mafka4_feed_next_offset", "The physical offset the feed reads next.", labels,
                   described.get("next_offset"))
    families.gauge("mafka4_feed_high_watermark", "The physical partition's high watermark in the feed's last "
                   "fetch answer.", labels, described.get("high_watermark"))
    families.counter("mafka4_feed_records_total", "Records the feed split and handed to the VPs it serves.", labels,
                     described.get("records_fed"))
    families.counter("mafka4_feed_errors_total", "Failed feed rounds (each resumes).", labels,
                     described.get("errors"))


# --- a controller process -------------------------------------------------------------------

def controller_families(snapshot: Mapping) -> list[Metric]:
    """The families of one controller process's ``ControllerCounters.snapshot``."""
    families = _Families()
    labels = {"controller": snapshot["controller_id"]}
    families.gauge("mafka4_controller_active", "1 if this controller process is the active controller, else 0 "
                   "(a standby).", labels, int(bool(snapshot.get("active"))))
    if snapshot.get("active"):
        families.gauge("mafka4_controller_epoch", "The controller epoch of the active controller (each controller "
                       "election bumps it).", labels, snapshot.get("controller_epoch"))
    families.counter("mafka4_controller_elections_won_total", "Controller elections this process won (a failover "
                     "of the controller to it, or the cluster's first controller).", labels,
                     snapshot.get("elections_won"))
    for counter, name, what in (
            ("leader_elections", "mafka4_controller_leader_elections_total",
             "Leaders elected by this controller, by kind (partition: a physical partition's; vp: a VP's)."),
            ("reshards", "mafka4_controller_reshards_total", "Reshards this controller stored, by kind (split, merge)."),
            ("read_node_scaling", "mafka4_controller_read_node_scaling_decisions_total",
             "Read-node scaling decisions of this controller, by kind (add, release, hold).")):
        for kind, count in (snapshot.get(counter) or {}).items():
            families.counter(name, what, {**labels, "kind": kind}, count)
    return families.all()


# --- a client port --------------------------------------------------------------------------

def client_port_families(families: _Families, labels: Mapping[str, str], counters: Mapping | None) -> None:
    """The client port's counters (none if the process serves no port) under ``labels``."""
    if counters is None:
        return
    families.counter("mafka4_client_port_connections_total", "Client connections accepted.", labels,
                     counters.get("connections"))
    families.gauge("mafka4_client_port_connections_open", "Client connections open.", labels,
                   counters.get("connections_open"))
    families.counter("mafka4_client_port_requests_total", "Client requests read.", labels, counters.get("requests"))
    families.counter("mafka4_client_port_errors_total", "Client requests answered with an error by their handler.",
                     labels, counters.get("errors"))
    for counter, reason in REFUSAL_REASONS.items():
        families.counter("mafka4_client_port_refused_total", "Client requests (and connections) refused, by reason.",
                         {**labels, "reason": reason}, counters.get(counter))
