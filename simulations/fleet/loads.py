"""What each design asks of its write and read nodes for a workload (pure, vectorised over topics).

**Partitions.** A partition leader is one actor, one event loop on one core, and so are a
feeder and a VP leader: each gets at most ``partition_utilisation_max`` of a core, which sets
the fewest partitions (and VPs) a topic's rate allows.

* Mafka3: physical partitions = max(that, consumers): a consumer group needs one partition
  per member. No VPs. Every group's consumers fetch from the partition leaders, so the read
  load lands on the write nodes.
* Mafka4: physical partitions = that, for the leaders and for the feeders (one per physical
  partition); nothing for consumers. VPs = max(consumers, what the VP leaders' message load
  needs), each with ``read_replicas`` replicas on read nodes, where the feeders run too. The
  feeder fetches from an in-sync follower (DESIGN.md section 6), so the write nodes serve one
  extra reader per partition, never on the leader.

**Requests.** A producer lingers ``linger_ms``: a partition receiving ``r`` msgs/s gets
``r / (1 + r * linger_s)`` produce requests/s. Each wakes every follower's and every reader's
long poll once, so fetches per reader = produce requests. A feeder round (one per produce
request, fewer when the feeder or a VP leader would pass ``partition_utilisation_max``: then a
round takes what piled up, ``feed_rounds``) calls every VP of the topic
(``feeder_calls_every_vp``, a what-if: the runtime before its report interval) or only the
VPs its messages hash to (``touched_vps``, the runtime); only calls with data wake the VP's followers and readers. Message costs
alone may use half of an actor's budget (that sets partitions and VPs); per-call costs are
then bounded by batching, not by more actors.

**Lanes** (``WorkloadConfig.lanes_per_topic``; README "Lanes"). Mafka3 carries lane ``L`` of
topic ``T`` as topic ``T.L`` (``workload.mafka3_topics``): its own physical partitions (one per
member of its groups, as for any Mafka3 topic), their replicas and their per-partition costs.
Mafka4 carries a topic's lanes in its physical partitions (their rate adds to the topic's, which
sizes the partitions as before) and, on the read side, in VPs of their own: ``max(lane_consumers,
what the lane's message load needs)`` per lane. A feeder round then touches the trunk's VPs and
the lanes' VPs each with its share of the round's messages (a lane VP is called only when one of
its lane's messages is in the round), and placement weighs each VP by its share of the topic's
read work. Without lanes every figure is the one before lanes.

**CPU** (cores) = requests * request cost + messages * message cost(size) of every role
(``CalibrationParams``), plus the idle CPU of every actor. **Memory** = actors * their unique
memory. Replication cost is split evenly between the leader (serving the fetch) and the
follower (appending); the feeder's fetch is spread over the followers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from simulations.fleet.config import ModelConfig
from simulations.fleet.params import CalibrationParams
from simulations.fleet.workload import Workload, mafka3_topics

BISECTION_STEPS = 60


class Design(enum.Enum):
    MAFKA3 = "mafka3"
    MAFKA4 = "mafka4"


@dataclass(frozen=True, slots=True)
class TopicLoads:
    """Per-topic arrays for one design. CPU in µs per second (millionths of a core), idle excluded."""

    design: Design
    physical_partitions: np.ndarray  # int64
    virtual_partitions: np.ndarray  # int64, 0 in mafka3
    partition_msgs_per_s: np.ndarray
    partition_requests_per_s: np.ndarray  # produce requests per partition
    feed_rounds_per_s: np.ndarray  # feeder rounds per partition (<= produce requests); mafka3: = requests
    leader_cpu_us_per_s: np.ndarray  # one leader replica
    follower_cpu_us_per_s: np.ndarray  # one follower replica
    leader_requests_per_s: np.ndarray  # handled by the leader actor (produce, follower and reader fetches)
    write_requests_per_s: np.ndarray  # per partition on all write nodes
    feeder_cpu_us_per_s: np.ndarray  # one feeder; 0 in mafka3
    read_cpu_us_per_s: np.ndarray  # the whole topic on read nodes (feeders, VP replicas); 0 in mafka3
    read_requests_per_s: np.ndarray  # the whole topic on read nodes
    topic_msgs_per_s: np.ndarray  # the whole topic, its lanes' messages included
    lane_virtual_partitions: np.ndarray  # int64, the VPs of all the topic's lanes (in virtual_partitions); 0 in mafka3
    lane_msgs_share: np.ndarray  # of the topic's messages, in its lanes; 0 in mafka3 (lanes are topics there)


@dataclass(frozen=True, slots=True)
class SideTotals:
    """What one side (write or read nodes) must carry in total."""

    cpu_cores: float  # including idle
    idle_cpu_cores: float
    requests_per_s: float
    memory_mb: float
    actors: int

    @property
    def service_ms(self) -> float:
        """Mean CPU time per request: the node queues' service time."""
        busy = self.cpu_cores - self.idle_cpu_cores
        return 1000.0 * busy / self.requests_per_s if self.requests_per_s > 0 else 0.0


def touched_vps(virtual_partitions, messages_per_round):
    """Expected VPs that get records from a round of ``b`` messages hashed uniformly over ``V``
    VPs: ``V * (1 - (1 - 1/V) ** b)`` (numbers or arrays)."""
    v = np.maximum(np.asarray(virtual_partitions, dtype=np.float64), 1.0)
    b = np.maximum(np.asarray(messages_per_round, dtype=np.float64), 1.0)
    return v * (1.0 - (1.0 - 1.0 / v) ** b)


def _requests(msgs_per_s, linger_ms: float):
    return msgs_per_s / (1.0 + msgs_per_s * linger_ms / 1000.0)


def _role_cpu(params: CalibrationParams, role: str, requests, msgs, size):
    return requests * getattr(params, f"{role}_request_cpu_us") + msgs * params.message_cpu_us(role, size)


def _fewest_actors(rate: np.ndarray, actor_cpu_us, utilisation_max: float) -> np.ndarray:
    """Fewest actors per topic keeping one actor's CPU, ``actor_cpu_us(msgs_per_s)`` (µs per
    second, increasing in the rate), at most ``utilisation_max`` of a core. The largest rate one
    actor can take is found by bisection on a log scale, vectorised over topics."""
    budget_us = utilisation_max * 1e6
    fits_whole = actor_cpu_us(rate) <= budget_us
    low, high = np.where(fits_whole, rate, np.minimum(rate, 1e-6)), rate.copy()
    for _ in range(BISECTION_STEPS):
        middle = np.sqrt(low * high)
        fits = actor_cpu_us(middle) <= budget_us
        low, high = np.where(fits, middle, low), np.where(fits, high, middle)
    return np.where(fits_whole, 1, np.ceil(rate / low - 1e-9)).astype(np.int64)


class _Topics:
    """One workload's per-topic arrays and the per-actor CPU functions both designs share."""

    def __init__(self, workload: Workload, params: CalibrationParams, config: ModelConfig, mafka3: bool):
        assert not (mafka3 and workload.lanes_total), "mafka3 carries lanes as topics: mafka3_topics first"
        self.trunk_rate, self.size = workload.rate_msgs_per_s, workload.message_bytes
        self.lanes, self.lane_consumers = workload.lanes, workload.config.lane_consumers
        self.with_lanes = bool(workload.lanes_total)
        self.lane_rate = workload.config.lane_traffic_share * self.trunk_rate  # one lane's
        self.rate = self.trunk_rate + workload.lane_msgs_per_s if self.with_lanes else self.trunk_rate
        self.groups, self.consumers = workload.groups.astype(np.float64), workload.consumers
        self.followers, self.read_replicas = workload.config.replication_factor - 1, workload.config.read_replicas
        self.params, self.config = params, config
        # Who fetches from the leader: mafka3's consumer groups; mafka4's feeder only without followers.
        self.readers_on_leader = self.groups if mafka3 else np.full_like(self.rate, 0.0 if self.followers else 1.0)

    def requests(self, msgs):
        return _requests(msgs, self.config.linger_ms)

    def leader_cpu(self, msgs):
        requests, p = self.requests(msgs), self.params
        return (_role_cpu(p, "produce", requests, msgs, self.size)
                + self.followers * _role_cpu(p, "replication", requests, msgs, self.size) / 2
                + self.readers_on_leader * _role_cpu(p, "read", requests, msgs, self.size))

    def size_vps(self, trunk_vps, vp_actors):
        """Fix the topic's VPs: ``trunk_vps`` for its trunk, and per lane the most of its members and
        ``vp_actors(msgs_per_s)`` (what its messages need); returns every VP of the topic."""
        self.trunk_vps = trunk_vps
        self.lane_vps = np.maximum(self.lane_consumers, vp_actors(self.lane_rate)) if self.with_lanes else 0
        return trunk_vps + self.lanes * self.lane_vps

    def touched(self, vps, messages_per_round):
        """Expected VPs a round of ``b`` messages reaches: ``touched_vps`` over the topic's VPs
        without lanes; with them, each trunk VP gets a message with chance (trunk share) / (trunk
        VPs), each lane VP with (lane share) / (lane VPs)."""
        if not self.with_lanes:
            return touched_vps(vps, messages_per_round)
        b = np.maximum(np.asarray(messages_per_round, dtype=np.float64), 1.0)
        trunk, lane = self.trunk_vps.astype(np.float64), self.lane_vps.astype(np.float64)
        trunk_chance = self.trunk_rate / self.rate / trunk
        lane_chance = self.lane_rate / self.rate / lane
        return trunk * (1.0 - (1.0 - trunk_chance) ** b) + self.lanes * lane * (1.0 - (1.0 - lane_chance) ** b)

    def hottest_vp_msgs(self, vps):
        """Messages per second of the topic's busiest VP (even spread within the trunk and within a lane)."""
        if not self.with_lanes:
            return self.rate / vps
        return np.maximum(self.trunk_rate / self.trunk_vps, self.lane_rate / self.lane_vps)

    def calls_per_round(self, vps, messages_per_round):
        if self.config.feeder_calls_every_vp:
            return np.broadcast_to(vps.astype(np.float64), np.shape(messages_per_round))
        return self.touched(vps, messages_per_round)

    def vp_message_cpu(self):
        """Per message of the topic, on its VP replicas (feeding, replication, every group's reads)."""
        p = self.params
        return (p.vp_feed_msg_cpu_us + (self.read_replicas - 1) * p.message_cpu_us("replication", self.size)
                + self.groups * p.message_cpu_us("read", self.size))

    def feed_rounds(self, partitions, vps, msgs, requests):
        """Feeder rounds per partition: one per produce request while the feeder and the VP leaders
        keep up; otherwise the most they take at ``partition_utilisation_max`` (a round then
        fetches what piled up meanwhile: the feeder batches by itself, adding latency). Both
        loads grow with the rounds, so the largest that fits is found by bisection."""
        p, budget = self.params, self.config.partition_utilisation_max * 1e6
        vp_messages = self.hottest_vp_msgs(vps) * self.vp_message_cpu()

        def fits(rounds):
            calls = rounds * self.calls_per_round(vps, msgs / rounds)
            feeder = calls * p.feeder_call_cpu_us + msgs * p.feeder_msg_cpu_us
            vp = partitions * calls / vps * p.vp_feed_call_cpu_us + vp_messages  # a VP hears from every feeder
            return (feeder <= budget) & (vp <= budget)

        enough = fits(requests)
        low, high = np.minimum(requests, 1e-6), requests.copy()
        for _ in range(BISECTION_STEPS):
            middle = np.sqrt(low * high)
            ok = fits(middle)
            low, high = np.where(ok, middle, low), np.where(ok, high, middle)
        return np.where(enough, requests, low)


def topic_loads(design: Design, workload: Workload, params: CalibrationParams, config: ModelConfig) -> TopicLoads:
    """Per-topic loads of ``design``; for Mafka3 one per topic it creates (``mafka3_topics``: a
    topic's lanes follow every topic)."""
    mafka3 = design is Design.MAFKA3
    if mafka3:
        workload = mafka3_topics(workload)
    t = _Topics(workload, params, config, mafka3)
    vps = t.consumers.astype(np.int64)
    partitions = _fewest_actors(t.rate, t.leader_cpu, config.partition_utilisation_max)
    half = config.partition_utilisation_max / 2  # the other half: per-call costs, which batching bounds
    if mafka3:
        partitions = np.maximum(partitions, t.consumers)
    else:
        partitions = np.maximum(partitions, _fewest_actors(t.rate, lambda msgs: msgs * params.feeder_msg_cpu_us, half))

        def vp_actors(rate):
            return _fewest_actors(rate, lambda msgs: msgs * t.vp_message_cpu(), half)

        vps = t.size_vps(np.maximum(vps, vp_actors(t.trunk_rate)), vp_actors)
    msgs = t.rate / partitions
    requests = t.requests(msgs)
    rounds = requests if mafka3 else t.feed_rounds(partitions, vps, msgs, requests)
    replication = _role_cpu(params, "replication", requests, msgs, t.size)
    feeder_fetch = _role_cpu(params, "read", rounds, msgs, t.size)
    follower = np.zeros_like(msgs) if not t.followers else replication / 2 + (0.0 if mafka3 else feeder_fetch / t.followers)
    leader_requests = requests * (1 + t.followers + t.readers_on_leader)
    write_requests = requests * (1 + 2 * t.followers + (t.groups if mafka3 else 0.0)) + (0.0 if mafka3 else rounds)
    zeros = np.zeros_like(msgs)
    if mafka3:
        return TopicLoads(design, partitions, np.zeros_like(partitions), msgs, requests, requests, t.leader_cpu(msgs),
                          follower, leader_requests, write_requests, zeros, zeros, zeros, t.rate,
                          np.zeros_like(partitions), zeros)
    per_round = msgs / rounds
    feeder = rounds * t.calls_per_round(vps, per_round) * params.feeder_call_cpu_us + msgs * params.feeder_msg_cpu_us
    calls = partitions * rounds * t.calls_per_round(vps, per_round)
    with_data = partitions * rounds * t.touched(vps, per_round)
    vp_side = (calls * params.vp_feed_call_cpu_us + t.rate * params.vp_feed_msg_cpu_us
               + (t.read_replicas - 1) * _role_cpu(params, "replication", with_data, t.rate, t.size)
               + t.groups * _role_cpu(params, "read", with_data, t.rate, t.size))
    read_requests = calls + with_data * ((t.read_replicas - 1) + t.groups)
    lane_share = t.lanes * t.lane_rate / t.rate if t.with_lanes else zeros
    return TopicLoads(design, partitions, vps, msgs, requests, rounds, t.leader_cpu(msgs), follower, leader_requests,
                      write_requests, feeder, feeder * partitions + vp_side, read_requests, t.rate,
                      t.lanes * t.lane_vps, lane_share)


def wakeup_cores(params: CalibrationParams, replication_factor: int) -> float:
    """Idle CPU of one partition from its followers waking each other (two or more followers)."""
    return params.idle_wakeup_cpu_cores_per_partition if replication_factor >= 3 else 0.0


def write_totals(loads: TopicLoads, params: CalibrationParams, replication_factor: int) -> SideTotals:
    partitions = loads.physical_partitions.astype(np.float64)
    busy_us = float((partitions * (loads.leader_cpu_us_per_s + (replication_factor - 1) * loads.follower_cpu_us_per_s)).sum())
    partitions_total = int(loads.physical_partitions.sum())
    replicas = partitions_total * replication_factor
    idle = replicas * params.idle_replica_cpu_cores + partitions_total * wakeup_cores(params, replication_factor)
    requests = float((partitions * loads.write_requests_per_s).sum())
    return SideTotals(busy_us / 1e6 + idle, idle, requests, replicas * params.replica_memory_mb, replicas)


def read_totals(loads: TopicLoads, params: CalibrationParams, read_replicas: int) -> SideTotals:
    if loads.design is Design.MAFKA3:
        return SideTotals(0.0, 0.0, 0.0, 0.0, 0)
    vp_replicas = int(loads.virtual_partitions.sum()) * read_replicas
    feeders = int(loads.physical_partitions.sum())
    idle = vp_replicas * params.idle_vp_replica_cpu_cores + feeders * params.idle_feeder_cpu_cores
    memory = vp_replicas * params.vp_replica_memory_mb + feeders * params.feeder_memory_mb
    return SideTotals(float(loads.read_cpu_us_per_s.sum()) / 1e6 + idle, idle, float(loads.read_requests_per_s.sum()),
                      memory, vp_replicas + feeders)
