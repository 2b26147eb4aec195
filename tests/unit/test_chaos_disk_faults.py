"""The disk faults of ``mafka4 chaos`` without a cluster: a power loss of a "replica" that is a real process.

A child process opens a real log (recording fsync points, as a chaos cluster's replicas do),
appends, flushes, appends more and waits. The fault finds it as it finds a replica actor (the
store and the handle are stand-ins: no Ray, no etcd), SIGKILLs it and cuts its directory; the
log then reopens with exactly its flushed batches. The ``disk-full`` fault sets the bound on
every replica of the node and always clears it.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from mafka4.limits.servers import LogConfig
from mafka4.log.fsync_points import RECORD_ENV, recording_fsync_points
from mafka4.log.log import Log
from mafka4.physical.partition_state import PartitionState
from simulations.chaos import disk_faults
from simulations.chaos.disk_faults import NOT_RECORDING, DiskFaults
from simulations.chaos.settings import FAULT_KINDS, ChaosSettings, FaultTiming

TOPIC = "t"
CONFIG = LogConfig(segment_bytes_max=4096, flush_interval_ms=None)
REPLICA = textwrap.dedent("""
    import sys, time
    from mafka4 import batch_frame, batch_payload
    from mafka4.limits.servers import LogConfig
    from mafka4.log.log import Log
    log = Log.open(sys.argv[1], LogConfig(segment_bytes_max=4096, flush_interval_ms=None), now_ms=0)
    def append():
        batch = bytearray(batch_payload.encode_batch([(b"k", b"v" * 300, 1_000, None)]))
        batch_frame.stamp(batch, log.log_end_offset, 0)
        log.append(batch, now_ms=0)
    for _ in range(3):
        append()
    log.flush()
    for _ in range(2):
        append()
    print("ready", flush=True)
    time.sleep(60)
""")


@dataclass
class Topics:
    """The topic store as the fault reads it: one topic, partition 0 on w0 and w1."""

    data_root_path: Path

    def names(self):
        return [TOPIC]

    def get(self, name):
        state = PartitionState(0, "w0", 1, ("w0", "w1"), ("w0", "w1"))
        return type("Metadata", (), {"partitions": (state,)})()

    def data_root(self):
        return str(self.data_root_path)


class Handle:
    """A replica actor's handle whose calls answer at once (``ray.get`` is the identity here)."""

    def __init__(self, pid: int):
        self.pid, self.bounds = pid, []
        self.describe = type("Method", (), {"remote": lambda _: {"pid": self.pid, "role": "leader"}})()
        self.set_log_dir_bytes_max = type("Method", (), {"remote": lambda _, bound: self.bounds.append(bound)})()


@pytest.fixture
def faults(tmp_path, monkeypatch):
    handles: dict[str, Handle] = {}
    monkeypatch.setattr(disk_faults, "replica_handle", lambda cluster, topic, partition, node: handles.get(node))
    monkeypatch.setattr(disk_faults.ray, "get", lambda refs, timeout=None: refs)
    rng = random.Random(0)
    nemesis = DiskFaults("c", TOPIC, Topics(tmp_path), virtual=None, rng=rng, timing=FaultTiming(disk_full_s=(0, 0)))
    nemesis.handles = handles
    return nemesis


def start_replica(directory: Path, record: bool) -> subprocess.Popen:
    env = dict(os.environ, **{RECORD_ENV: "1" if record else "0"})
    process = subprocess.Popen([sys.executable, "-c", REPLICA, str(directory)], stdout=subprocess.PIPE, text=True, env=env)
    assert process.stdout.readline().strip() == "ready"
    return process


def test_a_power_loss_kills_the_node_s_replicas_and_keeps_only_what_they_fsynced(tmp_path, faults):
    replicas = {node: start_replica(tmp_path / node / f"{TOPIC}-0", record=True) for node in ("w0", "w1")}
    faults.handles.update({node: Handle(process.pid) for node, process in replicas.items()})

    node, outcome = faults.power_loss_write_node()
    assert replicas[node].poll() is not None  # gone (and reaped) when the fault returns
    other = replicas["w1" if node == "w0" else "w0"]
    assert other.poll() is None  # the other node's replica runs on
    other.kill()
    assert outcome.startswith("power loss: SIGKILLed 1 replicas (t-0), leading ['t-0']; cut ")
    assert Log.open(tmp_path / node / f"{TOPIC}-0", CONFIG, now_ms=0).log_end_offset == 3  # the unflushed 2 are gone


def test_a_power_loss_of_a_node_that_records_no_fsync_points_kills_nothing(tmp_path, faults):
    process = start_replica(tmp_path / "w0" / f"{TOPIC}-0", record=False)
    faults.handles["w0"] = faults.handles["w1"] = Handle(process.pid)
    try:
        assert faults.power_loss_write_node()[1] == NOT_RECORDING
        assert process.poll() is None
    finally:
        process.kill()


def test_disk_full_sets_a_zero_bound_on_every_replica_of_the_node_and_clears_it(faults):
    faults.handles.update({"w0": Handle(1), "w1": Handle(2)})
    faults._rng = random.Random(3)  # draws a write node
    target, outcome = faults.disk_full()
    assert target.startswith("write node ") and "log_dir_bytes_max=0" in outcome
    assert faults.handles[target.split()[-1]].bounds == [0, None]
    assert faults.full == []


def test_the_new_kinds_are_chaos_faults_and_recording_is_set_for_the_cluster_only():
    assert {"power-loss-write-node", "power-loss-read-node", "disk-full"} <= set(FAULT_KINDS)
    ChaosSettings(faults=("power-loss-write-node", "power-loss-read-node", "disk-full"))
    before = os.environ.get(RECORD_ENV)
    with recording_fsync_points():
        assert os.environ[RECORD_ENV] == "1"
    assert os.environ.get(RECORD_ENV) == before
