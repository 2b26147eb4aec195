"""``temporary_cluster`` on a real cluster: it runs, refuses a second ``up`` in its home, and leaves no
process or directory behind when its body raises (its exit is ``down``, so this is also ``down``'s test on
a live cluster; ``test_local_cluster`` has ``down`` after a killed daemon)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest
import ray

from conftest import away_from_session_ray
from mafka4.client.admin import Admin
from mafka4.errors import ClusterAlreadyRunning, ClusterNotRunning
from mafka4.limits.servers import ClusterConfig
from mafka4.runtime.connect import connect
from mafka4.runtime.environment import HOME_ENV
from mafka4.runtime.etcd_server import start_etcd
from mafka4.runtime.local import down, status, up
from mafka4.runtime.ports import is_listening
from mafka4.runtime.ray_cluster import node_resource
from mafka4.runtime.temporary import temporary_cluster


class BodyFailed(Exception):
    pass


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def port(address: str) -> int:
    return int(address.rpartition(":")[2])


def test_a_temporary_cluster_stops_every_process_and_removes_its_directories_when_its_body_raises():
    home_before = os.environ.get(HOME_ENV)
    config = ClusterConfig(write_nodes=1, read_nodes=1)
    with away_from_session_ray(), pytest.raises(BodyFailed):
        with temporary_cluster(config, home_prefix="m4tc-") as cluster:
            state = cluster.state
            with pytest.raises(ClusterAlreadyRunning):
                up(cluster.home, config)
            assert os.environ[HOME_ENV] == str(cluster.home)
            assert ray.get_runtime_context().gcs_address == state.ray_address
            assert Admin(cluster.connection).list_topics() == []  # etcd answers
            resources = [node["Resources"] for node in ray.nodes() if node["Alive"]]
            assert all(any(node_resource(node_id) in r for r in resources) for node_id in ("w0", "r0"))
            extra_etcd = start_etcd(cluster.home / "extra-etcd")  # as a chaos run's etcd restart does
            cluster.etcd_started.append(extra_etcd)
            started = {state.daemon_pid, extra_etcd.pid,
                       *(child.pid for child in psutil.Process(state.daemon_pid).children(recursive=True))}
            assert state.etcd_pid in started and all(alive(pid) for pid in started)
            directories = [cluster.home, Path(state.ray_temp_dir)]
            assert all(directory.is_dir() for directory in directories)
            raise BodyFailed()

    assert started <= set(cluster.stopped_pids)
    assert not [pid for pid in started if alive(pid)]
    assert not [directory for directory in directories if directory.exists()]
    assert not is_listening(port(state.etcd_endpoint)) and not is_listening(port(state.ray_address))
    assert not is_listening(extra_etcd.client_port)
    assert os.environ.get(HOME_ENV) == home_before
    # Pointed at the home of a stopped temporary cluster (gone with its record), the commands say no cluster runs.
    assert status(cluster.home)["running"] is False
    with pytest.raises(ClusterNotRunning, match="nothing to stop"):
        down(cluster.home)
    with pytest.raises(ClusterNotRunning, match="mafka4 up"):
        connect(cluster.home)
