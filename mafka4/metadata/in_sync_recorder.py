"""``InSyncRecorder``: a leader's in-sync set written to etcd, with one write in flight.

A leader may count a new in-sync set -- a physical partition's ISR, a VP's RISR -- only once
etcd holds it: the controller elects from what etcd holds, so a member dropped in memory alone
could be elected after the leader acknowledged records that member does not have. When a set
changes and what recording it means are the cores' rules (``ReplicaState.isr_committed``,
``VpReplicaCore.risr_written``); this module makes the writes, for both replica actors:

* ``changed`` logs the new set and starts a writer task unless one runs: one write in flight
  per set. A change that comes while a write is out is written next, with the set of that
  moment, so a burst of changes costs two writes, not one each.
* Each write takes the current (set, leader epoch) from ``current``; None (no longer leader,
  or closed) stops the writer. ``write`` runs in the loop's default executor, since etcd calls
  block, and compare-and-swaps the set into the key only while the key names this leader at
  that epoch; after it succeeded, ``recorded`` gets the pair and hands it to the core.
* etcd does not answer (``CoordinatorUnavailable``): logged, written again after ``backoff_s``.
  Meanwhile the core goes on counting the wider set it recorded last, which is safe.
* ``write`` answers False (etcd names another leader or epoch): this leader is fenced. Logged
  as an error; the writer stops and the core never counts the set.

The simulator's physical shell runs the same protocol by messages (``simulations.dst.physical``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Iterable

from mafka4.errors import CoordinatorUnavailable

logger = logging.getLogger(__name__)

Members = tuple[str, ...]


class InSyncRecorder:
    """Writes one leader's in-sync set to etcd as it changes; see the module docstring.

    ``name`` and ``holder`` say whose set it is in the log lines (a partition or VP, the replica
    or node), ``kind`` which set ("ISR", "RISR").
    """

    def __init__(self, name: str, kind: str, holder: str, current: Callable[[], tuple[Iterable[str], int] | None],
                 write: Callable[[Members, int], bool], recorded: Callable[[Members, int], None], backoff_s: float):
        self._name, self._kind, self._holder = name, kind, holder
        self._current, self._write, self._recorded = current, write, recorded
        self._backoff_s = backoff_s
        self._dirty = False
        self._task: asyncio.Task | None = None

    def changed(self) -> None:
        """The set changed: write it (after the write in flight, if there is one)."""
        current = self._current()
        if current is not None:
            logger.warning("%s: %s is now %s", self._name, self._kind, sorted(current[0]))
        self._dirty = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._write_until_recorded())

    def close(self) -> None:
        """Stop writing (the replica closes or is dropped); a write already sent may still land."""
        if self._task is not None:
            self._task.cancel()

    async def _write_until_recorded(self) -> None:
        loop = asyncio.get_running_loop()
        while self._dirty and (current := self._current()) is not None:
            self._dirty = False
            members, leader_epoch = tuple(sorted(current[0])), current[1]
            try:
                written = await loop.run_in_executor(None, self._write, members, leader_epoch)
            except CoordinatorUnavailable as error:  # the HW stays bounded by the wider set: safe
                logger.warning("%s: cannot record %s yet: %s", self._name, self._kind, error)
                self._dirty = True
                await asyncio.sleep(self._backoff_s)
                continue
            if not written:
                logger.error("%s: etcd names another leader or epoch; %s is fenced", self._name, self._holder)
                return
            self._recorded(members, leader_epoch)
