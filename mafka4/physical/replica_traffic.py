"""``ReplicaTraffic``: what a physical replica counts of the requests it served, for its metrics.

The replica actor (``physical.actor``) bumps these on its event loop as it answers; its metrics
snapshot copies them (``snapshot``) and ``metrics.families`` exposes them. All are totals since the
actor started (Prometheus counters: a restart starts them at 0 again, which ``rate()`` handles).

* produce: batches acknowledged (duplicates of a retried batch included: the producer sent them),
  their bytes and messages; the produce latency histogram, from the batch's arrival at the actor
  to its acknowledgement (for acks=all the wait for the ISR is in it; requests that failed are
  not observed);
* fetch: consumers' and read nodes' fetches answered (``fetch``), and the bytes of batches they carried;
  the end-to-end latency histogram of the batches consumers' fetches carried (``metrics.end_to_end``:
  one observation per batch; read nodes' feeds are not observed, their consumers are, on the read node);
* follower fetch: followers' replication fetches answered (``replica_fetch``), and their bytes.

Pure: the caller measures durations and sizes and gives the time; nothing here reads a clock.
"""

from __future__ import annotations

from mafka4.limits import END_TO_END_LATENCY_BUCKETS_S, PRODUCE_LATENCY_BUCKETS_S
from mafka4.metrics.end_to_end import observe_served
from mafka4.metrics.histogram import LatencyHistogram


class ReplicaTraffic:
    """A replica's request counters; see the module docstring."""

    __slots__ = ("produce_requests", "produce_bytes", "produce_messages", "produce_latency",
                 "fetch_requests", "fetch_bytes", "end_to_end_latency", "follower_fetch_requests",
                 "follower_fetch_bytes")

    def __init__(self):
        self.produce_requests = self.produce_bytes = self.produce_messages = 0
        self.produce_latency = LatencyHistogram(PRODUCE_LATENCY_BUCKETS_S)
        self.fetch_requests = self.fetch_bytes = 0
        self.end_to_end_latency = LatencyHistogram(END_TO_END_LATENCY_BUCKETS_S)
        self.follower_fetch_requests = self.follower_fetch_bytes = 0

    def produced(self, batch_bytes: int, messages: int, latency_s: float) -> None:
        """One produced batch was acknowledged, ``latency_s`` after it arrived."""
        self.produce_requests += 1
        self.produce_bytes += batch_bytes
        self.produce_messages += messages
        self.produce_latency.observe(latency_s)

    def fetched(self, data_bytes: int) -> None:
        self.fetch_requests += 1
        self.fetch_bytes += data_bytes

    def consumer_fetched(self, data: bytes | bytearray | memoryview, now_ms: int) -> None:
        """A consumer's fetch answer carries ``data`` at ``now_ms``: ``fetched``, and the end-to-end
        latency of each of its batches."""
        self.fetched(len(data))
        observe_served(self.end_to_end_latency, data, now_ms)

    def follower_fetched(self, data_bytes: int) -> None:
        self.follower_fetch_requests += 1
        self.follower_fetch_bytes += data_bytes

    def snapshot(self) -> dict:
        return {"produce_requests": self.produce_requests, "produce_bytes": self.produce_bytes,
                "produce_messages": self.produce_messages, "produce_latency": self.produce_latency.snapshot(),
                "fetch_requests": self.fetch_requests, "fetch_bytes": self.fetch_bytes,
                "end_to_end_latency": self.end_to_end_latency.snapshot(),
                "follower_fetch_requests": self.follower_fetch_requests,
                "follower_fetch_bytes": self.follower_fetch_bytes}
