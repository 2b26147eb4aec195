"""The simulated coordinator: etcd's state and the controller, at one endpoint ("ctl").

It holds what etcd holds (partition states, the split epochs, VP states, sealed end
offsets, liveness) and never fails: etcd outages are out of scope, a node cut from "ctl"
is what the simulator uses instead. On top, the controller's loop runs every
``controller_interval_ms`` and takes its decisions from the real cores:

* physical partitions: ``partition_decisions.decide_partition`` with the live replicas (a heartbeat
  listing the partition within ``lease_ttl_ms``), the registered write nodes and the
  *fresh* replicas (started by the controller and not yet confirmed in a role, or leaders
  that refused an epoch they already knew, as ``PartitionRepairs.handle_partition`` does);
  restarts and replacements are ``StartReplica``/``StopReplica`` messages; roles are
  announced until each live replica confirmed the current epoch;
* VPs: the production controller's rule, ``read_path_decisions.decide_virtual_partition`` and then
  ``failover.decide_failover(state, alive, restarted)``. A VP replica is *alive* while its
  read node is (a read node starts its replicas on the first role notice, from its disk), and
  *restarted* while its node came back with a new incarnation and the replica has not yet
  confirmed a role of the current epoch (the controller restarted it and has not told it its
  role, in production terms). The leader stays while alive and not restarted; otherwise a
  live, not-restarted RISR member leads the next epoch, else a restarted RISR member (the old
  leader included) leads it from its own log; with no live RISR member the VP is leaderless
  until a RISR member's node is back (the production controller would restart the replica on
  its registered node first; here the node's return is that restart). The replica picked to
  lead is told its new epoch at once, so it is no longer restarted;
* ISR and RISR compare-and-swaps (``IsrWrite``; an ISR write also sets the ELR it implies,
  ``PartitionState.with_isr``, as the actor's CAS does): written only while the state names the
  writer as leader of that epoch, and only if no later write of the partition was applied
  (the real leader's CAS on the key's revision refuses a request that was overtaken; this
  network may deliver a request late or twice);
* metadata reads for clients (``MetadataRequest``);
* opening lanes (``OpenLane``, the controller's part of ``client.topic_admin.open_lane``): a lane
  already open answers its id; a new one gets ``TopicLayout.plan_open_lane``'s epoch with its
  ``LanePolicy`` (the fallback the producer names: in production, whoever opens it sets it),
  appended at once with its VP opened, as a reshard's children are. A refused opening (no room
  for one more VP) answers no id and the producer asks again later.

Resharding and sealing live in ``resharding.py``, the consumer group's keys in ``group.py``;
both are driven from this loop and answer their own messages.

Coverage counters: ``elections_total`` and ``vp_failovers_total`` count every new leader
epoch, start-up ones included; ``elections_after_fault`` and ``vp_failovers_after_fault``
count only those that follow a fault (``coverage.FaultLedger``), and so do the counters of
the VP failover paths (``vp_restarted_leader_failovers``, ``vp_leaders_from_restarted``,
``vp_restarted_followers_left_risr``): at start-up every read node's replicas are
"restarted" (a first incarnation), so those paths are taken by every seed, faults or not.
"""

from __future__ import annotations

import dataclasses

from mafka4.coordinator.control.partition_decisions import decide_partition
from mafka4.coordinator.control.placement import assign_replicas
from mafka4.coordinator.control.read_path_decisions import decide_virtual_partition
from mafka4.errors import StaleEpoch
from mafka4.limits import TopicConfig, VirtualConfig
from mafka4.physical.partition_state import PartitionState
from mafka4.virtual.failover import decide_failover
from mafka4.errors import MafkaError
from mafka4.virtual.layout import LanePolicy, TopicLayout
from mafka4.virtual.vp_state import VirtualPartitionState
from simulations.dst import messages as m
from simulations.dst.coverage import Cause
from simulations.dst.env import Env

NAME = "ctl"


class Coordinator:
    def __init__(self, env: Env, write_nodes: list[str], read_nodes: list[str]):
        self.env = env
        options = env.options
        self.write_nodes = write_nodes
        self.read_nodes = read_nodes
        self._node_names = frozenset(write_nodes) | frozenset(read_nodes)
        self.topic_config = TopicConfig(
            partitions=options.partitions, replication_factor=options.replication_factor,
            min_insync_replicas=options.replica_config.min_insync_replicas,
        )
        assignment = assign_replicas(options.partitions, options.replication_factor, write_nodes)
        self.partitions = {
            p: PartitionState(p, replicas[0], 0, tuple(replicas), tuple(replicas))
            for p, replicas in enumerate(assignment)
        }
        for p in self.partitions:
            env.fault_ledger.opened(("p", p))
        self.layout = TopicLayout.initial(options.partitions, options.virtual_partitions,
                                          VirtualConfig(virtual_partitions_max=options.virtual_partitions_max))
        self.vps: dict[int, VirtualPartitionState] = {}
        self._vp_fresh: dict[int, set[str]] = {}
        self._vp_confirmed: dict[int, set[str]] = {}
        for hash_range, vp in self.layout.current.ranges.items():
            self.open_vp(vp, hash_range)
        self.sealed_end_offsets: dict[int, int] = {}
        self.reshard_pending: int | None = None
        self.reshard_parents: tuple[int, ...] = ()
        self._isr_writes_applied: dict[tuple[bool, int], int] = {}  # (virtual, partition) -> request id
        self._seen: dict[str, tuple[int, int, tuple[int, ...]]] = {}  # node -> (last heartbeat, incarnation, running)
        self._fresh: dict[int, set[str]] = {p: set() for p in self.partitions}
        self._refused: dict[int, set[str]] = {p: set() for p in self.partitions}
        self._confirmed: dict[int, set[str]] = {p: set() for p in self.partitions}
        # (virtual, partition or VP, replica) -> the role notices sent since that replica's process
        # last (re)started: only their answers count, so an answer of a process that died since
        # (still in flight) cannot confirm its successor.
        self._notices: dict[tuple[bool, int, str], set[int]] = {}
        self._offline_noted: set[int] = set()
        self.elections_total = 0
        self.vp_failovers_total = 0
        # (read node, vp) -> the VP log's end offset its last heartbeat reported (restarted replicas:
        # what they recovered), for the longest-log rule of ``decide_failover``.
        self._vp_log_ends: dict[tuple[str, int], int] = {}
        self.resharding = None  # set by the run: a resharding.ReshardAdmin
        self.group = None  # set by the run: a group.GroupStore

    # --- etcd-like state -----------------------------------------------------------------

    def open_vp(self, vp: int, hash_range) -> None:
        """Record a new VP (at creation or by a split epoch) with its read replicas."""
        options = self.env.options
        nodes = assign_replicas(1, options.read_replicas, self.read_nodes, start=vp)[0]
        self.vps[vp] = VirtualPartitionState(vp, hash_range, nodes[0], 0, tuple(nodes), tuple(nodes))
        self.env.fault_ledger.opened(("vp", vp))
        self._vp_fresh[vp] = set()
        self._vp_confirmed[vp] = set()

    def metadata(self, request_id: int) -> m.Metadata:
        return m.Metadata(
            request_id, tuple(self.partitions[p] for p in sorted(self.partitions)), self.layout,
            tuple(self.vps[vp] for vp in sorted(self.vps)), tuple(sorted(self.sealed_end_offsets.items())),
            self.reshard_pending, self.reshard_parents,
        )

    def is_live(self, node: str) -> bool:
        seen = self._seen.get(node)
        return seen is not None and self.env.now_ms - seen[0] <= self.env.options.lease_ttl_ms

    def answering(self, node: str) -> bool:
        """Whether ``node`` would answer a call now: it heartbeated within two heartbeat intervals.

        The real controller asks every live read node which roles it holds before it decides for
        a VP, and leaves the VP for later when a node whose lease still runs does not answer
        (``ReadPathControl.handle_vps``): a crashed node must not be elected while its lease runs.
        """
        seen = self._seen.get(node)
        return seen is not None and self.env.now_ms - seen[0] <= 2 * self.env.options.heartbeat_interval_ms

    def running(self, node: str) -> tuple[int, ...]:
        return self._seen[node][2] if self.is_live(node) else ()

    def _live_replicas(self, partition: int) -> set[str]:
        return {r for r in self.partitions[partition].replicas if partition in self.running(r)}

    def _live_vp_replicas(self, vp: int) -> set[str]:
        # A read node starts a VP replica on its first role notice: a live node is a live replica.
        return {r for r in self.vps[vp].replicas if self.is_live(r)}

    # --- messages ------------------------------------------------------------------------

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, m.Heartbeat) and message.node in self._node_names:
            self._on_heartbeat(message)
        elif isinstance(message, m.IsrWrite):
            self.env.network.send(NAME, source, m.IsrWriteResult(message.request_id, self._on_isr_write(message)))
        elif isinstance(message, m.MetadataRequest):
            if message.fence_partition is not None:
                self.resharding.fence(message.fence_partition, message.incarnation)
            self.env.network.send(NAME, source, self.metadata(message.request_id))
        elif isinstance(message, m.RoleResult):
            self._on_role_result(message)
        elif isinstance(message, m.OpenLane):
            lane_id = self._open_lane(message)
            self.env.network.send(NAME, source, m.LaneOpened(message.request_id, message.lane, lane_id))
        elif isinstance(message, (m.PauseAck, m.VpSealAnswer, m.SplitRequest)):
            self.resharding.handle(source, message)
        else:
            self.group.handle(source, message)

    def _open_lane(self, message: m.OpenLane) -> int | None:
        lane_id = self.layout.current.lane_id(message.lane)
        if lane_id is not None:
            return lane_id
        try:
            epoch = self.layout.plan_open_lane(message.lane, LanePolicy(message.fallback))
        except MafkaError as error:
            self.env.note(f"ctl: lane {message.lane!r} not opened: {error}")
            return None
        self.layout = self.layout.append(epoch)
        for vp in epoch.children:
            self.open_vp(vp, epoch.range_of(vp))
        self.env.count("lanes_opened")
        self.env.note(f"ctl: lane {message.lane!r} opened (fallback {message.fallback}), split epoch {epoch.epoch}: "
                      f"vp{epoch.children[0]}")
        return epoch.lane_id(message.lane)

    def _on_heartbeat(self, message: m.Heartbeat) -> None:
        previous = self._seen.get(message.node)
        self._seen[message.node] = (self.env.now_ms, message.incarnation, message.running)
        for vp, log_end_offset in message.log_ends:
            self._vp_log_ends[(message.node, vp)] = log_end_offset
        if message.node in self.read_nodes and (previous is None or previous[1] != message.incarnation):
            for vp, state in self.vps.items():  # its VP replicas restarted: tell them their roles again
                if message.node in state.replicas:
                    self._vp_fresh[vp].add(message.node)
                    self._vp_confirmed[vp].discard(message.node)
                    self._notices.pop((True, vp, message.node), None)

    def _on_isr_write(self, message: m.IsrWrite) -> bool:
        """Apply a leader's ISR (RISR) write once, in request order; a copy of an applied one succeeds again."""
        last = self._isr_writes_applied.get((message.virtual, message.partition), 0)
        if message.request_id <= last:
            return message.request_id == last
        written = self._vp_risr_write(message) if message.virtual else self._isr_write(message)
        if written:
            self._isr_writes_applied[(message.virtual, message.partition)] = message.request_id
        return written

    def _isr_write(self, message: m.IsrWrite) -> bool:
        state = self.partitions[message.partition]
        if state.leader != message.replica_id or state.leader_epoch != message.leader_epoch:
            return False
        self.partitions[message.partition] = state.with_isr(message.isr, self.topic_config.min_insync_replicas)
        return True

    def _vp_risr_write(self, message: m.IsrWrite) -> bool:
        state = self.vps[message.partition]
        if state.leader != message.replica_id or state.leader_epoch != message.leader_epoch:
            return False
        if set(message.isr) != set(state.risr):
            self.env.note(f"ctl: vp{message.partition} risr {list(message.isr)} (written by {message.replica_id})")
        self.vps[message.partition] = dataclasses.replace(state, risr=tuple(message.isr))
        return True

    def _notice(self, partition: int, replica_id: str, virtual: bool) -> int:
        request_id = self.env.request_id()
        self._notices.setdefault((virtual, partition, replica_id), set()).add(request_id)
        return request_id

    def _on_role_result(self, message: m.RoleResult) -> None:
        if message.request_id not in self._notices.get((message.virtual, message.partition, message.replica_id), ()):
            return  # an answer to a notice sent to a process that died since
        if message.virtual:
            vp = message.partition
            if message.failure is None and message.leader_epoch == self.vps[vp].leader_epoch:
                self._vp_confirmed[vp].add(message.replica_id)
                self._vp_fresh[vp].discard(message.replica_id)
                if message.replica_id == self.vps[vp].leader:
                    self.env.fault_ledger.took_office(("vp", vp))
            return
        state = self.partitions[message.partition]
        if message.leader_epoch != state.leader_epoch:
            return
        if message.failure is None:
            self._confirmed[message.partition].add(message.replica_id)
            self._fresh[message.partition].discard(message.replica_id)
            if message.replica_id == state.leader:
                self.env.fault_ledger.took_office(("p", message.partition))
        elif message.failure.error == StaleEpoch.__name__ and message.replica_id == state.leader:
            self._refused[message.partition].add(message.replica_id)

    # --- the controller's loop -----------------------------------------------------------

    def control(self) -> None:
        for partition in sorted(self.partitions):
            self._control_partition(partition)
        for vp in sorted(self.vps):
            self._control_vp(vp)
        self.resharding.step()
        self.group.step()

    def _start(self, partition: int, replica_id: str) -> None:
        self._fresh[partition].add(replica_id)
        self._confirmed[partition].discard(replica_id)
        self._notices.pop((False, partition, replica_id), None)
        self.env.network.send(NAME, replica_id, m.StartReplica(partition))

    def _control_partition(self, partition: int) -> None:
        state = self.partitions[partition]
        live = self._live_replicas(partition)
        registered = sorted(node for node in self.write_nodes if self.is_live(node))
        fresh = frozenset((self._fresh[partition] | self._refused[partition]) & live)
        decision = decide_partition(state, live, registered, self.topic_config, fresh)
        if decision.offline and decision.changed:  # restarted replicas leave the ELR before they run again
            self.partitions[partition] = decision.state
            self._confirmed[partition].clear()
            self.env.note(f"ctl: p{partition} offline, epoch {decision.state.leader_epoch} elr {list(decision.state.elr)}")
        for replica_id in decision.restart:
            if replica_id not in live:
                self._start(partition, replica_id)
        if decision.offline:
            if partition not in self._offline_noted:
                self._offline_noted.add(partition)
                self.env.note(f"ctl: p{partition} offline: {decision.warning}")
            return
        self._offline_noted.discard(partition)
        if decision.changed:
            cause = self.env.fault_ledger.election(("p", partition), state.replicas)
            self.partitions[partition] = state = decision.state
            self.elections_total += 1
            if cause is Cause.AFTER_FAULT:
                self.env.count("elections_after_fault")
            self._refused[partition].clear()
            self._fresh[partition].discard(state.leader)  # its new epoch is what it is told now
            self._confirmed[partition].clear()
            self.env.note(f"ctl: p{partition} leader {state.leader} epoch {state.leader_epoch} "
                          f"replicas {list(state.replicas)} isr {list(state.isr)} elr {list(state.elr)} "
                          f"(live {sorted(live)}, fresh {sorted(fresh)}; {cause.value})")
            for replica_id in decision.remove:
                self.env.network.send(NAME, replica_id, m.StopReplica(partition))
            for replica_id in decision.add:
                self._start(partition, replica_id)
        self._announce(partition, live)

    def _announce(self, partition: int, live: set[str]) -> None:
        state = self.partitions[partition]
        for replica_id in sorted(live - self._confirmed[partition]):
            if replica_id == state.leader:
                message = m.BecomeLeader(self._notice(partition, replica_id, False), partition, state.leader_epoch,
                                         state.replicas, state.isr)
            else:
                message = m.BecomeFollower(self._notice(partition, replica_id, False), partition, state.leader_epoch,
                                           state.leader)
            self.env.network.send(NAME, replica_id, message)

    def _control_vp(self, vp: int) -> None:
        state = self.vps[vp]
        alive = self._live_vp_replicas(vp)
        if any(not self.answering(replica) for replica in alive):
            return  # alive by its lease but silent: decide once it answers or its lease ran out
        restarted = frozenset(self._vp_fresh[vp] & alive)
        live_nodes = [node for node in self.read_nodes if self.is_live(node)]
        repair = decide_virtual_partition(state, alive, live_nodes, restarted)
        if repair.leaderless:
            return  # no live RISR member: consumers of this VP wait for one's node to come back
        if repair.failover or restarted & set(state.risr):
            log_ends = {r: self._vp_log_ends[(r, vp)] for r in restarted if (r, vp) in self._vp_log_ends}
            decided = decide_failover(state, alive, restarted, log_ends)
            if decided is None:
                return  # only restarted RISR members are live: wait for the others (one may hold the longest log)
            assert decided is state or decided.leader_epoch == state.leader_epoch + 1, (state, decided)
            if decided is not state:
                cause = self.env.fault_ledger.election(("vp", vp), state.replicas)
                if cause is Cause.AFTER_FAULT:
                    self.env.count("vp_failovers_after_fault")
                    if state.leader in restarted:
                        self.env.count("vp_restarted_leader_failovers")
                    if decided.leader in restarted:
                        self.env.count("vp_leaders_from_restarted")
                    if decided.leader == state.leader and state.leader not in restarted:
                        self.env.count("vp_restarted_followers_left_risr")
                self._vp_fresh[vp].discard(decided.leader)  # its new epoch is what it is told now
                self.vps[vp] = state = decided
                self.vp_failovers_total += 1
                self._vp_confirmed[vp].clear()
                self.env.note(f"ctl: vp{vp} leader {state.leader} epoch {state.leader_epoch} risr {list(state.risr)} "
                              f"(alive {sorted(alive)}, restarted {sorted(restarted)}; {cause.value})")
        for replica_id in sorted(alive - self._vp_confirmed[vp]):
            if replica_id == state.leader:
                message = m.VpBecomeLeader(self._notice(vp, replica_id, True), vp, state.leader_epoch, state.replicas,
                                           state.risr)
            else:
                message = m.VpBecomeFollower(self._notice(vp, replica_id, True), vp, state.leader_epoch, state.leader)
            self.env.network.send(NAME, replica_id, message)
