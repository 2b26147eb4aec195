"""``ThreadSlots``: blocking work of a port's handlers, on threads, a bounded number at once.

A handler that waits on etcd or on the cluster's actors (an intent for the controller, a group's
description) runs that work on a thread, so the port's event loop keeps serving. At most
``slots`` such threads run at once; more requests wait their turn on the loop. A slot is held
until the thread ends, not until the request does: a client that disconnects cancels its
request, but the thread it started runs on (Python cannot stop it), and freeing its slot early
would let threads pile up past the bound.
"""

from __future__ import annotations

import asyncio
from typing import Callable, TypeVar

T = TypeVar("T")


class ThreadSlots:
    def __init__(self, slots: int):
        self._free = asyncio.Semaphore(slots)

    async def run(self, work: Callable[..., T], *args) -> T:
        """``work(*args)`` on a thread once a slot is free; its result (or its error)."""
        await self._free.acquire()
        running = asyncio.ensure_future(asyncio.to_thread(work, *args))
        running.add_done_callback(self._finished)
        return await asyncio.shield(running)  # a cancelled request leaves the thread, and its slot, running

    def _finished(self, running: asyncio.Future) -> None:
        self._free.release()
        if not running.cancelled():
            running.exception()  # retrieved: a request cancelled meanwhile no longer awaits it
