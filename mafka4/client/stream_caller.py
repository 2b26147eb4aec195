"""Stream calls for the synchronous consumers: one event loop on a daemon thread per process.

A consumer's fetch answers carry batches, so they come over the serving actor's stream
(``mafka4.transport.stream_calls``) instead of as Ray calls, which cost several times the CPU per
MiB on both sides. The consumers wait on several fetches at once from the caller's thread; here
each call runs on a shared event loop thread and hands back a ``concurrent.futures.Future``,
which ``concurrent.futures.wait`` waits on as ``ray.wait`` waited on object refs.

Streams are kept per actor name, each with the handle it was opened from. A call that brings
another handle of that name (a restarted actor, or one of another cluster the process now
talks to) closes the old stream and opens one to the actor it names: a Ray handle compares
by actor id, so the stream never outlives the actor the caller looked up. A failed call drops
its stream too; the next opens a new one.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import threading

from mafka4.transport.stream_calls import StreamHandle, actor_stream


class StreamCaller:
    def __init__(self):
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mafka4-stream-calls", daemon=True)
        self._thread.start()
        self._streams: dict[str, tuple[object, StreamHandle]] = {}  # name -> (handle, stream); loop thread only

    def call(self, actor, name: str, method: str, *args) -> concurrent.futures.Future:
        """``actor.method(*args)`` over the stream of the actor called ``name``."""
        return asyncio.run_coroutine_threadsafe(self._call(actor, name, method, args), self._loop)

    def close(self, timeout_s: float = 2.0) -> None:
        """Close every stream and stop the loop. Run at exit: the loop's thread is a daemon, and each
        task still pending when the interpreter drops it (a stream's answer reader) would print
        "Task was destroyed but it is pending!"."""
        async def shut_down() -> None:
            for _, stream in self._streams.values():
                stream.close()
            self._streams.clear()
            await asyncio.sleep(0)  # the closed transports' sockets close in callbacks of the loop's next turn
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._loop.is_closed() or not self._thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(shut_down(), self._loop).result(timeout_s)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass  # exiting anyway: what is left only warns
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout_s)

    async def _call(self, actor, name: str, method: str, args: tuple):
        opened = self._streams.get(name)
        if opened is None or opened[0] != actor:
            if opened is not None:
                opened[1].close()
            opened = self._streams[name] = (actor, actor_stream(actor, name))
        stream = opened[1]
        try:
            return await getattr(stream, method).remote(*args)
        except Exception:
            if self._streams.get(name) is opened:  # the next call starts afresh
                del self._streams[name]
                stream.close()
            raise


_caller: StreamCaller | None = None
_caller_lock = threading.Lock()


def stream_caller() -> StreamCaller:
    """The process's caller, started on first use."""
    global _caller
    with _caller_lock:
        if _caller is None:
            _caller = StreamCaller()
            atexit.register(_caller.close)
        return _caller


def close_stream_caller() -> None:
    """Close the process's caller now, if it started; the next ``stream_caller()`` starts another.

    For a process that wants its threads gone before the interpreter finalizes (a test session
    ending); any other process can leave it to the exit handler.
    """
    global _caller
    with _caller_lock:
        caller, _caller = _caller, None
    if caller is not None:
        atexit.unregister(caller.close)
        caller.close()
