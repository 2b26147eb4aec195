"""``mafka4 bench read-scale``: a read node added by Ray's autoscaler under a consuming group, timed (issue 38).

Each run starts Ray's fake multi-node cluster of ``cluster_yaml`` (``runtime.fake_ray_cluster``:
Ray's real autoscaler, each node a raylet of this machine), deploys mafka4 on it with
``mafka4 deploy`` as the yaml's head does, and then, on a fresh mafka4-mode topic of 2 VPs:

1. a producer (a thread of this process, paced at ``rate_msgs_per_s``, one callback per message
   stamping its acknowledgement) writes through the read nodes' client ports for the whole run;
2. ``consumers_at_start`` members (each a process of its own, ``bench.join_member``) join and
   consume for ``warmup_s``;
3. the others join at once, up to ``consumers_at_most``; the group splits its VPs to one a member
   and consumes for ``settle_s``, so that the splits' own stalls are over before what is measured;
4. **the trigger**: the bench creates a second topic (``ballast_vps`` VPs of ``read_replicas``,
   no traffic; named to sort after the measured topic, so the planner, which moves by topic and
   VP id, moves the measured topic's replicas first). Its replicas take the read nodes' open VP
   replicas over ``read_node_vp_replicas_max`` each, and the controller asks for a read node;
5. for ``window_s`` a sampler thread watches etcd and Ray for the steps of a scale-up
   (``read_scale_figures.SCALE_UP_STEPS``, ``SERVING_STEPS``): the controller's add decision, the
   node Ray's autoscaler launches, its registration, the replica moves onto it, its first RISR
   membership, and its first VP lead and first records served to a consumer
   (``ReadNode.describe``'s ``first_records_served_ms``), which need a leader to move there;
6. the producer stops, the members consume the rest (at most ``drain_s_max``), and mafka4 is
   undeployed and the fake cluster stopped.

Runs come in pairs, alternated: **scaling** (``read_node_scaling=1``, ``read_nodes_max`` the read
nodes up at the start plus one, ``read_node_vp_replicas_max`` small enough that the group needs
it after the trigger: ``ReadScaleBenchSettings.vp_replicas_bound``) then **fixed** (the same cluster, deploy, group and trigger, scaling
off). A fake node is a
raylet and its workers starting on this machine's two cores, a cost a cloud node brings its own
CPUs for; so that it does not pass for the moves' cost, the fixed run asks Ray's autoscaler for
the same extra read node itself, as many ms after its trigger as the scaling run's controller
decided (its node agent registers it, and with scaling off nothing moves onto it). The summary
sets the scaling run's move window beside the same stretch of its fixed run: the producer's
acknowledgement latency and the members' longest gaps between non-empty polls
(``read_scale_figures``). Before each run the bench waits for the load average to fall
(``quiet_wait_s_max``) and records it; a run's load at its end is recorded too (a fake fleet,
a producer and the members load the 2 cores by design).

Everything a run records is in the report (``results/bench_read_scale.json``): the settings,
the controller's scaling decisions as the sampler saw them, the steps, every member's gaps, and
how many messages were produced, consumed and missing; the stamps the figures came from (every
message's send and acknowledgement, every member's polls) in ``recorded_path`` beside it.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import secrets
import subprocess
import threading
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.read_scale_figures import (Trigger, ack_latencies_ms, member_gaps_ms, move_window_ms, pair_summary,
                                           steps_after_trigger_ms, steps_between_ms)
from benchmarks.read_scale_settings import ReadScaleBenchSettings
from mafka4.bench.process_usage import wait_until_quiet
from mafka4.bench.usage import is_quiet

MODES = ("scaling", "fixed")


def run_read_scale_bench(settings: ReadScaleBenchSettings, output_path: str) -> dict:
    yaml_path = Path(settings.cluster_yaml)
    if not yaml_path.is_file():
        raise FileNotFoundError(f"no cluster config at {yaml_path}: run from a checkout of mafka4, or pass "
                                f"--cluster-yaml PATH")
    runs: list[dict] = []
    report: dict = {}
    for pair in range(settings.pairs):  # the report is written after every run: a run that fails keeps the others
        scaling = _run(settings, yaml_path, "scaling", pair, boot_after_ms=None)
        runs.append(scaling)
        _write(output_path, settings, runs)
        # The fixed run boots a read node at the offset the scaling run decided to add one (none if it
        # did not): both runs then pay for a node starting on this machine, and only the moves differ.
        runs.append(_run(settings, yaml_path, "fixed", pair, boot_after_ms=scaling["steps_ms"]["decided"]))
        report = _write(output_path, settings, runs)
    return report


def _write(output_path: str, settings: ReadScaleBenchSettings, runs: list[dict]) -> dict:
    pairs = []
    for pair in range(settings.pairs):
        by_mode = {run["mode"]: run for run in runs if run["pair"] == pair}
        if set(by_mode) == set(MODES):
            fixed = _in_window(by_mode["fixed"], by_mode["scaling"]["move_window_ms"])
            pairs.append(pair_summary(by_mode["scaling"], fixed))
    report = {"bench": "read-scale", "settings": asdict(settings), "commit": _commit(),
              "summary": {"pairs": pairs, "quiet_before_every_run": is_quiet([run["load_before"] for run in runs])},
              "runs": runs}
    path = Path(output_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Every message's and poll's stamps go apart (megabytes): the report keeps the figures.
    with gzip.open(recorded_path(output_path), "wt") as recorded:
        json.dump([{"mode": run["mode"], "pair": run["pair"], **run["recorded"]} for run in runs], recorded)
    report["runs"] = [{name: value for name, value in run.items() if name != "recorded"} for run in runs]
    report["recorded"] = str(recorded_path(output_path))
    path.write_text(json.dumps(report, indent=1))
    return report


def recorded_path(output_path: str) -> Path:
    """Where the runs' stamps (sends, acknowledgements, polls) are written, beside the report."""
    path = Path(output_path)
    return path.with_name(f"{path.stem}_recorded.json.gz")


def _in_window(run: dict, window: tuple[int, int] | None) -> dict:
    """``run`` with its figures over ``window`` (its pair's move window) computed from what it recorded."""
    if window is None:
        return run | {"in_move_window": None}
    recorded = run["recorded"]
    trigger = Trigger(**recorded["trigger"])
    return run | {"in_move_window": {
        "produce_ms": ack_latencies_ms(recorded["sent_ns"], recorded["acked_ns"], trigger, window),
        "member_gaps_ms": member_gaps_ms(recorded["receive_ns"], trigger, window)}}


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _run(settings: ReadScaleBenchSettings, yaml_path: Path, mode: str, pair: int, boot_after_ms: int | None) -> dict:
    from mafka4.exported_variables import exported_variable
    from mafka4.runtime.environment import HOME_ENV
    from mafka4.runtime.fake_ray_cluster import fake_ray_cluster
    from mafka4.runtime.temporary import temporary_home

    load_before = wait_until_quiet(settings.quiet_wait_s_max)
    started = time.monotonic()
    with temporary_home(prefix="m4rs-") as home, exported_variable(HOME_ENV, str(home)), \
            fake_ray_cluster(yaml_path) as fake:
        initial = _alive_read_nodes()
        cluster = f"rs-{secrets.token_hex(3)}"
        controller_settings = _controller_settings(settings, mode, len(initial))
        status, deploy_output = _deploy(fake.address, cluster, home / "data", controller_settings)
        try:
            measured = _measure(settings, cluster, home, status, initial, boot_after_ms)
        finally:
            with contextlib.redirect_stdout(io.StringIO()):
                from mafka4 import cli
                cli.main(["undeploy", "--address", fake.address, "--cluster", cluster])
    run = {"mode": mode, "pair": pair, "load_before": round(load_before, 2), "read_nodes_at_start": len(initial),
           "controller_settings": controller_settings, "deploy_output": deploy_output, **measured,
           "run_s": round(time.monotonic() - started, 1)}
    trigger = Trigger(**run["recorded"]["trigger"])
    run["steps_ms"] = steps_after_trigger_ms(run["events_wall_ms"], trigger)
    run["steps_between_ms"] = steps_between_ms(run["steps_ms"])
    run["move_window_ms"] = move_window_ms(run["steps_ms"]) if mode == "scaling" else None
    return _in_window(run, run["move_window_ms"]) if mode == "scaling" else run


def _controller_settings(settings: ReadScaleBenchSettings, mode: str, read_nodes: int) -> dict[str, int]:
    return {"read_node_scaling": int(mode == "scaling"), "upkeep_interval_ms": settings.upkeep_interval_ms,
            "read_node_vp_replicas_max": settings.vp_replicas_bound(read_nodes), "read_nodes_min": read_nodes,
            "read_nodes_max": read_nodes + 1, "read_node_idle_release_delay_ms": settings.idle_release_delay_ms}


def _deploy(address: str, cluster: str, data_dir: Path, controller_settings: dict[str, int]) -> tuple[dict, str]:
    """``mafka4 deploy`` then ``mafka4 status`` on the fake cluster, as the yaml's head runs deploy;
    (status, deploy's output). Raises with deploy's output and the controller's log if it failed."""
    from mafka4 import cli

    arguments = [argument for name, value in controller_settings.items()
                 for argument in ("--controller-setting", f"{name}={value}")]
    output = io.StringIO()
    with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
        code = cli.main(["deploy", "--address", address, "--cluster", cluster, "--data-dir", str(data_dir),
                         "--client-port", "0", *arguments])
    if code != 0:
        controller_log = data_dir / "controller.log"
        raise RuntimeError(f"mafka4 deploy failed ({code}):\n{output.getvalue()}\n"
                           f"{controller_log.read_text() if controller_log.exists() else '(no controller log)'}")
    status_output = io.StringIO()
    with contextlib.redirect_stdout(status_output):
        cli.main(["status", "--address", address, "--cluster", cluster])
    return json.loads(status_output.getvalue()), output.getvalue()


def _alive_read_nodes() -> set[str]:
    import ray

    from mafka4.transport.ray_names import READ_NODE_RESOURCE

    return {node["NodeID"] for node in ray.nodes() if node["Alive"] and node["Resources"].get(READ_NODE_RESOURCE, 0) > 0}


def _measure(settings: ReadScaleBenchSettings, cluster: str, home: Path, status: dict, initial: set[str],
             boot_after_ms: int | None) -> dict:
    from mafka4.bench.join_member import MemberSpec
    from mafka4.bench.join_trial import JoinMembers
    from mafka4.client.bootstrap import client_credential
    from mafka4.client.cluster_access import ClusterAccess
    from mafka4.client.producer import Producer
    from mafka4.client.topic_admin import create_topic
    from mafka4.metadata.endpoints import parse_endpoints

    access = ClusterAccess(parse_endpoints(",".join(status["serving_read_nodes"].values())), client_credential(home))
    topic, group = f"scale-{secrets.token_hex(3)}", f"scale-{secrets.token_hex(3)}"
    create_topic(topic, partitions=settings.physical_partitions, replication_factor=settings.replication_factor,
                 virtual_partitions=settings.consumers_at_start, read_replicas=settings.read_replicas,
                 read_mode="mafka4", where=access)
    names = [f"member-{index}" for index in range(settings.consumers_at_most)]
    sampler = _Sampler(status["etcd_endpoint"], cluster, topic, initial, settings)
    with JoinMembers(MemberSpec(access, topic, group), names) as members:
        producer = _PacedProducer(Producer(topic, connection=access, linger_ms=5), settings.rate_msgs_per_s)
        try:
            producer.start()
            for name in names[:settings.consumers_at_start]:
                members.join(name, wait=True)
            members.watch(settings.warmup_s)
            for name in names[settings.consumers_at_start:]:
                members.join(name, wait=False)
            members.watch(settings.settle_s)
            sampler.start()
            trigger = Trigger(time.monotonic_ns(), _wall_ms())
            create_topic(f"zz-ballast-{secrets.token_hex(3)}", partitions=settings.physical_partitions,
                         replication_factor=settings.replication_factor, virtual_partitions=settings.ballast_vps,
                         read_replicas=settings.read_replicas, read_mode="mafka4", where=access)
            watched_s = (time.monotonic_ns() - trigger.monotonic_ns) / 1e9
            if boot_after_ms is not None:
                members.watch(max(0.0, boot_after_ms / 1000 - watched_s))
                _boot_read_node(len(initial) + 1)
                watched_s = (time.monotonic_ns() - trigger.monotonic_ns) / 1e9
            members.watch(max(0.0, settings.window_s - watched_s))
            load_at_end = round(os.getloadavg()[0], 2)
        finally:
            producer.stop()
            sampler.stop()
        produced = producer.sent
        members.collect(lambda: len({value for log in members.logs for value in log.values}) >= produced,
                        settings.drain_s_max)
    consumed = {value for log in members.logs for value in log.values}
    return {"load_at_end": load_at_end, "produced": produced, "node_boot_requested_after_ms": boot_after_ms,
            "acknowledged": sum(acked is not None for acked in producer.acked_ns),
            "produce_errors": producer.errors[:5], "produce_error_count": len(producer.errors),
            "consumed_distinct": len(consumed),
            "missing": len({str(number).encode() for number in range(produced)} - consumed),
            "events_wall_ms": sampler.events, "decisions": sampler.decisions, "moves_seen": sampler.moves_seen,
            "moving_at_end": sampler.moving_at_end,
            "added_nodes": sorted(sampler.added), "added_node_describe": sampler.last_describe,
            "whole_window_produce_ms": ack_latencies_ms(producer.sent_ns, producer.acked_ns, trigger,
                                                        (0, settings.window_s * 1000)),
            "recorded": {"trigger": asdict(trigger), "sent_ns": producer.sent_ns, "acked_ns": producer.acked_ns,
                         "receive_ns": {log.name: log.receive_ns for log in members.logs}}}


def _boot_read_node(read_nodes: int) -> None:
    """Ask Ray's autoscaler for ``read_nodes`` read nodes, as the controller does when it adds one."""
    from ray.autoscaler.sdk import request_resources

    from mafka4.coordinator.control.read_node_scaling import read_node_bundles

    request_resources(bundles=read_node_bundles(read_nodes))


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class _PacedProducer:
    """A thread sending ``rate`` keyed messages a second (value and key the message's number) with
    one callback each, stamping its acknowledgement on the monotonic clock."""

    def __init__(self, producer, rate: int):
        self._producer, self._rate = producer, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="read-scale-producer", daemon=True)
        self.sent_ns: list[int] = []
        self.acked_ns: list[int | None] = []
        self.errors: list[str] = []

    @property
    def sent(self) -> int:
        return len(self.sent_ns)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._producer.close()

    def _loop(self) -> None:
        sent_ns, acked_ns = self.sent_ns, self.acked_ns
        start = time.monotonic()
        number = 0
        while not self._stop.is_set():
            due = int((time.monotonic() - start) * self._rate)
            while number < due:
                value = str(number).encode()
                acked_ns.append(None)
                sent_ns.append(time.monotonic_ns())
                # One function per message, its index and the bound method defaults: no closure cells.
                self._producer.send(value, key=value, callback=lambda metadata, error, index=number, done=self._done:
                                    done(index, error))
                number += 1
            time.sleep(0.005)
        self._producer.flush()

    def _done(self, index: int, error) -> None:
        if error is None:
            self.acked_ns[index] = time.monotonic_ns()
        else:
            self.errors.append(repr(error))


class _Sampler:
    """A thread that stamps (wall ms) the first sight of each scale-up step (``SCALE_UP_STEPS``)."""

    def __init__(self, etcd_endpoint: str, cluster: str, topic: str, initial_ray_nodes: set[str],
                 settings: ReadScaleBenchSettings):
        self._endpoint, self._cluster, self._topic = etcd_endpoint, cluster, topic
        self._initial = initial_ray_nodes
        self._interval_s, self._describe_interval_s = settings.sample_interval_s, settings.describe_interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="read-scale-sampler", daemon=True)
        self.events: dict[str, int | None] = {}
        self.decisions: list[dict] = []  # the controller's record each time its (kind, target) changed
        self.moves_seen = 0  # distinct move records seen
        self.added: set[str] = set()  # mafka4 ids of the read nodes registered after the start
        self.last_describe: dict | None = None
        self.moving_at_end = False  # a move was still recorded at the last sample: the window was too short
        self.error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise RuntimeError(f"the read-scale sampler failed: {self.error}")

    def _first(self, step: str, wall_ms: int | None = None) -> None:
        if self.events.get(step) is None:
            self.events[step] = _wall_ms() if wall_ms is None else wall_ms

    def _loop(self) -> None:
        try:
            self._sample()
        except Exception as error:  # reported by stop(): a bench without its sampler measures nothing
            self.error = f"{type(error).__name__}: {error}"

    def _sample(self) -> None:
        from mafka4.metadata.store import MetadataStore

        store = MetadataStore(self._endpoint)
        try:
            self._sample_from(store)
        finally:
            store.close()

    def _sample_from(self, store) -> None:
        import ray

        from mafka4.metadata import keys
        from mafka4.physical.topics import TopicStore
        from mafka4.transport.ray_names import READ_NODE_RESOURCE
        from mafka4.virtual.handles import read_node_handle
        from mafka4.virtual.vp_store import VirtualStore

        topics = TopicStore(store, self._cluster)
        virtual = VirtualStore(store, self._cluster)
        registered_at_start = set(topics.live_nodes("read"))
        moves: set[str] = set()
        moving = False
        next_describe = next_ray = 0.0
        while not self._stop.wait(self._interval_s):
            item = store.get(keys.read_scaling(self._cluster))
            if item is not None:
                decision = item.value
                seen = (decision["kind"], decision["target_read_nodes"])
                if not self.decisions or seen != (self.decisions[-1]["kind"], self.decisions[-1]["target_read_nodes"]):
                    self.decisions.append(decision)
                if decision["kind"] == "add":
                    self._first("decided", decision["decided_ms"])
            now = time.monotonic()
            if now >= next_ray:  # Ray's node list is a GCS call: less often
                next_ray = now + self._describe_interval_s
                if any(node["Alive"] and node["Resources"].get(READ_NODE_RESOURCE, 0) > 0
                       and node["NodeID"] not in self._initial for node in ray.nodes()):
                    self._first("ray_node_up")
            self.added |= set(topics.live_nodes("read")) - registered_at_start
            if self.added:
                self._first("registered")
            records = {item.key for item in store.get_prefix(keys.replica_moves_prefix(self._cluster))}
            moves |= records
            self.moves_seen = len(moves)
            if records:
                self._first("first_move")
                moving = True
            elif moving:
                moving = False
                self.events["moves_done"] = _wall_ms()  # the last end seen wins
            self.moving_at_end = moving
            if self.added:
                for state, _ in virtual.states(self._topic).values():
                    if set(state.risr) & self.added:
                        self._first("first_in_risr")
                    if state.leader in self.added:
                        self._first("first_leader")
            if self.added and now >= next_describe:
                next_describe = now + self._describe_interval_s
                for node in sorted(self.added):
                    handle = read_node_handle(self._cluster, node)
                    if handle is None:
                        continue
                    described = ray.get(handle.describe.remote(self._topic))
                    self.last_describe = {"node_id": node, "hosted_vps": described["hosted_vps"],
                                          "first_records_served_ms": described["first_records_served_ms"],
                                          "vps": sorted(described["vps"])}
                    if described["first_records_served_ms"] is not None:
                        self._first("first_records_served", described["first_records_served_ms"])
