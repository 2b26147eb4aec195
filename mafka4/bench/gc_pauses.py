"""The garbage collector's pauses in a bench's own process while a run measures (``GcPauses``).

A full collection walks every object the collector tracks, and a driver that imported Ray
holds tens of thousands (``mafka4.collector``): one took 100-150 ms in a producing
driver here. In a latency run that pause stalls every message in flight. Each run's report
therefore says how many collections of each generation it ran, how long they took in all, and
the longest pause: a tail far above the longest pause is not the driver's collector.
"""

from __future__ import annotations

import gc
import time

GENERATIONS = ("young", "middle", "full")  # gc's generations 0, 1 and 2


class GcPauses:
    """Counts and times this process's collections while entered (``gc.callbacks``).

    A collection runs on the thread whose allocation started it, holding the interpreter's
    lock, and collections never overlap: one start time at a time is enough."""

    def __init__(self) -> None:
        self._started_ns: int | None = None
        self.collections = [0] * len(GENERATIONS)
        self.pause_ns = [0] * len(GENERATIONS)
        self.longest_pause_ns = 0

    def __enter__(self) -> "GcPauses":
        gc.callbacks.append(self._on_collection)
        return self

    def __exit__(self, *exc_info) -> None:
        gc.callbacks.remove(self._on_collection)

    def _on_collection(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_ns = time.perf_counter_ns()
            return
        if self._started_ns is None:  # entered while a collection was under way
            return
        took_ns = time.perf_counter_ns() - self._started_ns
        self._started_ns = None
        generation = info["generation"]
        self.collections[generation] += 1
        self.pause_ns[generation] += took_ns
        self.longest_pause_ns = max(self.longest_pause_ns, took_ns)

    def report(self, elapsed_s: float) -> dict:
        """Per generation: collections and their milliseconds; the longest pause; the share of ``elapsed_s`` paused."""
        return {
            "collections": dict(zip(GENERATIONS, self.collections)),
            "pause_ms": {name: round(ns / 1e6, 1) for name, ns in zip(GENERATIONS, self.pause_ns)},
            "longest_pause_ms": round(self.longest_pause_ns / 1e6, 1),
            "share_of_run": round(sum(self.pause_ns) / 1e9 / elapsed_s, 3) if elapsed_s > 0 else None,
        }
