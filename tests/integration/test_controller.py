"""The controller against real etcd and Ray: election among candidates, and the liveness rule."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import etcd3
import psutil
import ray

from mafka4.batch_payload import encode_batch
from mafka4.client.admin import Admin
from mafka4.limits import Acks
from mafka4.metadata import keys
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import PartitionState
from mafka4.runtime.environment import ray_environment

from wait_helpers import wait_until

LEASE_TTL_S = 2
REVOKING_S = 5


def start_controller(cluster, name: str, controller_id: str, log_dir: Path) -> tuple[subprocess.Popen, Path]:
    log_path = log_dir / f"{controller_id}.log"
    command = [sys.executable, "-m", "mafka4.runtime.controller_process", "--etcd", cluster.state.etcd_endpoint,
               "--ray-address", cluster.state.ray_address, "--cluster", name, "--controller-id", controller_id,
               "--lease-ttl-s", str(LEASE_TTL_S)]
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**ray_environment(), **os.environ})
    return process, log_path


def delay_schedulers_of(pid: int) -> list[psutil.Process]:
    return [child for child in psutil.Process(pid).children()
            if "mafka4.scheduling.delay_service" in " ".join(child.cmdline())]


def test_two_controllers_elect_one_and_killing_it_promotes_the_other(cluster, tmp_path):
    # A cluster name of its own: the session's controller and its partitions are not involved.
    name = f"election-{secrets.token_hex(3)}"
    controller_key = keys.controller(name)
    processes = {}
    try:
        for controller_id in ("c-a", "c-b"):
            processes[controller_id] = start_controller(cluster, name, controller_id, tmp_path)
        first = wait_until(lambda: cluster.store.get(controller_key))
        assert first is not None, "no controller became active"
        active, standby = first.value["controller_id"], ({"c-a", "c-b"} - {first.value["controller_id"]}).pop()
        time.sleep(LEASE_TTL_S * 2)  # both have had time to campaign
        logs = {cid: path.read_text() for cid, (_, path) in processes.items()}
        assert "is active" in logs[active] and "is active" not in logs[standby], logs
        assert cluster.store.get(controller_key).value == first.value, "the active one keeps its key"

        schedulers = wait_until(lambda: delay_schedulers_of(processes[active][0].pid))
        assert schedulers, "the active controller runs no delay scheduler"
        processes[active][0].send_signal(signal.SIGKILL)  # no resignation: the lease must expire
        processes[active][0].wait(timeout=30)
        # Its delay scheduler stops too: an orphan beside the next one's would release messages twice.
        assert wait_until(lambda: not any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE
                                          for child in schedulers), 30), "the killed controller's scheduler runs on"
        second = wait_until(lambda: (v := cluster.store.get(controller_key)) and v.value["controller_id"] == standby and v)
        assert second, "the standby did not take over"
        assert second.value["controller_epoch"] == first.value["controller_epoch"] + 1
        assert cluster.store.get(keys.controller_epoch(name)).value == second.value["controller_epoch"]

        processes[standby][0].send_signal(signal.SIGTERM)  # resigns: the key goes at once, not after a TTL
        assert processes[standby][0].wait(timeout=30) == 0
        assert cluster.store.get(controller_key) is None
    finally:
        for process, _ in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        cluster.store.delete_keys_and_prefixes([keys.controller_epoch(name)], [keys.cluster_prefix(name)])


def test_lost_liveness_leases_of_live_replicas_cause_no_failover(cluster):
    """As after an etcd outage: every lease of a topic's replicas expires while the actors run."""
    assert wait_until(lambda: cluster.store.get(keys.controller(cluster.cluster))), "no active controller"
    admin = Admin(cluster)
    topic = f"leases-{secrets.token_hex(3)}"
    metadata = admin.create_topic(topic, partitions=2, replication_factor=3, min_insync_replicas=2, read_mode="mafka3")
    prefix = f"{keys.replicas_prefix(cluster.cluster)}{topic}/"
    assert wait_until(lambda: len(cluster.store.get_prefix(prefix)) == 6)
    host, _, port = cluster.state.etcd_endpoint.rpartition(":")
    client = etcd3.client(host=host, port=int(port), timeout=5)
    controller_log = Path(cluster.state.home) / "controller.log"
    try:
        # Revoked again and again, so the controller surely examines the partitions while
        # the keys are gone (a replica registers anew within a third of its lease TTL).
        deadline = time.monotonic() + REVOKING_S
        while time.monotonic() < deadline:
            for lease_id in {meta.lease_id for _, meta in client.get_prefix(prefix)}:
                client.revoke_lease(lease_id)
            time.sleep(0.2)
    finally:
        client.close()

    assert wait_until(lambda: len(cluster.store.get_prefix(prefix)) == 6), "replicas did not register again"
    assert f"{topic}-0: " in controller_log.read_text() or f"{topic}-1: " in controller_log.read_text(), \
        "the controller did not examine the partitions"
    assert "answer a ping: alive" in controller_log.read_text()
    for state in metadata.partitions:
        now = PartitionState.from_json(state.partition, cluster.store.get(
            keys.physical_partition(cluster.cluster, topic, state.partition)).value)
        assert (now.leader, now.leader_epoch) == (state.leader, state.leader_epoch), "no failover of a live leader"
        leader = replica_handle(cluster.cluster, topic, state.partition, state.leader)
        assert ray.get(leader.produce.remote(encode_batch([(None, b"still leading", 1, None)]), Acks.ALL)) == 0


def test_partition_writes_are_fenced_by_the_controller_key_and_the_epoch_only_grows(cluster):
    """What keeps a deposed controller from overwriting its successor's decisions."""
    store, name = cluster.store, f"fence-{secrets.token_hex(3)}"
    key, epoch_key, partition_key = keys.controller(name), keys.controller_epoch(name), f"{keys.cluster_prefix(name)}p"
    store.put(partition_key, {"leader": "w0"})
    first_lease = store.grant_lease(10)
    first = store.create_leased(key, {"controller_id": "a", "controller_epoch": 0}, first_lease, {epoch_key: (0, 0)})
    try:
        assert first is not None
        second_lease = store.grant_lease(10)
        assert store.create_leased(key, {"controller_id": "b", "controller_epoch": 1}, second_lease,
                                   {epoch_key: (1, store.get(epoch_key).mod_revision)}) is None, "only while absent"
        current = store.get(partition_key)
        assert store.compare_and_swap(partition_key, {"leader": "w1"}, current.mod_revision, fence=(key, first))

        store.revoke_lease(first_lease)  # "a" loses its key, as when its lease expires
        current = store.get(partition_key)
        assert not store.compare_and_swap(partition_key, {"leader": "w2"}, current.mod_revision, fence=(key, first))
        assert store.create_leased(key, {"controller_id": "b", "controller_epoch": 1}, second_lease,
                                   {epoch_key: (0, 0)}) is None, "the epoch counter moved: a stale campaign loses"
        second = store.create_leased(key, {"controller_id": "b", "controller_epoch": 1}, second_lease,
                                     {epoch_key: (1, store.get(epoch_key).mod_revision)})
        assert second is not None and store.get(epoch_key).value == 1
        assert not store.compare_and_swap(partition_key, {"leader": "w2"}, current.mod_revision, fence=(key, first))
        assert store.compare_and_swap(partition_key, {"leader": "w2"}, current.mod_revision, fence=(key, second))
        store.revoke_lease(second_lease)
    finally:
        store.delete_keys_and_prefixes([epoch_key], [keys.cluster_prefix(name)])
