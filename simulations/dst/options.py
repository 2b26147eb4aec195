"""The shape of one simulated run, drawn from its seed: cluster size, configs, faults, workload.

``options_for_seed`` draws every knob from the run's random generator before anything else
happens, so the seed alone fixes the cluster too. Tests override fields (``replace``) to
run a variant, e.g. a broken replica core (``replica_state_class``) or a broken group
rule (``ownership_rule``).

Lanes (``lanes``, ``lane_share``, ``consumer_lanes``) are drawn from a generator of their own,
seeded by the run's generator's state without drawing from it: a seed whose draw has no lanes (or
a run with ``lanes=()``) runs exactly as it did before lanes existed. About three seeds in four
have lanes: one (half of them), two or three, each with fallback "trunk" or "none"; some members read lanes (member 0
always reads the trunk only), and every lane with fallback "none" has a member that reads it
(added past ``consumers_max`` if none of the drawn ones does), so a drained run has read it all.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Callable

from mafka4.client.sender_core import PipelineCore
from mafka4.coordinator.groups.vp_ownership import GroupView, OwnershipPlan, plan_ownership
from mafka4.limits import KiB, ProducerConfig
from mafka4.limits.servers import LogConfig, ReadNodeConfig, ReplicaConfig
from mafka4.physical.replica import ReplicaState
from mafka4.risr.state import RisrConfig
from simulations.dst.network import NetworkConfig


@dataclass(frozen=True, slots=True)
class SimOptions:
    partitions: int
    write_nodes: int
    replication_factor: int
    read_nodes: int
    read_replicas: int
    virtual_partitions: int
    log_config: LogConfig
    replica_config: ReplicaConfig
    risr_config: RisrConfig
    network: NetworkConfig
    producers: int
    # Each producer sends 1 to 3 messages this many times, every ``produce_interval_ms``.
    writes_per_producer: int
    produce_interval_ms: int
    # What every producer runs with: production's ``ProducerConfig``, with the codec resolved
    # as a ``Producer`` resolves it ($MAFKA4_COMPRESSION) and backoffs on the simulator's
    # time scale (leases of 200 ms, not 10 s).
    producer_config: ProducerConfig
    # Group members at the start, and the most that ever run at once (members join and leave).
    consumers: int
    consumers_max: int
    # Mean time between two members joining or leaving during the chaos phase (None: never).
    member_churn_interval_ms: int | None
    # Phase 1 (faults and workload) lasts this long; phase 2 heals and drains.
    chaos_ms: int
    # Mean time between two faults.
    fault_interval_ms: int
    # A crashed machine loses unflushed data (power loss) rather than only its processes.
    power_loss: bool
    # Faulty (down or isolated) write nodes at once, at most.
    faulty_write_nodes_max: int
    # Random reshards stored at most (the group's splits come on top).
    reshards_max: int
    # The layout's ``VirtualConfig.virtual_partitions_max``: splits beyond it are refused.
    virtual_partitions_max: int = 6
    heartbeat_interval_ms: int = 50
    lease_ttl_ms: int = 200
    controller_interval_ms: int = 40
    tick_interval_ms: int = 10
    # How often a read node flushes its VP logs by their policy and checkpoints their HWs.
    housekeeping_interval_ms: int = ReadNodeConfig().housekeeping_interval_ms
    request_timeout_ms: int = 300
    drain_ms_max: int = 15_000
    events_max: int = 400_000
    replica_state_class: type = ReplicaState
    # What every producer's partition pipelines run; tests swap in a broken one.
    pipeline_class: type = PipelineCore
    # What every group member decides with; tests swap in a broken rule.
    ownership_rule: Callable[[GroupView, str], OwnershipPlan] = plan_ownership
    # Lanes of the topic (name, fallback "trunk" or "none"), opened by the first producer that
    # sends in them; empty: every message goes to the trunk.
    lanes: tuple[tuple[str, str], ...] = ()
    # The share of messages a producer sends in a lane (one of ``lanes``, drawn evenly).
    lane_share: float = 0.0
    # Per member index, the lanes it reads ("" the trunk); an index past the end reads the trunk.
    consumer_lanes: tuple[tuple[str, ...], ...] = ()

    def replace(self, **changes) -> "SimOptions":
        return dataclasses.replace(self, **changes)


LANE_NAMES = ("blue", "green", "canary")
LANE_SEEDS_SHARE = 0.75  # of seeds that have lanes


def options_for_seed(rng: random.Random) -> SimOptions:
    options = _options_without_lanes(rng)
    # Its own generator, so that the draws of a seed without lanes (and the run after them) are unchanged.
    return with_lanes(options, random.Random(repr(rng.getstate())))


def with_lanes(options: SimOptions, rng: random.Random) -> SimOptions:
    """``options`` with lanes drawn from ``rng`` (about ``LANE_SEEDS_SHARE`` of the draws; the others unchanged)."""
    if rng.random() >= LANE_SEEDS_SHARE:
        return options
    lanes = tuple((name, rng.choice(("trunk", "none"))) for name in LANE_NAMES[:rng.choice((1, 1, 2, 3))])
    names = [name for name, _ in lanes]
    readers: list[tuple[str, ...]] = [("",)]
    for _ in range(1, options.consumers_max):
        shape = rng.choice(("trunk", "lane", "lane", "trunk+lane", "two lanes"))
        if shape == "trunk":
            readers.append(("",))
        elif shape == "lane" or len(names) == 1:
            readers.append((rng.choice(names),))
        elif shape == "trunk+lane":
            readers.append(("", rng.choice(names)))
        else:
            readers.append(tuple(sorted(rng.sample(names, 2))))
    for name, fallback in lanes:  # a lane with fallback "none" is read by someone, or a drained run never reads it
        if fallback == "none" and not any(name in read for read in readers):
            readers.append((name,))
    return options.replace(
        lanes=lanes, lane_share=rng.choice((0.2, 0.4)), consumer_lanes=tuple(readers), consumers_max=len(readers),
        # every lane is one more VP: keep the trunk's room to split
        virtual_partitions_max=options.virtual_partitions_max + len(lanes),
    )


def _options_without_lanes(rng: random.Random) -> SimOptions:
    flush = rng.choice(("every-batch", "interval", "interval", "never"))
    log_config = LogConfig(
        segment_bytes_max=4 * KiB,
        retention_ms=None,
        flush_interval_ms=rng.choice((5, 30, 200)) if flush == "interval" else None,
        flush_interval_messages=1 if flush == "every-batch" else None,
        index_interval_bytes=rng.choice((64, 256, 1 * KiB)),
    )
    replica_config = ReplicaConfig(
        replica_lag_ms_max=rng.choice((60, 150, 400)),
        min_insync_replicas=rng.choice((1, 2, 2, 3)),
        fetch_bytes_max=rng.choice((1 * KiB, 8 * KiB)),
        fetch_backoff_ms=20,
        producer_batches_remembered=5,
        sequence_wait_ms_max=rng.choice((50, 200)),
    )
    network = NetworkConfig(
        delay_ms_min=1,
        delay_ms_max=rng.choice((3, 10, 30)),
        drop_probability=rng.choice((0.0, 0.01, 0.05)),
        duplicate_probability=rng.choice((0.0, 0.01, 0.05)),
    )
    return SimOptions(
        partitions=rng.randint(1, 2),
        write_nodes=rng.choice((3, 3, 4)),
        replication_factor=3,
        read_nodes=3,
        read_replicas=rng.randint(1, 3),
        virtual_partitions=rng.randint(1, 3),
        log_config=log_config,
        replica_config=replica_config,
        risr_config=RisrConfig(read_replica_lag_ms_max=rng.choice((100, 300)), feed_lag_ms_max=300,
                               catch_up_lag_records_min=rng.choice((0, 20))),
        network=network,
        producers=rng.randint(1, 3),
        writes_per_producer=rng.randint(10, 40),
        produce_interval_ms=rng.choice((5, 20, 50)),
        consumers=(consumers := rng.randint(1, 3)),
        consumers_max=consumers + rng.randint(0, 3),
        member_churn_interval_ms=rng.choice((150, 400, None)),
        chaos_ms=rng.choice((600, 1200, 2000)),
        fault_interval_ms=rng.choice((80, 200, 500)),
        power_loss=rng.random() < 0.7,
        faulty_write_nodes_max=rng.choice((1, 1, 2)),
        reshards_max=rng.choice((0, 1, 3)),
        producer_config=ProducerConfig(
            linger_ms=rng.choice((0, 5, 20)),
            batch_bytes_max=rng.choice((1 * KiB, 4 * KiB)),
            in_flight_batches_max=rng.choice((1, 5)),
            retry_backoff_ms=20,
            retry_backoff_ms_max=100,
        ).resolved(),
    )
