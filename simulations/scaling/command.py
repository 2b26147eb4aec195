"""``mafka4 experiment scaling``: the command-line face of ``simulations.scaling.experiment``.

``--quick`` is the quick profile (``ScalingSettings.quick``) of the command's defaults. It fixes
the consumer counts and the repetitions, so it is refused together with ``--consumers`` or
``--repetitions``: a run is either the quick profile or sized by hand, never a mix of both that
the report would word as one of them.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from mafka4.errors import InvalidConfig
from simulations.extras import require_analysis_extra
from simulations.scaling.experiment import QUICK_CONSUMERS, ScalingSettings, run_scaling

DEFAULTS = ScalingSettings()


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 1,2,4,8") from None


def _mode_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(","))


def settings_from_args(args: argparse.Namespace) -> ScalingSettings:
    """The settings a command line asks for: the parser's defaults (``add_scaling_arguments``), in the
    quick profile with ``--quick``, with every option given."""
    sized = {name: value for name, value in (("consumers", args.consumers), ("repetitions", args.repetitions))
             if value is not None}
    if args.quick and sized:
        raise InvalidConfig(f"--quick measures consumers {_shown(QUICK_CONSUMERS)} once each: drop "
                            f"{' and '.join('--' + name for name in sized)}, or drop --quick to size the run yourself")
    base = args.scaling_defaults.quick() if args.quick else args.scaling_defaults
    return replace(base, **sized, modes=args.modes, physical_partitions=args.physical_partitions,
                   replication_factor=args.replication_factor, read_replicas=args.read_replicas, nodes=args.nodes,
                   rate_msgs_per_s=args.rate_msgs_per_s, duration_s=args.duration_s, message_bytes=args.message_bytes,
                   seed=args.seed, pin_cpus=not args.no_pin, pin_services=args.pin_services,
                   experiment_id=args.experiment_id, settle_load=args.settle_load, lanes=args.lanes,
                   mafka3_lanes_max=args.mafka3_lanes_max)


def _shown(counts: tuple[int, ...]) -> str:
    return ",".join(map(str, counts))


def add_scaling_arguments(parser: argparse.ArgumentParser, defaults: ScalingSettings = DEFAULTS) -> None:
    parser.set_defaults(scaling_defaults=defaults)
    # --consumers and --repetitions default to None: --quick must know whether they were given.
    parser.add_argument("--consumers", type=_int_list,
                        help=f"consumer counts, comma-separated (default {_shown(defaults.consumers)})")
    parser.add_argument("--modes", type=_mode_list, default=",".join(defaults.modes), help="comma-separated (default %(default)s)")
    parser.add_argument("--physical-partitions", type=int, default=defaults.physical_partitions,
                        help="mafka4's fixed physical partitions (mafka3 uses one per consumer; default %(default)s)")
    parser.add_argument("--replication-factor", type=int, default=defaults.replication_factor, help="default %(default)s")
    parser.add_argument("--read-replicas", type=int, default=defaults.read_replicas, help="default %(default)s")
    parser.add_argument("--nodes", type=int, default=defaults.nodes,
                        help="simulated machines per mode: mafka4 splits them into write and read nodes, mafka3 uses "
                             "all as brokers (default %(default)s)")
    parser.add_argument("--rate-msgs-per-s", type=int, default=defaults.rate_msgs_per_s, help="default %(default)s")
    parser.add_argument("--duration-s", type=float, default=defaults.duration_s, help="default %(default)s")
    parser.add_argument("--message-bytes", type=int, default=defaults.message_bytes, help="default %(default)s")
    parser.add_argument("--seed", type=int, default=defaults.seed,
                        help="seed of the first repetition; repetition r uses seed + r (default %(default)s)")
    parser.add_argument("--repetitions", type=int,
                        help="runs of every configuration, each on a fresh topic and group; the modes take turns "
                             "by repetition, each repetition of a mode on a fresh cluster (repetition r uses seed + r; "
                             f"default {defaults.repetitions})")
    parser.add_argument("--quick", action="store_true",
                        help=f"the quick profile: consumers {_shown(QUICK_CONSUMERS)}, 1 repetition, for a first "
                             "look; the report's first line says that its tails rest on few samples. Not with "
                             "--consumers or --repetitions")
    parser.add_argument("--no-pin", action="store_true", help="do not pin write-side and read-side nodes to CPU sets")
    parser.add_argument("--pin-services", action="store_true",
                        help="also pin the cluster's shared services (etcd, Ray's head, the controller) to the read "
                             "side's CPUs (default: unpinned)")
    parser.add_argument("--settle-load", type=float, default=defaults.settle_load, metavar="LOAD",
                        help="once the group settled, before every run, wait (at most 180 s) for the 1-minute "
                             "load average to fall below LOAD (default: "
                             + ("measure at once" if defaults.settle_load is None else f"{defaults.settle_load:g}") + ")")
    parser.add_argument("--lanes", type=_int_list, default=_shown(defaults.lanes),
                        help="lane counts, comma-separated: a run of L > 0 lanes sends round robin over L lanes at "
                             "the same total rate; mafka4 reads them as VPs by its trunk members' fallback, mafka3 as "
                             "a topic per lane (default %(default)s: no lanes)")
    parser.add_argument("--mafka3-lanes-max", type=int, default=defaults.mafka3_lanes_max,
                        help="mafka3 runs with more lanes are not run: a topic per lane, (L+1) x consumers x "
                             "replication factor replica actors (default %(default)s)")
    parser.add_argument("--experiment-id", default="", help="default scaling-seed<SEED>; a rerun with the same id and "
                                                            "--out skips finished runs")


def _cmd_experiment_scaling(args: argparse.Namespace) -> int:
    require_analysis_extra("experiment scaling", ("pyarrow",))  # the event logs are Parquet
    paths = run_scaling(settings_from_args(args), Path(args.out))
    print(f"event logs of {len(paths)} configurations in {Path(args.out) / paths[0].parent.name}; "
          f"analyse them with 'mafka4 analyze {args.out}'")
    return 0


def add_experiment_parser(commands) -> None:
    experiment = commands.add_parser("experiment", help="experiments on a throwaway local cluster")
    kinds = experiment.add_subparsers(dest="experiment_command", required=True, metavar="EXPERIMENT")
    scaling = kinds.add_parser("scaling", help="Mafka3 vs Mafka4 as consumers scale: produce and end-to-end latency "
                                               "of every message, written as Parquet event logs")
    add_scaling_arguments(scaling)
    scaling.add_argument("--out", default="results/experiments", help="event-log directory (default %(default)s)")
    scaling.set_defaults(run=_cmd_experiment_scaling)
