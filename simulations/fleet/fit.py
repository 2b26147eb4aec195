"""From the raw figures of a calibration run to ``CalibrationParams`` (pure: no cluster, no clock).

The raw figures (``calibrate.measure``) are, per measured run, the requests, messages and bytes
an actor role handled and the CPU seconds its processes used (already net of their idle CPU).
Each role's cost is linear in them:

    cpu_us = requests * request_cpu_us + messages * msg_cpu_us
             + (bytes - messages * reference_message_bytes) * byte_cpu_ns / 1000

and three runs (single-message batches of 1 KiB, full batches of 1 KiB, full batches of 16 KiB)
determine the three costs. A cost the noise makes negative is clamped to 0 and reported in
``notes``; a per-message cost is never below ``MSG_CPU_US_MIN`` (every message costs something).

Replication per follower = (leader CPU with RF - 1 followers - leader CPU with none + CPU of the
followers) / (RF - 1), measured at RF=2. Idle CPU of a replica is the median over unreplicated
leaders, a replicated leader and its follower; the extra idle CPU of a partition whose two
followers wake each other is what an RF=3 partition's replicas use beyond three such replicas.
Feeding is fitted twice, for the feeder and for the VP leaders, per VP call and per message
(one message size, no byte term); a feeder round calls every VP (``_feed_runs``), so VP calls
= rounds * VPs. The latency per extra replica is kept only if it exceeds the noise (``_pass_ms``).
"""

from __future__ import annotations

import numpy as np

from simulations.fleet.params import REFERENCE_MESSAGE_BYTES, CalibrationParams

MSG_CPU_US_MIN = 0.05
VP_MEMORY_MB_MIN = 0.001  # 1 KB: below it a hosted VP's growth is USS noise


def solve_costs(runs: list[dict], cpu_key: str, notes: list[str], label: str, with_bytes: bool = True) -> tuple[float, ...]:
    """Least-squares (request_us, msg_us[, byte_ns]) from runs holding requests, messages, bytes and ``cpu_key``."""
    rows, cpu_us = [], []
    for run in runs:
        row = [run["requests"], run["messages"]]
        if with_bytes:
            row.append((run["bytes"] - run["messages"] * REFERENCE_MESSAGE_BYTES) / 1000.0)
        rows.append(row)
        cpu_us.append(run[cpu_key] * 1e6)
    assert len(rows) >= len(rows[0]), f"{label}: {len(rows)} runs cannot determine {len(rows[0])} costs"
    solution, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array(cpu_us, dtype=float), rcond=None)
    costs = []
    for name, value in zip(("request_cpu_us", "msg_cpu_us", "byte_cpu_ns"), solution):
        floor = MSG_CPU_US_MIN if name == "msg_cpu_us" else 0.0
        if value < floor:
            notes.append(f"{label} {name} fitted {value:.3f}, clamped to {floor} (measurement noise)")
            value = floor
        costs.append(round(float(value), 4))
    return tuple(costs)


def _net_replication(runs_rf1: list[dict], runs_rf: list[dict], followers: int) -> list[dict]:
    net = []
    for single, replicated in zip(runs_rf1, runs_rf):
        assert single["name"] == replicated["name"], (single["name"], replicated["name"])
        leader_extra = replicated["leader_cpu_s"] - single["leader_cpu_s"]
        net.append({**replicated, "replication_cpu_s": (leader_extra + replicated["followers_cpu_s"]) / followers})
    return net


def _feed_runs(raw_feed: dict) -> list[dict]:
    """Feeder runs with their VP calls: the feeder calls every VP in every round (``Feeder._round``
    gathers ``_feed_vp`` over all VPs, and each call carries the advanced ``fed_through``)."""
    return [{**run, "requests": run["rounds"] * raw_feed["virtual_partitions"]} for run in raw_feed["runs"]]


def _pass_ms(latency: dict, notes: list[str]) -> float:
    """Produce latency per extra replica on a node: mean p50 with the extra idle replicas minus
    mean p50 without, per replica; 0 unless it exceeds twice the noise (the spread between
    repeated runs of the same kind), since the model multiplies it by hundreds of replicas."""
    base, loaded = np.asarray(latency["base_p50_ms"], float), np.asarray(latency["loaded_p50_ms"], float)
    extra = latency["extra_replicas_per_node"]
    slope = (loaded.mean() - base.mean()) / extra
    noise = (np.ptp(base) + np.ptp(loaded)) / 2 / extra if base.size > 1 and loaded.size > 1 else float("inf")
    if slope <= 2 * noise or slope <= 0:
        notes.append(f"pass_ms_per_replica: {slope:+.3f} ms per replica is within twice the noise ({noise:.3f} ms per "
                     f"replica between repeated runs); set to 0")
        return 0.0
    return float(slope)


def derive_params(raw: dict) -> tuple[CalibrationParams, list[str]]:
    """The parameters a calibration run's raw figures give, and notes on any clamping."""
    notes: list[str] = []
    produce_rf1, produce_rf = raw["produce"]["rf1"], raw["produce"]["replicated"]
    followers = raw["produce"]["replication_factor"] - 1
    assert followers >= 1, "replication needs a topic with at least one follower"
    produce = solve_costs(produce_rf1, "leader_cpu_s", notes, "produce")
    replication = solve_costs(_net_replication(produce_rf1, produce_rf, followers), "replication_cpu_s", notes, "replication")
    read = solve_costs(raw["read"]["runs"], "leader_cpu_s", notes, "read")
    feeder = solve_costs(_feed_runs(raw["feed"]), "feeder_cpu_s", notes, "feeder", with_bytes=False)
    vp_feed = solve_costs(_feed_runs(raw["feed"]), "vps_cpu_s", notes, "vp feed", with_bytes=False)
    idle, memory, latency = raw["idle"], raw["memory"], raw["latency"]
    replica_idle = float(np.median(idle["unreplicated_leader_cores"] + idle["replicated_leader_cores"] + idle["follower_cores"]))
    rf3 = idle["wakeups"]["rf3_replica_cores"]
    wakeup = max(sum(rf3) - len(rf3) * replica_idle, 0.0)
    replica_memory = memory["unreplicated_leader_uss_mb"] + memory["replicated_leader_uss_mb"] + memory["follower_uss_mb"]
    pass_ms = _pass_ms(latency, notes)
    params = CalibrationParams(
        produce_request_cpu_us=produce[0], produce_msg_cpu_us=produce[1], produce_byte_cpu_ns=produce[2],
        replication_request_cpu_us=replication[0], replication_msg_cpu_us=replication[1],
        replication_byte_cpu_ns=replication[2],
        read_request_cpu_us=read[0], read_msg_cpu_us=read[1], read_byte_cpu_ns=read[2],
        feeder_call_cpu_us=feeder[0], feeder_msg_cpu_us=feeder[1],
        vp_feed_call_cpu_us=vp_feed[0], vp_feed_msg_cpu_us=vp_feed[1],
        idle_replica_cpu_cores=round(replica_idle, 5),
        idle_vp_replica_cpu_cores=round(float(np.median(idle["vp_replica_cores"])), 5),
        idle_feeder_cpu_cores=round(float(np.median(idle["feeder_cores"])), 5),
        idle_wakeup_cpu_cores_per_partition=round(wakeup, 5),
        replica_memory_mb=round(float(np.median(replica_memory)), 1),
        vp_replica_memory_mb=_vp_replica_memory_mb(memory, notes),
        feeder_memory_mb=round(float(np.median(memory["feeder_uss_mb"])), 1),
        produce_base_latency_ms=round(float(np.mean(latency["base_p50_ms"])), 3),
        physical_read_base_latency_ms=round(max(latency["physical_read_p50_ms"], 0.0), 3),
        virtual_read_base_latency_ms=round(max(latency["virtual_read_p50_ms"], 0.0), 3),
        pass_ms_per_replica=round(pass_ms, 5),
    )
    return params, notes


def _vp_replica_memory_mb(memory: dict, notes: list[str]) -> float:
    """A hosted VP's memory: the read node's growth per VP, tens of KB, so kept to the KB; a
    growth the USS noise hides is clamped to ``VP_MEMORY_MB_MIN`` (a log always costs something)."""
    value = round(float(np.median(memory["vp_replica_uss_mb"])), 3)
    if value < VP_MEMORY_MB_MIN:
        notes.append(f"vp_replica_memory_mb measured {value:.3f}, clamped to {VP_MEMORY_MB_MIN} (measurement noise)")
        value = VP_MEMORY_MB_MIN
    return value
