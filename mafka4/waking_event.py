"""``WakingEvent``: a ``threading.Event`` that also tells others when it is set.

A group member's ``changed`` is set by threads that know of a change (a watch, a heartbeat's
answer) and read by the thread that acts on it. Some readers wait on more than the event: a
coordinator's long-polling heartbeat waits on its event loop, a consumer waits on its fetches.
``on_set`` wakes them: it is called, from the setting thread, every time the event is set.
``SetFuture`` is such a waker for a thread that waits on futures: ``future()`` gives one that
is done once the event is set.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Callable


class WakingEvent(threading.Event):
    def __init__(self, on_set: Callable[[], None]):
        super().__init__()
        self._on_set = on_set

    def set(self) -> None:
        super().set()
        self._on_set()


class SetFuture:
    """A ``WakingEvent`` (``event``) whose setting completes a future (``future``)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._future: concurrent.futures.Future | None = None
        self.event = WakingEvent(self._complete)

    def future(self) -> concurrent.futures.Future:
        """Done once the event is set (at once if it is); the same future until then."""
        with self._lock:
            if self._future is None or self._future.done():
                self._future = concurrent.futures.Future()
            future = self._future
        if self.event.is_set():
            self._complete()
        return future

    def _complete(self) -> None:
        with self._lock:
            future, self._future = self._future, None
        if future is not None and not future.done():
            future.set_result(None)
