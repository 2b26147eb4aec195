"""``ChangeSignal``: long polls on one event loop, for both replica actors.

A fetch that finds nothing new (a follower at the log end, a consumer at the high watermark)
does not answer empty at once: it parks until something it may care about changes or its wait
bound ends, then looks again. The actor calls ``notify`` after every such change (an append,
a high watermark that moved, a role change) and every parked fetch wakes; each one decides for
itself whether the change concerns it. ``PhysicalPartition`` has one signal for its replica,
``ReadNode`` one for all the VPs it hosts.

One event per generation: ``notify`` sets the current event and replaces it, so a fetch that
parks after a notify waits for the next one instead of waking at once on an old one. A notify
with no fetch parked on the current event does nothing: there is no one to wake, and a fetch
that parks later waits for the next notify all the same. A read node notifies after every VP
append, hundreds of times a feed round, and only the first of a round finds fetches parked
(they look again once the round has ended), so the others cost a test, not a new event.
Used from the event loop's thread only.
"""

from __future__ import annotations

import asyncio
from typing import Callable


class ChangeSignal:
    """Wake every parked fetch on ``notify``; see the module docstring."""

    def __init__(self):
        self._changed = asyncio.Event()
        # Fetches parked on ``_changed`` (at least: one that just left may still count until it
        # runs); never fewer, or a notify would miss a parked fetch.
        self._parked = 0

    def notify(self) -> None:
        """Something changed: every fetch parked in ``next_change`` or ``wait_until`` looks again."""
        if not self._parked:
            return
        self._changed.set()
        self._changed = asyncio.Event()
        self._parked = 0

    async def next_change(self, timeout_s: float) -> bool:
        """Wait for the next ``notify``, at most ``timeout_s`` (none at all when it is not positive);
        False if it did not come in time."""
        if timeout_s <= 0:
            return False
        changed = self._changed
        self._parked += 1
        try:
            await asyncio.wait_for(changed.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            if changed is self._changed:  # left unwoken (timed out, cancelled): no longer parked on it
                self._parked -= 1
                assert self._parked >= 0, self._parked
        return True

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``condition()`` holds, asking it again after every ``notify``, at most
        ``timeout_s``; True once it held, False if the time ran out first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            if not await self.next_change(deadline - loop.time()):
                return False
        return True
