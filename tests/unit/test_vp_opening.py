"""A read node opens VP logs on its worker thread (``virtual.vp_opening``): the loop goes on
meanwhile, a VP is never opened twice, and what opened before a failure or a cancel is hosted.

Stand-in replicas, whose opening waits until the test lets it finish: no disk, no Ray."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Awaitable, Callable

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
    ``proceed`` first; fails on the VPs in ``failing`` (none unless a test sets them)."""

    def __init__(self):
        self.proceed, self.started = threading.Event(), threading.Event()
        self.opened: list[VpId] = []
        self.failing: frozenset[VpId] = frozenset()

    def __call__(self, vp_id: VpId) -> Replica:
        self.started.set()
        assert self.proceed.wait(30), "the test never let the opening finish"
        if vp_id in self.failing:
            raise OSError(f"cannot open {vp_id}")
        self.opened.append(vp_id)
        return Replica(vp_id, threading.current_thread().name)


class Node:
    """A read node's hosted VPs and their ``VpOpening``, whose replicas ``opener`` makes."""

    def __init__(self):
        self.hosted: dict[VpId, Replica] = {}
        self.opener = Opener()
        self.vps = VpOpening(self.hosted)

    def open(self, vp_ids: list[VpId]):
        return self.vps.open(vp_ids, self.opener)

    async def opening(self, vp_ids: list[VpId]) -> asyncio.Task:
        """An ``open`` of ``vp_ids`` as a task, once its opening waits on the worker thread for ``proceed``."""
        task = asyncio.create_task(self.open(vp_ids))
        await until(self.opener.started.is_set)
        return task


def on_a_loop(scenario: Callable[[Node], Awaitable[None]]) -> Callable[[], None]:
    """The test that runs ``scenario`` on a new event loop, with a new ``Node``.

    Named as ``scenario`` for pytest, but not ``functools.wraps``: pytest would read the
    scenario's parameter as a fixture to pass."""
    def test() -> None:
        asyncio.run(scenario(Node()))
    test.__name__, test.__qualname__, test.__doc__ = scenario.__name__, scenario.__qualname__, scenario.__doc__
    return test


async def until(condition) -> None:
    """Let the loop run until ``condition()`` (bounded)."""
    for _ in range(30_000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("never came")


async def loop_turns(count: int) -> None:
    """Let every other task of the loop take ``count`` steps: each ready task runs once per turn."""
    for _ in range(count):
        await asyncio.sleep(0)


@on_a_loop
async def test_a_log_opens_on_another_thread_while_the_loop_goes_on_and_is_hosted_once_open(node):
    opening = await node.opening([A, B])
    await loop_turns(10)  # the loop runs while the opening waits
    assert node.hosted == {} and not opening.done(), "nothing is the loop's until it is open"
    node.opener.proceed.set()
    replicas = await opening
    assert [r.vp_id for r in replicas] == [A, B] and node.hosted == {A: replicas[0], B: replicas[1]}
    assert all(r.thread != threading.current_thread().name for r in replicas)


@on_a_loop
async def test_a_vp_asked_for_while_it_opens_is_opened_once_and_a_hosted_one_not_again(node):
    first = await node.opening([A])
    again = asyncio.create_task(node.open([A, B]))  # the controller announcing again, and one more
    node.opener.proceed.set()
    (replica,), (same, other) = await first, await again
    assert same is replica and other.vp_id == B and node.opener.opened == [A, B]
    assert (await node.open([B]))[0] is other and node.opener.opened == [A, B]


@on_a_loop
async def test_the_nodes_drop_waits_for_an_opening_so_it_finds_the_vp_hosted(node):
    opening = await node.opening([A])
    asking = asyncio.Event()

    async def drop():
        asking.set()
        async with node.vps.lock:  # the only await: a free lock is taken without giving up the loop
            return node.hosted.pop(A, None)

    dropping = asyncio.create_task(drop())
    await until(asking.is_set)
    # ``drop`` has run up to its first wait: had the opening not held the lock, it would be done.
    assert not dropping.done(), "the drop waits for the lock the opening holds"
    node.opener.proceed.set()
    (replica,) = await opening
    assert await dropping is replica and node.hosted == {}


@on_a_loop
async def test_the_vps_opened_before_one_that_fails_are_hosted_and_the_failure_raised(node):
    node.opener.failing = frozenset({B})
    node.opener.proceed.set()
    with pytest.raises(OSError, match="cannot open"):
        await node.open([A, B, C])
    assert list(node.hosted) == [A] and node.opener.opened == [A]


@on_a_loop
async def test_a_caller_cancelled_while_the_logs_open_still_hosts_them(node):
    opening = await node.opening([A])
    opening.cancel()
    # A negative check, and why it proves something: ``cancel`` cancels at once the future the
    # task awaits, which schedules the task's wake-up, so the cancellation reaches it in the next
    # turn of the loop; a task that did not wait for the thread would end there.
    await loop_turns(10)
    assert not opening.done(), "the cancelled caller waits for the logs it asked for to open"
    node.opener.proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await opening
    assert list(node.hosted) == [A], "not left open and unseen"
