"""``ChangeSignal``: long polls on one event loop, for both replica actors.

A fetch that finds nothing new (a follower at the log end, a consumer at the high watermark)
does not answer empty at once: it parks until something it may care about changes or its wait
bound ends, then looks again. The actor calls ``notify`` after every such change (an append,
a high watermark that moved, a role change) and every parked fetch wakes; each one decides for
itself whether the change concerns it. ``PhysicalPartition`` has one signal for its replica,
``ReadNode`` one for all the VPs it hosts.

One event per generation: ``notify`` sets the current event and replaces it, so a fetch that
parks after a notify waits for the next one instead of waking at once on an old one.
Used from the event loop's thread only.
"""

from __future__ import annotations

import asyncio
from typing import Callable


class ChangeSignal:
    """Wake every parked fetch on ``notify``; see the module docstring."""

    def __init__(self):
        self._changed = asyncio.Event()

    def notify(self) -> None:
        """Something changed: every fetch parked in ``next_change`` or ``wait_until`` looks again."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def next_change(self, timeout_s: float) -> bool:
        """Wait for the next ``notify``, at most ``timeout_s`` (none at all when it is not positive);
        False if it did not come in time."""
        if timeout_s <= 0:
            return False
        try:
            await asyncio.wait_for(self._changed.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
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
