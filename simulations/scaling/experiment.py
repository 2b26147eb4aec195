"""The consumer-scaling experiment on the real runtime: ``mafka4 experiment scaling``.

For every mode and consumer count N, on a local cluster of this machine:

* **mafka3**: a topic of N physical partitions (one per consumer, as Kafka needs);
* **mafka4**: a topic of ``physical_partitions`` (fixed) physical partitions and N virtual
  partitions with ``read_replicas`` replicas each.

Then N consumers join one group, and once every partition (or VP) has an owner and the machine
is quiet (``settle_load``) a producer sends keyed messages with acks=all at ``rate_msgs_per_s``
for ``duration_s``. Each message's value carries its sequence number; the producer stamps the
wall clock at ``send`` and at the acknowledgement, each consumer at the ``poll`` that returned
it. While it runs, the topic's stage trace is on (``mafka4.stage_trace``): the physical leaders
and the read nodes stamp each batch's way through them, and ``simulations.scaling.stage_stamps``
joins those stamps to the messages. The rows go to one Parquet file per run (configuration and
repetition) in the event-log schema (``simulations.schema``), with how often each message was
delivered, and the topic is deleted.

**Repetitions.** Every configuration is measured ``repetitions`` times, repetition ``r`` with
seed ``seed + r`` (its keys), and the modes are interleaved by repetition
(``simulations.scaling.run_plan``): repetition 0 of every mode, then repetition 1 of every
mode, and so on, so that a drift of the machine over the run falls on both modes. Every run
has a topic and a group of its own, created for it and deleted after it: a repetition repeats
the topic's creation and placement and the group's settling too. ``settings.json`` beside the
files records the settings, the order (``run_order``), the profile (``full``, or ``quick``:
``ScalingSettings.quick``) and the layout the run pinned by (``client_layout``: below), and
``runs.jsonl`` one line per measured run: the load average before and after it, the CPUs busy in
the ``BUSY_WINDOW_S`` before it (``busy_cores_before``), how long its topic and its group took, how long it waited for a quiet machine, what did not drain,
stage-trace rows dropped.

**Drained or not.** After the last send the consumers get ``drain_s_max`` to read every
acknowledged message. A run that does not drain is still written (its undelivered messages
have ``deliveries = 0``) and said so on the progress stream; the analysis marks it and leaves
it out of the percentiles and ratios.

**The same in both modes.** One producer: keyed messages of ``message_bytes`` over ``keys``
keys drawn by the same seed, acks=all, linger_ms 1, ``rate_msgs_per_s`` for ``duration_s``. N
consumers of one group, each a process of its own (``simulations.scaling.consumer_process``, as
a deployment runs them: as threads of this driver they shared the producer's GIL) running the
same ``Consumer`` code with its defaults (the range assignor, auto-commit every 5 s); the group's
settling time includes starting their interpreters. Replication factor and
min_insync_replicas ``replication_factor``. ``nodes`` simulated machines on this machine's
cores. Nothing is slowed down on purpose in either mode.

**What differs, by design** (each mode deployed as its design would be):

* *Partitions.* Mafka3: N physical partitions, one per consumer (N x RF replica actors), so the
  producer spreads the same messages over N partitions, in smaller batches as N grows.
  Mafka4: ``physical_partitions`` physical partitions for every N (P x RF replica actors) and
  N virtual partitions with ``read_replicas`` replicas each.
* *Node roles.* Mafka3: all ``nodes`` are brokers: they host the replicas and serve the
  consumers' fetches from the partition leaders. Mafka4: ``nodes // 2`` write nodes host the
  replicas, and ``nodes // 2`` read nodes host the VPs (one read-node actor each) and serve the
  fetches. So Mafka4's replicas share half as many nodes as Mafka3's.
* *Read path.* In Mafka4 a message becomes readable after a feeding hop (physical partition to
  read node) and the VP's high watermark; in Mafka3 below the partition's high watermark, at
  its leader.
* *CPU pinning* (``pin_cpus``, ``simulations.scaling.pinning``): the usable CPUs are split into a
  write set (first half) and a read set (the rest), standing for the write side's machines and
  the read side's. A node's raylet, and so every actor it runs, is pinned to one: Mafka4's
  write nodes to the write set and its read nodes to the read set; Mafka3's first ``nodes // 2``
  brokers to the write set and the others to the read set, so its replicas and the fetches
  they serve run on all the cores. The clients get the same layout in both modes: the producer
  (this driver, while it measures) on the write set, every consumer's process (and the
  driver's thread that collects what they polled) on the read set. The members keep what they
  polled until production is over (``consumer_process``), so nothing of theirs runs in the
  producer's process while it is measured. So no consumer shares a
  CPU with Mafka4's write nodes; on 2 cores the producer has to share one with them, in both
  modes. The cluster's shared services (the daemon, Ray's head with the controller, etcd) are
  not pinned unless ``pin_services`` (``--pin-services``) puts them on the read set in both modes
  (``pinning.pin_services`` says what each choice costs). ``--no-pin`` turns pinning off.
  ``ScalingSettings.client_layout`` says where the clients and the services go; the run pins by
  it and ``settings.json`` records it, so the report words the layout the run used.
* *Group protocol.* Mafka3 members rebalance eagerly over partitions; Mafka4 members own VPs.
  Either way the group has settled before the producer starts, and no member joins or leaves
  during a measurement.
* *Clusters.* Every repetition of each mode gets a fresh cluster of its own (a *block*:
  ``run_plan``), so the modes take turns: Mafka3's repetition 0, Mafka4's repetition 0, Mafka3's
  repetition 1, and so on.

**Lanes** (``lanes``, issue 40; default ``(0,)``: none). A run of L > 0 lanes opens lanes
``lane-001`` ... before its group starts, and the producer sends its messages round robin over
them at the same total rate (the trunk gets none). Each mode models isolation its own way, on the
same client code: Mafka4 opens a lane as VPs over the topic's physical partitions, and the
group's N members are trunk readers that read every lane by fallback (no lane has a member of
its own); Mafka3 opens a lane as a topic of its own (``T.lane-001``, with T's config: one
partition per consumer), and since it has no fallback each member reads the trunk topic and every
lane topic, a ``Consumer`` per topic in its process, each in the group of its topic
(``consumer_process``). Mafka3 runs with more than ``mafka3_lanes_max`` lanes are not run: their
(L + 1) x N x RF replica actors would not fit this machine (``settings.json`` records the bound,
and the report says what they would take). Lane runs take no stage stamps: a Mafka3 lane run's
messages are not in the traced topic, and tracing one mode only would load one side.

**Resumable.** A run whose Parquet file exists is not run again, and a block whose runs all
exist starts no cluster, so an interrupted run continues where it stopped (same ``--out`` and
seed). A results directory of a version that ran all of one mode before the other (its
``settings.json`` records no ``run_order``) is refused, not continued in another order.

**Limits on this machine**: the producer shares the driver's Python process, each consumer
has one of its own, and write-side, read-side and client work share 2 cores, so latencies
include scheduling noise; compare modes within one run.
"""

from __future__ import annotations

import contextlib
import enum
import json
import multiprocessing.connection
import os
import random
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator

from mafka4.coordinator.groups.partition_protocol import validate_group_name
from mafka4.errors import InvalidConfig, MafkaError
from mafka4.limits import LANES_MAX_DEFAULT, ReadMode, _check_range
from mafka4.limits.servers import ClusterConfig
from simulations.scaling.run_plan import RUN_ORDER, every_run, run_plan

if TYPE_CHECKING:  # the runtime is imported only when a cluster starts
    from mafka4.runtime.temporary import TemporaryCluster
    from simulations.scaling.stage_stamps import TopicTrace

# The read modes compared, the baseline first.
MODES = (ReadMode.MAFKA3, ReadMode.MAFKA4)
VALUE_HEADER = struct.Struct(">Q")  # the message's sequence number, then padding
GROUP_STABLE_S_MAX = 180
SETTLE_LOAD_WAIT_S_MAX = 180
# Before every run, after the load wait: how busy the CPUs are over this window (``busy_cores_before``).
# The 1-minute load average counts every thread that is runnable at its 5-s samples, and an idle
# cluster of many Ray workers (each wakes every 10 ms to check signals, plus gRPC's pollers) keeps
# it at 4-7 with half the CPUs idle (reports/2026-12-04-idle-replicas), so the load alone cannot
# tell a busy machine from one that is waking often.
BUSY_WINDOW_S = 5.0
POLL_TIMEOUT_MS = 100
# After the run: how long a consumer process may take to stop (close: commit, leave the group)
# before it is killed.
CONSUMER_STOP_S_MAX = 30
# The quick profile's consumer counts: the default's smallest and largest and one between, a first look at the trend.
QUICK_CONSUMERS = (1, 4, 32)
SETTINGS_FILE = "settings.json"
RUNS_FILE = "runs.jsonl"
# The CPU sets a client_layout names (``cpu_sets``); the report words them.
WRITE_SET, READ_SET, UNPINNED = "write set", "read set", "unpinned"


class Profile(enum.StrEnum):
    """How much a run measures; ``settings.json`` records it (one written before profiles existed
    reads as ``FULL``) and the report of a quick run says so on its first line."""

    FULL = "full"  # the settings as given
    QUICK = "quick"  # ``ScalingSettings.quick``: one repetition, so every tail rests on one run's samples


class ExperimentFailed(MafkaError):
    """A configuration did not reach a state it must reach (e.g. a group never settled)."""

    retriable = True


@dataclass(frozen=True, slots=True)
class ScalingSettings:
    consumers: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    # Given as ReadModes or their strings (``--modes mafka3,mafka4``); held as ReadModes.
    modes: tuple[ReadMode, ...] = MODES
    # Mafka4's physical partitions, the same for every consumer count.
    physical_partitions: int = 2
    replication_factor: int = 2
    read_replicas: int = 1
    # Simulated machines per mode (see the module docstring for how they split).
    nodes: int = 4
    rate_msgs_per_s: int = 1000
    duration_s: float = 10.0
    message_bytes: int = 256
    keys: int = 1000
    seed: int = 7
    repetitions: int = 1
    # After the last send: how long consumers may take to read every acknowledged message.
    drain_s_max: float = 120.0
    pin_cpus: bool = True
    # The cluster's shared services (daemon, Ray's head with the controller, etcd) pinned to the read
    # set too (``pinning.pin_services``); off: Linux places them. Only with ``pin_cpus``.
    pin_services: bool = False
    experiment_id: str = ""
    # After the group settled, before every run, wait (at most SETTLE_LOAD_WAIT_S_MAX) for the
    # 1-minute load average to fall below this: starting a group, or the run before, loads a
    # small machine, and the measurement is then of that tail, not of the steady state (None:
    # measure at once).
    settle_load: float | None = None
    # Given as a Profile or its string; held as a Profile.
    profile: Profile = Profile.FULL
    # Lane counts (0: no lanes, every message on the trunk); see the module docstring.
    lanes: tuple[int, ...] = (0,)
    # Mafka3 runs with more lanes are not run: a topic per lane, (L + 1) x N x RF replica actors.
    mafka3_lanes_max: int = 10

    def __post_init__(self) -> None:
        if not self.consumers or any(n < 1 or n > 64 for n in self.consumers):
            raise InvalidConfig(f"consumers={list(self.consumers)}: give consumer counts between 1 and 64")
        if not self.lanes or any(lanes < 0 or lanes > LANES_MAX_DEFAULT for lanes in self.lanes):
            raise InvalidConfig(f"lanes={list(self.lanes)}: give lane counts between 0 (no lanes) and "
                                f"{LANES_MAX_DEFAULT} (a topic's default lanes_max)")
        _check_range(self, "mafka3_lanes_max", 0, LANES_MAX_DEFAULT)
        if self.pin_services and not self.pin_cpus:
            raise InvalidConfig("pinning the services needs pinning on: drop --no-pin or --pin-services")
        if not self.modes or any(mode not in MODES for mode in self.modes):
            raise InvalidConfig(f"modes={list(self.modes)}: choose from {', '.join(MODES)}")
        object.__setattr__(self, "modes", tuple(ReadMode(mode) for mode in self.modes))
        _check_range(self, "physical_partitions", 1, 64)
        _check_range(self, "replication_factor", 1, 3)
        _check_range(self, "read_replicas", 1, 3)
        _check_range(self, "nodes", 2, 16)
        if self.replication_factor > self.nodes // 2 or self.read_replicas > self.nodes // 2:
            raise InvalidConfig(f"nodes={self.nodes} gives mafka4 {self.nodes // 2} write and {self.nodes // 2} read nodes: "
                                f"raise nodes or lower replication_factor/read_replicas to at most {self.nodes // 2}")
        _check_range(self, "rate_msgs_per_s", 1, 100_000)
        _check_range(self, "message_bytes", VALUE_HEADER.size, 1_000_000)
        _check_range(self, "keys", 1, 10_000_000)
        _check_range(self, "repetitions", 1, 20)
        if not 0 < self.duration_s <= 3600:
            raise InvalidConfig(f"duration_s={self.duration_s} must be in (0, 3600]")
        if self.settle_load is not None and not 0 < self.settle_load <= 64:
            raise InvalidConfig(f"settle_load={self.settle_load} must be in (0, 64], or None to measure at once")
        if self.profile not in tuple(Profile):
            raise InvalidConfig(f"profile={self.profile!r}: choose from {', '.join(Profile)}")
        object.__setattr__(self, "profile", Profile(self.profile))
        if self.profile is Profile.QUICK and self.repetitions != 1:
            raise InvalidConfig(f"the quick profile measures one repetition, not {self.repetitions}: drop the "
                                "repetitions or the quick profile")

    def quick(self) -> ScalingSettings:
        """These settings in the quick profile: consumer counts ``QUICK_CONSUMERS``, one repetition."""
        return replace(self, consumers=QUICK_CONSUMERS, repetitions=1, profile=Profile.QUICK)

    def runs_lanes(self, mode: ReadMode, lanes: int) -> bool:
        """Whether ``mode`` runs with ``lanes`` lanes: Mafka3 not above ``mafka3_lanes_max``."""
        return mode is not ReadMode.MAFKA3 or lanes <= self.mafka3_lanes_max

    @property
    def run_id(self) -> str:
        return self.experiment_id or f"scaling-seed{self.seed}"

    @property
    def messages(self) -> int:
        """Messages per configuration and repetition."""
        return int(self.rate_msgs_per_s * self.duration_s)

    def seed_of(self, repetition: int) -> int:
        return self.seed + repetition

    @property
    def client_layout(self) -> dict[str, str]:
        """How the consumers run and the CPU set (``WRITE_SET``, ``READ_SET``, ``UNPINNED``) of the
        producer (this driver, while it measures), of the consumers' processes (with the driver's
        thread that collects what they polled) and of the cluster's shared services. The run pins
        by it, and ``settings.json`` records it for the report."""
        return {"consumers": "processes",
                "producer_cpus": WRITE_SET if self.pin_cpus else UNPINNED,
                "consumer_cpus": READ_SET if self.pin_cpus else UNPINNED,
                "service_cpus": READ_SET if self.pin_services else UNPINNED}

    def to_json(self) -> dict:
        return {**asdict(self), "modes": [str(mode) for mode in self.modes], "profile": str(self.profile),
                "messages": self.messages, "client_layout": self.client_layout, "run_order": RUN_ORDER}


@dataclass
class _ConsumerLog:
    """What one consumer saw: sequence number -> (wall ms at poll, partition or VP, offset there),
    and sequence number -> deliveries after its first one here (duplicates); and the ``repr`` of
    what its consumer raised, or why its process ended, if it failed."""

    seen: dict[int, tuple[float, int, int]] = field(default_factory=dict)
    redelivered: dict[int, int] = field(default_factory=dict)
    error: str | None = None

    def record(self, polled: Iterable[tuple[int, float, int, int]]) -> None:
        """Add what one poll returned, each message as (sequence, wall ms at the poll, partition or VP, offset)."""
        for sequence, now_ms, partition, offset in polled:
            if sequence in self.seen:
                self.redelivered[sequence] = self.redelivered.get(sequence, 0) + 1
            else:
                self.seen[sequence] = (now_ms, partition, offset)


@dataclass
class _ProducerLog:
    """What the producer saw of message i (lists and dicts by i), which carried sequence number i."""

    produce_ms: list[float] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)  # keyed: known at send, acknowledged or not
    ack_ms: dict[int, float] = field(default_factory=dict)
    offset: dict[int, int] = field(default_factory=dict)
    sent_ms: dict[int, float] = field(default_factory=dict)  # its batch left the accumulator
    failures: int = 0


@dataclass
class _Trace:
    """The topic's stage-trace rows of one run (``simulations.scaling.stage_stamps.TopicTrace``)."""

    physical: dict[int, list[tuple]] = field(default_factory=dict)
    read_nodes: list[tuple] = field(default_factory=list)
    dropped: int = 0


def cluster_config(mode: ReadMode, settings: ScalingSettings) -> ClusterConfig:
    if mode is ReadMode.MAFKA3:
        return ClusterConfig(write_nodes=settings.nodes, read_nodes=0)
    return ClusterConfig(write_nodes=settings.nodes // 2, read_nodes=settings.nodes // 2)


def cpu_sets(cpus: list[int]) -> tuple[list[int], list[int]]:
    """(write set, read set): the first half of the CPUs, and the rest."""
    half = max(1, len(cpus) // 2)
    return cpus[:half], cpus[half:] or cpus[:half]


def _cpus_named(name: str) -> list[int] | None:
    """This machine's CPUs of a set a ``client_layout`` names; None for ``UNPINNED``."""
    from simulations.scaling.pinning import usable_cpus

    write_set, read_set = cpu_sets(usable_cpus())
    return {WRITE_SET: write_set, READ_SET: read_set, UNPINNED: None}[name]


def cpu_plan(mode: ReadMode, settings: ScalingSettings, cpus: list[int]) -> dict[str, list[int]]:
    """Node id -> CPU set: write set = first half of the CPUs, read set = the rest."""
    write_set, read_set = cpu_sets(cpus)
    config = cluster_config(mode, settings)
    if mode is ReadMode.MAFKA3:  # brokers only: half of them stand on the read side's machines
        return {f"w{i}": (write_set if i < config.write_nodes // 2 else read_set) for i in range(config.write_nodes)}
    return {**{f"w{i}": write_set for i in range(config.write_nodes)},
            **{f"r{i}": read_set for i in range(config.read_nodes)}}


def config_path(out_dir: Path, settings: ScalingSettings, mode: ReadMode, consumers: int, repetition: int = 0,
                lanes: int = 0) -> Path:
    lanes_part = f"-l{lanes:03d}" if lanes else ""  # runs without lanes keep the names they had before lanes
    return out_dir / settings.run_id / f"{mode}-c{consumers:03d}{lanes_part}-r{repetition}.parquet"


def lane_names(lanes: int) -> tuple[str, ...]:
    """The lanes a run of ``lanes`` lanes opens and sends to."""
    return tuple(f"lane-{number:03d}" for number in range(1, lanes + 1))


def run_scaling(settings: ScalingSettings, out_dir: Path, progress=sys.stderr) -> list[Path]:
    """Run every run not yet on disk, in ``run_plan``'s order; return the Parquet files of all of them."""
    runs = every_run(settings)

    def on_disk(repetition: int, mode: ReadMode, consumers: int, lanes: int) -> bool:
        return config_path(out_dir, settings, mode, consumers, repetition, lanes).exists()

    done = sum(on_disk(*run) for run in runs)
    _write_settings(out_dir / settings.run_id / SETTINGS_FILE, settings)
    _progress(progress, done, len(runs), "resuming" if done else "starting", settings)
    for block in run_plan(settings, on_disk):
        with _mode_cluster(block.mode, settings) as cluster:
            for consumers, lanes in block.shapes:
                what = _measure_run(cluster, settings, block.mode, consumers, lanes, block.repetition, out_dir)
                done += 1
                _progress(progress, done, len(runs), what, settings)
    return [config_path(out_dir, settings, mode, consumers, repetition, lanes)
            for repetition, mode, consumers, lanes in runs]


def _write_settings(path: Path, settings: ScalingSettings) -> None:
    """The settings beside the event logs; a resumed run must use the same ones, and the same order."""
    document = json.loads(json.dumps(settings.to_json()))  # tuples as JSON gives them back: lists
    if path.exists():
        recorded = json.loads(path.read_text())
        if "run_order" not in recorded:
            raise InvalidConfig(f"{path} is of an experiment {settings.run_id!r} that ran all of one mode before the "
                                "other; this version interleaves the modes by repetition and does not continue it in "
                                "another order: pick another --out or --experiment-id")
        if recorded != document:
            differ = sorted(key for key in document.keys() | recorded.keys() if document.get(key) != recorded.get(key))
            raise InvalidConfig(f"{path} records other settings ({', '.join(differ)} differ) for experiment "
                                f"{settings.run_id!r}: resume with the same settings, or pick another --out or --experiment-id")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")


def _progress(stream, done: int, total: int, what: str, settings: ScalingSettings) -> None:
    width = 30
    filled = width * done // max(total, 1)
    print(f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {settings.run_id}: {what}", file=stream, flush=True)


@contextlib.contextmanager
def _mode_cluster(mode: ReadMode, settings: ScalingSettings) -> Iterator[TemporaryCluster]:
    """A throwaway local cluster for one mode, its nodes pinned to CPU sets (unless told not to)."""
    from mafka4.runtime.temporary import temporary_cluster
    from simulations.scaling.pinning import pin_nodes, pin_services, usable_cpus

    with temporary_cluster(cluster_config(mode, settings), home_prefix="m4x-") as cluster:
        services = _cpus_named(settings.client_layout["service_cpus"])
        if services is not None:  # first: it pins the nodes' raylets too
            state = cluster.state
            pin_services(state.daemon_pid, [member.pid for member in state.etcd_members], services)
        if settings.pin_cpus:
            pin_nodes(Path(cluster.state.ray_temp_dir), cpu_plan(mode, settings, usable_cpus()))
        yield cluster


def _create_topic(admin, settings: ScalingSettings, mode: ReadMode, consumers: int, lanes: int,
                  repetition: int) -> tuple[str, tuple[str, ...]]:
    """The run's topic, created in ``mode``'s layout with its lanes open; its name, which names the
    run's seed, and the topics its members read (itself, and in Mafka3 a topic per lane)."""
    lanes_part = f"-l{lanes}" if lanes else ""
    topic = f"scaling-{mode}-c{consumers}{lanes_part}-s{settings.seed_of(repetition)}"
    _delete_topics(admin, topic)  # left by an interrupted run of this configuration
    if mode is ReadMode.MAFKA3:
        admin.create_topic(topic, partitions=consumers, replication_factor=settings.replication_factor,
                           min_insync_replicas=settings.replication_factor, read_mode=ReadMode.MAFKA3)
    else:
        admin.create_topic(topic, partitions=settings.physical_partitions, replication_factor=settings.replication_factor,
                           min_insync_replicas=settings.replication_factor, read_mode=ReadMode.MAFKA4,
                           virtual_partitions=consumers, read_replicas=settings.read_replicas)
    # Before the group starts: its members then settle on every lane, and no lane opens while measured.
    opened = [admin.open_lane(topic, lane) for lane in lane_names(lanes)]
    lane_topics = tuple(answer.topic for answer in opened) if mode is ReadMode.MAFKA3 else ()
    return topic, (topic, *lane_topics)


def _delete_topics(admin, topic: str) -> None:
    """``topic`` and its Mafka3 lane topics (``T.lane``), those that exist."""
    for name in admin.list_topics():
        if name == topic or name.startswith(f"{topic}."):
            admin.delete_topic(name)


def _measure_run(cluster: TemporaryCluster, settings: ScalingSettings, mode: ReadMode, consumers: int, lanes: int,
                 repetition: int, out_dir: Path) -> str:
    """Measure one run on a topic and group of its own: create the topic, settle the group, wait for a
    quiet machine, produce, drain; write its event log and its line of ``runs.jsonl``, delete the
    topic. What the progress stream says of it."""
    from mafka4.client.admin import Admin
    from simulations.schema import RunInfo, git_commit, write_events  # pyarrow: only when writing

    admin = Admin(cluster.connection)
    began = time.monotonic()
    topic, read_topics = _create_topic(admin, settings, mode, consumers, lanes, repetition)
    created_s = time.monotonic() - began
    try:
        footprint = topic_footprint(admin, read_topics, cluster.connection)
        trace = _topic_trace(admin, topic, cluster.connection) if not lanes else None  # module doc: Lanes
        layout = settings.client_layout
        consumer_cpus = _cpus_named(layout["consumer_cpus"])
        # Every member owns its share of every topic's partitions, or of the topic's VPs (lanes' among them).
        owned = footprint["virtual_partitions"] or footprint["physical_partitions"]
        with _Group(cluster.connection, read_topics, consumers, owned, consumer_cpus) as group, \
                _driver_pinned(_cpus_named(layout["producer_cpus"]), group.collector_thread, consumer_cpus):
            settled_s = time.monotonic() - began - created_s
            # The group's start (its members' interpreters) and the run before load a small machine.
            quieted_s = _wait_for_load_below(settings.settle_load)
            busy_cores_before = _busy_cores(BUSY_WINDOW_S)
            measured = time.monotonic()
            load_before = os.getloadavg()
            seed = settings.seed_of(repetition)
            if trace is not None:
                trace.start()
            producer_log = _produce(cluster.connection, topic, settings, seed, lane_names(lanes))
            group.drain(set(producer_log.ack_ms), settings.drain_s_max)
            stamps = _Trace(*trace.take_and_stop()) if trace is not None else _Trace()
            path = config_path(out_dir, settings, mode, consumers, repetition, lanes)
            run = RunInfo(experiment_id=settings.run_id, source="runtime", mode=mode, consumers=consumers, topics=1,
                          lanes=lanes,
                          physical_partitions=footprint["physical_partitions"],
                          virtual_partitions=footprint["virtual_partitions"], write_nodes=footprint["write_nodes"],
                          read_nodes=footprint["read_nodes"], actors=footprint["actors"], sample_rate=1.0, seed=seed,
                          git_commit=git_commit(), repetition=repetition)
            columns = event_columns(mode, producer_log, group.logs, stamps)
            write_events(path, run, columns)
            measured_s = time.monotonic() - measured
            undelivered = sum(1 for ack, delivered in zip(columns["ack_time_ms"], columns["deliveries"])
                              if ack is not None and not delivered)
            _append_run_record(out_dir / settings.run_id / RUNS_FILE, {
                "mode": str(mode), "consumers": consumers, "lanes": lanes, "repetition": repetition, "seed": seed,
                "load_average_before": [round(value, 2) for value in load_before],
                "busy_cores_before": busy_cores_before,
                "load_average_after": [round(value, 2) for value in os.getloadavg()],
                "topic_created_s": round(created_s, 1), "group_settled_s": round(settled_s, 1),
                "load_settle_wait_s": round(quieted_s, 1), "measured_s": round(measured_s, 1),
                "undelivered": undelivered, "trace_rows_dropped": stamps.dropped,
                "trace_actors_lost": trace.lost_actors if trace is not None else 0, "event_log": path.name})
    finally:
        _delete_topics(admin, topic)
    waited = f"load wait {quieted_s:.0f} s, " if settings.settle_load is not None else ""
    drained = "" if not undelivered else f"; NOT DRAINED: {undelivered} acknowledged messages never consumed"
    lanes_part = f" L={lanes}" if lanes else ""
    return (f"{mode} N={consumers}{lanes_part} r{repetition} (topic {created_s:.0f} s, group {settled_s:.0f} s, {waited}measured "
            f"{measured_s:.0f} s, load {load_before[0]:.2f} before) -> {path.name}{drained}")


def _wait_for_load_below(load: float | None) -> float:
    """Until the 1-minute load average is below ``load`` (None: not at all), at most
    ``SETTLE_LOAD_WAIT_S_MAX``; the seconds waited (the run record's ``load_settle_wait_s``)."""
    began = time.monotonic()
    while load is not None and os.getloadavg()[0] >= load and time.monotonic() - began < SETTLE_LOAD_WAIT_S_MAX:
        time.sleep(1)
    return time.monotonic() - began


def _busy_cores(window_s: float) -> float:
    """The whole machine's busy CPUs (user, system, interrupts: ``mafka4.bench.cpu_cost.busy_ticks``)
    averaged over the next ``window_s``: the run record's ``busy_cores_before``."""
    from mafka4.bench.process_usage import machine_cpu

    before = machine_cpu()
    time.sleep(window_s)
    after = machine_cpu()
    busy_s = (after.busy_ticks - before.busy_ticks) / os.sysconf("SC_CLK_TCK")
    return round(busy_s / ((after.at_ns - before.at_ns) / 1e9), 3)


def _append_run_record(path: Path, record: dict) -> None:
    """One JSON line per measured run: the machine's load around it, its setup times, what did not drain."""
    with path.open("a") as sink:
        sink.write(json.dumps(record) + "\n")


def _topic_trace(admin, topic: str, connection) -> TopicTrace:
    from mafka4.virtual.vp_store import VirtualStore
    from simulations.scaling.stage_stamps import TopicTrace

    metadata = admin.topic_metadata(topic)
    vp_states = [state for state, _ in VirtualStore(connection.store, connection.cluster).states(topic).values()]
    read_nodes = sorted({replica for state in vp_states for replica in state.replicas})
    return TopicTrace(connection.cluster, topic, {state.partition: state.replicas for state in metadata.partitions}, read_nodes)


def topic_footprint(admin, topics: Iterable[str], connection) -> dict[str, int]:
    """Partitions, actors and distinct nodes some topics occupy together, from their etcd metadata."""
    from mafka4.virtual.vp_store import VirtualStore

    partitions = [state for topic in topics for state in admin.topic_metadata(topic).partitions]
    write_nodes = {replica for state in partitions for replica in state.replicas}
    physical_replicas = sum(len(state.replicas) for state in partitions)
    vp_states = [state for topic in topics
                 for state, _ in VirtualStore(connection.store, connection.cluster).states(topic).values()]
    read_nodes = {replica for state in vp_states for replica in state.replicas}
    # A VP is a log inside its read node's one actor: the read side costs an actor per read node.
    return {"physical_partitions": len(partitions), "virtual_partitions": len(vp_states),
            "write_nodes": len(write_nodes), "read_nodes": len(read_nodes),
            "actors": physical_replicas + len(read_nodes)}


@contextlib.contextmanager
def _driver_pinned(cpus: list[int] | None, collector_thread: int | None,
                   collector_cpus: list[int] | None) -> Iterator[None]:
    """This driver (the producer) on ``cpus`` while inside, but its collector of what the consumers
    polled, their work, on ``collector_cpus``; None: unpinned."""
    from simulations.scaling.pinning import pin_threads

    if cpus is None:
        yield
        return
    before = pin_threads(os.getpid(), cpus)
    if collector_thread is not None and collector_cpus is not None:
        os.sched_setaffinity(collector_thread, collector_cpus)
    try:
        yield
    finally:
        pin_threads(os.getpid(), sorted(before))


class _Group:
    """``consumers`` members of one group reading ``topics``' first (and, in a Mafka3 lane run,
    of a group per topic reading each of the others: module doc, Lanes), each a process of its own
    (``simulations.scaling.consumer_process``: as threads of this driver they shared the producer's
    GIL and lengthened its tail latency as N grew). One thread of this driver collects what each
    member tells into its ``_ConsumerLog``; what they polled, only when ``drain`` asks for it.
    Entered once every member owns something and the members own ``owned`` partitions or VPs
    together, so production then measures a settled group; left with every member stopped, or killed."""

    def __init__(self, connection, topics: tuple[str, ...], consumers: int, owned: int, cpus: list[int] | None):
        """``cpus``: where the members' processes run (None: anywhere)."""
        from mafka4.client.cluster_access import cluster_access

        self._access = cluster_access(connection)  # once, here: a member imports neither Ray nor etcd
        self._groups = tuple((topic, validate_group_name(f"{topic}-group")) for topic in topics)
        self._owned = owned
        self.logs = [_ConsumerLog() for _ in range(consumers)]
        self._assigned = [0] * consumers  # each member's assignment size, as it last told
        self._reports = [0] * consumers  # how many of the driver's Report() each member has answered
        self._lock = threading.Lock()  # the collector writes the logs and the sizes; the driver reads them
        self._reported = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._members: list[tuple[subprocess.Popen, multiprocessing.connection.Connection]] = []
        self._collector = threading.Thread(target=self._collect, daemon=True, name="consumer-collector")
        self._cpus = cpus

    @property
    def collector_thread(self) -> int | None:
        """The native id of the thread that collects what the members polled."""
        return self._collector.native_id

    def __enter__(self) -> "_Group":
        from simulations.scaling.consumer_process import start
        from simulations.scaling.pinning import pin_threads

        try:
            for _ in self.logs:  # not waited for: the members' interpreters start side by side
                self._members.append(start(self._access, self._groups))
                if self._cpus is not None:  # before its interpreter starts a thread
                    pin_threads(self._members[-1][0].pid, self._cpus)
            self._collector.start()
            self._wait_until_settled()
            if self._cpus is not None:
                for process, _ in self._members:  # and every thread each started since
                    pin_threads(process.pid, self._cpus)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def drain(self, expected: set[int], seconds_max: float) -> None:
        """Until the members have seen every one of ``expected``, for at most ``seconds_max``;
        the logs then hold all they polled up to their last answer."""
        deadline = time.monotonic() + seconds_max
        while True:
            self._collect_polled(deadline)
            with self._lock:
                _raise_consumer_error(self.logs)
                if expected <= _seen(self.logs) or time.monotonic() >= deadline:
                    return
            time.sleep(0.1)

    def _collect_polled(self, deadline: float) -> None:
        """Ask every member for what it polled, and wait until each has answered (or ``deadline``)."""
        from mafka4.bench.member_process import Report, send_all

        with self._lock:
            asked = [answered + 1 for answered in self._reports]
        send_all(self._members, Report())  # one whose process is gone: the collector says why
        with self._reported:
            while any(answered < wanted for answered, wanted in zip(self._reports, asked)):
                _raise_consumer_error(self.logs)
                if not self._reported.wait(timeout=max(0.0, min(1.0, deadline - time.monotonic()))) \
                        and time.monotonic() >= deadline:
                    return

    def __exit__(self, *exc_info) -> None:
        from mafka4.bench.member_process import stop_members

        self._stopping.set()
        stop_members(self._members, CONSUMER_STOP_S_MAX)
        if self._collector.ident is not None:
            self._collector.join(timeout=CONSUMER_STOP_S_MAX)  # every member's end is closed: it returns
        if not self._collector.is_alive():
            for _, channel in self._members:
                channel.close()

    def _collect(self) -> None:
        """Until every member's end of its wire has closed: what it polled, its assignment's size, its failure."""
        from mafka4.bench.member_process import Failed
        from simulations.scaling.consumer_process import Assigned, Polled

        open_channels = {channel: i for i, (_, channel) in enumerate(self._members)}
        while open_channels:
            for channel in multiprocessing.connection.wait(list(open_channels)):
                i = open_channels[channel]
                try:
                    report = channel.recv()
                except (EOFError, OSError):
                    del open_channels[channel]
                    if not self._stopping.is_set() and self.logs[i].error is None:
                        process = self._members[i][0]
                        with self._lock:
                            self.logs[i].error = (f"consumer process {process.pid} ended before the run did "
                                                  f"(exit code {process.poll()}): see its output above")
                            self._reported.notify_all()
                    continue
                with self._lock:
                    if isinstance(report, Polled):
                        self.logs[i].record(report.messages)
                        self._reports[i] += 1
                    elif isinstance(report, Assigned):
                        self._assigned[i] = report.size
                    else:
                        assert isinstance(report, Failed), report
                        self.logs[i].error = report.error
                    self._reported.notify_all()

    def _wait_until_settled(self) -> None:
        """Until every member owns something and all of it is owned: production then measures a settled group."""
        deadline = time.monotonic() + GROUP_STABLE_S_MAX
        while True:
            with self._lock:
                sizes = list(self._assigned)
            if all(sizes) and sum(sizes) >= self._owned:
                return
            _raise_consumer_error(self.logs)
            if time.monotonic() > deadline:
                raise ExperimentFailed(f"the group did not settle in {GROUP_STABLE_S_MAX} s (assignment sizes {sizes} "
                                       f"of {self._owned}): "
                                       f"see the cluster's logs; rerun with the same --out to resume")
            time.sleep(0.1)


def _raise_consumer_error(logs: list[_ConsumerLog]) -> None:
    for log in logs:
        if log.error is not None:
            raise ExperimentFailed(f"a consumer failed during the run: {log.error}")


def _seen(logs: list[_ConsumerLog]) -> set[int]:
    return set().union(*(log.seen.keys() for log in logs))


def producer_partitions(connection, topic: str) -> int:
    from mafka4.physical.topics import TopicStore

    return len(TopicStore(connection.store, connection.cluster).get(topic).partitions)


def _produce(connection, topic: str, settings: ScalingSettings, seed: int, lanes: tuple[str, ...]) -> _ProducerLog:
    """Send ``settings.messages`` keyed messages at the set rate, round robin over ``lanes`` (none:
    the trunk); message i carries sequence number i, and the log is indexed by i."""
    from mafka4.client.partitioner import Partitioner
    from mafka4.client.producer import Producer

    rng = random.Random(seed)
    padding = bytes(settings.message_bytes - VALUE_HEADER.size)
    log = _ProducerLog()
    total = settings.messages
    interval_s = 1.0 / settings.rate_msgs_per_s

    def on_ack(sequence: int):
        def callback(metadata, error):
            if error is None:
                log.ack_ms[sequence] = time.time() * 1000
                log.offset[sequence] = metadata.offset
                if metadata.sent_time_ms is not None:
                    log.sent_ms[sequence] = metadata.sent_time_ms
            else:
                log.failures += 1
        return callback

    with Producer(topic, connection=connection, acks="all", linger_ms=1) as producer:
        partitions = Partitioner(topic, producer_partitions(connection, topic))
        for lane in lanes:  # where each lane is, before the clock starts (as a Kafka producer's metadata)
            producer.open_lane(lane)
        began = time.monotonic()
        for sequence in range(total):
            wait_s = began + sequence * interval_s - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)
            key = f"key-{rng.randrange(settings.keys)}".encode()
            log.partition.append(partitions.partition(key, None))
            log.produce_ms.append(time.time() * 1000)
            lane = lanes[sequence % len(lanes)] if lanes else None
            producer.send(VALUE_HEADER.pack(sequence) + padding, key=key, lane=lane).add_callback(on_ack(sequence))
        producer.flush()
    return log


def event_columns(mode: ReadMode, producer: _ProducerLog, consumers: list[_ConsumerLog], trace: _Trace) -> dict[str, list]:
    """The per-row columns of one run: a message's first delivery (by poll time) gives its consume
    time and VP; ``deliveries`` counts every delivery to any member; the stamps come from the trace."""
    from simulations.scaling.stage_stamps import physical_stamps, vp_stamps

    seen: dict[int, tuple[float, int, int]] = {}
    deliveries: dict[int, int] = {}
    for log in consumers:
        for sequence, first in log.seen.items():
            if sequence not in seen or first[0] < seen[sequence][0]:
                seen[sequence] = first
            deliveries[sequence] = deliveries.get(sequence, 0) + 1 + log.redelivered.get(sequence, 0)
    indexes = range(len(producer.produce_ms))
    first = [seen.get(i) for i in indexes]  # its first delivery, or None
    virtual = mode is ReadMode.MAFKA4
    columns = {
        "partition": producer.partition,
        "virtual_partition": [delivery[1] if virtual and delivery else None for delivery in first],
        "produce_time_ms": producer.produce_ms,
        "ack_time_ms": [producer.ack_ms.get(i) for i in indexes],
        "consume_time_ms": [delivery[0] if delivery else None for delivery in first],
        "deliveries": [deliveries.get(i, 0) for i in indexes],
        "sent_time_ms": [producer.sent_ms.get(i) for i in indexes],
        **physical_stamps(trace.physical, producer.partition, [producer.offset.get(i) for i in indexes]),
    }
    if virtual:
        columns.update(vp_stamps(trace.read_nodes, columns["virtual_partition"],
                                 [delivery[2] if delivery else None for delivery in first]))
    return columns
