"""``fleet calibrate``: measure the runtime's costs on a throwaway local cluster; write calibration.json.

One throwaway cluster (3 write nodes, 1 read node; ``runtime.temporary``), stopped at the end. With the
benchmark machinery of ``mafka4.bench.produce`` (``encoded_batches``/``raw_run`` send the
producer's batches straight to a leader; ``producer_run`` paces the public Producer):

1. **topics**: ``cal-rf1`` (P=1, RF=1), ``cal-rf2`` (P=1, RF=2), ``cal-vp`` (P=1, RF=1, mafka4
   mode, ``virtual_partitions`` VPs, RR=1, the topic the feed runs feed). RF=2, not 3: two
   followers of one partition wake each other's long poll (step 7), which would swamp every CPU
   figure on a 2-core machine.
2. **idle, before**: CPU of every actor process and RSS of the read node over ``idle_window_s``
   (``proc_cpu.idle_window``: schedstat of every thread, ``idle_slices`` slices) without traffic.
3. **density**: ``cal-density`` (P=1, RF=1, mafka4 mode, ``density_virtual_partitions`` VPs,
   RR=1) is created; once the read node hosts all its VPs and ``settle_s`` has passed, **idle,
   after**: the same processes (and ``cal-density``'s leader) over another window. The read
   node's growth between the windows, per VP replica, is what a VP costs: a VP is a log inside
   the read node, not a process, and 128 of them grow the node far beyond the noise of its own
   idle CPU and RSS. Then the unique memory (USS) of every replica.
4. **costs**, ``cost_trials`` times (``fit`` takes the spread of the trials' fits as the error):
   * produce: three runs (1 KiB messages one per batch; 1 KiB in full 1 MiB batches; 16 KiB in
     full batches) to cal-rf1, then to cal-rf2: CPU of the leader and of the follower;
   * read: the cal-rf2 leader serves that trial's runs back over its stream, as a feed stream
     fetches (one batch per fetch for the first);
   * feed: single-message batches, then full batches, to cal-vp: CPU of the read node (its feed
     stream splits and appends in process) until every message is in a VP, and its rounds.
5. **latency**: ack -> first waiting reader has the message (physical leader; VPs), over the
   client ports as the product's producers and consumers go (``wake_latency``: a fetch parked
   at the leader's port, a ``VP_FETCH`` at the read node's, a produce at the leader's; not by
   Ray call, whose reply path added a delay and jitter of its own); paced Producer latency on
   cal-rf2 (acks=all, default linger) without and with ``extra_partitions_per_node`` idle RF=1
   partitions per write node, ``pass_trials`` times (RF=1 so their idle CPU stays small and the
   figure is the cost of hosting actors, not of a saturated machine).
6. **wakeups**: an RF=3 partition is created last and its replicas' idle CPU measured over a window.

CPU is the schedstat CPU time of the actor processes (``proc_cpu``), net of each one's idle
rate in the window after step 3, so a busy machine slows the runs but changes the figures
little. The 1-minute load average is recorded before, at every step and after; the run is
``quiet`` when the readings taken while it leaves the machine idle (before, and at the idle
windows' start and end) are at most ``params.QUIET_LOAD_PER_CORE_MAX`` per core, and the
document says so (``params.calibration_source``). The trials' own load is recorded too.
``fit.derive_params`` turns the raw figures into ``CalibrationParams`` and their measurement
errors. The defaults take about 8 min (461 s on a 2-core machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path

import psutil

from mafka4.bench.produce import ProduceBenchSettings, encoded_batches, producer_run, raw_run
from mafka4.client.cluster_access import cluster_access
from mafka4.errors import InvalidConfig
from mafka4.limits import ReadMode
from mafka4.limits.servers import ClusterConfig
from simulations.fleet import proc_cpu
from simulations.fleet.fit import derive_params
from simulations.fleet.params import CALIBRATION_FORMAT, QUIET_LOAD_PER_CORE_MAX, background_loads_1m, is_quiet
from simulations.fleet.wake_latency import WAKE_TRIALS_OVER, ack_to_reader_trials, partition_readers, vp_readers
from simulations.schema import git_commit

MiB = 1024 * 1024
WRITE_NODES = 3
READ_NODE = "r0"
FEED_WAIT_S_MAX = 120.0
HOSTED_WAIT_S_MAX = 300.0  # creating the density topic until the read node hosts every VP
POLL_S = 0.05
SETTLE_S = 0.3  # after a run: the follower's last fetch (which advances its HW) lands in the window


@dataclass(frozen=True, slots=True)
class CalibrationSettings:
    small_messages: int = 1000  # 1 KiB, one per batch: per-request costs
    large_messages: int = 20_000  # 1 KiB in full batches: per-message costs
    big_messages: int = 1500  # big_message_bytes in full batches: per-byte costs
    big_message_bytes: int = 16 * 1024
    virtual_partitions: int = 4  # of cal-vp, which the feed runs feed
    # Of cal-density, whose VPs only sit idle: enough that their idle CPU and memory, tens of KB
    # and about 1e-4 core each, grow the read node well beyond the noise of its own figures.
    density_virtual_partitions: int = 128
    feed_small_messages: int = 500
    feed_large_messages: int = 15_000
    cost_trials: int = 3  # repetitions of every CPU cost run; their spread is the cost's error
    # Idle windows: a read node's housekeeping runs every 1 to 5 s, so a window of 60 s averages
    # 12 to 60 passes; shorter windows are for tests, and fit notes them.
    idle_window_s: float = 60.0
    idle_slices: int = 6  # the spread of the slices' rates is an idle rate's error
    settle_s: float = 10.0  # after the density topic's VPs are hosted, before measuring
    extra_partitions_per_node: int = 6  # idle RF=1 partitions added for the latency-per-replica figure
    paced_msgs_per_s: int = 200
    paced_seconds: int = 4
    pass_trials: int = 5  # alternations of paced runs without / with the extra idle partitions
    wake_trials: int = 10

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InvalidConfig(f"CalibrationSettings.{item.name}={value!r} must be a number >= 0")
        for name in ("cost_trials", "pass_trials", "idle_slices", "wake_trials"):
            if getattr(self, name) < 2:
                raise InvalidConfig(f"CalibrationSettings.{name}={getattr(self, name)} must be >= 2: a spread "
                                    f"needs two values")
        if self.idle_window_s <= 0 or self.virtual_partitions < 1 or self.density_virtual_partitions < 1:
            raise InvalidConfig("CalibrationSettings: idle_window_s must be > 0 and both VP counts >= 1")


class _LoadRecord:
    """The 1-minute load average at every step of a run."""

    def __init__(self) -> None:
        self.samples: list[dict] = []

    def mark(self, phase: str) -> None:
        self.samples.append({"phase": phase, "load_average_1m": round(os.getloadavg()[0], 2)})


def _uss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_full_info().uss / MiB


def _actor_pid(handle) -> int:
    """The PID of an actor's process (Ray's ``__ray_call__`` runs a function on the actor)."""
    import ray

    return ray.get(handle.__ray_call__.remote(lambda _actor: os.getpid()))


def _metered(pids: list[int], idle_cores: dict[int, float], action) -> tuple[object, list[float], float]:
    """Run ``action``; CPU seconds of each process over it, net of its idle rate, and the elapsed seconds."""
    before, started = [proc_cpu.sample(p) for p in pids], time.perf_counter()
    result = action()
    elapsed = time.perf_counter() - started
    after = [proc_cpu.sample(p) for p in pids]
    used = [max(proc_cpu.cpu_s_between(b, a) - idle_cores.get(p, 0.0) * elapsed, 0.0)
            for p, b, a in zip(pids, before, after)]
    return result, used, elapsed


class _Cluster:
    """The calibration topics' actors: handles, PIDs and roles."""

    def __init__(self, connection, admin, settings: CalibrationSettings):
        from mafka4.virtual.vp_store import VirtualStore
        from mafka4.virtual.handles import read_node_handle
        from mafka4.virtual.hosted_vp import VpId

        self.connection, self.admin, self.settings = connection, admin, settings
        admin.create_topic("cal-rf1", partitions=1, replication_factor=1, read_mode=ReadMode.MAFKA3)
        admin.create_topic("cal-rf2", partitions=1, replication_factor=2, read_mode=ReadMode.MAFKA3)
        admin.create_topic("cal-vp", partitions=1, replication_factor=1, read_mode=ReadMode.MAFKA4,
                           virtual_partitions=settings.virtual_partitions, read_replicas=1)
        self.read_node = read_node_handle(admin.cluster, READ_NODE)
        self.wait_hosted("cal-vp", settings.virtual_partitions)
        self.replicas = {topic: self.partition_replicas(topic) for topic in ("cal-rf1", "cal-rf2", "cal-vp")}
        states = VirtualStore(connection.store, admin.cluster).states("cal-vp")
        self.vps = [VpId("cal-vp", vp) for vp in sorted(states)]
        self.pid = {h: _actor_pid(h) for h in [*sum(self.replicas.values(), []), self.read_node]}
        self.roles = {"cal-rf1/leader": "unreplicated_leader", "cal-vp/leader": "unreplicated_leader",
                      "cal-rf2/leader": "replicated_leader", "cal-rf2/follower": "follower", "read_node": "read_node"}
        self.named = {"cal-rf1/leader": self.replicas["cal-rf1"][0], "cal-vp/leader": self.replicas["cal-vp"][0],
                      "cal-rf2/leader": self.replicas["cal-rf2"][0], "cal-rf2/follower": self.replicas["cal-rf2"][1],
                      "read_node": self.read_node}

    def partition_replicas(self, topic: str) -> list:
        """Replica handles of partition 0 of ``topic``, leader first."""
        from mafka4.physical.handles import replica_handle

        state = self.admin.topic_metadata(topic).partitions[0]
        ordered = [state.leader, *(r for r in state.replicas if r != state.leader)]
        return [replica_handle(self.admin.cluster, topic, 0, r) for r in ordered]

    def pids(self, handles) -> list[int]:
        return [self.pid[h] for h in handles]

    def hosted_vps(self, topic: str | None = None) -> int:
        import ray

        described = ray.get(self.read_node.describe.remote(topic))
        return described["hosted_vps"] if topic is None else len(described["vps"])

    def wait_hosted(self, topic: str, vps: int) -> None:
        deadline = time.monotonic() + HOSTED_WAIT_S_MAX
        while self.hosted_vps(topic) < vps:
            assert time.monotonic() < deadline, f"the read node did not host the {vps} VPs of {topic} in time"
            time.sleep(POLL_S * 10)

    def add_density_topic(self) -> dict:
        """Create cal-density and wait until the read node hosts its VPs and has settled."""
        settings, hosted_before = self.settings, self.hosted_vps()
        self.admin.create_topic("cal-density", partitions=1, replication_factor=1, read_mode=ReadMode.MAFKA4,
                                virtual_partitions=settings.density_virtual_partitions, read_replicas=1)
        self.wait_hosted("cal-density", settings.density_virtual_partitions)
        time.sleep(settings.settle_s)
        leader = self.partition_replicas("cal-density")[0]
        self.pid[leader] = _actor_pid(leader)
        self.named["cal-density/leader"], self.roles["cal-density/leader"] = leader, "unreplicated_leader"
        return {"topic": "cal-density", "virtual_partitions": settings.density_virtual_partitions, "read_replicas": 1,
                "hosted_vps_before": hosted_before, "hosted_vps_after": self.hosted_vps()}

    def idle_window(self, window_s: float, slices: int) -> dict:
        """``proc_cpu.idle_window`` over every named actor, each process tagged with its role."""
        window = proc_cpu.idle_window({name: self.pid[h] for name, h in self.named.items()}, window_s, slices)
        for name, process in window["processes"].items():
            process["role"] = self.roles[name]
        return window


def _measure_idle(cluster: _Cluster, loads: _LoadRecord) -> tuple[dict, dict, dict, dict[int, float]]:
    """Idle windows before and after the density topic; replica memory; idle rates by pid (after)."""
    settings = cluster.settings
    loads.mark("idle before")
    before = cluster.idle_window(settings.idle_window_s, settings.idle_slices)
    density = cluster.add_density_topic()
    loads.mark("idle after")
    after = cluster.idle_window(settings.idle_window_s, settings.idle_slices)
    replicas = [p["pid"] for p in after["processes"].values() if p["role"] != "read_node"]
    memory = {"replica_uss_mb": [round(_uss_mb(p), 2) for p in replicas],
              "replica_rss_mb": [round(psutil.Process(p).memory_info().rss / MiB, 2) for p in replicas]}
    rates = {p["pid"]: p["cores"] for p in after["processes"].values()}
    return {"before": before, "after": after}, density, memory, rates


def _produce_runs(settings: CalibrationSettings) -> list[tuple[str, ProduceBenchSettings]]:
    base = ProduceBenchSettings(partitions=1, in_flight_batches_max=5, acks="all")
    return [
        ("small", replace(base, messages=settings.small_messages, message_bytes=1024, batch_bytes_max=1024)),
        ("large", replace(base, messages=settings.large_messages, message_bytes=1024, batch_bytes_max=MiB)),
        ("big", replace(base, messages=settings.big_messages, message_bytes=settings.big_message_bytes, batch_bytes_max=MiB)),
    ]


def _measure_produce(cluster: _Cluster, idle: dict[int, float], topic: str) -> list[dict]:
    runs = []
    handles = cluster.replicas[topic]
    for name, bench in _produce_runs(cluster.settings):
        batches = encoded_batches(bench)

        def send():
            report = raw_run(handles[:1], batches, bench, over_stream=True)
            time.sleep(SETTLE_S)
            return report

        report, used, elapsed = _metered(cluster.pids(handles), idle, send)
        runs.append({"name": name, "requests": len(batches[0]), "messages": bench.messages,
                     "bytes": bench.messages * bench.message_bytes, "elapsed_s": round(elapsed, 3),
                     "msgs_per_s": report["msgs_per_s"], "leader_cpu_s": round(used[0], 6),
                     "followers_cpu_s": round(sum(used[1:]), 6)})
    return runs


def _next_offset(data: bytes, position: int) -> int:
    from mafka4.batch_frame import iter_batches

    for _, header in iter_batches(data, check_crc=False):
        position = header.next_offset
    return position


def _measure_read(cluster: _Cluster, idle: dict[int, float], produce_runs: list[dict], offset: int) -> list[dict]:
    """The cal-rf2 leader serves ``produce_runs`` back, from ``offset`` (where the first begins).

    Over the replica's stream, as a read node's feed stream fetches (``PeerHandles.replica``) and as
    the produce runs send, not as a Ray call: no reader of the product fetches by Ray call, and a Ray
    call's dispatch cost the leader 0.86 to 1.75 ms of CPU per fetch against 0.077 over the stream
    (``reports/2026-12-04-fleet-recalibrated``), which the model then charged every consumer fetch
    of both designs.
    """
    from mafka4.transport.stream_calls import actor_stream

    leader = cluster.replicas["cal-rf2"][0]
    runs = []
    for run in produce_runs:
        end = offset + run["messages"]
        bytes_max = 1 if run["name"] == "small" else 4 * MiB  # a fetch returns at least one whole batch

        def read_all(start=offset, stop=end, limit=bytes_max):
            async def fetch_all() -> int:
                stream = actor_stream(leader, "the calibration's cal-rf2 leader")
                position, fetches = start, 0
                try:
                    while position < stop:
                        position = _next_offset((await stream.fetch.remote(position, limit, 0)).data, position)
                        fetches += 1
                finally:
                    stream.close()
                return fetches
            return asyncio.run(fetch_all())

        fetches, used, elapsed = _metered(cluster.pids([leader]), idle, read_all)
        runs.append({"name": run["name"], "requests": fetches, "messages": run["messages"], "bytes": run["bytes"],
                     "elapsed_s": round(elapsed, 3), "leader_cpu_s": round(used[0], 6)})
        offset = end
    return runs


def _vp_total(cluster: _Cluster) -> int:
    import ray

    return sum(d["log_end_offset"] for d in ray.get(cluster.read_node.describe_vps.remote(cluster.vps)))


def _feed_rounds(cluster: _Cluster) -> int:
    import ray

    return ray.get(cluster.read_node.describe.remote("cal-vp"))["feeds"]["cal-vp"][0]["rounds"]


def _measure_feed(cluster: _Cluster, idle: dict[int, float]) -> list[dict]:
    base = ProduceBenchSettings(partitions=1, in_flight_batches_max=5, acks="all", message_bytes=1024)
    runs = []
    for name, bench in (("small", replace(base, messages=cluster.settings.feed_small_messages, batch_bytes_max=1024)),
                        ("large", replace(base, messages=cluster.settings.feed_large_messages, batch_bytes_max=MiB))):
        target = _vp_total(cluster) + bench.messages
        rounds_before = _feed_rounds(cluster)

        def produce_and_wait():
            raw_run(cluster.replicas["cal-vp"][:1], encoded_batches(bench), bench, over_stream=True)
            deadline = time.monotonic() + FEED_WAIT_S_MAX
            while _vp_total(cluster) < target:
                assert time.monotonic() < deadline, f"the VPs of cal-vp did not receive {bench.messages} messages in time"
                time.sleep(POLL_S)

        _, used, elapsed = _metered(cluster.pids([cluster.read_node]), idle, produce_and_wait)
        # The read node's feed stream splits and appends in one process: its CPU is the feeding's.
        runs.append({"name": name, "messages": bench.messages, "bytes": bench.messages * bench.message_bytes,
                     "rounds": _feed_rounds(cluster) - rounds_before, "elapsed_s": round(elapsed, 3),
                     "feeder_cpu_s": round(used[0], 6), "vps_cpu_s": 0.0})
    return runs


def _measure_costs(cluster: _Cluster, idle: dict[int, float], loads: _LoadRecord) -> dict:
    """Every CPU cost run, ``cost_trials`` times; each trial's read runs read back its cal-rf2 runs."""
    produce, read, feed, read_offset = [], [], [], 0
    for trial in range(cluster.settings.cost_trials):
        loads.mark(f"costs trial {trial}")
        rf1 = _measure_produce(cluster, idle, "cal-rf1")
        replicated = _measure_produce(cluster, idle, "cal-rf2")
        produce.append({"rf1": rf1, "replicated": replicated})
        read.append(_measure_read(cluster, idle, replicated, read_offset))
        read_offset += sum(run["messages"] for run in replicated)
        feed.append(_measure_feed(cluster, idle))
    return {"produce": {"replication_factor": 2, "trials": produce}, "read": {"trials": read},
            "feed": {"virtual_partitions": cluster.settings.virtual_partitions, "trials": feed}}


def _paced_latency(cluster: _Cluster) -> dict:
    bench = ProduceBenchSettings(partitions=1, message_bytes=1024, paced_seconds=cluster.settings.paced_seconds)
    return producer_run(cluster.connection, "cal-rf2", bench, cluster.settings.paced_msgs_per_s)["latency_ms"]


def _measure_latency(cluster: _Cluster) -> dict:
    """Wake latencies, then paced produce latency without and with extra idle actors, alternated
    ``pass_trials`` times so the difference can be told from the machine's noise."""
    access, trials = cluster_access(cluster.connection), cluster.settings.wake_trials
    physical = ack_to_reader_trials(access, "cal-rf2", partition_readers, trials)
    virtual = ack_to_reader_trials(access, "cal-vp", vp_readers, trials)
    extra = cluster.settings.extra_partitions_per_node
    base, loaded = [], []
    for trial in range(cluster.settings.pass_trials):
        base.append(_paced_latency(cluster))
        cluster.admin.create_topic(f"cal-idle-{trial}", partitions=extra * WRITE_NODES, replication_factor=1, read_mode=ReadMode.MAFKA3)
        time.sleep(2.0)  # the new replicas settle into their idle loops
        loaded.append(_paced_latency(cluster))
        cluster.admin.delete_topic(f"cal-idle-{trial}")
    return {"physical_read_ms": physical, "virtual_read_ms": virtual, "wake_trials_over": WAKE_TRIALS_OVER,
            "base_latency_ms": base, "loaded_latency_ms": loaded, "base_p50_ms": [b["p50"] for b in base],
            "loaded_p50_ms": [b["p50"] for b in loaded], "extra_replicas_per_node": extra}


def _measure_wakeups(cluster: _Cluster) -> dict:
    """Idle window of an RF=3 partition's replicas, whose two followers wake each other."""
    settings = cluster.settings
    cluster.admin.create_topic("cal-rf3", partitions=1, replication_factor=3, read_mode=ReadMode.MAFKA3)
    handles = cluster.partition_replicas("cal-rf3")
    time.sleep(1.0)
    pids = {f"cal-rf3/{'leader' if i == 0 else f'follower{i}'}": _actor_pid(h) for i, h in enumerate(handles)}
    window = proc_cpu.idle_window(pids, settings.idle_window_s, settings.idle_slices)
    cluster.admin.delete_topic("cal-rf3")
    return window


def measure(settings: CalibrationSettings, loads: _LoadRecord | None = None) -> dict:
    """Start a cluster, take every raw figure, stop the cluster (always)."""
    from mafka4.runtime.temporary import temporary_cluster

    with temporary_cluster(ClusterConfig(write_nodes=WRITE_NODES, read_nodes=1), home_prefix="m4cal-") as cluster:
        return _measure_on(cluster.connection, settings, loads or _LoadRecord())


def _measure_on(connection, settings: CalibrationSettings, loads: _LoadRecord) -> dict:
    from mafka4.client.admin import Admin

    cluster = _Cluster(connection, Admin(connection), settings)
    idle, density, memory, rates = _measure_idle(cluster, loads)
    costs = _measure_costs(cluster, rates, loads)
    loads.mark("latency")
    latency = _measure_latency(cluster)
    loads.mark("wakeups")
    idle["rf3"] = _measure_wakeups(cluster)
    return {"format": CALIBRATION_FORMAT, **costs, "idle": idle, "density": density, "memory": memory,
            "latency": latency}


def make_document(raw: dict, settings: CalibrationSettings, machine: dict, command: str, elapsed_s: float) -> dict:
    """The calibration document of a run: its raw figures, what ``fit`` derives from them, and where,
    when and how quietly they were taken (``machine``: cpu_count, load averages; ``quiet`` is added)."""
    derivation = derive_params(raw)
    machine = {**machine, "quiet": is_quiet(background_loads_1m(machine), machine["cpu_count"]),
               "quiet_rule": f"every 1-minute load average read before the run and in its idle windows "
                             f"<= {QUIET_LOAD_PER_CORE_MAX:g} per core (its own trials load the cores)"}
    return {
        "command": command,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": machine,
        "cluster": {"write_nodes": WRITE_NODES, "read_nodes": 1},
        "settings": asdict(settings),
        "elapsed_s": round(elapsed_s, 1),
        "raw": raw,
        "derived": derivation.params.to_json(),
        "measurement_error": derivation.measurement_error,
        "notes": list(derivation.notes),
    }


def run_calibration(output_path: str | Path, settings: CalibrationSettings = CalibrationSettings(),
                    command: str | None = None) -> dict:
    """Measure, derive and write ``calibration.json``; returns the document written."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    loads = _LoadRecord()
    raw = measure(settings, loads)
    machine = {"cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
               "load_average_after": [round(x, 2) for x in os.getloadavg()], "load_average_1m_samples": loads.samples}
    path = Path(output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        document = make_document(raw, settings, machine, command or " ".join(sys.argv), time.perf_counter() - started)
    except Exception:
        # Minutes of measurement are not thrown away with a fit that failed: keep the raw figures.
        path.with_suffix(".raw.json").write_text(json.dumps({"machine": machine, "raw": raw}, indent=2) + "\n")
        raise
    path.write_text(json.dumps(document, indent=2) + "\n")
    return document
