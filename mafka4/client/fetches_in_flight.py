"""``FetchesInFlight``: the long-poll fetches a consumer has out, at most one per destination.

Both fetchers send their fetches this way and collect the answers this way; what a fetch asks
for and what its answer means stay theirs. ``PartitionFetcher`` keeps one fetch out per
physical partition, at its leader; ``VpFetcher`` one per read node, for all the VPs it reads
there. A fetch is a call on the destination's client port that the fetcher starts, with the
consumer's ``fetch_bytes_max`` and ``fetch_wait_ms_max``; the destination answers as soon as
it has data, or after the wait.

A network fault (``mafka4.partition_gate``) is applied as a fetch is sent: to a destination the
fault cuts this process off from, nothing is sent (``send`` says so, and the fetcher decides
whom to ask instead); to one it slows, the fetch is sent after the delay.

Invariant: every destination has at most one fetch out, and each answer is handed out once
(``answered`` takes it out as it hands it over).
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Callable, Generic, TypeVar

from mafka4.partition_gate import client_gate

Destination = TypeVar("Destination")
Sent = TypeVar("Sent")  # what a fetch asked for, handed back with its answer


class FetchesInFlight(Generic[Destination, Sent]):
    def __init__(self):
        self._calls: dict[Destination, tuple[concurrent.futures.Future, Sent]] = {}

    def __contains__(self, destination: Destination) -> bool:
        return destination in self._calls

    def destinations(self) -> list[Destination]:
        """Where a fetch is out."""
        return list(self._calls)

    def sent_to(self, destination: Destination) -> Sent | None:
        """What the fetch out to ``destination`` asked for; None if none is out."""
        found = self._calls.get(destination)
        return None if found is None else found[1]

    def drop(self, destination: Destination) -> None:
        """Forget the fetch out to ``destination`` (cancelled): its answer is never handed out."""
        dropped = self._calls.pop(destination, None)
        if dropped is not None:
            dropped[0].cancel()

    def clear(self) -> None:
        """Forget every fetch out, cancelling each, so none is left running (or failing unseen) once its
        connection closes."""
        calls, self._calls = self._calls, {}
        for call, _ in calls.values():
            call.cancel()

    def send(self, destination: Destination, node: str, start: Callable[[], concurrent.futures.Future],
             sent: Sent) -> bool:
        """Send a fetch (``start()`` sends it) to ``destination``, hosted by ``node``; False if a network
        fault would lose it (nothing was sent)."""
        assert destination not in self._calls, f"a second fetch out to {destination!r}"
        passage = client_gate().plan(node)
        if passage.lost:
            return False
        if passage.request_delay_ms or passage.answer_delay_ms:
            time.sleep((passage.request_delay_ms + passage.answer_delay_ms) / 1000)
        self._calls[destination] = (start(), sent)
        return True

    def answered(self, timeout_s: float, idle_s: float,
                 wake: concurrent.futures.Future | None = None) -> list[tuple[Destination, Sent, concurrent.futures.Future]]:
        """The fetches answered once the first answer came, ``wake`` (if given) is done, or ``timeout_s``
        passed, in the order they were sent; each is taken out. With no fetch out, waits
        ``min(timeout_s, idle_s)`` (or until ``wake``) and returns none: ``idle_s`` is how soon its
        caller may have one to send again."""
        calls = [call for call, _ in self._calls.values()]
        waited = calls + ([wake] if wake is not None else [])
        if not calls:
            if wake is None:
                time.sleep(min(timeout_s, idle_s))
            else:
                concurrent.futures.wait(waited, timeout=min(timeout_s, idle_s))
            return []
        concurrent.futures.wait(waited, timeout=timeout_s, return_when=concurrent.futures.FIRST_COMPLETED)
        answered = [(destination, sent, call) for destination, (call, sent) in self._calls.items() if call.done()]
        for destination, _, _ in answered:
            del self._calls[destination]
        return answered
