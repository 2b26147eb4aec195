"""The controller's process: joins Ray and etcd and runs a ``Controller`` until SIGTERM or SIGINT.

    python -m mafka4.runtime.controller_process --etcd HOST:PORT[,HOST:PORT...] --ray-address ADDR --cluster NAME --controller-id ID

The local daemon (``runtime.daemon``) starts one as its child; on a Ray cluster ``mafka4 deploy``
does (``runtime.deploy``, which ``ray_cluster.yaml``'s head runs). Several may run: one is active,
the others stand by (``coordinator.control.controller``).

With ``--node-agents`` (as deploy starts it) the active one also keeps a node agent actor on every
Ray node that offers ``write_node`` or ``read_node`` and drops the registrations of nodes that
left Ray (``runtime.node_agents``, on a thread of its own): workers then run no mafka4 command.
Off by default: ``mafka4 up`` registers its simulated nodes itself, and a node agent run as a
process (``runtime.node``) beside it would register the node twice.

The active one also keeps the cluster's delay scheduler running as its child
(``mafka4.scheduling.delay_service``, logging to ``<home>/delay-scheduler.log``; ``--home``, whose
admin credential it uses): a standby stops it, so one runs per cluster but while controllers
change hands (its releases are at least once).

Every controller process, active or standby, serves Prometheus metrics (``--metrics-port``, any
free port by default, on its Ray node's address): the counts of its ``ControllerCounters``
(``metrics.families.controller_families``). The active one names the address in its election
value (``keys.controller``), where ``mafka4 status`` and its file_sd targets find it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Callable

from mafka4.coordinator.control.controller import Controller
from mafka4.errors import InvalidConfig, MafkaError
from mafka4.limits import (CLIENT_PORT_DEFAULT, CONTROLLER_STOP_TIMEOUT_S, DELAY_SCHEDULER_CHECK_INTERVAL_S,
                           parse_setting, replace_config)
from mafka4.limits.servers import ClusterConfig, ControllerConfig
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.controller_counters import ControllerCounters
from mafka4.metrics.exposition import MetricsServer
from mafka4.metrics.families import controller_families
from mafka4.runtime.child_process import ChildProcess
from mafka4.runtime.environment import apply_ray_environment, mafka4_home
from mafka4.transport.ray_names import NAMESPACE

log = logging.getLogger("mafka4.controller")

DELAY_SCHEDULER_LOG_FILE_NAME = "delay-scheduler.log"

def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    defaults = ControllerConfig()
    parser = argparse.ArgumentParser(prog="python -m mafka4.runtime.controller_process", description=__doc__.splitlines()[0])
    parser.add_argument("--etcd", required=True, help="etcd endpoint HOST:PORT, or every member of an etcd cluster: HOST:PORT,HOST:PORT,...")
    parser.add_argument("--ray-address", required=True, help="GCS address of the Ray cluster")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--controller-id", required=True)
    parser.add_argument("--home", type=Path, default=mafka4_home(),
                        help="the home whose admin credential the delay scheduler uses, and where it logs "
                             "(delay-scheduler.log); default %(default)s")
    parser.add_argument("--lease-ttl-s", type=int, default=defaults.lease_ttl_s)
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="the port it serves Prometheus metrics on; 0 (default) for any free port")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="another ControllerConfig field, e.g. vp_merge_delay_ms=5000 (repeatable)")
    agents = parser.add_argument_group("node agents", "start a node agent actor on every write and read node")
    agents.add_argument("--node-agents", action="store_true",
                        help="run the node agents (no command on workers); not beside 'mafka4 up' or shell agents")
    agents.add_argument("--node-data-dir", type=Path, default=mafka4_home() / "data",
                        help="data root to record if the cluster has none yet (default %(default)s)")
    agents.add_argument("--node-lease-ttl-s", type=int, default=ClusterConfig().node_lease_ttl_s)
    agents.add_argument("--node-client-port", type=int, default=CLIENT_PORT_DEFAULT,
                        help="the port read nodes serve clients on; 0 for any free port (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        ClusterConfig(node_lease_ttl_s=args.node_lease_ttl_s)  # the rule the shell agent applies
        for flag, port in (("--node-client-port", args.node_client_port), ("--metrics-port", args.metrics_port)):
            if port not in range(0, 65536):
                raise InvalidConfig(f"{flag} {port} is not a TCP port: give 1-65535, or 0 for any")
    except MafkaError as error:
        parser.error(error.message)
    return args


def _start_node_agents(args: argparse.Namespace, controller: Controller, stop: threading.Event) -> Callable[[], None]:
    """Run the node agent keeper on a thread while ``controller`` is active; returns what closes it."""
    # Imported here: it imports ray, which must come after main's environment.
    from mafka4.runtime.node_agents import AgentSettings, NodeAgentKeeper, keep_node_agents

    settings = AgentSettings(args.cluster, args.etcd, str(args.node_data_dir.expanduser().resolve()),
                             args.node_lease_ttl_s, args.node_client_port)
    store = MetadataStore(args.etcd)
    thread = threading.Thread(target=keep_node_agents,
                              args=(NodeAgentKeeper(settings, store), stop, lambda: controller.active),
                              name="node-agents", daemon=True)
    thread.start()

    def close() -> None:
        thread.join(CONTROLLER_STOP_TIMEOUT_S)
        store.close()
    return close


def _keep_delay_scheduler(args: argparse.Namespace, controller: Controller, stop: threading.Event) -> Callable[[], None]:
    """Keep the delay scheduler (``mafka4.scheduling.delay_service``) running as a child while
    ``controller`` is active, and stopped while it is not; returns what stops it for good."""
    home = args.home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    child = ChildProcess("delay scheduler", [
        sys.executable, "-m", "mafka4.scheduling.delay_service", "--etcd", args.etcd, "--cluster", args.cluster,
        "--home", str(home)], home / DELAY_SCHEDULER_LOG_FILE_NAME, home)

    def keep() -> None:
        while not stop.wait(DELAY_SCHEDULER_CHECK_INTERVAL_S):
            if controller.active:
                child.keep_running()
            else:
                child.stop()
        child.stop()

    thread = threading.Thread(target=keep, name="delay-scheduler", daemon=True)
    thread.start()

    def close() -> None:
        thread.join(CONTROLLER_STOP_TIMEOUT_S * 2)
        child.stop()
    return close


def _start_metrics(counters: ControllerCounters, host: str, port: int) -> MetricsServer | None:
    """Serve ``counters`` to Prometheus on ``host``:``port``; None (logged) if the port could not be
    bound: the controller runs regardless."""
    server = MetricsServer(f"controller {counters.controller_id}", controller_families, counters.snapshot)
    try:
        server.start(host, port)
    except OSError:
        log.exception("controller %s serves no metrics: its metrics server did not start on %s:%d",
                      counters.controller_id, host, port)
        return None
    return server


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    apply_ray_environment()
    import ray  # after the environment: Ray reads it at import

    ray.init(address=args.ray_address, namespace=NAMESPACE, logging_level=logging.WARNING, log_to_driver=False)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    settings = dict(parse_setting(text) for text in args.setting)
    config = replace_config(ControllerConfig(), **{"lease_ttl_s": args.lease_ttl_s, **settings})
    counters = ControllerCounters(args.controller_id)
    metrics = _start_metrics(counters, ray.util.get_node_ip_address(), args.metrics_port)
    controller = Controller(args.etcd, args.cluster, args.controller_id, config, counters,
                            metrics.address if metrics is not None else None)
    log.info("controller %s started for cluster %r (etcd %s, Ray %s)", args.controller_id, args.cluster, args.etcd, args.ray_address)
    close_agents = _start_node_agents(args, controller, stop) if args.node_agents else None
    close_delays = _keep_delay_scheduler(args, controller, stop)
    try:
        controller.run(stop)
    finally:
        stop.set()
        close_delays()
        if close_agents is not None:
            close_agents()
        if metrics is not None:
            metrics.stop()
        ray.shutdown()
    log.info("controller %s stopped", args.controller_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
