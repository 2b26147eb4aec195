"""What ``mafka4 bench lanes`` is asked to measure (``LanesBenchSettings``), and its pure figures.

Kept apart from ``benchmarks.lanes`` (the driver) so that the CLI reads the defaults without
importing Ray. A field with a ``help`` in its metadata is an option of the command
(``mafka4.cli.bench``); the others are fixed for the bench.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from mafka4.bench.stats import nearest_rank_value
from mafka4.errors import InvalidConfig

MODES = ("mafka3", "mafka4")


@dataclass(frozen=True, slots=True)
class LanesBenchSettings:
    repetitions: int = field(default=2, metadata={"help": "rounds of every mode and lane count, the modes alternating"})
    lane_counts: tuple[int, ...] = field(default=(1, 10, 100), metadata={"help": "lanes the produce phase spreads over"})
    mafka3_lanes_max: int = field(default=10, metadata={
        "help": "the most lanes a Mafka3-mode run opens: each lane is a topic with its own physical partitions and "
                "replica actors (about 90 MB each), so 100 lanes of 2 partitions are 200 actors"})
    rate_msgs_s: int = field(default=500, metadata={"help": "the produce phase's paced rate, over all lanes"})
    produce_s: float = field(default=10.0, metadata={"help": "the produce phase's length"})
    idle_lanes: int = field(default=200, metadata={"help": "lanes the idle-cost phase opens on one Mafka4 topic"})
    window_s: float = field(default=20.0, metadata={"help": "the idle-cost phase's measuring windows"})
    takeovers: int = field(default=3, metadata={"help": "lane members joining mid-stream, one per trial"})
    partitions: int = 2
    replication_factor: int = 1
    message_bytes: int = 100
    keys: int = 100
    linger_ms: int = 1
    # The takeover phase: its rate (trunk and lane alternating), the trunk member's warm-up before the
    # lane member joins, and the window around the join in which gaps are compared.
    takeover_rate_msgs_s: int = 400
    warmup_s: float = 5.0
    gap_window_s: float = 5.0
    settle_s: float = 5.0
    drain_s_max: float = 120.0

    def __post_init__(self) -> None:
        for name in ("repetitions", "mafka3_lanes_max", "rate_msgs_s", "idle_lanes", "takeovers", "partitions",
                     "replication_factor", "message_bytes", "keys", "takeover_rate_msgs_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfig(f"{name}={value!r}: give a whole number of at least 1")
        if not self.lane_counts or any(count < 1 or count > 1000 for count in self.lane_counts):
            raise InvalidConfig(f"lane_counts={list(self.lane_counts)}: give lane counts from 1 to 1000")
        for name in ("produce_s", "window_s", "warmup_s", "gap_window_s"):
            if not 0 < getattr(self, name) <= 3600:
                raise InvalidConfig(f"{name}={getattr(self, name)!r}: give a number of seconds above 0, at most 3600")

    def runs(self) -> list[tuple[int, str, int]]:
        """(repetition, mode, lanes) of every produce run, in order: per repetition, the lane counts in
        turn, and for each the modes alternating (A B A B), Mafka3 skipping counts above its bound."""
        return [(repetition, mode, lanes) for repetition in range(self.repetitions) for lanes in self.lane_counts
                for mode in (MODES if repetition % 2 == 0 else MODES[::-1])
                if mode == "mafka4" or lanes <= self.mafka3_lanes_max]


def latency_figures(latencies_ms: Sequence[float]) -> dict:
    return {"count": len(latencies_ms),
            **{f"p{label}_ms": round(nearest_rank_value(latencies_ms, q), 3) if latencies_ms else None
               for label, q in (("50", "50"), ("99", "99"), ("99_9", "99.9"))}}


def produce_ratios(runs: Sequence[dict]) -> list[dict]:
    """Per mode and repetition: produce p99.9 at each lane count over the same mode's at the fewest lanes."""
    out = []
    for mode in MODES:
        for repetition in sorted({run["repetition"] for run in runs}):
            mine = {run["lanes"]: run for run in runs if run["mode"] == mode and run["repetition"] == repetition}
            if not mine:
                continue
            base = mine[min(mine)]
            for lanes, run in sorted(mine.items()):
                base_p, p = base["latency"]["p99_9_ms"], run["latency"]["p99_9_ms"]
                out.append({"mode": mode, "repetition": repetition, "lanes": lanes, "over_lanes": min(mine),
                            "p99_9_ratio": round(p / base_p, 3) if base_p and p else None,
                            "physical_partitions": run["physical_partitions"], "replica_actors": run["replica_actors"]})
    return out


def largest_gap_ms(times_s: Sequence[float], start_s: float, end_s: float) -> float | None:
    """The longest time between consecutive arrivals in ``[start_s, end_s)`` (from ``start_s`` to the
    first one, and from the last one to ``end_s``), in ms; None if nothing arrived in it."""
    inside = sorted(t for t in times_s if start_s <= t < end_s)
    if not inside:
        return None
    edges = [start_s, *inside, end_s]
    return round(max(b - a for a, b in zip(edges, edges[1:])) * 1000, 3)
