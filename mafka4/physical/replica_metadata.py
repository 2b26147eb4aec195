"""``ReplicaMetadata``: what one physical-partition replica actor keeps in and reads from etcd.

The etcd side of ``physical.actor.PhysicalPartition``, so that the actor is its Ray and asyncio
shell only. It owns the replica's ``MetadataStore`` (opened on first use, closed with it) and:

* Liveness: a key under the replica's own lease (``keys.replica_liveness``), refreshed every third
  of ``replica_lease_ttl_s`` by a ``LeaseTask`` (written again under a new lease after an etcd
  outage expired it), from the replica's first role on. When the actor dies the key expires and
  the controller notices. Its value names where the replica serves clients (``client``) and
  Prometheus metrics (``metrics``, ``metrics.targets``), each None until it serves.
* ISR changes (``Ready.write_isr``): written to the partition's key by compare-and-swap
  (``TopicStore.record_isr``: only while the key names this replica as leader of this epoch, with
  the eligible leader replicas the ISR implies) before the core may count the new ISR
  (``ReplicaState.isr_committed``); a leader fenced by a newer epoch acknowledges nothing. One
  write in flight at a time: an ``InSyncRecorder``, which writes a read node's RISRs too. What to
  write and what to do once written are the actor's callbacks (``PhysicalReplica.isr_to_write``
  and ``isr_written``).
* The read nodes' feed positions of the partition (``keys.feed_positions_prefix``), which
  retention must not pass in a "mafka4"-mode topic.

``read_feed_positions`` blocks on etcd (the actor runs it in its executor) and raises
``CoordinatorUnavailable`` while etcd does not answer; the ISR writes and the lease run in tasks
of their own on the actor's event loop, which retry. The data path goes on regardless.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from mafka4.limits import IN_SYNC_WRITE_BACKOFF_S
from mafka4.limits.servers import ReplicaConfig
from mafka4.log.read_loss import feed_position_from_json
from mafka4.metadata import keys
from mafka4.metadata.in_sync_recorder import InSyncRecorder, Members
from mafka4.metadata.lease_holder import LeaseHolder, LeaseTask
from mafka4.metadata.store import MetadataStore
from mafka4.metrics.targets import METRICS_FIELD
from mafka4.physical.topics import TopicStore


class ReplicaMetadata:
    """The etcd side of one replica actor; see the module docstring."""

    def __init__(self, cluster: str, topic: str, partition: int, replica_id: str, etcd_endpoint: str,
                 replica_config: ReplicaConfig, isr_to_write: Callable[[], tuple[Iterable[str], int] | None],
                 isr_written: Callable[[Members, int], None]):
        self._cluster, self._topic, self._partition = cluster, topic, partition
        self._replica_id = replica_id
        self._etcd_endpoint = etcd_endpoint
        self._replica_config = replica_config
        self._partition_name = f"{topic}-{partition}"
        self._store: MetadataStore | None = None
        self._liveness: LeaseTask | None = None
        self.client_address: str | None = None  # host:port of the replica's client port, once serving
        self.metrics_address: str | None = None  # host:port of its metrics server, once serving
        self._isr_recorder = InSyncRecorder(self._partition_name, "ISR", replica_id, isr_to_write, self._write_isr,
                                            isr_written, IN_SYNC_WRITE_BACKOFF_S)

    def store(self) -> MetadataStore:
        """The replica's connection to etcd, opened on first use."""
        return self._metadata_store()

    def _metadata_store(self) -> MetadataStore:
        if self._store is None:
            self._store = MetadataStore(self._etcd_endpoint)
        return self._store

    # --- liveness ------------------------------------------------------------------------

    def start_liveness(self) -> None:
        """Keep the liveness key under this replica's lease from now on (once; on the event loop)."""
        if self._liveness is not None:
            return
        self._liveness = LeaseTask(LeaseHolder(
            self._metadata_store(), self._replica_config.replica_lease_ttl_s,
            f"{self._partition_name}: liveness of replica {self._replica_id}",
            on_granted=self._write_liveness, regrant=True, keys=[self._liveness_key()]))
        self._liveness.start()

    def _liveness_key(self) -> str:
        return keys.replica_liveness(self._cluster, self._topic, self._partition, self._replica_id)

    def _write_liveness(self, lease) -> None:
        value = {"replica_id": self._replica_id, "pid": os.getpid(), "client": self.client_address,
                 METRICS_FIELD: self.metrics_address}
        self._metadata_store().put(self._liveness_key(), value, lease=lease)

    # --- the ISR -------------------------------------------------------------------------

    def isr_changed(self) -> None:
        """The leader's ISR changed: record it (after the write in flight, if one is)."""
        self._isr_recorder.changed()

    def _write_isr(self, isr: Members, leader_epoch: int) -> bool:
        topics = TopicStore(self._metadata_store(), self._cluster)
        return topics.record_isr(self._topic, self._partition, self._replica_id, leader_epoch, isr,
                                 self._replica_config.min_insync_replicas)

    # --- retention -----------------------------------------------------------------------

    def read_feed_positions(self) -> list[int]:
        """The feed position every read node recorded for this partition."""
        prefix = keys.feed_positions_prefix(self._cluster, self._topic, self._partition)
        return [feed_position_from_json(item.value) for item in self._metadata_store().get_prefix(prefix)]

    def close(self) -> None:
        """Stop writing the ISR and keeping the lease (the key expires with it); close the store."""
        self._isr_recorder.close()
        if self._liveness is not None:
            self._liveness.close()
        if self._store is not None:
            self._store.close()
