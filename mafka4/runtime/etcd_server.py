"""A real etcd server process on loopback, with its own data directory.

Used by ``mafka4 up`` and by tests. The server listens only on 127.0.0.1 (client and peer
ports both free ports chosen at start) and is stopped by its PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from mafka4.errors import ClusterNotRunning
from mafka4.limits import ETCD_START_ATTEMPTS_MAX, ETCD_STOP_TIMEOUT_S, ETCD_TXN_OPS_MAX
from mafka4.runtime.ports import LOOPBACK, free_loopback_port, is_listening

ETCD_BINARY_DEFAULT = "/usr/bin/etcd"


def etcd_binary() -> str:
    binary = os.environ.get("MAFKA4_ETCD_BINARY") or shutil.which("etcd") or ETCD_BINARY_DEFAULT
    if not os.path.exists(binary):
        raise ClusterNotRunning(
            f"etcd server binary not found at {binary}: install it with "
            f"'apt-get install etcd-server' or set MAFKA4_ETCD_BINARY"
        )
    return binary


@dataclass(frozen=True, slots=True)
class EtcdServer:
    pid: int
    client_port: int
    data_dir: str
    log_path: str

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.client_port}"


def start_etcd(data_dir: str | os.PathLike, timeout_s: float = 30.0) -> EtcdServer:
    """Start etcd and wait until its client port answers; raise ClusterNotRunning if it does not."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir.parent / f"{data_dir.name}.log"
    last_error = ""
    for _ in range(ETCD_START_ATTEMPTS_MAX):
        client_port = free_loopback_port()
        process = _spawn(data_dir, client_port, free_loopback_port(), log_path)
        if _answers(process, client_port, timeout_s):
            return EtcdServer(process.pid, client_port, str(data_dir), str(log_path))
        last_error = f"etcd exited with {process.poll()}" if process.poll() is not None else "etcd did not answer"
        _terminate(process)
    raise ClusterNotRunning(f"could not start etcd ({last_error}); see {log_path}")


def _answers(process: subprocess.Popen, client_port: int, timeout_s: float) -> bool:
    """Wait until the server listens on its client port; False if it exits or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        if is_listening(client_port):
            return True
        time.sleep(0.05)
    return False


def _spawn(data_dir: Path, client_port: int, peer_port: int, log_path: Path) -> subprocess.Popen:
    client_url = f"http://{LOOPBACK}:{client_port}"
    peer_url = f"http://{LOOPBACK}:{peer_port}"
    command = [
        etcd_binary(),
        "--name", "mafka4",
        "--data-dir", str(data_dir),
        "--listen-client-urls", client_url,
        "--advertise-client-urls", client_url,
        "--listen-peer-urls", peer_url,
        "--initial-advertise-peer-urls", peer_url,
        "--initial-cluster", f"mafka4={peer_url}",
        "--initial-cluster-state", "new",
        "--max-txn-ops", str(ETCD_TXN_OPS_MAX),
        "--log-level", "warn",
    ]
    with open(log_path, "ab") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=ETCD_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def restart_etcd(server: EtcdServer, timeout_s: float = 30.0) -> EtcdServer:
    """Start etcd again on the same port and data dir (after stop_etcd), keeping its data."""
    client_port = server.client_port
    process = _spawn(Path(server.data_dir), client_port, free_loopback_port(), Path(server.log_path))
    if _answers(process, client_port, timeout_s):
        return EtcdServer(process.pid, client_port, server.data_dir, server.log_path)
    _terminate(process)
    raise ClusterNotRunning(f"could not restart etcd on port {client_port}; see {server.log_path}")


def stop_etcd(server: EtcdServer, timeout_s: float = 10.0) -> None:
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
