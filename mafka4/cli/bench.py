"""``mafka4 bench WHAT``: the benchmarks, each writing a JSON report and printing its summary."""

from __future__ import annotations

import argparse
import json
import sys

from mafka4.limits import ASSIGNOR_NAMES, Acks, ProducerConfig


def add_commands(commands) -> None:
    bench = commands.add_parser("bench", help="benchmarks")
    bench_commands = bench.add_subparsers(dest="bench_command", required=True, metavar="WHAT")
    bench_produce = bench_commands.add_parser("produce", help="producer throughput and latency vs a bare Ray actor")
    bench_produce.add_argument("--messages", type=int, default=300_000)
    bench_produce.add_argument("--message-bytes", type=int, default=1024)
    bench_produce.add_argument("--partitions", type=int, default=2)
    bench_produce.add_argument("--replication-factor", type=int, default=2)
    bench_produce.add_argument("--acks", default="all", choices=[a.value for a in Acks])
    bench_produce.add_argument("--linger-ms", type=int, default=ProducerConfig().linger_ms)
    bench_produce.add_argument("--batch-bytes-max", type=int, default=ProducerConfig().batch_bytes_max)
    bench_produce.add_argument("--paced-msgs-per-s", type=int, default=10_000, help="rate of the latency run (default %(default)s)")
    bench_produce.add_argument("--skip-memory", action="store_true", help="skip the stalled-producer memory measurement")
    bench_produce.add_argument("--output", default="results/bench_produce.json", help="JSON report path (default %(default)s)")
    bench_produce.set_defaults(run=_cmd_bench_produce)
    bench_failover = bench_commands.add_parser("failover", help="unavailability of a partition when its leader is killed")
    bench_failover.add_argument("--repetitions", type=int, default=5, help="leader kills (default %(default)s)")
    bench_failover.add_argument("--replication-factor", type=int, default=3, help="default %(default)s")
    bench_failover.add_argument("--min-insync-replicas", type=int, default=2, help="default %(default)s")
    bench_failover.add_argument("--output", default="results/bench_failover.json", help="JSON report path (default %(default)s)")
    bench_failover.set_defaults(run=_cmd_bench_failover)
    _add_bench_rebalance_parser(bench_commands)
    _add_bench_vp_join_parser(bench_commands)
    _add_bench_vp_density_parser(bench_commands)
    _add_bench_feed_lag_parser(bench_commands)


def _add_bench_rebalance_parser(bench_commands) -> None:
    from mafka4.bench.rebalance import RebalanceBenchSettings

    defaults = RebalanceBenchSettings()
    rebalance = bench_commands.add_parser("rebalance", help="consumer stall while a member joins a group (Mafka3 eager rebalance)")
    rebalance.add_argument("--partitions", type=int, default=defaults.partitions)
    rebalance.add_argument("--consumers", type=int, default=defaults.consumers, help="members before the join (default %(default)s)")
    rebalance.add_argument("--rate-msgs-per-s", type=int, default=defaults.rate_msgs_per_s)
    rebalance.add_argument("--warmup-s", type=float, default=defaults.warmup_s)
    rebalance.add_argument("--after-join-s", type=float, default=defaults.after_join_s)
    rebalance.add_argument("--trials", type=int, default=defaults.trials)
    rebalance.add_argument("--assignor", default=defaults.assignor, choices=list(ASSIGNOR_NAMES))
    rebalance.add_argument("--output", default="results/bench_rebalance.json", help="JSON report path (default %(default)s)")
    rebalance.set_defaults(run=_cmd_bench_rebalance)


def _add_bench_vp_join_parser(bench_commands) -> None:
    from mafka4.bench.vp_join import VpJoinBenchSettings

    defaults = VpJoinBenchSettings()
    vp_join = bench_commands.add_parser("vp-join", help="consumer stall while a member joins a mafka4-mode group "
                                                        "(VP split), next to the Mafka3 eager rebalance")
    vp_join.add_argument("--partitions", type=int, default=defaults.partitions, help="physical partitions (default %(default)s)")
    vp_join.add_argument("--consumers", type=int, default=defaults.consumers,
                         help="members before the join, one VP each (default %(default)s)")
    vp_join.add_argument("--virtual-partitions", type=int,
                         help="VPs at creation (default: one per consumer, so the joiner causes a split; more: a handover)")
    vp_join.add_argument("--rate-msgs-per-s", type=int, default=defaults.rate_msgs_per_s)
    vp_join.add_argument("--warmup-s", type=float, default=defaults.warmup_s)
    vp_join.add_argument("--after-join-s", type=float, default=defaults.after_join_s)
    vp_join.add_argument("--trials", type=int, default=defaults.trials)
    vp_join.add_argument("--read-replicas", type=int, default=defaults.read_replicas)
    vp_join.add_argument("--skip-mafka3", action="store_true", help="do not run the Mafka3 eager-rebalance trials")
    vp_join.add_argument("--output", default="results/bench_vp_join.json", help="JSON report path (default %(default)s)")
    vp_join.set_defaults(run=_cmd_bench_vp_join)


def _add_bench_vp_density_parser(bench_commands) -> None:
    from mafka4.bench.density import WINDOW_S_MIN, VpDensityBenchSettings

    defaults, smoke = VpDensityBenchSettings(), VpDensityBenchSettings.smoke_sized()
    density = bench_commands.add_parser("vp-density", help="RSS and idle CPU of the read nodes per hosted virtual "
                                                           "partition, next to one bare idle Ray actor")
    density.add_argument("--virtual-partitions", type=int, metavar="N",
                         help=f"VPs of the topic created (default {defaults.virtual_partitions}, "
                              f"{defaults.read_replicas} read replicas each)")
    density.add_argument("--partitions", type=int, metavar="P",
                         help=f"physical partitions (default {defaults.partitions})")
    density.add_argument("--window-s", type=float, metavar="S",
                         help=f"seconds of each idle measurement, at least {WINDOW_S_MIN:g} "
                              f"(default {defaults.window_s:g})")
    density.add_argument("--settle-s", type=float, metavar="S",
                         help=f"seconds between creating the topic and measuring (default {defaults.settle_s:g})")
    density.add_argument("--smoke", action="store_true",
                         help=f"a test-sized run ({smoke.virtual_partitions} VPs, {smoke.window_s:g} s windows): "
                              f"not a result")
    density.add_argument("--output", default="results/bench_vp_density.json",
                         help="JSON report path (default %(default)s)")
    density.set_defaults(run=_cmd_bench_vp_density)


def _add_bench_feed_lag_parser(bench_commands) -> None:
    from mafka4.bench.lag import FeedLagBenchSettings

    defaults, smoke = FeedLagBenchSettings(), FeedLagBenchSettings.smoke_sized()
    feed_lag = bench_commands.add_parser("feed-lag", help="how far feeding trails the high watermark while one "
                                                          "producer is saturated, per VP count")
    feed_lag.add_argument("--virtual-partitions", type=_vp_counts, metavar="N[,N...]",
                          help=f"VP counts, one topic each (default {','.join(map(str, defaults.virtual_partitions))})")
    feed_lag.add_argument("--partitions", type=int, metavar="P",
                          help=f"physical partitions (default {defaults.partitions})")
    feed_lag.add_argument("--duration-s", type=float, metavar="S",
                          help=f"seconds of producing per VP count (default {defaults.duration_s:g})")
    feed_lag.add_argument("--smoke", action="store_true",
                          help=f"a test-sized run ({','.join(map(str, smoke.virtual_partitions))} VPs, "
                               f"{smoke.duration_s:g} s): not a result")
    feed_lag.add_argument("--output", default="results/bench_feed_lag.json",
                          help="JSON report path (default %(default)s)")
    feed_lag.set_defaults(run=_cmd_bench_feed_lag)


def _cmd_bench_produce(args: argparse.Namespace) -> int:
    from mafka4.bench.produce import ProduceBenchSettings, run_produce_bench

    settings = ProduceBenchSettings(
        messages=args.messages, message_bytes=args.message_bytes, partitions=args.partitions,
        replication_factor=args.replication_factor, acks=args.acks, linger_ms=args.linger_ms,
        batch_bytes_max=args.batch_bytes_max, paced_msgs_per_s=args.paced_msgs_per_s, stalled_producer=not args.skip_memory,
    )
    report = run_produce_bench(settings, args.output)
    print(json.dumps(report["summary"], indent=2))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _cmd_bench_failover(args: argparse.Namespace) -> int:
    from mafka4.bench.failover import FailoverBenchSettings, run_failover_bench

    settings = FailoverBenchSettings(repetitions=args.repetitions, replication_factor=args.replication_factor,
                                     min_insync_replicas=args.min_insync_replicas)
    report = run_failover_bench(settings, args.output)
    print(json.dumps(report["summary"], indent=2))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _cmd_bench_rebalance(args: argparse.Namespace) -> int:
    from mafka4.bench.rebalance import RebalanceBenchSettings, run_rebalance_bench

    settings = RebalanceBenchSettings(partitions=args.partitions, consumers=args.consumers, rate_msgs_per_s=args.rate_msgs_per_s,
                                      warmup_s=args.warmup_s, after_join_s=args.after_join_s, trials=args.trials,
                                      assignor=args.assignor)
    report = run_rebalance_bench(settings, args.output)
    print(json.dumps(report["summary"], indent=2))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _cmd_bench_vp_join(args: argparse.Namespace) -> int:
    from mafka4.bench.vp_join import VpJoinBenchSettings, run_vp_join_bench

    settings = VpJoinBenchSettings(partitions=args.partitions, consumers=args.consumers,
                                   virtual_partitions=args.virtual_partitions,
                                   rate_msgs_per_s=args.rate_msgs_per_s, warmup_s=args.warmup_s,
                                   after_join_s=args.after_join_s, trials=args.trials, read_replicas=args.read_replicas,
                                   compare_mafka3=not args.skip_mafka3)
    report = run_vp_join_bench(settings, args.output)
    print(json.dumps(report["summary"], indent=2))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _cmd_bench_vp_density(args: argparse.Namespace) -> int:
    from mafka4.bench.density import VpDensityBenchSettings
    from mafka4.bench.vp_density import run_vp_density_bench

    settings = _bench_settings(VpDensityBenchSettings, args.smoke, virtual_partitions=args.virtual_partitions,
                               partitions=args.partitions, window_s=args.window_s, settle_s=args.settle_s)
    report = run_vp_density_bench(settings, args.output)
    print(json.dumps(report["summary"], indent=2))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _cmd_bench_feed_lag(args: argparse.Namespace) -> int:
    from mafka4.bench.feed_lag import run_feed_lag_bench
    from mafka4.bench.lag import FeedLagBenchSettings

    settings = _bench_settings(FeedLagBenchSettings, args.smoke, virtual_partitions=args.virtual_partitions,
                               partitions=args.partitions, duration_s=args.duration_s)
    report = run_feed_lag_bench(settings, args.output)
    print(json.dumps(report["summary"], indent=2))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _bench_settings(settings_class, smoke: bool, **given):
    """A bench's default settings, or with --smoke its test size; the options given win over both."""
    changes = {name: value for name, value in given.items() if value is not None}
    return settings_class.smoke_sized(**changes) if smoke else settings_class(**changes)


def _vp_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of VP counts, e.g. 8,256") from None
