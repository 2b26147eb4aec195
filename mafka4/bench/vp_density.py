"""``mafka4 bench vp-density``: what one idle virtual partition costs its read nodes, next to one bare actor.

On the running cluster (two read nodes: ``mafka4 up --read-nodes 2``), in one run:

1. **baseline**: RSS and CPU of every read node process (``bench.process_usage``: ``VmRSS`` and
   the ``schedstat`` of every thread; the pid from ``ReadNode.describe``) and of one bare idle
   Ray actor (``bare.IdleActor``, on the first read node by its node resource) over
   ``window_s``, with nothing of the new topic hosted;
2. **creation**: ``topics`` mafka4-mode topics, one after the other, each of
   ``virtual_partitions`` VPs with ``read_replicas`` each (``partitions`` physical partitions of
   RF ``replication_factor``), timed until the last ``create_topic`` returns (``create_topic_s``),
   until the RISR of every VP in etcd holds all its replicas (``risr_complete_s``; with one
   replica that is so from creation on) and until the read nodes host every replica
   (``hosted_s``, from ``ReadNode.describe``: the creation time of the VPs);
3. **idle**: after ``settle_s``, the same processes over ``window_s`` again; nothing is produced;
4. the figures of ``bench.density``: RSS and idle cores per VP and per VP replica, the bare
   actor's RSS, USS (its pages no other process shares) and idle cores in the idle window, and
   the ratios "one bare actor / one idle VP".

The actor is killed and the topics deleted at the end. Each window records the load average at
its start and end and ``quiet`` (``bench.usage``); the summary is ``quiet`` only when both were.
The report goes to ``results/bench_vp_density.json``. The machine is small and shared: compare
the figures of one run with each other, not with another run's.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import psutil
import ray

from mafka4.bench.bare import IdleActor
from mafka4.bench.density import (NodeUsage, VpDensityBenchSettings, bare_actor_ratios, hosting_complete, per_vp_costs,
                                   risr_complete)
from mafka4.bench.process_usage import measure_window
from mafka4.bench.read_nodes import running_read_nodes
from mafka4.client.admin import Admin
from mafka4.limits import ReadMode
from mafka4.runtime.connect import Connection, connect
from mafka4.runtime.ray_cluster import node_resource
from mafka4.virtual.vp_store import VirtualStore

BARE_ACTOR = "bare_actor"
POLL_INTERVAL_S = 0.2
CALL_TIMEOUT_S = 60


def _describe(nodes: dict[str, object], topics: list[str]) -> dict[str, dict]:
    """Per read node: its pid, every VP replica it hosts, and how many of them are ``topics``'."""
    described = {topic: ray.get([handle.describe.remote(topic) for handle in nodes.values()], timeout=CALL_TIMEOUT_S)
                 for topic in topics}
    return {node: {"pid": described[topics[0]][index]["pid"], "hosted_vps": described[topics[0]][index]["hosted_vps"],
                   "topic_vps": sum(len(described[topic][index]["vps"]) for topic in topics)}
            for index, node in enumerate(nodes)}


def _create_timed(connection: Connection, admin: Admin, handles: dict[str, object], topics: list[str],
                  settings: VpDensityBenchSettings, created: list[str]) -> dict:
    """Create ``topics`` one after the other (each name added to ``created`` once asked for), then
    wait until every VP's RISR is complete and the read nodes (``handles``) host every replica;
    the times from the start."""
    virtual = VirtualStore(connection.store, connection.cluster)
    started = time.monotonic()
    for topic in topics:
        created.append(topic)
        admin.create_topic(topic, partitions=settings.partitions, replication_factor=settings.replication_factor,
                           virtual_partitions=settings.virtual_partitions, read_replicas=settings.read_replicas,
                           read_mode=ReadMode.MAFKA4)
    all_created = time.monotonic()
    within_s = settings.ready_s_max * len(topics)
    _wait_each(topics, lambda topic: risr_complete((state for state, _ in virtual.states(topic).values()),
                                                   settings.virtual_partitions, settings.read_replicas),
               "the RISR of some VP", started, within_s)
    risr_completed = time.monotonic()

    def hosted(topic: str) -> bool:  # one topic a call: a node describes each VP it hosts of the topics asked for
        described = _describe(handles, [topic])
        return hosting_complete({node: d["topic_vps"] for node, d in described.items()},
                                settings.virtual_partitions, settings.read_replicas)

    _wait_each(topics, hosted, "some VP replica hosted on its read node", started, within_s)
    return {"create_topic_s": round(all_created - started, 3), "risr_complete_s": round(risr_completed - started, 3),
            "hosted_s": round(time.monotonic() - started, 3)}


def _wait_each(topics: list[str], done: Callable[[str], bool], what: str, started: float, within_s: float) -> None:
    """Wait, topic after topic, until ``done(topic)``; TimeoutError ``within_s`` after ``started`` (monotonic)."""
    for topic in topics:
        while not done(topic):
            if time.monotonic() - started > within_s:
                raise TimeoutError(f"bench vp-density: {what} of {topic} was not complete within {within_s:g} s; "
                                   f"see <home>/controller.log")
            time.sleep(POLL_INTERVAL_S)


def _usage(name: str, pid: int, baseline: dict, idle: dict) -> dict:
    before, after = baseline["processes"][name], idle["processes"][name]
    return {"pid": pid, "rss_bytes_before": before["rss_bytes"], "rss_bytes_after": after["rss_bytes"],
            "cores_before": before["cores"], "cores_after": after["cores"]}


def _summary(settings: VpDensityBenchSettings, nodes: dict[str, dict], bare: dict, creation: dict,
             quiet: bool) -> dict:
    costs = per_vp_costs([NodeUsage(n["rss_bytes_before"], n["rss_bytes_after"], n["cores_before"], n["cores_after"])
                          for n in nodes.values()], settings.virtual_partitions * settings.topics,
                         settings.read_replicas)
    return {**costs, "bare_actor_rss_bytes": bare["rss_bytes_after"], "bare_actor_uss_bytes": bare["uss_bytes"],
            "bare_actor_idle_cores": bare["cores_after"],
            **bare_actor_ratios(bare["rss_bytes_after"], bare["uss_bytes"], bare["cores_after"], costs),
            **creation, "quiet": quiet}


def run_vp_density_bench(settings: VpDensityBenchSettings, output_path: str) -> dict:
    connection = connect()
    admin = Admin(connection)
    load_start = os.getloadavg()[0]
    handles = running_read_nodes(connection, settings.read_replicas, "vp-density")
    name = f"bench-density-{secrets.token_hex(3)}"
    topics = [name] if settings.topics == 1 else [f"{name}-{index}" for index in range(settings.topics)]
    created: list[str] = []
    described_before = _describe(handles, topics[:1])
    first_node = next(iter(handles))
    bare = IdleActor.options(num_cpus=0, resources={node_resource(first_node): 1}).remote()
    try:
        pids = {node: d["pid"] for node, d in described_before.items()}
        pids[BARE_ACTOR] = ray.get(bare.pid.remote(), timeout=CALL_TIMEOUT_S)
        baseline = measure_window(pids, settings.window_s)
        creation = _create_timed(connection, admin, handles, topics, settings, created)
        time.sleep(settings.settle_s)
        idle = measure_window(pids, settings.window_s)
        bare_uss_bytes = psutil.Process(pids[BARE_ACTOR]).memory_full_info().uss
        described_after = _describe(handles, topics)
    finally:
        ray.kill(bare)
        listed = set(admin.list_topics())
        for topic in created:
            if topic in listed:
                admin.delete_topic(topic)
    nodes = {node: {**_usage(node, pids[node], baseline, idle),
                    "hosted_vps_before": described_before[node]["hosted_vps"],
                    "hosted_vps_after": described_after[node]["hosted_vps"],
                    "topic_vps_hosted": described_after[node]["topic_vps"]} for node in handles}
    bare_usage = {**_usage(BARE_ACTOR, pids[BARE_ACTOR], baseline, idle), "node": first_node,
                  "uss_bytes": bare_uss_bytes}
    report = {
        "settings": asdict(settings), "topics": topics, "read_nodes": list(handles), "creation": creation,
        "nodes": nodes, "bare_actor": bare_usage, "windows": {"baseline": baseline, "idle": idle},
        "summary": _summary(settings, nodes, bare_usage, creation, baseline["quiet"] and idle["quiet"]),
        "cpu_count": os.cpu_count(), "load_average_1m": [round(load_start, 2), round(os.getloadavg()[0], 2)],
    }
    Path(output_path).parent.mkdir(parents=True, exist_ok=True)
    Path(output_path).write_text(json.dumps(report, indent=2))
    return report
