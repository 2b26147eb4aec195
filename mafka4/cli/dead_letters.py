"""``mafka4 dlq list|show|replay GROUP TOPIC``: a group's dead letters of a topic (``client.dead_letter_queue``)."""

from __future__ import annotations

import argparse
import datetime


def add_commands(commands) -> None:
    dlq = commands.add_parser("dlq", help="list, show or replay a group's dead letters of a topic")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", required=True, metavar="ACTION")
    for action, help_text, run in (
            ("list", "one line per dead letter: where it came from, its deliveries, when it died, its error",
             _cmd_dlq_list),
            ("show", "each dead letter whole: key, value, headers and error", _cmd_dlq_show),
            ("replay", "send the dead letters not replayed yet back to the topic (each once: the replay "
                       "commits in group GROUP.mafka4-replay; a replayed message carries the header mafka4.replay)",
             _cmd_dlq_replay)):
        command = dlq_commands.add_parser(action, help=help_text)
        command.add_argument("group")
        command.add_argument("topic")
        if action != "replay":
            command.add_argument("--max-messages", type=int, help="at most this many (default: all)")
        command.set_defaults(run=run)


def _when(epoch_ms: int) -> str:
    return datetime.datetime.fromtimestamp(epoch_ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _read(args: argparse.Namespace):
    from mafka4.client.dead_letter_queue import read_dead_letters

    found = read_dead_letters(args.topic, args.group, max_messages=args.max_messages)
    if found.others or found.invalid:
        print(f"({found.others} dead letters of another topic and group named alike and {found.invalid} records "
              f"that are no dead letters were left out)")
    return found


def _cmd_dlq_list(args: argparse.Namespace) -> int:
    found = _read(args)
    print(f"{'dlq_offset':>10}  {'partition':>9}  {'offset':>8}  {'deliveries':>10}  {'dead_at (UTC)':<23}  error")
    for message, letter in found.letters:
        print(f"{message.offset:>10}  {letter.partition:>9}  {letter.offset:>8}  {letter.delivery_count:>10}  "
              f"{_when(letter.dead_at_ms):<23}  {letter.error[:80]}")
    print(f"{len(found.letters)} dead letters of group {args.group!r} of topic {args.topic!r}")
    return 0


def _cmd_dlq_show(args: argparse.Namespace) -> int:
    found = _read(args)
    for message, letter in found.letters:
        print(f"dead letter at offset {message.offset}: {args.topic} partition {letter.partition} offset "
              f"{letter.offset}{f' lane {letter.lane}' if letter.lane else ''}, delivered {letter.delivery_count} "
              f"times, dead at {_when(letter.dead_at_ms)} UTC")
        print(f"  key: {message.key!r}")
        print(f"  value: {message.value!r}")
        for name, value in letter.headers:
            print(f"  header {name}: {value!r}")
        print(f"  error: {letter.error}")
    print(f"{len(found.letters)} dead letters of group {args.group!r} of topic {args.topic!r}")
    return 0


def _cmd_dlq_replay(args: argparse.Namespace) -> int:
    from mafka4.client.dead_letter_queue import replay_dead_letters

    result = replay_dead_letters(args.topic, args.group)
    print(f"replayed {result.replayed} dead letters of group {args.group!r} to topic {args.topic!r}"
          + (f" ({result.skipped} records of the dead-letter topic were not the group's dead letters of it)"
             if result.skipped else ""))
    return 0
