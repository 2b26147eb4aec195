"""Processes the integration tests start as a Ray-launcher cluster would: node agents and a controller.

``agent_cluster`` puts them together: on a local cluster (``conftest.own_cluster``), a cluster name
whose controller runs as a process and whose nodes agents register.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import pytest

from mafka4.client.bootstrap import PASSWORD_ENV, USER_ENV
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection
from mafka4.security.principals import ADMIN_USER
from mafka4.security.user_store import UserStore

from wait_helpers import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_YAML = REPO_ROOT / "ray_cluster.yaml"
# Long enough that a registration which disappears was revoked, not expired.
LONG_LEASE_TTL_S = 600
STOP_TIMEOUT_S = 30


def node_command(endpoint: str, cluster: str, *arguments: str) -> list[str]:
    return [sys.executable, "-m", "mafka4.runtime.node", "--etcd", endpoint, "--cluster", cluster, *arguments]


def agent_environment() -> dict[str, str]:
    # This checkout's code, whatever the installed mafka4 points at.
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))


class Agent:
    """One node agent subprocess, logging to a file; ``stop`` is SIGTERM and returns the exit code."""

    def __init__(self, endpoint: str, cluster: str, role: str, node_id: str, data_dir: Path, log_path: Path,
                 lease_ttl_s: int = LONG_LEASE_TTL_S):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                node_command(endpoint, cluster, "--role", role, "--node-id", node_id, "--data-dir", str(data_dir),
                             "--node-lease-ttl-s", str(lease_ttl_s)),
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, env=agent_environment(),
            )

    def log_text(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_TIMEOUT_S)

    def close(self) -> None:
        """For finally blocks: stopped as by ``stop`` if it can be, else killed; gone afterwards."""
        try:
            self.stop()
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class ControllerProcess:
    """A controller of one mafka4 cluster name, as the head of ``ray_cluster.yaml`` runs it."""

    def __init__(self, endpoint: str, ray_address: str, cluster: str, log_path: Path, settings: Mapping[str, int] | None = None,
                 arguments: Sequence[str] = ()):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "mafka4.runtime.controller_process", "--etcd", endpoint, "--ray-address",
                 ray_address, "--cluster", cluster, "--controller-id", "controller-agents",
                 *(argument for name, value in (settings or {}).items() for argument in ("--setting", f"{name}={value}")),
                 *arguments],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, env=agent_environment(),
            )

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_text(self) -> str:
        return self.log_path.read_text()


@contextlib.contextmanager
def clients_as_admin_of(store, cluster: str) -> Iterator[None]:
    """While inside, this process's clients authenticate as the admin of ``cluster``: a cluster whose
    nodes agents registered has no admin credential of ``mafka4 up``'s, so one is made here."""
    password = secrets.token_hex(8)
    UserStore(store, cluster).add(ADMIN_USER, password)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(USER_ENV, ADMIN_USER)
        patch.setenv(PASSWORD_ENV, password)
        yield


class AgentCluster:
    """A cluster name on a local cluster: its controller process, and the agents of its nodes, all
    writing their logs to ``home``; ``start_agent`` adds a node, as Ray's autoscaler would."""

    def __init__(self, local, home: Path, name: str, settings: Mapping[str, int]):
        store = local.connection.store
        self.connection = Connection(cluster=name, store=store, state=None)
        self.data_dir = home / "data"
        self.agents: dict[str, Agent] = {}
        self.controller = ControllerProcess(store.endpoint, local.state.ray_address, name, home / "controller.log",
                                            settings)
        self._home = home

    def start_agent(self, node: str, role: str) -> None:
        self.agents[node] = Agent(self.connection.store.endpoint, self.connection.cluster, role, node, self.data_dir,
                                  self._home / f"agent-{node}.log")

    def close(self) -> None:
        """Every agent ever started, then the controller."""
        for agent in self.agents.values():
            agent.close()
        self.controller.close()


@contextlib.contextmanager
def agent_cluster(local, home: Path, prefix: str, settings: Mapping[str, int], nodes: Sequence[tuple[str, str]],
                  wait_s: float) -> Iterator[AgentCluster]:
    """On the local cluster ``local``, a cluster name "<prefix>-<random>" whose controller runs with
    ``settings`` and whose ``nodes`` ((node id, role) pairs) agents register. Inside, once every read
    node of ``nodes`` is live (within ``wait_s``), this process's clients are the name's admin."""
    cluster = AgentCluster(local, home, f"{prefix}-{secrets.token_hex(3)}", settings)
    try:
        for node, role in nodes:
            cluster.start_agent(node, role)
        store, name = cluster.connection.store, cluster.connection.cluster
        reads = sum(role == "read" for _, role in nodes)
        assert wait_until(lambda: len(TopicStore(store, name).live_nodes("read")) == reads, wait_s), \
            f"not {reads} live read nodes: {TopicStore(store, name).live_nodes('read')}"
        with clients_as_admin_of(store, name):
            yield cluster
    finally:
        cluster.close()
