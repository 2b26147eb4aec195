"""What ``mafka4 topic describe`` shows: a topic's config, and per partition and per VP what etcd
records beside what the live leader reports.

Served by any node to a client of its port (``TOPIC_DESCRIBE``, ``frontend.topic_handlers``) and
used by ``client.admin.Admin`` from a Ray driver: one description, whoever asks. The leaders are
asked over Ray (this runs in a node's process, or in a driver), each at most
``DESCRIBE_TIMEOUT_S``; a leader that does not answer is described by its error, so one dead
actor never hides the rest of the topic. Blocking: run it off an event loop.
"""

from __future__ import annotations

import ray

from mafka4.limits import DESCRIBE_TIMEOUT_S
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.physical.handles import replica_handle
from mafka4.physical.topics import TopicStore
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.layout import SplitEpoch
from mafka4.virtual.vp_state import VirtualPartitionState
from mafka4.virtual.vp_store import VirtualStore


def describe_topic(store: MetadataStore, cluster: str, name: str) -> dict:
    """Config and, per partition, the etcd state plus what the live leader reports; per VP the same
    from its leader's read node; and the physical offsets lost before a read node fed them.

    ``{"topic", "config": TopicConfig, "partitions": [...], "virtual_partitions": [...], "lanes": [...],
    "read_loss": {partition: [[first, end), ...]]}, "delays"}``; a VP's row names its ``lane`` ("" the trunk),
    and ``lanes`` has a row per open lane (its name, fallback, priority; ``lane_rows``); ``delays`` is
    ``delay_state``'s; a leader's report is its entry's ``live``
    (``{"error": ...}`` if it did not answer, None if it is not running). ``UnknownTopic`` if
    there is no such topic.
    """
    metadata = TopicStore(store, cluster).get(name)
    partitions = []
    for state in metadata.partitions:
        leader = replica_handle(cluster, name, state.partition, state.leader)
        live = None
        if leader is not None:
            try:
                live = ray.get(leader.describe.remote(), timeout=DESCRIBE_TIMEOUT_S)
            except (ray.exceptions.RayError, TimeoutError) as error:
                live = {"error": type(error).__name__}
        partitions.append({**state.to_json(), "partition": state.partition, "live": live})
    virtual, lanes = [], []
    states = virtual_states(store, cluster, name)
    if states:
        config = metadata.config
        layout = VirtualStore(store, cluster).layout(name, config.partitions, config.virtual_config())
        lives = _describe_vp_leaders(cluster, name, states)
        virtual = [{**state.to_json(), "virtual_partition": state.vp, "active": layout.is_active(state.vp),
                    "lane": layout.lane_of(state.vp), "live": lives.get(state.vp)} for state in states]
        lanes = lane_rows(layout.current)
    return {"topic": name, "config": metadata.config, "partitions": partitions, "virtual_partitions": virtual,
            "lanes": lanes, "read_loss": read_loss(store, cluster, name), "delays": delay_state(store, cluster, name)}


def delay_state(store: MetadataStore, cluster: str, name: str) -> dict | None:
    """What the delay scheduler last wrote of topic ``name``'s delayed messages (``keys.delay_state``:
    how many wait, by horizon, and its counts); None if the topic never had one."""
    found = store.get(keys.delay_state(cluster, name))
    return found.value if found is not None else None


def lane_rows(epoch: SplitEpoch) -> list[dict]:
    """A row per open lane of ``epoch``, in opening order: its name, fallback and priority."""
    return [{"lane": lane, "fallback": epoch.lane_policy(lane).fallback, "priority": epoch.lane_policy(lane).priority}
            for lane in epoch.lane_names]


def read_loss(store: MetadataStore, cluster: str, name: str) -> dict[int, list[list[int]]]:
    """Per physical partition, the ``[first, end)`` offset ranges deleted before every read node fed them."""
    losses = VirtualStore(store, cluster).read_losses(name)
    return {p: [[r.first_offset, r.end_offset] for r in loss.ranges] for p, loss in sorted(losses.items())}


def virtual_states(store: MetadataStore, cluster: str, name: str) -> list[VirtualPartitionState]:
    """The recorded state of every VP of topic ``name``, in VP order (none for a mafka3-mode topic)."""
    found = VirtualStore(store, cluster).states(name)
    return [state for _, (state, _) in sorted(found.items())]


def _describe_vp_leaders(cluster: str, name: str, states: list[VirtualPartitionState]) -> dict[int, dict]:
    """Per VP, what its leader's read node reports (or the error reaching it); one call per node."""
    by_node: dict[str, list[int]] = {}
    for state in states:
        by_node.setdefault(state.leader, []).append(state.vp)
    described: dict[int, dict] = {}
    for node, vps in by_node.items():
        handle = read_node_handle(cluster, node)
        if handle is None:
            described.update({vp: {"error": f"read node {node} is not running"} for vp in vps})
            continue
        try:
            answers = ray.get(handle.describe_vps.remote([VpId(name, vp) for vp in vps]), timeout=DESCRIBE_TIMEOUT_S)
        except (ray.exceptions.RayError, TimeoutError) as error:
            described.update({vp: {"error": type(error).__name__} for vp in vps})
            continue
        described.update({vp: answer for vp, answer in zip(vps, answers) if answer is not None})
    return described
