"""Real etcd server processes on loopback, each with its own data directory: one member alone,
or the members of one etcd cluster.

Used by ``mafka4 up`` and by tests; a member as a value (``EtcdServer``, what the cluster record
lists) is ``runtime.etcd_member``'s. A member listens only on 127.0.0.1 (client and peer ports
both free ports chosen at start), is stopped by its PID, and counts as started once it answers
etcd's ``/health`` on its client port, which it does only once its cluster has a leader.

A cluster of N members (``start_etcd_members``) lives in one directory: member ``i`` keeps its
data in ``etcd-<i>`` and logs to ``etcd-<i>.log``; a lone member (N = 1) keeps the layout of
``start_etcd``, ``etcd`` and ``etcd.log``. The members bootstrap together, from one
``--initial-cluster`` naming every member's peer URL and a cluster token of their own. Members
find each other by those peer URLs for the cluster's whole life, so they are recorded in
``etcd-members.json`` and a member started again on its data (``restart_etcd``, or
``start_etcd_members`` on a directory holding a cluster) keeps its peer port; its client port
may change, since members publish their client URLs anew at every start. A lone member needs
no peer, so it takes a new peer port at every start.

Every member compacts its history older than ``ETCD_HISTORY_RETENTION_S`` (periodic
auto-compaction), so its database stops growing with the number of writes ever made.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

from mafka4.errors import ClusterNotRunning, InvalidConfig
from mafka4.limits import (ETCD_HEALTH_PROBE_INTERVAL_S, ETCD_HEALTH_PROBE_TIMEOUT_S, ETCD_HISTORY_RETENTION_S,
                           ETCD_MEMBER_COUNTS, ETCD_START_ATTEMPTS_MAX, ETCD_STOP_TIMEOUT_S, ETCD_TXN_OPS_MAX)
from mafka4.runtime.etcd_member import LONE_MEMBER_DIR, EtcdServer
from mafka4.runtime.ports import LOOPBACK, free_loopback_port

ETCD_BINARY_DEFAULT = "/usr/bin/etcd"
MEMBERS_RECORD_NAME = "etcd-members.json"


def etcd_binary() -> str:
    binary = os.environ.get("MAFKA4_ETCD_BINARY") or shutil.which("etcd") or ETCD_BINARY_DEFAULT
    if not os.path.exists(binary):
        raise ClusterNotRunning(
            f"etcd server binary not found at {binary}: install it with "
            f"'apt-get install etcd-server' or set MAFKA4_ETCD_BINARY"
        )
    return binary


def start_etcd(data_dir: str | os.PathLike, timeout_s: float = 30.0) -> EtcdServer:
    """Start a lone etcd and wait until it is healthy; raise ClusterNotRunning if it is not."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"
    last_error = ""
    for _ in range(ETCD_START_ATTEMPTS_MAX):
        server = EtcdServer(0, free_loopback_port(), str(data_dir), str(log_path))
        process = _spawn(server, free_loopback_port())
        last_error = _wait_healthy([(server, process)], timeout_s)
        if not last_error:
            return _with_pid(server, process)
        _terminate(process)
    raise ClusterNotRunning(f"could not start etcd ({last_error}); see {log_path}")


def member_data_dirs(directory: Path, members: int) -> list[Path]:
    """Where ``start_etcd_members(directory, members)`` keeps each member's data."""
    directory = Path(directory)
    return [directory / LONE_MEMBER_DIR] if members == 1 else [directory / f"etcd-{i}" for i in range(members)]


def check_etcd_layout(directory: Path, members: int) -> None:
    """InvalidConfig if ``directory`` holds the data of an etcd with another member count: starting
    this one would hide that metadata (topics, offsets) rather than use it."""
    directory = Path(directory)
    for other in ETCD_MEMBER_COUNTS:
        found = [d for d in member_data_dirs(directory, other) if _holds_data(d)] if other != members else []
        if found:
            raise InvalidConfig(
                f"{directory} holds the data of a {other}-member etcd ({', '.join(map(str, found))}); start it with "
                f"--etcd-members {other}, or delete those directories to start with no metadata")


def start_etcd_members(directory: Path, members: int, timeout_s: float = 30.0) -> tuple[EtcdServer, ...]:
    """Start ``members`` etcd members in ``directory`` as one cluster and wait until all are healthy.

    A fresh directory bootstraps a new cluster; one that holds this cluster's data starts its
    members again on their recorded peer ports. Raises ClusterNotRunning if the members do not
    become healthy (having stopped them), InvalidConfig if the directory holds another layout
    or a partial cluster.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    check_etcd_layout(directory, members)
    if members == 1:
        return (start_etcd(member_data_dirs(directory, 1)[0], timeout_s),)
    data_dirs = member_data_dirs(directory, members)
    with_data = [d for d in data_dirs if _holds_data(d)]
    record_path = directory / MEMBERS_RECORD_NAME
    if not with_data:
        return _bootstrap(directory, data_dirs, timeout_s)
    if len(with_data) < members or not record_path.exists():
        missing = sorted(set(map(str, data_dirs)) - set(map(str, with_data))) or [str(record_path)]
        raise InvalidConfig(
            f"{directory} holds part of a {members}-member etcd: {', '.join(missing)} missing; "
            f"delete {', '.join(map(str, data_dirs))} and {record_path} to start with no metadata")
    return _start_recorded(directory, json.loads(record_path.read_text()), timeout_s)


def _bootstrap(directory: Path, data_dirs: list[Path], timeout_s: float) -> tuple[EtcdServer, ...]:
    last_error = ""
    for _ in range(ETCD_START_ATTEMPTS_MAX):
        ports = _distinct_free_ports(2 * len(data_dirs))
        names = [data_dir.name for data_dir in data_dirs]
        peer_ports = ports[len(data_dirs):]
        initial_cluster = ",".join(f"{name}=http://{LOOPBACK}:{port}" for name, port in zip(names, peer_ports))
        token = f"mafka4-{secrets.token_hex(6)}"
        servers = [EtcdServer(0, client_port, str(data_dir), str(directory / f"{name}.log"), name, peer_port,
                              initial_cluster, token)
                   for data_dir, name, client_port, peer_port in zip(data_dirs, names, ports, peer_ports)]
        started, last_error = _start_all(servers, timeout_s)
        if started:
            _write_record(directory, started)
            return started
        for data_dir in data_dirs:  # half a bootstrap: the next attempt starts from empty directories
            shutil.rmtree(data_dir, ignore_errors=True)
    raise ClusterNotRunning(f"could not start {len(data_dirs)} etcd members ({last_error}); see their logs in {directory}")


def _start_recorded(directory: Path, record: dict, timeout_s: float) -> tuple[EtcdServer, ...]:
    last_error = ""
    for _ in range(ETCD_START_ATTEMPTS_MAX):
        client_ports = _distinct_free_ports(len(record["members"]))
        servers = [EtcdServer(0, client_port, str(directory / member["name"]), str(directory / f"{member['name']}.log"),
                              member["name"], member["peer_port"], record["initial_cluster"], record["cluster_token"])
                   for member, client_port in zip(record["members"], client_ports)]
        started, last_error = _start_all(servers, timeout_s)
        if started:
            return started
    raise ClusterNotRunning(f"could not start the etcd members recorded in {directory / MEMBERS_RECORD_NAME} "
                            f"({last_error}; a peer port taken by another process stops its member); "
                            f"see their logs in {directory}")


def _start_all(servers: list[EtcdServer], timeout_s: float) -> tuple[tuple[EtcdServer, ...], str]:
    """Spawn every member, wait until all are healthy; on failure stop them all and say why."""
    spawned = []
    for server in servers:
        Path(server.data_dir).mkdir(parents=True, exist_ok=True)
        spawned.append((server, _spawn(server, server.peer_port)))
    error = _wait_healthy(spawned, timeout_s)
    if error:
        for _, process in spawned:
            _terminate(process)
        return (), error
    return tuple(_with_pid(server, process) for server, process in spawned), ""


def _write_record(directory: Path, servers: tuple[EtcdServer, ...]) -> None:
    record = {"initial_cluster": servers[0].initial_cluster, "cluster_token": servers[0].cluster_token,
              "members": [{"name": server.name, "peer_port": server.peer_port} for server in servers]}
    path = directory / MEMBERS_RECORD_NAME
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(record, indent=2))
    os.replace(temporary, path)


def _holds_data(data_dir: Path) -> bool:
    return (Path(data_dir) / "member").is_dir()


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:  # two probes can return the same released port
        port = free_loopback_port()
        if port not in ports:
            ports.append(port)
    return ports


def _with_pid(server: EtcdServer, process: subprocess.Popen) -> EtcdServer:
    return dataclasses.replace(server, pid=process.pid)


def _wait_healthy(spawned: list[tuple[EtcdServer, subprocess.Popen]], timeout_s: float) -> str:
    """Wait until every member is healthy: "" then, else why not (one exited, or the time ran out)."""
    deadline = time.monotonic() + timeout_s
    waiting = list(spawned)
    while waiting:
        exited = [(server, process) for server, process in waiting if process.poll() is not None]
        if exited:
            server, process = exited[0]
            return f"etcd member {server.name} exited with {process.returncode}"
        if time.monotonic() > deadline:
            return f"etcd members {', '.join(server.name for server, _ in waiting)} not healthy within {timeout_s:g} s"
        waiting = [(server, process) for server, process in waiting if not _healthy(server.host, server.client_port)]
        if waiting:
            time.sleep(ETCD_HEALTH_PROBE_INTERVAL_S)
    return ""


def member_healthy(server: EtcdServer) -> bool:
    """Whether the member answers etcd's health check (it has a leader and serves reads)."""
    return _healthy(server.host, server.client_port)


def _healthy(host: str, client_port: int) -> bool:
    """etcd's own health check: it answers true once the member has a leader and serves reads."""
    import http.client  # here: a client reads the cluster's record through this module and never probes etcd

    connection = http.client.HTTPConnection(host, client_port, timeout=ETCD_HEALTH_PROBE_TIMEOUT_S)
    try:
        connection.request("GET", "/health")
        response = connection.getresponse()
        return response.status == 200 and json.loads(response.read()).get("health") == "true"
    except (OSError, ValueError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _spawn(server: EtcdServer, peer_port: int) -> subprocess.Popen:
    client_url = f"http://{server.host}:{server.client_port}"
    peer_url = f"http://{server.host}:{peer_port}"
    command = [
        etcd_binary(),
        "--name", server.name,
        "--data-dir", server.data_dir,
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", server.initial_cluster or f"{server.name}={peer_url}",
        "--initial-cluster-state", "new",
        *(("--initial-cluster-token", server.cluster_token) if server.cluster_token else ()),
        "--max-txn-ops", str(ETCD_TXN_OPS_MAX),
        # Without compaction etcd keeps every revision until it hits its quota (mafka4.limits).
        "--auto-compaction-mode", "periodic",
        "--auto-compaction-retention", f"{ETCD_HISTORY_RETENTION_S}s",
        "--log-level", "warn",
    ]
    with open(server.log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=ETCD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def start_etcd_member(server: EtcdServer, timeout_s: float = 30.0) -> EtcdServer:
    """Start one member as ``server`` describes it (ports, data dir, its cluster's peers and token)
    and wait until it is healthy; raise ClusterNotRunning (having stopped it) if it is not.

    A member of a cluster is healthy only once a quorum runs: the members of a cluster spread
    over machines (``mafka4 deploy``) are each started by one call on their own machine, all
    at about the same time.
    """
    Path(server.data_dir).mkdir(parents=True, exist_ok=True)
    process = _spawn(server, server.peer_port)
    error = _wait_healthy([(server, process)], timeout_s)
    if not error:
        return _with_pid(server, process)
    _terminate(process)
    raise ClusterNotRunning(f"could not start etcd member {server.name} on {server.endpoint} ({error}); "
                            f"see {server.log_path}")


def restart_etcd(server: EtcdServer, timeout_s: float = 30.0) -> EtcdServer:
    """Start a stopped member again on its client port and data dir, keeping its data (and, in a
    cluster, its peer port); wait until it is healthy, which in a cluster needs a quorum."""
    peer_port = server.peer_port if server.initial_cluster else free_loopback_port()
    return start_etcd_member(dataclasses.replace(server, pid=0, peer_port=peer_port), timeout_s)


def stop_etcd(server: EtcdServer, timeout_s: float = ETCD_STOP_TIMEOUT_S) -> None:
    """Stop the server by its PID (SIGTERM, then SIGKILL) and reap it if it is our child."""
    try:
        os.kill(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(server.pid):
            return
        time.sleep(0.05)
    try:
        os.kill(server.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _alive(server.pid)


def stop_etcd_members(servers, timeout_s: float = ETCD_STOP_TIMEOUT_S) -> None:
    """Stop every member by its PID, one after another.

    One at a time, because a leader asked to stop first hands its leadership to a connected
    peer: with all members stopping at once it may pick one that is going away and wait for
    the hand-over until it times out.
    """
    for server in servers:
        stop_etcd(server, timeout_s)


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return False
    except ChildProcessError:
        pass  # not our child: fall back to a signal probe
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
