"""A lone ISR leader loses power: a scripted run of the simulated cluster (seed 4226's bug, pinned).

``test_found_bugs.py`` pins the rules that fixed lone-isr-leader-power-loss (seed 4226) on the
cores alone; the seed itself is history, as code changes move the random stream (it ran one
fault when this test was written). This module plays the bug's shape on the whole simulated
cluster with timed steps instead, so it does not depend on what a seed draws: one partition,
RF=3, ``min_insync_replicas=2``, logs never flushed (a power loss takes a replica's whole
unflushed log), no message loss, no random fault. The leader is cut off from both followers
and shrinks the ISR to itself (they become eligible leader replicas), then its node loses
power and boots again with a log that lacks batches acknowledged before the shrink. Before the
fix the controller elected it again as the only ISR member and the followers truncated to its
shorter log; the checkers then reported acknowledged batches lost. Now the restarted replica
leaves the ISR and an eligible leader replica leads (Kafka's KIP-966). The last test plants the
bug back (a controller that forgets the ELR) to show the scenario catches it, not only passes.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass

import simulations.dst.coordinator
from mafka4.coordinator.control.partition_decisions import decide_partition
from mafka4.limits import KiB, ProducerConfig
from mafka4.limits.servers import LogConfig, ReplicaConfig
from simulations.checkers import Ack, Anomaly, Kind
from simulations.dst.cluster import Cluster
from simulations.dst.disk import SimDisk
from simulations.dst.env import Env
from simulations.dst.network import Network, NetworkConfig
from simulations.dst.options import options_for_seed
from simulations.dst.scheduler import Scheduler

SEED = 1  # draws only message delays and the workload's keys here: the steps below are timed
# Batches of up to 20 ms of messages: fewer, larger batches than with linger_ms=0, so the leader's
# unflushed log does not reach a segment roll (which flushes) before it loses power.
PRODUCER_CONFIG = ProducerConfig(linger_ms=20, retry_backoff_ms=20, retry_backoff_ms_max=100).resolved()
CUT_MS = 300
POWER_LOSS_MS = 600
BOOT_MS = 650
UNCUT_MS = 700
CHAOS_MS = 1000  # producers stop; the run drains


@dataclass(frozen=True, slots=True)
class Outcome:
    leader: str  # p0's leader when it was cut off
    isr_at_power_loss: tuple[str, ...]
    elr_at_power_loss: tuple[str, ...]
    acknowledged_end_at_power_loss: int  # one past the highest offset acknowledged by then
    restarted_log_end_offset: int  # the old leader's log end once its replica ran again
    next_leader: str  # who leads the first epoch after the power loss
    anomalies: tuple[Anomaly, ...]
    drained: bool


def run() -> Outcome:
    rng = random.Random(SEED)
    options = options_for_seed(rng).replace(
        partitions=1, write_nodes=3, replication_factor=3, read_replicas=2, virtual_partitions=1,
        log_config=LogConfig(segment_bytes_max=4 * KiB, retention_ms=None, flush_interval_ms=None,
                             flush_interval_messages=None),
        replica_config=ReplicaConfig(replica_lag_ms_max=100, min_insync_replicas=2, fetch_bytes_max=8 * KiB,
                                     fetch_backoff_ms=20, producer_batches_remembered=5, sequence_wait_ms_max=50),
        network=NetworkConfig(delay_ms_min=1, delay_ms_max=3, drop_probability=0.0, duplicate_probability=0.0),
        producers=2, writes_per_producer=40, produce_interval_ms=20, producer_config=PRODUCER_CONFIG,
        consumers=1, consumers_max=1, member_churn_interval_ms=None, reshards_max=0, lanes=(), consumer_lanes=(),
        chaos_ms=CHAOS_MS, fault_interval_ms=100 * CHAOS_MS, power_loss=True,
    )
    with SimDisk(rng) as disk:
        scheduler = Scheduler()
        env = Env(rng, options, scheduler, Network(scheduler, rng, options.network), disk)
        cluster = Cluster(env)
        nodes = {node.name: node for node in cluster.write_nodes}
        seen: dict[str, object] = {}

        def cut_leader_off() -> None:
            state = cluster.coordinator.partitions[0]
            seen["leader"], seen["followers"] = state.leader, [r for r in state.replicas if r != state.leader]
            for follower in seen["followers"]:
                env.network.cut(state.leader, follower)

        def lose_power() -> None:
            state = cluster.coordinator.partitions[0]
            seen["isr"], seen["elr"], seen["epoch"] = state.isr, state.elr, state.leader_epoch
            acked = [record.offset for record in env.history if isinstance(record, Ack) and record.partition == 0]
            seen["acknowledged_end"] = 1 + max(acked, default=-1)
            nodes[seen["leader"]].crash(power_loss=True)
            scheduler.after(1, watch)

        def uncut() -> None:
            for follower in seen["followers"]:
                env.network.uncut(seen["leader"], follower)

        def watch() -> None:
            """Record the restarted replica's log end and who leads the next epoch."""
            state = cluster.coordinator.partitions[0]
            restarted = cluster.physical_replica(seen["leader"], 0)
            if restarted is not None and "restarted_end" not in seen:
                seen["restarted_end"] = restarted.log.log_end_offset
            if state.leader_epoch > seen["epoch"] and "next_leader" not in seen:
                seen["next_leader"] = state.leader
            if "restarted_end" not in seen or "next_leader" not in seen:
                scheduler.after(1, watch)

        scheduler.at(CUT_MS, cut_leader_off)
        scheduler.at(POWER_LOSS_MS, lose_power)
        scheduler.at(BOOT_MS, lambda: nodes[seen["leader"]].boot())
        scheduler.at(UNCUT_MS, uncut)
        cluster.run()
        return Outcome(seen["leader"], seen["isr"], seen["elr"], seen["acknowledged_end"], seen["restarted_end"],
                       seen["next_leader"], tuple(cluster.check()), cluster.drained)


@functools.lru_cache(maxsize=None)
def lone_leader_loses_power() -> Outcome:
    return run()


def test_the_scenario_is_the_hazard():
    """What the scenario must be for the test below to mean anything, before and after the fix."""
    outcome = lone_leader_loses_power()
    assert outcome.isr_at_power_loss == (outcome.leader,), outcome
    assert set(outcome.elr_at_power_loss) == {"w0", "w1", "w2"} - {outcome.leader}, outcome
    assert outcome.acknowledged_end_at_power_loss > 0, "batches were acknowledged before the ISR shrank"
    assert outcome.restarted_log_end_offset < outcome.acknowledged_end_at_power_loss, \
        "the old leader came back without acknowledged batches: electing it would lose them"
    assert outcome.drained, outcome


def test_a_lone_isr_leader_that_loses_power_is_not_elected_and_nothing_acknowledged_is_lost():
    outcome = lone_leader_loses_power()
    assert outcome.next_leader in outcome.elr_at_power_loss, outcome
    assert not outcome.anomalies, "\n".join(str(anomaly) for anomaly in outcome.anomalies)


def test_without_eligible_leader_replicas_the_scenario_loses_acknowledged_batches(monkeypatch):
    """The bug planted back: a controller that forgets the ELR finds no live ISR member but the
    restarted leader, waits offline until it runs, and elects it with its shorter log."""

    def without_elr(state, live, write_nodes, config, fresh=frozenset()):
        return decide_partition(dataclasses.replace(state, elr=()), live, write_nodes, config, fresh)

    monkeypatch.setattr(simulations.dst.coordinator, "decide_partition", without_elr)
    outcome = run()
    assert outcome.next_leader == outcome.leader, outcome
    assert Kind.LOST in {anomaly.kind for anomaly in outcome.anomalies}, outcome.anomalies
