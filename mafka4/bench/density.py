"""The cost of one idle virtual partition, from read-node usage before and after hosting (pure).

``bench.vp_density`` measures every read node process idle without the new topic (before) and
idle while it hosts ``topics`` new topics of ``virtual_partitions`` VPs and ``read_replicas``
replicas each (after; a topic holds at most ``VIRTUAL_PARTITIONS_MAX`` VPs, so more VPs than that
take more topics, each with its physical partitions' actors and, on every read node, one feed
stream per physical partition). The differences, summed over the nodes, are what the VPs cost:

* ``rss_bytes_per_vp`` = sum(RSS after - RSS before) / VPs, and ``rss_bytes_per_vp_replica``
  the same divided by VPs x read replicas (a replica is one log on one node);
* ``idle_cores_per_vp`` and ``idle_cores_per_vp_replica`` the same of CPU cores.

The reference is one bare idle Ray actor, the least a VP costs when it is a process: the ratio
"one bare actor / one idle VP" for RSS and for cores, and for the actor's USS (the pages only it
holds; its RSS also counts library pages shared with every other worker). On a noisy machine a difference can be
zero or negative (memory handed back, less background work than before): a ratio over it is
None, never a made-up number.

The bench's settings live here too, validated on construction, so that the CLI reads them
without importing Ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

from mafka4.errors import InvalidConfig
from mafka4.limits import VIRTUAL_PARTITIONS_MAX

if TYPE_CHECKING:
    from mafka4.virtual.vp_state import VirtualPartitionState

# A read node's idle work comes in passes (housekeeping every second, feed positions every 5 s):
# a window of 30 s averages 30 and 6 of them; a shorter one measures where the passes fall.
WINDOW_S_MIN = 30.0


@dataclass(frozen=True, slots=True)
class VpDensityBenchSettings:
    """A field with a ``help`` in its metadata is an option of ``mafka4 bench vp-density`` (``mafka4.cli.bench``)."""

    virtual_partitions: int = field(default=1024, metadata={"help": "VPs of each topic created"})
    topics: int = field(default=1, metadata={
        "help": f"topics created (a topic holds at most {VIRTUAL_PARTITIONS_MAX:,} VPs; each adds its physical "
                f"partitions' actors)"})
    partitions: int = field(default=2, metadata={"help": "physical partitions"})
    replication_factor: int = 1
    read_replicas: int = field(default=2, metadata={"help": "read replicas of each VP (1: every VP on one read node)"})
    window_s: float = field(default=30.0, metadata={
        "help": f"seconds of each idle measurement, at least {WINDOW_S_MIN:g}"})
    settle_s: float = field(default=10.0, metadata={"help": "seconds between creating the topic and measuring"})
    # Creating the topic and completing every VP's RISR must take at most this long.
    ready_s_max: float = 300.0
    # A test-sized run: windows shorter than WINDOW_S_MIN are allowed, and the report says so.
    smoke: bool = False

    def __post_init__(self) -> None:
        if not self.smoke and self.window_s < WINDOW_S_MIN:
            raise InvalidConfig(f"window_s={self.window_s} is too short to average a read node's idle CPU: use at "
                                f"least {WINDOW_S_MIN:g} s, or --smoke for a test run")
        if self.topics < 1:
            raise InvalidConfig(f"topics={self.topics}: create at least one topic")
        if self.window_s <= 0 or self.settle_s < 0 or self.ready_s_max <= 0:
            raise InvalidConfig(f"window_s={self.window_s}, settle_s={self.settle_s} and ready_s_max="
                                f"{self.ready_s_max} must be positive (settle_s may be 0)")

    @classmethod
    def smoke_sized(cls, **changes) -> "VpDensityBenchSettings":
        """A run of seconds for tests: 16 VPs, 2 s windows."""
        return cls(**{"virtual_partitions": 16, "window_s": 2.0, "settle_s": 1.0, "smoke": True, **changes})


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One read node process, idle, before and after it hosts the topic's VP replicas."""

    rss_bytes_before: int
    rss_bytes_after: int
    cores_before: float
    cores_after: float


def per_vp_costs(nodes: Iterable[NodeUsage], virtual_partitions: int, read_replicas: int) -> dict[str, float]:
    """RSS and idle cores per VP and per VP replica, from the usage of every node hosting them."""
    assert virtual_partitions >= 1 and read_replicas >= 1, (virtual_partitions, read_replicas)
    nodes = list(nodes)
    rss_bytes = sum(node.rss_bytes_after - node.rss_bytes_before for node in nodes)
    cores = sum(node.cores_after - node.cores_before for node in nodes)
    replicas = virtual_partitions * read_replicas
    return {"rss_bytes_per_vp": rss_bytes / virtual_partitions, "rss_bytes_per_vp_replica": rss_bytes / replicas,
            "idle_cores_per_vp": cores / virtual_partitions, "idle_cores_per_vp_replica": cores / replicas}


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None when the denominator is not a positive cost."""
    return numerator / denominator if denominator > 0 else None


def bare_actor_ratios(bare_rss_bytes: int, bare_uss_bytes: int, bare_cores: float,
                      costs: Mapping[str, float]) -> dict[str, float | None]:
    """How many idle VPs cost what one bare idle actor costs: in RSS, in cores, and in the actor's
    unshared memory (USS) against a VP's RSS (RSS counts library pages every worker shares)."""
    return {"bare_actor_vs_vp_rss_ratio": ratio(bare_rss_bytes, costs["rss_bytes_per_vp"]),
            "bare_actor_uss_vs_vp_rss_ratio": ratio(bare_uss_bytes, costs["rss_bytes_per_vp"]),
            "bare_actor_vs_vp_cores_ratio": ratio(bare_cores, costs["idle_cores_per_vp"])}


def risr_complete(states: Iterable["VirtualPartitionState"], virtual_partitions: int, read_replicas: int) -> bool:
    """True once all ``virtual_partitions`` VPs exist with ``read_replicas`` replicas each, every one in the RISR.

    With one replica this holds from creation on (a new VP's RISR is its replicas): it says
    nothing of whether a read node hosts the VP yet; ``hosting_complete`` does."""
    states = list(states)
    return len(states) == virtual_partitions and all(
        len(state.replicas) == read_replicas and set(state.risr) == set(state.replicas) for state in states)


def hosting_complete(hosted_per_node: Mapping[str, int], virtual_partitions: int, read_replicas: int) -> bool:
    """True once the read nodes host every replica of ``virtual_partitions`` VPs (``hosted_per_node``:
    how many of them each node hosts). A node that was late to host them when the topic was
    created, e.g. past the controller's call timeout, hosts them after the controller's repair."""
    return sum(hosted_per_node.values()) >= virtual_partitions * read_replicas
