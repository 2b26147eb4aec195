"""One long-poll fetch out per connection and session key (``frontend.fetch_sessions``)."""

from __future__ import annotations

import asyncio

import pytest

from mafka4.errors import FetchReplaced
from mafka4.frontend.fetch_sessions import FetchSessions


async def parked(answer: str) -> str:
    await asyncio.sleep(60)
    return answer


async def started(sessions: FetchSessions, peer: str, key, answer: str = "old") -> asyncio.Task:
    task = asyncio.ensure_future(sessions.run(peer, key, parked(answer)))
    await asyncio.sleep(0)  # the task registers itself as it starts
    return task


def test_a_newer_fetch_of_the_same_session_ends_the_one_out_with_fetch_replaced():
    async def run():
        sessions = FetchSessions()
        old = await started(sessions, "127.0.0.1:1000", "orders")
        newest = await sessions.run("127.0.0.1:1000", "orders", asyncio.sleep(0, "new"))
        with pytest.raises(FetchReplaced, match="127.0.0.1:1000"):
            await old
        return newest, len(sessions)

    assert asyncio.run(run()) == ("new", 0)


def test_other_connections_and_other_keys_keep_their_fetches():
    async def run():
        sessions = FetchSessions()
        others = [await started(sessions, "127.0.0.1:1000", "billing"),
                  await started(sessions, "127.0.0.1:2000", "orders")]
        await sessions.run("127.0.0.1:1000", "orders", asyncio.sleep(0))
        still_out = [not task.done() for task in others]
        for task in others:
            task.cancel()
        return still_out

    assert asyncio.run(run()) == [True, True]


def test_a_fetch_cancelled_by_its_connection_closing_is_cancelled_not_replaced():
    async def run():
        sessions = FetchSessions()
        task = await started(sessions, "127.0.0.1:1000", "orders")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return len(sessions)

    assert asyncio.run(run()) == 0
