"""``LoadMeter``: what a read node counts of its own load, and its report over each window.

The node bumps two counters on its hot paths, and every ``load_report_interval_ms`` turns them
into a ``ReadNodeLoad`` (``metadata.read_node_load``) over the window since the previous report:
rates are the counters' growth divided by the window. Both counters only grow; a report
remembers where they stood, so nothing is reset and no count is lost between two reports. The
replica counts are not counters: the node passes what it hosts at the report's time, the
replicas of open VPs and those of sealed VPs apart (``ReadNode._measure_load``), since only the
open ones count for read-node scaling.

* ``fed_bytes_total``: bytes of VP batches the node's feed streams appended to the VP leaders
  it hosts (``HostedVp.feed``: after the column split, repeats dropped, each record with its
  source header). Records of VPs led elsewhere, which a stream fetches and drops, do not count,
  nor do a follower's replicated appends: the measure is the feed work of the VPs placed on this
  node, which moving VPs to another node takes away.
* ``fetch_cpu_ns_total``: CPU nanoseconds of the node's thread spent building consumers' fetch
  answers (``consumer_reads.read_all`` in ``ReadNode.fetch``: reading the batches from the VP
  logs under the fetch's byte budget), as ``time.thread_time_ns`` deltas taken around that
  synchronous call, so no other task's CPU is in it. What it leaves out (so the figure is a lower
  bound of the fetch path's CPU): the long poll's readiness checks, decoding a request and
  encoding and sending its answer (the client port's frames, the stream calls' pickles),
  scheduling the request's task, ``list_offsets`` and ``offsets_for_time``, and answering
  following nodes' replication fetches. The two clock reads cost about 1 us a fetch.

Threads: every bump happens on the read node's event loop thread (the Ray actor's one loop:
the feed streams, ``ReadNode.fetch`` from Ray calls, stream calls and the client port's
``VP_FETCH`` all run there; only opening logs and fsyncs run on a worker thread, and they bump
nothing), so the counters are plain integers with no lock, and a bump is one integer add.

Invariants: the counters never decrease; a report's window is positive and starts where the
previous report's ended (or at the meter's creation); ``fetch_cpu_cores`` is at most 1.0 but
for clock granularity, since one thread does all the measured work.

Pure: no I/O, no clock (the shell passes both clocks' readings in).
"""

from __future__ import annotations

from typing import AbstractSet, Collection, Mapping

from mafka4.metadata.read_node_load import ReadNodeLoad

NANOSECONDS_PER_MILLISECOND = 1_000_000
MILLISECONDS_PER_SECOND = 1_000


def open_and_sealed(hosted: Collection[tuple[str, int]],
                    sealed_by_topic: Mapping[str, AbstractSet[int]]) -> tuple[int, int]:
    """(replicas of open VPs, replicas of sealed VPs) among ``hosted``, the (topic, VP id) of every
    replica a node hosts, given each topic's sealed VPs as the node knows them (retired ones
    included: a retired VP was sealed first). Walks the sealed VPs, not the hosted ones: a node
    hosts up to 100,000 VPs, few of them sealed, and no periodic pass walks every hosted VP."""
    sealed = sum(1 for topic, vps in sealed_by_topic.items() for vp in vps if (topic, vp) in hosted)
    return len(hosted) - sealed, sealed


class LoadMeter:
    """The load counters of read node ``node_id``; see the module docstring.

    ``monotonic_now_ms``: the reading of a monotonic clock at creation (windows are measured on
    it; the wall clock only dates a report, since it may jump)."""

    __slots__ = ("node_id", "fed_bytes_total", "fetch_cpu_ns_total", "last_report", "_window_start_ms",
                 "_fed_bytes_at_window_start", "_fetch_cpu_ns_at_window_start")

    def __init__(self, node_id: str, monotonic_now_ms: int):
        self.node_id = node_id
        # The hot paths' counters: bumped by the node directly (``+=``), read by ``report``.
        self.fed_bytes_total = 0
        self.fetch_cpu_ns_total = 0
        self.last_report: ReadNodeLoad | None = None  # for ``ReadNode.describe``
        self._window_start_ms = monotonic_now_ms
        self._fed_bytes_at_window_start = 0
        self._fetch_cpu_ns_at_window_start = 0

    def report(self, hosted_vp_replicas: int, wall_now_ms: int, monotonic_now_ms: int, *,
               sealed_vp_replicas: int = 0) -> ReadNodeLoad | None:
        """The load over the window since the previous report, which ends now; the next window
        starts here. None if no time passed on the monotonic clock since (the window stays open).
        ``hosted_vp_replicas``: replicas of open VPs hosted now; ``sealed_vp_replicas``: of sealed VPs."""
        window_ms = monotonic_now_ms - self._window_start_ms
        if window_ms <= 0:
            return None
        fed_bytes, fetch_cpu_ns = self.fed_bytes_total, self.fetch_cpu_ns_total
        assert fed_bytes >= self._fed_bytes_at_window_start and fetch_cpu_ns >= self._fetch_cpu_ns_at_window_start, (
            f"read node {self.node_id}: a load counter went back ({fed_bytes} < {self._fed_bytes_at_window_start} "
            f"or {fetch_cpu_ns} < {self._fetch_cpu_ns_at_window_start})")
        report = ReadNodeLoad(
            node_id=self.node_id,
            hosted_vp_replicas=hosted_vp_replicas,
            fed_bytes_per_s=(fed_bytes - self._fed_bytes_at_window_start) * MILLISECONDS_PER_SECOND / window_ms,
            fetch_cpu_cores=(fetch_cpu_ns - self._fetch_cpu_ns_at_window_start) / NANOSECONDS_PER_MILLISECOND / window_ms,
            window_ms=window_ms,
            measured_at_ms=wall_now_ms,
            sealed_vp_replicas=sealed_vp_replicas,
        )
        self._window_start_ms = monotonic_now_ms
        self._fed_bytes_at_window_start, self._fetch_cpu_ns_at_window_start = fed_bytes, fetch_cpu_ns
        self.last_report = report
        return report
