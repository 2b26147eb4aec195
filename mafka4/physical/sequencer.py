"""Puts one producer's batches back in sequence order before the leader appends them.

Ray runs an asynchronous actor's calls concurrently and does not promise to start them in
submission order: a call whose (large) argument arrives later can start after the next
one. A producer pipelines several batches per partition, so the leader can see sequence
``s + 1`` before ``s``. Refusing it would force a resend of the whole pipeline; instead the
batch waits here, bounded by ``sequence_wait_ms_max``, until its producer's next expected
sequence is its own. A producer the leader does not know yet is expected to start at 0;
whatever still waits when ``sequence_wait_ms_max`` runs out goes to the core, which refuses it.

This is the actor's wait, on its event loop. Whether a batch is early is the replica shell's
rule (``PhysicalReplica.is_early``), and so is when to look again (``Ready.sequence_advanced``,
which the actor passes on as ``batch_appended``); the simulator waits on its timers instead.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from mafka4.batch_frame import BatchHeader


class SequenceGate:
    def __init__(self, is_early: Callable[[BatchHeader], bool]):
        self._is_early = is_early
        self._appended = asyncio.Event()

    async def wait_turn(self, header: BatchHeader, wait_ms_max: int) -> None:
        """Return once ``header`` is next for its producer, or when the wait runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms_max / 1000
        while self._is_early(header):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return  # the core refuses it: OutOfOrderSequence, or UnknownProducer for an unknown producer
            appended = self._appended
            try:
                await asyncio.wait_for(appended.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def batch_appended(self) -> None:
        """Wake every waiting batch to re-check its turn."""
        self._appended.set()
        self._appended = asyncio.Event()
