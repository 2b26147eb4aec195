"""A replica move in flight as the controller records it in etcd, and which moves start now (pure).

A move between live read nodes (``replica_moves``) takes several upkeep passes: its target
copies the VP's log before the move can end. So that a controller that takes over resumes it,
the move itself is recorded at ``keys.replica_move(cluster, topic, vp)`` while it is in flight::

    {"source": "r1", "target": "r3", "purpose": "onto" | "off", "reason": "...", "started_ms": 1733331234567}

``purpose`` is ``MovePurpose.BALANCE`` ("onto": a new read node takes replicas) or
``MovePurpose.RELEASE`` ("off": a read node to release gives them up); ``started_ms`` is the
wall clock of the controller that started it (a monotonic clock does not survive a takeover),
against which ``replica_move_time_ms_max`` is measured. The VP's progress is not recorded
here: ``replica_moves.next_move_step`` reads it from the VP's state each time.

Why a key per VP and not an intent (``metadata.intents``): an intent is a request that one
executor carries out once and answers with a result; a move is a standing piece of controller
state that many passes advance, that other upkeep must see as "this VP is busy" (one key read
under one prefix), and whose key per VP makes "one move per VP at a time" a create-if-absent.
Its reason is kept in the record and logged, as an intent's would be.

``from_json`` refuses a record that does not hold together, naming the field.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from mafka4.coordinator.control.replica_moves import MovePurpose, ReplicaMove

_PURPOSE_NAMES = {MovePurpose.BALANCE: "onto", MovePurpose.RELEASE: "off"}
_PURPOSES = {name: purpose for purpose, name in _PURPOSE_NAMES.items()}


@dataclass(frozen=True, slots=True)
class MoveRecord:
    """``move`` in flight since ``started_ms`` (wall clock), for ``reason``."""

    move: ReplicaMove
    reason: str
    started_ms: int

    def to_json(self) -> dict:
        return {"source": self.move.source, "target": self.move.target,
                "purpose": _PURPOSE_NAMES[self.move.purpose], "reason": self.reason, "started_ms": self.started_ms}

    @classmethod
    def from_json(cls, topic: str, vp: int, value: dict) -> "MoveRecord":
        fields = ("source", "target", "purpose", "reason", "started_ms")
        missing = [name for name in fields if name not in value]
        if missing:
            raise ValueError(f"replica move record of {topic}/v{vp} {value!r} lacks {', '.join(missing)}")
        if value["purpose"] not in _PURPOSES:
            raise ValueError(f"replica move record of {topic}/v{vp}: purpose must be one of "
                             f"{sorted(_PURPOSES)}, not {value['purpose']!r}")
        source, target, started_ms = value["source"], value["target"], value["started_ms"]
        if not (isinstance(source, str) and isinstance(target, str) and source and target and source != target):
            raise ValueError(f"replica move record of {topic}/v{vp}: source {source!r} and target {target!r} "
                             f"must be two different read node ids")
        if isinstance(started_ms, bool) or not isinstance(started_ms, int) or started_ms < 0:
            raise ValueError(f"replica move record of {topic}/v{vp}: started_ms must be an integer >= 0, "
                             f"not {started_ms!r}")
        return cls(ReplicaMove(topic, vp, source, target, _PURPOSES[value["purpose"]]), str(value["reason"]),
                   started_ms)

    def waited_too_long(self, wall_ms: int, move_time_ms_max: int) -> bool:
        """The move has been in flight for more than ``move_time_ms_max`` at ``wall_ms`` (a clock
        behind ``started_ms``, another controller's, counts as no time passed)."""
        return wall_ms - self.started_ms > move_time_ms_max


def moves_to_start(planned: Iterable[ReplicaMove], in_flight: int, in_flight_max: int) -> tuple[ReplicaMove, ...]:
    """The first of ``planned`` that fit beside ``in_flight`` moves under ``in_flight_max``, in plan
    order; the rest are planned again once some ended."""
    assert in_flight >= 0 and in_flight_max >= 1, (in_flight, in_flight_max)
    room = max(0, in_flight_max - in_flight)
    chosen = tuple(planned)[:room]
    assert len({(move.topic, move.vp) for move in chosen}) == len(chosen), f"one move per VP: {chosen}"
    return chosen
