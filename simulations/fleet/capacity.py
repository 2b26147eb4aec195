"""How many write and read nodes each design needs, and the produce tail it then has (pure).

For one design and workload (``loads`` gives what each side must carry):

1. **Resource bound.** Nodes = max(CPU total / (cores * cpu_utilisation_max), memory total /
   (memory_mb * memory_usable_fraction), actors / actors_per_node_max, racks, RF or RR).
2. **Latency bound (write side).** With the load spread evenly over W write nodes (each at
   utilisation CPU total / (W * cores), hosting replicas / W replicas), the produce latency
   of ``latency_samples`` modelled messages (``messages``; drawn in proportion to each
   topic's rate) must have tp999 <= ``produce_tp999_ms_target``. Latency only falls as W grows
   (common random numbers), so the smallest such W is found by doubling and bisection. If even
   unlimited nodes miss the target, ``FleetTargetUnreachable``.
3. **Placement check.** A sample of the partitions is placed rack-aware with balanced leaders
   (``placement``) on a sample of nodes that keeps the fleet's partitions per node: at most
   ``sample_replicas_max`` replicas (the full fleet when it fits; otherwise the sample size is
   reported). Its per-node loads replace the even spread: the tail is recomputed with each
   message's actual leader and follower nodes, and the hottest node must stay below
   ``cpu_utilisation_hottest_max``. If not, the node count grows by ``placement_growth`` and
   the sample is placed again (at most ``placement_rounds_max`` times). Read nodes get the same
   check (VP replicas, RR, rack-aware) without a latency target: their latency is reported as
   end-to-end latency only.

The reported tails (tp50/tp99/tp999 of produce and end-to-end latency) come from the placed sample.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

import numpy as np

from mafka4.errors import FleetTargetUnreachable
from simulations.fleet.config import ModelConfig, NodeSpec
from simulations.fleet.latency import tail_ms
from simulations.fleet.loads import Design, SideTotals, TopicLoads, read_totals, topic_loads, wakeup_cores, write_totals
from simulations.fleet.messages import Context, Draws, end_to_end_ms, pick, produce_ms
from simulations.fleet.params import CalibrationParams
from simulations.fleet.placement import Placement, place
from simulations.fleet.workload import Workload


class Constraint(enum.Enum):
    """What decided a side's node count."""

    MINIMUM = "minimum"  # racks or the replication factor
    CPU = "cpu"
    MEMORY = "memory"
    ACTORS = "actors"
    LATENCY = "latency"  # the produce tp999 target
    PLACEMENT = "placement"  # the placed sample: hottest node or tail


@dataclass(frozen=True, slots=True)
class DesignResult:
    design: Design
    topics: int
    consumers: int  # all members of all groups
    msgs_per_s: float
    physical_partitions: int
    virtual_partitions: int
    write_nodes: int
    read_nodes: int
    actors: int
    write_constraint: Constraint
    read_constraint: Constraint | None  # None: no read nodes (mafka3)
    write_utilisation: float  # mean CPU utilisation of a write node
    read_utilisation: float
    replicas_per_write_node: float
    write_hottest_utilisation: float  # in the placed sample
    placement_sample_nodes: int
    placement_sample_partitions: int
    produce_latency_ms: dict
    end_to_end_latency_ms: dict
    lanes: int  # test lanes of the fleet (mafka3: as many topics more)
    write_actors: int  # replicas of the physical partitions
    read_actors: int  # VP replicas and feeders on read nodes; 0 in mafka3

    @property
    def nodes(self) -> int:
        return self.write_nodes + self.read_nodes


@dataclass(frozen=True, slots=True)
class Placed:
    """A placed sample: fleet item ids, their placement, per-node utilisation and replica count."""

    items: np.ndarray
    placement: Placement
    node_utilisation: np.ndarray
    node_replicas: np.ndarray


@dataclass(frozen=True, slots=True)
class DesignModel:
    """A sized design: its result, and what ``sample_messages`` needs to draw more messages."""

    result: DesignResult
    context: Context
    placed: Placed  # the write side's placed sample at the final node count
    item_topic: np.ndarray  # topic of each physical partition of the fleet
    replication_factor: int
    read_replicas: int


def _resource_nodes(totals: SideTotals, node: NodeSpec, minimum: int) -> tuple[int, Constraint]:
    bounds = {
        Constraint.MINIMUM: minimum,
        Constraint.CPU: math.ceil(totals.cpu_cores / (node.cores * node.cpu_utilisation_max) - 1e-9),
        Constraint.MEMORY: math.ceil(totals.memory_mb / (node.memory_mb * node.memory_usable_fraction) - 1e-9),
        Constraint.ACTORS: math.ceil(totals.actors / node.actors_per_node_max - 1e-9),
    }
    binding = max(bounds, key=lambda c: (bounds[c], -list(bounds).index(c)))  # ties: the first listed
    return bounds[binding], binding


def _balanced_tp999(context: Context, topic: np.ndarray, draws: Draws, write_nodes: int) -> float:
    rho = context.write.cpu_cores / (write_nodes * context.node.cores)
    samples = produce_ms(context, topic, rho, np.full(draws.followers.shape, rho), context.write.actors / write_nodes, draws)
    return tail_ms(samples)["tp999"]


def _latency_nodes(context: Context, topic: np.ndarray, draws: Draws, low: int, config: ModelConfig) -> tuple[int, bool]:
    """Smallest write-node count >= low meeting the tp999 target, and whether latency decided it."""
    target = config.produce_tp999_ms_target
    if _balanced_tp999(context, topic, draws, low) <= target:
        return low, False
    floor = _balanced_tp999(context, topic, draws, config.nodes_max)
    if floor > target:
        raise FleetTargetUnreachable(
            f"{context.loads.design.value}: produce tp999 is {floor:.1f} ms even on {config.nodes_max} write nodes, above "
            f"the target {target} ms (base latency {context.params.produce_base_latency_ms} ms plus the partition "
            f"leaders' own queues); raise produce_tp999_ms_target or lower partition_utilisation_max")
    high = low
    while _balanced_tp999(context, topic, draws, high) > target:
        low, high = high + 1, min(high * 2, config.nodes_max)
    while low < high:  # latency only falls as nodes are added (common random numbers)
        middle = (low + high) // 2
        if _balanced_tp999(context, topic, draws, middle) <= target:
            high = middle
        else:
            low = middle + 1
    return high, True


def _sample_nodes(items_total: int, replicas: int, nodes: int, config: ModelConfig) -> int:
    """Nodes of the placement sample: all, if the fleet fits ``sample_replicas_max``; else as many
    as hold that many replicas at the fleet's replicas per node (but at least ``racks``)."""
    if items_total * replicas <= config.sample_replicas_max:
        return nodes
    per_node = items_total * replicas / nodes
    return min(nodes, max(config.racks, int(config.sample_replicas_max // per_node)))


def _place_sample(item_topic: np.ndarray, leader_cores: np.ndarray, follower_cores: np.ndarray, replicas: int,
                  nodes: int, cores: int, config: ModelConfig, rng: np.random.Generator) -> Placed:
    """Place a uniform sample of the fleet's items that keeps the fleet's items per node."""
    items_total = item_topic.size
    sample_nodes = _sample_nodes(items_total, replicas, nodes, config)
    if sample_nodes == nodes:
        items = np.arange(items_total)
    else:
        count = max(1, round(items_total * sample_nodes / nodes))
        items = np.sort(rng.choice(items_total, size=count, replace=False))
    placement = place(int(items.size), replicas, sample_nodes, config.racks)
    topics = item_topic[items]
    utilisation = placement.node_loads(leader_cores[topics], follower_cores[topics]) / cores
    return Placed(items, placement, utilisation, placement.replicas_per_node())


def _write_cores(loads: TopicLoads, params: CalibrationParams, replication_factor: int) -> tuple[np.ndarray, np.ndarray]:
    """Per topic, the cores one leader replica and one follower replica of a partition use."""
    idle = params.idle_replica_cpu_cores + wakeup_cores(params, replication_factor) / replication_factor
    return loads.leader_cpu_us_per_s / 1e6 + idle, loads.follower_cpu_us_per_s / 1e6 + idle


def _read_cores(loads: TopicLoads, params: CalibrationParams, read_replicas: int) -> np.ndarray:
    """Per VP of the fleet (numbered topic by topic, a topic's trunk VPs before its lanes'), the
    cores one of its replicas uses: its topic's read work (feeders included) spread evenly over
    the topic's VP replicas, or with lanes, the lanes' share of it over the lanes' VP replicas
    and the rest over the trunk's."""
    work = loads.read_cpu_us_per_s / 1e6 + loads.physical_partitions * params.idle_feeder_cpu_cores
    vp_topic = _item_topics(loads.virtual_partitions)
    if not loads.lane_virtual_partitions.any():
        vps = np.maximum(loads.virtual_partitions, 1).astype(np.float64)
        return (work / (vps * read_replicas) + params.idle_vp_replica_cpu_cores)[vp_topic]
    lane_vps = loads.lane_virtual_partitions
    trunk_vps = loads.virtual_partitions - lane_vps
    trunk = work * (1.0 - loads.lane_msgs_share) / (np.maximum(trunk_vps, 1) * read_replicas)
    lane = work * loads.lane_msgs_share / (np.maximum(lane_vps, 1) * read_replicas)
    first = np.concatenate(([0], np.cumsum(loads.virtual_partitions)[:-1]))
    in_lane = np.arange(vp_topic.size) - first[vp_topic] >= trunk_vps[vp_topic]
    return np.where(in_lane, lane[vp_topic], trunk[vp_topic]) + params.idle_vp_replica_cpu_cores


def _placed_messages(context: Context, placed: Placed, item_topic: np.ndarray, draws: Draws):
    """Produce latencies of messages drawn from the placed sample in proportion to partition
    rate; also each message's sample index and write nodes (leader first)."""
    topics = item_topic[placed.items]
    chosen = pick(context.loads.partition_msgs_per_s[topics], draws.pick)
    nodes = np.asarray(placed.placement.replicas)[chosen]
    utilisation = placed.node_utilisation
    produce = produce_ms(context, topics[chosen], utilisation[nodes[:, 0]], utilisation[nodes[:, 1:]],
                         placed.node_replicas[nodes[:, 0]], draws)
    return produce, chosen, nodes


def _rng(seed: int, *tags: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *tags])))


def _grown(nodes: int, config: ModelConfig) -> int:
    return max(nodes + 1, math.ceil(nodes * config.placement_growth))


def _write_nodes(context: Context, workload: Workload, config: ModelConfig, draws: Draws, tag: int):
    """Write nodes by resources, then latency, then the placed sample; returns (nodes, constraint, placed)."""
    rf = workload.config.replication_factor
    nodes, constraint = _resource_nodes(context.write, context.node, max(config.racks, rf))
    nodes, by_latency = _latency_nodes(context, pick(context.loads.topic_msgs_per_s, draws.pick), draws, nodes, config)
    constraint = Constraint.LATENCY if by_latency else constraint
    item_topic = _item_topics(context.loads.physical_partitions)
    leader_cores, follower_cores = _write_cores(context.loads, context.params, rf)
    for attempt in range(config.placement_rounds_max):
        placed = _place_sample(item_topic, leader_cores, follower_cores, rf, nodes, context.node.cores, config,
                               _rng(workload.seed, tag, 1, attempt))
        produce, _, _ = _placed_messages(context, placed, item_topic, draws)
        if (tail_ms(produce)["tp999"] <= config.produce_tp999_ms_target
                and placed.node_utilisation.max() <= context.node.cpu_utilisation_hottest_max):
            return nodes, constraint, placed
        nodes, constraint = _grown(nodes, config), Constraint.PLACEMENT
    raise FleetTargetUnreachable(
        f"{context.loads.design.value}: the placed sample still misses the produce tp999 target "
        f"{config.produce_tp999_ms_target} ms or has a node above {context.node.cpu_utilisation_hottest_max:.0%} CPU "
        f"after {config.placement_rounds_max} rounds of adding nodes; raise placement_rounds_max or placement_growth")


def _read_nodes(context: Context, config: ModelConfig, read_replicas: int, seed: int, tag: int) -> tuple[int, Constraint | None]:
    """Read nodes by resources, grown until the placed VP sample's hottest node is below the bound."""
    if context.loads.design is Design.MAFKA3:
        return 0, None
    nodes, constraint = _resource_nodes(context.read, context.node, max(config.racks, read_replicas))
    cores = _read_cores(context.loads, context.params, read_replicas)  # per VP
    vps = np.arange(cores.size)
    for attempt in range(config.placement_rounds_max):
        placed = _place_sample(vps, cores, cores, read_replicas, nodes, context.node.cores, config,
                               _rng(seed, tag, 2, attempt))
        if placed.node_utilisation.max() <= context.node.cpu_utilisation_hottest_max:
            return nodes, constraint
        nodes, constraint = _grown(nodes, config), Constraint.PLACEMENT
    raise FleetTargetUnreachable(
        f"mafka4: the placed VP sample still has a read node above {context.node.cpu_utilisation_hottest_max:.0%} CPU "
        f"after {config.placement_rounds_max} rounds of adding nodes; raise placement_rounds_max or placement_growth")


def _item_topics(counts: np.ndarray) -> np.ndarray:
    """Topic of every partition (or VP) of the fleet, numbered topic by topic."""
    return np.repeat(np.arange(counts.size), counts)


def model_design(design: Design, workload: Workload, params: CalibrationParams, node: NodeSpec = NodeSpec(),
                 config: ModelConfig = ModelConfig()) -> DesignModel:
    """Size ``design`` for ``workload`` (see the module doc); deterministic for the workload's seed."""
    rf, rr = workload.config.replication_factor, workload.config.read_replicas
    loads = topic_loads(design, workload, params, config)
    context = Context(loads, write_totals(loads, params, rf), read_totals(loads, params, rr), params, node)
    tag = list(Design).index(design)
    draws = Draws(_rng(workload.seed, tag, 0), config.latency_samples, rf, rr)
    write_nodes, write_constraint, placed = _write_nodes(context, workload, config, draws, tag)
    read_nodes, read_constraint = _read_nodes(context, config, rr, workload.seed, tag)
    read_utilisation = context.read.cpu_cores / (read_nodes * node.cores) if read_nodes else 0.0
    context = replace(context, read_utilisation=read_utilisation, read_nodes=read_nodes)
    item_topic = _item_topics(loads.physical_partitions)
    produce, end_to_end, _ = _latencies(context, placed, item_topic, draws)
    result = DesignResult(
        design=design, topics=workload.topics, consumers=workload.consumers_total, msgs_per_s=workload.msgs_per_s_total,
        physical_partitions=int(loads.physical_partitions.sum()), virtual_partitions=int(loads.virtual_partitions.sum()),
        write_nodes=write_nodes, read_nodes=read_nodes, actors=context.write.actors + context.read.actors,
        write_constraint=write_constraint, read_constraint=read_constraint,
        write_utilisation=round(context.write.cpu_cores / (write_nodes * node.cores), 4),
        read_utilisation=round(read_utilisation, 4), replicas_per_write_node=round(context.write.actors / write_nodes, 2),
        write_hottest_utilisation=round(float(placed.node_utilisation.max()), 4),
        placement_sample_nodes=placed.placement.nodes, placement_sample_partitions=int(placed.items.size),
        produce_latency_ms=tail_ms(produce), end_to_end_latency_ms=tail_ms(end_to_end),
        lanes=workload.lanes_total, write_actors=context.write.actors, read_actors=context.read.actors,
    )
    return DesignModel(result, context, placed, item_topic, rf, rr)


def _latencies(context: Context, placed: Placed, item_topic: np.ndarray, draws: Draws):
    """Produce and end-to-end latencies of the drawn messages, and each message's sample index."""
    produce, chosen, nodes = _placed_messages(context, placed, item_topic, draws)
    topic = item_topic[placed.items][chosen]
    return produce, end_to_end_ms(context, produce, topic, nodes, placed.node_utilisation, draws), chosen


def sample_messages(model: DesignModel, rows: int, seed: int) -> dict[str, np.ndarray]:
    """``rows`` modelled messages drawn uniformly from the fleet's traffic (each message equally
    likely), with their partition, VP, a produce time within one modelled second, and latencies."""
    loads = model.context.loads
    draws = Draws(_rng(seed, list(Design).index(loads.design), 3), rows, model.replication_factor, model.read_replicas)
    produce, end_to_end, chosen = _latencies(model.context, model.placed, model.item_topic, draws)
    columns = {"partition": model.placed.items[chosen].astype(np.int64), "produce_time_ms": draws.times * 1000.0,
               "produce_latency_ms": produce, "end_to_end_latency_ms": end_to_end}
    if loads.design is Design.MAFKA4:
        topic = model.item_topic[model.placed.items][chosen]
        vps = loads.virtual_partitions
        first_vp = np.concatenate(([0], np.cumsum(vps)[:-1]))
        columns["virtual_partition"] = first_vp[topic] + np.floor(draws.vp * vps[topic]).astype(np.int64)
    return columns
