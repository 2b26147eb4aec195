"""A physical replica's client port: PRODUCE, FETCH and LIST_OFFSETS of its one partition.

Every replica actor of a physical partition serves the data APIs (``protocol.data_api``) on a port
of its own, named in its liveness key, so a producer sends a partition's batches straight to its
leader, as a Kafka producer does, with no hop between. The port authenticates and checks ACLs as
every port does (``frontend.port_security``), from a view of the users and ACL rules only: a
replica is woken by no other change of the cluster's metadata.

- ``PRODUCE`` needs the ``produce`` operation on the topic; ``FETCH`` ``consume``;
  ``LIST_OFFSETS`` ``describe`` (which ``produce`` and ``consume`` imply). A connection has one
  ``FETCH`` out: a newer one replaces it (``frontend.fetch_sessions``).
- ``METADATA``, as every node answers it (``frontend.metadata_handler``), so that a cluster
  without read nodes still answers its clients. The whole view it needs is read and watched
  from the first such request on, not before: where read nodes serve clients, a replica's port
  is asked for data only, and watches nothing but the users and ACLs.
- The consumer groups' APIs (``frontend.group_handlers``), as every node serves them: in a
  cluster without read nodes, the replicas coordinate the groups.
- A request for another partition than the replica's is ``NotLeader`` (retriable): the client's
  metadata is stale; it asks a node again and resends where the answer says.

What a request does is the replica's (``ServedReplica``: the actor's own coroutines, on its
event loop), so a batch that comes through this port is checked, deduplicated and acknowledged
exactly as one from the cluster's own stream.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from mafka4.delays import delayed_topic_of
from mafka4.errors import InvalidConfig, NotLeader
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.fetch_sessions import FetchSessions
from mafka4.frontend.group_handlers import GroupHandlers
from mafka4.frontend.group_sessions import GroupSessions
from mafka4.frontend.metadata_handler import metadata_answer
from mafka4.frontend.port_security import MECHANISMS, PortSecurity
from mafka4.frontend.view_state import Watched
from mafka4.limits import PROTOCOL_FETCH_BYTES_MAX, PROTOCOL_FETCH_WAIT_MS_MAX, Acks
from mafka4.metadata.store import MetadataStore
from mafka4.protocol.data_api import (FetchAnswer, FetchRequest, ListOffsetsAnswer, ListOffsetsRequest,
                                      ProduceAnswer, ProduceRequest)
from mafka4.protocol.messages import ApiKey
from mafka4.protocol.metadata_api import MetadataAnswer, MetadataRequest
from mafka4.protocol.server import ClientPortServer
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType


class ServedReplica(Protocol):
    """What a replica does for the port's requests (``physical.actor.PhysicalPartition``'s own calls)."""

    async def produce(self, batch: bytes, acks: Acks, timeout_ms: int) -> int: ...

    async def fetch(self, offset: int, bytes_max: int, wait_ms_max: int, from_follower: bool): ...

    async def list_offsets(self) -> tuple[int, int]: ...

    async def offset_for_timestamp(self, timestamp_ms: int) -> int | None: ...


class ReplicaPort:
    """The client port of replica ``replica_id`` of ``topic``-``partition``; see the module docstring."""

    def __init__(self, etcd_endpoint: str, cluster: str, topic: str, partition: int, replica_id: str,
                 replica: ServedReplica):
        self._topic, self._partition, self._replica_id = topic, partition, replica_id
        self._replica, self._cluster, self._etcd_endpoint = replica, cluster, etcd_endpoint
        self._store = MetadataStore(etcd_endpoint)
        self._view = ClusterView(self._store, cluster, (Watched.USERS, Watched.ACLS))
        self._security = PortSecurity(self._view)
        self._metadata_view: asyncio.Future | None = None  # of a ClusterView of everything, from the first METADATA on
        self._fetches = FetchSessions()  # one FETCH out per connection: a newer one replaces it
        self.groups = GroupSessions(etcd_endpoint, cluster, f"replica {replica_id} of {topic}-{partition}")
        handlers = {ApiKey.PRODUCE: self._produce, ApiKey.FETCH: self._fetch, ApiKey.LIST_OFFSETS: self._list_offsets,
                    ApiKey.METADATA: self._metadata,
                    **GroupHandlers(self.groups, self._full_view, self._security.check).handlers()}
        self._server = ClientPortServer(handlers, f"client port of replica {replica_id} of {topic}-{partition}",
                                        replica_id, self._security.exchange, MECHANISMS)

    def start_view(self) -> None:
        """Read and watch the users and ACLs (blocks on etcd: run it off the event loop)."""
        self._view.start()

    async def start(self, host: str) -> str:
        """Serve clients on a free port of ``host``; the address, ``host:port``."""
        bound_host, bound_port = await self._server.start(host, 0)
        return f"{bound_host}:{bound_port}"

    @property
    def counters(self) -> dict[str, int]:
        """The server's counters, but ``refusals`` counts the ACLs' (``PortSecurity``) and
        ``protocol_refusals`` the server's own (requests out of turn, APIs not served)."""
        server = self._server.counters
        return {**server, "refusals": self._security.refusals, "protocol_refusals": server["refusals"]}

    def close(self) -> None:
        self._server.close()
        self.groups.close()
        self._view.close()
        self._store.close()
        started = self._metadata_view
        if started is not None:
            if started.done():
                _close_started_view(started)
            else:  # still starting: closed once started, or it would watch etcd for good
                started.add_done_callback(_close_started_view)

    # --- handlers -----------------------------------------------------------------------------

    async def _metadata(self, session: Session, request: MetadataRequest, _buffers) -> tuple[MetadataAnswer, tuple]:
        return await metadata_answer(await self._full_view(), self._security, self._cluster, session, request), ()

    async def _full_view(self) -> ClusterView:
        """The view of everything, started by the first request that needs it."""
        if self._metadata_view is None:
            self._metadata_view = asyncio.ensure_future(asyncio.to_thread(self._start_metadata_view))
        view, _ = await asyncio.shield(self._metadata_view)
        return view

    def _start_metadata_view(self) -> tuple[ClusterView, MetadataStore]:
        store = MetadataStore(self._etcd_endpoint)  # its own: a failed call on a client ends every watch on it
        view = ClusterView(store, self._cluster)
        view.start()
        return view, store

    def _admit(self, session: Session, operation: Operation, topic: str, partition: int) -> None:
        # Producing a delayed message is producing to its topic: the delay topic takes the topic's
        # produce ACL. Reading or describing it is the scheduler's (an admin's) or its own ACLs'.
        delayed = delayed_topic_of(topic) if operation is Operation.PRODUCE else None
        self._security.check(session, operation, ResourceType.TOPIC, delayed or topic)
        if (topic, partition) != (self._topic, self._partition):
            raise NotLeader(f"replica {self._replica_id} serves {self._topic}-{self._partition}, not "
                            f"{topic}-{partition}; refresh the metadata and send where it says")

    async def _produce(self, session: Session, request: ProduceRequest, _buffers) -> tuple[ProduceAnswer, tuple]:
        self._admit(session, Operation.PRODUCE, request.topic, request.partition)
        try:
            acks = Acks(request.acks)
        except ValueError:
            raise InvalidConfig(f"acks={request.acks!r} is none of {[a.value for a in Acks]}") from None
        base_offset = await self._replica.produce(request.batch, acks, request.timeout_ms)
        return ProduceAnswer(base_offset), ()

    async def _fetch(self, session: Session, request: FetchRequest, _buffers) -> tuple[FetchAnswer, tuple]:
        self._admit(session, Operation.CONSUME, request.topic, request.partition)
        if not 1 <= request.bytes_max <= PROTOCOL_FETCH_BYTES_MAX or not 0 <= request.wait_ms_max <= PROTOCOL_FETCH_WAIT_MS_MAX:
            raise InvalidConfig(f"a fetch of bytes_max={request.bytes_max}, wait_ms_max={request.wait_ms_max}: "
                                f"ask for 1 to {PROTOCOL_FETCH_BYTES_MAX} bytes and wait 0 to "
                                f"{PROTOCOL_FETCH_WAIT_MS_MAX} ms")
        result = await self._fetches.run(session.peer, (request.topic, request.partition), self._replica.fetch(
            request.offset, request.bytes_max, request.wait_ms_max, request.from_follower))
        return FetchAnswer(result.data, result.high_watermark, result.log_start_offset, result.log_end_offset), ()

    async def _list_offsets(self, session: Session, request: ListOffsetsRequest,
                            _buffers) -> tuple[ListOffsetsAnswer, tuple]:
        self._admit(session, Operation.DESCRIBE, request.topic, request.partition)
        log_start_offset, high_watermark = await self._replica.list_offsets()
        timestamp_offset = (None if request.timestamp_ms is None
                            else await self._replica.offset_for_timestamp(request.timestamp_ms))
        return ListOffsetsAnswer(log_start_offset, high_watermark, timestamp_offset), ()


def _close_started_view(started: asyncio.Future) -> None:
    """Close the view of everything (and its store) that ``started`` made, if it made one."""
    if not started.cancelled() and started.exception() is None:
        view, store = started.result()
        view.close()
        store.close()
