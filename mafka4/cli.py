"""mafka4: a local cluster, topics, producing, consuming and benchmarks.

Every command prints a one-line error naming the problem and the fix (exit code 2 for
usage or input errors, 1 for cluster errors) instead of a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from mafka4.errors import InvalidConfig, InvalidRecord, MafkaError, RecordsLost
from mafka4.limits import (ASSIGNOR_NAMES, READ_MODE_DEFAULT, READ_MODES, VIRTUAL_PARTITIONS_MAX, Acks, ClusterConfig,
                           ProducerConfig, parse_setting)


def _cmd_up(args: argparse.Namespace) -> int:
    from mafka4.runtime.environment import mafka4_home
    from mafka4.runtime.local import up

    state = up(mafka4_home(), ClusterConfig(write_nodes=args.write_nodes, read_nodes=args.read_nodes,
                                            controller_settings=tuple(args.controller_setting)))
    print(f"mafka4 cluster {state.cluster!r} is up: etcd {state.etcd_endpoint}, Ray {state.ray_address}, "
          f"write nodes {', '.join(state.write_nodes)}, read nodes {', '.join(state.read_nodes) or 'none'}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    from mafka4.runtime.environment import mafka4_home
    from mafka4.runtime.local import down

    stopped = down(mafka4_home())
    print(f"mafka4 cluster stopped ({len(stopped)} processes)")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from mafka4.runtime.environment import mafka4_home
    from mafka4.runtime.local import status

    report = status(mafka4_home())
    print(json.dumps(report, indent=2, default=str))
    return 0 if report.get("running") else 1


def _admin():
    from mafka4.client.admin import Admin

    return Admin()


def _cmd_topic_create(args: argparse.Namespace) -> int:
    from mafka4.client.admin import new_topic_config

    overrides = {}
    if args.min_insync_replicas is not None:
        overrides["min_insync_replicas"] = args.min_insync_replicas
    if args.retention_ms is not None:
        overrides["retention_ms"] = args.retention_ms
    if args.virtual_partitions_max is not None:
        overrides["virtual_partitions_max"] = args.virtual_partitions_max
    # Refuse a bad name or value before connecting: without a cluster the user would hear
    # "no local cluster" and not what is wrong with the request.
    new_topic_config(args.name, args.partitions, args.replication_factor, args.virtual_partitions, args.read_replicas,
                     args.read_mode, **overrides)
    metadata = _admin().create_topic(args.name, args.partitions, args.replication_factor,
                                     virtual_partitions=args.virtual_partitions, read_replicas=args.read_replicas,
                                     read_mode=args.read_mode, **overrides)
    config = metadata.config
    read_path = (f", {config.virtual_partitions} virtual partition(s) with {config.read_replicas} read replica(s) each"
                 if config.read_mode == "mafka4" else "")
    print(f"created topic {metadata.name!r}: {len(metadata.partitions)} partition(s), "
          f"replication factor {config.replication_factor}, read mode {config.read_mode}{read_path}")
    return 0


def _cmd_topic_list(args: argparse.Namespace) -> int:
    for name in _admin().list_topics():
        print(name)
    return 0


def _cmd_topic_describe(args: argparse.Namespace) -> int:
    description = _admin().describe_topic(args.name)
    config = description["config"]
    print(f"topic {args.name}  partitions={config.partitions}  replication_factor={config.replication_factor}  "
          f"min_insync_replicas={config.min_insync_replicas}  retention_ms={config.retention_ms}")
    print(f"{'partition':>9}  {'leader':>6}  {'epoch':>5}  {'replicas':<12}  {'isr':<12}  {'log_end':>8}  {'high_watermark':>14}")
    for p in description["partitions"]:
        live = p["live"] or {}
        isr = ",".join(sorted(live.get("isr", p["isr"])))
        print(f"{p['partition']:>9}  {p['leader']:>6}  {p['leader_epoch']:>5}  {','.join(p['replicas']):<12}  {isr:<12}  "
              f"{live.get('log_end_offset', '?'):>8}  {live.get('high_watermark', '?'):>14}")
    if description["virtual_partitions"]:
        print(f"read_mode={config.read_mode}  read_replicas={config.read_replicas}  "
              f"virtual_partitions_max={config.virtual_partitions_max}")
        print(f"{'vp':>4}  {'status':<7}  {'hash_range':<42}  {'leader':>6}  {'epoch':>5}  {'risr':<12}  "
              f"{'log_end':>8}  {'high_watermark':>14}")
        for v in description["virtual_partitions"]:
            live = v["live"] or {}
            status = ("active" if v["active"] else "retired" if v.get("retired") else
                      "sealed" if "sealed_end_offset" in v else "closed")
            start, end = v["range"]
            print(f"{v['virtual_partition']:>4}  {status:<7}  {f'[{start:#x}, {end:#x})':<42}  {v['leader']:>6}  "
                  f"{v['leader_epoch']:>5}  {','.join(v['risr']):<12}  {live.get('log_end_offset', '?'):>8}  "
                  f"{live.get('high_watermark', '?'):>14}")
    _print_read_loss(args.name, description["read_loss"])
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    epochs = _admin().scale(args.topic, args.virtual_partitions)
    for epoch in epochs:
        print(f"split epoch {epoch.epoch}: {'+'.join(map(str, epoch.parents))} -> {'+'.join(map(str, epoch.children))} "
              f"at cut {list(epoch.cut)}")
    print(f"topic {args.topic!r} has {args.virtual_partitions} virtual partition(s) "
          f"({len(epochs)} split(s) and merge(s))")
    return 0


def _cmd_topic_delete(args: argparse.Namespace) -> int:
    _admin().delete_topic(args.name)
    print(f"deleted topic {args.name!r}")
    return 0


def _cmd_produce(args: argparse.Namespace) -> int:
    from mafka4.client.producer import Producer

    failures = []
    with Producer(args.topic, acks=args.acks, linger_ms=args.linger_ms) as producer:
        count = 0
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if args.key_sep is not None:
                key, separator, value = line.partition(args.key_sep.encode())
                if not separator:
                    raise InvalidRecord(f"line {count + 1} has no key separator {args.key_sep!r}: write KEY{args.key_sep}VALUE")
                line = value
            future = producer.send(line, key=key)
            future.add_callback(lambda _, error: failures.append(error) if error else None)
            count += 1
        producer.flush()
    if failures:
        print(f"{len(failures)} of {count} messages failed: {failures[0]}", file=sys.stderr)
        return 1
    print(f"produced {count} messages to {args.topic!r} (acks={args.acks})", file=sys.stderr)
    return 0


def _cmd_consume(args: argparse.Namespace) -> int:
    import time

    from mafka4.client.consumer import Consumer

    consumer = Consumer(args.topic, group=args.group, from_beginning=args.from_beginning)
    printed = 0
    idle_deadline = time.monotonic() + args.timeout_ms / 1000
    out = sys.stdout.buffer
    try:
        while args.max_messages is None or printed < args.max_messages:
            try:
                messages = consumer.poll(timeout_ms=min(args.timeout_ms, 500))
            except RecordsLost as lost:  # said once, in order; reading goes on after the gap
                print(f"mafka4: {lost.message}", file=sys.stderr)
                continue
            if not messages:
                if time.monotonic() >= idle_deadline:
                    break
                continue
            idle_deadline = time.monotonic() + args.timeout_ms / 1000
            shown = messages[: None if args.max_messages is None else args.max_messages - printed]
            for message in shown:
                if args.print_key:
                    out.write((message.key or b"") + args.key_sep.encode())
                out.write(message.value + b"\n")
                printed += 1
            out.flush()
            _rewind_unprinted(consumer, messages[len(shown):])
    finally:
        consumer.close()  # in a group: commits what was printed and leaves
    group = f" as group {args.group!r}" if args.group else ""
    print(f"consumed {printed} messages from {args.topic!r}{group}", file=sys.stderr)
    return 0


def _rewind_unprinted(consumer, unprinted: list) -> None:
    """Move positions back to the first message not printed, so a group does not commit past it."""
    first: dict[int, int] = {}
    for message in unprinted:
        first[message.partition] = min(message.offset, first.get(message.partition, message.offset))
    for partition, offset in first.items():
        consumer.seek(partition, offset)


def _group_admin():
    from mafka4.client.group_admin import GroupAdmin

    return GroupAdmin()


def _cmd_group_list(args: argparse.Namespace) -> int:
    with _group_admin() as admin:
        for name in admin.list_groups():
            print(name)
    return 0


def _cmd_group_describe(args: argparse.Namespace) -> int:
    with _group_admin() as admin:
        description = admin.describe_group(args.group)
    print(f"group {description.group}  generation={_dash(description.generation)}  assignor={_dash(description.assignor)}  "
          f"members={len(description.members)}  total_lag={_dash(description.total_lag)}")
    for member in description.members:
        print(f"member {member.member_id}  topic={member.topic}")
    print(f"{'topic':<24}  {'partition':>9}  {'member':<32}  {'committed_offset':>16}  {'high_watermark':>14}  {'lag':>8}")
    for row in description.partitions:
        print(f"{row.topic:<24}  {row.partition:>9}  {_dash(row.member_id):<32}  {_dash(row.committed_offset):>16}  "
              f"{row.high_watermark:>14}  {_dash(row.lag):>8}")
    if description.virtual_partitions:
        print(f"{'topic':<24}  {'vp':>4}  {'status':<7}  {'member':<32}  {'committed_offset':>16}  {'high_watermark':>14}  "
              f"{'lag':>8}")
    for row in description.virtual_partitions:
        print(f"{row.topic:<24}  {row.vp:>4}  {row.status.value:<7}  {_dash(row.member_id):<32}  "
              f"{_dash(row.committed_offset):>16}  {_dash(row.high_watermark):>14}  {_dash(row.lag):>8}")
    for topic, losses in description.read_loss.items():
        _print_read_loss(topic, losses)
    return 0


def _setting(text: str) -> tuple[str, int]:
    try:
        return parse_setting(text)
    except InvalidConfig as error:
        raise argparse.ArgumentTypeError(error.message) from None


def _print_read_loss(topic: str, losses: dict[int, list[list[int]]]) -> None:
    """Physical offsets retention deleted before every read node fed them: never silent."""
    for partition, ranges in losses.items():
        lost = ", ".join(f"[{first}, {end})" for first, end in ranges)
        print(f"LOST {topic} partition {partition}: offsets {lost} were deleted by retention before every read node "
              f"fed them (raise unfed_hold_ms_max or keep read nodes running)")


def _dash(value: object) -> object:
    """What a table cell shows for an absent value (no owner, nothing committed)."""
    return "-" if value is None else value


def _timestamp_ms(text: str) -> int:
    from datetime import datetime, timezone

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidConfig(f"--to-time {text!r} is not an ISO 8601 time: write e.g. 2026-11-22T21:30:00+00:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)  # the same answer on every machine
    return int(moment.timestamp() * 1000)


def _cmd_group_reset_offsets(args: argparse.Namespace) -> int:
    target = "earliest" if args.to_earliest else "latest" if args.to_latest else _timestamp_ms(args.to_time)
    with _group_admin() as admin:
        changes = admin.reset_offsets(args.group, args.topic, target)
        label = "vp " if admin.is_virtual(args.topic) else ""
    for partition, (before, after) in sorted(changes.items()):
        print(f"{args.topic} {label}{partition}: {'-' if before is None else before} -> {after}")
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


def _bench_settings(settings_class, smoke: bool, **given):
    """A bench's default settings, or with --smoke its test size; the options given win over both."""
    changes = {name: value for name, value in given.items() if value is not None}
    return settings_class.smoke_sized(**changes) if smoke else settings_class(**changes)


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


def _vp_counts(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of VP counts, e.g. 8,256") from None


def _cmd_demo(args: argparse.Namespace) -> int:
    from mafka4.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mafka4", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start a local cluster (etcd + Ray on 127.0.0.1) in $MAFKA4_HOME (default ~/.mafka4)")
    up.add_argument("--write-nodes", type=int, default=ClusterConfig().write_nodes, help="simulated write nodes (default %(default)s)")
    up.add_argument("--read-nodes", type=int, default=ClusterConfig().read_nodes, help="simulated read nodes (default %(default)s)")
    up.add_argument("--controller-setting", action="append", default=[], type=_setting, metavar="NAME=VALUE",
                    help="run the controller with another ControllerConfig value, e.g. vp_merge_delay_ms=5000 or "
                         "read_node_gone_ms=60000 (repeatable)")
    up.set_defaults(run=_cmd_up)
    commands.add_parser("down", help="stop the local cluster and every process it started").set_defaults(run=_cmd_down)
    commands.add_parser("status", help="show whether the local cluster runs and which nodes are registered").set_defaults(run=_cmd_status)

    topic = commands.add_parser("topic", help="create, list, describe or delete topics")
    topic_commands = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = topic_commands.add_parser("create", help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1, help="physical partitions (default %(default)s)")
    create.add_argument("--replication-factor", type=int, default=1, help="replicas per partition (default %(default)s)")
    create.add_argument("--min-insync-replicas", type=int, help="acks=all needs at least this many in-sync replicas (default 1)")
    create.add_argument("--retention-ms", type=int, help="delete segments older than this (default 7 days)")
    create.add_argument("--read-mode", choices=READ_MODES, default=READ_MODE_DEFAULT,
                        help="mafka4: consumers read virtual partitions on read nodes; mafka3: consumers read the "
                             "physical partitions (default %(default)s)")
    create.add_argument("--virtual-partitions", type=int,
                        help="virtual partitions at creation (mafka4 mode; default one per physical partition)")
    create.add_argument("--read-replicas", type=int, default=1,
                        help="replicas of each virtual partition, on distinct read nodes (mafka4 mode; default %(default)s)")
    create.add_argument("--virtual-partitions-max", type=int,
                        help=f"splits and scaling stop at this many virtual partitions (default {VIRTUAL_PARTITIONS_MAX})")
    create.set_defaults(run=_cmd_topic_create)
    topic_commands.add_parser("list", help="list topic names").set_defaults(run=_cmd_topic_list)
    describe = topic_commands.add_parser("describe", help="partitions, leaders, ISR and offsets")
    describe.add_argument("name")
    describe.set_defaults(run=_cmd_topic_describe)
    delete = topic_commands.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    delete.set_defaults(run=_cmd_topic_delete)

    produce = commands.add_parser("produce", help="send one message per line of standard input")
    produce.add_argument("topic")
    produce.add_argument("--key-sep", help="split each line into KEY<SEP>VALUE")
    produce.add_argument("--acks", default="all", choices=[a.value for a in Acks], help="default %(default)s")
    produce.add_argument("--linger-ms", type=int, default=ProducerConfig().linger_ms, help="default %(default)s")
    produce.set_defaults(run=_cmd_produce)

    scale = commands.add_parser("scale", help="split or merge a mafka4-mode topic's virtual partitions to a count")
    scale.add_argument("topic")
    scale.add_argument("--virtual-partitions", type=int, required=True, help="the active virtual partitions wanted")
    scale.set_defaults(run=_cmd_scale)

    consume = commands.add_parser("consume", help="print committed messages of every partition (or virtual "
                                                  "partition), one per line")
    consume.add_argument("topic")
    consume.add_argument("--group", help="consume as a member of this consumer group, committing offsets")
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at the oldest message (default: only new ones); with --group: where the group "
                              "has no committed offset (auto_offset_reset=earliest)")
    consume.add_argument("--max-messages", type=int, help="stop after this many messages")
    consume.add_argument("--timeout-ms", type=int, default=10_000, help="stop after this long without a message (default %(default)s)")
    consume.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    consume.add_argument("--key-sep", default="\t", help="separator for --print-key (default tab)")
    consume.set_defaults(run=_cmd_consume)
    _add_group_parser(commands)

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

    commands.add_parser("demo", help="start a throwaway cluster, produce and consume 2,000 messages, stop it").set_defaults(run=_cmd_demo)
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


def _add_group_parser(commands) -> None:
    group = commands.add_parser("group", help="list consumer groups, describe them with lag, reset their offsets")
    group_commands = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    group_commands.add_parser("list", help="list group names").set_defaults(run=_cmd_group_list)
    describe = group_commands.add_parser("describe", help="members and, per partition, owner, committed offset, "
                                                          "high watermark and lag")
    describe.add_argument("group")
    describe.set_defaults(run=_cmd_group_describe)
    reset = group_commands.add_parser("reset-offsets", help="set a topic's committed offsets (the group must have no members)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset of each partition")
    target.add_argument("--to-latest", action="store_true", help="the high watermark of each partition")
    target.add_argument("--to-time", metavar="ISO", help="the first message at or after this time (UTC unless it has an offset)")
    reset.set_defaults(run=_cmd_group_reset_offsets)


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


if __name__ == "__main__":
    sys.exit(main())
