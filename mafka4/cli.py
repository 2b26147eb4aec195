"""mafka4: a local cluster, topics, producing, consuming and benchmarks.

Every command prints a one-line error naming the problem and the fix (exit code 2 for
usage or input errors, 1 for cluster errors) instead of a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from mafka4.errors import InvalidConfig, InvalidRecord, InvalidTopicName, MafkaError, MessageTooLarge, UnknownTopic
from mafka4.limits import Acks, ClusterConfig, ProducerConfig

USAGE_ERRORS = (InvalidConfig, InvalidTopicName, InvalidRecord, MessageTooLarge, UnknownTopic)


def _cmd_up(args: argparse.Namespace) -> int:
    from mafka4.runtime.environment import mafka4_home
    from mafka4.runtime.local import up

    state = up(mafka4_home(), ClusterConfig(write_nodes=args.write_nodes, read_nodes=args.read_nodes))
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
    overrides = {}
    if args.min_insync_replicas is not None:
        overrides["min_insync_replicas"] = args.min_insync_replicas
    if args.retention_ms is not None:
        overrides["retention_ms"] = args.retention_ms
    metadata = _admin().create_topic(args.name, args.partitions, args.replication_factor, **overrides)
    print(f"created topic {metadata.name!r}: {len(metadata.partitions)} partition(s), "
          f"replication factor {metadata.config.replication_factor}")
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

    consumer = Consumer(args.topic, from_beginning=args.from_beginning)
    printed = 0
    idle_deadline = time.monotonic() + args.timeout_ms / 1000
    out = sys.stdout.buffer
    while args.max_messages is None or printed < args.max_messages:
        messages = consumer.poll(timeout_ms=min(args.timeout_ms, 500))
        if not messages:
            if time.monotonic() >= idle_deadline:
                break
            continue
        idle_deadline = time.monotonic() + args.timeout_ms / 1000
        for message in messages[: None if args.max_messages is None else args.max_messages - printed]:
            if args.print_key:
                out.write((message.key or b"") + args.key_sep.encode())
            out.write(message.value + b"\n")
            printed += 1
        out.flush()
    consumer.close()
    print(f"consumed {printed} messages from {args.topic!r}", file=sys.stderr)
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


def _cmd_demo(args: argparse.Namespace) -> int:
    from mafka4.demo import run_demo

    return run_demo()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mafka4", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start a local cluster (etcd + Ray on 127.0.0.1) in $MAFKA4_HOME (default ~/.mafka4)")
    up.add_argument("--write-nodes", type=int, default=ClusterConfig().write_nodes, help="simulated write nodes (default %(default)s)")
    up.add_argument("--read-nodes", type=int, default=ClusterConfig().read_nodes, help="simulated read nodes (default %(default)s)")
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

    consume = commands.add_parser("consume", help="print committed messages of every partition, one per line")
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true", help="start at the oldest message (default: only new ones)")
    consume.add_argument("--max-messages", type=int, help="stop after this many messages")
    consume.add_argument("--timeout-ms", type=int, default=10_000, help="stop after this long without a message (default %(default)s)")
    consume.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    consume.add_argument("--key-sep", default="\t", help="separator for --print-key (default tab)")
    consume.set_defaults(run=_cmd_consume)

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

    commands.add_parser("demo", help="start a throwaway cluster, produce and consume 2,000 messages, stop it").set_defaults(run=_cmd_demo)
    return parser


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
        return 2 if isinstance(error, USAGE_ERRORS) else 1


if __name__ == "__main__":
    sys.exit(main())
