"""An asyncio event loop on a daemon thread of its own, for a client's connections and timers.

A client's connections belong to the loop they were opened on; the caller's threads hand work to
it (``run`` waits for a coroutine's result, ``call_soon`` only schedules a callback).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Awaitable, Callable, TypeVar

from mafka4.errors import RequestTimedOut

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Awaitable[T], timeout_s: float | None = None) -> T:
        """``coroutine``'s result, run on the loop; its error is raised here, and ``RequestTimedOut``
        (retriable) once ``timeout_s`` passed (the coroutine is cancelled)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RequestTimedOut(f"no answer within {timeout_s} s; retry") from None

    def submit(self, coroutine: Awaitable[T]) -> "concurrent.futures.Future[T]":
        """Run ``coroutine`` on the loop without waiting for it; cancel the future to cancel it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def call_soon(self, callback: Callable, *args) -> None:
        self.loop.call_soon_threadsafe(callback, *args)

    def stop(self, timeout_s: float = 30) -> None:
        """Cancel the tasks still running, stop the loop, wait for its thread and close the loop (its
        selector and self-pipe), as ``asyncio.run`` does at its end; a loop whose thread did not end
        within ``timeout_s`` is left open. Once closed, a call hands it nothing: ``RuntimeError``
        (not a wait for a loop that never runs it); ``stop`` again does nothing."""
        if self.loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(_cancel_the_others(), self.loop).result(timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # a task that does not end: stop anyway
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_the_others() -> None:
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
