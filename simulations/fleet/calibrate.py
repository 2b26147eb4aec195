"""``fleet calibrate``: measure the runtime's costs on a throwaway local cluster; write calibration.json.

One throwaway cluster (3 write nodes, 1 read node; ``runtime.temporary``), stopped at the end. With the
benchmark machinery of ``mafka4.bench.produce`` (``encoded_batches``/``raw_run`` send the
producer's batches straight to a leader; ``producer_run`` paces the public Producer):

1. **topics**: ``cal-rf1`` (P=1, RF=1), ``cal-rf2`` (P=1, RF=2), ``cal-vp`` (P=1, RF=1, mafka4
   mode, 4 VPs, RR=1). RF=2, not 3: two followers of one partition wake each other's long poll
   (step 7), which would swamp every CPU figure on a 2-core machine.
2. **idle**: CPU of every actor over ``idle_window_s`` without traffic; unique memory (USS).
3. **produce**: three runs (1 KiB messages one per batch; 1 KiB in full 1 MiB batches; 16 KiB
   in full batches) to cal-rf1, then to cal-rf2: CPU of the leader and of the follower.
4. **read**: the cal-rf2 leader serves those runs back (one batch per fetch for the first).
5. **feed**: single-message batches, then full batches, to cal-vp: CPU of the read node (its feed
   stream splits and appends in process) until every message is in a VP, and the stream's rounds.
6. **latency**: ack -> first waiting reader has the message (physical leader; VPs); paced
   Producer latency on cal-rf2 (acks=all, default linger) without and with
   ``extra_partitions_per_node`` idle RF=1 partitions per write node, ``pass_trials`` times
   (RF=1 so their idle CPU stays small and the figure is the cost of hosting actors, not of a
   saturated machine).
7. **wakeups**: an RF=3 partition is created last and its replicas' idle CPU measured.

CPU is process CPU time (user + system) of the actor processes, net of each one's idle rate,
so a busy machine slows the runs but changes the figures little. ``fit.derive_params`` turns
the raw figures into ``CalibrationParams``.

VPs are logs inside the read node's process, not processes: a VP replica's idle CPU and memory
are the read node's growth when it hosts cal-vp's VPs, per VP (measured before and after the
topic is created); there is no feeder process (its idle figures are 0), and the feeding CPU
is the read node's.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import psutil

from mafka4.bench.produce import ProduceBenchSettings, encoded_batches, producer_run, raw_run
from mafka4.limits import Acks, ClusterConfig, ReadMode
from simulations.fleet.fit import derive_params
from simulations.schema import git_commit

MiB = 1024 * 1024
WRITE_NODES = 3
READ_NODE = "r0"
FEED_WAIT_S_MAX = 120.0
POLL_S = 0.05
SETTLE_S = 0.3  # after a run: the follower's last fetch (which advances its HW) lands in the window


@dataclass(frozen=True, slots=True)
class CalibrationSettings:
    small_messages: int = 1000  # 1 KiB, one per batch: per-request costs
    large_messages: int = 20_000  # 1 KiB in full batches: per-message costs
    big_messages: int = 1500  # big_message_bytes in full batches: per-byte costs
    big_message_bytes: int = 16 * 1024
    virtual_partitions: int = 4
    feed_small_messages: int = 500
    feed_large_messages: int = 15_000
    idle_window_s: float = 4.0
    extra_partitions_per_node: int = 6  # idle RF=1 partitions added for the latency-per-replica figure
    paced_msgs_per_s: int = 200
    paced_seconds: int = 4
    pass_trials: int = 2  # alternations of paced runs without / with the extra idle partitions
    wake_trials: int = 10


def _cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _uss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_full_info().uss / MiB


def _actor_pid(handle) -> int:
    """The PID of an actor's process (Ray's ``__ray_call__`` runs a function on the actor)."""
    import ray

    return ray.get(handle.__ray_call__.remote(lambda _actor: os.getpid()))


def _idle_rates(pids: list[int], window_s: float) -> dict[int, float]:
    """Cores each process uses over ``window_s`` of no traffic."""
    before = {pid: _cpu_s(pid) for pid in pids}
    time.sleep(window_s)
    return {pid: (_cpu_s(pid) - before[pid]) / window_s for pid in pids}


def _metered(pids: list[int], idle_cores: dict[int, float], action) -> tuple[object, list[float], float]:
    """Run ``action``; CPU seconds of each process over it, net of its idle rate, and the elapsed seconds."""
    before, started = [_cpu_s(p) for p in pids], time.perf_counter()
    result = action()
    elapsed = time.perf_counter() - started
    used = [max(_cpu_s(p) - b - idle_cores.get(p, 0.0) * elapsed, 0.0) for p, b in zip(pids, before)]
    return result, used, elapsed


class _Cluster:
    """The calibration topics' actors: handles and PIDs."""

    def __init__(self, connection, admin, settings: CalibrationSettings):
        from mafka4.coordinator.metadata.vp_store import VirtualStore
        from mafka4.virtual.handles import read_node_handle
        from mafka4.virtual.hosted_vp import VpId

        self.connection, self.admin, self.settings = connection, admin, settings
        admin.create_topic("cal-rf1", partitions=1, replication_factor=1, read_mode=ReadMode.MAFKA3)
        admin.create_topic("cal-rf2", partitions=1, replication_factor=2, read_mode=ReadMode.MAFKA3)
        self.read_node = read_node_handle(admin.cluster, READ_NODE)
        read_node_pid = _actor_pid(self.read_node)
        time.sleep(1.0)
        self.read_node_before = (_idle_rates([read_node_pid], settings.idle_window_s)[read_node_pid], _uss_mb(read_node_pid))
        admin.create_topic("cal-vp", partitions=1, replication_factor=1, read_mode=ReadMode.MAFKA4,
                           virtual_partitions=settings.virtual_partitions, read_replicas=1)
        self.replicas = {topic: self.partition_replicas(topic) for topic in ("cal-rf1", "cal-rf2", "cal-vp")}
        states = VirtualStore(connection.store, admin.cluster).states("cal-vp")
        self.vps = [VpId("cal-vp", vp) for vp in sorted(states)]
        self.pid = {h: _actor_pid(h) for h in [*sum(self.replicas.values(), []), self.read_node]}

    def partition_replicas(self, topic: str) -> list:
        """Replica handles of partition 0 of ``topic``, leader first."""
        from mafka4.physical.handles import replica_handle

        state = self.admin.topic_metadata(topic).partitions[0]
        ordered = [state.leader, *(r for r in state.replicas if r != state.leader)]
        return [replica_handle(self.admin.cluster, topic, 0, r) for r in ordered]

    def pids(self, handles) -> list[int]:
        return [self.pid[h] for h in handles]


def _measure_idle(cluster: _Cluster, window_s: float) -> tuple[dict, dict, dict[int, float]]:
    groups = {"unreplicated_leader": cluster.pids([cluster.replicas["cal-rf1"][0], cluster.replicas["cal-vp"][0]]),
              "replicated_leader": cluster.pids(cluster.replicas["cal-rf2"][:1]),
              "follower": cluster.pids(cluster.replicas["cal-rf2"][1:]), "read_node": cluster.pids([cluster.read_node])}
    rates = _idle_rates(sum(groups.values(), []), window_s)
    idle = {f"{name}_cores": [round(rates[p], 5) for p in pids] for name, pids in groups.items()}
    memory = {f"{name}_uss_mb": [round(_uss_mb(p), 1) for p in pids] for name, pids in groups.items()}
    # A VP replica costs what hosting it adds to the read node; no feeder process exists.
    vps = len(cluster.vps)
    idle_before, uss_before = cluster.read_node_before
    idle["vp_replica_cores"] = [round(max(idle["read_node_cores"][0] - idle_before, 0.0) / vps, 6)]
    idle["feeder_cores"] = [0.0]
    memory["vp_replica_uss_mb"] = [round(max(memory["read_node_uss_mb"][0] - uss_before, 0.0) / vps, 3)]
    memory["feeder_uss_mb"] = [0.0]
    memory["replica_rss_mb"] = [round(psutil.Process(p).memory_info().rss / MiB, 1)
                                for p in cluster.pids(sum(cluster.replicas.values(), []))]
    return idle, memory, rates


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
            report = raw_run(handles[:1], batches, bench)
            time.sleep(SETTLE_S)
            return report

        report, used, elapsed = _metered(cluster.pids(handles), idle, send)
        runs.append({"name": name, "requests": len(batches[0]), "messages": bench.messages,
                     "bytes": bench.messages * bench.message_bytes, "elapsed_s": round(elapsed, 3),
                     "msgs_per_s": report["msgs_per_s"], "leader_cpu_s": round(used[0], 5),
                     "followers_cpu_s": round(sum(used[1:]), 5)})
    return runs


def _next_offset(data: bytes, position: int) -> int:
    from mafka4.records import iter_batches

    for _, header in iter_batches(data, check_crc=False):
        position = header.next_offset
    return position


def _measure_read(cluster: _Cluster, idle: dict[int, float], produce_runs: list[dict]) -> list[dict]:
    import ray

    leader = cluster.replicas["cal-rf2"][0]
    runs, offset = [], 0
    for run in produce_runs:
        end = offset + run["messages"]
        bytes_max = 1 if run["name"] == "small" else 4 * MiB  # a fetch returns at least one whole batch

        def read_all(start=offset, stop=end, limit=bytes_max):
            position, fetches = start, 0
            while position < stop:
                position = _next_offset(ray.get(leader.fetch.remote(position, limit, 0)).data, position)
                fetches += 1
            return fetches

        fetches, used, elapsed = _metered(cluster.pids([leader]), idle, read_all)
        runs.append({"name": run["name"], "requests": fetches, "messages": run["messages"], "bytes": run["bytes"],
                     "elapsed_s": round(elapsed, 3), "leader_cpu_s": round(used[0], 5)})
        offset = end
    return runs


def _vp_total(cluster: _Cluster) -> int:
    import ray

    return sum(d["log_end_offset"] for d in ray.get(cluster.read_node.describe_vps.remote(cluster.vps)))


def _feed_rounds(cluster: _Cluster) -> int:
    import ray

    return ray.get(cluster.read_node.describe.remote("cal-vp"))["feeds"]["cal-vp"][0]["rounds"]


def _measure_feed(cluster: _Cluster, idle: dict[int, float]) -> dict:
    base = ProduceBenchSettings(partitions=1, in_flight_batches_max=5, acks="all", message_bytes=1024)
    runs = []
    for name, bench in (("small", replace(base, messages=cluster.settings.feed_small_messages, batch_bytes_max=1024)),
                        ("large", replace(base, messages=cluster.settings.feed_large_messages, batch_bytes_max=MiB))):
        target = _vp_total(cluster) + bench.messages
        rounds_before = _feed_rounds(cluster)

        def produce_and_wait():
            raw_run(cluster.replicas["cal-vp"][:1], encoded_batches(bench), bench)
            deadline = time.monotonic() + FEED_WAIT_S_MAX
            while _vp_total(cluster) < target:
                assert time.monotonic() < deadline, f"the VPs of cal-vp did not receive {bench.messages} messages in time"
                time.sleep(POLL_S)

        _, used, elapsed = _metered(cluster.pids([cluster.read_node]), idle, produce_and_wait)
        # The read node's feed stream splits and appends in one process: its CPU is the feeding's.
        runs.append({"name": name, "messages": bench.messages, "bytes": bench.messages * bench.message_bytes,
                     "rounds": _feed_rounds(cluster) - rounds_before, "elapsed_s": round(elapsed, 3),
                     "feeder_cpu_s": round(used[0], 5), "vps_cpu_s": 0.0})
    return {"virtual_partitions": cluster.settings.virtual_partitions, "runs": runs}


async def _poll_until_data(fetch, offset: int) -> float:
    """Long-poll like a consumer (``fetch(offset)`` -> bytes) until a fetch returns data; the time it did."""
    while True:
        if await fetch(offset):
            return time.perf_counter()


def _physical_fetch(handle):
    async def fetch(offset: int) -> bytes:
        return (await asyncio.wrap_future(handle.fetch.remote(offset, MiB, 3000).future())).data
    return fetch


def _vp_fetch(node, vp_id):
    from mafka4.virtual.read_node import ConsumerRead

    async def fetch(offset: int) -> bytes:
        answers = await asyncio.wrap_future(node.fetch.remote([ConsumerRead(vp_id, offset)], MiB, 3000).future())
        return answers[0].read.data
    return fetch


async def _wake_trial(produce_handle, fetch_targets: list, batch: bytes) -> float:
    """ms from the produce acknowledgement until the first polling reader has the message."""
    readers = [asyncio.ensure_future(_poll_until_data(f, o)) for f, o in fetch_targets]
    await asyncio.sleep(0.1)  # every reader is parked in its long poll
    await asyncio.wrap_future(produce_handle.produce.remote(batch, Acks.ALL, 10_000).future())
    acked = time.perf_counter()
    done, pending = await asyncio.wait(readers, timeout=10.0, return_when=asyncio.FIRST_COMPLETED)
    for reader in pending:
        reader.cancel()  # its remote fetch still ends by itself within its wait
    assert done, "no reader received the produced message within 10 s"
    return (min(reader.result() for reader in done) - acked) * 1000


def _wake_latencies(cluster: _Cluster, topic: str, readers: list) -> list[float]:
    """``readers``: (fetch function, function giving the reader's current end offset)."""
    from mafka4.client.sender import new_producer_id
    from mafka4.records import encode_batch

    delays = []
    for _ in range(cluster.settings.wake_trials):
        targets = [(fetch, end()) for fetch, end in readers]
        batch = encode_batch([(None, os.urandom(1024), time.time_ns() // 1_000_000, None)], new_producer_id(), 0)
        delays.append(round(max(asyncio.run(_wake_trial(cluster.replicas[topic][0], targets, batch)), 0.0), 3))
    return delays


def _physical_readers(handles: list) -> list:
    import ray

    return [(_physical_fetch(h), lambda h=h: ray.get(h.list_offsets.remote())[1]) for h in handles]


def _vp_readers(cluster: _Cluster) -> list:
    import ray

    node = cluster.read_node
    return [(_vp_fetch(node, vp_id), lambda vp_id=vp_id: ray.get(node.list_offsets.remote([vp_id]))[0][1])
            for vp_id in cluster.vps]


def _paced_latency(cluster: _Cluster) -> dict:
    bench = ProduceBenchSettings(partitions=1, message_bytes=1024, paced_seconds=cluster.settings.paced_seconds)
    return producer_run(cluster.connection, "cal-rf2", bench, cluster.settings.paced_msgs_per_s)["latency_ms"]


def _measure_latency(cluster: _Cluster) -> dict:
    """Wake latencies, then paced produce latency without and with extra idle actors, alternated
    ``pass_trials`` times so the difference can be told from the machine's noise."""
    physical = _wake_latencies(cluster, "cal-rf2", _physical_readers(cluster.replicas["cal-rf2"][:1]))
    virtual = _wake_latencies(cluster, "cal-vp", _vp_readers(cluster))
    extra = cluster.settings.extra_partitions_per_node
    base, loaded = [], []
    for trial in range(cluster.settings.pass_trials):
        base.append(_paced_latency(cluster))
        cluster.admin.create_topic(f"cal-idle-{trial}", partitions=extra * WRITE_NODES, replication_factor=1, read_mode=ReadMode.MAFKA3)
        time.sleep(2.0)  # the new replicas settle into their idle loops
        loaded.append(_paced_latency(cluster))
        cluster.admin.delete_topic(f"cal-idle-{trial}")
    return {"physical_read_ms": physical, "virtual_read_ms": virtual,
            "physical_read_p50_ms": float(np.median(physical)), "virtual_read_p50_ms": float(np.median(virtual)),
            "base_latency_ms": base, "loaded_latency_ms": loaded, "base_p50_ms": [b["p50"] for b in base],
            "loaded_p50_ms": [b["p50"] for b in loaded], "extra_replicas_per_node": extra}


def _measure_wakeups(cluster: _Cluster, window_s: float) -> dict:
    """Idle CPU of an RF=3 partition's replicas, whose two followers wake each other."""
    cluster.admin.create_topic("cal-rf3", partitions=1, replication_factor=3, read_mode=ReadMode.MAFKA3)
    handles = cluster.partition_replicas("cal-rf3")
    time.sleep(1.0)
    rates = _idle_rates([_actor_pid(h) for h in handles], window_s)
    cluster.admin.delete_topic("cal-rf3")
    return {"rf3_replica_cores": [round(rate, 5) for rate in rates.values()]}


def measure(settings: CalibrationSettings) -> dict:
    """Start a cluster, take every raw figure, stop the cluster (always)."""
    from mafka4.runtime.temporary import temporary_cluster

    with temporary_cluster(ClusterConfig(write_nodes=WRITE_NODES, read_nodes=1), home_prefix="m4cal-") as cluster:
        return _measure_on(cluster.connection, settings)


def _measure_on(connection, settings: CalibrationSettings) -> dict:
    from mafka4.client.admin import Admin

    cluster = _Cluster(connection, Admin(connection), settings)
    idle, memory, rates = _measure_idle(cluster, settings.idle_window_s)
    rf1 = _measure_produce(cluster, rates, "cal-rf1")
    replicated = _measure_produce(cluster, rates, "cal-rf2")
    read = _measure_read(cluster, rates, replicated)
    feed = _measure_feed(cluster, rates)
    latency = _measure_latency(cluster)
    idle["wakeups"] = _measure_wakeups(cluster, settings.idle_window_s)
    return {"produce": {"replication_factor": 2, "rf1": rf1, "replicated": replicated}, "read": {"runs": read},
            "feed": feed, "idle": idle, "memory": memory, "latency": latency}


def run_calibration(output_path: str | Path, settings: CalibrationSettings = CalibrationSettings(),
                    command: str | None = None) -> dict:
    """Measure, derive and write ``calibration.json``; returns the document written."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    raw = measure(settings)
    params, notes = derive_params(raw)
    document = {
        "command": command or " ".join(sys.argv),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "machine": {"cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "settings": asdict(settings),
        "elapsed_s": round(time.perf_counter() - started, 1),
        "raw": raw,
        "derived": params.to_json(),
        "notes": notes,
    }
    path = Path(output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n")
    return document
