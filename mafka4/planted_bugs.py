"""Planted bugs: three deliberate breaks of mafka4's promises, for demonstrations only.

Why this exists. A checker that never fails proves nothing. TigerBeetle keeps its simulator
honest by planting bugs in the real replica and showing that the simulator finds them; mafka4
does the same for its two judges, which both run the production cores and judge with the same
history checkers (``simulations/checkers.py``): the deterministic simulator
(``python3 -m simulations.dst --planted-bug NAME``) and chaos runs against a real cluster
(``mafka4 chaos --planted-bug NAME``). With a bug planted, both are expected to fail.

Each bug is a small change in a pure core that the Ray actors and the simulator share:

* ``high-watermark`` (``ReplicaState._advance_high_watermark``): the leader's high watermark
  follows its own log end offset instead of the lowest in the ISR, so batches no follower holds
  count as committed: acknowledged, and readable from a follower that got them first. The
  core's own assertion of that invariant (``ReplicaState._check_invariants``) is silenced with
  it, so that the checkers, not the assertion, have to notice.
* ``ack-before-isr`` (``ReplicaState.ack_ready``): an ``acks=all`` produce is answered once the
  leader appended the batch, before the ISR has it; the high watermark stays right.
* ``feeder-skips-batch`` (``feed_plan.plan_round``): the feeder drops, without any error, every
  batch that holds a positive multiple of ``SKIPPED_BATCH_OFFSET_STRIDE`` as an offset and
  feeds on past it; the rule depends on the batch alone, so a refeed skips the same batches.

What the checkers then see: a leader failover loses acknowledged batches (``lost``) or leaves a
VP holding records the new leader replaced (``misplaced``, ``diverged``); a skipped batch is in
no VP and never read (``lost``).

Switch: ``$MAFKA4_PLANTED_BUG`` (``PLANTED_BUG_ENV``), read once when this module is first
imported; unset or empty, the default, plants nothing, and each site costs one identity test
against the module constant ``PLANTED``. An unknown name is refused with ``InvalidConfig``.
The simulator and tests plant a bug in their own process with ``planted``; a throwaway
cluster's processes (its daemon, Ray raylets and actor workers) inherit it from the
environment while ``exported`` holds (``exported_variables.exported_variable``, as for fsync
points and the cluster's home).

Never plant a bug in a cluster that holds data anyone wants: each one loses acknowledged
messages.
"""

from __future__ import annotations

import contextlib
import enum
import os
from typing import Iterator

from mafka4.errors import InvalidConfig
from mafka4.exported_variables import exported_variable

PLANTED_BUG_ENV = "MAFKA4_PLANTED_BUG"
# feeder-skips-batch drops the batch holding each positive multiple of this offset: with
# batches of a few records, about one batch in this many offsets, and at least one in any run
# that commits more records than this to a partition.
SKIPPED_BATCH_OFFSET_STRIDE = 20


class PlantedBug(enum.Enum):
    HIGH_WATERMARK = "high-watermark"
    ACK_BEFORE_ISR = "ack-before-isr"
    FEEDER_SKIPS_BATCH = "feeder-skips-batch"


def names() -> str:
    return ", ".join(bug.value for bug in PlantedBug)


def parse(name: str | None) -> PlantedBug | None:
    """The bug ``name`` names; None for no name (unset or empty); ``InvalidConfig`` for an unknown one."""
    if name is None or not name.strip():
        return None
    try:
        return PlantedBug(name.strip().lower())
    except ValueError:
        raise InvalidConfig(f"{PLANTED_BUG_ENV}={name!r} names no planted bug: use one of {names()}, "
                            f"or leave it unset for none") from None


# The bug this process runs with. Sites read it as ``planted_bugs.PLANTED`` (never a copy
# imported by name), so that ``planted`` reaches them.
PLANTED: PlantedBug | None = parse(os.environ.get(PLANTED_BUG_ENV))


@contextlib.contextmanager
def planted(bug: PlantedBug | None) -> Iterator[None]:
    """This process runs with ``bug`` (None: with none) meanwhile; processes it starts do not change."""
    global PLANTED
    previous = PLANTED
    PLANTED = bug
    try:
        yield
    finally:
        PLANTED = previous


def exported(bug: PlantedBug | None) -> contextlib.AbstractContextManager[None]:
    """Processes started meanwhile (a local cluster's nodes and their actors) run with ``bug``
    (None: with none); this one does not change."""
    return exported_variable(PLANTED_BUG_ENV, None if bug is None else bug.value)


def feeder_skips(base_offset: int, next_offset: int) -> bool:
    """feeder-skips-batch: True for a batch ``[base_offset, next_offset)`` holding a positive
    multiple of ``SKIPPED_BATCH_OFFSET_STRIDE``."""
    stride = SKIPPED_BATCH_OFFSET_STRIDE
    return max(1, -(-base_offset // stride)) * stride < next_offset
