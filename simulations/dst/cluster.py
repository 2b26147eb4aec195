"""One simulated cluster from one seed: build it, run chaos, heal, drain, then judge it.

Phases: (1) chaos for ``chaos_ms``: producers write, feeders split, the group reads while
members join and leave, the nemesis injects faults, the coordinator reshards (at random and
when the group asks); (2) heal: every fault is undone; (3) drain: idle members join so that
the trunk and every lane with fallback "none" has a reader, and the run goes on until every
batch is acknowledged, every replica holds its leader's log, every committed record is fed,
every closed VP is sealed and the group has read every VP to its end (or ``drain_ms_max``
passes: the run is then reported as stuck, with what did not converge). Then the final state
is read out of the real logs and handed, with the history, to ``simulations.checkers``.
"""

from __future__ import annotations

from mafka4.batch_frame import iter_batches
from mafka4.coordinator.groups.vp_ownership import lane_fallbacks
from mafka4.log.log import Log
from mafka4.physical.replica import Role
from simulations import checkers
from simulations.checkers import Ack, Anomaly, Consumed, Commit
from simulations.dst.consumer import MemberChurn, SimConsumer
from simulations.dst.coordinator import NAME as COORDINATOR, Coordinator
from simulations.dst.env import Env
from simulations.dst.feeder import SimFeeder
from simulations.dst.group import GroupStore
from simulations.dst.nemesis import Nemesis
from simulations.dst.physical import SimReplica
from simulations.dst.producer import SimProducer
from simulations.dst.resharding import ReshardAdmin
from simulations.dst.virtual import ReadNode, VpReplica
from simulations.dst.write_node import WriteNode

DRAIN_CHECK_INTERVAL_MS = 50
READ_BYTES_MAX = 1 << 20


class Cluster:
    def __init__(self, env: Env):
        self.env = env
        options = env.options
        self.write_nodes = [WriteNode(env, f"w{i}") for i in range(options.write_nodes)]
        self.read_nodes = [ReadNode(env, f"r{i}") for i in range(options.read_nodes)]
        self.coordinator = Coordinator(env, [n.name for n in self.write_nodes], [n.name for n in self.read_nodes])
        self.coordinator.resharding = ReshardAdmin(env, self.coordinator)
        self.coordinator.group = GroupStore(env, self.coordinator)
        self.producers = [SimProducer(env, i) for i in range(options.producers)]
        self.feeders = [SimFeeder(env, p) for p in range(options.partitions)]
        self.consumers = [SimConsumer(env, i) for i in range(options.consumers_max)]
        self.nemesis = Nemesis(env, self)
        self.churn = MemberChurn(env, self.consumers)
        self.drained = False
        self.not_drained: list[str] = []
        env.network.register(COORDINATOR, self.coordinator.handle)

    def endpoints(self) -> list[str]:
        names = [n.name for n in self.write_nodes + self.read_nodes]
        names += [p.name for p in self.producers] + [f.name for f in self.feeders] + [c.name for c in self.consumers]
        return names + [COORDINATOR]

    # --- running -------------------------------------------------------------------------

    def run(self) -> None:
        env, options = self.env, self.env.options
        for process in self.write_nodes + self.read_nodes + self.feeders + self.consumers[:options.consumers]:
            process.boot()
        for producer in self.producers:
            producer.start()
        self._control()
        self.nemesis.start()
        self.churn.start()
        env.scheduler.run_until(lambda: False, options.chaos_ms, options.events_max)
        self.nemesis.heal_all()
        self._check_drained()
        deadline_ms = env.now_ms + options.drain_ms_max
        env.scheduler.run_until(lambda: self.drained, deadline_ms, options.events_max)
        if not self.drained:
            self._check_drained()

    def _control(self) -> None:
        self.coordinator.control()
        self.env.scheduler.after(self.env.jitter(self.env.options.controller_interval_ms), self._control)

    def _check_drained(self) -> None:
        self.churn.cover_lanes()  # (again each time: a member leaving when the chaos ended goes only now)
        self.not_drained = self._unconverged()
        self.drained = not self.not_drained
        if not self.drained:
            self.env.scheduler.after(DRAIN_CHECK_INTERVAL_MS, self._check_drained)

    def _unconverged(self) -> list[str]:
        """What is still moving; empty once the run is drained."""
        waiting = [f"{p.name} has {p.unanswered} unanswered messages" for p in self.producers if not p.done]
        if waiting:
            return waiting
        coordinator = self.coordinator
        for p, state in sorted(coordinator.partitions.items()):
            leader = self.physical_replica(state.leader, p)
            if leader is None or leader.state.role is not Role.LEADER or leader.state.leader_epoch != state.leader_epoch:
                return [f"p{p}: leader {state.leader} of epoch {state.leader_epoch} is not leading"]
            end = leader.log.log_end_offset
            cut_max = max(epoch.cut[p] for epoch in coordinator.layout.epochs)
            if end < cut_max:
                self.producers[0].make_filler(p)
                return [f"p{p}: log end {end} below the split cut {cut_max}: writing a filler batch"]
            for replica_id in state.replicas:
                replica = self.physical_replica(replica_id, p)
                if replica is None or replica.log.log_end_offset != end or replica.state.high_watermark != end:
                    return [f"p{p}: replica {replica_id} has not caught up with {end}"]
            if self.feeders[p].holding_back:
                return [f"p{p}: feeder holds back the parents of a reshard it has not seen settle"]
            if self.feeders[p].next_offset != end:
                return [f"p{p}: feeder at {self.feeders[p].next_offset}, HW {end}"]
            if not self.feeders[p].resumed_under(coordinator.vps):
                return [f"p{p}: feeder has not resumed since the last VP leader change"]
        group = coordinator.group
        for vp, state in sorted(coordinator.vps.items()):
            leader = self.vp_replica(state.leader, vp)
            if leader is None or not leader.core.is_leader or leader.core.leader_epoch != state.leader_epoch:
                return [f"vp{vp}: leader {state.leader} of epoch {state.leader_epoch} is not leading"]
            end = leader.core.log_end_offset
            if leader.core.high_watermark != end:
                return [f"vp{vp}: HW {leader.core.high_watermark} below its end {end}"]
            if coordinator.layout.closing_epoch(vp) is not None and vp not in coordinator.sealed_end_offsets:
                return [f"vp{vp}: closed but not sealed"]
            if group.committed.get(vp, 0) != end:
                return [f"vp{vp}: group committed {group.committed.get(vp, 0)} of {end}"]
        return []

    def physical_replica(self, node_name: str, partition: int) -> SimReplica | None:
        node = next((n for n in self.write_nodes if n.name == node_name), None)
        return node.replicas.get(partition) if node is not None and node.up else None

    def vp_replica(self, node_name: str, vp: int) -> VpReplica | None:
        node = next(n for n in self.read_nodes if n.name == node_name)
        return node.replicas.get(vp) if node.up else None

    # --- judging -------------------------------------------------------------------------

    def check(self) -> list[Anomaly]:
        """Every checker over the history and the final logs."""
        history = self.env.history
        acks = checkers.of_type(history, Ack)
        consumed = checkers.of_type(history, Consumed)
        anomalies: list[Anomaly] = []
        committed, expected_vp = {}, {}
        for p, state in sorted(self.coordinator.partitions.items()):
            leader = self.physical_replica(state.leader, p)
            if leader is None:
                continue
            committed[p], placed = checkers.committed_records(
                read_all(leader.log, leader.state.high_watermark), p, self.coordinator.layout)
            expected_vp.update(placed)
            replicas = {}
            for replica_id in state.replicas:
                replica = self.physical_replica(replica_id, p)
                if replica is not None:
                    hw = replica.state.high_watermark
                    replicas[replica_id] = (hw, read_all(replica.log, hw))
            anomalies += checkers.check_replicas_identical(replicas)
        anomalies += checkers.check_acks_in_log(acks, committed)
        anomalies += checkers.check_producer_order(history)
        vp_logs = {}
        for vp, state in sorted(self.coordinator.vps.items()):
            leader = self.vp_replica(state.leader, vp)
            if leader is None:
                continue
            vp_logs[vp] = checkers.vp_records(leader.read_all(leader.core.log_end_offset))
            replicas = {}
            for replica_id in state.replicas:
                replica = self.vp_replica(replica_id, vp)
                if replica is not None:
                    hw = replica.core.high_watermark
                    replicas[f"{replica_id}/vp{vp}"] = (hw, replica.read_all(hw))
            anomalies += checkers.check_replicas_identical(replicas)
        anomalies += checkers.check_exactly_once_in_vps(
            committed, vp_logs, lambda record, p: expected_vp[(p, record.offset)])
        anomalies += checkers.check_reads_match_logs(consumed, {f"vp{vp}": log for vp, log in vp_logs.items()})
        anomalies += checkers.check_per_key_order(consumed)
        member_lanes = {f"{c.name}.{incarnation}": frozenset(c.lanes)
                        for c in self.consumers for incarnation in range(1, c.incarnation + 1)}
        anomalies += checkers.check_lanes(consumed, member_lanes, lane_fallbacks(self.coordinator.layout))
        anomalies += checkers.check_no_duplicates_after_commit(history, "g")
        anomalies += checkers.check_commits_monotonic(history)
        anomalies += checkers.classify_reads(acks, consumed, drained=self.drained)
        return anomalies


def read_all(log: Log, end_offset: int) -> bytes:
    """The log's batches from its start up to ``end_offset`` (a batch boundary)."""
    chunks, offset = [], log.log_start_offset
    while offset < end_offset:
        data = log.read(offset, READ_BYTES_MAX, end_offset=end_offset)
        if not data:
            break
        chunks.append(data)
        for _, header in iter_batches(data, check_crc=False):
            offset = header.next_offset
    return b"".join(chunks)
