"""The simulated clock and event queue: the only source of time and order in a run.

Every action of the simulated cluster is an event: a callback due at a simulated time
``now_ms``. Events run one at a time, earliest first; events due at the same time run in
the order they were scheduled (a counter breaks ties), so a run is a pure function of its
seed. Nothing in the simulator reads a wall clock.

Bounds: ``run_until`` stops after ``events_max`` events whatever its condition says, so a
livelock shows up as a failed run, not as a hung test.
"""

from __future__ import annotations

import heapq
from typing import Callable


class Scheduler:
    __slots__ = ("now_ms", "_queue", "_counter", "events_total")

    def __init__(self) -> None:
        self.now_ms = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._counter = 0
        self.events_total = 0

    def at(self, time_ms: int, callback: Callable[[], None]) -> None:
        """Run ``callback`` at ``time_ms`` (now if that is in the past)."""
        self._counter += 1
        heapq.heappush(self._queue, (max(time_ms, self.now_ms), self._counter, callback))

    def after(self, delay_ms: int, callback: Callable[[], None]) -> None:
        assert delay_ms >= 0, delay_ms
        self.at(self.now_ms + delay_ms, callback)

    def run_until(self, done: Callable[[], bool], time_ms_max: int, events_max: int) -> bool:
        """Run events until ``done()`` (checked between events), ``time_ms_max`` or ``events_max``.

        Returns ``done()``.
        """
        for _ in range(events_max):
            if done() or not self._queue or self._queue[0][0] > time_ms_max:
                break
            time_ms, _, callback = heapq.heappop(self._queue)
            assert time_ms >= self.now_ms, (time_ms, self.now_ms)
            self.now_ms = time_ms
            self.events_total += 1
            callback()
        return done()
