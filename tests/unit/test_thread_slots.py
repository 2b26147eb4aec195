"""A port's blocking work on a bounded number of threads (``frontend.thread_slots``): a slot is
held until its thread ends, also when the request that started it was cancelled."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mafka4.frontend.thread_slots import ThreadSlots


def test_a_cancelled_request_holds_its_slot_until_its_thread_ends():
    release, running, started = threading.Event(), [], []

    def blocked(name: str) -> str:
        started.append(name)
        running.append(name)
        release.wait(10)
        running.remove(name)
        return name

    async def body():
        slots = ThreadSlots(1)
        first = asyncio.ensure_future(slots.run(blocked, "first"))
        while not started:
            await asyncio.sleep(0.01)
        first.cancel()  # the client went away; its thread cannot be stopped
        second = asyncio.ensure_future(slots.run(blocked, "second"))
        await asyncio.sleep(0.2)
        assert started == ["first"], "the second waits for the first thread's slot, not its request's"
        release.set()
        assert await second == "second"
        with pytest.raises(asyncio.CancelledError):
            await first

    asyncio.run(body())
    assert running == []


def test_the_works_error_reaches_the_request():
    def failing() -> None:
        raise ValueError("etcd said no")

    async def body():
        with pytest.raises(ValueError, match="etcd said no"):
            await ThreadSlots(2).run(failing)

    asyncio.run(body())
