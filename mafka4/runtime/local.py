"""``mafka4 up`` / ``down`` / ``status`` for a cluster on this machine.

``up`` spawns the daemon (``mafka4.runtime.daemon``) in a session of its own and waits for
its ready record; ``down`` SIGTERMs it and then SIGKILLs, by PID, whatever it had started
and is still alive. Those PIDs are listed *before* the signal, as the daemon's descendants
plus the members of its session: once raylets die their workers are re-parented and can no
longer be found from the daemon. A record whose daemon is gone is stale: ``up`` and ``down``
kill what that daemon left running (found by its session, confirmed by the cluster's
directories on the command lines) and forget the record instead of failing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from mafka4.errors import ClusterAlreadyRunning, ClusterNotRunning, CoordinatorUnavailable
from mafka4.limits import (DAEMON_STOP_TIMEOUT_S, LOCAL_CLUSTER_POLL_INTERVAL_S,
                           STATUS_ETCD_TIMEOUT_S)
from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.scrape import cluster_figures
from mafka4.metrics.targets import liveness_keys, liveness_prefixes, metrics_targets, targets_by_process
from mafka4.runtime.daemon import LOG_FILE_NAME
from mafka4.runtime.environment import ray_environment
from mafka4.runtime.etcd_member import EtcdServer
from mafka4.runtime.etcd_server import check_etcd_layout
from mafka4.runtime.ports import is_listening
from mafka4.runtime.session_processes import alive, descendants, kill_pids, session_members, wait_gone
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT, ClusterState, load_state, remove_state

DAEMON_MODULE = "mafka4.runtime.daemon"


def daemon_alive(state: ClusterState) -> bool:
    """True if the recorded daemon PID is alive and still is this home's daemon (not a reused PID)."""
    try:
        process = psutil.Process(state.daemon_pid)
        command = process.cmdline()
        return process.status() != psutil.STATUS_ZOMBIE and DAEMON_MODULE in command and state.home in command
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def up(home: Path, config: ClusterConfig = ClusterConfig(), cluster: str = CLUSTER_NAME_DEFAULT) -> ClusterState:
    """Start a cluster in ``home`` and return its state once etcd, Ray and registrations are up.

    Raises ClusterAlreadyRunning if one runs there, ClusterNotRunning if it cannot start
    within ``config.start_timeout_s`` (whatever it started is killed), InvalidConfig if
    ``home`` holds the metadata of an etcd with another member count.
    """
    home = Path(home).expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    previous = load_state(home)
    if previous is not None and daemon_alive(previous):
        raise ClusterAlreadyRunning(
            f"a cluster already runs at {home} (daemon pid {previous.daemon_pid}, etcd {previous.etcd_endpoint}); "
            f"stop it with 'mafka4 down' or choose another MAFKA4_HOME"
        )
    if previous is not None:
        kill_pids(_stale_leftovers(previous))
        remove_state(home)
    check_etcd_layout(home, config.etcd_members)
    command = [
        sys.executable, "-m", DAEMON_MODULE, "--home", str(home), "--cluster", cluster,
        "--write-nodes", str(config.write_nodes), "--read-nodes", str(config.read_nodes),
        "--etcd-members", str(config.etcd_members),
        "--node-lease-ttl-s", str(config.node_lease_ttl_s), "--start-timeout-s", str(config.start_timeout_s),
        *(argument for name, value in config.controller_settings
          for argument in ("--controller-setting", f"{name}={value}")),
    ]
    log_path = home / LOG_FILE_NAME
    with open(log_path, "ab") as log:
        # Own session: a Ctrl-C in the caller's terminal must not reach the cluster.
        daemon = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=home, env=ray_environment() | dict(os.environ), start_new_session=True,
        )
    return _wait_ready(home, daemon, config.start_timeout_s, log_path)


def _wait_ready(home: Path, daemon: subprocess.Popen, timeout_s: float, log_path: Path) -> ClusterState:
    """Wait for the daemon's ready record; on failure kill all it started and raise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = load_state(home)
        if state is not None and state.ready and state.daemon_pid == daemon.pid:
            return state
        # Not reaped yet (no poll()): until then the daemon's PID, which is the id of the session
        # holding everything it started, cannot be reused while we clean up.
        if not alive(daemon.pid, reap=False):
            kill_pids(session_members(daemon.pid))
            daemon.wait()
            remove_state(home)
            raise ClusterNotRunning(f"the cluster daemon exited with code {daemon.returncode}; see {log_path}")
        time.sleep(LOCAL_CLUSTER_POLL_INTERVAL_S)
    _terminate(daemon.pid)
    kill_pids(session_members(daemon.pid) | {daemon.pid})
    daemon.wait()
    remove_state(home)
    raise ClusterNotRunning(f"the cluster did not start within {timeout_s} s and was stopped; see {log_path}")


def down(home: Path) -> list[int]:
    """Stop the cluster recorded in ``home``; return the PIDs that were stopped.

    Raises ClusterNotRunning if nothing is recorded there.
    """
    home = Path(home).expanduser().resolve()
    state = load_state(home)
    if state is None:
        raise ClusterNotRunning(f"no local cluster at {home}: nothing to stop")
    if daemon_alive(state):
        # Listed before the signal: the daemon is reaped by someone else once it exits.
        pids = cluster_pids(state)
        _terminate(state.daemon_pid)
    else:
        pids = _stale_leftovers(state)
    kill_pids(pids)
    remove_state(home)
    return sorted(pids)


def cluster_pids(state: ClusterState) -> set[int]:
    """The daemon and every process it started that still runs: etcd members, Ray's processes and
    actor workers, the controller. Its descendants plus its session's members, since a worker whose
    raylet died is re-parented and found only by its session."""
    return {state.daemon_pid, *descendants(state.daemon_pid), *session_members(state.daemon_pid)}


def _terminate(daemon_pid: int) -> None:
    """SIGTERM the daemon, which then stops its cluster in order; wait up to DAEMON_STOP_TIMEOUT_S."""
    try:
        os.kill(daemon_pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    wait_gone([daemon_pid], DAEMON_STOP_TIMEOUT_S)


def _stale_leftovers(state: ClusterState) -> set[int]:
    """What a dead daemon left running: its session's members, if they are this cluster's.

    The session id is the dead daemon's PID, which may since have been reused, so the
    members count as ours only if one of them runs on this cluster's etcd or Ray directory.
    """
    members = session_members(state.daemon_pid)
    markers = (*(member.data_dir for member in state.etcd_members), state.ray_temp_dir)
    return members if any(_mentions(pid, markers) for pid in members) else set()


def _mentions(pid: int, markers: tuple[str, ...]) -> bool:
    try:
        command = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return any(marker in command for marker in markers)


def _is_etcd_member(member: EtcdServer) -> bool:
    """True if ``member.pid`` is alive and still is that member (not a reused PID)."""
    try:
        process = psutil.Process(member.pid)
        return (process.status() != psutil.STATUS_ZOMBIE and "etcd" in process.name()
                and member.data_dir in process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def status(home: Path) -> dict:
    """What runs in ``home``: the record, which PIDs live, which nodes etcd has registered, where
    each process serves metrics (``metrics``) and the cluster's figures read from them (``figures``:
    ``metrics.scrape``)."""
    home = Path(home).expanduser().resolve()
    state = load_state(home)
    if state is None:
        return {"home": str(home), "running": False, "message": f"no local cluster at {home}"}
    members = [{"name": member.name, "endpoint": member.endpoint, "pid": member.pid, "alive": _is_etcd_member(member),
                "listening": is_listening(member.client_port)} for member in state.etcd_members]
    report = {
        "home": str(home), "cluster": state.cluster, "ready": state.ready,
        "running": daemon_alive(state),
        # etcd_alive: every member runs; one member down leaves a 3-member etcd working.
        "daemon_pid": state.daemon_pid, "etcd_pid": state.etcd_pid, "etcd_alive": all(m["alive"] for m in members),
        "etcd_endpoint": state.etcd_endpoint, "etcd_members": members, "ray_address": state.ray_address,
        "ray_reachable": is_listening(int(state.ray_address.rpartition(":")[2])),
        "write_nodes": list(state.write_nodes), "read_nodes": list(state.read_nodes),
    }
    if any(member["listening"] for member in members):
        report.update(_registered_nodes(state))
        if "metrics" in report:  # scraped after etcd's client is closed: a scrape is bounded, never waits on etcd
            report["figures"] = cluster_figures(report["metrics"])
    else:
        report.update(etcd_reachable=False, registered_nodes={})
    return report


def _registered_nodes(state: ClusterState) -> dict:
    try:
        store = MetadataStore(state.etcd_endpoint, timeout_s=STATUS_ETCD_TIMEOUT_S)
    except Exception as error:  # the client constructor may fail before any request
        return {"etcd_reachable": False, "etcd_error": str(error), "registered_nodes": {}}
    try:
        registered = _read_with_each_member(
            store, lambda: {item.value["node_id"]: item.value for item in store.get_prefix(keys.nodes_prefix(state.cluster))})
        leader = _read_with_each_member(store, store.leader_name)
        metrics = _read_with_each_member(store, lambda: metrics_status(store, state.cluster))
        scaling = _read_with_each_member(store, lambda: read_scaling_status(store, state.cluster))
        listeners = _read_with_each_member(store, lambda: kafka_listeners(store, state.cluster))
    except CoordinatorUnavailable as error:
        return {"etcd_reachable": False, "etcd_error": error.message, "registered_nodes": {}}
    finally:
        store.close()
    return {"etcd_reachable": True, "etcd_leader": leader, "registered_nodes": registered, "metrics": metrics,
            "kafka_listeners": listeners, **scaling}


def kafka_listeners(store: MetadataStore, cluster: str) -> dict[str, str]:
    """Read node id -> where it serves Kafka clients (``kafka.listener``), for every live read node
    that does: a Kafka client's ``bootstrap.servers``."""
    prefix = keys.read_nodes_prefix(cluster)
    return {item.key[len(prefix):]: item.value["kafka"] for item in store.get_prefix(prefix)
            if isinstance(item.value, dict) and item.value.get("kafka")}
def metrics_status(store: MetadataStore, cluster: str) -> dict[str, dict[str, str]]:
    """Where each live read node, replica and the active controller serve Prometheus metrics, by process
    (``metrics.targets``): ``{"read_node": {node id: address}, "replica": {"<topic>-<p>/<replica>": address},
    "controller": {controller id: address}}``."""
    found = store.get_prefixes(liveness_prefixes(cluster), liveness_keys(cluster))
    return targets_by_process(metrics_targets(cluster, [(item.key, item.value) for items in found.values()
                                                        for item in items]))


def read_scaling_status(store: MetadataStore, cluster: str) -> dict:
    """The controller's last read-node scaling decision and the replica moves in flight
    (``control.read_scaling``), under "read_scaling" and "replica_moves"; {} if the controller
    never decided (read-node scaling is off) and no move is recorded."""
    decision = store.get(keys.read_scaling(cluster))
    moves = []
    for item in store.get_prefix(keys.replica_moves_prefix(cluster)):
        parsed = keys.parse_replica_move(cluster, item.key)
        if parsed is not None:
            moves.append({"topic": parsed[0], "vp": parsed[1], **item.value})
    if decision is None and not moves:
        return {}
    return {"read_scaling": None if decision is None else decision.value, "replica_moves": moves}


def _read_with_each_member(store: MetadataStore, read):
    """``read()``, tried once on each member in turn (a failed call moves the store to the next)."""
    for _ in store.members[1:]:
        try:
            return read()
        except CoordinatorUnavailable:
            continue
    return read()
