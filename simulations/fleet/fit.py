"""From the raw figures of a calibration run to ``CalibrationParams`` and their errors (pure: no cluster, no clock).

``derive_params(raw)`` reads the raw figures ``calibrate.measure`` records (calibration format
``CALIBRATION_FORMAT``; an older ``raw`` is refused, re-run ``fleet calibrate``) and returns a
``Derivation``: the parameters, their ``measurement_error`` (absolute 1-sigma errors, the same
keys) and ``notes`` on every clamp and test. Values are kept to 5 significant digits, errors to 3.

**CPU costs.** Each run records the requests, messages and bytes an actor role handled and the
CPU seconds its processes used (net of their idle rate). A role's cost is linear in them:

    cpu_us = requests * request_cpu_us + messages * msg_cpu_us
             + (bytes - messages * reference_message_bytes) * byte_cpu_ns / 1000

and one trial's three runs (single-message batches of 1 KiB, full batches of 1 KiB, full
batches of 16 KiB) determine the three costs (least squares). Every trial is fitted on its own;
the value is the mean over the ``cost_trials`` trials and its error the standard error of that
mean (sample standard deviation / sqrt(trials)). A mean the noise makes negative is clamped to
0, a per-message cost to at least ``MSG_CPU_US_MIN`` (every message costs something), with a note.

* Replication per follower = (leader CPU with RF - 1 followers - leader CPU with none + CPU of
  the followers) / (RF - 1), measured at RF=2, trial by trial.
* Feeding is fitted per VP call and per message (one message size, no byte term) for the read
  node (``feeder_*``: its feed stream splits and appends in process, so it is all the feeding
  CPU) and for separate VP processes (``vp_feed_*``: none exist, their CPU is recorded as 0). A
  feed round calls every VP (``_feed_runs``), so VP calls = rounds * VPs.

**Idle CPU** (cores; every rate is CPU time from ``schedstat`` over the idle window, see
``proc_cpu``). The resolution of one process's rate is ``2 * SCHEDSTAT_LAG_S_MAX / window_s``
(each of the two readings may lag by one scheduler tick), added in quadrature to each error.

* A replica: the mean over the replica processes (unreplicated leaders, a replicated leader
  and its follower) in the window after the density topic exists; error: the standard error
  across those processes (+) the resolution.
* A VP replica: the read node's growth when it hosts the density topic's VPs (window after
  minus window before), per VP replica. Error: each window's rate has the standard error of its
  ``slices`` slice rates; error = sqrt(se_before^2 + se_after^2 + 2 resolution^2) / VP replicas.
* The wakeups of an RF=3 partition: what its three replicas use beyond three idle replicas;
  error: sqrt(sum of their slice standard errors^2 + 3 resolution^2 + (3 * replica error)^2).
* A feeder: 0, error 0 (read nodes feed in process; no feeder process exists).

**Memory** (MB = MiB). A replica: the mean USS over the replica processes, error the standard
error across them. A VP replica: the read node's RSS growth (mean of the ``slices + 1``
readings after minus before) per VP replica; error: sqrt(se_before^2 + se_after^2 + 2 page^2) /
VP replicas, a page (``RSS_RESOLUTION_BYTES``) being the resolution of RSS. A growth below
``VP_MEMORY_MB_MIN`` is clamped to it (a log always costs something).

**Latencies** (ms). Produce base: the mean of the ``pass_trials`` paced runs' p50 without extra
replicas, error its standard error. Ack -> reader (physical, virtual): the median of the wake
trials (over the client ports, ``wake_latency``), error sqrt(pi / 2) * s / sqrt(n) (the standard
error of a median of normal samples).

**Latency per extra replica** (``_pass_ms``): slope = (mean loaded p50 - mean base p50) / extra
replicas per node, error = the Welch standard error of that difference / extra replicas. The
noise test is a two-sided Welch t-test of the loaded vs the base p50s (``welch``): the slope is
kept when p < ``PASS_TEST_ALPHA``, set to 0 when p >= it (not distinguishable from 0), and a
negative slope is clamped to 0 whatever p. A note always records slope, standard error, t,
degrees of freedom and p. The model multiplies this figure by hundreds of replicas, so it must
not be noise, nor dropped when it is not.

``service_scv`` and ``reference_message_bytes`` are not measured: their errors are 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from mafka4.errors import InvalidConfig
from simulations.fleet.params import CALIBRATION_FORMAT, REFERENCE_MESSAGE_BYTES, CalibrationParams
from simulations.fleet.welch import welch_test

MSG_CPU_US_MIN = 0.05
VP_MEMORY_MB_MIN = 0.001  # 1 KB: below it a hosted VP's growth is RSS noise
PASS_TEST_ALPHA = 0.05
# A thread running when its schedstat is read has not been charged for the current tick yet:
# at most one tick, 10 ms at the lowest kernel HZ (100).
SCHEDSTAT_LAG_S_MAX = 0.010
RSS_RESOLUTION_BYTES = 4096  # a page
MiB = 1024 * 1024
REPLICA_ROLES = ("unreplicated_leader", "replicated_leader", "follower")
# The costs each role's least squares determines, in the order of its columns.
ROLE_COSTS = {role: (f"{role}_request_cpu_us", f"{role}_msg_cpu_us", f"{role}_byte_cpu_ns")
              for role in ("produce", "replication", "read")}
ROLE_COSTS.update({role: (f"{role}_call_cpu_us", f"{role}_msg_cpu_us") for role in ("feeder", "vp_feed")})
VALUE_DIGITS, ERROR_DIGITS = 5, 3


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float
    error: float  # absolute, 1 sigma


@dataclass(frozen=True, slots=True)
class Derivation:
    params: CalibrationParams
    measurement_error: dict  # parameter -> absolute 1-sigma error, every field of CalibrationParams
    notes: tuple[str, ...]


def significant(value: float, digits: int) -> float:
    """``value`` kept to ``digits`` significant digits, as a plain float (exact through JSON)."""
    return float(f"{float(value):.{digits}g}")


def mean_and_error(samples) -> tuple[float, float]:
    """The mean and its standard error (sample sd / sqrt(n); 0 for a single sample)."""
    values = np.asarray(samples, dtype=float)
    assert values.size >= 1, "an estimate needs at least one sample"
    error = float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else 0.0
    return float(values.mean()), error


def least_squares(runs: list[dict], cpu_key: str, with_bytes: bool = True) -> np.ndarray:
    """(request_us, msg_us[, byte_ns]) from runs holding requests, messages, bytes and ``cpu_key`` (unclamped)."""
    rows, cpu_us = [], []
    for run in runs:
        row = [run["requests"], run["messages"]]
        if with_bytes:
            row.append((run["bytes"] - run["messages"] * REFERENCE_MESSAGE_BYTES) / 1000.0)
        rows.append(row)
        cpu_us.append(run[cpu_key] * 1e6)
    assert len(rows) >= len(rows[0]), f"{len(rows)} runs cannot determine {len(rows[0])} costs"
    solution, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array(cpu_us, dtype=float), rcond=None)
    return solution


def _clamped(name: str, estimate: Estimate, floor: float, notes: list[str]) -> Estimate:
    if estimate.value < floor:
        notes.append(f"{name} fitted {estimate.value:.4g}, clamped to {floor:g} (measurement noise)")
        return Estimate(floor, estimate.error)
    return estimate


def _role_costs(names: tuple[str, ...], per_trial: list[np.ndarray], notes: list[str]) -> dict[str, Estimate]:
    """Mean and standard error over the trials' fits of one role's costs, in the order of ``names``."""
    solutions = np.array(per_trial)
    assert solutions.shape[1] == len(names), (solutions.shape, names)
    costs = {}
    for index, name in enumerate(names):
        floor = MSG_CPU_US_MIN if name.endswith("_msg_cpu_us") else 0.0
        costs[name] = _clamped(name, Estimate(*mean_and_error(solutions[:, index])), floor, notes)
    return costs


def _net_replication(runs_rf1: list[dict], runs_rf: list[dict], followers: int) -> list[dict]:
    net = []
    for single, replicated in zip(runs_rf1, runs_rf, strict=True):
        assert single["name"] == replicated["name"], (single["name"], replicated["name"])
        leader_extra = replicated["leader_cpu_s"] - single["leader_cpu_s"]
        net.append({**replicated, "replication_cpu_s": (leader_extra + replicated["followers_cpu_s"]) / followers})
    return net


def _feed_runs(runs: list[dict], virtual_partitions: int) -> list[dict]:
    """Feed runs with their VP calls: every round calls every VP of the feed topic."""
    return [{**run, "requests": run["rounds"] * virtual_partitions} for run in runs]


def _cpu_costs(raw: dict, notes: list[str]) -> dict[str, Estimate]:
    produce, read, feed = raw["produce"], raw["read"], raw["feed"]
    followers = produce["replication_factor"] - 1
    assert followers >= 1, "replication needs a topic with at least one follower"
    fits: dict[str, list] = {role: [] for role in ROLE_COSTS}
    for trial in produce["trials"]:
        fits["produce"].append(least_squares(trial["rf1"], "leader_cpu_s"))
        fits["replication"].append(least_squares(_net_replication(trial["rf1"], trial["replicated"], followers),
                                                 "replication_cpu_s"))
    for runs in read["trials"]:
        fits["read"].append(least_squares(runs, "leader_cpu_s"))
    for runs in feed["trials"]:
        calls = _feed_runs(runs, feed["virtual_partitions"])
        fits["feeder"].append(least_squares(calls, "feeder_cpu_s", with_bytes=False))
        fits["vp_feed"].append(least_squares(calls, "vps_cpu_s", with_bytes=False))
    costs = {}
    for role, per_trial in fits.items():
        costs.update(_role_costs(ROLE_COSTS[role], per_trial, notes))
    return costs


def _slice_error(process: dict) -> float:
    """Standard error of a process's window rate, from its slice rates."""
    return mean_and_error(process["slice_cores"])[1]


def _idle_costs(idle: dict, density: dict, notes: list[str]) -> dict[str, Estimate]:
    resolution = 2 * SCHEDSTAT_LAG_S_MAX / idle["after"]["window_s"]
    if min(idle["before"]["window_s"], idle["after"]["window_s"]) < 60.0:
        notes.append(f"idle windows of {idle['before']['window_s']:g} and {idle['after']['window_s']:g} s are shorter "
                     f"than 60 s: the idle figures are rough (a read node's housekeeping runs every 1 to 5 s)")
    replicas = [p["cores"] for p in idle["after"]["processes"].values() if p["role"] in REPLICA_ROLES]
    replica_value, replica_se = mean_and_error(replicas)
    replica = Estimate(replica_value, math.hypot(replica_se, resolution))
    vp_replicas = density["virtual_partitions"] * density["read_replicas"]
    if density["hosted_vps_after"] - density["hosted_vps_before"] != vp_replicas:
        notes.append(f"the read node hosted {density['hosted_vps_after'] - density['hosted_vps_before']} more VP "
                     f"replicas after {density['topic']} was created, not {vp_replicas}: the per-VP figures divide "
                     f"by {vp_replicas}")
    before, after = idle["before"]["processes"]["read_node"], idle["after"]["processes"]["read_node"]
    vp = Estimate((after["cores"] - before["cores"]) / vp_replicas,
                  math.sqrt(_slice_error(before) ** 2 + _slice_error(after) ** 2 + 2 * resolution ** 2) / vp_replicas)
    rf3 = list(idle["rf3"]["processes"].values())
    wakeup = Estimate(sum(p["cores"] for p in rf3) - len(rf3) * replica.value,
                      math.sqrt(sum(_slice_error(p) ** 2 for p in rf3) + len(rf3) * resolution ** 2
                                + (len(rf3) * replica.error) ** 2))
    return {"idle_replica_cpu_cores": replica,
            "idle_vp_replica_cpu_cores": _clamped("idle_vp_replica_cpu_cores", vp, 0.0, notes),
            "idle_feeder_cpu_cores": Estimate(0.0, 0.0),
            "idle_wakeup_cpu_cores_per_partition": _clamped("idle_wakeup_cpu_cores_per_partition", wakeup, 0.0, notes)}


def _rss_mb(process: dict) -> tuple[float, float]:
    value, error = mean_and_error(process["rss_bytes"])
    return value / MiB, error / MiB


def _memory_costs(raw: dict, notes: list[str]) -> dict[str, Estimate]:
    replica = Estimate(*mean_and_error(raw["memory"]["replica_uss_mb"]))
    density = raw["density"]
    vp_replicas = density["virtual_partitions"] * density["read_replicas"]
    before, before_se = _rss_mb(raw["idle"]["before"]["processes"]["read_node"])
    after, after_se = _rss_mb(raw["idle"]["after"]["processes"]["read_node"])
    page_mb = RSS_RESOLUTION_BYTES / MiB
    vp = Estimate((after - before) / vp_replicas,
                  math.sqrt(before_se ** 2 + after_se ** 2 + 2 * page_mb ** 2) / vp_replicas)
    return {"replica_memory_mb": replica,
            "vp_replica_memory_mb": _clamped("vp_replica_memory_mb", vp, VP_MEMORY_MB_MIN, notes),
            "feeder_memory_mb": Estimate(0.0, 0.0)}


def _median_and_error(samples) -> Estimate:
    values = np.asarray(samples, dtype=float)
    error = math.sqrt(math.pi / 2) * float(values.std(ddof=1)) / math.sqrt(values.size) if values.size > 1 else 0.0
    return Estimate(max(float(np.median(values)), 0.0), error)


def _pass_ms(latency: dict, notes: list[str]) -> Estimate:
    """Produce latency per extra replica on a node, kept only if the Welch test tells it from 0."""
    extra = latency["extra_replicas_per_node"]
    test = welch_test(latency["base_p50_ms"], latency["loaded_p50_ms"])
    slope, error = test.difference / extra, test.standard_error / extra
    described = (f"slope {slope:+.4f} ms per replica, standard error {error:.4f}; two-sided Welch t-test of the "
                 f"loaded vs base p50s (n={len(latency['base_p50_ms'])} and {len(latency['loaded_p50_ms'])}, "
                 f"{extra} extra replicas per node): t={test.t:.3f}, df={test.degrees_of_freedom:.2f}, "
                 f"p={test.p_two_sided:.3g}")
    if slope < 0:
        notes.append(f"pass_ms_per_replica: {described}; a negative slope is clamped to 0")
        return Estimate(0.0, error)
    if test.p_two_sided >= PASS_TEST_ALPHA:
        notes.append(f"pass_ms_per_replica: {described}; not distinguishable from 0 at p >= {PASS_TEST_ALPHA}: set to 0")
        return Estimate(0.0, error)
    notes.append(f"pass_ms_per_replica: {described}; p < {PASS_TEST_ALPHA}: kept")
    return Estimate(slope, error)


def _latencies(latency: dict, notes: list[str]) -> dict[str, Estimate]:
    return {"produce_base_latency_ms": Estimate(*mean_and_error(latency["base_p50_ms"])),
            "physical_read_base_latency_ms": _median_and_error(latency["physical_read_ms"]),
            "virtual_read_base_latency_ms": _median_and_error(latency["virtual_read_ms"]),
            "pass_ms_per_replica": _pass_ms(latency, notes)}


def _check_format(raw: dict) -> None:
    if not isinstance(raw, dict) or raw.get("format") != CALIBRATION_FORMAT:
        found = raw.get("format", 1) if isinstance(raw, dict) else type(raw).__name__
        raise InvalidConfig(f"calibration raw figures are in format {found}; this fit reads format {CALIBRATION_FORMAT} "
                            f"(cost trials, schedstat idle windows, a density topic): re-run 'fleet calibrate'")
    for trials in (raw["produce"]["trials"], raw["read"]["trials"], raw["feed"]["trials"]):
        if len(trials) < 2:
            raise InvalidConfig(f"calibration has {len(trials)} cost trial(s): at least 2 are needed to estimate "
                                f"the measurement error (CalibrationSettings.cost_trials)")


def derive_params(raw: dict) -> Derivation:
    """The parameters a calibration run's raw figures give, their 1-sigma errors, and notes."""
    _check_format(raw)
    notes: list[str] = []
    estimates = {**_cpu_costs(raw, notes), **_idle_costs(raw["idle"], raw["density"], notes),
                 **_memory_costs(raw, notes), **_latencies(raw["latency"], notes)}
    measured = {f.name for f in fields(CalibrationParams)} - {"service_scv", "reference_message_bytes"}
    assert set(estimates) == measured, sorted(set(estimates) ^ measured)
    params = CalibrationParams(**{name: significant(e.value, VALUE_DIGITS) for name, e in estimates.items()})
    errors = {f.name: significant(estimates[f.name].error, ERROR_DIGITS) if f.name in estimates else 0.0
              for f in fields(CalibrationParams)}
    return Derivation(params, errors, tuple(notes))
