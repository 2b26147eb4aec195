"""Which leader elections follow a fault: what the simulator's coverage counters may count.

The seeded runs must show that they exercise failover (``tests/sim/test_simulation.py``,
the coverage check). Every replica set elects its first leader at start-up, faults or not,
so a count of every election would pass a simulator that never failed a leader over.
``FaultLedger`` sorts each election -- a new leader epoch the coordinator writes for a
physical partition or a VP, a *replica group* here -- by its ``Cause``:

* ``START_UP``: no leader of the group ever took office (confirmed leading one of its
  epochs). The epoch written when the group was created (a partition's or VP's epoch 0)
  names a leader that has not run yet; the election that replaces it is the group's first,
  and it comes whether or not a fault came first. A fault that delayed it does not make it
  fault-driven.
* ``AFTER_FAULT``: not start-up, and a fault on the node of one of the replaced state's
  replicas began or ended since the group's previous election (or its creation). Faults
  are the nemesis's: a crash (power loss or not) or a clean stop of a node, and a cut --
  of the node cut off from others, and, when a single link is cut, of the node at its
  other end too. The election is the controller's answer to that fault: the leader died,
  lost its lease, or came back with a log that may lack its tail.
* ``OTHER``: neither, e.g. a lease lapsing because the network dropped heartbeats (drops
  and duplicates are the seed's network, not the nemesis), or a second election after a
  fault whose first election was already counted. Counted in the totals only.

A coverage counter that claims fault-driven elections counts ``AFTER_FAULT`` only.
Plain bookkeeping (no clock, no randomness): the nemesis reports faults, the coordinator
reports creations, leaders taking office and elections, in event order.
"""

from __future__ import annotations

import enum
from typing import Hashable, Iterable


class Cause(enum.Enum):
    START_UP = "start-up"
    AFTER_FAULT = "after a fault"
    OTHER = "other"


class FaultLedger:
    def __init__(self):
        self._events = 0  # faults begun or ended so far
        self._touched: dict[str, int] = {}  # node -> the event of its latest fault beginning or ending
        self._since: dict[Hashable, int] = {}  # group -> the event count at its creation or last election
        self._led: set[Hashable] = set()  # groups in which a leader ever took office

    def fault(self, nodes: Iterable[str]) -> None:
        """A fault on ``nodes`` began or ended (the nemesis reports both ends)."""
        self._events += 1
        for node in nodes:
            self._touched[node] = self._events

    def opened(self, group: Hashable) -> None:
        """The replica group was created (a topic's partitions and VPs, a split's children)."""
        assert group not in self._since, f"{group} opened twice"
        self._since[group] = self._events

    def took_office(self, group: Hashable) -> None:
        """The leader of the group's current epoch confirmed its role."""
        self._led.add(group)

    def election(self, group: Hashable, replaced_replicas: Iterable[str]) -> Cause:
        """Classify an election of ``group`` that replaces a state with ``replaced_replicas``."""
        assert group in self._since, f"{group} elected before it was opened"
        previous, self._since[group] = self._since[group], self._events
        if group not in self._led:
            return Cause.START_UP
        if any(self._touched.get(node, 0) > previous for node in replaced_replicas):
            return Cause.AFTER_FAULT
        return Cause.OTHER
