"""``LoopThread``: a loop on a thread of its own, whose ``stop`` ends it as ``asyncio.run`` does."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mafka4.client.loop_thread import LoopThread


def test_run_answers_on_the_loop_thread_and_stop_cancels_joins_and_closes():
    loop = LoopThread("test-loop")

    async def where() -> str:
        return threading.current_thread().name
    assert loop.run(where(), timeout_s=30) == "test-loop"
    parked = loop.submit(asyncio.Event().wait())
    loop.stop()
    assert parked.cancelled(), "a task still running is cancelled"
    assert loop.loop.is_closed() and not loop.loop.is_running()
    assert "test-loop" not in {thread.name for thread in threading.enumerate()}, "its thread was joined"


def test_a_stopped_loop_refuses_work_at_once_and_stopping_it_again_does_nothing():
    loop = LoopThread("test-loop")
    loop.stop()
    loop.stop()
    with pytest.raises(RuntimeError, match="closed"):
        loop.call_soon(print)
