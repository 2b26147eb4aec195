"""What every simulated process shares: the clock, the network, the disk, the seed's randomness.

``Env`` is the simulator's one context object. The random generator is the single
``random.Random(seed)`` of the run: every random choice anywhere (delays, faults, workload)
draws from it in event order, which is what makes a run reproducible from its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from simulations.checkers import HistoryRecord
from simulations.dst.coverage import FaultLedger
from simulations.dst.disk import SimDisk
from simulations.dst.network import Network
from simulations.dst.options import SimOptions
from simulations.dst.scheduler import Scheduler


@dataclass
class Env:
    rng: random.Random
    options: SimOptions
    scheduler: Scheduler
    network: Network
    disk: SimDisk
    history: list[HistoryRecord] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    # Protocol paths taken (e.g. "truncations"), so tests can require that seeds exercise them.
    counters: dict[str, int] = field(default_factory=dict)
    # Which elections follow a fault: the nemesis and the coordinator report to it, for the counters.
    fault_ledger: FaultLedger = field(default_factory=FaultLedger)
    _request_ids: int = 0

    @property
    def now_ms(self) -> int:
        return self.scheduler.now_ms

    def request_id(self) -> int:
        self._request_ids += 1
        return self._request_ids

    def count(self, name: str, amount: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + amount

    def note(self, text: str) -> None:
        """A line of the run's trace (faults, elections, reshards): printed when a seed fails."""
        self.trace.append(f"{self.now_ms:>7} ms  {text}")

    def jitter(self, interval_ms: int) -> int:
        """``interval_ms`` give or take a quarter, so periodic loops drift apart."""
        quarter = max(interval_ms // 4, 1)
        return max(1, interval_ms + self.rng.randint(-quarter, quarter))
