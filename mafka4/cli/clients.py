"""``mafka4 produce`` and ``mafka4 consume``: one message per line of standard input or output."""

from __future__ import annotations

import argparse
import sys

from mafka4.compression import Codec
from mafka4.errors import InvalidRecord, RecordsLost
from mafka4.limits import COMPRESSION_ENV, LANE_ORDERS, Acks, ConsumerConfig, ProducerConfig


def add_commands(commands) -> None:
    produce = commands.add_parser("produce", help="send one message per line of standard input")
    produce.add_argument("topic")
    produce.add_argument("--key-sep", help="split each line into KEY<SEP>VALUE")
    produce.add_argument("--acks", default="all", choices=[a.value for a in Acks], help="default %(default)s")
    produce.add_argument("--linger-ms", type=int, default=ProducerConfig().linger_ms, help="default %(default)s")
    produce.add_argument("--compression", choices=[str(codec) for codec in Codec],
                         help=f"codec of every batch sent, recorded in the batch so readers need not be told "
                              f"(default: ${COMPRESSION_ENV} if set, else none)")
    produce.add_argument("--lane", help="send every line in this lane of the topic (opened by its first message; "
                                        "default: the trunk)")
    produce.add_argument("--delay", type=int, metavar="MS",
                         help="deliver each line MS milliseconds after it is sent (1000 up to the topic's "
                              "delay_ms_max, 7 days by default); prints each message's id, PARTITION:OFFSET, which "
                              "'mafka4 topic cancel-delayed' takes")
    produce.set_defaults(run=_cmd_produce)

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
    consume.add_argument("--lane", action="append", dest="lanes", metavar="LANE",
                         help="read only this lane (repeat for several; '' names the trunk). Default: with --group, "
                              "the trunk and the lanes the group has no reader of; without, every lane")
    consume.add_argument("--lane-order", choices=LANE_ORDERS, default=ConsumerConfig().lane_order,
                         help="how a consumer reading several lanes of different priorities serves them: strict "
                              "(higher first while it has a backlog) or weighted (shares by priority + 1) "
                              "(default %(default)s)")
    consume.set_defaults(run=_cmd_consume)


def _cmd_produce(args: argparse.Namespace) -> int:
    from mafka4.client.producer import Producer

    failures = []
    with Producer(args.topic, acks=args.acks, linger_ms=args.linger_ms, compression=args.compression) as producer:
        count = 0
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if args.key_sep is not None:
                key, separator, value = line.partition(args.key_sep.encode())
                if not separator:
                    raise InvalidRecord(f"line {count + 1} has no key separator {args.key_sep!r}: write KEY{args.key_sep}VALUE")
                line = value
            future = producer.send(line, key=key, lane=args.lane, delay_ms=args.delay)
            future.add_callback(lambda _, error: failures.append(error) if error else None)
            if args.delay is not None:
                future.add_callback(lambda sent, error: print(f"{sent.partition}:{sent.offset}") if error is None else None)
            count += 1
        producer.flush()
    if failures:
        print(f"{len(failures)} of {count} messages failed: {failures[0]}", file=sys.stderr)
        return 1
    lane = f" lane {args.lane!r}" if args.lane else ""
    lane += f", each due {args.delay} ms after it was sent" if args.delay is not None else ""
    print(f"produced {count} messages to {args.topic!r}{lane} (acks={args.acks}, "
          f"compression={producer.config.compression})", file=sys.stderr)
    return 0


def _cmd_consume(args: argparse.Namespace) -> int:
    import math
    import time

    from mafka4.client.consumer import Consumer

    consumer = Consumer(args.topic, group=args.group, from_beginning=args.from_beginning, lanes=args.lanes,
                        lane_order=args.lane_order)
    printed = 0
    idle_deadline = time.monotonic() + args.timeout_ms / 1000
    out = sys.stdout.buffer
    try:
        while args.max_messages is None or printed < args.max_messages:
            try:
                # The time left until the idle deadline: the poll returns as soon as messages come,
                # and its group duties run inside it, so a shorter poll only wakes this loop for nothing.
                messages = consumer.poll(timeout_ms=max(math.ceil((idle_deadline - time.monotonic()) * 1000), 0))
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
