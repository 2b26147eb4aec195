"""Fault injection for replica actors: make one replica slow or stalled, on purpose.

Every replica holds a ``FaultGate``: a ``PhysicalPartition`` and each VP replica of a read node
(``HostedVp``); ``set_fault`` on the actor (``Admin.inject_fault``) changes it. The physical
actor passes through the gate in its fetch and serve loops. A read node serves many VPs in one
call, so it reads each VP's ``Fault`` instead: a replication session leaves paused VPs out and
waits for the longest delay among the others, a consumer fetch for the longest delay of the
VPs it reads. Off by default, so the loops never wait on it in normal running.

* ``delay_ms``: every fetch the replica makes from its leader, and every fetch it answers
  (followers' and consumers'), first waits this long: a slow replica.
* ``paused``: replication through the replica stops until unpaused: a follower stops fetching
  from its leader, a leader answers no follower fetch. Consumer fetches are only delayed, never
  held: a paused replica shows replication lag (it leaves the ISR or RISR after the lag bound
  and returns once unpaused) without hanging the readers routed to it.

Experiments must not use it to slow one design down (DESIGN.md section 9); it exists to
demonstrate the replica protocols under slowness.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from mafka4.errors import InvalidConfig
from mafka4.limits import FAULT_DELAY_MS_MAX


@dataclass(frozen=True, slots=True)
class Fault:
    delay_ms: int = 0
    paused: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.delay_ms, bool) or not isinstance(self.delay_ms, int) or not 0 <= self.delay_ms <= FAULT_DELAY_MS_MAX:
            raise InvalidConfig(f"delay_ms={self.delay_ms!r} must be an integer from 0 to {FAULT_DELAY_MS_MAX}")
        if not isinstance(self.paused, bool):
            raise InvalidConfig(f"paused={self.paused!r} must be true or false")

    def describe(self) -> dict:
        """What ``set_fault`` answers and ``describe`` shows, for the physical and the virtual side alike."""
        return {"delay_ms": self.delay_ms, "paused": self.paused}


NO_FAULT = Fault()


class FaultGate:
    """The fault of one replica actor; used from the actor's event loop only.

    A read node holds one per VP replica, 100,000 of them on a node, nearly all never faulted:
    the gate makes its ``asyncio.Event`` (760 bytes) only when it is first paused."""

    __slots__ = ("fault", "_resumed")

    def __init__(self):
        self.fault = NO_FAULT
        self._resumed: asyncio.Event | None = None  # None: never paused, so resumed

    def set(self, delay_ms: int = 0, paused: bool = False) -> Fault:
        self.fault = Fault(delay_ms, paused)
        if paused:
            if self._resumed is None:
                self._resumed = asyncio.Event()
            self._resumed.clear()
        elif self._resumed is not None:
            self._resumed.set()
        return self.fault

    async def replication(self) -> None:
        """Pass a replication step (a follower's fetch, a leader answering one)."""
        if self._resumed is not None:
            await self._resumed.wait()
        await self.serving()

    async def serving(self) -> None:
        """Pass a consumer fetch: delayed, never paused."""
        if self.fault.delay_ms:
            await asyncio.sleep(self.fault.delay_ms / 1000)
