"""cluster.json, the runtime environment and node resources: pure and fast, no Ray, no etcd."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from mafka4.errors import ClusterNotRunning
from mafka4.runtime.connect import connect
from mafka4.runtime.environment import (apply_ray_environment, ensure_ray_token, mafka4_home, ray_environment,
                                       ray_temp_dir, ray_token_path, use_ray_token)
from mafka4.runtime.local import down, status
from mafka4.runtime.ports import free_loopback_port
from mafka4.runtime.ray_cluster import node_ids, node_resource, node_resources
from mafka4.runtime.state import ClusterState, load_state, remove_state, save_state, state_path

# The longest socket path Ray creates below its temp dir, with a 7-digit PID; Ray refuses
# socket paths of 107 characters or more.
RAY_SOCKET_SUFFIX = "/session_2026-11-22_21-42-35_739479_1234567/sockets/plasma_store.99"
UNIX_SOCKET_PATH_CHARS_MAX = 107


def make_state(home: Path, **changes) -> ClusterState:
    values = dict(
        home=str(home), etcd_endpoint="127.0.0.1:2379", etcd_pid=11, ray_address="127.0.0.1:6379",
        daemon_pid=10, ray_temp_dir=str(home / "ray"), write_nodes=("w0", "w1"), read_nodes=("r0",), ready=True,
    )
    values.update(changes)
    return ClusterState(**values)


def test_saved_state_loads_back_equal(tmp_path):
    state = make_state(tmp_path, cluster="c1")

    save_state(state)

    assert load_state(tmp_path) == state
    assert load_state(tmp_path).node_ids == ("w0", "w1", "r0")
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.json"]  # no temporary file left


def test_state_defaults_data_root_under_home_and_cluster_local(tmp_path):
    state = make_state(tmp_path)
    assert state.data_root == str(tmp_path / "data")
    assert state.cluster == "local"


def test_save_replaces_the_previous_record(tmp_path):
    save_state(make_state(tmp_path, ready=False))
    save_state(make_state(tmp_path, ready=True, daemon_pid=42))
    assert load_state(tmp_path).daemon_pid == 42 and load_state(tmp_path).ready


def test_missing_record_is_none_and_remove_reports_absence(tmp_path):
    assert load_state(tmp_path) is None
    assert remove_state(tmp_path) is False
    save_state(make_state(tmp_path))
    assert remove_state(tmp_path) is True
    assert load_state(tmp_path) is None


@pytest.mark.parametrize("text", ["{not json", json.dumps({"version": 99}), json.dumps({"version": 1, "x": 1})])
def test_unreadable_record_names_the_file(tmp_path, text):
    state_path(tmp_path).write_text(text)
    with pytest.raises(ClusterNotRunning, match="cluster.json"):
        load_state(tmp_path)


def test_ray_temp_dir_fits_unix_socket_paths_for_a_long_home(tmp_path):
    home = tmp_path / ("very-long-directory-name-" * 6)

    temp_dir = ray_temp_dir(home)

    assert len(str(temp_dir) + RAY_SOCKET_SUFFIX) < UNIX_SOCKET_PATH_CHARS_MAX
    assert ray_temp_dir(home) == temp_dir  # one home, one directory
    assert ray_temp_dir(tmp_path / "another-very-long-home-name-that-is-long") != temp_dir


def test_ray_temp_dir_stays_in_a_short_home():
    assert ray_temp_dir(Path("/tmp/m4-abc")) == Path("/tmp/m4-abc/ray")


def test_home_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MAFKA4_HOME", str(tmp_path))
    assert mafka4_home() == tmp_path.resolve()
    monkeypatch.delenv("MAFKA4_HOME")
    assert mafka4_home() == Path("~/.mafka4").expanduser().resolve()


def test_ray_environment_keeps_ray_on_loopback_without_overriding(monkeypatch):
    assert ray_environment() == {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    monkeypatch.delenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", raising=False)
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "1")

    apply_ray_environment()

    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert os.environ["RAY_USAGE_STATS_ENABLED"] == "1"


def test_a_clusters_ray_token_is_made_once_readable_by_its_owner_only(tmp_path):
    path = ensure_ray_token(tmp_path)
    token = path.read_text()
    assert path == ray_token_path(tmp_path) and len(token) == 64 and int(token, 16) >= 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ensure_ray_token(tmp_path).read_text() == token, "a restart keeps the token every process holds"


def test_using_a_token_sets_rays_own_variables_and_drops_an_inline_token(monkeypatch, tmp_path):
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "another-clusters")  # Ray would take it over the file
    monkeypatch.delitem(sys.modules, "ray._raylet", raising=False)  # this process's Ray config stays as it is
    use_ray_token(tmp_path / "ray_token")
    assert os.environ["RAY_AUTH_MODE"] == "token"
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == str(tmp_path / "ray_token")
    assert "RAY_AUTH_TOKEN" not in os.environ


def test_node_resources_pin_actors_without_using_rays_reserved_prefix():
    assert node_ids("write", 3) == ["w0", "w1", "w2"] and node_ids("read", 1) == ["r0"]
    assert node_resource("w1") == "mafka4_node_w1"
    assert node_resources("write", "w1") == {"write_node": 1000, "mafka4_node_w1": 1000}
    assert node_resources("read", "r0") == {"read_node": 1000, "mafka4_node_r0": 1000}
    with pytest.raises(ValueError):
        node_resources("coordinator", "c0")


def test_a_record_whose_daemon_is_gone_is_stale(tmp_path):
    # This PID is alive but is not this home's daemon: a reused PID must not count as running.
    unused_endpoint = f"127.0.0.1:{free_loopback_port()}"
    save_state(make_state(tmp_path, daemon_pid=os.getpid(), etcd_pid=os.getpid(), etcd_endpoint=unused_endpoint))

    report = status(tmp_path)
    assert report["running"] is False and report["etcd_alive"] is False and report["etcd_reachable"] is False
    with pytest.raises(ClusterNotRunning, match="mafka4 up"):
        connect(tmp_path)
    assert down(tmp_path) == []  # nothing of ours to stop; the pytest process survives
    assert load_state(tmp_path) is None


def test_down_without_a_record_says_nothing_runs(tmp_path):
    with pytest.raises(ClusterNotRunning, match="nothing to stop"):
        down(tmp_path)
