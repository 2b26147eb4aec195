"""The process that owns a local cluster: etcd, the Ray nodes and the node registrations.

    python -m mafka4.runtime.daemon --home H --write-nodes N --read-nodes M [--cluster NAME]

Start order: etcd (``<home>/etcd``), the Ray cluster, the cluster config key, one lease-bound
registration per simulated node, the controller (a child process,
``mafka4.coordinator.controller``, logging to ``<home>/controller.log``), then
``<home>/cluster.json`` with ``ready=True``. Until SIGTERM/SIGINT it refreshes every
registration each ``node_lease_ttl_s / 3`` seconds and starts the controller again if it
exited. Stop order is the reverse: stop the controller, revoke the leases, stop Ray, stop
etcd, remove cluster.json, exit 0. A signal during startup stops whatever was already
started. Logs go to ``<home>/daemon.log``.

``NodeRegistration`` keeps one node's key alive; ``refresh_registrations`` is one refresh
period for all of them and survives etcd outages: after a failed call every registration
moves to a fresh etcd client and is written again under a new lease once etcd answers
(a registration whose lease expired meanwhile reappears then too).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from mafka4.coordinator import keys
from mafka4.coordinator.store import MetadataStore
from mafka4.errors import CoordinatorUnavailable
from mafka4.limits import ClusterConfig
from mafka4.runtime.environment import apply_ray_environment, ray_temp_dir
from mafka4.runtime.ray_cluster import NodeRole, node_ids, node_resource
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT, ClusterState, remove_state, save_state

LOG_FILE_NAME = "daemon.log"
CONTROLLER_LOG_FILE_NAME = "controller.log"
CONTROLLER_ID = "controller-0"
CONTROLLER_STOP_TIMEOUT_S = 15.0  # SIGTERM grace: the controller revokes its lease and leaves Ray
# Requests from the daemon must fail well within one refresh period, or one slow call
# could let every lease expire.
STORE_TIMEOUT_S_MAX = 5.0

log = logging.getLogger("mafka4.daemon")


class NodeRegistration:
    """One simulated node's key ``keys.node(cluster, node_id)``, bound to its own lease."""

    def __init__(self, store: MetadataStore, cluster: str, node_id: str, role: NodeRole, lease_ttl_s: int):
        self.store = store
        self.key = keys.node(cluster, node_id)
        self.value = {"node_id": node_id, "role": NodeRole(role).value, "resource": node_resource(node_id)}
        self.lease_ttl_s = lease_ttl_s
        self.lease = None

    def keep_alive(self) -> bool:
        """Refresh the lease, or register anew if there is none or it expired. True if registered.

        Raises CoordinatorUnavailable if etcd does not answer; the caller retries next period.
        """
        if self.lease is not None:
            self.store.refresh_lease(self.lease)
            # An expired lease refreshes without error but its key is gone: detect it by reading.
            if self.store.get(self.key) is not None:
                return True
            log.warning("registration %s expired; registering again with a new lease", self.key)
        self.lease = self.store.grant_lease(self.lease_ttl_s)
        self.store.put(self.key, self.value, lease=self.lease)
        return True

    def rebind(self, store: MetadataStore) -> None:
        """Use another client; the next ``keep_alive`` registers under a new lease.

        A lease object refreshes only through the client that granted it, so it is dropped
        (left to expire; the new put detaches the key from it).
        """
        self.store = store
        self.lease = None

    def revoke(self) -> None:
        """Remove the registration now instead of waiting for the lease to expire."""
        if self.lease is not None:
            self.store.revoke_lease(self.lease)
            self.lease = None


def refresh_registrations(registrations: list[NodeRegistration], open_store: Callable[[], MetadataStore]) -> bool:
    """One refresh period: keep every registration alive; False if etcd did not answer.

    After a failure every registration moves to a fresh client from ``open_store``: the etcd3
    client refuses an endpoint for 300 s after one failed call, far longer than a lease lives.
    """
    try:
        for registration in registrations:
            registration.keep_alive()
        return True
    except CoordinatorUnavailable:
        old_stores = {id(r.store): r.store for r in registrations}.values()
        fresh = open_store()
        for registration in registrations:
            registration.rebind(fresh)
        for store in old_stores:
            store.close()
        return False


class _StopRequested(Exception):
    """Raised in the main thread by the first SIGTERM/SIGINT, to unwind through cleanup."""


def _install_signal_handlers() -> None:
    def on_signal(signum: int, _frame) -> None:
        # Later signals only log, so they cannot interrupt the cleanup the first one started.
        signal.signal(signal.SIGTERM, _log_repeated_signal)
        signal.signal(signal.SIGINT, _log_repeated_signal)
        raise _StopRequested(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def _log_repeated_signal(signum: int, _frame) -> None:
    log.info("%s received while stopping; still stopping", signal.Signals(signum).name)


class ControllerProcess:
    """The cluster's controller as a child process: started, restarted if it exits, stopped by PID."""

    def __init__(self, home: Path, etcd_endpoint: str, ray_address: str, cluster: str):
        self.command = [
            sys.executable, "-m", "mafka4.coordinator.controller", "--etcd", etcd_endpoint,
            "--ray-address", ray_address, "--cluster", cluster, "--controller-id", CONTROLLER_ID,
        ]
        self.log_path = home / CONTROLLER_LOG_FILE_NAME
        self.cwd = home
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(self.command, stdout=log_file, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, cwd=self.cwd)
        log.info("controller started, pid %d, log %s", self.process.pid, self.log_path)

    def keep_running(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            log.warning("controller exited with code %s; starting it again", self.process.returncode)
            self.start()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=CONTROLLER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def keep_registered(
    registrations: list[NodeRegistration], open_store: Callable[[], MetadataStore], period_s: float,
    each_period: Callable[[], None] = lambda: None,
) -> None:
    """Refresh every registration each period until a signal arrives; log outages once each."""
    etcd_down_since = None
    while True:
        time.sleep(period_s)
        each_period()
        if not refresh_registrations(registrations, open_store):
            if etcd_down_since is None:
                etcd_down_since = time.monotonic()
                log.warning("etcd does not answer; node registrations will be refreshed when it does")
        elif etcd_down_since is not None:
            log.info("etcd answers again after %.1f s", time.monotonic() - etcd_down_since)
            etcd_down_since = None


def run(home: Path, config: ClusterConfig, cluster: str) -> None:
    """Start everything, keep it running until a signal, and stop it in reverse order."""
    from mafka4.runtime.etcd_server import start_etcd, stop_etcd
    from mafka4.runtime.ray_cluster import start_ray_cluster, stop_ray_cluster

    write_nodes = node_ids(NodeRole.WRITE, config.write_nodes)
    read_nodes = node_ids(NodeRole.READ, config.read_nodes)
    data_root = home / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    etcd = start_etcd(home / "etcd", timeout_s=config.start_timeout_s)
    log.info("etcd %s started, pid %d", etcd.endpoint, etcd.pid)

    def open_store() -> MetadataStore:
        return MetadataStore(etcd.endpoint, timeout_s=min(STORE_TIMEOUT_S_MAX, config.node_lease_ttl_s / 3))

    ray = None
    registrations: list[NodeRegistration] = []
    controller: ControllerProcess | None = None
    try:
        started = time.monotonic()
        ray = start_ray_cluster(ray_temp_dir(home), write_nodes, read_nodes)
        log.info("ray %s started in %.1f s", ray.address, time.monotonic() - started)
        store = open_store()
        store.put(keys.cluster_config(cluster), {
            "data_root": str(data_root), "write_nodes": write_nodes, "read_nodes": read_nodes,
        })
        for role, ids in ((NodeRole.WRITE, write_nodes), (NodeRole.READ, read_nodes)):
            registrations += [NodeRegistration(store, cluster, i, role, config.node_lease_ttl_s) for i in ids]
        for registration in registrations:
            registration.keep_alive()
        controller = ControllerProcess(home, etcd.endpoint, ray.address, cluster)
        controller.start()
        save_state(ClusterState(
            cluster=cluster, home=str(home), etcd_endpoint=etcd.endpoint, etcd_pid=etcd.pid,
            ray_address=ray.address, daemon_pid=os.getpid(), ray_temp_dir=ray.temp_dir,
            write_nodes=tuple(write_nodes), read_nodes=tuple(read_nodes), data_root=str(data_root), ready=True,
        ))
        log.info("cluster %r ready: write nodes %s, read nodes %s", cluster, write_nodes, read_nodes)
        keep_registered(registrations, open_store, config.node_lease_ttl_s / 3, controller.keep_running)
    finally:
        remove_state(home)
        if controller is not None:
            _stop_quietly("stop controller", controller.stop)
        _stop_quietly("revoke node leases", lambda: [r.revoke() for r in registrations])
        if registrations:
            _stop_quietly("close etcd client", registrations[0].store.close)
        if ray is not None:
            _stop_quietly("stop ray", lambda: stop_ray_cluster(ray))
        _stop_quietly("stop etcd", lambda: stop_etcd(etcd))


def _stop_quietly(what: str, action) -> None:
    """Run one cleanup step; a failure is logged so that the later steps still run."""
    try:
        action()
        log.info("%s: done", what)
    except Exception:
        log.exception("%s failed", what)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = ClusterConfig()
    parser = argparse.ArgumentParser(prog="python -m mafka4.runtime.daemon", description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, type=Path)
    parser.add_argument("--write-nodes", type=int, default=defaults.write_nodes)
    parser.add_argument("--read-nodes", type=int, default=defaults.read_nodes)
    parser.add_argument("--cluster", default=CLUSTER_NAME_DEFAULT)
    parser.add_argument("--node-lease-ttl-s", type=int, default=defaults.node_lease_ttl_s)
    parser.add_argument("--start-timeout-s", type=int, default=defaults.start_timeout_s)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    home = args.home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        filename=home / LOG_FILE_NAME, level=logging.INFO,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    apply_ray_environment()
    _install_signal_handlers()
    config = ClusterConfig(
        write_nodes=args.write_nodes, read_nodes=args.read_nodes,
        node_lease_ttl_s=args.node_lease_ttl_s, start_timeout_s=args.start_timeout_s,
    )
    try:
        run(home, config, args.cluster)
    except _StopRequested as stop:
        log.info("stopped by %s", stop)
        return 0
    except Exception:
        log.exception("daemon failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
