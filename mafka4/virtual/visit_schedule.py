"""``VisitSchedule``: which hosted VPs a read node's periodic pass visits, so that an idle VP costs nothing.

A read node must hold many VPs (lanes multiply them: 100,000 on one node), so no periodic pass
may walk them all: at 1 µs a VP, a walk of 100,000 VPs every second is a tenth of a core for
VPs that do nothing. A pass visits only

* the VPs **changed** since the pass before (``changed``: the read node marks a VP whose log
  grew, whose HW moved, whose role or RISR changed), and
* the VPs whose **deadline** came (``at``): the time the VP's state next changes by itself, with
  nothing happening to it -- its oldest segment passing ``retention_ms``, an in-sync follower
  passing ``read_replica_lag_ms_max`` without catching up. The visitor computes it from the VP's
  state after each visit; None means "never by time alone".

``take`` hands the pass its VPs, each once, and forgets their deadlines; the visitor sets the
next one. A deadline set again replaces the one before (a deadline that came too early costs a
visit that finds nothing to do, never a missed one, so a visitor may set an early bound).

The deadlines sit in a heap with lazy deletion: a replaced deadline leaves its entry behind, to
be skipped when it comes out. The heap is rebuilt from the live deadlines whenever stale
entries outnumber them (``_compact``), so it never holds more than about twice as many entries
as VPs with a deadline.

Pure: keys and ``now_ms`` in, keys out; no clock, no I/O.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)

# A heap no larger than this holds its stale entries: rebuilding a tiny heap saves nothing.
_COMPACT_ENTRIES_MIN = 64


class VisitSchedule(Generic[K]):
    """The VPs (keys) a periodic pass must visit; see the module docstring."""

    def __init__(self) -> None:
        self._changed: set[K] = set()
        # key -> (deadline, sequence of its heap entry): the one live entry of the key.
        self._deadlines: dict[K, tuple[int, int]] = {}
        # (deadline, sequence, key); the sequence orders equal deadlines and keeps keys uncompared.
        self._heap: list[tuple[int, int, K]] = []
        self._sequence = itertools.count()

    def __len__(self) -> int:
        """How many VPs wait for a visit (changed, or with a deadline)."""
        return len(self._changed | self._deadlines.keys())

    @property
    def changed_count(self) -> int:
        return len(self._changed)

    @property
    def deadline_count(self) -> int:
        return len(self._deadlines)

    def deadline(self, key: K) -> int | None:
        """When ``key`` is next visited by time (None: not by time)."""
        entry = self._deadlines.get(key)
        return None if entry is None else entry[0]

    def changed(self, key: K) -> None:
        """``key`` changed: the next pass visits it."""
        self._changed.add(key)

    def at(self, key: K, deadline_ms: int | None) -> None:
        """Visit ``key`` once ``deadline_ms`` came (None: never by time), instead of any deadline set before."""
        entry = self._deadlines.get(key)
        if entry is not None and entry[0] == deadline_ms:
            return
        if deadline_ms is None:
            self._deadlines.pop(key, None)
        else:
            sequence = next(self._sequence)
            self._deadlines[key] = (deadline_ms, sequence)
            heapq.heappush(self._heap, (deadline_ms, sequence, key))
        if len(self._heap) > max(_COMPACT_ENTRIES_MIN, 2 * len(self._deadlines)):
            self._compact()

    def forget(self, key: K) -> None:
        """``key`` is gone (no longer hosted, or no longer needs the pass): no visit for it."""
        self._changed.discard(key)
        self._deadlines.pop(key, None)

    def take(self, now_ms: int) -> list[K]:
        """The keys to visit now, each once: the changed ones and those whose deadline is at or
        before ``now_ms`` (their deadlines are forgotten: the visitor sets the next)."""
        visits = dict.fromkeys(self._changed)
        self._changed = set()
        heap, deadlines = self._heap, self._deadlines
        for key in visits:
            deadlines.pop(key, None)  # its heap entry goes stale
        while heap and heap[0][0] <= now_ms:
            deadline_ms, sequence, key = heapq.heappop(heap)
            if deadlines.get(key) == (deadline_ms, sequence):
                del deadlines[key]
                visits[key] = None
        return list(visits)

    def _compact(self) -> None:
        self._heap = [(deadline_ms, sequence, key) for key, (deadline_ms, sequence) in self._deadlines.items()]
        heapq.heapify(self._heap)
