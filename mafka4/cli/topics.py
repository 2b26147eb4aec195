"""``mafka4 topic create|list|describe|delete|lane|cancel-delayed`` and ``mafka4 scale``.

Every one is a client of the cluster's client port (``client.topic_admin``,
``client.cluster_metadata``), holding no Ray or etcd. A request is checked before connecting
(``new_topic_config``), so that a bad name or value is reported as such and not as "no local
cluster".
"""

from __future__ import annotations

import argparse

from mafka4.limits import LANE_PRIORITY_MAX, READ_MODE_DEFAULT, READ_MODES, VIRTUAL_PARTITIONS_MAX, ReadMode
from mafka4.virtual.layout import DEFAULT_POLICY, FALLBACKS


def add_commands(commands) -> None:
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
    cancel = topic_commands.add_parser("cancel-delayed", help="cancel a delayed message that is not due yet")
    cancel.add_argument("name")
    cancel.add_argument("message_id", help="PARTITION:OFFSET, as 'mafka4 produce --delay' printed it")
    cancel.set_defaults(run=_cmd_topic_cancel_delayed)
    delete = topic_commands.add_parser("delete", help="delete a topic and its data")
    delete.add_argument("name")
    delete.set_defaults(run=_cmd_topic_delete)

    lane = topic_commands.add_parser("lane", help="open a lane of a topic with a policy, before its first message")
    lane.add_argument("name", help="the topic")
    lane.add_argument("lane", help="the lane (named like a topic)")
    lane.add_argument("--fallback", choices=FALLBACKS, default=DEFAULT_POLICY.fallback,
                      help="trunk: a group's trunk readers read the lane while the group has none of its own "
                           "(swimlane); none: its messages wait for its own readers (environment, SET) "
                           "(default %(default)s)")
    lane.add_argument("--priority", type=int, default=DEFAULT_POLICY.priority,
                      help=f"0-{LANE_PRIORITY_MAX}: a member reading several lanes serves higher ones first "
                           f"(default %(default)s)")
    lane.set_defaults(run=_cmd_topic_lane)

    scale = commands.add_parser("scale", help="split or merge a mafka4-mode topic's virtual partitions to a count")
    scale.add_argument("topic")
    scale.add_argument("--virtual-partitions", type=int, required=True, help="the active virtual partitions wanted")
    scale.set_defaults(run=_cmd_scale)


def _cmd_topic_create(args: argparse.Namespace) -> int:
    # A client of the cluster's client port (client.topic_admin), which refuses a bad name or
    # value before connecting: without a cluster the user would hear "no local cluster" and not
    # what is wrong with the request.
    from mafka4.client.topic_admin import create_topic

    overrides = {}
    if args.min_insync_replicas is not None:
        overrides["min_insync_replicas"] = args.min_insync_replicas
    if args.retention_ms is not None:
        overrides["retention_ms"] = args.retention_ms
    if args.virtual_partitions_max is not None:
        overrides["virtual_partitions_max"] = args.virtual_partitions_max
    metadata = create_topic(args.name, args.partitions, args.replication_factor,
                            virtual_partitions=args.virtual_partitions, read_replicas=args.read_replicas,
                            read_mode=args.read_mode, **overrides)
    config = metadata.config
    read_path = (f", {config.virtual_partitions} virtual partition(s) with {config.read_replicas} read replica(s) each"
                 if config.read_mode is ReadMode.MAFKA4 else "")
    print(f"created topic {metadata.name!r}: {len(metadata.partitions)} partition(s), "
          f"replication factor {config.replication_factor}, read mode {config.read_mode}{read_path}")
    return 0


def _cmd_topic_list(args: argparse.Namespace) -> int:
    # A client of the cluster's client port: no Ray, no etcd (client.cluster_metadata).
    from mafka4.client.cluster_metadata import list_topics

    for name in list_topics():
        print(name)
    return 0


def _cmd_topic_describe(args: argparse.Namespace) -> int:
    # A client of the cluster's client port: the node asks the leaders (frontend.topic_description).
    from mafka4.client.topic_admin import describe_topic

    description = describe_topic(args.name)
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
        print(f"{'vp':>4}  {'lane':<12}  {'status':<7}  {'hash_range':<42}  {'leader':>6}  {'epoch':>5}  "
              f"{'risr':<12}  {'log_end':>8}  {'high_watermark':>14}")
        for v in description["virtual_partitions"]:
            live = v["live"] or {}
            status = ("active" if v["active"] else "retired" if v.get("retired") else
                      "sealed" if "sealed_end_offset" in v else "closed")
            start, end = v["range"]
            print(f"{v['virtual_partition']:>4}  {v.get('lane') or '(trunk)':<12}  {status:<7}  "
                  f"{f'[{start:#x}, {end:#x})':<42}  {v['leader']:>6}  "
                  f"{v['leader_epoch']:>5}  {','.join(v['risr']):<12}  {live.get('log_end_offset', '?'):>8}  "
                  f"{live.get('high_watermark', '?'):>14}")
        print_lanes(description)
    print_read_loss(args.name, description["read_loss"])
    print_delays(description.get("delays"))
    return 0


def print_delays(delays: dict | None) -> None:
    """The topic's delayed messages waiting, by when they are due (as the delay scheduler last wrote them)."""
    if delays is None:
        return
    horizons = delays["horizons"]
    print(f"delayed messages waiting: {delays['waiting']}  (due within a minute: {horizons['minute']}, "
          f"an hour: {horizons['hour']}, a day: {horizons['day']}, later: {horizons['later']}; "
          f"in flight: {delays['waiting'] - sum(horizons.values())})")
    counts = delays["counts"]
    print(f"released: {counts['released']}  cancelled: {counts['cancelled']}  "
          f"cancels too late: {counts['cancels_late']}  (since the scheduler started)")


def _cmd_topic_cancel_delayed(args: argparse.Namespace) -> int:
    from mafka4.client.topic_admin import cancel_delayed

    cancel_delayed(args.name, args.message_id)
    print(f"cancel of delayed message {args.message_id} of {args.name!r} written: the scheduler drops it if it "
          f"reads the cancel before the message is due ('mafka4 topic describe {args.name}' counts cancels too late)")
    return 0


def _cmd_topic_lane(args: argparse.Namespace) -> int:
    from mafka4.client.topic_admin import open_lane

    opened = open_lane(args.name, args.lane, args.fallback, args.priority)
    where = (f"lane id {opened.lane_id} of {args.name!r}" if opened.name == args.name
             else f"topic {opened.name!r} (a mafka3-mode topic keeps each lane as a topic of its own)")
    print(f"lane {args.lane!r} is open: {where}, fallback={args.fallback}, priority={args.priority}")
    return 0


def _cmd_topic_delete(args: argparse.Namespace) -> int:
    from mafka4.client.topic_admin import delete_topic

    delete_topic(args.name)
    print(f"deleted topic {args.name!r}")
    return 0


def _cmd_scale(args: argparse.Namespace) -> int:
    from mafka4.client.topic_admin import scale

    epochs = scale(args.topic, args.virtual_partitions)
    for epoch in epochs:
        print(f"split epoch {epoch.epoch}: {'+'.join(map(str, epoch.parents))} -> {'+'.join(map(str, epoch.children))} "
              f"at cut {list(epoch.cut)}")
    print(f"topic {args.topic!r} has {args.virtual_partitions} virtual partition(s) "
          f"({len(epochs)} split(s) and merge(s))")
    return 0


def print_lanes(description: dict) -> None:
    """A row per lane (the trunk first): its policy, its active VPs and the messages its VPs hold
    (their leaders' log ends, "?" while one does not answer)."""
    if not description.get("lanes"):
        return
    rows = [{"lane": "", "fallback": "-", "priority": 0}, *description["lanes"]]
    print(f"{'lane':<16}  {'fallback':<8}  {'priority':>8}  {'active_vps':<16}  {'messages':>10}")
    for row in rows:
        vps = [v for v in description["virtual_partitions"] if v.get("lane", "") == row["lane"]]
        active = ",".join(str(v["virtual_partition"]) for v in vps if v["active"])
        ends = [(v["live"] or {}).get("log_end_offset") for v in vps if not v.get("retired")]
        messages = "?" if None in ends else sum(ends)
        print(f"{row['lane'] or '(trunk)':<16}  {row['fallback']:<8}  {row['priority']:>8}  {active:<16}  {messages:>10}")


def print_read_loss(topic: str, losses: dict[int, list[list[int]]]) -> None:
    """Physical offsets retention deleted before every read node fed them: never silent."""
    for partition, ranges in losses.items():
        lost = ", ".join(f"[{first}, {end})" for first, end in ranges)
        print(f"LOST {topic} partition {partition}: offsets {lost} were deleted by retention before every read node "
              f"fed them (raise unfed_hold_ms_max or keep read nodes running)")
