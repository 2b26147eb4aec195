"""The latency of modelled messages, given where their partition's replicas run (pure).

A message is drawn in proportion to its partition's rate; its latency adds up the waits of
the queues on its path (``latency.queue_tail``), drawn by inverting each tail with uniforms
from ``Draws`` (common random numbers: the same uniforms for every node count tried):

    produce = produce_base + pass * replicas on the leader's node
              + wait(partition leader actor) + wait(leader node)
              + max over the RF-1 followers of wait(follower node)

    mafka3 end_to_end = produce + physical_read_base + wait(leader node, the consumer's fetch)
    mafka4 end_to_end = produce + virtual_read_base + wait(follower node, the feeder's fetch)
                        + feeder delay + its round's CPU time
                        + wait(VP leader's read node) + max over the RR-1 VP followers of wait(read node)
                        + pass * replicas on a read node

The feeder delay is a queue of rounds (M/G/1) while the feeder keeps up with the produce
requests, and the wait for its next round (uniform over the round interval) once it batches.
Not modelled: the VP leader actor's own queue (VP leaders are sized to half a core of messages).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulations.fleet.config import NodeSpec
from simulations.fleet.latency import queue_tail
from simulations.fleet.loads import Design, SideTotals, TopicLoads
from simulations.fleet.params import CalibrationParams


@dataclass(frozen=True, slots=True)
class Context:
    """What the latency of a message depends on besides its own path."""

    loads: TopicLoads
    write: SideTotals
    read: SideTotals
    params: CalibrationParams
    node: NodeSpec
    read_utilisation: float = 0.0
    read_nodes: int = 0


class Draws:
    """Uniforms for ``count`` messages, one stream per queue on the path."""

    def __init__(self, rng: np.random.Generator, count: int, replication_factor: int, read_replicas: int):
        self.pick = rng.random(count)
        self.actor = rng.random(count)
        self.leader = rng.random(count)
        self.followers = rng.random((count, replication_factor - 1))
        self.reader = rng.random(count)
        self.feeder = rng.random(count)
        self.batching = rng.random(count)
        self.vp_leader = rng.random(count)
        self.vp_followers = rng.random((count, read_replicas - 1))
        self.vp = rng.random(count)
        self.times = rng.random(count)


def pick(weights: np.ndarray, uniforms: np.ndarray) -> np.ndarray:
    """Indices drawn in proportion to ``weights`` (inverse CDF of the uniforms)."""
    cumulative = np.cumsum(weights)
    return np.minimum(np.searchsorted(cumulative, uniforms * cumulative[-1], side="right"), weights.size - 1)


def produce_ms(context: Context, topic: np.ndarray, leader_rho, follower_rho, leader_replicas, draws: Draws) -> np.ndarray:
    loads, params, node = context.loads, context.params, context.node
    scv = params.service_scv
    actor_cpu = loads.leader_cpu_us_per_s[topic]
    actor_service_ms = actor_cpu / np.maximum(loads.leader_requests_per_s[topic], 1e-12) / 1000
    actor = queue_tail(1, actor_cpu / 1e6, actor_service_ms, scv).wait_ms(draws.actor)
    leader = queue_tail(node.cores, leader_rho, context.write.service_ms, scv).wait_ms(draws.leader)
    followers = 0.0
    if draws.followers.shape[1]:
        followers = queue_tail(node.cores, follower_rho, context.write.service_ms, scv).wait_ms(draws.followers).max(axis=1)
    return params.produce_base_latency_ms + params.pass_ms_per_replica * leader_replicas + actor + leader + followers


def end_to_end_ms(context: Context, produce: np.ndarray, topic: np.ndarray, nodes: np.ndarray,
                  node_utilisation: np.ndarray, draws: Draws) -> np.ndarray:
    """``nodes``: each message's write nodes, leader first; ``node_utilisation`` of those nodes."""
    loads, params, node, write, read = context.loads, context.params, context.node, context.write, context.read
    scv = params.service_scv
    if loads.design is Design.MAFKA3:  # the consumer's fetch is served by the leader's node
        reader = queue_tail(node.cores, node_utilisation[nodes[:, 0]], write.service_ms, scv).wait_ms(draws.reader)
        return produce + params.physical_read_base_latency_ms + reader
    source = nodes[:, 1] if nodes.shape[1] > 1 else nodes[:, 0]  # the feeder reads a follower
    fetch = queue_tail(node.cores, node_utilisation[source], write.service_ms, scv).wait_ms(draws.reader)
    feeder_cpu = loads.feeder_cpu_us_per_s[topic]
    rounds = np.maximum(loads.feed_rounds_per_s[topic], 1e-12)
    round_ms = feeder_cpu / rounds / 1000
    batching = rounds < loads.partition_requests_per_s[topic]
    waiting = queue_tail(1, feeder_cpu / 1e6, round_ms, scv).wait_ms(draws.feeder)
    feeder = np.where(batching, draws.batching * 1000.0 / rounds, waiting) + round_ms
    vp_leader = queue_tail(node.cores, context.read_utilisation, read.service_ms, scv).wait_ms(draws.vp_leader)
    vp_followers = 0.0
    if draws.vp_followers.shape[1]:
        vp_followers = queue_tail(node.cores, context.read_utilisation, read.service_ms, scv).wait_ms(
            draws.vp_followers).max(axis=1)
    read_pass = params.pass_ms_per_replica * read.actors / max(context.read_nodes, 1)
    return produce + params.virtual_read_base_latency_ms + fetch + feeder + vp_leader + vp_followers + read_pass
