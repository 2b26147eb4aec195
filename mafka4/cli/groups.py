"""``mafka4 group list|describe|reset-offsets``: consumer groups, their lag and their offsets."""

from __future__ import annotations

import argparse

from mafka4.cli.topics import print_read_loss
from mafka4.errors import InvalidConfig


def add_commands(commands) -> None:
    group = commands.add_parser("group", help="list consumer groups, describe them with lag, reset their offsets")
    group_commands = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    group_commands.add_parser("list", help="list group names").set_defaults(run=_cmd_group_list)
    describe = group_commands.add_parser("describe", help="members and, per partition, owner, committed offset, "
                                                          "high watermark, lag in messages and lag in seconds (the "
                                                          "age of the oldest message not committed)")
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
    print(f"{'topic':<24}  {'partition':>9}  {'member':<32}  {'committed_offset':>16}  {'high_watermark':>14}  {'lag':>8}  "
          f"{'lag_s':>8}")
    for row in description.partitions:
        print(f"{row.topic:<24}  {row.partition:>9}  {_dash(row.member_id):<32}  {_dash(row.committed_offset):>16}  "
              f"{row.high_watermark:>14}  {_dash(row.lag):>8}  {lag_seconds(row.lag_ms):>8}")
    if description.virtual_partitions:
        print(f"{'topic':<24}  {'vp':>4}  {'status':<7}  {'member':<32}  {'committed_offset':>16}  {'high_watermark':>14}  "
              f"{'lag':>8}  {'lag_s':>8}")
    for row in description.virtual_partitions:
        print(f"{row.topic:<24}  {row.vp:>4}  {row.status.value:<7}  {_dash(row.member_id):<32}  "
              f"{_dash(row.committed_offset):>16}  {_dash(row.high_watermark):>14}  {_dash(row.lag):>8}  "
              f"{lag_seconds(row.lag_ms):>8}")
    for topic, losses in description.read_loss.items():
        print_read_loss(topic, losses)
    return 0


def _cmd_group_reset_offsets(args: argparse.Namespace) -> int:
    target = "earliest" if args.to_earliest else "latest" if args.to_latest else _timestamp_ms(args.to_time)
    with _group_admin() as admin:
        changes = admin.reset_offsets(args.group, args.topic, target)
        label = "vp " if admin.is_virtual(args.topic) else ""
    for partition, (before, after) in sorted(changes.items()):
        print(f"{args.topic} {label}{partition}: {'-' if before is None else before} -> {after}")
    return 0


def _timestamp_ms(text: str) -> int:
    from datetime import datetime, timezone

    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidConfig(f"--to-time {text!r} is not an ISO 8601 time: write e.g. 2026-11-22T21:30:00+00:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)  # the same answer on every machine
    return int(moment.timestamp() * 1000)


def lag_seconds(lag_ms: int | None) -> str:
    """A lag in time as ``group describe`` shows it: seconds to the tenth ("-": unknown)."""
    return "-" if lag_ms is None else f"{lag_ms / 1000:.1f}"


def _dash(value: object) -> object:
    """What a table cell shows for an absent value (no owner, nothing committed)."""
    return "-" if value is None else value
