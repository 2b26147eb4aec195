"""The figures of ``bench read-scale`` from what one run recorded, and the pairs' summary (pure).

A run (``benchmarks.read_scale``) records, all on this machine's clocks:

* ``trigger``: the instant the bench made the read nodes' load pass the controller's bound (a
  topic created), on the monotonic clock (ns) and the wall clock (ms);
* ``events``: the wall ms at which the sampler first saw each step of a scale-up
  (``SCALE_UP_STEPS``, ``SERVING_STEPS``), None for a step never seen;
* the producer's send and acknowledgement times per message (monotonic ns; None: not acknowledged);
* per member, the monotonic ns of each of its non-empty polls.

Everything is turned into ms after the trigger. The *move window* is from the first replica move's
start to the end of the last one, as the sampler saw the move records in etcd. A run without
read-node scaling has no window of its own: its pair's window (the same ms after its own trigger)
is measured in it, so the two runs of a pair compare produce latency and members' gaps over the
same stretch of their runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from mafka4.bench.rebalance import longest_gap_ms
from mafka4.bench.stats import percentiles_ms

NS_PER_MS = 1_000_000
# A scale-up's steps, in the order they happen (the wall ms at which the sampler first saw each):
SCALE_UP_STEPS = (
    "decided",  # the controller's first "add" decision (its own stamp, ``keys.read_scaling``'s decided_ms)
    "ray_node_up",  # Ray lists a read-node-type node that was not up at the start
    "registered",  # that node's node agent registered it with mafka4 (a live read node)
    "first_move",  # a replica move record appeared (the first move onto the new node began)
    "first_in_risr",  # a VP's state lists the new node in its RISR: a replica there caught up and may serve readers
    "moves_done",  # the move records were gone, for the last time in the window
)
# Steps that may not happen at all in a run, after the chain above: which replicas move is the
# planner's choice (followers first), and consumers read at a VP's leader unless they lag
# (``risr.state.route_fetch``), so a node holding only followers may serve no consumer.
SERVING_STEPS = (
    "first_leader",  # a VP's state names the new node its leader
    "first_records_served",  # the new node's ReadNode answered a consumer's fetch with records (its own stamp)
)


@dataclass(frozen=True, slots=True)
class Trigger:
    """The instant a run's scale-up was triggered, on both clocks."""

    monotonic_ns: int
    wall_ms: int


def steps_after_trigger_ms(events_wall_ms: Mapping[str, int | None], trigger: Trigger) -> dict[str, int | None]:
    """Each scale-up step in ms after the trigger (None: not seen)."""
    return {step: None if events_wall_ms.get(step) is None else events_wall_ms[step] - trigger.wall_ms
            for step in SCALE_UP_STEPS + SERVING_STEPS}


def move_window_ms(steps_ms: Mapping[str, int | None]) -> tuple[int, int] | None:
    """(start, end) in ms after the trigger of the replica moves; None when no move started and ended."""
    start, end = steps_ms.get("first_move"), steps_ms.get("moves_done")
    if start is None or end is None or end < start:
        return None
    return start, end


def ack_latencies_ms(sent_ns: Sequence[int], acked_ns: Sequence[int | None], trigger: Trigger,
                     window_ms: tuple[float, float]) -> dict:
    """Percentiles of send-to-acknowledgement of the messages sent inside ``window_ms`` (ms after the
    trigger), their count and how many of them were never acknowledged."""
    start_ns = trigger.monotonic_ns + int(window_ms[0] * NS_PER_MS)
    end_ns = trigger.monotonic_ns + int(window_ms[1] * NS_PER_MS)
    inside = [(sent, acked) for sent, acked in zip(sent_ns, acked_ns) if start_ns <= sent <= end_ns]
    latencies = [acked - sent for sent, acked in inside if acked is not None]
    return {**percentiles_ms(latencies), "messages": len(inside), "unacknowledged": len(inside) - len(latencies)}


def member_gaps_ms(receive_ns: Mapping[str, Sequence[int]], trigger: Trigger,
                   window_ms: tuple[float, float]) -> dict[str, float]:
    """Per member, its longest stretch without a non-empty poll inside ``window_ms`` (ms after the
    trigger; the window's edges count as polls)."""
    start_ns = trigger.monotonic_ns + int(window_ms[0] * NS_PER_MS)
    end_ns = trigger.monotonic_ns + int(window_ms[1] * NS_PER_MS)
    return {name: longest_gap_ms(list(times), start_ns, end_ns) for name, times in sorted(receive_ns.items())}


def steps_between_ms(steps_ms: Mapping[str, int | None]) -> dict[str, int | None]:
    """The time each step of the chain took after the one before it, and from the decision to each
    of the new node's first RISR membership and ``SERVING_STEPS`` (None where either end was not seen)."""
    def between(before: str, after: str) -> int | None:
        a, b = steps_ms.get(before), steps_ms.get(after)
        return None if a is None or b is None else b - a

    chain = {f"{before}_to_{after}": between(before, after) for before, after in zip(SCALE_UP_STEPS, SCALE_UP_STEPS[1:])}
    return chain | {f"decided_to_{step}": between("decided", step) for step in ("first_in_risr", *SERVING_STEPS)}


def pair_summary(scaling: Mapping, fixed: Mapping) -> dict:
    """One pair: the scaling run's steps (and the fixed run's, whose node boots without moves) and,
    over the scaling run's move window, both runs' produce latency and members' longest gaps (the
    same ms after each run's trigger; None where the scaling run had no move window); and both
    runs' produce latency over their whole window after the trigger."""
    window = scaling["move_window_ms"]
    summary = {"steps_ms": scaling["steps_ms"], "steps_between_ms": scaling["steps_between_ms"],
               "fixed_steps_ms": fixed["steps_ms"], "move_window_ms": window,
               "load_before": {"scaling": scaling["load_before"], "fixed": fixed["load_before"]},
               "whole_window_produce_ms": {"scaling": scaling["whole_window_produce_ms"],
                                           "fixed": fixed["whole_window_produce_ms"]}}
    if window is None:
        return summary | {"in_move_window": None}
    summary["in_move_window"] = {
        "produce_ms": {"scaling": scaling["in_move_window"]["produce_ms"], "fixed": fixed["in_move_window"]["produce_ms"]},
        "largest_member_gap_ms": {"scaling": max(scaling["in_move_window"]["member_gaps_ms"].values()),
                                  "fixed": max(fixed["in_move_window"]["member_gaps_ms"].values())},
    }
    p999 = summary["in_move_window"]["produce_ms"]
    summary["in_move_window"]["produce_p999_scaling_over_fixed"] = (
        round(p999["scaling"]["p99.9"] / p999["fixed"]["p99.9"], 2) if p999["fixed"]["p99.9"] else None)
    return summary
