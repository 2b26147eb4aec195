"""``mafka4 chaos``: a Jepsen-style run against a real local cluster, judged by ``simulations.checkers``.

    mafka4 chaos [--seed N] [--duration-s 60] [--rate-msgs-per-s 500] [--faults kill-replica,...]
                 [--delayed-share 0.05] [--delay-ms-max 4000] [--nack-share 0.05] [--poison-share 0.01]
                 [--resource-sample-s 10] [--out FILE]

On a throwaway cluster (3 write nodes, 2 read nodes; or on a cluster the caller passes in),
``run_chaos`` creates a mafka4-mode topic (P=2, RF=3, min_insync_replicas=2, V=4, RR=2 by
default) and runs, in order:

1. **workload**: one idempotent ``acks=all`` producer sending keyed messages at a fixed rate
   (``workload.PacedProducer``), ``delayed_share`` of them with a delay of 1 s to
   ``delay_ms_max``, a consumer group of ``members`` processes reading from the beginning
   (``simulations.chaos.member``) that nacks ``nack_share`` of the messages once and
   ``poison_share`` always (the group's ``retry_policy``: retried from the group's retry topic,
   then dead-lettered; ``simulations.chaos.traffic``), and an observer of the group's commits;
2. **faults** for ``duration_s``: seeded random faults, one at a time (``faults``);
3. **heal**: faults stop, and the cluster (its controller) must get its full ISRs and RISRs,
   every VP replica and every feeder back by itself; production goes on meanwhile, then
   stops (every send answered);
4. **drain**: the group reads until it has seen every acknowledged message and every nacked
   one again (bounded), then its members close (commit and leave);
5. **judge**: the final logs and the group's dead letters are read from the cluster and every
   checker runs (``judge``); the report goes to ``--out`` as JSON.

Resources: from the workload's start to the end of the drain, ``resource_sampler`` looks every
``resource_sample_s`` at every process of the cluster and the run (RSS, open fds) and counts
etcd's keys; the report's ``resources`` section gives, per role (``etcd-0``, ``raylet``,
``ray::PhysicalPartition``, ``controller``, ``chaos-member``, ``chaos-driver``, ...; a role
outlives the PIDs faults kill), least-squares slopes per hour of its summed RSS (MiB) and open
fds, and the slopes of etcd's key count and database size, over the steady window (the fault
phase without its first 10%; ``resource_trend``). A soak reads them to see that nothing grows;
the verdict does not judge them (noisy on a shared machine, and the driver's history grows by
design), and sampling never fails a run: a process or an etcd a fault took away is skipped.

Planted bugs (``--planted-bug NAME``, ``ChaosSettings.planted_bug``): the throwaway cluster's
processes start with ``$MAFKA4_PLANTED_BUG`` set (``mafka4.planted_bugs.exported``), so its
replica actors and read nodes run one of the deliberately broken cores of
``mafka4.planted_bugs``. Such a run is expected to fail its verdict on an anomaly: the report's
settings name the bug, and ``summary`` says "planted bug NAME: caught" when the verdict failed
for an anomaly, "NOT caught" otherwise. A cluster passed in was started without the bug, so a
planted bug needs the throwaway cluster. The simulator catches the same bugs
(``python3 -m simulations.dst --planted-bug NAME``).

Verdict (``simulations.chaos.verdict``, the report's ``verdict`` section): the run passes only
if no checker found anything (no acknowledged message lost or left unread, no per-key or
per-producer reordering, no duplicate beyond at-least-once re-delivery -- re-reads of what
the group had not committed, counted as ``redelivered`` --, no diverged replicas, no
misplaced VP record, no delayed or nacked message read before it was due, no nacked message
neither read again nor dead-lettered), no committed offset moved back, the cluster healed within
``heal_timeout_s``, no member the nemesis did not kill exited abnormally, and every replica's
final log was read. Otherwise the section lists every reason. ``mafka4 chaos`` exits 0 only
on a pass.
"""

from __future__ import annotations

import random
import secrets
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import ray

from mafka4 import planted_bugs
from mafka4.client.admin import Admin
from mafka4.dead_letters import dlq_topic_name
from mafka4.errors import InvalidConfig, MafkaError, UnknownTopic
from mafka4.limits import ReadMode
from mafka4.limits.servers import ClusterConfig
from mafka4.log.fsync_points import recording_fsync_points
from mafka4.retries import retry_topic_name
from mafka4.runtime.connect import Connection
from mafka4.runtime.etcd_member import EtcdServer
from mafka4.runtime.temporary import temporary_cluster
from simulations.chaos.faults import EtcdControl, FaultRecord, Nemesis
from simulations.chaos.judge import FinalLogs, judge, read_dead_lettered, read_final_logs, topic_acks, with_sources
from simulations.chaos.resource_sampler import ResourceSampler
from simulations.chaos.resource_trend import ResourceTrends, resource_trends, steady_window, summary_lines
from simulations.chaos.settings import ChaosSettings
from simulations.chaos.traffic import awaiting_redelivery
from simulations.chaos.verdict import Evidence, Failure, MemberExit, verdict
from simulations.chaos.workload import CommitObserver, History, Members, PacedProducer, now_ms
from simulations.checkers import Ack

GROUP = "chaos"
DRAIN_CHECK_INTERVAL_S = 1.0
CLUSTER_START_TIMEOUT_S = 300  # Ray heads start slowly next to other clusters on a shared 2-core machine


def run_chaos(settings: ChaosSettings, connection: Connection | None = None,
              etcd_started: list[EtcdServer] | None = None) -> dict:
    """Run one chaos run and return its report.

    Without ``connection`` the run starts a throwaway local cluster, whose processes record fsync
    points for the power-loss faults and run with ``settings.planted_bug``, and stops it (and any
    etcd it restarted) at the end. With one, it uses that cluster, deletes its topic at the end,
    and appends every etcd server it starts to ``etcd_started``: the caller stops them after
    the cluster (``mafka4 down`` knows only the etcd its daemon started).
    """
    if connection is None:
        config = ClusterConfig(write_nodes=settings.replication_factor, read_nodes=settings.read_replicas,
                               start_timeout_s=CLUSTER_START_TIMEOUT_S, etcd_members=settings.etcd_members)
        with recording_fsync_points(), planted_bugs.exported(planted_bugs.parse(settings.planted_bug)), \
                temporary_cluster(config, home_prefix="m4chaos-") as cluster:
            return _ChaosRun(settings, cluster.connection, cluster.etcd_started, delete_topic=False).execute()
    if settings.planted_bug is not None:
        raise InvalidConfig(f"planted bug {settings.planted_bug}: a cluster passed in runs without it (its processes "
                            f"started without ${planted_bugs.PLANTED_BUG_ENV}); run on the throwaway cluster")
    if etcd_started is None and {"restart-etcd", "kill-etcd-member"} & set(settings.faults):
        raise InvalidConfig("the restart-etcd and kill-etcd-member faults start an etcd the caller must stop: "
                            "pass etcd_started=[]")
    return _ChaosRun(settings, connection, etcd_started if etcd_started is not None else [], delete_topic=True).execute()


class _ChaosRun:
    """One run's topic, workload, recorders and nemesis; ``execute`` goes through the phases once."""

    def __init__(self, settings: ChaosSettings, connection: Connection, etcd_started: list[EtcdServer], delete_topic: bool):
        self.settings, self.connection, self.delete_topic = settings, connection, delete_topic
        self.began = time.monotonic()
        self.phases: dict[str, float] = {}
        self.topic = f"chaos-s{settings.seed}-{secrets.token_hex(3)}"
        self.admin = Admin(connection)
        self.admin.create_topic(
            self.topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
            min_insync_replicas=settings.min_insync_replicas, virtual_partitions=settings.virtual_partitions,
            read_replicas=settings.read_replicas, read_mode=ReadMode.MAFKA4,
            replica_lag_ms_max=settings.replica_lag_ms_max, read_replica_lag_ms_max=settings.replica_lag_ms_max)
        self.workdir = Path(tempfile.mkdtemp(prefix="m4chaos-w-"))
        self.history = History()
        retries = settings.nack_share > 0 or settings.poison_share > 0
        self.members = Members(connection, self.topic, GROUP, self.workdir, settings.member_lease_ttl_s,
                               settings.auto_commit_interval_ms, settings.retry_policy if retries else None,
                               settings.nack_share, settings.poison_share)
        self.observer = CommitObserver(connection, GROUP, self.topic, self.history)
        self.producer = PacedProducer(connection, self.topic, settings.partitions, settings.keys,
                                      settings.rate_msgs_per_s, self.history, settings.delivery_timeout_ms,
                                      settings.lanes, settings.delayed_share, settings.delay_ms_max, settings.seed)
        etcd = EtcdControl.of(connection, etcd_started) if connection.state is not None else None
        self.nemesis = Nemesis(connection, self.topic, random.Random(settings.seed), self.members, etcd,
                               settings.timing, self.began)
        self.sampler = ResourceSampler.of(connection, settings.resource_sample_s, self.began)

    def _phase_done(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.phases[name] = now - since
        return now

    def execute(self) -> dict:
        settings = self.settings
        try:
            for _ in range(settings.members):
                self.members.start()
            self.members.wait_ready()
            self.observer.start()
            self.producer.start()
            self.sampler.start()
            mark = self._phase_done("setup_s", self.began)
            time.sleep(settings.warmup_s)
            faults_began = time.monotonic()
            faults = self.nemesis.run(settings.duration_s, settings.faults)
            steady = steady_window(faults_began - self.began, time.monotonic() - self.began)
            mark = self._phase_done("faults_s", mark)
            heal = self.nemesis.heal(settings.heal_timeout_s)
            time.sleep(settings.settle_s)
            self.producer.stop()
            mark = self._phase_done("heal_s", mark)
            acks = [record for _, record in self.history.records() if isinstance(record, Ack)]
            drained_at_ms = _drain(self.members, {ack.value for ack in acks}, settings.drain_timeout_s)
            drained = drained_at_ms is not None
            self.members.stop_all()  # each member sends the dead letters of its last nacks before it leaves
            self.observer.stop()
            resources = resource_trends(self.sampler.stop(), steady)
            mark = self._phase_done("drain_s", mark)
            logs = read_final_logs(self.connection, self.topic)
            try:
                doomed = {nack.value for _, nack in self.members.nacks() if nack.due_ms is None}
                dead = read_dead_lettered(self.connection, self.topic, GROUP, doomed)
            except (MafkaError, ray.exceptions.RayError) as error:
                logs.unreadable.append(f"{dlq_topic_name(self.topic, GROUP)}: {type(error).__name__}")
                dead, drained_at_ms = [], None  # nacks that ended there cannot be judged
            own = topic_acks([record for _, record in self.history.records()])
            merged = self.history.merged([*with_sources(self.members.consumed(), own, logs.vp_logs),
                                          *self.members.nacks()]) + dead
            judged = judge(merged, logs, GROUP, drained, drained_at_ms)
            self._phase_done("judge_s", mark)
            report = self._report(faults, heal, drained, logs, judged, resources)
        finally:
            self.sampler.stop()
            self.nemesis.undo()  # a run stopped mid-fault leaves no process stopped, no network cut
            self.producer.stop()
            self.members.stop_all()
            self.observer.stop()
            if self.delete_topic:
                _delete_topic(self.admin, self.topic)
        if report["verdict"]["passed"]:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            report["member_logs"] = str(self.workdir)  # kept to find out what happened
        return report

    def _report(self, faults: list[FaultRecord], heal: dict, drained: bool, logs: FinalLogs, judged: dict,
                resources: ResourceTrends) -> dict:
        exits = tuple(MemberExit(m.name, m.killed, m.process.returncode, m.stop_timed_out) for m in self.members.all)
        judgement = verdict(Evidence(judged["anomalies"], heal["healed"], self.settings.heal_timeout_s,
                                     tuple(heal["unhealthy"]), exits, tuple(logs.unreadable)))
        by_kind = faults_by_kind(self.settings.faults, faults)
        producer, members = self.producer, self.members
        return {
            "seed": self.settings.seed,
            "topic": self.topic,
            "settings": {**asdict(self.settings), "faults": list(self.settings.faults)},
            "duration_s": round(time.monotonic() - self.began, 3),
            "phases_s": {name: round(value, 3) for name, value in self.phases.items()},
            "messages": {"sent": producer.sent, "acknowledged": producer.acknowledged, "failed": len(producer.failures),
                         "delayed": producer.delayed, "delayed_acknowledged": judged["delayed_acknowledged"],
                         "consumed_records": judged["consumed_records"], "consumed_unique": judged["consumed_unique"],
                         "redelivered": judged["redelivered"], "nacked": judged["nacked"], "retried": judged["retried"],
                         "dead_lettered": judged["dead_lettered"], "unread_acknowledged": judged["unread_acknowledged"]},
            "faults_injected": len(faults),
            "faults_by_kind": by_kind,
            "faults": [fault.to_json() for fault in faults],
            "heal": heal,
            "drained": drained,
            "anomalies": judged["anomalies"],
            "capped_checkers": judged["capped_checkers"],
            "anomaly_samples": judged["anomaly_samples"],
            "unread_explained": judged["unread_explained"],
            "producer_failures": producer.failures[:20],
            "members": [{"name": m.name, "killed": m.killed, "exit_code": m.process.returncode,
                         "stop_timed_out": m.stop_timed_out,
                         "records": sum(1 for line in m.lines() if "vp" in line or "retry" in line)}
                        for m in members.all],
            "member_errors": members.errors()[:20],
            "commit_reads_failed": self.observer.reads_failed,
            "logs_unreadable": logs.unreadable,
            "resources": {"sample_s": self.settings.resource_sample_s, **resources.to_json()},
            "verdict": judgement.to_json(),
        }


def faults_by_kind(kinds: tuple[str, ...], faults: list[FaultRecord]) -> dict[str, int]:
    """How many faults of each kind the run drew, every kind it was asked for included (a kind the
    seed never drew shows 0, so a report says what was not tried)."""
    counts = dict.fromkeys(kinds, 0)
    for fault in faults:
        counts[fault.kind] = counts.get(fault.kind, 0) + 1
    return counts


def _drain(members: Members, acked: set[bytes], timeout_s: float) -> int | None:
    """Wait until the group read every acknowledged message and read again every nacked one whose
    nack did not dead-letter it; None if ``timeout_s`` passed first, else the epoch ms taken before
    the member records that showed it (every nack recorded by then was answered by a read)."""
    deadline = time.monotonic() + timeout_s
    while True:
        at_ms = now_ms()
        consumed = members.consumed()
        history = [record for _, record in sorted([*consumed, *members.nacks()], key=lambda item: item[0])]
        if acked <= {record.value for _, record in consumed} and not awaiting_redelivery(history):
            return at_ms
        if time.monotonic() > deadline:
            return None
        time.sleep(DRAIN_CHECK_INTERVAL_S)


def _delete_topic(admin: Admin, topic: str) -> None:
    try:
        admin.delete_topic(topic)
    except (MafkaError, ray.exceptions.RayError) as error:
        print(f"chaos: could not delete topic {topic} ({error}); it stays on the cluster", file=sys.stderr)
    for companion in (retry_topic_name(topic, GROUP), dlq_topic_name(topic, GROUP)):  # not deleted with the topic
        try:
            admin.delete_topic(companion)
        except UnknownTopic:
            pass  # the group never retried, or never dead-lettered
        except (MafkaError, ray.exceptions.RayError) as error:
            print(f"chaos: could not delete topic {companion} ({error}); it stays on the cluster", file=sys.stderr)


def summary(report: dict) -> str:
    messages = report["messages"]
    lines = [
        f"seed {report['seed']}: {report['duration_s']:.0f} s ({', '.join(f'{k} {v:.0f}' for k, v in report['phases_s'].items())})",
        f"messages: {messages['sent']} sent, {messages['acknowledged']} acknowledged, {messages['failed']} failed, "
        f"{messages['consumed_records']} consumed ({messages['consumed_unique']} distinct, "
        f"{messages['redelivered']} re-delivered), {messages['unread_acknowledged']} acknowledged never read",
        f"delays and retries: {messages.get('delayed', 0)} sent delayed, {messages.get('nacked', 0)} nacks, "
        f"{messages.get('retried', 0)} reads of retries, {messages.get('dead_lettered', 0)} dead-lettered",
        f"faults: {report['faults_injected']} ({', '.join(f'{k} {n}' for k, n in sorted(report['faults_by_kind'].items()))})",
        f"healed: {report['heal']['healed']} in {report['heal']['took_s']:.0f} s; drained: {report['drained']}",
        "anomalies: " + ", ".join(f"{kind} {count}" for kind, count in report["anomalies"].items()),
        *summary_lines(report["resources"]),
    ]
    reasons = report["verdict"]["reasons"]
    lines.append("verdict: FAIL" if reasons else "verdict: pass")
    lines += [f"  {reason['reason']}: {reason['detail']}" for reason in reasons]
    bug = report["settings"].get("planted_bug")
    if bug is not None:
        lines.append(f"planted bug {bug}: {'caught' if planted_bug_caught(report) else 'NOT caught'}")
    return "\n".join(lines)


def planted_bug_caught(report: dict) -> bool:
    """A run with a planted bug caught it when its verdict failed on a checker's anomaly (another
    reason, e.g. a cluster that did not heal, shows damage but not that the checkers see it)."""
    return any(reason["reason"] == Failure.ANOMALY.value for reason in report["verdict"]["reasons"])
