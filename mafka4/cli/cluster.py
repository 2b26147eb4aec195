"""``mafka4 up``, ``down``, ``status`` and ``demo``: the local cluster's life (``status --address``: a
deployment on a Ray cluster, ``cli.deployment``; ``status --metrics-targets FILE``: where Prometheus
scrapes every live node, ``metrics.targets``; the figures status reads from them: ``metrics.scrape``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mafka4.cli.deployment import add_cluster_arguments, add_controller_setting_argument, deployment_report
from mafka4.limits import ETCD_MEMBER_COUNTS
from mafka4.limits.servers import ClusterConfig

METRICS_TARGETS_FILE_MODE = 0o644  # Prometheus, often another user, reads it; it names addresses, no secret


def add_commands(commands) -> None:
    up = commands.add_parser("up", help="start a local cluster (etcd + Ray on 127.0.0.1) in $MAFKA4_HOME (default ~/.mafka4)")
    up.add_argument("--write-nodes", type=int, default=ClusterConfig().write_nodes, help="simulated write nodes (default %(default)s)")
    up.add_argument("--read-nodes", type=int, default=ClusterConfig().read_nodes, help="simulated read nodes (default %(default)s)")
    up.add_argument("--etcd-members", type=int, choices=ETCD_MEMBER_COUNTS, default=ClusterConfig().etcd_members,
                    help="etcd members on 127.0.0.1 (default %(default)s); 3 keep metadata, leases and watches "
                         "working when any one member, the leader included, is lost")
    add_controller_setting_argument(up)
    up.set_defaults(run=_cmd_up)
    commands.add_parser("down", help="stop the local cluster and every process it started").set_defaults(run=_cmd_down)
    status = commands.add_parser("status", help="show whether the local cluster runs, which nodes are registered, "
                                                "where each live read node, replica and the active controller serve Prometheus "
                                                "metrics, the cluster's figures read from those metrics (under 'figures': "
                                                "partitions under-replicated or under min ISR, ISR and RISR sizes below "
                                                "their replicas, feed lag per read node, group lag per group, produce "
                                                "and end-to-end p99, the controller's elections and reshards, refusals "
                                                "by reason, and the targets that did not answer within 2 s), and "
                                                "the last read-node scaling decision with the replica moves in flight "
                                                "(when read_node_scaling is on); with --address, what 'mafka4 deploy' "
                                                "runs on that Ray cluster, its figures included")
    add_cluster_arguments(status, required=False)
    status.add_argument("--metrics-targets", metavar="FILE",
                        help="also write FILE (replaced whole): Prometheus file_sd JSON naming every live read node's, "
                             "replica's and the active controller's metrics address, for a file_sd_configs entry; run it again (e.g. every "
                             "minute) to follow nodes that start, move or stop")
    status.set_defaults(run=_cmd_status)
    commands.add_parser("demo", help="start a throwaway cluster; a producer writes while a consumer group grows from 1 "
                                     "to 4 members, each join splitting a virtual partition; check every message is "
                                     "read once, in order per key; stop it (under a minute)").set_defaults(run=_cmd_demo)


def _cmd_up(args: argparse.Namespace) -> int:
    from mafka4.runtime.environment import mafka4_home
    from mafka4.runtime.local import up

    state = up(mafka4_home(), ClusterConfig(write_nodes=args.write_nodes, read_nodes=args.read_nodes,
                                            etcd_members=args.etcd_members,
                                            controller_settings=tuple(args.controller_setting)))
    members = len(state.etcd_members)
    print(f"mafka4 cluster {state.cluster!r} is up: etcd {state.etcd_endpoint}"
          f"{f' ({members} members)' if members > 1 else ''}, Ray {state.ray_address}, "
          f"write nodes {', '.join(state.write_nodes)}, read nodes {', '.join(state.read_nodes) or 'none'}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    from mafka4.runtime.environment import mafka4_home
    from mafka4.runtime.local import down

    stopped = down(mafka4_home())
    print(f"mafka4 cluster stopped ({len(stopped)} processes)")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    if args.address:
        report = deployment_report(args)
    else:
        from mafka4.runtime.environment import mafka4_home
        from mafka4.runtime.local import status

        report = status(mafka4_home())
    print(json.dumps(report, indent=2, default=str))
    if args.metrics_targets:
        _write_metrics_targets(Path(args.metrics_targets), report)
    return 0 if report.get("running") else 1


def _write_metrics_targets(path: Path, report: dict) -> None:
    """Replace ``path`` by the file_sd JSON of the metrics addresses ``report`` shows (none if it
    shows none: Prometheus then scrapes nothing rather than nodes that are gone)."""
    from mafka4.durable_files import replace_file
    from mafka4.metrics.targets import file_sd, shown_targets

    targets = shown_targets(report.get("metrics", {}))
    text = json.dumps(file_sd(report.get("cluster", ""), targets), indent=2) + "\n"
    replace_file(path, lambda file: file.write(text.encode()), METRICS_TARGETS_FILE_MODE)
    print(f"mafka4: wrote {len(targets)} metrics targets to {path}", file=sys.stderr)


def _cmd_demo(args: argparse.Namespace) -> int:
    from mafka4.demo.run import run_demo

    return run_demo()
