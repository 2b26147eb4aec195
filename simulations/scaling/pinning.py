"""Pinning simulated nodes to CPU sets, so one machine can stand in for separate machines.

A simulated node of the local cluster is one Ray raylet (``runtime.ray_cluster``); every
actor of that node runs in a worker process the raylet forks, and a forked process inherits
its parent's CPU affinity. So pinning a raylet and its current descendants pins everything
that node will ever run. The experiment uses it to give write-side and read-side actors
separate cores.

The cluster's shared services (``pin_services``: the daemon and what it started, Ray's head
with the controller, and etcd) can go to the read set, before the nodes are pinned
(``--pin-services``). Left unpinned, Linux moves them to whichever CPU is less busy: with many
consumers on the read set, that is the write set, where they take the producer's and the write
nodes' time. In a deployment they have machines of their own; on 2 cores there is no third set,
and beside the readers (whose commits and group sessions are most of their work) they leave one
CPU to 32 consumers, the read nodes and themselves
(``reports/2026-12-03-services-pinned/``). So they stay unpinned by default.

Clients are pinned too (``pin_threads``): the producer (the experiment's driver) on the write
set, each consumer's process on the read set. A thread created later inherits its creator's
set, but the threads that exist already must be pinned one by one (Linux's affinity is per
thread), so every thread of the process is.

A raylet is recognised by its command line: the ``--static_resource_list`` names the node's
own resource (``mafka4_node_<id>``), and its socket paths lie under the cluster's Ray temp dir,
so two clusters on one machine are never confused. Nothing is ever signalled here.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Mapping, Sequence

import psutil

from mafka4.errors import InvalidConfig
from mafka4.runtime.ray_cluster import node_resource


def usable_cpus() -> list[int]:
    return sorted(psutil.Process().cpu_affinity())


def check_cpu_set(cpus: Sequence[int]) -> tuple[int, ...]:
    usable = usable_cpus()
    if not cpus or any(cpu not in usable for cpu in cpus):
        raise InvalidConfig(f"CPU set {list(cpus)} is not a non-empty subset of this machine's usable CPUs {usable}: "
                            f"pick CPUs from that list")
    return tuple(sorted(set(cpus)))


def pin_threads(pid: int, cpus: Sequence[int]) -> set[int]:
    """Pin every thread of process ``pid`` to ``cpus``; the set its main thread had before.

    ``cpus`` is not checked against ``usable_cpus``: that is this process's own set, which is
    narrower while this driver is pinned, and a pinned process is given back its wider set."""
    cpu_set = set(cpus)
    assert cpu_set, "a CPU set holds at least one CPU"
    before = os.sched_getaffinity(pid)
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile needs no pinning
            os.sched_setaffinity(int(task), cpu_set)
    return before


def pin_services(daemon_pid: int, etcd_pids: Sequence[int], cpus: Sequence[int]) -> None:
    """Pin the cluster daemon, etcd's members and all their descendants to ``cpus`` (the nodes'
    raylets among them: ``pin_nodes`` after this pins those to their own sets)."""
    cpu_set = check_cpu_set(cpus)
    for root_pid in (daemon_pid, *etcd_pids):
        with contextlib.suppress(psutil.NoSuchProcess):  # a service that is gone needs no pinning
            _pin_tree(psutil.Process(root_pid), cpu_set)


def _pin_tree(root: psutil.Process, cpus: Sequence[int]) -> None:
    """Every thread of ``root`` and of its descendants (Linux's affinity is per thread: a process's
    threads that exist already keep theirs when only its PID is pinned)."""
    for process in [root, *root.children(recursive=True)]:
        # One that exited meanwhile needs no pinning.
        with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError, FileNotFoundError):
            pin_threads(process.pid, cpus)


def _raylet_of(node_id: str, ray_temp_dir: Path) -> psutil.Process:
    marker, temp = f"{node_resource(node_id)},", str(ray_temp_dir)
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(marker in part for part in cmdline) and any(temp in part for part in cmdline):
            return process
    raise LookupError(f"no raylet of node {node_id!r} under {ray_temp_dir}: is the cluster running?")


def pin_nodes(ray_temp_dir: Path, cpus_by_node: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Pin each node's raylet and its descendants, every thread of each, to its CPU set; returns
    what was applied."""
    applied = {}
    for node_id, cpus in cpus_by_node.items():
        cpu_set = check_cpu_set(cpus)
        _pin_tree(_raylet_of(node_id, ray_temp_dir), cpu_set)
        applied[node_id] = cpu_set
    return applied
