"""The simulated network: delay, drop, duplicate, reorder and partitions, from the run's seed.

Endpoints are names ("w0" a write node, "ctl" the coordinator, "prod0" a producer, ...),
each with one handler ``handler(source, message)``. ``send`` never fails: like a datagram it
may arrive late, twice, out of order (every copy draws its own delay) or never. A message is
lost when its link is cut at sending or at delivery time, or when no handler is registered at
delivery time (the destination is down). Messages are the frozen dataclasses of
``messages.py``; the network never looks inside them.

Partitions are cut links between two endpoint names (symmetric, counted: a link cut by two
faults is restored when both are undone).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from simulations.dst.scheduler import Scheduler

Handler = Callable[[str, object], None]


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    delay_ms_min: int = 1
    delay_ms_max: int = 10
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0

    def __post_init__(self) -> None:
        assert 0 <= self.delay_ms_min <= self.delay_ms_max, (self.delay_ms_min, self.delay_ms_max)
        assert 0 <= self.drop_probability < 1 and 0 <= self.duplicate_probability < 1


class Network:
    def __init__(self, scheduler: Scheduler, rng: random.Random, config: NetworkConfig):
        self._scheduler = scheduler
        self._rng = rng
        self.config = config
        self._handlers: dict[str, Handler] = {}
        self._cut: dict[frozenset[str], int] = {}  # link -> faults cutting it
        self.sent_total = 0
        self.dropped_total = 0
        self.duplicated_total = 0

    def register(self, endpoint: str, handler: Handler) -> None:
        self._handlers[endpoint] = handler

    def unregister(self, endpoint: str) -> None:
        self._handlers.pop(endpoint, None)

    def is_cut(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self._cut

    def cut(self, a: str, b: str) -> None:
        assert a != b, a
        link = frozenset((a, b))
        self._cut[link] = self._cut.get(link, 0) + 1

    def uncut(self, a: str, b: str) -> None:
        link = frozenset((a, b))
        count = self._cut.get(link, 0) - 1
        if count > 0:
            self._cut[link] = count
        else:
            self._cut.pop(link, None)

    @property
    def cut_links(self) -> int:
        return len(self._cut)

    def send(self, source: str, destination: str, message: object) -> None:
        self.sent_total += 1
        config = self.config
        if self.is_cut(source, destination) or self._rng.random() < config.drop_probability:
            self.dropped_total += 1
            return
        copies = 1
        if self._rng.random() < config.duplicate_probability:
            copies = 2
            self.duplicated_total += 1
        for _ in range(copies):
            delay_ms = self._rng.randint(config.delay_ms_min, config.delay_ms_max)
            self._scheduler.after(delay_ms, lambda: self._deliver(source, destination, message))

    def _deliver(self, source: str, destination: str, message: object) -> None:
        handler = self._handlers.get(destination)
        if handler is None or self.is_cut(source, destination):
            self.dropped_total += 1
            return
        handler(source, message)
