"""``NodeLoop``: a background loop of a read node (a feed stream, a replication session).

One asyncio task running ``_run`` until ``close``; ``wake`` sets ``_kick``, which the loop
waits on whenever it has nothing to do, so a role change or a reshard reaches it at once
instead of after its idle timeout.
"""

from __future__ import annotations

import asyncio


class NodeLoop:
    def __init__(self):
        self._kick = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False

    def start(self) -> None:
        """Start the loop if it does not run (idempotent)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self) -> None:
        """Something the loop waits for may have changed: look now."""
        self._kick.set()

    def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()

    async def _idle(self, timeout_s: float) -> None:
        """Wait for ``wake`` or ``timeout_s``, whichever comes first."""
        self._kick.clear()
        try:
            await asyncio.wait_for(self._kick.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def _run(self) -> None:
        raise NotImplementedError
