"""Read nodes losing power under a VP: scripted runs of the simulated cluster.

Each run drives ``simulations.dst`` (production's ``HostedVp`` on a simulated disk, VP logs
flushed lazily as in production) through a short script on one VP with two read replicas (one,
where a test says so) while
producers write and a consumer reads; everything else (feeding, RISR, failover, the group) runs
as in any seed, with no random fault and no message loss. A replica that loses power keeps its
log only up to what it flushed; if the controller then makes it lead with a log shorter than
what the consumer read, the feed streams refill those offsets with records in another order and
the checkers report records read at VP offsets that now hold others, or acknowledged records the
group never read.

**A lone RISR leader loses power** (the RISR twin of the write side's eligible leader replicas).
The follower is cut off, the leader shrinks the RISR to itself and, alone, moves the HW with every
append; then its node loses power, boots, and the controller lets it lead the next epoch (the only
RISR member; ``failover.decide_failover``). Before the lone-leader rule (``risr.state``: the HW of
a leader alone in the RISR never passes its flushed offset, and it flushes after each append) the
leader came back with its log cut to 81 while the consumer had read to 113; the checkers reported
20 misplaced records and 2 acknowledged records never read.

**The only replica loses power** (``read_replicas=1``). It serves its unflushed tail, loses it,
and the feed refills those offsets with the physical partitions' records interleaved otherwise
(when nothing told the reader, the checkers reported records read at offsets 58.. that now hold
others). It leads the next epoch (a restarted leader gets a new one), so the consumer's next
fetch, which names the epoch of the last record it read, is answered "diverging": it moves
back to where that epoch now ends and reads the refilled records again (KIP-320).

**A follower loses power, then the leader's process crashes** (a double fault). Both are RISR
members; the follower's node loses power and, before the leader noticed, the leader's node
crashes (its disk keeps everything). The follower's node boots first. Before the longest-log rule
the controller let it, a restarted RISR member, lead the next epoch with the log it recovered,
shorter than what the consumer read, while the leader's disk held every record (found by seeds 645
and 918 of 0..999). Now only restarted RISR members being live, the VP waits for the other RISR
member and the longest recovered log leads (``failover.decide_failover``).

The VP logs flush by the policy a read node opens them with (``topic_log_config``), and
a read node that boots after a power loss reports each VP log that came back shorter
(``vp_tails_lost``).
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Callable


from mafka4.limits import KiB, ProducerConfig, TopicConfig
from mafka4.limits.servers import LogConfig, ReadNodeConfig, topic_log_config
from mafka4.risr.state import RisrConfig
from simulations.checkers import Anomaly, Consumed, Rewound
from simulations.dst.cluster import Cluster
from simulations.dst.disk import SimDisk
from simulations.dst.env import Env
from simulations.dst.network import Network, NetworkConfig
from simulations.dst.options import options_for_seed
from simulations.dst.scheduler import Scheduler
from simulations.dst.virtual import VP_LOG_CONFIG, ReadNode

SEED = 1
PRODUCER_CONFIG = ProducerConfig(linger_ms=20, retry_backoff_ms=20, retry_backoff_ms_max=100).resolved()
POWER_LOSS_MS = 600
CONSUMER = "cons0"  # the network name of the run's one consumer
# When the only-replica script lets the consumer reach the read node again: after the feed
# refilled the VP past its position (it took over 300 ms), before the longer chaos phase ends.
READER_BACK_MS = 1800
ONLY_REPLICA_CHAOS_MS = 2000
CHAOS_MS = 1000  # producers stop; the run drains


@dataclass(frozen=True, slots=True)
class Outcome:
    replicas: tuple[str, ...]  # the VP's, leader first
    risr_at_power_loss: tuple[str, ...]
    leader_epoch_at_power_loss: int
    consumed_end_at_power_loss: int  # one past the highest VP offset the consumer had read
    next_leader: str  # who leads the next epoch
    next_leader_log_end_offset: int  # its log end when it took over
    vp_tails_lost: int  # VP logs that came back shorter after a power loss, as the run reported them
    rewound_to: tuple[int, ...]  # where the consumer read VP 0 again after "diverging" answers
    log_end_when_reader_returned: int  # the VP leader's log end just before ``READER_BACK_MS`` (-1: the run ended first)
    anomalies: tuple[Anomaly, ...]
    drained: bool


Script = Callable[[Env, ReadNode, ReadNode | None], list[tuple[int, Callable[[], None]]]]


def run(script: Script, read_replica_lag_ms_max: int, read_replicas: int = 2, chaos_ms: int = CHAOS_MS) -> Outcome:
    """Run the cluster with ``script(env, leader node, follower node or None)``'s timed steps; the
    leader or the follower loses power at ``POWER_LOSS_MS`` (the script says which, by crashing it then)."""
    rng = random.Random(SEED)
    options = options_for_seed(rng).replace(
        partitions=2, read_nodes=3, read_replicas=read_replicas, virtual_partitions=1,
        log_config=LogConfig(segment_bytes_max=4 * KiB, retention_ms=None, flush_interval_ms=None,
                             flush_interval_messages=1),
        risr_config=RisrConfig(read_replica_lag_ms_max=read_replica_lag_ms_max, feed_lag_ms_max=300),
        network=NetworkConfig(delay_ms_min=1, delay_ms_max=3, drop_probability=0.0, duplicate_probability=0.0),
        producers=2, writes_per_producer=40, produce_interval_ms=20, producer_config=PRODUCER_CONFIG,
        consumers=1, consumers_max=1, member_churn_interval_ms=None, reshards_max=0, lanes=(), consumer_lanes=(),
        chaos_ms=chaos_ms, fault_interval_ms=100 * chaos_ms, power_loss=True,
    )
    with SimDisk(rng) as disk:
        scheduler = Scheduler()
        env = Env(rng, options, scheduler, Network(scheduler, rng, options.network), disk)
        cluster = Cluster(env)
        replicas = cluster.coordinator.vps[0].replicas
        nodes = {node.name: node for node in cluster.read_nodes}
        seen: dict[str, object] = {}

        def observe_power_loss() -> None:
            state = cluster.coordinator.vps[0]
            seen["risr"], seen["epoch"] = state.risr, state.leader_epoch
            seen["consumed_end"] = 1 + max(
                (record.offset for record in env.history if isinstance(record, Consumed) and record.stream == "vp0"),
                default=-1)
            scheduler.after(1, watch)

        def watch() -> None:
            """Record who leads the next epoch and its log end when it takes over."""
            state = cluster.coordinator.vps[0]
            replica = cluster.vp_replica(state.leader, 0)
            if (state.leader_epoch > seen["epoch"] and replica is not None and replica.core.is_leader
                    and replica.core.leader_epoch == state.leader_epoch):
                seen["next_leader"], seen["next_log_end"] = state.leader, replica.core.log_end_offset
            else:
                scheduler.after(1, watch)

        def observe_reader_back() -> None:
            replica = cluster.vp_replica(cluster.coordinator.vps[0].leader, 0)
            seen["log_end_back"] = -1 if replica is None else replica.core.log_end_offset

        scheduler.at(POWER_LOSS_MS - 1, observe_power_loss)
        scheduler.at(READER_BACK_MS - 1, observe_reader_back)
        follower = nodes[replicas[1]] if len(replicas) > 1 else None
        for time_ms, step in script(env, nodes[replicas[0]], follower):
            scheduler.at(time_ms, step)
        cluster.run()
        return Outcome(replicas, seen["risr"], seen["epoch"], seen["consumed_end"], seen["next_leader"],
                       seen["next_log_end"], env.counters.get("vp_tails_lost", 0),
                       tuple(r.offset for r in env.history if isinstance(r, Rewound) and r.stream == "vp0"),
                       seen.get("log_end_back", -1),
                       tuple(cluster.check()), cluster.drained)


# --- a lone RISR leader loses power -----------------------------------------------------------


def lone_leader_script(env: Env, leader: ReadNode, follower: ReadNode) -> list[tuple[int, Callable[[], None]]]:
    return [
        (150, lambda: env.network.cut(leader.name, follower.name)),  # the leader is left alone...
        (POWER_LOSS_MS, lambda: leader.crash(power_loss=True)),  # ...loses power...
        (700, leader.boot),  # ...and boots again;
        (800, lambda: env.network.uncut(leader.name, follower.name)),  # then the follower reaches it again.
    ]


@functools.lru_cache(maxsize=None)
def lone_leader_loses_power() -> Outcome:
    return run(lone_leader_script, read_replica_lag_ms_max=100)


def test_the_lone_leader_scenario_is_the_hazard():
    """What the scenario must be for the test below to mean anything, before and after the fix."""
    outcome = lone_leader_loses_power()
    leader = outcome.replicas[0]
    assert outcome.risr_at_power_loss == (leader,), outcome
    assert outcome.consumed_end_at_power_loss > 0, "the consumer read from the lone leader"
    assert outcome.next_leader == leader, "the restarted leader leads the next epoch"
    assert outcome.drained, outcome


def test_a_lone_risr_leader_that_loses_power_still_holds_every_offset_readers_saw():
    outcome = lone_leader_loses_power()
    assert not outcome.anomalies, "\n".join(str(anomaly) for anomaly in outcome.anomalies)
    assert outcome.next_leader_log_end_offset >= outcome.consumed_end_at_power_loss, outcome


# --- the only replica loses power ----------------------------------------------------------------


def only_replica_script(env: Env, leader: ReadNode, follower: None) -> list[tuple[int, Callable[[], None]]]:
    # The consumer is cut off until the feed has refilled the VP past its position: its offset
    # alone then looks fine, and only the epoch it names shows what it read is gone.
    return [(POWER_LOSS_MS - 20, lambda: env.network.cut(CONSUMER, leader.name)),
            (POWER_LOSS_MS, lambda: leader.crash(power_loss=True)), (700, leader.boot),
            (READER_BACK_MS, lambda: env.network.uncut(CONSUMER, leader.name))]


@functools.lru_cache(maxsize=None)
def only_replica_loses_power() -> Outcome:
    return run(only_replica_script, read_replica_lag_ms_max=100, read_replicas=1, chaos_ms=ONLY_REPLICA_CHAOS_MS)


def test_a_vp_with_one_replica_that_loses_power_tells_its_reader_to_read_the_lost_tail_again():
    """``read_replicas=1``: it serves its unflushed tail. Before readers named epochs, the feed
    refilled the lost offsets with other records and the reader skipped those that moved below
    its offset (the nemesis then left such power losses out: 9 of seeds 0..299 failed once it did
    not); after, the reader is told and reads them again: nothing lost, per-key order kept."""
    outcome = only_replica_loses_power()
    assert outcome.consumed_end_at_power_loss > 0, "the consumer read from the only replica"
    assert outcome.log_end_when_reader_returned > outcome.consumed_end_at_power_loss, \
        f"refilled past the reader's offset before it fetched again: only its epoch tells: {outcome}"
    assert outcome.next_leader == outcome.replicas[0]
    assert outcome.vp_tails_lost == 1 and outcome.next_leader_log_end_offset < outcome.consumed_end_at_power_loss, \
        f"the hazard: the reader had read records the log lost: {outcome}"
    assert outcome.rewound_to and outcome.rewound_to[0] <= outcome.next_leader_log_end_offset, \
        f"the reader moved back to (at most) where the lost epoch now ends: {outcome}"
    assert not outcome.anomalies, "\n".join(str(anomaly) for anomaly in outcome.anomalies)
    assert outcome.drained, outcome


# --- a follower loses power, then the leader's process crashes ---------------------------------


def follower_then_leader_script(env: Env, leader: ReadNode, follower: ReadNode) -> list[tuple[int, Callable[[], None]]]:
    return [
        (POWER_LOSS_MS, lambda: follower.crash(power_loss=True)),  # the follower loses power...
        (POWER_LOSS_MS + 20, lambda: leader.crash(power_loss=False)),  # ...the leader crashes before it noticed;
        (700, follower.boot),  # the follower's node is back first,
        (900, leader.boot),  # the leader's later, with every record on its disk.
    ]


@functools.lru_cache(maxsize=None)
def follower_then_leader_fail() -> Outcome:
    return run(follower_then_leader_script, read_replica_lag_ms_max=300)


def test_a_restarted_risr_member_that_lost_its_tail_does_not_lead_while_a_replica_holding_it_may_return():
    """Only restarted RISR members are live: the VP waits for the other RISR member and the longest
    recovered log leads (``failover.decide_failover``); before that rule the follower led with log
    end 100 after the consumer had read to 115 (16 misplaced, 10 acknowledged records never read)."""
    outcome = follower_then_leader_fail()
    assert set(outcome.risr_at_power_loss) == set(outcome.replicas), outcome
    assert outcome.vp_tails_lost == 1, "the follower came back without its unflushed tail"
    assert outcome.consumed_end_at_power_loss > 0, "the consumer read from the leader"
    assert outcome.next_leader == outcome.replicas[0], "the old leader, whose disk kept every record, leads"
    assert not outcome.anomalies, "\n".join(str(anomaly) for anomaly in outcome.anomalies)
    assert outcome.next_leader_log_end_offset >= outcome.consumed_end_at_power_loss, outcome
    assert outcome.drained, outcome


def test_simulated_vp_logs_flush_by_the_policy_a_read_node_opens_them_with():
    production = topic_log_config(TopicConfig())
    assert (VP_LOG_CONFIG.flush_interval_ms, VP_LOG_CONFIG.flush_interval_messages) == \
        (production.flush_interval_ms, production.flush_interval_messages)
    options = options_for_seed(random.Random(SEED))
    assert options.housekeeping_interval_ms == ReadNodeConfig().housekeeping_interval_ms
