"""The shape of one simulated run, drawn from its seed: cluster size, configs, faults, workload.

``options_for_seed`` draws every knob from the run's random generator before anything else
happens, so the seed alone fixes the cluster too. Tests override fields (``replace``) to
run a variant, e.g. a broken replica core (``replica_state_class``) or a broken group
rule (``ownership_rule``).
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

    def replace(self, **changes) -> "SimOptions":
        return dataclasses.replace(self, **changes)


def options_for_seed(rng: random.Random) -> SimOptions:
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
