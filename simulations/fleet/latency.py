"""Queueing tails and the latency of one modelled message (pure; randomness comes in as uniforms).

**A queue's waiting time.** A node is an M/G/c queue: ``c`` cores, utilisation ``rho`` (all CPU
it burns, idle loops included, over its capacity), mean CPU time per request ``service_s``,
squared coefficient of variation ``scv`` of that time. The wait is 0 with probability
1 - C and otherwise exponential, the standard heavy-traffic form:

    P(wait > t) = C * exp(-decay * t),  C = ErlangC(c, rho),  decay = c * (1 - rho) / service_s * 2 / (1 + scv)

For c = 1 (one actor's event loop: a partition leader, a feeder) C = rho and the mean wait
is Pollaczek-Khinchine's rho (1 + scv) service_s / (2 (1 - rho)). A queue at rho >= 1 has no
steady state; its wait is ``UNSTABLE_WAIT_MS`` so any target fails.

**One message** (acks=all; ``capacity`` fills in the parameters per design):

    produce_latency = produce_base + pass * replicas_on_leader_node
                      + wait(partition leader actor) + wait(leader node)
                      + max over the RF-1 followers of wait(follower node)

    mafka3 end_to_end = produce_latency + physical_read_base + wait(leader node)
    mafka4 end_to_end = produce_latency + virtual_read_base + wait(write node the feeder reads)
                        + wait(feeder actor) + wait(VP leader's read node)
                        + max over the RR-1 VP followers of (wait(read node)) + pass * replicas_on_read_node

``pass`` is the calibrated latency per replica a node hosts. Waits are drawn by inverting the
tail with given uniforms, so the same uniforms give latencies that only fall as nodes are
added (common random numbers: the node-count search is monotone and exactly repeatable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UNSTABLE_WAIT_MS = 1e7  # the wait of a queue with no steady state (rho >= RHO_STABLE_MAX)
RHO_STABLE_MAX = 0.999


def erlang_c(servers: int, utilisation: np.ndarray | float) -> np.ndarray:
    """Probability that an arrival waits in an M/M/c queue, by the Erlang-B recursion (stable)."""
    rho = np.clip(np.asarray(utilisation, dtype=np.float64), 0.0, RHO_STABLE_MAX)
    offered = rho * servers
    blocking = np.ones_like(rho)
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    return blocking / (1.0 - rho * (1.0 - blocking))


@dataclass(frozen=True, slots=True)
class QueueTail:
    """The waiting-time tail of queues (arrays broadcast): P(wait > t) = wait_probability * exp(-decay_per_ms * t)."""

    wait_probability: np.ndarray
    decay_per_ms: np.ndarray
    unstable: np.ndarray  # bool: rho >= RHO_STABLE_MAX

    def wait_ms(self, uniforms: np.ndarray) -> np.ndarray:
        """Inverse-tail draws: 0 when u >= P(wait > 0), else ln(P / u) / decay."""
        u = np.maximum(uniforms, 1e-300)
        waits = np.where(u < self.wait_probability, np.log(self.wait_probability / u) / self.decay_per_ms, 0.0)
        return np.where(self.unstable, UNSTABLE_WAIT_MS, waits)

    def quantile_ms(self, level: float) -> np.ndarray:
        """Waiting time not exceeded with probability ``level``."""
        tail = 1.0 - level
        waits = np.where(self.wait_probability > tail, np.log(self.wait_probability / tail) / self.decay_per_ms, 0.0)
        return np.where(self.unstable, UNSTABLE_WAIT_MS, waits)


def queue_tail(servers: int, utilisation: np.ndarray | float, service_ms: np.ndarray | float, scv: float) -> QueueTail:
    rho = np.asarray(utilisation, dtype=np.float64)
    service = np.maximum(np.asarray(service_ms, dtype=np.float64), 1e-9)
    unstable = rho >= RHO_STABLE_MAX
    capped = np.minimum(rho, RHO_STABLE_MAX)
    probability = capped if servers == 1 else erlang_c(servers, capped)
    decay = servers * (1.0 - capped) / service * 2.0 / (1.0 + scv)
    probability, decay, unstable = np.broadcast_arrays(probability, decay, unstable)
    return QueueTail(probability, decay, unstable)


def tail_ms(samples_ms: np.ndarray) -> dict[str, float]:
    """Nearest-rank tp50/tp99/tp999 of modelled latencies (``mafka4.bench.stats``' definition)."""
    from mafka4.bench.stats import nearest_rank_index

    ordered = np.sort(samples_ms)
    return {name: round(float(ordered[nearest_rank_index(level, ordered.size)]), 3)
            for name, level in (("tp50", "50"), ("tp99", "99"), ("tp999", "99.9"))}
