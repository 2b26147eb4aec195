"""The actors ``mafka4 deploy`` leaves running on a Ray cluster, each owning one process on its node.

* ``EtcdMemberHost``: ``<cluster>/deploy/etcd/<member>``, pinned to a head-type node, owns one
  etcd member's process (started by ``etcd_server.start_etcd_member``, so with the flags and
  compaction of every mafka4 etcd) listening on its node's address. Its data lives on that
  node in ``<data dir>/.etcd/<member>`` (a node id cannot start with "."), and next to it
  ``<member>.json`` records how it was started (peer port, its cluster's peers, token): a
  member of three started again on its data must keep its peer URL, and the record is how
  the next deploy knows it.
* ``ControllerHost``: ``<cluster>/deploy/controller``, pinned to the first member's node, runs
  ``controller_process --node-agents`` as its child (which keeps the node agents) and starts
  it again if it exits.

Both are detached, ``num_cpus=0``, and named in namespace "mafka4": the names are the
deployment's record, so ``status`` and ``undeploy`` find it from the Ray address alone. A
host's process is stopped by ``stop`` (by its PID) before the actor is killed. A process whose
actor died without ``stop`` (its worker crashed, ``ray stop`` on its node) outlives it, so each
host records its process's PID on its node (the member's record, ``controller.pid``), and the
host that a later deploy starts there stops that orphan first (if the PID's command line still
names it: a reused PID is left alone). A member started again keeps its recorded client port
when it is free: the node agents, read nodes and replicas that outlived it were given that one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import ray

from mafka4.limits import CONTROLLER_STOP_TIMEOUT_S, DEPLOY_CONTROLLER_CHECK_INTERVAL_S, ETCD_STOP_TIMEOUT_S
from mafka4.runtime.etcd_member import EtcdServer
from mafka4.runtime.etcd_server import etcd_binary, start_etcd_member, stop_etcd
from mafka4.runtime.ports import LOOPBACK, free_loopback_port, is_listening

log = logging.getLogger("mafka4.deploy")

ETCD_DIR = ".etcd"


def stop_orphan(pid: int, command_part: str) -> None:
    """Stop process ``pid`` (SIGTERM, SIGKILL after ETCD_STOP_TIMEOUT_S) if it runs and its command line
    holds ``command_part``: the process an earlier host started and left behind (module docstring)."""
    if pid <= 0:
        return
    try:
        process = psutil.Process(pid)
        if command_part not in " ".join(process.cmdline()) + " ":
            return
        log.warning("stopping pid %d, left running by an actor that died: %s", pid, " ".join(process.cmdline()))
        process.terminate()
        try:
            process.wait(ETCD_STOP_TIMEOUT_S)
        except psutil.TimeoutExpired:
            process.kill()
            process.wait(ETCD_STOP_TIMEOUT_S)
    except psutil.NoSuchProcess:
        return


class EtcdMemberHost:
    """One etcd member on this actor's node (module docstring)."""

    def __init__(self, name: str, data_dir: str):
        logging.getLogger("mafka4").setLevel(logging.INFO)
        root = Path(data_dir).expanduser().resolve() / ETCD_DIR
        self._name = name
        self._data_dir = root / name
        self._record_path = root / f"{name}.json"
        self._server: EtcdServer | None = None

    def propose(self) -> EtcdServer:
        """The member as this node would start it: as recorded by an earlier start on its data (peer port,
        peers, token; a client port of its own, as members publish theirs at every start), else on free
        ports with no peers named yet (the deployer names them all). Raises ClusterNotRunning if this node
        has no etcd binary."""
        etcd_binary()
        host = ray.util.get_node_ip_address()
        client_port = free_loopback_port()
        if self._record_path.exists() and (self._data_dir / "member").is_dir():
            recorded = EtcdServer(**json.loads(self._record_path.read_text()))
            stop_orphan(recorded.pid, f"--data-dir {self._data_dir} ")
            if recorded.host == host and not is_listening(recorded.client_port, host):
                client_port = recorded.client_port
            return dataclasses.replace(recorded, pid=0, client_port=client_port, host=host)
        peer_port = free_loopback_port()
        while peer_port == client_port:  # two probes can return the same released port
            peer_port = free_loopback_port()
        return EtcdServer(0, client_port, str(self._data_dir), str(self._data_dir.with_suffix(".log")), self._name,
                          peer_port, "", "", host)

    def start(self, server: EtcdServer, timeout_s: float) -> EtcdServer:
        """Start the member ``propose`` gave (with its peers named) unless it runs; wait until healthy."""
        assert server.name == self._name and server.data_dir == str(self._data_dir), server
        if self._server is not None:
            return self._server
        self._server = start_etcd_member(server, timeout_s)
        record = dataclasses.asdict(self._server)
        temporary = self._record_path.with_name(f".{self._record_path.name}.tmp")
        temporary.write_text(json.dumps(record, indent=2))
        os.replace(temporary, self._record_path)
        log.info("etcd member %s started on %s, pid %d", server.name, self._server.endpoint, self._server.pid)
        return self._server

    def member(self) -> EtcdServer | None:
        """The running member, None before ``start`` and after ``stop``."""
        return self._server

    def ray_node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def stop(self) -> None:
        """Stop the member by its PID (its data stays)."""
        if self._server is not None:
            stop_etcd(self._server)
            log.info("etcd member %s stopped", self._name)
            self._server = None


class ControllerHost:
    """The deployed controller's process, started again whenever it exits, until ``stop``."""

    def __init__(self, arguments: list[str], log_path: str):
        """``arguments``: ``controller_process``'s, run by this node's Python (the actor's own)."""
        logging.getLogger("mafka4").setLevel(logging.INFO)
        self._command = [sys.executable, "-m", "mafka4.runtime.controller_process", *arguments]
        self._log_path = Path(log_path).expanduser().resolve()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        self._pid_path = self._log_path.with_suffix(".pid")
        if self._pid_path.exists():
            stop_orphan(int(self._pid_path.read_text() or 0), "mafka4.runtime.controller_process")
        self._environment = dict(os.environ)
        if ray.util.get_node_ip_address() != LOOPBACK:
            # mafka4 keeps Ray on loopback unless told otherwise (runtime.environment); on a cluster of
            # machines the controller must join Ray by this node's address.
            self._environment["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "1"
        self._lock = threading.Lock()  # the keeper thread and stop both touch the process
        self._stopping = threading.Event()
        self._starts = 0
        self._process = self._spawn()
        threading.Thread(target=self._keep_running, name="controller-keeper", daemon=True).start()

    def _spawn(self) -> subprocess.Popen:
        self._starts += 1
        with open(self._log_path, "ab") as log_file:
            process = subprocess.Popen(self._command, stdout=log_file, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=self._log_path.parent, env=self._environment)
        self._pid_path.write_text(str(process.pid))
        log.info("controller started, pid %d, log %s", process.pid, self._log_path)
        return process

    def _keep_running(self) -> None:
        while not self._stopping.wait(DEPLOY_CONTROLLER_CHECK_INTERVAL_S):
            with self._lock:
                if not self._stopping.is_set() and self._process.poll() is not None:
                    log.warning("controller exited with code %s; starting it again", self._process.returncode)
                    self._process = self._spawn()

    def report(self) -> dict:
        with self._lock:
            return {"pid": self._process.pid, "running": self._process.poll() is None, "starts": self._starts,
                    "log": str(self._log_path), "ray_node_id": ray.get_runtime_context().get_node_id()}

    def stop(self) -> None:
        """SIGTERM the controller (it stops being active and leaves Ray), SIGKILL after CONTROLLER_STOP_TIMEOUT_S."""
        self._stopping.set()
        with self._lock:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=CONTROLLER_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
