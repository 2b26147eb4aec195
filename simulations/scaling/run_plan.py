"""The order of the consumer-scaling experiment's runs (pure): repetition-major, the modes interleaved.

For each repetition r, for each mode, one *block*: a fresh cluster of its own on which r is
measured once per consumer count and lane count (a *shape*: ``(consumers, lanes)``), each run on
a topic and group of its own. Mafka3 leaves out the lane counts above
``ScalingSettings.mafka3_lanes_max``: a topic per lane would not fit the machine. So repetition r of
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
    """Repetition ``repetition`` of ``mode``, on one fresh cluster: a run per shape of ``shapes``."""

    repetition: int
    mode: ReadMode
    shapes: tuple[tuple[int, int], ...]  # (consumers, lanes), consumer counts in the settings' order, then lane counts


def every_run(settings: ScalingSettings) -> list[tuple[int, ReadMode, int, int]]:
    """(repetition, mode, consumers, lanes) of every run the settings ask for, in the order they are measured."""
    return [(repetition, mode, consumers, lanes) for repetition in range(settings.repetitions)
            for mode in settings.modes for consumers in settings.consumers for lanes in settings.lanes
            if settings.runs_lanes(mode, lanes)]


def run_plan(settings: ScalingSettings, done: Callable[[int, ReadMode, int, int], bool]) -> list[Block]:
    """The blocks still to measure, in order; ``done(repetition, mode, consumers, lanes)`` says a run is on disk."""
    todo: dict[tuple[int, ReadMode], list[tuple[int, int]]] = {}
    for repetition, mode, consumers, lanes in every_run(settings):
        if not done(repetition, mode, consumers, lanes):
            todo.setdefault((repetition, mode), []).append((consumers, lanes))
    return [Block(repetition, mode, tuple(shapes)) for (repetition, mode), shapes in todo.items()]
