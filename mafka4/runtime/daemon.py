"""The process that owns a local cluster: etcd, the Ray nodes and the node registrations.

    python -m mafka4.runtime.daemon --home H --write-nodes N --read-nodes M [--etcd-members 1|3] [--cluster NAME]

Start order: etcd (one member in ``<home>/etcd``, or three in ``<home>/etcd-0..2``, see
``mafka4.runtime.etcd_server``; every etcd client is given all members), the Ray cluster, the
cluster config key, the admin's credential (``<home>/credentials``, mode 0600, and its user in
etcd: ``mafka4.security.admin_credential``), one lease-bound registration per simulated node
(a read node's names a free loopback port for its client port), the controller (a child
process, ``mafka4.runtime.controller_process``, logging to ``<home>/controller.log``),
which starts one ``ReadNode`` actor per read node (the daemon waits for their liveness keys),
then ``<home>/cluster.json`` with ``ready=True`` and the read nodes' client addresses
(``bootstrap``, where clients start). Until SIGTERM/SIGINT it refreshes every
registration each ``node_lease_ttl_s / 3`` seconds and starts the controller again if it
exited. Stop order is the reverse: stop the controller, revoke the leases, stop Ray, stop
every etcd member, remove cluster.json, exit 0. A signal during startup stops whatever was
already started. Logs go to ``<home>/daemon.log``. The registrations and their refresh loop
are ``mafka4.runtime.registration``'s, shared with the node agent of a Ray cluster.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Callable

from mafka4.limits import (LEASE_REFRESHES_PER_TTL, READ_NODE_START_POLL_INTERVAL_S,
                           parse_setting)
from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.child_process import ChildProcess
from mafka4.runtime.environment import apply_ray_environment, ensure_ray_token, ray_temp_dir, use_ray_token
from mafka4.runtime.etcd_member import etcd_endpoint
from mafka4.runtime.ports import LOOPBACK, free_loopback_port
from mafka4.runtime.ray_cluster import NodeRole, node_ids
from mafka4.runtime.registration import (
    NodeRegistration, RefreshWhenDue, StopRequested, install_stop_handlers, keep_registered, open_registration_store,
    refresh_registrations,
)
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT, ClusterState, remove_state, save_state
from mafka4.security.admin_credential import ensure_admin_credential
from mafka4.security.user_store import UserStore

LOG_FILE_NAME = "daemon.log"
CONTROLLER_LOG_FILE_NAME = "controller.log"
CONTROLLER_ID = "controller-0"

log = logging.getLogger("mafka4.daemon")


class ControllerProcess(ChildProcess):
    """The cluster's controller as a child process: started, restarted if it exits, stopped by PID."""

    def __init__(self, home: Path, etcd_endpoint: str, ray_address: str, cluster: str,
                 settings: tuple[tuple[str, int], ...] = ()):
        super().__init__("controller", [
            sys.executable, "-m", "mafka4.runtime.controller_process", "--etcd", etcd_endpoint,
            "--ray-address", ray_address, "--cluster", cluster, "--controller-id", CONTROLLER_ID, "--home", str(home),
            *(argument for name, value in settings for argument in ("--setting", f"{name}={value}")),
        ], home / CONTROLLER_LOG_FILE_NAME, home)


def run(home: Path, config: ClusterConfig, cluster: str) -> None:
    """Start everything, keep it running until a signal, and stop it in reverse order."""
    from mafka4.runtime.etcd_server import start_etcd_members, stop_etcd_members
    from mafka4.runtime.ray_cluster import start_ray_cluster, stop_ray_cluster

    write_nodes = node_ids(NodeRole.WRITE, config.write_nodes)
    read_nodes = node_ids(NodeRole.READ, config.read_nodes)
    data_root = home / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    members = start_etcd_members(home, config.etcd_members, timeout_s=config.start_timeout_s)
    endpoint = etcd_endpoint(members)
    log.info("etcd %s started, pids %s", endpoint, [member.pid for member in members])

    def open_store() -> MetadataStore:
        return open_registration_store(endpoint, config.node_lease_ttl_s)

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
        credential = ensure_admin_credential(home, UserStore(store, cluster))
        log.info("admin credential in %s", credential)
        # Each read node serves clients on a port of its own, the same one after a restart, so
        # that the addresses recorded for clients to start from stay true.
        client_ports = {node_id: free_loopback_port() for node_id in read_nodes}
        registrations += [NodeRegistration(store, cluster, i, NodeRole.WRITE, config.node_lease_ttl_s) for i in write_nodes]
        registrations += [NodeRegistration(store, cluster, i, NodeRole.READ, config.node_lease_ttl_s, client_ports[i])
                          for i in read_nodes]
        for registration in registrations:
            registration.keep_alive()
        controller = ControllerProcess(home, endpoint, ray.address, cluster, config.controller_settings)
        controller.start()
        refresh_period_s = config.node_lease_ttl_s / LEASE_REFRESHES_PER_TTL
        # The wait can outlast a lease (Ray starting the read nodes' actors on a loaded machine), so
        # it refreshes the registrations as keep_registered will: else placement finds no live nodes.
        refresh = RefreshWhenDue(lambda: refresh_registrations(registrations, open_store), refresh_period_s)
        _wait_for_read_nodes(lambda: registrations[0].store, cluster, read_nodes, time.time_ns() // 1_000_000,
                             started + config.start_timeout_s, refresh)
        save_state(ClusterState(
            cluster=cluster, home=str(home), etcd_endpoint=endpoint, etcd_pid=members[0].pid, etcd_members=members,
            ray_address=ray.address, daemon_pid=os.getpid(), ray_temp_dir=ray.temp_dir,
            write_nodes=tuple(write_nodes), read_nodes=tuple(read_nodes), data_root=str(data_root), ready=True,
            bootstrap=tuple(f"{LOOPBACK}:{client_ports[node_id]}" for node_id in read_nodes),
        ))
        log.info("cluster %r ready: write nodes %s, read nodes %s", cluster, write_nodes, read_nodes)
        keep_registered(registrations, open_store, refresh_period_s, controller.keep_running)
    finally:
        remove_state(home)
        if controller is not None:
            _stop_quietly("stop controller", controller.stop)
        _stop_quietly("revoke node leases", lambda: [r.revoke() for r in registrations])
        if registrations:
            _stop_quietly("close etcd client", registrations[0].store.close)
        if ray is not None:
            _stop_quietly("stop ray", lambda: stop_ray_cluster(ray))
        _stop_quietly("stop etcd", lambda: stop_etcd_members(members))


def _stop_quietly(what: str, action) -> None:
    """Run one cleanup step; a failure is logged so that the later steps still run."""
    try:
        action()
        log.info("%s: done", what)
    except Exception:
        log.exception("%s failed", what)


def _wait_for_read_nodes(current_store: Callable[[], MetadataStore], cluster: str, read_nodes: list[str],
                         since_ms: int, deadline: float, each_poll: Callable[[], None]) -> None:
    """Ready means usable: wait until the controller started every read node's actor (its liveness
    key, written by an actor started after ``since_ms``: etcd keeps a previous run's keys a while).

    ``each_poll`` runs between polls (the registrations' refresh, which may move them to a new
    etcd client: hence ``current_store``)."""
    prefix = keys.read_nodes_prefix(cluster)
    while {item.key[len(prefix):] for item in current_store().get_prefix(prefix)
           if item.value.get("started_ms", 0) >= since_ms} < set(read_nodes):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the controller did not start read nodes {read_nodes} in time; see controller.log")
        time.sleep(READ_NODE_START_POLL_INTERVAL_S)
        each_poll()
    log.info("read nodes %s running", read_nodes)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = ClusterConfig()
    parser = argparse.ArgumentParser(prog="python -m mafka4.runtime.daemon", description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, type=Path)
    parser.add_argument("--write-nodes", type=int, default=defaults.write_nodes)
    parser.add_argument("--read-nodes", type=int, default=defaults.read_nodes)
    parser.add_argument("--cluster", default=CLUSTER_NAME_DEFAULT)
    parser.add_argument("--node-lease-ttl-s", type=int, default=defaults.node_lease_ttl_s)
    parser.add_argument("--start-timeout-s", type=int, default=defaults.start_timeout_s)
    parser.add_argument("--etcd-members", type=int, default=defaults.etcd_members)
    parser.add_argument("--controller-setting", action="append", default=[], metavar="NAME=VALUE")
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
    use_ray_token(ensure_ray_token(home))  # before Ray starts: the cluster's Ray admits only its token's holders
    install_stop_handlers()
    config = ClusterConfig(
        write_nodes=args.write_nodes, read_nodes=args.read_nodes,
        node_lease_ttl_s=args.node_lease_ttl_s, start_timeout_s=args.start_timeout_s, etcd_members=args.etcd_members,
        controller_settings=tuple(parse_setting(text) for text in args.controller_setting),
    )
    try:
        run(home, config, args.cluster)
    except StopRequested as stop:
        log.info("stopped by %s", stop)
        return 0
    except Exception:
        log.exception("daemon failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
