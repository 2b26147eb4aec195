"""``Admin``: create, list, describe and delete topics; split, merge and scale virtual partitions; open lanes.

Admin changes nothing itself: it writes an *intent* into etcd and waits for the controller to
carry it out (``metadata.intents``; instructions flow client -> etcd -> controller -> actors);
topics are created, deleted and scaled through ``frontend.topic_intents``, as a node does it for
a client of its port.
The controller starts a new topic's physical replica actors on live write nodes, records the
topic in etcd, all or nothing as readers see it, and has the read nodes host its VPs (no process per VP); splits,
merges and scaling are ``control.resharding``'s, run by the controller. Requests a cluster would
refuse for their shape (a bad name, a config out of range) are refused here before anything is
written. Reading (``list_topics``, ``describe_topic``) goes to etcd and to the live actors.

This is the operator's and the experiments' Admin: a Ray driver that can also inject faults
(``inject_fault``, ``set_network_fault``). A client of the cluster's port does the same topic
changes and describes through ``client.topic_admin``, holding no Ray or etcd.
"""

from __future__ import annotations

import ray

from mafka4.errors import InvalidConfig
from mafka4.frontend import topic_description, topic_intents
from mafka4.frontend.topic_intents import epochs_of
from mafka4.limits import DESCRIBE_TIMEOUT_S, READ_MODE_DEFAULT, RESHARD_INTENT_WAIT_S, TOPIC_INTENT_WAIT_S, ReadMode
from mafka4.metadata import intents
from mafka4.metadata.intents import IntentKind
from mafka4.partition_gate import NetworkFault, set_client_fault
from mafka4.physical.handles import replica_handle
from mafka4.physical.partition_state import TopicMetadata
from mafka4.physical.topics import TopicStore
from mafka4.protocol.topic_admin_api import new_topic_config
from mafka4.runtime.connect import Connection, connect
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.layout import SplitEpoch
from mafka4.virtual.vp_state import VirtualPartitionState


class Admin:
    def __init__(self, connection: Connection | None = None):
        self._connection = connection or connect()
        self._topics = TopicStore(self._connection.store, self._connection.cluster)

    @property
    def cluster(self) -> str:
        return self._connection.cluster

    def _request(self, kind: IntentKind, topic: str, args: dict, wait_s: float):
        return intents.request(self._connection.store, self.cluster, kind, topic, args, wait_s)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, virtual_partitions: int | None = None,
                     read_replicas: int = 1, read_mode: ReadMode | str = READ_MODE_DEFAULT,
                     wait_s: float = TOPIC_INTENT_WAIT_S, **overrides) -> TopicMetadata:
        """Create a topic; ``overrides`` are other ``TopicConfig`` fields (e.g. min_insync_replicas).

        ``read_mode`` is a ``ReadMode`` or its string. ``"mafka4"`` (the default, ``READ_MODE_DEFAULT``,
        as for ``mafka4 topic create``): consumers read ``virtual_partitions`` VPs (default one per
        physical partition), each on ``read_replicas`` read nodes. ``"mafka3"``: consumers read the
        physical partitions; no VPs.
        Waits at most ``wait_s`` for the controller.
        """
        config = new_topic_config(name, partitions, replication_factor, virtual_partitions, read_replicas, read_mode,
                                  **overrides)
        return topic_intents.create_topic(self._connection.store, self.cluster, name, config, wait_s)

    def delete_topic(self, name: str, wait_s: float = TOPIC_INTENT_WAIT_S) -> None:
        """Delete a topic with its data on every node."""
        topic_intents.delete_topic(self._connection.store, self.cluster, name, wait_s)

    def split_virtual_partition(self, topic: str, vp: int, wait_s: float = RESHARD_INTENT_WAIT_S) -> SplitEpoch:
        """Split active VP ``vp`` of a mafka4-mode topic into two (``control.resharding``); returns the new epoch."""
        return epochs_of(self._request(IntentKind.SPLIT, topic, {"vp": vp}, wait_s))[0]

    def merge_virtual_partitions(self, topic: str, first: int, second: int,
                                 wait_s: float = RESHARD_INTENT_WAIT_S) -> SplitEpoch:
        """Merge two active VPs with adjacent hash ranges into one; returns the new epoch."""
        return epochs_of(self._request(IntentKind.MERGE, topic, {"first": first, "second": second}, wait_s))[0]

    def scale(self, topic: str, virtual_partitions: int, wait_s: float = RESHARD_INTENT_WAIT_S) -> list[SplitEpoch]:
        """Split or merge until the topic has ``virtual_partitions`` active VPs; returns the epochs opened."""
        return topic_intents.scale_topic(self._connection.store, self.cluster, topic, virtual_partitions, wait_s)

    def open_lane(self, topic: str, lane: str, fallback: str = "", priority: int = -1,
                  wait_s: float = RESHARD_INTENT_WAIT_S) -> topic_intents.OpenedLane:
        """Open lane ``lane`` of ``topic`` before its first message, to give it a policy: ``fallback``
        "trunk" (default: a group's trunk readers read it while the group has no reader of it) or
        "none" (its messages wait for its own readers), ``priority`` 0-9 (default 0). A lane's
        policy is fixed once it is open; asking an open lane for another is ``InvalidConfig``."""
        return topic_intents.open_lane(self._connection.store, self.cluster, topic, lane,
                                       topic_intents.policy_asked(fallback, priority), wait_s)

    def cancel_delayed(self, topic: str, message_id: str) -> None:
        """Cancel delayed message ``message_id`` ("P:OFFSET") of ``topic``: ``topic_admin.cancel_delayed``."""
        from mafka4.client.topic_admin import cancel_delayed  # here: a client of the cluster's ports

        cancel_delayed(topic, message_id, where=self._connection)

    def list_topics(self) -> list[str]:
        return self._topics.names()

    def topic_metadata(self, name: str) -> TopicMetadata:
        return self._topics.get(name)

    def describe_topic(self, name: str) -> dict:
        """``frontend.topic_description.describe_topic``: what any node answers ``mafka4 topic describe`` with."""
        return topic_description.describe_topic(self._connection.store, self.cluster, name)

    def read_loss(self, name: str) -> dict[int, list[list[int]]]:
        """Per physical partition, the ``[first, end)`` offset ranges deleted before every read node fed them."""
        return topic_description.read_loss(self._connection.store, self.cluster, name)

    def _virtual_states(self, name: str) -> list[VirtualPartitionState]:
        return topic_description.virtual_states(self._connection.store, self.cluster, name)

    def inject_fault(self, topic: str, kind: str = "physical", partition: int = 0, replica: str | None = None,
                     delay_ms: int = 0, paused: bool = False) -> dict:
        """Delay or pause one replica's fetch and serve loops (``mafka4.faults``); (0, False) clears it.

        ``kind="physical"``: a replica of physical partition ``partition``; ``"virtual"``: a
        replica of virtual partition ``partition``. ``replica`` is its node id (default: the leader).
        ``kind="feed"``: read node ``replica`` stops (``paused``) or resumes feeding the topic, as
        if it had stopped (``partition`` and ``delay_ms`` are not used).
        """
        if kind == "physical":
            state = self._topics.get(topic).partitions[partition]
            handle = replica_handle(self.cluster, topic, partition, replica or state.leader)
            call = None if handle is None else handle.set_fault.remote(delay_ms, paused)
        elif kind == "virtual":
            state = next((s for s in self._virtual_states(topic) if s.vp == partition), None)
            if state is None:
                raise InvalidConfig(f"topic {topic!r} has no virtual partition {partition}")
            handle = read_node_handle(self.cluster, replica or state.leader)
            call = None if handle is None else handle.set_fault.remote(VpId(topic, partition), delay_ms, paused)
        elif kind == "feed":
            if replica is None:
                raise InvalidConfig("kind='feed' needs replica=<read node id>")
            state = None
            handle = read_node_handle(self.cluster, replica)
            call = None if handle is None else handle.set_feed_fault.remote(topic, paused)
        else:
            raise InvalidConfig(f"kind={kind!r} is not valid: use 'physical', 'virtual' or 'feed'")
        if call is None:
            node = replica or state.leader
            raise InvalidConfig(f"{node} ({kind} of {topic}, partition {partition}) is not running")
        return ray.get(call, timeout=DESCRIBE_TIMEOUT_S)

    def set_network_fault(self, topic: str, fault: NetworkFault) -> dict[str, str]:
        """Cut or slow the network between nodes (``mafka4.partition_gate``) for every replica actor of
        ``topic``, every read node hosting its VPs and this process's clients; an empty
        ``NetworkFault`` heals it. Per actor: "set", or why not (one that is not running, or
        restarted later, has no fault)."""
        calls, outcome = {}, {}
        for state in self._topics.get(topic).partitions:
            for replica in state.replicas:
                handle = replica_handle(self.cluster, topic, state.partition, replica)
                calls[f"p{state.partition}/{replica}"] = None if handle is None else handle.set_partition.remote(fault)
        for node in sorted({node for state in self._virtual_states(topic) for node in state.replicas}):
            handle = read_node_handle(self.cluster, node)
            calls[node] = None if handle is None else handle.set_partition.remote(fault)
        set_client_fault(fault)
        for name, call in calls.items():
            if call is None:
                outcome[name] = "not running"
                continue
            try:
                ray.get(call, timeout=DESCRIBE_TIMEOUT_S)
                outcome[name] = "set"
            except (ray.exceptions.RayError, TimeoutError) as error:
                outcome[name] = f"{type(error).__name__}: {error}"
        return outcome
