"""Whether a long chaos run's processes and etcd stay flat: least-squares slopes of what they hold (pure).

A soak (issue 14) asks that the RSS and the open file descriptors of every process, and the
number of etcd keys, do not grow while the run goes on at a steady rate. The sampler
(``resource_sampler``) looks at every process of the cluster, and at etcd, every
``resource_sample_s``; this module turns those samples into one line per quantity:

* **Roles, not PIDs.** Faults kill processes and the cluster starts them again under new
  PIDs (a replica's actor, a read node, the controller, an etcd member, a group member), so a
  PID's series is cut short by design. Processes are grouped by role (``role_of``: the etcd
  member's data directory, ``gcs_server``, ``raylet``, ``ray::<actor class>``,
  ``controller``, ``chaos-member``, ...), and a role's RSS and open fds at a sweep are the sums
  over its processes seen in that sweep. A role none of whose processes was seen in a sweep has
  no point there (not a zero, which would fake a drop); while one of several is down its sum
  dips, which is noise around the line, not a slope.
* **The steady window.** Start-up fills caches, pools and logs: the first
  ``STARTUP_FRACTION`` of the fault phase is left out, and so is everything after it (heal and
  drain, where the producer stops and the group catches up). ``steady_window`` names it.
* **The line.** Ordinary least squares of value against time over the window's sweeps, given
  per hour. Fewer than ``POINTS_MIN`` sweeps (or all at one time) give no slope (``None``):
  two points make a line through any noise. ``start`` and ``end`` are the first and last values
  seen in the window, so a reader sees the level besides the slope.

A slope says "grows", not "leaks": a run's driver keeps its whole history in memory, and etcd's
database file grows with every revision until it is compacted. The verdict does not judge
slopes (they are noisy on a shared machine); the report carries them for a human.
"""

from __future__ import annotations

import math
import os.path
from dataclasses import dataclass
from typing import Iterable, Sequence

STARTUP_FRACTION = 0.1
POINTS_MIN = 3
SECONDS_PER_HOUR = 3600.0
MIB = 1 << 20
DRIVER_ROLE = "chaos-driver"
ETCD_ROLE = "etcd"
RAY_TITLE_PREFIX = "ray::"
# ``python -m`` modules of the cluster and the run, as their command lines spell them.
MODULE_ROLES = {
    "mafka4.runtime.daemon": "daemon",
    "mafka4.runtime.controller_process": "controller",
    "simulations.chaos.member": "chaos-member",
}


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One process seen in one sweep; every process of a sweep carries the sweep's ``time_s``."""

    time_s: float  # since the run began
    role: str
    pid: int
    rss_bytes: int
    open_fds: int


@dataclass(frozen=True, slots=True)
class EtcdSample:
    time_s: float
    keys: int  # under the cluster's prefix
    db_size_bytes: int  # of the member that answered


@dataclass(frozen=True, slots=True)
class Samples:
    """What a sampler collected, and what it could not read."""

    processes: tuple[ProcessSample, ...]
    etcd: tuple[EtcdSample, ...]
    sweeps: int
    processes_unreadable: int = 0  # gone between the listing and the read (killed by a fault, a zombie)
    etcd_unanswered: int = 0  # sweeps whose etcd count failed or timed out (etcd stopped by a fault)
    sweep_errors: tuple[str, ...] = ()  # the first few sweeps that failed whole (the sampler went on)


@dataclass(frozen=True, slots=True)
class Window:
    """The steady part of a run, in seconds since it began; both ends included."""

    from_s: float
    to_s: float

    def __post_init__(self) -> None:
        assert self.from_s <= self.to_s, (self.from_s, self.to_s)

    def holds(self, time_s: float) -> bool:
        return self.from_s <= time_s <= self.to_s


@dataclass(frozen=True, slots=True)
class Trend:
    """One quantity over the window: its least-squares slope and the first and last values seen."""

    points: int
    start: float | None
    end: float | None
    per_hour: float | None  # None with fewer than POINTS_MIN points

    def to_json(self, digits: int = 3) -> dict:
        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, digits)

        return {"points": self.points, "start": rounded(self.start), "end": rounded(self.end),
                "per_hour": rounded(self.per_hour)}


@dataclass(frozen=True, slots=True)
class RoleTrend:
    role: str
    processes_at_start: int  # in the window's first sweep that saw the role
    processes_at_end: int
    pids_seen: int  # more than the processes at any time: some were restarted
    rss_mib: Trend
    open_fds: Trend

    def to_json(self) -> dict:
        return {"processes": [self.processes_at_start, self.processes_at_end], "pids_seen": self.pids_seen,
                "rss_mib": self.rss_mib.to_json(), "open_fds": self.open_fds.to_json()}


@dataclass(frozen=True, slots=True)
class ResourceTrends:
    window: Window
    sweeps: int
    sweeps_in_window: int
    roles: tuple[RoleTrend, ...]  # by role name
    etcd_keys: Trend
    etcd_db_size_mib: Trend
    processes_unreadable: int
    etcd_unanswered: int
    sweep_errors: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "window_s": [round(self.window.from_s, 3), round(self.window.to_s, 3)],
            "sweeps": self.sweeps, "sweeps_in_window": self.sweeps_in_window,
            "roles": {trend.role: trend.to_json() for trend in self.roles},
            "etcd_keys": self.etcd_keys.to_json(), "etcd_db_size_mib": self.etcd_db_size_mib.to_json(),
            "processes_unreadable": self.processes_unreadable, "etcd_unanswered": self.etcd_unanswered,
            "sweep_errors": list(self.sweep_errors),
        }


def steady_window(faults_from_s: float, faults_to_s: float, startup_fraction: float = STARTUP_FRACTION) -> Window:
    """The fault phase without its first ``startup_fraction``."""
    assert 0.0 <= startup_fraction < 1.0, startup_fraction
    return Window(faults_from_s + startup_fraction * (faults_to_s - faults_from_s), faults_to_s)


def role_of(cmdline: Sequence[str], name: str) -> str:
    """The role of a process of the cluster or the run, from its command line (``name`` if it has none).

    A Ray worker retitles itself ``ray::<ActorClass>`` (``.<method>`` while it runs one, or
    ``ray::IDLE`` in the pool); an etcd member is named by its data directory (``etcd`` alone,
    ``etcd-0``..``etcd-2`` of three), which stays the same when a fault starts it again.
    """
    words = [word for argument in cmdline for word in argument.split()]
    title = next((word for word in words if word.startswith(RAY_TITLE_PREFIX)), None)
    if title is not None:
        return RAY_TITLE_PREFIX + title[len(RAY_TITLE_PREFIX):].split(".")[0].split("(")[0]
    program = os.path.basename(words[0]) if words else name
    if program == ETCD_ROLE or name == ETCD_ROLE:
        data_dir = _value_after(words, "--data-dir")
        return os.path.basename(data_dir.rstrip("/")) if data_dir else ETCD_ROLE
    if program.startswith("python"):
        module = _value_after(words, "-m")
        if module is not None:
            return MODULE_ROLES.get(module, module.rsplit(".", 1)[-1])
        script = next((word for word in words[1:] if word.endswith(".py")), None)
        if script is not None:  # Ray's log monitor, the autoscaler's monitor
            return os.path.basename(script)[:-len(".py")]
    return program or name


def _value_after(words: list[str], flag: str) -> str | None:
    for index, word in enumerate(words):
        if word == flag and index + 1 < len(words):
            return words[index + 1]
        if word.startswith(flag + "="):
            return word[len(flag) + 1:]
    return None


def line_slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(time_s, value)`` points, per second; None if it is not defined."""
    if len(points) < POINTS_MIN:
        return None
    mean_t = math.fsum(t for t, _ in points) / len(points)
    mean_y = math.fsum(y for _, y in points) / len(points)
    spread = math.fsum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0.0:
        return None
    return math.fsum((t - mean_t) * (y - mean_y) for t, y in points) / spread


def trend(points: Iterable[tuple[float, float]]) -> Trend:
    ordered = sorted(points)
    slope = line_slope(ordered)
    return Trend(len(ordered), ordered[0][1] if ordered else None, ordered[-1][1] if ordered else None,
                 None if slope is None else slope * SECONDS_PER_HOUR)


def resource_trends(samples: Samples, window: Window) -> ResourceTrends:
    """Each role's RSS and open fds, and etcd's keys and database size, as lines over ``window``."""
    inside = [sample for sample in samples.processes if window.holds(sample.time_s)]
    roles = tuple(_role_trend(role, [s for s in inside if s.role == role]) for role in sorted({s.role for s in inside}))
    etcd = [sample for sample in samples.etcd if window.holds(sample.time_s)]
    sweep_times = {sample.time_s for sample in inside} | {sample.time_s for sample in etcd}
    return ResourceTrends(
        window=window, sweeps=samples.sweeps, sweeps_in_window=len(sweep_times), roles=roles,
        etcd_keys=trend((s.time_s, s.keys) for s in etcd),
        etcd_db_size_mib=trend((s.time_s, s.db_size_bytes / MIB) for s in etcd),
        processes_unreadable=samples.processes_unreadable, etcd_unanswered=samples.etcd_unanswered,
        sweep_errors=samples.sweep_errors)


def _role_trend(role: str, samples: list[ProcessSample]) -> RoleTrend:
    assert samples and all(sample.role == role for sample in samples), role
    by_time: dict[float, list[ProcessSample]] = {}
    for sample in samples:
        by_time.setdefault(sample.time_s, []).append(sample)
    times = sorted(by_time)
    return RoleTrend(
        role=role, processes_at_start=len(by_time[times[0]]), processes_at_end=len(by_time[times[-1]]),
        pids_seen=len({sample.pid for sample in samples}),
        rss_mib=trend((t, sum(s.rss_bytes for s in by_time[t]) / MIB) for t in times),
        open_fds=trend((t, sum(s.open_fds for s in by_time[t])) for t in times))


def summary_lines(section: dict) -> list[str]:
    """A few lines of a report's ``resources`` section (``ResourceTrends.to_json`` and ``sample_s``)."""
    keys, db = section["etcd_keys"], section["etcd_db_size_mib"]
    window_from_s, window_to_s = section["window_s"]
    lines = [
        f"resources: {section['sweeps']} sweeps every {section['sample_s']:g} s, steady window "
        f"{window_from_s:.0f}-{window_to_s:.0f} s ({section['sweeps_in_window']} sweeps); " + _etcd_text(keys, db),
        "  RSS MiB/h: " + _by_slope(section["roles"], "rss_mib"),
        "  open fds/h: " + _by_slope(section["roles"], "open_fds"),
    ]
    skipped = section["processes_unreadable"], section["etcd_unanswered"], len(section["sweep_errors"])
    if any(skipped):
        lines.append("  skipped: {} process reads (gone), {} etcd counts (no answer), {} sweep errors".format(*skipped))
    return lines


def _etcd_text(keys: dict, db: dict) -> str:
    if keys["start"] is None:
        return "etcd not sampled"
    return (f"etcd keys {keys['start']:g} -> {keys['end']:g} ({_per_hour(keys)}/h), "
            f"db {db['start']:g} -> {db['end']:g} MiB ({_per_hour(db)} MiB/h)")


def _per_hour(trend_json: dict) -> str:
    return "n/a" if trend_json["per_hour"] is None else f"{trend_json['per_hour']:+.1f}"


def _by_slope(roles: dict, quantity: str) -> str:
    """Every role's slope of ``quantity``, steepest growth first (roles without a slope last)."""
    def steepest_first(item: tuple[str, dict]) -> tuple[bool, float]:
        slope = item[1][quantity]["per_hour"]
        return slope is None, 0.0 if slope is None else -slope

    ordered = sorted(roles.items(), key=steepest_first)
    return ", ".join(f"{role} {_per_hour(trend[quantity])}" for role, trend in ordered) or "no process sampled"
