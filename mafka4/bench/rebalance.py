"""``mafka4 bench rebalance``: how long a Mafka3-mode group stops consuming when a member joins.

Per trial, on a running cluster: a fresh topic of ``partitions`` physical partitions gets a
steady keyed produce stream of ``rate_msgs_per_s``; ``consumers`` group members consume it
(each in a process of its own, polling continuously: ``bench.join_trial``, the same trial as
``bench vp-join``'s). After ``warmup_s`` one more member joins, which triggers the eager
rebalance (every member commits and releases everything, then the new assignment starts).
Every poll that returns messages is stamped with the machine's monotonic clock, in the member's
process (``bench.join_member``).

Figures (ms):

* ``member_stall_ms``: per existing member, the longest gap between two of its non-empty polls
  from one second before the join until ``after_join_s`` after it: the time it consumed
  nothing around the rebalance;
* ``group_stall_ms``: the longest gap in the same window between non-empty polls of *any*
  member (including the new one): the time the whole group consumed nothing;
* ``baseline_gap_ms``: the same longest gap per member during the second before the join,
  for scale (the normal gap between fetches at this rate);
* ``join_gap_ms``: the same longest gap per member during the second after the join (the
  window of ``baseline_gap_ms``), and the longest of them, ``max_member_join_gap_ms``
  (``bench vp-join`` sets it beside its own members');
* ``new_member_first_message_ms``: from the join until the new member's first message;
* ``protocol_rebalance_ms``: as etcd saw it (through a watch on the group, stamped on arrival):
  from the new member key until every partition has an owner key of the final generation.
  It excludes the consumers' own scheduling, so it is the steadier figure on a noisy machine.

Each member is a process of its own, as a deployment runs consumers; the producer is a thread
of the bench's process. On a small shared machine the figures still include the scheduling of
every process on its cores: compare them within one run.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mafka4.limits import ASSIGNOR_NAMES, ReadMode

if TYPE_CHECKING:  # the logs' type only: the trial's module imports the client
    from mafka4.bench.join_trial import MemberLog

NS_PER_MS = 1_000_000
BEFORE_JOIN_WINDOW_S = 1.0
# ``join_gap_ms`` looks this long after the join: as long as ``baseline_gap_ms`` looks before it.
AFTER_JOIN_WINDOW_S = BEFORE_JOIN_WINDOW_S


@dataclass(frozen=True, slots=True)
class RebalanceBenchSettings:
    """A field with a ``help`` in its metadata is an option of ``mafka4 bench rebalance`` (``mafka4.cli.bench``)."""

    partitions: int = field(default=12, metadata={"help": "physical partitions of the topic"})
    consumers: int = field(default=3, metadata={"help": "members before the join"})
    rate_msgs_per_s: int = field(default=2000, metadata={"help": "messages per second produced during a trial"})
    warmup_s: float = field(default=5.0, metadata={"help": "seconds of consuming before the join"})
    after_join_s: float = field(default=8.0, metadata={"help": "seconds measured after the join"})
    trials: int = field(default=3, metadata={"help": "joins measured, each with a fresh topic and group"})
    assignor: str = field(default="range", metadata={"help": "partition assignor of the group",
                                                     "choices": ASSIGNOR_NAMES})
    replication_factor: int = 1


class GroupWatch:
    """Arrival-stamped etcd events of one group (members, generation and owner keys), or of ``prefix``."""

    def __init__(self, connection, group: str, prefix: str | None = None):
        from mafka4.metadata import keys
        from mafka4.metadata.store import MetadataStore

        self._keys = keys
        self._cluster, self._group = connection.cluster, group
        self._store = MetadataStore(connection.store.endpoint)
        self.events: list[tuple[int, str, dict | None]] = []
        watched = keys.group_prefix(connection.cluster, group) if prefix is None else prefix
        self._watch = self._store.watch_prefix(watched, self._record, lambda: None)

    def _record(self, events) -> None:
        now_ns = time.monotonic_ns()
        self.events.extend((now_ns, event.key, event.value) for event in events)

    def close(self) -> None:
        self._store.cancel_watch(self._watch)
        self._store.close()

    def rebalance_ms(self, join_ns: int, partitions: int) -> float | None:
        """From the first member-key put after ``join_ns`` until all partitions are owned under
        the generation current at that moment (the first generation including the new member)."""
        members_prefix = self._keys.group_members_prefix(self._cluster, self._group)
        owners_prefix = self._keys.group_owners_prefix(self._cluster, self._group)
        generation_key = self._keys.group_generation(self._cluster, self._group)
        owners: dict[str, int] = {}
        joined_ns, generation = None, None
        for stamp_ns, key, value in self.events:
            if key.startswith(owners_prefix):
                if value is None:
                    owners.pop(key, None)
                else:
                    owners[key] = value["generation"]
            elif joined_ns is None and stamp_ns >= join_ns and key.startswith(members_prefix) and value is not None:
                joined_ns = stamp_ns
            elif joined_ns is not None and key == generation_key and value is not None:
                generation = value["generation"]
            if generation is not None and len(owners) == partitions and set(owners.values()) == {generation}:
                return round((stamp_ns - joined_ns) / NS_PER_MS, 1)
        return None


def longest_gap(times_ns: list[int], start_ns: int, end_ns: int) -> tuple[int, int]:
    """(length, start) in ns of the longest interval inside [start, end] without a receive time
    (the window edges count as receive times)."""
    inside = [t for t in sorted(times_ns) if start_ns <= t <= end_ns]
    edges = [start_ns, *inside, end_ns]
    return max((b - a, a) for a, b in zip(edges, edges[1:]))


def longest_gap_ms(times_ns: list[int], start_ns: int, end_ns: int) -> float:
    return round(longest_gap(times_ns, start_ns, end_ns)[0] / NS_PER_MS, 1)


def join_gaps_ms(logs: list[MemberLog], join_ns: int, end_ns: int) -> dict[str, float]:
    """Per member of ``logs``, its longest gap between non-empty polls in the ``AFTER_JOIN_WINDOW_S``
    after ``join_ns`` (cut at ``end_ns``, the measured window's end): ``join_gap_ms``."""
    window_end_ns = min(join_ns + int(AFTER_JOIN_WINDOW_S * 1e9), end_ns)
    return {log.name: longest_gap_ms(log.receive_ns, join_ns, window_end_ns) for log in logs}


def run_trial(connection, settings: RebalanceBenchSettings) -> dict:
    from mafka4.bench.join_member import MemberSpec
    from mafka4.bench.join_trial import JoinTrial
    from mafka4.client.admin import Admin
    from mafka4.client.cluster_access import cluster_access
    from mafka4.client.group_admin import GroupAdmin

    admin = Admin(connection)
    topic, group = f"rebal-{secrets.token_hex(3)}", f"rebal-{secrets.token_hex(3)}"
    admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                       read_mode=ReadMode.MAFKA3)
    spec = MemberSpec(cluster_access(connection), topic, group, (("assignor", settings.assignor),))
    watch = GroupWatch(connection, group)
    run = JoinTrial(spec, connection, settings.rate_msgs_per_s).run(settings.consumers, settings.warmup_s,
                                                                    settings.after_join_s)
    watch.close()
    with GroupAdmin(connection) as groups:
        lag = groups.describe_group(group).total_lag
    admin.delete_topic(topic)
    figures = _trial_figures(run.logs, run.joiner, run.join_ns, run.end_ns, run.produced, lag)
    return {**figures, "protocol_rebalance_ms": watch.rebalance_ms(run.join_ns, settings.partitions)}


def _trial_figures(logs: list[MemberLog], newcomer: MemberLog, join_ns: int, end_ns: int, produced: int,
                   lag: int | None) -> dict:
    before_ns = join_ns - int(BEFORE_JOIN_WINDOW_S * 1e9)
    existing = [log for log in logs if log is not newcomer]
    member_stall = {log.name: longest_gap_ms(log.receive_ns, before_ns, end_ns) for log in existing}
    # Where each member's longest gap began, relative to the join: near 0 if the join caused it.
    stall_start = {log.name: round((longest_gap(log.receive_ns, before_ns, end_ns)[1] - join_ns) / NS_PER_MS, 1)
                   for log in existing}
    baseline = {log.name: longest_gap_ms(log.receive_ns, before_ns, join_ns) for log in existing}
    join_gap = join_gaps_ms(existing, join_ns, end_ns)
    everyone = [t for log in logs for t in log.receive_ns]
    first_new = min((t for t in newcomer.receive_ns if t >= join_ns), default=None)
    values = [v for log in logs for v in log.values]
    return {
        "member_stall_ms": member_stall,
        "max_member_stall_ms": max(member_stall.values()),
        "member_stall_start_ms": stall_start,
        "group_stall_ms": longest_gap_ms(everyone, before_ns, end_ns),
        "baseline_gap_ms": baseline,
        "join_gap_ms": join_gap,
        "max_member_join_gap_ms": max(join_gap.values()),
        "new_member_first_message_ms": None if first_new is None else round((first_new - join_ns) / NS_PER_MS, 1),
        "messages_produced": produced,
        "messages_consumed": len(values),
        "messages_unique": len(set(values)),
        "lag_after_drain": lag,
    }


def run_rebalance_bench(settings: RebalanceBenchSettings, output_path: str) -> dict:
    from mafka4.runtime.connect import connect

    connection = connect()
    load_before = os.getloadavg()[0]
    trials = [run_trial(connection, settings) for _ in range(settings.trials)]

    def median(name: str):
        values = [t[name] for t in trials if t[name] is not None]
        return round(statistics.median(values), 1) if values else None

    summary = {
        "trials": len(trials),
        "max_member_stall_ms_median": median("max_member_stall_ms"),
        "max_member_stall_ms_each": [t["max_member_stall_ms"] for t in trials],
        "group_stall_ms_median": median("group_stall_ms"),
        "group_stall_ms_each": [t["group_stall_ms"] for t in trials],
        "baseline_gap_ms_max_each": [max(t["baseline_gap_ms"].values()) for t in trials],
        "new_member_first_message_ms_median": median("new_member_first_message_ms"),
        "protocol_rebalance_ms_median": median("protocol_rebalance_ms"),
        "protocol_rebalance_ms_each": [t["protocol_rebalance_ms"] for t in trials],
        "duplicates_each": [t["messages_consumed"] - t["messages_unique"] for t in trials],
        "missing_each": [t["messages_produced"] - t["messages_unique"] for t in trials],
    }
    # The machine is shared: its load says how far the figures can be trusted.
    report = {"settings": asdict(settings), "trials": trials, "summary": summary, "cpu_count": os.cpu_count(),
              "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}}
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
