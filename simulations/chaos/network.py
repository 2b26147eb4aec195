"""The network partitions of a chaos run (the ``partition`` fault), drawn from its seeded stream.

Pure: a ``random.Random`` and the nodes' names in, a ``PartitionPlan`` out; the nemesis applies
it to every actor of the topic and to the driver's clients (``Admin.set_network_fault``) and
heals it after ``hold_s``. A plan cuts one node off from all the others (a node that lost its
network) or from one other (a broken link), both ways or one way, dropping the traffic or (one
plan in four) delaying it. What each shape does to the calls between them is
``mafka4.partition_gate``'s.

The nodes are the topic's write nodes, the read nodes hosting its VPs and ``client``: every
client of the run, the producer in the driver's process and the group members' consumers in
theirs (which take the fault from a file, ``fault_relay``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable

from mafka4.partition_gate import NetworkFault
from simulations.chaos.settings import FaultTiming

ALL_OTHERS_SHARE = 0.5  # of plans that cut a node off from every other one (else from one other)
BOTH_WAYS_SHARE = 0.5
DELAYED_SHARE = 0.25  # of plans that delay the traffic instead of dropping it


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    isolated: str
    others: tuple[str, ...]
    both_ways: bool
    delay_ms: int  # 0: the traffic is dropped
    hold_s: float

    def fault(self, lost_after_ms: int) -> NetworkFault:
        return NetworkFault.between([self.isolated], self.others, self.both_ways, self.delay_ms, lost_after_ms)

    def describe(self) -> str:
        arrow = "<->" if self.both_ways else "->"
        what = f"delayed {self.delay_ms} ms" if self.delay_ms else "dropped"
        return f"{self.isolated} {arrow} {','.join(self.others)}: traffic {what} for {self.hold_s:.1f} s"


def draw_partition(rng: random.Random, nodes: Iterable[str], timing: FaultTiming) -> PartitionPlan:
    """One plan among ``nodes`` (at least two), from ``rng`` alone."""
    names = sorted(set(nodes))
    assert len(names) >= 2, f"a partition needs two nodes, not {names}"
    isolated = rng.choice(names)
    rest = [name for name in names if name != isolated]
    others = tuple(rest) if rng.random() < ALL_OTHERS_SHARE else (rng.choice(rest),)
    both_ways = rng.random() < BOTH_WAYS_SHARE
    delay_ms = rng.randint(*timing.partition_delay_ms) if rng.random() < DELAYED_SHARE else 0
    return PartitionPlan(isolated, others, both_ways, delay_ms, rng.uniform(*timing.partition_s))
