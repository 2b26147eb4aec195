"""The controller's read-node scaling and replica moves: the shell around their pure cores (issue 38).

Runs inside the read path's upkeep (``upkeep.ReadPathUpkeep``), every ``upkeep_interval_ms``,
only when ``ControllerConfig.read_node_scaling`` is 1. One pass:

1. **Moves in flight advance.** Every move recorded under ``keys.replica_moves_prefix``
   (``replica_move_records``) is asked ``replica_moves.next_move_step`` against the VP's state
   as etcd holds it and the live read nodes (registered, with their liveness key), and the step
   is carried out: a ``WriteState`` or a rollback is the VP state written with the controller's
   fence (``VirtualStore.swap``: a compare-and-swap on the revision read); the VP is then
   returned to the controller, whose repair (``read_path_repairs.handle_vps``) announces the new
   roles to every live replica (``host_states``), as for every other VP state the upkeep writes.
   A move that is done drops the source's log (``drop_everywhere``); an abandoned one drops the
   target's copy if its rollback took it out. Either way its record is deleted (fenced). A move
   still waiting past ``replica_move_time_ms_max`` is taken back where that is safe
   (``replica_moves.take_back``).
2. **The decision.** ``ReadNodeScaling.decide`` on the registered read nodes and their load
   reports (``keys.read_loads_prefix``); the target is asked of Ray (``ResourceRequests``: a
   standing request, sent when the target changes and at every add or release); the decision
   is logged with its reason and written to ``keys.read_scaling`` for ``mafka4 status``.
3. **New moves.** While a node is being released: ``plan_moves_off`` for it; once it hosts
   nothing (no replica of an open or a sealed VP) and no move leaves it, its ``ReadNode`` actor
   is stopped (``ReadNodeActions.stop``), and the node is marked released
   (``keys.released_read_node``), on which the node agent keeper stops its agent and starts none
   (``agent_plan``): Ray's autoscaler ends no node that runs an actor, even one holding no
   resources. The agent's stop revokes the node's registration, which ends the release for the
   scaling core. The controller does not restart an actor it stopped (``stopped_read_nodes``).
   Where no keeper runs (``mafka4 up``'s simulated nodes) the node stays registered; a VP placed
   on the stopped node meanwhile takes it back: its actor starts again and the release goes on.
   Otherwise, with no move in flight: ``plan_moves_onto`` the live read node hosting the fewest
   replicas of open VPs (a node that just joined hosts none). At most
   ``replica_moves_in_flight_max`` moves are in flight. An add calls off every release Ray has
   not ended yet (``cancel_release`` for the one under way, and every released node's mark
   deleted, so its agent starts again): Ray would count a released node, still up, as room for
   the new bundle and start none.

**Sealed VPs** (closed by a split or a merge, complete, retired only once past the topic's
retention) weigh on no decision: the nodes report their replicas apart (``sealed_vp_replicas``)
and the scaling core counts them for no bound, so they neither add a node nor keep an idle one;
the moves' balance leaves them out too (``replica_move_plans``). They only move off a node being
released, which is not stopped before they did.

Every VP with a move in flight is *busy*: the gone-node upkeep (``plan_replica_moves``) leaves
its replicas alone until the move ended (``busy_vps``).

Logging: every add, release, move step and move end at INFO on "mafka4.controller"; a hold at
INFO when its target or kind changed since the last decision, else at DEBUG (a hold is decided
every pass). Ray's and read nodes' failures are logged and retried at a later pass.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable, Mapping, Protocol

from mafka4.coordinator.control.read_node_scaling import (AddReadNodes, HoldReadNodes, ReadNodeScaling,
                                                          ReadScalingDecision, ReleaseReadNode, read_node_bundles)
from mafka4.coordinator.control.read_path_decisions import VirtualPartitionItem
from mafka4.coordinator.control.replica_move_plans import hosted_replicas, plan_moves_off, plan_moves_onto
from mafka4.coordinator.control.replica_move_records import MoveRecord, moves_to_start
from mafka4.coordinator.control.replica_moves import (MoveAbandoned, MoveAbandonedBecause, MoveDone, MoveStepKind,
                                                      MoveWait, ReplicaMove, WriteState, next_move_step, take_back)
from mafka4.limits.servers import ControllerConfig
from mafka4.metadata import keys
from mafka4.metadata.read_node_load import ReadNodeLoad
from mafka4.metadata.store import Fence, MetadataStore
from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore

log = logging.getLogger("mafka4.controller")

# Per topic, per VP id: the state and its key's mod_revision, as ``VirtualStore.states`` reads them.
StatesByTopic = Mapping[str, Mapping[int, tuple[VirtualPartitionState, int]]]
# Per (topic, VP id): a move in flight and its record key's mod_revision.
MoveRecords = dict[tuple[str, int], tuple[MoveRecord, int]]

_KINDS = {AddReadNodes: "add", ReleaseReadNode: "release", HoldReadNodes: "hold"}


class ResourceRequests(Protocol):
    """The controller's one question to Ray's autoscaler: keep this many read nodes."""

    def request_read_nodes(self, target_read_nodes: int) -> None: ...


class ReadNodeActions(Protocol):
    """What the moves ask of read nodes besides the roles the repair announces."""

    def drop(self, topic: str, node: str, vp: int) -> None:
        """``node`` stops hosting ``vp`` of ``topic`` and deletes its log (a node that is down: nothing)."""

    def stop(self, node: str) -> None:
        """Stop ``node``'s ``ReadNode`` actor (it hosts nothing)."""


class RayResourceRequests:
    """``ray.autoscaler.sdk.request_resources`` with ``read_node_bundles``; only a process that
    joined Ray (the controller's) may use it. Ray's errors are logged, never raised: a cluster
    without an autoscaler (``mafka4 up``) keeps its read nodes and serves on."""

    def __init__(self, request: Callable[..., object] | None = None):
        self._request = request

    def request_read_nodes(self, target_read_nodes: int) -> None:
        try:
            request = self._request
            if request is None:
                from ray.autoscaler.sdk import request_resources as request  # imported only when asked
            request(bundles=read_node_bundles(target_read_nodes))
            log.info("asked Ray's autoscaler for %d read nodes", target_read_nodes)
        except Exception as error:  # Ray's autoscaler is optional; the next change asks again
            log.warning("asking Ray's autoscaler for %d read nodes failed: %s: %s", target_read_nodes,
                        type(error).__name__, error)


class RayReadNodeActions:
    """``ReadNodeActions`` on the cluster's ``ReadNode`` actors."""

    def __init__(self, cluster: str):
        self._cluster = cluster

    def drop(self, topic: str, node: str, vp: int) -> None:
        from mafka4.coordinator.control.read_node_launcher import drop_everywhere
        drop_everywhere(self._cluster, topic, [node], [vp], delete_data=True)

    def stop(self, node: str) -> None:
        from mafka4.coordinator.control.read_node_launcher import stop_read_node
        stop_read_node(self._cluster, node)


def busy_vps(records: MoveRecords) -> dict[str, frozenset[int]]:
    """Per topic, the VPs with a move in flight."""
    busy: dict[str, set[int]] = {}
    for topic, vp in records:
        busy.setdefault(topic, set()).add(vp)
    return {topic: frozenset(vps) for topic, vps in busy.items()}


class ReadScaling:
    def __init__(self, store: MetadataStore, cluster: str, config: ControllerConfig, resources: ResourceRequests,
                 nodes: ReadNodeActions, counters: ControllerCounters | None = None):
        assert config.read_node_scaling == 1, "read-node scaling is off: the controller does not build it"
        self._store, self._cluster, self._config = store, cluster, config
        self._counters = counters if counters is not None else ControllerCounters("")  # its decisions, by kind
        self._resources, self._nodes = resources, nodes
        self._virtual = VirtualStore(store, cluster)
        self._scaling = ReadNodeScaling(config)
        self._requested: int | None = None  # the target last asked of Ray by this controller
        self._last_logged: tuple[str, int] | None = None
        self._stopped: set[str] = set()
        self._clock_ms = 0

    @property
    def stopped_read_nodes(self) -> frozenset[str]:
        """Released read nodes whose actor this controller stopped: not to be started again."""
        return frozenset(self._stopped)

    def records(self) -> MoveRecords:
        """The moves in flight, as etcd holds them; a record that does not parse is logged and skipped."""
        found: MoveRecords = {}
        for item in self._store.get_prefix(keys.replica_moves_prefix(self._cluster)):
            parsed = keys.parse_replica_move(self._cluster, item.key)
            if parsed is None:
                continue
            try:
                found[parsed] = (MoveRecord.from_json(*parsed, item.value), item.mod_revision)
            except ValueError as error:
                log.error("%s; it is ignored: delete key %s to clear it", error, item.key)
        return found

    def run(self, states_by_topic: StatesByTopic, registered_read_nodes: Iterable[str], records: MoveRecords,
            fence: Fence, wall_ms: int) -> set[VirtualPartitionItem]:
        """One pass (module docstring) over the mafka4-mode topics' VP states read this pass and the
        move ``records`` read with them; the VPs whose roles must be announced again.

        ``wall_ms``: the wall clock, the one the read nodes stamp their load reports with and the
        move records their start with (a monotonic clock is per process). The scaling core's clock
        never goes back: a wall clock stepped back holds it where it was."""
        self._clock_ms = max(self._clock_ms, wall_ms)
        registered = frozenset(registered_read_nodes)
        self._stopped &= registered  # a stopped node that left Ray is gone for good
        self._unstop_if_placed_on(states_by_topic)
        live = self._live(registered)
        announce, ended = self._advance(records, states_by_topic, live, fence, wall_ms)
        decision = self._decide(registered, self._clock_ms, fence)
        started = self._plan(states_by_topic, live, records, len(records) - ended, decision, fence, wall_ms)
        self._record(decision, wall_ms, len(records) - ended + started, fence)
        return announce

    def _unstop_if_placed_on(self, states_by_topic: StatesByTopic) -> None:
        """A stopped node stays registered until Ray ends it, so a topic created or a VP split
        meanwhile may be placed on it: it is no longer held stopped, the repair starts its actor
        again, and the release (still under way) moves the new replicas off before stopping it again."""
        named = {node for by_vp in states_by_topic.values() for state, _ in by_vp.values() if not state.retired
                 for node in state.replicas}
        for node in sorted(self._stopped & named):
            log.warning("read node %s was released and stopped, but a VP replica was placed on it since: it starts "
                        "again, and the replica moves off before it stops", node)
        self._stopped -= named

    # --- inputs -----------------------------------------------------------------------------

    def _live(self, registered: frozenset[str]) -> frozenset[str]:
        """Registered read nodes whose ``ReadNode`` holds its liveness key (stopped ones excluded)."""
        keyed = {node for item in self._store.get_prefix(keys.read_nodes_prefix(self._cluster))
                 if (node := keys.parse_read_node_liveness(self._cluster, item.key)) is not None}
        return frozenset(registered & keyed - self._stopped)

    def _reports(self) -> list[ReadNodeLoad]:
        reports = []
        for item in self._store.get_prefix(keys.read_loads_prefix(self._cluster)):
            try:
                reports.append(ReadNodeLoad.from_json(item.value))
            except ValueError as error:  # a node's bad report must not stop the decision for the others
                log.warning("%s: %s; that node counts as unmeasured", item.key, error)
        return reports

    # --- moves in flight ----------------------------------------------------------------------

    def _advance(self, records: MoveRecords, states_by_topic: StatesByTopic, live: frozenset[str], fence: Fence,
                 wall_ms: int) -> tuple[set[VirtualPartitionItem], int]:
        """Carry out the next step of every move in flight; the VPs to announce, and how many moves ended."""
        ended = 0
        announce: set[VirtualPartitionItem] = set()
        for (topic, vp), (record, _) in sorted(records.items()):
            found = states_by_topic.get(topic, {}).get(vp)
            state, revision = found if found is not None else (None, 0)
            move = record.move
            outcome = next_move_step(move, state, live)
            if isinstance(outcome, MoveWait) and record.waited_too_long(wall_ms, self._config.replica_move_time_ms_max):
                rollback = take_back(move, state, live)
                if rollback is not None:  # else it cannot be taken back safely now: it waits on
                    outcome = MoveAbandoned(MoveAbandonedBecause.TOOK_TOO_LONG, rollback)
            if isinstance(outcome, MoveWait):
                log.debug("move %s waits: %s", move, outcome.reason.value)
            elif isinstance(outcome, WriteState):
                if self._virtual.swap(topic, outcome.state, revision, fence):
                    log.info("move %s: %s (epoch %d)", move, outcome.kind.value, outcome.state.leader_epoch)
                    announce.add(VirtualPartitionItem(topic, vp))
                    if outcome.kind is MoveStepKind.REMOVE_SOURCE:
                        assert isinstance(next_move_step(move, outcome.state, live), MoveDone), (move, outcome)
                        ended += self._end(move, fence, drop=move.source, why="done")
            elif isinstance(outcome, MoveDone):
                ended += self._end(move, fence, drop=move.source, why="done")
            else:
                if outcome.rollback is not None:
                    if not self._virtual.swap(topic, outcome.rollback, revision, fence):
                        continue  # the state moved under it: looked at again next pass
                    announce.add(VirtualPartitionItem(topic, vp))
                took_back = outcome.rollback is not None
                ended += self._end(move, fence, drop=move.target if took_back else None,
                                   why=f"abandoned: {outcome.reason.value}", warn=True)
        return announce, ended

    def _end(self, move: ReplicaMove, fence: Fence, drop: str | None, why: str, warn: bool = False) -> bool:
        """Drop ``drop``'s copy (if named) and delete the move's record; False if the fence did not hold."""
        if drop is not None:
            self._nodes.drop(move.topic, drop, move.vp)
        (log.warning if warn else log.info)("move %s %s", move, why)
        return self._store.delete_fenced(keys.replica_move(self._cluster, move.topic, move.vp), fence)

    # --- the decision -------------------------------------------------------------------------

    def _decide(self, registered: frozenset[str], now_ms: int, fence: Fence) -> ReadScalingDecision:
        decision = self._scaling.decide(registered, self._reports(), now_ms)
        if isinstance(decision, AddReadNodes):
            self._call_off_releases(fence)
        kind = _KINDS[type(decision)]
        self._counters.read_node_scaling_decided(kind)
        changed = self._last_logged != (kind, decision.target_read_nodes)
        if kind != "hold" or changed:
            log.info("read nodes: %s", decision)
        else:
            log.debug("read nodes: %s", decision)
        self._last_logged = (kind, decision.target_read_nodes)
        if kind != "hold" or decision.target_read_nodes != self._requested:
            self._resources.request_read_nodes(decision.target_read_nodes)
            self._requested = decision.target_read_nodes
        return decision

    def _call_off_releases(self, fence: Fence) -> None:
        """An add calls off every release Ray has not ended yet: Ray fits the new bundles onto a
        released node that is still up (it counts nodes as if idle) and starts none, so that node
        must serve again. The one under way stops moving off; every marked one gets its agent back
        (the keeper starts it once the mark is gone), registers and serves."""
        if self._scaling.releasing is not None:
            node = self._scaling.cancel_release()
            self._stopped.discard(node)
            log.info("release of read node %s called off, more read nodes are needed: it serves again", node)
        for item in self._store.get_prefix(keys.released_read_nodes_prefix(self._cluster)):
            node = keys.parse_released_read_node(self._cluster, item.key)
            if node is not None and self._store.delete_fenced(item.key, fence):
                log.info("released read node %s is needed again: its node agent may start again", node)

    def _record(self, decision: ReadScalingDecision, wall_ms: int, in_flight: int, fence: Fence) -> None:
        self._store.put_fenced(keys.read_scaling(self._cluster), {
            "kind": _KINDS[type(decision)], "reason": str(decision), "target_read_nodes": decision.target_read_nodes,
            "decided_ms": wall_ms, "moves": in_flight, "releasing": self._scaling.releasing}, fence)

    # --- new moves ----------------------------------------------------------------------------

    def _plan(self, states_by_topic: StatesByTopic, live: frozenset[str], records: MoveRecords, in_flight: int,
              decision: ReadScalingDecision, fence: Fence, wall_ms: int) -> int:
        """Start the moves due now; how many were started. VPs recorded at the start of the pass
        stay busy for all of it (their states read this pass may be stale)."""
        states = {topic: [state for state, _ in by_vp.values()] for topic, by_vp in states_by_topic.items()}
        busy = frozenset(records)
        releasing = self._scaling.releasing
        if releasing is not None and releasing not in self._stopped:
            return self._release(states, live, releasing, busy, in_flight, records, decision, fence, wall_ms)
        if records:
            return 0  # one batch of balancing at a time: the next is planned on the states it left
        # A released node whose actor stopped stays registered until Ray ends it (maybe never,
        # without an autoscaler): the others balance meanwhile.
        balanced = live - {releasing}
        if not balanced:
            return 0
        hosted = hosted_replicas(states, balanced)
        emptiest = min(balanced, key=lambda node: (hosted[node], node))
        planned = plan_moves_onto(states, balanced, emptiest, busy)
        most = max(hosted.values())
        reason = (f"read node {emptiest} hosts {hosted[emptiest]} replicas of open VPs, the most loaded {most}: "
                  f"evening out")
        return self._start(moves_to_start(planned, in_flight, self._config.replica_moves_in_flight_max), reason,
                           fence, wall_ms)

    def _release(self, states: dict[str, list[VirtualPartitionState]], live: frozenset[str], node: str,
                 busy: frozenset[tuple[str, int]], in_flight: int, records: MoveRecords,
                 decision: ReadScalingDecision, fence: Fence, wall_ms: int) -> int:
        if node not in live:
            return 0  # down: the repair and the gone-node upkeep own its replicas
        leaving = any(record.move.source == node for record, _ in records.values())
        hosted = hosted_replicas(states, [node], sealed_too=True)[node]  # sealed VPs' replicas move off too
        if hosted == 0 and not leaving:
            self._nodes.stop(node)
            self._stopped.add(node)
            # Its node agent too (the keeper stops it and starts none): Ray ends no node that runs an actor.
            self._store.put_fenced(keys.released_read_node(self._cluster, node), {"released_ms": wall_ms}, fence)
            log.info("read node %s hosts no VP replica: its read node actor stopped and its node agent withheld; "
                     "Ray's autoscaler may end it", node)
            return 0
        planned = plan_moves_off(states, live, node, busy)
        for stuck in planned.stuck:
            log.warning("%s", stuck)
        reason = decision.reason if isinstance(decision, ReleaseReadNode) else f"read node {node} is being released"
        return self._start(moves_to_start(planned.moves, in_flight, self._config.replica_moves_in_flight_max), reason,
                           fence, wall_ms)

    def _start(self, moves: Iterable[ReplicaMove], reason: str, fence: Fence, wall_ms: int) -> int:
        started = 0
        for move in moves:
            record = MoveRecord(move, reason, wall_ms)
            if self._store.compare_and_swap(keys.replica_move(self._cluster, move.topic, move.vp), record.to_json(),
                                            0, fence):
                started += 1
                log.info("move %s started (%s): %s", move, move.purpose.value, reason)
        return started
