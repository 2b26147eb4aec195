"""``IdleWaits``: how long a consumer's next fetch to each destination may wait on the server.

A fetch is a long poll: data ends its wait at once, so the wait costs no latency; it only sets
how often an idle consumer asks again. Each of those answers costs the consumer and the node a
round trip (about a millisecond of the consumer's CPU here), so a consumer that waits
``fetch_wait_ms_max`` (Kafka's 500 ms) on two read nodes spends four a second doing nothing.
A destination that answered empty has its next wait doubled, up to ``fetch_idle_wait_ms_max``;
any answer with data or an error brings it back to ``fetch_wait_ms_max`` (a consumer that sets
``fetch_idle_wait_ms_max`` at or below ``fetch_wait_ms_max`` never backs off; one that sets
``fetch_wait_ms_max`` to 0 never waits).

Waiting long is safe because the consumer never waits *for* a fetch it no longer wants: one
that should ask for something else (a VP claimed, a position sought, a route that moved) is
sent again at once and the node ends the one out (``frontend.fetch_sessions``). What a long wait
does delay is noticing a node that hangs without closing its connection (a stopped process):
its fetch times out after the wait.

Pure: no clock, no I/O.
"""

from __future__ import annotations

from typing import Generic, Hashable, TypeVar

Destination = TypeVar("Destination", bound=Hashable)


class IdleWaits(Generic[Destination]):
    def __init__(self, wait_ms: int, idle_wait_ms_max: int):
        assert 0 <= wait_ms and 0 <= idle_wait_ms_max, (wait_ms, idle_wait_ms_max)
        self._wait_ms, self._idle_wait_ms_max = wait_ms, max(wait_ms, idle_wait_ms_max)
        self._waits: dict[Destination, int] = {}  # only destinations whose last answers were empty

    def wait_ms(self, destination: Destination) -> int:
        """How long the next fetch to ``destination`` may wait."""
        return self._waits.get(destination, self._wait_ms)

    def answered(self, destination: Destination, empty: bool) -> None:
        """``destination`` answered; ``empty``: with neither data nor an error."""
        if not empty:
            self._waits.pop(destination, None)
            return
        # A consumer configured never to wait (0) keeps not waiting.
        self._waits[destination] = min(2 * self.wait_ms(destination), self._idle_wait_ms_max)
