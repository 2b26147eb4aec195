"""The node agent: makes one machine of a Ray cluster a mafka4 node, by registering it in etcd.

    python -m mafka4.runtime.node --etcd HOST:PORT[,HOST:PORT...] --cluster NAME --role write|read --node-id ID [--data-dir DIR]
    python -m mafka4.runtime.node --etcd HOST:PORT[,HOST:PORT...] --cluster NAME [--data-dir DIR] [--wait-s S]

``mafka4 up`` registers its simulated nodes itself (``mafka4.runtime.daemon``). On a Ray
cluster, ``mafka4 deploy`` (and so ``ray_cluster.yaml``) starts a controller with
``--node-agents``, which runs the same agent as a Ray actor on every write and read node
(``mafka4.runtime.node_agents``): no command runs on workers. Run as a process, on a worker
after ``ray start``, ``--node-id`` must be the id in the Ray resource the machine offers,
``mafka4_node_<id>`` (``ray_cluster.node_resource``): replicas placed on the node are pinned
by that resource, so under another id they would wait for a Ray node that does not exist
(the actor takes its id from that resource, or, on a node offering none, from the Ray node's
id: ``node_identity.identify_node``).

With ``--role`` and ``--node-id`` (a node agent) it

1. writes the cluster config key ``{"data_root": DIR}`` unless the key exists: the first
   writer (the first agent, or a config-only run, below) fixes the data root of the whole cluster, and a
   different ``--data-dir`` is ignored with a warning. This comes before the registration
   because placement reads the data root as soon as a node is registered;
2. creates the data root on this machine, so that a path the node cannot write fails here
   and not at the first topic;
3. registers the node under its own lease and refreshes it every ``node_lease_ttl_s / 3``
   seconds (``mafka4.runtime.registration``). etcd outages, including one at start, are
   waited out: the registration is written again, under a new lease, once etcd answers. A
   read node's registration names the port its ``ReadNode`` actor serves clients on
   (``--client-port``);
4. on SIGTERM/SIGINT revokes its lease, so the node leaves placement at once, and exits 0.

Without ``--role`` and ``--node-id`` it does step 1 only and exits: 0 once the key holds a
data root, 1 if etcd did not answer within ``--wait-s``: a head that hosts no replicas can run
it so that the config exists before any node registers.
The cluster config written here holds only the data root: unlike ``mafka4 up``'s, a
launcher cluster has no fixed node list (nodes come and go with their registrations).

Logs go to stderr. Exit code 2: bad arguments (e.g. an invalid node id); 1: another error
(the message says which).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from mafka4.errors import CoordinatorUnavailable, InvalidConfig, MafkaError
from mafka4.limits import (CLIENT_PORT_DEFAULT, LEASE_REFRESHES_PER_TTL, NODE_CONFIG_RETRY_INTERVAL_S,
                           NODE_CONFIG_WAIT_S_DEFAULT)
from mafka4.limits.servers import ClusterConfig
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.runtime.environment import mafka4_home
from mafka4.runtime.node_identity import NodeRole, validate_node_id
from mafka4.runtime.ray_cluster import node_resource
from mafka4.runtime.registration import (
    NodeRegistration, StopRequested, install_stop_handlers, keep_registered, open_registration_store,
    refresh_registrations,
)
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT

log = logging.getLogger("mafka4.node")


def write_cluster_config(store: MetadataStore, cluster: str, data_dir: str) -> str:
    """Create the cluster config key with ``data_dir`` as data root unless it exists.

    Returns the data root in effect: ``data_dir``, or the one an earlier writer recorded.
    Raises CoordinatorUnavailable if etcd does not answer.
    """
    key = keys.cluster_config(cluster)
    if store.create_all({key: {"data_root": data_dir}}):
        log.info("cluster %r: wrote the cluster config, data root %s", cluster, data_dir)
        return data_dir
    existing = store.get(key)
    assert existing is not None and "data_root" in existing.value, f"{key} is never deleted and always has a data root"
    data_root = existing.value["data_root"]
    if data_root != data_dir:
        log.warning("cluster %r: the cluster config already names data root %s; --data-dir %s is ignored",
                    cluster, data_root, data_dir)
    return data_root


def ensure_cluster_config(open_store: Callable[[], MetadataStore], cluster: str, data_dir: str,
                          wait_s: float | None) -> tuple[str, MetadataStore]:
    """``write_cluster_config``, retried while etcd does not answer; waits forever if ``wait_s`` is None.

    Returns the data root in effect and the client that answered (the caller closes it).
    Raises CoordinatorUnavailable once ``wait_s`` has passed.
    """
    deadline = None if wait_s is None else time.monotonic() + wait_s
    reported = False
    while True:
        store = open_store()
        try:
            return write_cluster_config(store, cluster, data_dir), store
        except CoordinatorUnavailable as error:
            store.close()
            if deadline is not None and time.monotonic() >= deadline:
                raise CoordinatorUnavailable(f"gave up after {wait_s:g} s: {error.message}") from error
            if not reported:
                log.warning("%s; retrying every %.0f s", error.message, NODE_CONFIG_RETRY_INTERVAL_S)
                reported = True
        except BaseException:
            store.close()
            raise
        time.sleep(NODE_CONFIG_RETRY_INTERVAL_S)


def create_data_root(data_root: str) -> None:
    """Create the data root on this machine; InvalidConfig if this user cannot write there."""
    try:
        Path(data_root).mkdir(parents=True, exist_ok=True)
        usable = os.access(data_root, os.W_OK | os.X_OK)
        reason = "not writable"
    except OSError as error:
        usable, reason = False, error.strerror
    if not usable:
        raise InvalidConfig(
            f"the cluster's data root {data_root} cannot be used on this node ({reason}): "
            f"make it writable for this user on every write and read node"
        )


def run_agent(etcd_endpoint: str, cluster: str, role: NodeRole, node_id: str, data_dir: str, lease_ttl_s: int,
              client_port: int = 0, stop: threading.Event | None = None, ray_node_id: str = "") -> None:
    """Steps 1-3 of the module docstring, until ``stop`` is set (the agent run as a Ray actor,
    ``runtime.node_agents``, which also names its Ray node in the registration: ``ray_node_id``);
    without ``stop`` it returns only by an exception (StopRequested on a signal).

    Whatever way it leaves, the lease is revoked (if etcd answers) and the client closed.
    """
    def open_store() -> MetadataStore:
        return open_registration_store(etcd_endpoint, lease_ttl_s)

    data_root, store = ensure_cluster_config(open_store, cluster, data_dir, wait_s=None)
    # Only a read node serves clients yet: a write node's registration names no port.
    registration = NodeRegistration(store, cluster, node_id, role, lease_ttl_s,
                                    client_port if role is NodeRole.READ else 0, ray_node_id)
    try:
        create_data_root(data_root)
        if refresh_registrations([registration], open_store):
            log.info("registered %s node %s of cluster %r (Ray resource %s, data root %s)",
                     role.value, node_id, cluster, node_resource(node_id), data_root)
        else:
            log.warning("etcd does not answer; node %s will be registered when it does", node_id)
        keep_registered([registration], open_store, lease_ttl_s / LEASE_REFRESHES_PER_TTL, stop=stop)
    finally:
        try:
            registration.revoke()
            log.info("node %s: lease revoked, registration removed", node_id)
        except CoordinatorUnavailable as error:
            log.warning("%s; the registration disappears when its lease expires (%d s)", error.message, lease_ttl_s)
        registration.store.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m mafka4.runtime.node", description=__doc__.splitlines()[0])
    parser.add_argument("--etcd", required=True, metavar="HOST:PORT[,HOST:PORT...]",
                        help="etcd client endpoint; of every member for an etcd of several")
    parser.add_argument("--cluster", default=CLUSTER_NAME_DEFAULT, help="mafka4 cluster name (default %(default)s)")
    parser.add_argument("--role", choices=[role.value for role in NodeRole],
                        help="register a node of this role; omit with --node-id to write the cluster config only")
    parser.add_argument("--node-id", help="the node's id, as in its Ray resource mafka4_node_<id>")
    parser.add_argument("--data-dir", type=Path, default=mafka4_home() / "data",
                        help="data root to record if the cluster has none yet (default %(default)s)")
    parser.add_argument("--node-lease-ttl-s", type=int, default=ClusterConfig().node_lease_ttl_s)
    parser.add_argument("--client-port", type=int, default=CLIENT_PORT_DEFAULT,
                        help="read nodes: the TCP port the node serves clients on; 0 for any free port "
                             "(default %(default)s)")
    parser.add_argument("--wait-s", type=float, default=NODE_CONFIG_WAIT_S_DEFAULT,
                        help="config only: how long to wait for etcd (default %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.role is None) != (args.node_id is None):
        parser.error("give --role and --node-id together (a node agent), or neither (write the cluster config only)")
    try:
        if args.node_id is not None:
            validate_node_id(args.node_id)
        ClusterConfig(node_lease_ttl_s=args.node_lease_ttl_s)
        if args.client_port not in range(0, 65536):
            raise InvalidConfig(f"--client-port {args.client_port} is not a TCP port: give 1-65535, or 0 for any")
    except MafkaError as error:
        parser.error(error.message)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    data_dir = str(args.data_dir.expanduser().resolve())
    try:
        if args.role is None:
            open_store = functools.partial(open_registration_store, args.etcd, args.node_lease_ttl_s)
            _, store = ensure_cluster_config(open_store, args.cluster, data_dir, args.wait_s)
            store.close()
            return 0
        install_stop_handlers()
        run_agent(args.etcd, args.cluster, NodeRole(args.role), args.node_id, data_dir, args.node_lease_ttl_s,
                  args.client_port)
    except StopRequested as stop:
        log.info("stopped by %s", stop)
        return 0
    except MafkaError as error:
        log.error("%s", error.message)
        return 1
    raise AssertionError("run_agent returns only by an exception")


if __name__ == "__main__":
    sys.exit(main())
