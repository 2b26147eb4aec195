"""A read node opens VP logs on its worker thread (``virtual.vp_opening``): the loop goes on
meanwhile, a VP is never opened twice, and what opened before a failure or a cancel is hosted.

Stand-in replicas, whose opening waits until the test lets it finish: no disk, no Ray."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

import pytest

from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.vp_opening import VpOpening

A, B, C = VpId("orders", 0), VpId("orders", 1), VpId("orders", 2)


@dataclass
class Replica:
    vp_id: VpId
    thread: str


class Opener:
    """``make`` for ``VpOpening.open``: records what it opened and on which thread; waits for
    ``proceed`` first; fails on the VPs in ``failing``."""

    def __init__(self, failing: frozenset[VpId] = frozenset()):
        self.proceed, self.started = threading.Event(), threading.Event()
        self.opened: list[VpId] = []
        self.failing = failing

    def __call__(self, vp_id: VpId) -> Replica:
        self.started.set()
        assert self.proceed.wait(30), "the test never let the opening finish"
        if vp_id in self.failing:
            raise OSError(f"cannot open {vp_id}")
        self.opened.append(vp_id)
        return Replica(vp_id, threading.current_thread().name)


async def until(condition) -> None:
    """Let the loop run until ``condition()`` (bounded)."""
    for _ in range(30_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never came")


def test_a_log_opens_on_another_thread_while_the_loop_goes_on_and_is_hosted_once_open():
    async def scenario():
        hosted, opener = {}, Opener()
        opening = asyncio.create_task(VpOpening(hosted).open([A, B], opener))
        await until(opener.started.is_set)
        turns = 0
        while turns < 10:  # the loop runs while the opening waits
            await asyncio.sleep(0)
            turns += 1
        assert hosted == {} and not opening.done(), "nothing is the loop's until it is open"
        opener.proceed.set()
        replicas = await opening
        assert [r.vp_id for r in replicas] == [A, B] and hosted == {A: replicas[0], B: replicas[1]}
        assert all(r.thread != threading.current_thread().name for r in replicas)

    asyncio.run(scenario())


def test_a_vp_asked_for_while_it_opens_is_opened_once_and_a_hosted_one_not_again():
    async def scenario():
        hosted, opener = {}, Opener()
        vps = VpOpening(hosted)
        first = asyncio.create_task(vps.open([A], opener))
        await until(opener.started.is_set)
        again = asyncio.create_task(vps.open([A, B], opener))  # the controller announcing again, and one more
        opener.proceed.set()
        (replica,), (same, other) = await first, await again
        assert same is replica and other.vp_id == B and opener.opened == [A, B]
        assert (await vps.open([B], opener))[0] is other and opener.opened == [A, B]

    asyncio.run(scenario())


def test_the_nodes_drop_waits_for_an_opening_so_it_finds_the_vp_hosted():
    async def scenario():
        hosted, opener = {}, Opener()
        vps = VpOpening(hosted)
        opening = asyncio.create_task(vps.open([A], opener))
        await until(opener.started.is_set)

        async def drop():
            async with vps.lock:
                return hosted.pop(A, None)

        dropping = asyncio.create_task(drop())
        await asyncio.sleep(0.01)
        assert not dropping.done()
        opener.proceed.set()
        (replica,) = await opening
        assert await dropping is replica and hosted == {}

    asyncio.run(scenario())


def test_the_vps_opened_before_one_that_fails_are_hosted_and_the_failure_raised():
    async def scenario():
        hosted, opener = {}, Opener(failing=frozenset({B}))
        opener.proceed.set()
        with pytest.raises(OSError, match="cannot open"):
            await VpOpening(hosted).open([A, B, C], opener)
        assert list(hosted) == [A] and opener.opened == [A]

    asyncio.run(scenario())


def test_a_caller_cancelled_while_the_logs_open_still_hosts_them():
    async def scenario():
        hosted, opener = {}, Opener()
        opening = asyncio.create_task(VpOpening(hosted).open([A], opener))
        await until(opener.started.is_set)
        opening.cancel()
        await asyncio.sleep(0.01)
        opener.proceed.set()
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert list(hosted) == [A], "not left open and unseen"

    asyncio.run(scenario())
