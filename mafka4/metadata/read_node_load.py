"""What a read node reports of its own load: the inputs of the controller's read-node scaling.

Issue 38 sizes the read side by the consumers' load, never the write side: the controller asks
Ray's autoscaler for more read nodes when VP load per read node passes stated bounds, and
releases a node that stays idle. Three measures, each taken by the node itself over its last
report window (a node knows its own work; the controller sees only what is reported):

* ``hosted_vp_replicas`` - replicas of open VPs the node hosts (leaders and followers; VPs
  neither sealed nor retired: the ones that are fed and read);
* ``fed_bytes_per_s`` - bytes of committed physical records the node split into its VPs' logs,
  per second;
* ``fetch_cpu_cores`` - CPU seconds per second the node spent answering consumers' fetches
  (1.0 = one core busy).

Besides, ``sealed_vp_replicas``: replicas of sealed VPs the node hosts (closed by a split or a
merge and complete: never fed again, read only while their group drains them or a consumer
replays them, retired once their newest record passes the topic's retention, 7 days by
default). Shown, never a reason to add a node or to keep one: counted with the open ones, a group
that grew (its splits close VPs) and then shrank kept its added read nodes until that retention.
A retired VP's replica, dropped from its node right after, counts here until then.

A report lives at ``keys.read_node_load(cluster, node_id)``, bound to the node's liveness lease,
so a node that dies takes its report with it. Values are JSON; ``from_json`` refuses a report
that does not hold together, naming the field.

Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ReadNodeLoad:
    """One read node's load over ``window_ms`` ending at ``measured_at_ms`` (its wall clock)."""

    node_id: str
    hosted_vp_replicas: int
    fed_bytes_per_s: float
    fetch_cpu_cores: float
    window_ms: int
    measured_at_ms: int
    sealed_vp_replicas: int = 0

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ValueError("a read node load report needs a node_id")
        for name in ("hosted_vp_replicas", "sealed_vp_replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"read node {self.node_id}: {name} must be an integer >= 0, not {value!r}")
        for name in ("fed_bytes_per_s", "fetch_cpu_cores"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"read node {self.node_id}: {name} must be a finite number >= 0, not {value!r}")
        if not isinstance(self.window_ms, int) or self.window_ms <= 0:
            raise ValueError(f"read node {self.node_id}: window_ms must be an integer > 0, not {self.window_ms!r}")
        if not isinstance(self.measured_at_ms, int) or self.measured_at_ms < 0:
            raise ValueError(f"read node {self.node_id}: measured_at_ms must be an integer >= 0, "
                             f"not {self.measured_at_ms!r}")

    def to_json(self) -> dict:
        return {"node_id": self.node_id, "hosted_vp_replicas": self.hosted_vp_replicas,
                "fed_bytes_per_s": self.fed_bytes_per_s, "fetch_cpu_cores": self.fetch_cpu_cores,
                "window_ms": self.window_ms, "measured_at_ms": self.measured_at_ms,
                "sealed_vp_replicas": self.sealed_vp_replicas}

    @classmethod
    def from_json(cls, value: dict) -> "ReadNodeLoad":
        fields = ("node_id", "hosted_vp_replicas", "fed_bytes_per_s", "fetch_cpu_cores", "window_ms", "measured_at_ms")
        missing = [name for name in fields if name not in value]
        if missing:
            raise ValueError(f"read node load report {value!r} lacks {', '.join(missing)}")
        # A node from before sealed replicas were told apart reports no "sealed_vp_replicas": 0, and
        # its "hosted_vp_replicas" counts every replica it hosts, sealed ones too (the measure as it
        # was: such a node may keep the read nodes up until its sealed VPs retire, never fewer).
        return cls(**{name: value[name] for name in fields}, sealed_vp_replicas=value.get("sealed_vp_replicas", 0))
