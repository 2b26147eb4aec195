"""End-to-end latency: how old the batches a consumer's fetch answer carries are (pure).

End to end is from a record's timestamp (its producer's create time, written in its batch) to the
moment a consumer's fetch answer carries it, measured on the node that serves the fetch: the read
node for VPs (``ReadNode.fetch``), the physical leader for Mafka3-mode fetches
(``PhysicalPartition.fetch``, consumers' only: read nodes' feeds and followers are no consumers,
and what they fetch reaches consumers later, where it is measured).

One observation per batch served, never per record: ``now_ms`` minus the batch's
``max_timestamp_ms``, read from its header (``batch_frame``: one header unpacked per batch, no
record decoded), into a fixed-bucket ``LatencyHistogram``. So a batch counts the age of its newest
record; its older records were older by at most the batch's time span (the producer's linger). A
fetch serving the same batch again (a consumer that moved back, a second group, a retried fetch)
counts it again: the figure is what consumers were served, not each record once.

Timestamps are the producers' wall clocks and ``now_ms`` the node's: across machines their skew is
in the figure, so it is approximate there (a producer clock ahead of the node's gives 0, never a
negative duration).
"""

from __future__ import annotations

from mafka4.batch_frame import iter_batches
from mafka4.metrics.histogram import LatencyHistogram


def observe_served(histogram: LatencyHistogram, data: bytes | bytearray | memoryview, now_ms: int) -> int:
    """Observe in ``histogram`` the age at ``now_ms`` of each whole batch of ``data`` (batch bytes as
    a fetch answer carries them; see the module docstring); the number of batches observed."""
    observed = 0
    for _, header in iter_batches(data, check_crc=False):
        histogram.observe(max(now_ms - header.max_timestamp_ms, 0) / 1000)
        observed += 1
    return observed
