"""The order of the consumer-scaling experiment's runs (pure): repetition-major, the modes interleaved.

For each repetition r, for each mode, one *block*: a fresh cluster of its own on which r is
measured once per consumer count, each run on a topic and group of its own. So repetition r of
one mode runs close in time to repetition r of the other, and a drift of the machine over the
run (another job's load, a warming cache) falls on both modes instead of on whichever ran last.

Resuming: a run whose event log exists is left out of its block, and a block with no run left
is left out whole, so it starts no cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from mafka4.limits import ReadMode

if TYPE_CHECKING:
    from simulations.scaling.experiment import ScalingSettings

# What settings.json records as the order (``ScalingSettings.to_json``); the report words it.
RUN_ORDER = "repetition-major"


@dataclass(frozen=True, slots=True)
class Block:
    """Repetition ``repetition`` of ``mode``, on one fresh cluster: a run per consumer count of ``consumers``."""

    repetition: int
    mode: ReadMode
    consumers: tuple[int, ...]  # in the settings' order


def every_run(settings: ScalingSettings) -> list[tuple[int, ReadMode, int]]:
    """(repetition, mode, consumers) of every run the settings ask for, in the order they are measured."""
    return [(repetition, mode, consumers) for repetition in range(settings.repetitions)
            for mode in settings.modes for consumers in settings.consumers]


def run_plan(settings: ScalingSettings, done: Callable[[int, ReadMode, int], bool]) -> list[Block]:
    """The blocks still to measure, in order; ``done(repetition, mode, consumers)`` says a run is on disk."""
    todo: dict[tuple[int, ReadMode], list[int]] = {}
    for repetition, mode, consumers in every_run(settings):
        if not done(repetition, mode, consumers):
            todo.setdefault((repetition, mode), []).append(consumers)
    return [Block(repetition, mode, tuple(counts)) for (repetition, mode), counts in todo.items()]
