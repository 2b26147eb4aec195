"""A lone RISR leader loses power: the RISR twin of the write side's eligible leader replicas.

A scripted run of the simulated cluster (``simulations.dst``, production's ``HostedVp`` on a
simulated disk, VP logs flushed lazily as in production): one VP with two read replicas; its
follower is cut off from the leader, so the leader shrinks the RISR to itself and, alone, moves
the VP high watermark with every append; a consumer reads up to it. Then the leader's read node
loses power (its unflushed VP tail is cut), boots again, and the controller lets it lead the
next epoch (it is the only RISR member; ``failover.decide_failover``). Unless the lone leader
never let readers past what it had flushed, its log now ends below offsets the consumer read,
the feed streams refill those offsets with records in another order, and the checkers report
records read at VP offsets that now hold others, or acknowledged records the group never read.

Before the lone-leader rule (``risr.state``: the HW of a leader alone in the RISR never passes
its flushed offset, and it flushes after each append) the leader came back with its log cut to
81 while the consumer had read to 113, and the checkers reported 20 misplaced records and 2
acknowledged records never read.

Only the network cut and the power loss are scripted; everything else (feeding, RISR, failover,
the group) runs as in any seed, with no random fault and no message loss.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

from mafka4.limits import KiB, LogConfig
from mafka4.risr.state import RisrConfig
from simulations.checkers import Anomaly, Consumed
from simulations.dst.cluster import Cluster
from simulations.dst.disk import SimDisk
from simulations.dst.env import Env
from simulations.dst.network import Network, NetworkConfig
from simulations.dst.options import options_for_seed
from simulations.dst.scheduler import Scheduler

SEED = 1
CUT_MS = 150  # the follower is cut off from the leader...
POWER_LOSS_MS = 600  # ...the leader's node loses power...
BOOT_MS = 700  # ...and boots again;
HEAL_MS = 800  # then the follower reaches the leader again.
CHAOS_MS = 1000  # producers stop; the run drains


@dataclass(frozen=True, slots=True)
class Outcome:
    replicas: tuple[str, ...]
    risr_at_power_loss: tuple[str, ...]
    leader_epoch_at_power_loss: int
    consumed_end_at_power_loss: int  # one past the highest VP offset the consumer had read
    leader_epoch_after_boot: int
    leader_after_boot: str
    recovered_log_end_offset: int  # the restarted leader's log end, as it recovered it
    anomalies: tuple[Anomaly, ...]
    drained: bool


@functools.lru_cache(maxsize=None)
def lone_leader_loses_power() -> Outcome:
    rng = random.Random(SEED)
    options = options_for_seed(rng).replace(
        partitions=2, read_nodes=3, read_replicas=2, virtual_partitions=1,
        log_config=LogConfig(segment_bytes_max=4 * KiB, retention_ms=None, flush_interval_ms=None,
                             flush_interval_messages=1),
        risr_config=RisrConfig(read_replica_lag_ms_max=100, feed_lag_ms_max=300),
        network=NetworkConfig(delay_ms_min=1, delay_ms_max=3, drop_probability=0.0, duplicate_probability=0.0),
        producers=2, batches_per_producer=40, produce_interval_ms=20,
        consumers=1, consumers_max=1, member_churn_interval_ms=None, reshards_max=0,
        chaos_ms=CHAOS_MS, fault_interval_ms=100 * CHAOS_MS, power_loss=True,
    )
    with SimDisk(rng) as disk:
        scheduler = Scheduler()
        env = Env(rng, options, scheduler, Network(scheduler, rng, options.network), disk)
        cluster = Cluster(env)
        replicas = cluster.coordinator.vps[0].replicas
        leader_name, follower_name = replicas
        leader_node = next(node for node in cluster.read_nodes if node.name == leader_name)
        seen: dict[str, object] = {}

        def power_loss() -> None:
            state = cluster.coordinator.vps[0]
            seen["risr"], seen["epoch"] = state.risr, state.leader_epoch
            seen["consumed_end"] = 1 + max(
                (record.offset for record in env.history if isinstance(record, Consumed) and record.stream == "vp0"),
                default=-1)
            leader_node.crash(power_loss=True)
            env.note(f"scenario: {leader_name} loses power")

        def boot() -> None:
            leader_node.boot()
            env.note(f"scenario: {leader_name} boots")
            watch()

        def watch() -> None:
            """Record the restarted replica's recovered log end and who leads the next epoch."""
            replica = leader_node.replicas.get(0)
            if replica is not None and "recovered_log_end" not in seen:
                seen["recovered_log_end"] = replica.core.log_end_offset
            state = cluster.coordinator.vps[0]
            if state.leader_epoch > seen["epoch"] and "next_leader" not in seen:
                seen["next_leader"], seen["next_epoch"] = state.leader, state.leader_epoch
            if "recovered_log_end" not in seen or "next_leader" not in seen:
                scheduler.after(1, watch)

        scheduler.at(CUT_MS, lambda: env.network.cut(leader_name, follower_name))
        scheduler.at(POWER_LOSS_MS, power_loss)
        scheduler.at(BOOT_MS, boot)
        scheduler.at(HEAL_MS, lambda: env.network.uncut(leader_name, follower_name))
        cluster.run()
        return Outcome(replicas, seen["risr"], seen["epoch"], seen["consumed_end"], seen["next_epoch"],
                       seen["next_leader"], seen["recovered_log_end"], tuple(cluster.check()), cluster.drained)


def test_the_scenario_is_the_hazard():
    """What the scenario must be for the test below to mean anything, before and after the fix."""
    outcome = lone_leader_loses_power()
    leader = outcome.replicas[0]
    assert len(outcome.replicas) == 2 and outcome.risr_at_power_loss == (leader,), outcome
    assert outcome.consumed_end_at_power_loss > 0, "the consumer read from the lone leader"
    assert (outcome.leader_after_boot, outcome.leader_epoch_after_boot) == (
        leader, outcome.leader_epoch_at_power_loss + 1), "the restarted leader leads the next epoch"
    assert outcome.drained, outcome


def test_a_lone_risr_leader_that_loses_power_still_holds_every_offset_readers_saw():
    outcome = lone_leader_loses_power()
    assert not outcome.anomalies, "\n".join(str(anomaly) for anomaly in outcome.anomalies)
    assert outcome.recovered_log_end_offset >= outcome.consumed_end_at_power_loss, outcome
