"""Looking at a chaos run's processes and etcd every ``resource_sample_s``, on a thread (a shell).

Each sweep lists the processes (``cluster_pids``: the cluster daemon, its descendants and its
session, so etcd members, Ray's gcs_server and raylets, every actor worker and the controller;
plus this driver and its descendants, so the group members and any etcd member a fault started
again), and reads each one's role (``resource_trend.role_of``), RSS and open file descriptors
from ``/proc`` (``bench.process_usage``). It then counts the cluster's etcd keys and reads the
database size, through a store of its own with a short timeout. All of a sweep's samples carry
the sweep's start time; ``resource_trend`` turns them into slopes.

Faults make reads fail, and that is normal: a process killed between the listing and the read
is skipped (``processes_unreadable``), an etcd that is stopped or SIGSTOPped makes that sweep's
count time out within ``ETCD_SAMPLE_TIMEOUT_S`` and be skipped (``etcd_unanswered``). A
measurement must never fail or hold up the run it measures: anything else a sweep raises is
recorded (the first ``SWEEP_ERRORS_KEPT``) and the next sweep goes on; ``stop`` waits at most
``STOP_TIMEOUT_S`` and returns what was collected. Sampling ends after ``SWEEPS_MAX`` sweeps so
that the samples' memory (which the driver's own RSS shows) stays bounded.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable, Protocol

import psutil

from mafka4.bench.process_usage import open_fd_count, rss_bytes
from mafka4.errors import CoordinatorUnavailable, ProcessNotVisible
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.connect import Connection
from mafka4.runtime.local import cluster_pids
from simulations.chaos.resource_trend import DRIVER_ROLE, EtcdSample, ProcessSample, Samples, role_of

# A request to a member that is stopped (SIGSTOP, or down) fails after this; the run's own calls
# wait longer, but a sample can simply be skipped.
ETCD_SAMPLE_TIMEOUT_S = 2.0
# A sweep is two etcd calls (each bounded above) and a pass over /proc.
STOP_TIMEOUT_S = 15.0
SWEEPS_MAX = 5_000  # at the default 10 s, 14 hours
SWEEP_ERRORS_KEPT = 5


class EtcdReading(Protocol):
    def read(self) -> tuple[int, int]:
        """(keys under the cluster's prefix, database size in bytes); ``CoordinatorUnavailable`` if etcd did not answer."""

    def close(self) -> None: ...


class EtcdReader:
    """The cluster's key count and etcd's database size, through a store of its own (opened on first use)."""

    def __init__(self, endpoint: str, cluster: str):
        self._endpoint, self._prefix = endpoint, keys.cluster_prefix(cluster)
        self._store: MetadataStore | None = None

    def read(self) -> tuple[int, int]:
        if self._store is None:
            self._store = MetadataStore(self._endpoint, timeout_s=ETCD_SAMPLE_TIMEOUT_S)
        return self._store.count_prefix(self._prefix), self._store.db_size_bytes()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def run_pids(connection: Connection) -> set[int]:
    """This driver, its descendants and, for a local cluster, every process of the cluster."""
    driver = psutil.Process()
    pids = {driver.pid, *(child.pid for child in driver.children(recursive=True))}
    if connection.state is not None:
        pids |= cluster_pids(connection.state)
    return pids


class ResourceSampler:
    """Sweeps on a daemon thread from ``start`` until ``stop``; times are seconds since ``began`` (monotonic)."""

    def __init__(self, list_pids: Callable[[], set[int]], etcd: EtcdReading | None, sample_s: float, began: float):
        assert sample_s > 0, sample_s
        self._list_pids, self._etcd, self._sample_s, self._began = list_pids, etcd, sample_s, began
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-resource-sampler", daemon=True)
        self._processes: list[ProcessSample] = []
        self._etcd_samples: list[EtcdSample] = []
        self._sweeps = self._unreadable = self._unanswered = 0
        self._errors: list[str] = []
        self._closed = False

    @classmethod
    def of(cls, connection: Connection, sample_s: float, began: float) -> "ResourceSampler":
        return cls(lambda: run_pids(connection), EtcdReader(connection.store.endpoint, connection.cluster),
                   sample_s, began)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> Samples:
        """Stop sampling (waiting at most ``STOP_TIMEOUT_S``) and return every sample taken; callable again."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)
        with self._lock:
            if not self._closed and self._etcd is not None:
                self._closed = True
                self._guarded("closing the etcd store", self._etcd.close)
            return Samples(tuple(self._processes), tuple(self._etcd_samples), self._sweeps, self._unreadable,
                           self._unanswered, tuple(self._errors))

    def _run(self) -> None:
        while True:
            if self._sweeps >= SWEEPS_MAX:
                self._error(f"stopped after {SWEEPS_MAX} sweeps")
                return
            self._sweep()
            if self._stop.wait(self._sample_s):
                return

    def _sweep(self) -> None:
        time_s = time.monotonic() - self._began
        processes = self._guarded("listing processes", lambda: self._read_processes(time_s))
        etcd = self._guarded("reading etcd", lambda: self._read_etcd(time_s)) if self._etcd is not None else None
        with self._lock:
            self._sweeps += 1
            self._processes += processes or []
            if etcd is not None:
                self._etcd_samples.append(etcd)

    def _read_processes(self, time_s: float) -> list[ProcessSample]:
        driver = os.getpid()
        found = []
        for pid in sorted(self._list_pids()):
            try:
                role = DRIVER_ROLE if pid == driver else _role(pid)
                found.append(ProcessSample(time_s, role, pid, rss_bytes(pid), open_fd_count(pid)))
            except (ProcessNotVisible, psutil.Error, OSError):
                with self._lock:  # killed by a fault after the listing, or a zombie not reaped yet
                    self._unreadable += 1
        return found

    def _read_etcd(self, time_s: float) -> EtcdSample | None:
        try:
            keys_count, db_size_bytes = self._etcd.read()
        except CoordinatorUnavailable:  # stopped or frozen by a fault, or electing a leader
            with self._lock:
                self._unanswered += 1
            return None
        return EtcdSample(time_s, keys_count, db_size_bytes)

    def _guarded(self, what: str, action):
        try:
            return action()
        except Exception as error:  # a measurement never fails the run it measures: recorded, and the run goes on
            self._error(f"{what}: {type(error).__name__}: {error}")
            return None

    def _error(self, text: str) -> None:
        if len(self._errors) < SWEEP_ERRORS_KEPT:
            self._errors.append(text)


def _role(pid: int) -> str:
    process = psutil.Process(pid)
    return role_of(process.cmdline(), process.name())
