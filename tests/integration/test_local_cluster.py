"""The local cluster runtime against real etcd and a real multi-node Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import ray

from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.connect import connect
from mafka4.runtime.environment import ray_token_path
from mafka4.runtime.etcd_server import restart_etcd, start_etcd, stop_etcd
from mafka4.runtime.local import down, status, up
from mafka4.runtime.ray_cluster import NodeRole, node_resource, ray_system_config
from mafka4.runtime.registration import NodeRegistration, refresh_registrations
from mafka4.runtime.state import state_path

from wait_helpers import wait_until

JOIN_TIMEOUT_S = 120  # a refused join may retry for a while before it gives up

NODES = {"w0": "write", "w1": "write", "w2": "write", "r0": "read"}
LEASE_TTL_S = 2
# etcd checks lease expiry about every 500 ms; allow for that and a busy machine.
EXPIRY_WAIT_S = LEASE_TTL_S + 5
OUTAGE_LEASE_TTL_S = 4
OUTAGE_REQUEST_TIMEOUT_S = 2.0


def test_status_shows_etcd_and_every_node_registered(cluster):
    report = status(Path(cluster.state.home))

    assert report["running"] and report["ready"] and report["etcd_reachable"] and report["ray_reachable"]
    assert {node_id: value["role"] for node_id, value in report["registered_nodes"].items()} == NODES
    assert all(value["resource"] == node_resource(i) for i, value in report["registered_nodes"].items())
    config = cluster.store.get(keys.cluster_config(cluster.cluster)).value
    assert config == {"data_root": cluster.state.data_root, "write_nodes": ["w0", "w1", "w2"], "read_nodes": ["r0"]}


def test_ray_nodes_carry_role_and_node_resources(cluster):
    alive = [node for node in ray.nodes() if node["Alive"]]

    assert len(alive) == 1 + len(NODES)
    for node_id, role in NODES.items():
        (node,) = [n for n in alive if node_resource(node_id) in n["Resources"]]
        assert node["Resources"][f"{role}_node"] == 1000
        assert node["Resources"]["CPU"] == 1
        assert node["NodeManagerAddress"] == "127.0.0.1"
    (head,) = [n for n in alive if not any(r.startswith("mafka4_node_") for r in n["Resources"])]
    assert "write_node" not in head["Resources"] and "read_node" not in head["Resources"]


def test_the_cluster_runs_with_mafka4_s_ray_system_config(cluster):
    from ray._private.state import state  # Ray's view of the cluster, as ``ray.nodes`` reads it

    running = state.get_system_config()
    assert {name: running.get(name) for name in ray_system_config()} == ray_system_config()


def test_driver_joins_an_existing_cluster_through_the_environment(cluster, monkeypatch):
    monkeypatch.setenv("MAFKA4_ETCD_ENDPOINT", cluster.state.etcd_endpoint)
    monkeypatch.setenv("MAFKA4_RAY_ADDRESS", cluster.state.ray_address)
    monkeypatch.setenv("MAFKA4_HOME", "/nonexistent")  # must not be consulted

    joined = connect()
    try:
        assert joined.state is None and joined.cluster == "local"
        assert {item.value["node_id"] for item in joined.store.get_prefix(keys.nodes_prefix("local"))} == set(NODES)
    finally:
        joined.store.close()


JOIN_RAY = "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); print('joined')"


def join_ray_as(address: str, home: Path, **auth: str) -> subprocess.Popen:
    """A fresh process joining the cluster's Ray with only the Ray authentication variables given
    (and a home of its own, so no token of Ray's default place is found either); ``joined`` tells
    whether it did."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("RAY_AUTH")}
    return subprocess.Popen([sys.executable, "-c", JOIN_RAY, address], env={**env, "HOME": str(home), **auth},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def joined(process: subprocess.Popen) -> tuple[bool, str]:
    """Whether ``process`` joined, and its stderr's end; a join still retrying after
    ``JOIN_TIMEOUT_S`` has not joined."""
    try:
        out, err = process.communicate(timeout=JOIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
    return "joined" in out, err[-2000:]


def test_rays_port_admits_only_the_holder_of_the_clusters_token(cluster, tmp_path):
    address = cluster.state.ray_address
    token = ray_token_path(Path(cluster.state.home))
    wrong = tmp_path / "wrong_token"
    wrong.write_text("0" * 64)
    # The three joins run side by side: a refused one retries for about 20 s before it gives up.
    homes = [tmp_path / name for name in ("none", "wrong", "right")]
    for home in homes:
        home.mkdir()
    without_token = join_ray_as(address, homes[0])
    with_a_wrong_one = join_ray_as(address, homes[1], RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(wrong))
    with_the_token = join_ray_as(address, homes[2], RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    assert not joined(without_token)[0], "a process without a token ran on the cluster"
    assert not joined(with_a_wrong_one)[0], "a process with a wrong token ran on the cluster"
    ok, err = joined(with_the_token)
    assert ok, err


@ray.remote
class WhereAmI:
    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()


def test_actor_pinned_by_node_resource_lands_on_that_node(cluster):
    (w1,) = [n["NodeID"] for n in ray.nodes() if n["Alive"] and node_resource("w1") in n["Resources"]]

    actor = WhereAmI.options(num_cpus=0, resources={node_resource("w1"): 1}).remote()
    try:
        assert ray.get(actor.node_id.remote(), timeout=120) == w1
    finally:
        ray.kill(actor)


def test_registration_disappears_when_refreshing_stops(cluster):
    registration = NodeRegistration(cluster.store, "lease-test", "w9", NodeRole.WRITE, LEASE_TTL_S)
    key = keys.node("lease-test", "w9")
    registration.keep_alive()
    # Refreshed for longer than the TTL: still registered.
    deadline = time.monotonic() + LEASE_TTL_S * 2
    while time.monotonic() < deadline:
        registration.keep_alive()
        time.sleep(LEASE_TTL_S / 3)
    assert cluster.store.get(key).value == {"node_id": "w9", "role": "write", "resource": "mafka4_node_w9"}

    assert wait_until(lambda: cluster.store.get(key) is None, EXPIRY_WAIT_S)

    registration.keep_alive()  # the expired lease is noticed and replaced
    assert cluster.store.get(key) is not None
    registration.revoke()
    assert cluster.store.get(key) is None


def test_registration_survives_an_etcd_outage(tmp_path):
    etcd = start_etcd(tmp_path / "etcd")
    opened: list[MetadataStore] = []

    def open_store() -> MetadataStore:
        # Short enough to notice the outage quickly, long enough for a busy 2-core machine.
        opened.append(MetadataStore(etcd.endpoint, timeout_s=OUTAGE_REQUEST_TIMEOUT_S))
        return opened[-1]

    key = keys.node("outage-test", "r3")
    registrations = [NodeRegistration(open_store(), "outage-test", "r3", NodeRole.READ, OUTAGE_LEASE_TTL_S)]
    try:
        assert wait_until(lambda: refresh_registrations(registrations, open_store), 15, interval_s=0.5)
        stop_etcd(etcd)
        assert not refresh_registrations(registrations, open_store)
        time.sleep(OUTAGE_LEASE_TTL_S + 1)  # down for longer than the lease lives
        etcd = restart_etcd(etcd)

        assert wait_until(lambda: refresh_registrations(registrations, open_store), 15, interval_s=0.5)
        assert registrations[0].store.get(key).value["role"] == "read"
        # The new lease is being refreshed: the key outlives two TTLs. Unrefreshed, it would be gone
        # after one TTL and etcd's next expiry check (about every 500 ms); the second TTL is margin
        # for that check on a busy machine.
        for _ in range(2 * 3):
            time.sleep(OUTAGE_LEASE_TTL_S / 3)
            assert registrations[0].store.get(key) is not None
            assert refresh_registrations(registrations, open_store)
    finally:
        for store in opened:
            store.close()
        stop_etcd(etcd)


def test_down_cleans_up_after_a_daemon_that_was_killed(fresh_home):
    state = up(fresh_home, ClusterConfig(write_nodes=1, read_nodes=0))
    started = {p.pid for p in psutil.Process(state.daemon_pid).children(recursive=True)}
    os.kill(state.daemon_pid, signal.SIGKILL)  # no cleanup: etcd and Ray are orphaned
    assert wait_until(lambda: not _alive(state.daemon_pid), 10)
    assert status(fresh_home)["running"] is False

    stopped = down(fresh_home)

    assert state.etcd_pid in stopped
    assert not [pid for pid in started if _alive(pid)]
    assert not state_path(fresh_home).exists()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
