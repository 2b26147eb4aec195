"""``FetchSessions``: at most one long-poll fetch out per connection and what it reads; a newer one replaces it.

A consumer keeps one fetch out per node it reads from (per partition's leader, Mafka3 mode) and
sends a new one when what it wants changed while that fetch waited: a VP it claimed, a position
it sought, a VP whose leader moved. It does not wait for the old fetch, which would still park
on the server until its wait ended, holding a request slot of the connection
(``requests_in_flight_max``): a consumer that changes its mind often, with long waits, could
fill them. So the port ends the old one as the new one arrives, as Kafka's fetch sessions let
a consumer replace what its session fetches. The replaced fetch is answered ``FetchReplaced``
(retriable; the consumer that sent the newer one has stopped waiting for it). This is what
lets an idle consumer's fetches wait long (``ConsumerConfig.fetch_idle_wait_ms_max``).

A session is a connection (its peer's address, unique while it is open) and a key the handler
chooses: the topic for ``VP_FETCH`` (one fetch per node reads all of a topic's VPs there), the
topic and partition for ``FETCH``. Fetches on different connections never replace each other.
An entry lives only while its fetch runs: a connection that closes cancels its requests, and
each one's entry goes with it.

Used on the port's event loop only.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Hashable, TypeVar

from mafka4.errors import FetchReplaced

T = TypeVar("T")


class FetchSessions:
    def __init__(self):
        self._out: dict[tuple[str, Hashable], asyncio.Task] = {}
        self._replaced: set[asyncio.Task] = set()

    def __len__(self) -> int:
        return len(self._out)

    async def run(self, peer: str, key: Hashable, fetch: Awaitable[T]) -> T:
        """Await ``fetch`` as the one fetch of (``peer``, ``key``), ending the one that was out.

        Raises ``FetchReplaced`` if a newer fetch of the same session arrives first. Must be
        awaited by the request's own task (the one the server cancels when the peer leaves)."""
        task = asyncio.current_task()
        session = (peer, key)
        previous = self._out.get(session)
        if previous is not None and previous is not task:
            self._replaced.add(previous)
            previous.cancel()
        self._out[session] = task
        try:
            return await fetch
        except asyncio.CancelledError:
            if task not in self._replaced:
                raise  # the connection closed, or the server stops: nobody waits for an answer
            task.uncancel()
            raise FetchReplaced(f"a newer fetch of {key!r} on this connection from {peer} replaced this one: "
                                f"a connection has one fetch out per session; wait for the newest one's answer") from None
        finally:
            self._replaced.discard(task)
            if self._out.get(session) is task:
                del self._out[session]
