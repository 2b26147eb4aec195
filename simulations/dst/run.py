"""Run one seed, or many, and say what happened: the public entry of the simulator.

``run_seed(seed)`` builds the run's options and cluster from ``random.Random(seed)``, runs
it inside a ``SimDisk`` (temporary directory, removed afterwards) and returns a
``RunResult``: the anomalies the checkers found, or the error (an ``AssertionError`` of a
core is a broken invariant and fails the seed as well), whether the run drained, counters,
and the trace of faults and elections to read when a seed fails. Besides the seed, a run
depends on ``$MAFKA4_COMPRESSION`` (the producers' codec, as for any ``Producer``) and on the
bug planted in the cores, if any (``mafka4.planted_bugs``: ``$MAFKA4_PLANTED_BUG``, or
``planted_bugs.planted`` around the run): the replay command a failed seed prints names both
when they are not the defaults.
"""

from __future__ import annotations

import hashlib
import random
import traceback
from dataclasses import dataclass, field

from mafka4 import planted_bugs
from mafka4.compression import Codec
from mafka4.limits import COMPRESSION_ENV
from mafka4.planted_bugs import PlantedBug
from simulations.checkers import Ack, Anomaly, Consumed
from simulations.dst.cluster import Cluster
from simulations.dst.disk import SimDisk
from simulations.dst.env import Env
from simulations.dst.network import Network
from simulations.dst.options import SimOptions, options_for_seed
from simulations.dst.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class RunResult:
    seed: int
    anomalies: tuple[Anomaly, ...]
    error: str | None
    drained: bool
    not_drained: tuple[str, ...]
    stats: dict = field(default_factory=dict)
    trace: tuple[str, ...] = ()
    # sha256 of the whole history: equal digests mean the same run (replays are exact).
    digest: str = ""
    # The producers' codec, from $MAFKA4_COMPRESSION as a Producer takes it: part of the replay.
    compression: Codec = Codec.NONE
    # The bug planted in the cores for the run (``mafka4.planted_bugs``): part of the replay.
    planted_bug: PlantedBug | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.drained and not self.anomalies

    def summary(self) -> str:
        if self.ok:
            return f"seed {self.seed}: ok ({_stats_text(self.stats)})"
        lines = [f"seed {self.seed}: FAILED ({_stats_text(self.stats)})"]
        if self.error:
            lines.append(self.error.rstrip())
        if not self.drained:
            lines.append(f"not drained: {'; '.join(self.not_drained)}")
        lines += [f"  {anomaly}" for anomaly in self.anomalies]
        lines.append(f"replay: {replay_command(self.seed, self.compression, self.planted_bug)}")
        return "\n".join(lines)


def replay_command(seed: int, compression: Codec = Codec.NONE, planted_bug: PlantedBug | None = None) -> str:
    environment = "" if compression is Codec.NONE else f"{COMPRESSION_ENV}={compression} "
    planted = "" if planted_bug is None else f" --planted-bug {planted_bug.value}"
    return f"{environment}python3 -m simulations.dst --seed {seed}{planted} --trace"


def _stats_text(stats: dict) -> str:
    return ", ".join(f"{key} {value}" for key, value in stats.items() if not isinstance(value, dict))


def run_seed(seed: int, **overrides) -> RunResult:
    """One deterministic run; ``overrides`` replace fields of the seed's ``SimOptions``."""
    rng = random.Random(seed)
    options: SimOptions = options_for_seed(rng)
    if overrides:
        options = options.replace(**overrides)
    with SimDisk(rng) as disk:
        scheduler = Scheduler()
        env = Env(rng, options, scheduler, Network(scheduler, rng, options.network), disk)
        cluster = Cluster(env)
        error, anomalies = None, []
        try:
            cluster.run()
            anomalies = cluster.check()
            failures = [failure for producer in cluster.producers for failure in producer.failures]
            assert not failures, "messages failed for good (none expires here):\n" + "\n".join(failures[:10])
        except Exception:  # a broken invariant (AssertionError) or a crash of a core: the seed fails
            error = traceback.format_exc(limit=12)
        stats = {
            "sim_ms": scheduler.now_ms,
            "events": scheduler.events_total,
            "acked": sum(1 for record in env.history if isinstance(record, Ack)),
            "consumed": sum(1 for record in env.history if isinstance(record, Consumed)),
            "elections": cluster.coordinator.elections_total,
            "vp_failovers": cluster.coordinator.vp_failovers_total,
            "reshards": cluster.coordinator.resharding.reshards_total,
            "torn_files": disk.torn_files_total,
            **dict(sorted(env.counters.items())),
            "faults": dict(sorted(cluster.nemesis.counts.items())),
        }
        digest = hashlib.sha256(repr(env.history).encode()).hexdigest()
        return RunResult(seed, tuple(anomalies), error, cluster.drained and error is None,
                         tuple(cluster.not_drained), stats, tuple(env.trace), digest,
                         options.producer_config.compression, planted_bugs.PLANTED)
