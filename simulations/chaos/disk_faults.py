"""Faults of a node's disk in a chaos run: power loss of a write or read node, and a full disk.

* ``power-loss-write-node``: every physical replica actor on one write node (of every topic)
  is SIGKILLed by the PID the actor gives, all at once, and once they are gone each replica
  directory is cut back to its last fsync (``mafka4.log.fsync_points``): what the page cache
  held and the disk did not is lost, as in a power cut. The controller restarts the replicas
  (their leases expire) and they recover from what is left; followers refetch what they lost,
  and a leader that lost acknowledged data is no longer in sync (the replica protocol's job).
* ``power-loss-read-node``: the same for a read node's actor and every VP log under the node's
  directory; its VPs recover from their RISR peers once the controller restarts the node.
* ``disk-full``: one write node (every replica on it) or read node gets ``log_dir_bytes_max=0``
  (``mafka4.log.log_dir_budget``) for ``disk_full_s``, then no bound: a leader there answers
  produce with ``DiskFull``, followers and VP replicas there stop appending and fall out of
  the ISR / RISR until it is cleared.

A power loss needs a cluster started with ``$MAFKA4_RECORD_FSYNC_POINTS=1`` (``chaos`` sets it
on its throwaway cluster with ``fsync_points.recording_fsync_points``) whose log directories this process can
reach (a local cluster); otherwise the fault kills nothing and says why. The cut takes
milliseconds; the controller restarts a replica or read node only after its liveness lease
expired (seconds), so nothing reopens the logs while they are cut.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import psutil
import ray

from mafka4.coordinator.control.physical_launcher import replica_directory
from mafka4.errors import UnknownTopic
from mafka4.log.fsync_points import FSYNC_POINTS_FILE, RECORD_ENV, Cut, cut_to_fsync_points, cut_tree_to_fsync_points
from mafka4.physical.handles import replica_handle
from mafka4.physical.topics import TopicStore
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.vp_store import VirtualStore
from simulations.chaos.processes import process_of
from simulations.chaos.settings import FaultTiming

CALL_TIMEOUT_S = 30
KILLED_EXIT_TIMEOUT_S = 10  # a SIGKILLed process is gone in milliseconds; this only bounds a hung kernel
NOT_RECORDING = (f"skipped: the node's logs record no fsync points (start the cluster with ${RECORD_ENV}=1, "
                 f"and run this where its log directories are)")


class DiskFaults:
    """The disk faults of one run's nemesis, and the bounds it set and has not cleared yet."""

    def __init__(self, cluster: str, topic: str, topics: TopicStore, virtual: VirtualStore, rng: random.Random,
                 timing: FaultTiming):
        self._cluster, self._topic, self._topics, self._virtual = cluster, topic, topics, virtual
        self._rng, self._timing = rng, timing
        self._full: set[tuple[str, str]] = set()  # (role, node) with a bound set

    @property
    def full(self) -> list[str]:
        return [f"{role} node {node}" for role, node in sorted(self._full)]

    def _write_nodes(self) -> list[str]:
        return sorted({replica for state in self._topics.get(self._topic).partitions for replica in state.replicas})

    def _read_nodes(self) -> list[str]:
        return sorted({replica for state, _ in self._virtual.states(self._topic).values() if not state.retired
                       for replica in state.replicas})

    def _replicas_on(self, node: str) -> list[tuple[str, object, Path]]:
        """Every running physical replica on write node ``node``, of any topic: (name, handle, directory)."""
        data_root = self._topics.data_root()
        found = []
        for name in self._topics.names():
            try:
                partitions = self._topics.get(name).partitions
            except UnknownTopic:
                continue  # deleted meanwhile
            for state in partitions:
                handle = replica_handle(self._cluster, name, state.partition, node) if node in state.replicas else None
                if handle is not None:
                    found.append((f"{name}-{state.partition}", handle,
                                  Path(replica_directory(data_root, node, name, state.partition))))
        return found

    # --- power loss -------------------------------------------------------------------------

    def power_loss_write_node(self, node: str | None = None) -> tuple[str, str]:
        """Power loss of write node ``node`` (drawn if None); (target, outcome)."""
        node = node or self._rng.choice(self._write_nodes())
        replicas = self._replicas_on(node)
        if not replicas:
            return node, "no replica running (the controller is restarting them)"
        if not all((directory / FSYNC_POINTS_FILE).exists() for _, _, directory in replicas):
            return node, NOT_RECORDING
        pids = ray.get([handle.describe.remote() for _, handle, _ in replicas], timeout=CALL_TIMEOUT_S)
        _kill_all([described["pid"] for described in pids])
        cut = _sum(cut_to_fsync_points(directory) for _, _, directory in replicas)
        led = sorted(name for (name, _, _), described in zip(replicas, pids) if described.get("role") == "leader")
        return node, (f"power loss: SIGKILLed {len(replicas)} replicas ({', '.join(name for name, _, _ in replicas)}), "
                      f"leading {led}; {_describe(cut)}")

    def power_loss_read_node(self, node: str | None = None) -> tuple[str, str]:
        """Power loss of read node ``node`` (drawn if None); (target, outcome)."""
        states = [state for state, _ in self._virtual.states(self._topic).values() if not state.retired]
        node = node or self._rng.choice(self._read_nodes())
        handle = read_node_handle(self._cluster, node)
        if handle is None:
            return node, "not running (the controller is restarting it)"
        root = Path(self._topics.data_root()) / node
        if not root.is_dir() or not any((d / FSYNC_POINTS_FILE).exists() for d in root.iterdir() if d.is_dir()):
            return node, NOT_RECORDING
        pid = ray.get(handle.describe.remote(self._topic), timeout=CALL_TIMEOUT_S)["pid"]
        _kill_all([pid])
        cut = cut_tree_to_fsync_points(root)
        led = sorted(state.vp for state in states if state.leader == node)
        return node, f"power loss: SIGKILLed pid {pid}, leading VPs {led}; {_describe(cut)}"

    # --- disk full --------------------------------------------------------------------------

    def disk_full(self) -> tuple[str, str]:
        role = self._rng.choice(("write", "read"))
        node = self._rng.choice(self._write_nodes() if role == "write" else self._read_nodes())
        hold_s = self._rng.uniform(*self._timing.disk_full_s)
        self._full.add((role, node))
        try:
            reached = self._set_bound(role, node, 0)
            if reached:
                time.sleep(hold_s)
        finally:
            self._clear(role, node)
        if not reached:
            return f"{role} node {node}", "not running (the controller is restarting it)"
        return f"{role} node {node}", f"log_dir_bytes_max=0 for {hold_s:.1f} s on {', '.join(reached)}"

    def _set_bound(self, role: str, node: str, bytes_max: int | None) -> list[str]:
        """Set the bound on what runs on ``node``; the names of the actors reached."""
        if role == "write":
            targets = [(name, handle) for name, handle, _ in self._replicas_on(node)]
        else:
            handle = read_node_handle(self._cluster, node)
            targets = [] if handle is None else [(f"read node {node}", handle)]
        ray.get([handle.set_log_dir_bytes_max.remote(bytes_max) for _, handle in targets], timeout=CALL_TIMEOUT_S)
        return [name for name, _ in targets]

    def _clear(self, role: str, node: str) -> None:
        self._set_bound(role, node, None)
        self._full.discard((role, node))

    def clear_all(self) -> None:
        """Clear every bound still set (heal, undo); a node stays listed in ``full`` until cleared."""
        for role, node in sorted(self._full):
            self._clear(role, node)


def _kill_all(pids: list[int]) -> None:
    """SIGKILL every process at once, as a power cut stops them, and wait until they are gone."""
    processes = [process_of(pid) for pid in pids]
    for process in processes:
        process.kill()
    _, alive = psutil.wait_procs(processes, timeout=KILLED_EXIT_TIMEOUT_S)
    assert not alive, f"SIGKILLed processes {[p.pid for p in alive]} still run after {KILLED_EXIT_TIMEOUT_S} s"


def _sum(cuts) -> Cut:
    cuts = list(cuts)
    return Cut(sum(cut.files_cut for cut in cuts), sum(cut.bytes_lost for cut in cuts))


def _describe(cut: Cut) -> str:
    return f"cut {cut.files_cut} files back to their last fsync, {cut.bytes_lost} bytes lost"
