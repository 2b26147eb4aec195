"""mafka4: a local cluster, topics, producing, consuming and benchmarks.

Every command prints a one-line error naming the problem and the fix (exit code 2 for
usage or input errors, 1 for cluster errors) instead of a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from mafka4.cli import bench, clients, cluster, groups, topics
from mafka4.errors import MafkaError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mafka4", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (cluster, topics, clients, groups, bench):
        group.add_commands(commands)
    _add_simulation_parsers(commands)
    return parser


def _add_simulation_parsers(commands) -> None:
    """Experiments and analysis live in ``simulations/``; their modules register their own commands."""
    from simulations.analysis import add_analyze_parser
    from simulations.chaos_settings import add_chaos_parser
    from simulations.cli import add_experiment_parser
    from simulations.compare import add_compare_parser
    from simulations.fleet.cli import add_fleet_parser

    add_experiment_parser(commands)
    add_fleet_parser(commands)
    add_analyze_parser(commands)
    add_compare_parser(commands)
    add_chaos_parser(commands)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except Exception as raised:
        from mafka4.client.errors import unwrap

        error = unwrap(raised)
        if not isinstance(error, MafkaError):
            raise
        print(f"mafka4: error: {error.message}", file=sys.stderr)
        return 2 if error.usage_error else 1
