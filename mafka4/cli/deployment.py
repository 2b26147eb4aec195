"""``mafka4 deploy`` and ``undeploy``: mafka4 on an existing Ray cluster (``runtime.deploy``).

``mafka4 status --address ADDR`` (``cli.cluster``) shows a deployment.
"""

from __future__ import annotations

import argparse
import os
import sys

from mafka4.errors import InvalidConfig
from mafka4.limits import CLIENT_PORT_DEFAULT, parse_setting
from mafka4.limits.servers import ClusterConfig
from mafka4.runtime.deploy_plan import DATA_DIR_DEFAULT, HEAD_NODE_RESOURCE
from mafka4.runtime.state import CLUSTER_NAME_DEFAULT

CLUSTER_ENV = "MAFKA4_CLUSTER"  # runtime.connect's (which imports etcd's client): the cluster name drivers use


def add_commands(commands) -> None:
    deploy = commands.add_parser(
        "deploy", help=f"run mafka4 on an existing Ray cluster: etcd (3 members on head-type nodes, those offering "
                       f"'{HEAD_NODE_RESOURCE}', where there are three; else 1, on the first of them or on Ray's head, "
                       f"said loudly), the controller, and a node agent on every write_node / read_node; starts only "
                       f"what is missing")
    add_cluster_arguments(deploy)
    deploy.add_argument("--data-dir", default=DATA_DIR_DEFAULT,
                        help="a path on every node: etcd's data (<data-dir>/.etcd), the controller's log, the nodes' "
                             "data root (default %(default)s)")
    deploy.add_argument("--node-lease-ttl-s", type=int, default=ClusterConfig().node_lease_ttl_s,
                        help="a node's registration ends this long after its agent stops answering (default %(default)s)")
    deploy.add_argument("--client-port", type=int, default=CLIENT_PORT_DEFAULT,
                        help="the port read nodes serve clients on; 0 for any free port (default %(default)s)")
    deploy.add_argument("--ready-timeout-s", type=int, default=ClusterConfig().start_timeout_s,
                        help="wait at most this long for every node to register and serve (default %(default)s)")
    add_controller_setting_argument(deploy)
    deploy.add_argument("--no-wait", dest="wait", action="store_false",
                        help="neither require write and read nodes nor wait for them: return once etcd and the "
                             "controller run, which gives each node an agent as Ray adds it (a cluster launcher's "
                             "head, whose start commands run before any worker joins); see them with "
                             "'mafka4 status --address ADDR'")
    deploy.set_defaults(run=_cmd_deploy)
    undeploy = commands.add_parser(
        "undeploy", help="stop what 'mafka4 deploy' runs on a Ray cluster: controller, node agents, read nodes, "
                         "partition replicas, etcd (the data stays on the nodes)")
    add_cluster_arguments(undeploy)
    undeploy.set_defaults(run=_cmd_undeploy)


def add_controller_setting_argument(parser: argparse.ArgumentParser) -> None:
    """``--controller-setting NAME=VALUE`` (repeatable): a ControllerConfig value for the cluster's controller."""
    parser.add_argument("--controller-setting", action="append", default=[], type=_setting, metavar="NAME=VALUE",
                        help="run the controller with another ControllerConfig value, e.g. vp_merge_delay_ms=5000, "
                             "read_node_gone_ms=60000 or read_node_scaling=1 (repeatable)")


def _setting(text: str) -> tuple[str, int]:
    try:
        return parse_setting(text)
    except InvalidConfig as error:
        raise argparse.ArgumentTypeError(error.message) from None


def add_cluster_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--address", required=required, metavar="ADDR",
                        help="the Ray cluster's GCS address, HOST:PORT (Ray's token, if it needs one: RAY_AUTH_MODE=token "
                             "and RAY_AUTH_TOKEN_PATH)")
    parser.add_argument("--cluster", default=os.environ.get(CLUSTER_ENV, CLUSTER_NAME_DEFAULT),
                        help=f"the mafka4 cluster's name (default ${CLUSTER_ENV}, else %(default)s)")


def _cmd_deploy(args: argparse.Namespace) -> int:
    from mafka4.runtime.connect import join_ray
    from mafka4.runtime.deploy import DeploySettings, deploy
    from mafka4.runtime.environment import mafka4_home

    if args.client_port not in range(0, 65536):
        raise InvalidConfig(f"--client-port {args.client_port} is not a TCP port: give 1-65535, or 0 for any")
    controller_settings = tuple(args.controller_setting)
    ClusterConfig(node_lease_ttl_s=args.node_lease_ttl_s, start_timeout_s=args.ready_timeout_s,
                  controller_settings=controller_settings)  # their rules, an unknown setting named before Ray is joined
    join_ray(args.address)
    report = deploy(DeploySettings(args.cluster, args.data_dir, args.node_lease_ttl_s, args.client_port,
                                   args.ready_timeout_s, args.wait, controller_settings), mafka4_home())
    for warning in report.warnings:
        print(f"mafka4: {warning}", file=sys.stderr)
    members = len(report.etcd_members)
    deployed = (f"mafka4 cluster {args.cluster!r} deployed on Ray {args.address}: "
                f"{'started ' + ', '.join(report.started) if report.started else 'it already ran, nothing new started'}; "
                f"etcd {report.etcd_endpoint} ({members} member{'s' if members > 1 else ''}); ")
    if not args.wait:
        status = f"mafka4 status --address {args.address}" + (
            f" --cluster {args.cluster}" if args.cluster != CLUSTER_NAME_DEFAULT else "")
        print(deployed + f"write and read nodes join as Ray adds them (the controller starts a node agent on each; "
                         f"not waited for: --no-wait): '{status}' shows them "
                         f"(registered_nodes) and the read nodes' client addresses (serving_read_nodes), which "
                         f"clients connect to (MAFKA4_BOOTSTRAP) with the admin credential in {report.credential}")
        return 0
    print(deployed + f"write nodes {', '.join(report.write_nodes)}, read nodes {', '.join(report.read_nodes)}; "
                     f"clients connect to {','.join(report.bootstrap)} (MAFKA4_BOOTSTRAP) with the admin credential "
                     f"in {report.credential}")
    return 0


def _cmd_undeploy(args: argparse.Namespace) -> int:
    from mafka4.runtime.connect import join_ray
    from mafka4.runtime.deploy import undeploy

    join_ray(args.address)
    stopped = undeploy(args.cluster)
    print(f"mafka4 cluster {args.cluster!r} undeployed from Ray {args.address}: "
          f"{'stopped ' + ', '.join(stopped) if stopped else 'nothing was deployed'}")
    return 0


def deployment_report(args: argparse.Namespace) -> dict:
    """``mafka4 status --address``: what of the deployment runs (``runtime.deploy.deployment_status``)."""
    from mafka4.runtime.connect import join_ray
    from mafka4.runtime.deploy import deployment_status as status

    join_ray(args.address)
    return status(args.cluster)
