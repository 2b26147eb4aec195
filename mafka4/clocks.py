"""The two clocks the shells read, named by what they are (cores take ``now_ms`` as an argument).

* ``wall_ms``: milliseconds since the Unix epoch. Its values cross processes and machines:
  record timestamps, RISR catch-up times that a read node compares with its followers' fetches,
  retention ages. It can jump (NTP), so nothing waits on it.
* ``monotonic_ms``: milliseconds of a clock that never goes back, meaningful only within one
  process: timeouts, refresh periods, intervals (a lease's last confirmed refresh).
  ``monotonic_s`` is the same clock in seconds with its full resolution, for durations that a
  millisecond would round away (a replica's produce latency histogram).
"""

from __future__ import annotations

import time

NANOSECONDS_PER_MILLISECOND = 1_000_000


def wall_ms() -> int:
    return time.time_ns() // NANOSECONDS_PER_MILLISECOND


def monotonic_ms() -> int:
    return time.monotonic_ns() // NANOSECONDS_PER_MILLISECOND


def monotonic_s() -> float:
    return time.monotonic()


def wall_ms_fine() -> float:
    """``wall_ms`` with sub-millisecond resolution, for stage stamps (``mafka4.stage_trace``): an
    append takes a tenth of a millisecond, which whole milliseconds would round away."""
    return time.time_ns() / NANOSECONDS_PER_MILLISECOND
