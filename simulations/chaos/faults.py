"""The nemesis of a chaos run: seeded random faults on a real cluster; the cluster repairs itself.

Faults run one after another, each drawn from one ``random.Random(seed)`` (kind, target,
how long it lasts, the pause before the next), so a seed names a sequence of faults; what
the cluster does in between is not deterministic. Kinds (``FAULT_KINDS``):

* ``kill-replica``: ``ray.kill`` of a physical replica (leader or follower). The controller
  fails the partition over and restarts the replica; nothing here helps it.
* ``kill-read-node``: ``ray.kill`` of a read node's actor, with every VP replica it hosts and
  its feed streams. The controller starts it again, fails over the VPs it led (a VP whose only
  RISR member was there leads the next epoch from that node's log once it is back) and
  announces the roles; the restarted node's followers catch up and rejoin the RISR.
* ``restart-etcd``: SIGTERM etcd (of several members, a drawn one), keep it down for a while,
  start it again on its ports and data directory (the restarted server is a child of this
  process; see ``EtcdControl``). With one member that is an outage of the metadata plane.
* ``kill-etcd-member``: SIGKILL one member of a 3-member etcd (``--etcd-members 3``), the
  leader or a follower by a coin, and start it again after a while; the two left keep a
  quorum, so nothing may stop. Skipped with one member.
* ``kill-member``: SIGKILL a consumer-group member process and start a replacement.
* ``pause-replica``: ``Admin.inject_fault(paused=True)`` on a physical or VP replica for a
  while, then clear it.
* ``sigstop-replica``, ``sigstop-read-node``, ``sigstop-controller``, ``sigstop-etcd``:
  SIGSTOP the real process (a physical replica's or a read node's actor worker, by the PID
  the actor gives; the active controller, by the PID in its key; etcd) for ``stop_s``, then
  SIGCONT it (``processes.ProcessStopper``). A stop past a lease TTL lets the cluster replace
  what froze (a controller or read node that wakes up must find out it was replaced).
* ``kill-controller``: SIGKILL the active controller. The cluster's daemon starts it again;
  the new one takes over once the old lease expired. The fault waits (bounded) until a
  controller of a newer epoch is active and says when.
* ``partition``: a network fault between nodes (``network.draw_partition``, applied with
  ``Admin.set_network_fault``) for a while, then healed.
* ``power-loss-write-node``, ``power-loss-read-node``: SIGKILL every replica actor of a write
  node, or a read node's actor, and cut their log files back to the last fsync they recorded
  (needs ``$MAFKA4_RECORD_FSYNC_POINTS=1``); ``disk-full``: ``log_dir_bytes_max=0`` on a write
  or read node for ``disk_full_s``, then cleared (``disk_faults``).

``heal`` ends the fault phase: continue every process still stopped, heal the network and
clear pauses, make sure etcd runs, and wait until a controller is active, every partition has
its full ISR, every VP its full RISR with all replicas running, and every read node runs --
all of which the controller must bring about by itself. ``undo`` does the first part only,
for a run that ends early: nothing stays stopped or cut off.
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass

import psutil
import ray

from mafka4.client.admin import Admin
from mafka4.errors import CoordinatorUnavailable, MafkaError
from mafka4.metadata import keys
from mafka4.partition_gate import CLIENT, HEALED
from mafka4.physical.handles import replica_handle
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection
from mafka4.runtime.etcd_member import EtcdServer
from mafka4.runtime.etcd_server import restart_etcd
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.vp_store import VirtualStore
from simulations.chaos.disk_faults import DiskFaults
from simulations.chaos.network import draw_partition
from simulations.chaos.processes import NotThatProcess, ProcessStopper, process_of
from simulations.chaos.settings import FaultTiming
from simulations.chaos.workload import Members

CALL_TIMEOUT_S = 30
ETCD_STOP_TIMEOUT_S = 30
ETCD_ANSWER_TIMEOUT_S = 60
HEAL_CHECK_INTERVAL_S = 0.5
CONTROLLER_BACK_TIMEOUT_S = 120  # the daemon's restart, a lease TTL, Ray's start of a new driver on a busy machine
CONTROLLER_COMMAND = "mafka4.runtime.controller_process"  # in the controller's command line


@dataclass(frozen=True, slots=True)
class FaultRecord:
    kind: str
    target: str
    at_s: float  # since the start of the run
    took_s: float  # injecting it (repairs are the cluster's, concurrent with the next faults)
    outcome: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "target": self.target, "at_s": round(self.at_s, 3), "took_s": round(self.took_s, 3),
                "outcome": self.outcome}


NOT_RUNNING = "not running (the controller is restarting it)"


class EtcdControl:
    """Stops and restarts members of the cluster's etcd; ``started`` lists the servers it started,
    which the caller stops after the cluster (the daemon only knows the members it started itself).

    With one member, stopping it is an etcd outage; with three, the two left keep a quorum.
    """

    def __init__(self, members: list[EtcdServer], started: list[EtcdServer]):
        self.members = list(members)
        self.started = started
        self.down: set[int] = set()  # indexes of members stopped and not started again

    @classmethod
    def of(cls, connection: Connection, started: list[EtcdServer]) -> "EtcdControl":
        state = connection.state
        assert state is not None, "the etcd fault needs a local cluster's record (connect(home))"
        return cls(list(state.etcd_members), started)

    @property
    def running(self) -> bool:
        return not self.down

    def index_of(self, name: str | None) -> int | None:
        """The index of the member called ``name`` (as etcd names its leader), None if none is."""
        return next((i for i, member in enumerate(self.members) if member.name == name), None)

    def stop(self, index: int = 0, sig: int = signal.SIGTERM) -> EtcdServer:
        member = self.members[index]
        try:
            os.kill(member.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + ETCD_STOP_TIMEOUT_S
        while _running(member.pid):
            assert time.monotonic() < deadline, f"etcd (pid {member.pid}) did not stop within {ETCD_STOP_TIMEOUT_S} s"
            time.sleep(0.05)
        self.down.add(index)
        return member

    def start(self, index: int = 0) -> EtcdServer:
        self.members[index] = restart_etcd(self.members[index])
        self.started.append(self.members[index])
        self.down.discard(index)
        return self.members[index]

    def start_all(self) -> None:
        for index in sorted(self.down):
            self.start(index)


def _running(pid: int) -> bool:
    """False once ``pid`` exited; a zombie counts as exited (and is reaped if it is our child)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass  # the daemon's child, not ours: the daemon reaps it
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class Nemesis:
    def __init__(self, connection: Connection, topic: str, rng: random.Random, members: Members,
                 etcd: EtcdControl | None, timing: FaultTiming, run_started: float):
        self._connection, self._topic, self._rng = connection, topic, rng
        self._members, self._etcd, self._timing = members, etcd, timing
        self._run_started = run_started
        self._admin = Admin(connection)
        self._topics = TopicStore(connection.store, connection.cluster)
        self._virtual = VirtualStore(connection.store, connection.cluster)
        self._paused: set[tuple[str, int, str]] = set()
        self._stopper = ProcessStopper()
        self._partitioned = False  # a network fault may be set somewhere
        self._disks = DiskFaults(connection.cluster, topic, self._topics, self._virtual, rng, timing)
        self.faults: list[FaultRecord] = []

    @property
    def _cluster(self) -> str:
        return self._connection.cluster

    def run(self, duration_s: float, kinds: tuple[str, ...]) -> list[FaultRecord]:
        """Inject faults of ``kinds`` one after another for ``duration_s``."""
        actions = {"kill-replica": self._kill_replica, "kill-read-node": self._kill_read_node,
                   "restart-etcd": self._restart_etcd,
                   "kill-member": self._kill_member, "pause-replica": self._pause_replica,
                   "sigstop-replica": self._sigstop_replica, "sigstop-read-node": self._sigstop_read_node,
                   "sigstop-controller": self._sigstop_controller, "sigstop-etcd": self._sigstop_etcd,
                   "kill-controller": self._kill_controller, "partition": self._partition,
                   "power-loss-write-node": self._disks.power_loss_write_node,
                   "power-loss-read-node": self._disks.power_loss_read_node, "disk-full": self._disks.disk_full,
                   "kill-etcd-member": self._kill_etcd_member}
        ends = time.monotonic() + duration_s
        while time.monotonic() + self._timing.gap_s[0] < ends:
            time.sleep(self._rng.uniform(*self._timing.gap_s))
            kind = self._rng.choice(kinds)
            began = time.monotonic()
            try:
                target, outcome = actions[kind]()
            except (MafkaError, ray.exceptions.RayError, TimeoutError, psutil.Error, NotThatProcess) as error:
                # A fault that could not be carried out (etcd slow after a restart, a replica
                # the controller is restarting, a process that exited) is recorded and the run goes on.
                target, outcome = "?", f"not injected: {type(error).__name__}: {error}"
            self.faults.append(FaultRecord(kind, target, began - self._run_started, time.monotonic() - began, outcome))
        return self.faults

    # --- faults ---------------------------------------------------------------------------

    def _drawn_replica(self):
        """A drawn physical replica: (its partition's state, replica id, target name, handle or None)."""
        state = self._rng.choice(self._topics.get(self._topic).partitions)
        replica = self._rng.choice(state.replicas)
        handle = replica_handle(self._cluster, self._topic, state.partition, replica)
        return state, replica, f"p{state.partition}/{replica}", handle

    def _kill_replica(self) -> tuple[str, str]:
        state, replica, target, handle = self._drawn_replica()
        if handle is None:
            return target, NOT_RUNNING
        ray.kill(handle)
        return target, "killed the leader" if replica == state.leader else "killed a follower"

    def _kill_read_node(self) -> tuple[str, str]:
        states = [state for state, _ in self._virtual.states(self._topic).values() if not state.retired]
        node = self._rng.choice(sorted({replica for state in states for replica in state.replicas}))
        handle = read_node_handle(self._cluster, node)
        if handle is None:
            return node, NOT_RUNNING
        ray.kill(handle)
        led = sorted(state.vp for state in states if state.leader == node)
        alone = sorted(state.vp for state in states if state.leader == node and len(state.risr) < 2)
        return node, (f"killed, leading VPs {led}" + (f" (the only RISR member of {alone}: they lead again from its log "
                                                      f"once it is back)" if alone else ""))

    def _restart_etcd(self) -> tuple[str, str]:
        if self._etcd is None:
            return "etcd", "skipped: the driver joined through environment variables and cannot restart etcd"
        index = self._rng.randrange(len(self._etcd.members))
        return self._etcd_member_down(index, signal.SIGTERM, "restarted")

    def _kill_etcd_member(self) -> tuple[str, str]:
        if self._etcd is None:
            return "etcd", "skipped: the driver joined through environment variables and knows no etcd process"
        if len(self._etcd.members) < 3:
            return "etcd", "skipped: a one-member etcd cannot lose a member (run with --etcd-members 3)"
        leader = self._etcd.index_of(self._connection.store.leader_name())
        if leader is not None and self._rng.random() < 0.5:
            index, which = leader, "the leader"
        else:
            index, which = self._rng.choice([i for i in range(len(self._etcd.members)) if i != leader]), "a follower"
        target, outcome = self._etcd_member_down(index, signal.SIGKILL, "started again")
        return target, f"{which}: {outcome}"

    def _etcd_member_down(self, index: int, sig: int, back: str) -> tuple[str, str]:
        """Stop member ``index`` with ``sig``, keep it down for a drawn while, start it again."""
        down_s = self._rng.uniform(*self._timing.etcd_down_s)
        member = self._etcd.stop(index, sig)
        time.sleep(down_s)
        member = self._etcd.start(index)
        restarted = time.monotonic()
        # As an operator would: the next fault waits until this cluster's clients reach etcd again.
        _wait(self._etcd_answers, ETCD_ANSWER_TIMEOUT_S, "etcd to answer after its restart")
        return (f"etcd {member.name or ''} :{member.client_port}".replace("  ", " "),
                f"down {down_s:.1f} s, {back} (pid {member.pid}), answering {time.monotonic() - restarted:.1f} s later")

    def _etcd_answers(self) -> bool:
        try:
            self._connection.store.get(keys.cluster_config(self._cluster))
        except CoordinatorUnavailable:
            return False
        return True

    def _kill_member(self) -> tuple[str, str]:
        running = self._members.running
        if not running:
            return "member", "none running"
        victim = self._rng.choice(running)
        victim.kill()
        replacement = self._members.start()
        return victim.name, f"SIGKILLed; {replacement.name} started in its place"

    def _pause_replica(self) -> tuple[str, str]:
        if self._rng.random() < 0.5:
            kind, state = "physical", self._rng.choice(self._topics.get(self._topic).partitions)
            partition, role = state.partition, "p"
        else:
            kind, role = "virtual", "v"
            partition = self._rng.choice(sorted(self._virtual.states(self._topic)))
            state, _ = self._virtual.state(self._topic, partition)
        replica = self._rng.choice(state.replicas)
        hold_s = self._rng.uniform(*self._timing.pause_s)
        target = (kind, partition, replica)
        self._admin.inject_fault(self._topic, kind=kind, partition=partition, replica=replica, paused=True)
        self._paused.add(target)
        time.sleep(hold_s)
        self._admin.inject_fault(self._topic, kind=kind, partition=partition, replica=replica, paused=False)
        self._paused.discard(target)
        what = "leader" if replica == state.leader else "follower"
        return f"{role}{partition}/{replica}", f"paused the {what} for {hold_s:.1f} s"

    # --- stopped processes, controller kills, partitions -----------------------------------

    def _hold_stopped(self, pid: int, what: str, command_has: str | None = None) -> str:
        """SIGSTOP ``pid`` for a drawn while and SIGCONT it, also when interrupted meanwhile."""
        hold_s = self._rng.uniform(*self._timing.stop_s)
        process = self._stopper.stop(pid, what, command_has)
        try:
            time.sleep(hold_s)
        finally:
            continued = self._stopper.resume(process)
        return f"stopped pid {pid} for {hold_s:.1f} s" + ("" if continued else " (gone when continued: replaced)")

    def _sigstop_replica(self) -> tuple[str, str]:
        state, replica, target, handle = self._drawn_replica()
        if handle is None:
            return target, NOT_RUNNING
        pid = ray.get(handle.describe.remote(), timeout=CALL_TIMEOUT_S)["pid"]
        return target, f"{self._hold_stopped(pid, target)}: the {'leader' if replica == state.leader else 'follower'}"

    def _sigstop_read_node(self) -> tuple[str, str]:
        states = [state for state, _ in self._virtual.states(self._topic).values() if not state.retired]
        node = self._rng.choice(sorted({replica for state in states for replica in state.replicas}))
        handle = read_node_handle(self._cluster, node)
        if handle is None:
            return node, NOT_RUNNING
        pid = ray.get(handle.describe.remote(self._topic), timeout=CALL_TIMEOUT_S)["pid"]
        led = sorted(state.vp for state in states if state.leader == node)
        return node, f"{self._hold_stopped(pid, f'read node {node}')}, leading VPs {led}"

    def _active_controller(self) -> dict | None:
        """The controller key's value ({controller_id, controller_epoch, pid}), None while none is active."""
        found = self._connection.store.get(keys.controller(self._cluster))
        return None if found is None else found.value

    def _sigstop_controller(self) -> tuple[str, str]:
        active = self._active_controller()
        if active is None:
            return "controller", "none active"
        target = f"controller epoch {active['controller_epoch']}"
        if "pid" not in active:
            return target, "not injected: the controller key names no pid (a controller older than this run's code)"
        return target, self._hold_stopped(active["pid"], "the controller", CONTROLLER_COMMAND)

    def _sigstop_etcd(self) -> tuple[str, str]:
        if self._etcd is None:
            return "etcd", "skipped: the driver joined through environment variables and knows no etcd process"
        server = self._rng.choice(self._etcd.members)
        return f"etcd {server.name or ''} :{server.client_port}".replace("  ", " "), \
            self._hold_stopped(server.pid, "etcd", "etcd")

    def _kill_controller(self) -> tuple[str, str]:
        active = self._active_controller()
        if active is None:
            return "controller", "none active"
        epoch, pid = active["controller_epoch"], active.get("pid")
        target = f"controller epoch {epoch}"
        if pid is None:
            return target, "not injected: the controller key names no pid (a controller older than this run's code)"
        process_of(pid, CONTROLLER_COMMAND).kill()  # SIGKILL: no resignation, its lease must expire
        killed = time.monotonic()
        try:
            _wait(lambda: self._controller_after(epoch), CONTROLLER_BACK_TIMEOUT_S, "a controller of a newer epoch")
        except TimeoutError:
            return target, f"SIGKILLed pid {pid}; no controller active within {CONTROLLER_BACK_TIMEOUT_S} s"
        now = self._active_controller() or {}
        return target, (f"SIGKILLed pid {pid}; epoch {now.get('controller_epoch')} active "
                        f"{time.monotonic() - killed:.1f} s later (pid {now.get('pid')})")

    def _controller_after(self, epoch: int) -> bool:
        try:
            active = self._active_controller()
        except CoordinatorUnavailable:
            return False
        return active is not None and active["controller_epoch"] > epoch

    def _partition(self) -> tuple[str, str]:
        write_nodes = {replica for state in self._topics.get(self._topic).partitions for replica in state.replicas}
        read_nodes = {replica for state, _ in self._virtual.states(self._topic).values() if not state.retired
                      for replica in state.replicas}
        plan = draw_partition(self._rng, write_nodes | read_nodes | {CLIENT}, self._timing)
        self._partitioned = True
        fault = plan.fault(self._timing.lost_call_ms)
        try:
            self._members.fault_file.write(fault)  # the members' consumers are clients too
            reached = self._admin.set_network_fault(self._topic, fault)
            time.sleep(plan.hold_s)
        finally:
            self._heal_network()
        missed = sorted(name for name, outcome in reached.items() if outcome != "set")
        return plan.isolated, plan.describe() + (f"; not set on {missed}" if missed else "")

    def _heal_network(self) -> None:
        """Clear the network fault everywhere it may be set; it stays marked until every actor answered."""
        if self._partitioned:
            self._members.fault_file.write(HEALED)
            healed = self._admin.set_network_fault(self._topic, HEALED)
            self._partitioned = any(outcome not in ("set", "not running") for outcome in healed.values())

    def undo(self) -> list[str]:
        """Continue every stopped process and heal the network (best effort; for a run that ends early)."""
        undone = [f"continued {what}" for what in self._stopper.resume_all()]
        try:
            self._heal_network()
        except (MafkaError, ray.exceptions.RayError, TimeoutError) as error:
            undone.append(f"network not healed: {type(error).__name__}: {error}")
        try:
            self._disks.clear_all()
        except (MafkaError, ray.exceptions.RayError, TimeoutError) as error:
            undone.append(f"disk bounds not cleared on {self._disks.full}: {type(error).__name__}: {error}")
        return undone

    # --- healing --------------------------------------------------------------------------

    def heal(self, timeout_s: float) -> dict:
        """Undo what faults left behind and wait until the cluster is whole again; see the module doc."""
        began = time.monotonic()
        deadline = began + timeout_s
        self._stopper.resume_all()
        if self._etcd is not None:
            self._etcd.start_all()
        problems: list[str] = ["not checked"]
        while time.monotonic() < deadline:
            try:
                self._heal_network()
                self._clear_pauses()
                self._disks.clear_all()
                problems = self._unhealthy()
            except (MafkaError, ray.exceptions.RayError, TimeoutError) as error:
                problems = [f"{type(error).__name__}: {error}"]
            if not problems:
                break
            time.sleep(HEAL_CHECK_INTERVAL_S)
        return {"healed": not problems, "took_s": round(time.monotonic() - began, 3), "unhealthy": problems}

    def _clear_pauses(self) -> None:
        for kind, partition, replica in sorted(self._paused):
            self._admin.inject_fault(self._topic, kind=kind, partition=partition, replica=replica, paused=False)
            self._paused.discard((kind, partition, replica))

    def _unhealthy(self) -> list[str]:
        problems = [] if self._active_controller() is not None else ["no active controller"]
        if self._partitioned:
            problems.append("a network fault is still set on some actor")
        problems += [f"{node}: log_dir_bytes_max still set" for node in self._disks.full]
        for state in self._topics.get(self._topic).partitions:
            if set(state.isr) != set(state.replicas):
                problems.append(f"p{state.partition}: ISR {sorted(state.isr)} of {sorted(state.replicas)}")
            if replica_handle(self._cluster, self._topic, state.partition, state.leader) is None:
                problems.append(f"p{state.partition}: leader {state.leader} not running")
        nodes = set()
        for vp, (state, _) in sorted(self._virtual.states(self._topic).items()):
            if state.retired:
                continue
            if set(state.risr) != set(state.replicas):
                problems.append(f"v{vp}: RISR {sorted(state.risr)} of {sorted(state.replicas)}")
            nodes |= set(state.replicas)
        for node in sorted(nodes):
            if read_node_handle(self._cluster, node) is None:
                problems.append(f"read node {node} not running")
        return problems


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s} s for {what}")
        time.sleep(0.05)

