"""The process's client loop: one event loop thread that every consumer's connections live on.

A consumer's caller thread hands its calls to this loop (``LoopThread.run``, or
``asyncio.run_coroutine_threadsafe`` for fetches it waits on together) and waits; one thread
serves every consumer of the process, however many. Started on first use; stopped at exit.
"""

from __future__ import annotations

import atexit
import threading

from mafka4.client.loop_thread import LoopThread

_loop: LoopThread | None = None
_lock = threading.Lock()


def client_loop() -> LoopThread:
    global _loop
    with _lock:
        if _loop is None:
            _loop = LoopThread("mafka4-client")
            atexit.register(_loop.stop, 2.0)
        return _loop


def close_client_loop() -> None:
    """Stop the process's client loop now, if it started; the next ``client_loop()`` starts another.

    For a process that wants its threads gone before the interpreter finalizes (a test session
    ending); any other process can leave it to the exit handler.
    """
    global _loop
    with _lock:
        loop, _loop = _loop, None
    if loop is not None:
        atexit.unregister(loop.stop)
        loop.stop(2.0)
