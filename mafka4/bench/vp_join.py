"""``mafka4 bench vp-join``: how long the members of a mafka4-mode group stop when a member joins.

Per trial, on a running cluster with read nodes (``mafka4 up`` starts two): a fresh
mafka4-mode topic of ``partitions`` physical partitions and ``consumers`` virtual partitions
gets a steady keyed produce stream of ``rate_msgs_per_s``; ``consumers`` group members read
it, one VP each. After ``warmup_s`` one more member joins. The group now has more members
than VPs, so its smallest member splits the busiest VP; the member owning that VP reads it to
the cut, the two children become readable, and the joiner takes one. Each member, the joiner
too, is a process of its own (``bench.join_trial``, the same trial as ``bench rebalance``'s),
and stamps every poll that returns messages with the machine's monotonic clock.

Figures (ms):

* ``member_stall_ms``: per existing member, the longest gap between two of its non-empty polls
  from one second before the join until ``after_join_s`` after it, reported apart for the
  member whose VP was split (``split_member_stall_ms``) and the others
  (``other_member_stall_ms``; the design's target: no stall beyond the normal gap);
* ``member_stall_start_ms``: where each of those gaps began, relative to the join;
* ``baseline_gap_ms``: the same longest gap per member in the second before the join;
* ``join_gap_ms``: the same longest gap per member in the second after the join (the window
  of ``baseline_gap_ms``, so the two compare directly: the join added nothing to a member whose
  ``join_gap_ms`` is within its ``baseline_gap_ms``), the longest of the split member's
  (``split_member_join_gap_ms``) and of the others' (``other_member_join_gap_ms``). Where
  ``member_stall_ms`` can catch a gap of the background seconds after the join, this one
  looks only where the split happens;
* ``new_member_first_message_ms``: from the join until the joiner's first message;
* ``split_stored_ms`` / ``child_claimed_ms``: from the join until the split epoch, and the
  joiner's owner key of a child, arrived through etcd watches (stamped on arrival);
* ``join_hops_ms``: every hop from the joiner's JOIN request to its first data, in ms after the
  join (``bench.join_hops.JOIN_HOPS`` names and explains each), from a join trace turned on for
  the trial's topic in every member's process (the joiner's before it joins) and on the read
  nodes just before the join; the members send their rows with what they polled
  (``mafka4.join_trace``, ``bench.join_tracing``). The summary gives each hop's median.
  ``bench.join_hops`` also counts the round trips behind each hop. ``join_trace_rows`` keeps
  every row the hops were picked from (ms after the join, hop, member id, detail).

With ``compare_mafka3``, each trial is followed by the Mafka3 eager-rebalance trial of
``bench.rebalance`` (``consumers + 1`` physical partitions, so the joiner gets one) on the
same machine, and the summary puts both side by side: the same members, processes of their
own, the producer a thread of the bench's process. On a small, shared machine, compare figures
within one run, next to ``baseline_gap_ms`` and the load average the report records.

``virtual_partitions`` above ``consumers`` gives the joiner a VP handed over from a member
owning two (``handed_over_vps``) instead of a split: the group protocol alone, without new
VP actors starting on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mafka4.bench.join_hops import hop_medians
from mafka4.bench.join_tracing import ClusterJoinTrace
from mafka4.bench.rebalance import (BEFORE_JOIN_WINDOW_S, NS_PER_MS, GroupWatch, RebalanceBenchSettings, join_gaps_ms,
                                    longest_gap, longest_gap_ms, run_trial)
from mafka4.limits import ReadMode

if TYPE_CHECKING:  # the logs' type only: the trial's module imports the client
    from mafka4.bench.join_trial import JoinMembers, MemberLog


@dataclass(frozen=True, slots=True)
class VpJoinBenchSettings:
    """A field with a ``help`` in its metadata is an option of ``mafka4 bench vp-join`` (``mafka4.cli.bench``)."""

    partitions: int = field(default=2, metadata={"help": "physical partitions"})
    consumers: int = field(default=3, metadata={"help": "members before the join, one VP each"})
    # VPs at creation; None: one per consumer, so the joiner gets capacity by a split. More VPs than
    # consumers: the joiner gets a VP handed over instead (no split), which isolates the group protocol.
    virtual_partitions: int | None = field(default=None, metadata={
        "help": "VPs at creation (default: one per consumer, so the joiner causes a split; more: a handover)"})
    rate_msgs_per_s: int = field(default=2000, metadata={"help": "messages per second produced during a trial"})
    warmup_s: float = field(default=5.0, metadata={"help": "seconds of consuming before the join"})
    after_join_s: float = field(default=10.0, metadata={"help": "seconds measured after the join"})
    trials: int = field(default=3, metadata={"help": "joins measured, each with a fresh topic and group"})
    read_replicas: int = field(default=1, metadata={"help": "replicas of each VP, on distinct read nodes"})
    replication_factor: int = 1
    compare_mafka3: bool = field(default=True, metadata={"help": "do not run the Mafka3 eager-rebalance trials",
                                                         "switch": "--skip-mafka3"})


def _owners(connection, group: str, topic: str) -> dict[int, str]:
    from mafka4.metadata import keys

    prefix = keys.group_vp_owners_prefix(connection.cluster, group)
    owners = {}
    for item in connection.store.get_prefix(prefix):
        parsed = keys.parse_group_partition(prefix, item.key)
        if parsed is not None and parsed[0] == topic:
            owners[parsed[1]] = item.value["member_id"]
    return owners


def run_vp_join_trial(connection, settings: VpJoinBenchSettings) -> dict:
    from mafka4.bench.join_member import MemberSpec
    from mafka4.bench.join_trial import JoinTrial
    from mafka4.client.admin import Admin
    from mafka4.client.cluster_access import cluster_access
    from mafka4.metadata import keys

    admin = Admin(connection)
    topic, group = f"vpjoin-{secrets.token_hex(3)}", f"vpjoin-{secrets.token_hex(3)}"
    admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                       virtual_partitions=settings.virtual_partitions or settings.consumers,
                       read_replicas=settings.read_replicas, read_mode=ReadMode.MAFKA4)
    owners_at_join: dict[int, str] = {}
    group_watch = GroupWatch(connection, group)
    layout_watch = GroupWatch(connection, group, prefix=keys.split_epochs_prefix(connection.cluster, topic))
    join_trace = ClusterJoinTrace(connection, topic)

    def before_join(members: JoinMembers) -> None:
        owners_at_join.update(_owners(connection, group, topic))
        join_trace.start()
        members.trace_joins()

    run = JoinTrial(MemberSpec(cluster_access(connection), topic, group), connection, settings.rate_msgs_per_s).run(
        settings.consumers, settings.warmup_s, settings.after_join_s, before_join=before_join)
    group_watch.close()
    layout_watch.close()
    layout = admin.describe_topic(topic)["virtual_partitions"]
    admin.delete_topic(topic)
    logs, join_ns, joiner_id = run.logs, run.join_ns, run.joiner.member_id
    member_ids = {log.name: log.member_id for log in logs}
    parents = sorted({vp for epoch in _epochs_after(layout_watch, join_ns) for vp in epoch["parents"]})
    split_members = {name for name, member_id in member_ids.items()
                     if any(owners_at_join.get(vp) == member_id for vp in parents)}
    figures = _figures(logs, run.joiner, join_ns, run.end_ns, split_members)
    trace_rows = join_trace.take_and_stop(parents, run.join_trace)
    handed_over = sorted(vp for vp, member_id in owners_at_join.items()
                         if _owners_after(group_watch, join_ns, vp) == joiner_id)
    figures.update({
        "handed_over_vps": handed_over,
        "split_vps": parents,
        "split_members": sorted(split_members),
        "virtual_partitions_after": sum(1 for v in layout if v["active"]),
        "split_stored_ms": _first_after_ms(layout_watch.events, join_ns, lambda key, value: value is not None),
        "child_claimed_ms": _first_after_ms(
            group_watch.events, join_ns,
            lambda key, value: value is not None and "/vp_owners/" in key and value["member_id"] == joiner_id),
        "join_hops_ms": join_trace.hops_ms(trace_rows, join_ns, joiner_id),
        "join_trace_rows_dropped": join_trace.dropped,
        "join_trace_rows": join_trace.rows_after_join(trace_rows, join_ns),
        "messages_produced": run.produced,
        "messages_unique": len({v for log in logs for v in log.values}),
        "messages_consumed": sum(len(log.values) for log in logs),
    })
    return figures


def _owners_after(watch: GroupWatch, join_ns: int, vp: int) -> str | None:
    """The member whose owner key of ``vp`` was created first after the join, if any."""
    suffix = f"/{vp}"
    return next((value["member_id"] for stamp_ns, key, value in watch.events
                 if stamp_ns >= join_ns and value is not None and "/vp_owners/" in key and key.endswith(suffix)), None)


def _epochs_after(watch: GroupWatch, join_ns: int) -> list[dict]:
    return [value for stamp_ns, _, value in watch.events if stamp_ns >= join_ns and value is not None]


def _first_after_ms(events, join_ns: int, matches) -> float | None:
    found = [stamp_ns for stamp_ns, key, value in events if stamp_ns >= join_ns and matches(key, value)]
    return round((min(found) - join_ns) / NS_PER_MS, 1) if found else None


def _figures(logs: list[MemberLog], newcomer: MemberLog, join_ns: int, end_ns: int, split_members: set[str]) -> dict:
    before_ns = join_ns - int(BEFORE_JOIN_WINDOW_S * 1e9)
    existing = [log for log in logs if log is not newcomer]
    stall = {log.name: longest_gap_ms(log.receive_ns, before_ns, end_ns) for log in existing}
    # Where each member's longest gap began, relative to the join (compare with split_stored_ms).
    stall_start = {log.name: round((longest_gap(log.receive_ns, before_ns, end_ns)[1] - join_ns) / NS_PER_MS, 1)
                   for log in existing}
    others = [stall[name] for name in stall if name not in split_members]
    join_gap = join_gaps_ms(existing, join_ns, end_ns)
    first_new = min((t for t in newcomer.receive_ns if t >= join_ns), default=None)
    return {
        "member_stall_ms": stall,
        "member_stall_start_ms": stall_start,
        "split_member_stall_ms": max((stall[name] for name in split_members), default=None),
        "other_member_stall_ms": max(others, default=None),
        "baseline_gap_ms": {log.name: longest_gap_ms(log.receive_ns, before_ns, join_ns) for log in existing},
        "join_gap_ms": join_gap,
        "split_member_join_gap_ms": max((join_gap[name] for name in split_members), default=None),
        "other_member_join_gap_ms": max((join_gap[name] for name in join_gap if name not in split_members),
                                        default=None),
        "new_member_first_message_ms": None if first_new is None else round((first_new - join_ns) / NS_PER_MS, 1),
    }


def _median(trials: list[dict], name: str) -> float | None:
    values = [t[name] for t in trials if t.get(name) is not None]
    return round(statistics.median(values), 1) if values else None


def run_vp_join_bench(settings: VpJoinBenchSettings, output_path: str) -> dict:
    from mafka4.runtime.connect import connect

    connection = connect()
    load_before = os.getloadavg()[0]
    mafka4_trials, mafka3_trials = [], []
    mafka3_settings = RebalanceBenchSettings(
        partitions=settings.consumers + 1, consumers=settings.consumers, rate_msgs_per_s=settings.rate_msgs_per_s,
        warmup_s=settings.warmup_s, after_join_s=settings.after_join_s, trials=1,
        replication_factor=settings.replication_factor)
    for _ in range(settings.trials):
        mafka4_trials.append(run_vp_join_trial(connection, settings))
        if settings.compare_mafka3:
            mafka3_trials.append(run_trial(connection, mafka3_settings))
    summary = {
        "trials": len(mafka4_trials),
        "mafka4": {
            "other_member_stall_ms_median": _median(mafka4_trials, "other_member_stall_ms"),
            "other_member_stall_ms_each": [t["other_member_stall_ms"] for t in mafka4_trials],
            "split_member_stall_ms_median": _median(mafka4_trials, "split_member_stall_ms"),
            "split_member_stall_ms_each": [t["split_member_stall_ms"] for t in mafka4_trials],
            "baseline_gap_ms_max_each": [max(t["baseline_gap_ms"].values()) for t in mafka4_trials],
            "other_member_join_gap_ms_median": _median(mafka4_trials, "other_member_join_gap_ms"),
            "other_member_join_gap_ms_each": [t["other_member_join_gap_ms"] for t in mafka4_trials],
            "split_member_join_gap_ms_median": _median(mafka4_trials, "split_member_join_gap_ms"),
            "split_member_join_gap_ms_each": [t["split_member_join_gap_ms"] for t in mafka4_trials],
            "new_member_first_message_ms_median": _median(mafka4_trials, "new_member_first_message_ms"),
            "new_member_first_message_ms_each": [t["new_member_first_message_ms"] for t in mafka4_trials],
            "split_stored_ms_median": _median(mafka4_trials, "split_stored_ms"),
            "child_claimed_ms_median": _median(mafka4_trials, "child_claimed_ms"),
            # Each hop of the joiner's way to its first message, ms after the join (bench.join_hops).
            "join_hops_ms_median": hop_medians(t["join_hops_ms"] for t in mafka4_trials),
            "missing_each": [t["messages_produced"] - t["messages_unique"] for t in mafka4_trials],
        },
    }
    if mafka3_trials:
        summary["mafka3"] = {
            "max_member_stall_ms_median": _median(mafka3_trials, "max_member_stall_ms"),
            "max_member_stall_ms_each": [t["max_member_stall_ms"] for t in mafka3_trials],
            "baseline_gap_ms_max_each": [max(t["baseline_gap_ms"].values()) for t in mafka3_trials],
            "max_member_join_gap_ms_median": _median(mafka3_trials, "max_member_join_gap_ms"),
            "max_member_join_gap_ms_each": [t["max_member_join_gap_ms"] for t in mafka3_trials],
            "new_member_first_message_ms_median": _median(mafka3_trials, "new_member_first_message_ms"),
            "protocol_rebalance_ms_median": _median(mafka3_trials, "protocol_rebalance_ms"),
            "missing_each": [t["messages_produced"] - t["messages_unique"] for t in mafka3_trials],
        }
    report = {"settings": asdict(settings), "mafka4_trials": mafka4_trials, "mafka3_trials": mafka3_trials,
              "summary": summary, "cpu_count": os.cpu_count(),
              "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
