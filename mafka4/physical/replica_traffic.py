"""``ReplicaTraffic``: what a physical replica counts of the requests it served, for its metrics.

The replica actor (``physical.actor``) bumps these on its event loop as it answers; its metrics
snapshot copies them (``snapshot``) and ``metrics.families`` exposes them. All are totals since the
actor started (Prometheus counters: a restart starts them at 0 again, which ``rate()`` handles).

* produce: batches acknowledged (duplicates of a retried batch included: the producer sent them),
  their bytes and messages; the produce latency histogram, from the batch's arrival at the actor
  to its acknowledgement (for acks=all the wait for the ISR is in it; requests that failed are
  not observed);
* fetch: consumers' and read nodes' fetches answered (``fetch``), and the bytes of batches they carried;
* follower fetch: followers' replication fetches answered (``replica_fetch``), and their bytes.

Pure: the caller measures durations and sizes; nothing here reads a clock.
"""

from __future__ import annotations

from mafka4.limits import PRODUCE_LATENCY_BUCKETS_S
from mafka4.metrics.histogram import LatencyHistogram


class ReplicaTraffic:
    """A replica's request counters; see the module docstring."""

    __slots__ = ("produce_requests", "produce_bytes", "produce_messages", "produce_latency",
                 "fetch_requests", "fetch_bytes", "follower_fetch_requests", "follower_fetch_bytes")

    def __init__(self):
        self.produce_requests = self.produce_bytes = self.produce_messages = 0
        self.produce_latency = LatencyHistogram(PRODUCE_LATENCY_BUCKETS_S)
        self.fetch_requests = self.fetch_bytes = 0
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

    def follower_fetched(self, data_bytes: int) -> None:
        self.follower_fetch_requests += 1
        self.follower_fetch_bytes += data_bytes

    def snapshot(self) -> dict:
        return {"produce_requests": self.produce_requests, "produce_bytes": self.produce_bytes,
                "produce_messages": self.produce_messages, "produce_latency": self.produce_latency.snapshot(),
                "fetch_requests": self.fetch_requests, "fetch_bytes": self.fetch_bytes,
                "follower_fetch_requests": self.follower_fetch_requests,
                "follower_fetch_bytes": self.follower_fetch_bytes}
