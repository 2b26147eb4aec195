"""What a codec saves on disk and costs in time, in ``mafka4 bench produce`` (pure).

**Bytes written per message** is the growth of the topic's leader logs over one producer run
(``LogTotals``, summed over the partitions, before and after: each leader's ``describe()``
reports its log's ``size_bytes``, the segment files' bytes, and its ``log_end_offset``),
divided by the messages of the run. It counts what a log stores for a message: its share of
the batch header and of the batch's payload (msgpack framing, key, value, timestamp delta),
compressed as the producer sent it. Every replica of a partition stores the same bytes, so a
topic's disk use is this times the replication factor. Next to it stand the **payload bytes
per message** (the values sent, uncompressed) and their ratio: above 1 the framing costs more
than the codec saves, below 1 the codec saves more.

The figure holds only if the leader logs grew by exactly the run's messages (nothing else
wrote to the topic, every message reached its log) and retention removed nothing meanwhile;
``bytes_written`` refuses the run otherwise.

**The comparison** (``compression_comparison``) puts the runs of one bench run side by side, one
per codec in the order given, each next to the first (the baseline): saturated msgs/s, paced
latency and bytes written per message, and each one's ratio to the baseline's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence


@dataclass(frozen=True, slots=True)
class LogTotals:
    """The leader logs of a topic at one moment, summed over its partitions."""

    size_bytes: int
    log_start_offset: int
    log_end_offset: int

    def __post_init__(self) -> None:
        assert self.size_bytes >= 0 and 0 <= self.log_start_offset <= self.log_end_offset, self

    @classmethod
    def of(cls, described: Iterable[dict]) -> "LogTotals":
        """The sum of what each partition's leader reports (``PhysicalPartition.describe()``)."""
        leaders = list(described)
        assert leaders, "a topic has at least one partition"
        return cls(sum(d["size_bytes"] for d in leaders), sum(d["log_start_offset"] for d in leaders),
                   sum(d["log_end_offset"] for d in leaders))


def bytes_written(before: LogTotals, after: LogTotals, messages: int, payload_bytes: int) -> dict:
    """What the leader logs grew by while ``messages`` messages carrying ``payload_bytes`` of values were
    written, per message; ``ValueError`` when the growth is not those messages' alone."""
    assert messages > 0 and payload_bytes > 0, (messages, payload_bytes)
    if after.log_start_offset != before.log_start_offset:
        raise ValueError(f"retention removed segments during the run (log start offsets {before.log_start_offset} "
                         f"then {after.log_start_offset}, summed over the partitions): the growth of the logs is not "
                         f"what was written")
    grown = after.log_end_offset - before.log_end_offset
    if grown != messages:
        raise ValueError(f"the leader logs grew by {grown} messages while the run wrote {messages}: another producer "
                         f"wrote to the topic, or some messages never reached a log")
    log_bytes = after.size_bytes - before.size_bytes
    assert log_bytes > 0, (before, after)
    return {"messages": messages, "log_bytes": log_bytes, "payload_bytes": payload_bytes,
            "bytes_written_per_message": round(log_bytes / messages, 2),
            "payload_bytes_per_message": round(payload_bytes / messages, 2),
            "written_vs_payload_ratio": round(log_bytes / payload_bytes, 4)}


def compression_comparison(runs: Sequence[dict]) -> dict:
    """Per codec, in run order, the figures of its saturated (``producer``) and paced runs, and their
    ratios to the first codec's (the baseline).

    A run is ``{"compression": name, "producer": {...}, "paced": {...}}`` as ``bench.produce`` makes
    it, each of the two with ``msgs_per_s``, ``latency_ms`` and ``bytes_written``.
    """
    assert runs and len({run["compression"] for run in runs}) == len(runs), [run["compression"] for run in runs]
    baseline = _figures(runs[0])
    codecs = {}
    for run in runs:
        figures = _figures(run)
        codecs[run["compression"]] = {
            **figures,
            "producer_msgs_per_s_vs_baseline_ratio": _ratio(figures["producer_msgs_per_s"],
                                                            baseline["producer_msgs_per_s"]),
            "paced_p99_9_ms_vs_baseline_ratio": _ratio(figures["paced_latency_ms"]["p99.9"],
                                                       baseline["paced_latency_ms"]["p99.9"]),
            "bytes_written_vs_baseline_ratio": _ratio(figures["bytes_written_per_message"],
                                                      baseline["bytes_written_per_message"]),
        }
    return {"baseline": runs[0]["compression"], "codecs": codecs}


def _figures(run: dict) -> dict:
    producer, paced = run["producer"], run["paced"]
    return {
        "producer_msgs_per_s": producer["msgs_per_s"], "paced_msgs_per_s": paced["msgs_per_s"],
        "paced_latency_ms": paced["latency_ms"],
        "payload_bytes_per_message": producer["bytes_written"]["payload_bytes_per_message"],
        # Saturated runs fill batches to batch_bytes_max; paced ones send smaller batches, which compress less.
        "bytes_written_per_message": producer["bytes_written"]["bytes_written_per_message"],
        "paced_bytes_written_per_message": paced["bytes_written"]["bytes_written_per_message"],
        "written_vs_payload_ratio": producer["bytes_written"]["written_vs_payload_ratio"],
    }


def _ratio(value: float, baseline: float) -> float | None:
    return round(value / baseline, 3) if baseline else None
