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
* ``restart-etcd``: SIGTERM etcd, keep it down for a while, start it again on its port and
  data directory (the restarted server is a child of this process; see ``EtcdControl``).
* ``kill-member``: SIGKILL a consumer-group member process and start a replacement.
* ``pause-replica``: ``Admin.inject_fault(paused=True)`` on a physical or VP replica for a
  while, then clear it.

``heal`` ends the fault phase: clear pauses, make sure etcd runs, and wait until every
partition has its full ISR, every VP its full RISR with all replicas running, and every
read node runs -- all of which the controller must bring about by itself.
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
from mafka4.coordinator.metadata import keys
from mafka4.coordinator.metadata.topics import TopicStore
from mafka4.coordinator.metadata.vp_store import VirtualStore
from mafka4.errors import CoordinatorUnavailable, MafkaError
from mafka4.physical.handles import replica_handle
from mafka4.runtime.connect import Connection
from mafka4.runtime.etcd_server import EtcdServer, restart_etcd
from mafka4.virtual.handles import read_node_handle
from simulations.chaos.settings import FaultTiming
from simulations.chaos.workload import Members

CALL_TIMEOUT_S = 30
ETCD_STOP_TIMEOUT_S = 30
ETCD_ANSWER_TIMEOUT_S = 60
HEAL_CHECK_INTERVAL_S = 0.5


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


class EtcdControl:
    """Stops and restarts the cluster's etcd; ``started`` lists the servers it started, which the
    caller stops after the cluster (the daemon only knows the etcd it started itself)."""

    def __init__(self, server: EtcdServer, started: list[EtcdServer]):
        self.server = server
        self.started = started
        self.running = True

    @classmethod
    def of(cls, connection: Connection, started: list[EtcdServer]) -> "EtcdControl":
        state = connection.state
        assert state is not None, "the etcd fault needs a local cluster's record (connect(home))"
        return cls(EtcdServer(state.etcd_pid, int(state.etcd_endpoint.rpartition(":")[2]),
                              os.path.join(state.home, "etcd"), os.path.join(state.home, "etcd.log")), started)

    def stop(self) -> None:
        pid = self.server.pid
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + ETCD_STOP_TIMEOUT_S
        while _running(pid):
            assert time.monotonic() < deadline, f"etcd (pid {pid}) did not stop within {ETCD_STOP_TIMEOUT_S} s"
            time.sleep(0.05)
        self.running = False

    def start(self) -> None:
        self.server = restart_etcd(self.server)
        self.started.append(self.server)
        self.running = True


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
        self.faults: list[FaultRecord] = []

    @property
    def _cluster(self) -> str:
        return self._connection.cluster

    def run(self, duration_s: float, kinds: tuple[str, ...]) -> list[FaultRecord]:
        """Inject faults of ``kinds`` one after another for ``duration_s``."""
        actions = {"kill-replica": self._kill_replica, "kill-read-node": self._kill_read_node,
                   "restart-etcd": self._restart_etcd,
                   "kill-member": self._kill_member, "pause-replica": self._pause_replica}
        ends = time.monotonic() + duration_s
        while time.monotonic() + self._timing.gap_s[0] < ends:
            time.sleep(self._rng.uniform(*self._timing.gap_s))
            kind = self._rng.choice(kinds)
            began = time.monotonic()
            try:
                target, outcome = actions[kind]()
            except (MafkaError, ray.exceptions.RayError, TimeoutError) as error:
                # A fault that could not be carried out (etcd slow after a restart, a replica
                # the controller is restarting) is recorded and the run goes on.
                target, outcome = "?", f"not injected: {type(error).__name__}: {error}"
            self.faults.append(FaultRecord(kind, target, began - self._run_started, time.monotonic() - began, outcome))
        return self.faults

    # --- faults ---------------------------------------------------------------------------

    def _kill_replica(self) -> tuple[str, str]:
        state = self._rng.choice(self._topics.get(self._topic).partitions)
        replica = self._rng.choice(state.replicas)
        target = f"p{state.partition}/{replica}"
        handle = replica_handle(self._cluster, self._topic, state.partition, replica)
        if handle is None:
            return target, "not running (the controller is restarting it)"
        ray.kill(handle)
        return target, "killed the leader" if replica == state.leader else "killed a follower"

    def _kill_read_node(self) -> tuple[str, str]:
        states = [state for state, _ in self._virtual.states(self._topic).values() if not state.retired]
        node = self._rng.choice(sorted({replica for state in states for replica in state.replicas}))
        handle = read_node_handle(self._cluster, node)
        if handle is None:
            return node, "not running (the controller is restarting it)"
        ray.kill(handle)
        led = sorted(state.vp for state in states if state.leader == node)
        alone = sorted(state.vp for state in states if state.leader == node and len(state.risr) < 2)
        return node, (f"killed, leading VPs {led}" + (f" (the only RISR member of {alone}: they lead again from its log "
                                                      f"once it is back)" if alone else ""))

    def _restart_etcd(self) -> tuple[str, str]:
        if self._etcd is None:
            return "etcd", "skipped: the driver joined through environment variables and cannot restart etcd"
        down_s = self._rng.uniform(*self._timing.etcd_down_s)
        self._etcd.stop()
        time.sleep(down_s)
        self._etcd.start()
        restarted = time.monotonic()
        # As an operator would: the next fault waits until this cluster's clients reach etcd again.
        _wait(self._etcd_answers, ETCD_ANSWER_TIMEOUT_S, "etcd to answer after its restart")
        return (f"etcd :{self._etcd.server.client_port}", f"down {down_s:.1f} s, restarted (pid {self._etcd.server.pid}), "
                f"answering {time.monotonic() - restarted:.1f} s later")

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

    # --- healing --------------------------------------------------------------------------

    def heal(self, timeout_s: float) -> dict:
        """Undo what faults left behind and wait until the cluster is whole again; see the module doc."""
        began = time.monotonic()
        deadline = began + timeout_s
        if self._etcd is not None and not self._etcd.running:
            self._etcd.start()
        problems: list[str] = ["not checked"]
        while time.monotonic() < deadline:
            try:
                self._clear_pauses()
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
        problems = []
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

