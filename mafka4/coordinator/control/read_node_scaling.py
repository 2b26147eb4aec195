"""How many read nodes the cluster should have, as pure decisions (issue 38: read nodes scale with consumers).

Each read node reports its own load (``metadata.read_node_load.ReadNodeLoad``): the replicas of
open VPs it hosts, the bytes/s it feeds into them, the CPU it spends on consumers' fetches. At each
``ReadNodeScaling.decide`` the controller passes the registered read nodes and their reports;
one decision comes back, with a reason that names the bound, the measured value and the nodes:

* ``AddReadNodes`` - the read nodes' total passes (their count x a per-node bound) of
  ``ControllerConfig`` (``read_node_vp_replicas_max``, ``read_node_fed_bytes_per_s_max``,
  ``read_node_fetch_millicores_max``): the target is ceil(total / bound) for the measure that
  needs the most, capped by ``read_nodes_max``; or fewer than ``read_nodes_min`` are registered.
  While the asked nodes start (until they registered, or ``read_node_add_cooldown_ms`` passed)
  the same target is not asked for again; a larger one is.
* ``ReleaseReadNode`` - one node has been idle (fresh report, feeding and fetch CPU at most the
  ``read_node_idle_*`` bounds) continuously for ``read_node_idle_release_delay_ms``, the others
  stay at least ``read_nodes_min`` and could carry the whole load within the upper bounds, and no
  add or other release is under way. The longest idle node goes first (then the one hosting the
  fewest replicas, sealed ones included, then the smallest id). One at a time: the next waits
  until this one left the registrations.
* ``HoldReadNodes`` - anything else, with why (within bounds; one node over a bound while the
  total is within, which moving replicas evens out; added nodes still starting; capped; ...).

A single node over a bound with the total within is not a reason to add: more nodes would not
unload it, moving replicas off it would.

**Sealed VPs.** Replicas of sealed VPs (closed by a split or a merge, complete, never fed again:
only their group's draining and replays read them, and they retire once past the topic's
retention, 7 days by default) are reported apart (``sealed_vp_replicas``) and count for no
bound: they neither ask for a node nor keep one (were they counted, a group that grew, its
splits closing VPs, and then shrank would keep its added read nodes until that retention). A
node hosting only those is idle and releasable like any other: they move off it first
(``replica_move_plans.plan_moves_off``). Reasons name them where any are hosted. A report from
a node that does not tell them apart counts them as open (``ReadNodeLoad.from_json``).

**What Ray is asked.** Every decision carries ``target_read_nodes``; the controller requests
``read_node_bundles(target_read_nodes)`` with ``ray.autoscaler.sdk.request_resources``. The
request is a standing floor that replaces the previous one, and Ray's autoscaler fits its
bundles onto the nodes' full resources as if idle (``resource_demand_scheduler``), so N bundles
of one whole read node's ``read_node`` units (``transport.ray_names.NODE_RESOURCE_UNITS``) keep N
read nodes, whatever actors already use, and start the missing ones. A release is expressed by
requesting one bundle fewer: once the released node's replicas moved off and its mafka4 actors
stopped (a node running an actor is never idle to Ray), no request needs it, and Ray's
autoscaler ends it after its ``idle_timeout_minutes`` (``ray_cluster.yaml``). Ray picks which idle
node to end, so a release names a node only for the moves and the log. Write nodes are sized by
write throughput only: nothing here asks for or releases one.

**Unknown load.** A report measured more than ``read_node_load_stale_ms`` before ``now_ms`` is
ignored; a registered node may have none yet (it just started). Either way the decision's
``unmeasured`` says so, and the node counts as capacity without load: a scale-up comes one
report later than it would with the node's load known, and the node is never released on it
(its idle clock restarts). A report measured after ``now_ms`` (another clock) is fresh. Reports
of unregistered nodes are ignored: a report is bound to its node's lease.

Invariants (asserted): ``now_ms`` never goes back; every target is within [``read_nodes_min``,
``read_nodes_max``]; an add names at least one node and its target; a release never leaves fewer
than ``read_nodes_min`` serving nodes, names a registered node idle for the whole delay, and
waits for the previous release to end. A release that never ends (the node stays registered)
holds back further releases, never scale-ups.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, Iterable

from mafka4.limits import MiB
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.transport.ray_names import NODE_RESOURCE_UNITS, READ_NODE_RESOURCE

# A reason names at most this many nodes of one kind, then "and N more": a reason stays a log line.
_NODES_NAMED_MAX = 5

# --- decisions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddReadNodes:
    """Ask Ray's autoscaler for ``count`` more read nodes: ``target_read_nodes`` in all."""

    count: int
    target_read_nodes: int
    reason: str
    unmeasured: tuple[str, ...] = ()  # registered nodes whose load was not known, and why

    def __str__(self) -> str:
        return _line(f"add {_count_of(self.count, 'read node')} (to {self.target_read_nodes})", self)


@dataclass(frozen=True, slots=True)
class ReleaseReadNode:
    """Release read node ``node``: move its replicas off, stop its actors, request ``target_read_nodes``."""

    node: str
    target_read_nodes: int
    reason: str
    unmeasured: tuple[str, ...] = ()

    def __str__(self) -> str:
        return _line(f"release read node {self.node} (to {self.target_read_nodes})", self)


@dataclass(frozen=True, slots=True)
class HoldReadNodes:
    """Keep the read nodes as they are: request ``target_read_nodes`` (again)."""

    target_read_nodes: int
    reason: str
    unmeasured: tuple[str, ...] = ()

    def __str__(self) -> str:
        return _line(f"hold {self.target_read_nodes} read nodes", self)


ReadScalingDecision = AddReadNodes | ReleaseReadNode | HoldReadNodes


def _line(action: str, decision: ReadScalingDecision) -> str:
    notes = "".join(f"; {note}" for note in decision.unmeasured)
    return f"{action}: {decision.reason}{notes}"


def read_node_bundles(target_read_nodes: int) -> list[dict[str, int]]:
    """The bundles to pass to ``request_resources`` to keep ``target_read_nodes`` read nodes (see the module doc)."""
    assert target_read_nodes >= 0, target_read_nodes
    return [{READ_NODE_RESOURCE: NODE_RESOURCE_UNITS} for _ in range(target_read_nodes)]


# --- the three measures ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Measure:
    """One measure of a report, its per-node bound, and how a reason says it."""

    value: Callable[[ReadNodeLoad], float]
    bound: float  # per read node, in the unit of ``value``
    says: Callable[[str, float], str]  # node, value -> "r1 hosts 410 VP replicas"
    amount: Callable[[float], str]  # value -> "410 VP replicas"


def _measures(config: ControllerConfig) -> tuple[_Measure, ...]:
    return (
        _Measure(lambda load: load.hosted_vp_replicas, config.read_node_vp_replicas_max,
                 lambda node, value: f"{node} hosts {value:.0f} VP replicas", lambda value: f"{value:.0f} VP replicas"),
        _Measure(lambda load: load.fed_bytes_per_s, config.read_node_fed_bytes_per_s_max,
                 lambda node, value: f"{node} is fed {_mib(value)}", lambda value: f"{_mib(value)} fed"),
        _Measure(lambda load: load.fetch_cpu_cores, config.read_node_fetch_millicores_max / 1000,
                 lambda node, value: f"{node} spends {value:.2f} CPU cores on fetches",
                 lambda value: f"{value:.2f} fetch CPU cores"),
    )


def _mib(bytes_per_s: float) -> str:
    return f"{bytes_per_s / MiB:.2f} MiB/s"


def _count_of(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _carry(count: int) -> str:
    return f"{_count_of(count, 'read node')} {'carries' if count == 1 else 'carry'}"


def _named(nodes: list[str]) -> str:
    shown = ", ".join(nodes[:_NODES_NAMED_MAX])
    return shown if len(nodes) <= _NODES_NAMED_MAX else f"{shown} and {len(nodes) - _NODES_NAMED_MAX} more"


def _sealed_note(loads: dict[str, ReadNodeLoad]) -> str:
    """The replicas of sealed VPs the nodes host, which no bound counts (the module docstring), or ""."""
    sealed = sum(load.sealed_vp_replicas for load in loads.values())
    return f" (and {_count_of(sealed, 'replica')} of sealed VPs, not counted)" if sealed else ""


def _nodes_needed(total: float, bound: float) -> int:
    """Read nodes that carry ``total`` with each within ``bound``. Rounded first, so that float noise
    (three nodes at 0.3 cores summing to 0.9000000000000001) does not ask for a node more."""
    return math.ceil(round(total / bound, 9))


# --- the tracker --------------------------------------------------------------------------------


class ReadNodeScaling:
    """The controller's read-node count: reports and registrations in, one decision per call.

    State: since when each serving node has been idle, the scale-up under way (its target and
    when it was asked), and the node being released. Memory: one entry per registered read node.
    """

    __slots__ = ("config", "_measures", "_now_ms", "_idle_since_ms", "_adding", "_releasing")

    def __init__(self, config: ControllerConfig):
        self.config = config
        self._measures = _measures(config)
        self._now_ms: int | None = None
        self._idle_since_ms: dict[str, int] = {}
        self._adding: tuple[int, int] | None = None  # (target_read_nodes, asked_at_ms)
        self._releasing: str | None = None

    @property
    def releasing(self) -> str | None:
        """The node of the last release while it is still registered (then no other is released)."""
        return self._releasing

    def cancel_release(self) -> str | None:
        """Call off the release under way (the load grew back before Ray ended the node): from the
        next decision its node serves and counts as capacity again, with a fresh idle clock.
        Returns that node, or None if no release was under way.

        Why: Ray fits requested bundles onto every node it runs, the released one included, so an
        add requested while that node is still up may start no node at all; the node must serve.
        """
        node, self._releasing = self._releasing, None
        return node

    def decide(self, registered_read_nodes: Iterable[str], reports: Iterable[ReadNodeLoad],
               now_ms: int) -> ReadScalingDecision:
        """The decision at ``now_ms`` for the registered read nodes and their latest load reports."""
        assert self._now_ms is None or now_ms >= self._now_ms, f"the clock went back from {self._now_ms} to {now_ms}"
        self._now_ms = now_ms
        registered = frozenset(registered_read_nodes)
        if self._releasing not in registered:
            self._releasing = None  # released: Ray ended it (or it left on its own)
        serving = sorted(registered - {self._releasing})
        loads, unmeasured = self._fresh_loads(registered, reports, now_ms)
        self._watch_idle(serving, loads, now_ms)
        if self._adding is not None:
            target, asked_at_ms = self._adding
            if len(serving) >= target or now_ms - asked_at_ms >= self.config.read_node_add_cooldown_ms:
                self._adding = None
        decision = self._decide(serving, loads, now_ms)
        self._check(decision, serving, now_ms)
        if isinstance(decision, AddReadNodes):
            self._adding = (decision.target_read_nodes, now_ms)
        elif isinstance(decision, ReleaseReadNode):
            self._releasing = decision.node
            del self._idle_since_ms[decision.node]
        return dataclasses.replace(decision, unmeasured=unmeasured) if unmeasured else decision

    # -- inputs --

    def _fresh_loads(self, registered: frozenset[str], reports: Iterable[ReadNodeLoad],
                     now_ms: int) -> tuple[dict[str, ReadNodeLoad], tuple[str, ...]]:
        loads: dict[str, ReadNodeLoad] = {}
        notes = []
        by_node: dict[str, ReadNodeLoad] = {}
        for report in reports:
            assert report.node_id not in by_node, f"two load reports of read node {report.node_id}"
            by_node[report.node_id] = report
        stale_ms = self.config.read_node_load_stale_ms
        for node in sorted(registered):
            report = by_node.get(node)
            if report is None:
                notes.append(f"{node} has not reported its load yet: counted without load, never released")
            elif now_ms - report.measured_at_ms > stale_ms:
                notes.append(f"{node}'s load report is {(now_ms - report.measured_at_ms) / 1000:.1f} s old, over the "
                             f"bound of {stale_ms / 1000:.1f} s: ignored, counted without load, never released")
            else:
                loads[node] = report
        return loads, tuple(notes)

    def _is_idle(self, load: ReadNodeLoad) -> bool:
        return (load.fed_bytes_per_s <= self.config.read_node_idle_fed_bytes_per_s_max
                and load.fetch_cpu_cores * 1000 <= self.config.read_node_idle_fetch_millicores_max)

    def _watch_idle(self, serving: list[str], loads: dict[str, ReadNodeLoad], now_ms: int) -> None:
        """Idle clocks: started when a serving node is first seen idle, dropped when it is not (or unknown)."""
        idle = {node for node in serving if node in loads and self._is_idle(loads[node])}
        for node in list(self._idle_since_ms):
            if node not in idle:
                del self._idle_since_ms[node]
        for node in idle:
            self._idle_since_ms.setdefault(node, now_ms)

    # -- the decision --

    def _decide(self, serving: list[str], loads: dict[str, ReadNodeLoad], now_ms: int) -> ReadScalingDecision:
        config = self.config
        count = len(serving)
        pending = self._adding[0] if self._adding is not None else 0
        held = min(max(count, pending, config.read_nodes_min), config.read_nodes_max)
        totals = [sum(measure.value(load) for load in loads.values()) for measure in self._measures]
        needed = max([config.read_nodes_min] + [_nodes_needed(total, measure.bound)
                                                 for total, measure in zip(totals, self._measures)])
        if needed > count:
            wanted = min(needed, config.read_nodes_max)
            why = self._why_more(serving, loads, totals)
            if wanted <= count:
                return HoldReadNodes(held, f"{why}; {_count_of(needed, 'read node')} needed, but "
                                           f"read_nodes_max is {config.read_nodes_max}: no more asked for")
            capped = (f" (capped by read_nodes_max; {_count_of(needed, 'read node')} needed)"
                      if wanted < needed else "")
            if pending >= wanted:
                asked_s_ago = (now_ms - self._adding[1]) / 1000
                return HoldReadNodes(held, f"{why}; asked for {pending} read nodes {asked_s_ago:.1f} s ago, "
                                           f"{count} registered: waiting for them to start{capped}")
            return AddReadNodes(wanted - count, wanted, f"{why}: asking for {wanted - count} more, "
                                                        f"{_count_of(wanted, 'read node')} in all{capped}")
        within = self._within(serving, loads, totals)
        if pending > count:
            return HoldReadNodes(held, f"{within}; asked for {pending} read nodes, {count} registered: "
                                       f"none released while they start")
        if self._releasing is not None:
            return HoldReadNodes(held, f"{within}; {self._releasing} is being released (its replicas move off, "
                                       f"then Ray ends it): one release at a time")
        return self._release_or_hold(serving, loads, totals, within, held, now_ms)

    def _release_or_hold(self, serving: list[str], loads: dict[str, ReadNodeLoad], totals: list[float],
                         within: str, held: int, now_ms: int) -> ReadScalingDecision:
        config = self.config
        delay_ms = config.read_node_idle_release_delay_ms
        due = sorted((since_ms, loads[node].hosted_vp_replicas + loads[node].sealed_vp_replicas, node)
                     for node, since_ms in self._idle_since_ms.items() if now_ms - since_ms >= delay_ms)
        if not due:
            return HoldReadNodes(held, within)
        _, _, node = due[0]
        idle_for = (f"{node} idle for {(now_ms - self._idle_since_ms[node]) / 1000:.1f} s (release delay "
                    f"{delay_ms / 1000:.1f} s): {self._idle_text(loads[node])}")
        count = len(serving)
        if count - 1 < config.read_nodes_min:
            return HoldReadNodes(held, f"{within}; {idle_for}, but read_nodes_min is {config.read_nodes_min}: kept")
        over = [f"{measure.amount(total)} in all, over {count - 1} x {measure.amount(measure.bound)}"
                for total, measure in zip(totals, self._measures) if _nodes_needed(total, measure.bound) > count - 1]
        if over:
            return HoldReadNodes(held, f"{within}; {idle_for}, but the other {count - 1} could not carry "
                                       f"{', '.join(over)}: kept")
        # Past read_nodes_max (the cluster started larger), fewer bundles than nodes end no busy node.
        return ReleaseReadNode(node, min(count - 1, config.read_nodes_max),
                               f"{idle_for}; the other {_carry(count - 1)} the load within their bounds")

    def _idle_text(self, load: ReadNodeLoad) -> str:
        config = self.config
        sealed = (f", hosts {_count_of(load.sealed_vp_replicas, 'replica')} of sealed VPs (they move off too)"
                  if load.sealed_vp_replicas else "")
        return (f"fed {_mib(load.fed_bytes_per_s)} (idle at most {_mib(config.read_node_idle_fed_bytes_per_s_max)}), "
                f"{load.fetch_cpu_cores:.2f} fetch CPU cores (idle at most "
                f"{config.read_node_idle_fetch_millicores_max / 1000:.2f}){sealed}")

    # -- reasons --

    def _why_more(self, serving: list[str], loads: dict[str, ReadNodeLoad], totals: list[float]) -> str:
        """Why more read nodes are needed: each measure whose total passes the nodes' bounds, and its nodes."""
        count = len(serving)
        parts = []
        for total, measure in zip(totals, self._measures):
            if _nodes_needed(total, measure.bound) <= count:
                continue
            over = self._over(measure, loads)
            bound = f"the bound of {measure.amount(measure.bound)} per read node"
            parts.append(f"{over}, over {bound}" if over else f"no node passes {bound} alone")
            parts[-1] += (f"; {_carry(count)} {measure.amount(total)} in all, "
                          f"{_count_of(_nodes_needed(total, measure.bound), 'read node')} keep each within it")
        if count < self.config.read_nodes_min:
            parts.append(f"{_count_of(count, 'read node')} registered, below read_nodes_min of "
                         f"{self.config.read_nodes_min}")
        assert parts, "more read nodes are needed for a reason"
        return "; ".join(parts) + _sealed_note(loads)

    def _within(self, serving: list[str], loads: dict[str, ReadNodeLoad], totals: list[float]) -> str:
        """The load is within the nodes' bounds; a node over a bound alone is evened out by moving replicas."""
        count = len(serving)
        amounts = ", ".join(measure.amount(total) for total, measure in zip(totals, self._measures))
        text = (f"{_carry(count)} {amounts} in all, within "
                f"{count} x {', '.join(measure.amount(measure.bound) for measure in self._measures)}"
                f"{_sealed_note(loads)}")
        for measure in self._measures:
            over = self._over(measure, loads)
            if over:
                text += (f"; {over}, over the bound of {measure.amount(measure.bound)} per read node: "
                         f"moving replicas evens it out, no node added")
        return text

    @staticmethod
    def _over(measure: _Measure, loads: dict[str, ReadNodeLoad]) -> str:
        """The nodes over ``measure``'s bound, each with its value ("r1 hosts 410 VP replicas"), or ""."""
        return _named([measure.says(node, measure.value(loads[node])) for node in sorted(loads)
                       if measure.value(loads[node]) > measure.bound])

    # -- invariants --

    def _check(self, decision: ReadScalingDecision, serving: list[str], now_ms: int) -> None:
        config = self.config
        assert config.read_nodes_min <= decision.target_read_nodes <= config.read_nodes_max, decision
        if isinstance(decision, AddReadNodes):
            assert decision.count >= 1 and decision.target_read_nodes == len(serving) + decision.count, decision
        elif isinstance(decision, ReleaseReadNode):
            assert decision.node in serving and len(serving) - 1 >= config.read_nodes_min, decision
            assert decision.target_read_nodes == min(len(serving) - 1, config.read_nodes_max), decision
            assert now_ms - self._idle_since_ms[decision.node] >= config.read_node_idle_release_delay_ms, decision
            assert self._adding is None and self._releasing is None, decision
