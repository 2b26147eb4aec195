"""How many messages of each lane one poll may take, for a reader of lanes of several priorities.

A topic's lanes (``virtual.layout``) each carry a priority, 0..9, fixed when the lane opens (the
trunk's is 0). A reader may read VPs of several lanes at once (a group's trunk reader also reads
every lane without a reader of its own; a consumer may name ``lanes``). When they differ in
priority, ``ConsumerConfig.lane_order`` says how one poll serves them:

* **strict**: a lane is read only while no lane of higher priority has a backlog: those lanes get
  nothing of the poll (``VpFetcher`` does not even fetch them), the others share it as one lane
  would. A lane whose VPs are all read to their high watermark has no backlog, so new messages
  of a lower lane are read as soon as the higher ones are caught up, and a higher lane's new
  messages are never held back.
* **weighted**: every lane read gets a share of the poll: one message, and of the rest of
  ``poll_messages_max`` a part in proportion to its priority + 1 (priority 9 weighs ten times
  priority 0), rounded by largest remainders (ties to the higher priority, then the lane's
  name), so the shares sum to ``poll_messages_max`` exactly, or to one a lane when more lanes
  than that are read. No lane with a backlog waits for a poll in which it gets nothing, however
  busy the higher ones are. A lane caught up keeps its share too, so its new messages are taken
  in the poll their answer comes in, not one later; what a lane does not use of its share (it
  had less, or nothing) goes to the lanes cut short by theirs, higher priorities first
  (``rest_order``), so a lane with little to read never slows the others.

"A backlog" (strict) is what the reader knows before the poll: some VP of the lane it reads is
below its high watermark, as the last answer for it told; a VP not answered yet (no high
watermark known) may have one, and counts as having one.

Order then means: per key within a lane (a lane's VPs are read each in its own order, as the
trunk's), never across lanes: a message of a high lane may be returned before an older one of a
low lane, and lanes of one priority interleave as the trunk's VPs do.

A fetch answer is filled in the order its request names the VPs, up to the fetch's byte bound,
so a lane named last may get no bytes at all while the lanes before it have a backlog: weighted
shares alone would then serve whichever lane comes first. So under weighted order the lanes also
take turns at the head of the request (``fetch_order``): a deficit round robin in which each lane
earns its priority + 1 per poll with a backlog and the lane with the most credit goes first,
paying the total, so each lane leads in proportion to its weight and none never leads.

When every lane read is of one priority (or one lane is read), ``lane_shares`` returns None,
and the reader takes each answer as it did before lanes had priorities, with no cost per
message. Lanes of one priority among others each get their own share (weighted) and are read
together (strict).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from mafka4.limits import LANE_ORDERS

STRICT, WEIGHTED = LANE_ORDERS


@dataclass(frozen=True, slots=True)
class LaneReading:
    """What the reader knows of one lane it reads now."""

    priority: int
    backlog: bool | None  # True: some VP read is below its high watermark; False: none is; None: not known


@dataclass(frozen=True, slots=True)
class LaneShares:
    """One poll's shares: ``caps[lane]`` messages at most in the first pass over the answers; then
    the poll's rest to the lanes of ``rest_order``, in that order (weighted only; empty: strict)."""

    caps: dict[str, int]
    rest_order: tuple[str, ...]

    def paused(self) -> frozenset[str]:
        """The lanes not to fetch this poll: capped at nothing, with no claim on the rest (strict)."""
        return frozenset(lane for lane, cap in self.caps.items() if cap == 0 and lane not in self.rest_order)


def lane_readings(vps: Iterable[tuple[str, int, bool | None]]) -> dict[str, LaneReading]:
    """Per lane, from each VP read ``(lane, priority, backlog)``: the lane has a backlog if one of its VPs
    has, none if none may have, else not known."""
    lanes: dict[str, LaneReading] = {}
    for lane, priority, backlog in vps:
        held = lanes.get(lane)
        if held is not None:
            if held.backlog is True or backlog is False:
                continue
            if held.backlog is None and backlog is None:
                continue
        lanes[lane] = LaneReading(priority, backlog)
    return lanes


def has_backlog(reading: LaneReading) -> bool:
    """A lane may have a backlog unless it is known to have none."""
    return reading.backlog is not False


def lane_shares(lanes: Mapping[str, LaneReading], order: str, messages_max: int) -> LaneShares | None:
    """The shares of one poll of at most ``messages_max`` messages (see the module docstring); None:
    every lane read is of one priority, so nothing is capped."""
    assert order in LANE_ORDERS and messages_max >= 1, (order, messages_max)
    if len({reading.priority for reading in lanes.values()}) <= 1:
        return None
    if order == STRICT:
        waiting = [reading.priority for reading in lanes.values() if has_backlog(reading)]
        top = max(waiting, default=-1)
        return LaneShares({lane: messages_max if reading.priority >= top else 0 for lane, reading in lanes.items()}, ())
    rest_order = tuple(sorted(lanes, key=lambda lane: (-lanes[lane].priority, lane)))
    rest = max(0, messages_max - len(lanes))
    total = sum(reading.priority + 1 for reading in lanes.values())
    caps, remainders = {}, []
    for lane in rest_order:
        part, remainder = divmod(rest * (lanes[lane].priority + 1), total)
        caps[lane] = 1 + part
        remainders.append((-remainder, -lanes[lane].priority, lane))
    left = rest - sum(cap - 1 for cap in caps.values())  # fewer than the lanes: one more to the largest remainders
    for _, _, lane in sorted(remainders)[:left]:
        caps[lane] += 1
    return LaneShares(caps, rest_order)


def fetch_order(lanes: Mapping[str, LaneReading], credits: Mapping[str, int]) -> tuple[tuple[str, ...], dict[str, int]]:
    """The lanes in the order a weighted reader's next fetch names their VPs, and the credits after
    (see the module docstring): the lane with the most credit first, then by priority. Credits move
    only while some lane has a known backlog, so an idle reader's request (and its long poll) stays
    as it was."""
    ranked = sorted(lanes, key=lambda lane: (-credits.get(lane, 0), -lanes[lane].priority, lane))
    if not any(reading.backlog for reading in lanes.values()):
        return tuple(ranked), {lane: credits.get(lane, 0) for lane in lanes}
    earned = {lane: credits.get(lane, 0) + reading.priority + 1 for lane, reading in lanes.items()}
    first = min(earned, key=lambda lane: (-earned[lane], -lanes[lane].priority, lane))
    earned[first] -= sum(reading.priority + 1 for reading in lanes.values())
    rest = sorted((lane for lane in lanes if lane != first), key=lambda lane: (-lanes[lane].priority, lane))
    return (first, *rest), earned
