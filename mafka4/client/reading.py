"""What every reader behind ``Consumer`` does the same way: the poll loop and seeking by time.

The three readers (``PartitionConsumer``: physical partitions, Mafka3 mode; ``VirtualConsumer``:
every VP, no group; ``VirtualGroupConsumer``: the VPs a group member owns) differ in what they
do between fetches (group duties, metadata refreshes) and where they fetch from; ``poll_until``
is their ``poll()`` around those two steps:

* its duties run first, in the caller's thread, on every round, so a group's positions never
  move while they are committed and a member that stops polling stops doing its duties;
* then one fetch, given the time left: a reader waits inside it at most as long as it can
  leave its duties undone (a group member: until its group changes, its next auto-commit if
  its positions moved, or a claimed partition's next start attempt; ``RESHARD_CHECK_INTERVAL_S``),
  and returns none when it had nothing to fetch;
* the first round that brings messages returns them; after ``timeout_ms``, the poll returns
  what the last round brought, possibly nothing.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

from mafka4.client.message import Message


def poll_until(timeout_ms: int, duties: Callable[[], None], fetch: Callable[[float], list[Message]]) -> list[Message]:
    """Rounds of ``duties()`` then ``fetch(seconds left)`` until one brings messages or ``timeout_ms`` passed."""
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        duties()
        messages = fetch(max(deadline - time.monotonic(), 0))
        if messages or time.monotonic() >= deadline:
            return messages


class SeeksByOffsetAndTime(Protocol):
    """What ``seek_to_time`` needs of a fetcher (``PartitionFetcher``, ``VpFetcher``)."""

    def offsets_for_time(self, partitions: list[int], timestamp_ms: int) -> list[int]: ...

    def seek(self, partition: int, offset: int) -> None: ...


def seek_to_time(fetcher: SeeksByOffsetAndTime, partitions: list[int], timestamp_ms: int) -> None:
    """Move each of ``partitions`` to its first message at or after ``timestamp_ms`` (or its end)."""
    for partition, offset in zip(partitions, fetcher.offsets_for_time(partitions, timestamp_ms)):
        fetcher.seek(partition, offset)
