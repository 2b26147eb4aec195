"""Read nodes and VP replicas: the simulator's ``VirtualPartition`` shell.

``VpReplica`` follows ``mafka4.virtual.actor.VirtualPartition`` step by step around the real
cores: a real ``Log`` (on ``SimDisk``), ``EpochHistory`` with ``divergence`` /
``truncation_offset`` (leader-epoch truncation of VP followers), ``FeedProgress`` (idempotent
feeding, rebuilt from the log on every ``become_leader``), ``RisrState`` (RISR and the VP
high watermark, RISR changes counted only after the coordinator holds them) and
``split.encode_vp_batch``. Consumers read only from a RISR member below its high watermark
(``_check_serving``).

Deviation from the actor, on purpose: VP logs are flushed on every batch (a VP replica's
power loss then loses nothing it reported). With lazy flushing, a VP whose only in-sync
replica loses its tail would hand out new records at VP offsets consumers already read,
which no checker here would blame on a bug; that hazard is reported, not simulated.

A ``ReadNode`` hosts one replica per VP it was told about, starts them lazily on the first
role notice (from what is on its disk), and sends heartbeats (its lease) with its boot
incarnation so the coordinator notices restarts.
"""

from __future__ import annotations

from pathlib import Path

from mafka4.errors import MafkaError, NotLeader, ReadReplicaNotInSync, StaleEpoch
from mafka4.limits import LogConfig
from mafka4.physical.checkpoint import write_checkpoint
from mafka4.physical.log import Log
from mafka4.physical.recovery import (
    EPOCH_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT, recovered_epochs, recovered_high_watermark,
)
from mafka4.records import decode_batches, stamp
from mafka4.risr.state import RisrState
from mafka4.virtual.divergence import divergence, truncation_offset
from mafka4.virtual.split import FeedProgress, encode_vp_batch
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

VP_FETCH_BYTES_MAX = 4096
VP_LOG_CONFIG = LogConfig(segment_bytes_max=4096, retention_ms=None, flush_interval_ms=None,
                          flush_interval_messages=1, index_interval_bytes=256)


class VpReplica:
    def __init__(self, env: Env, node: "ReadNode", vp: int, directory: Path):
        self.env = env
        self.node = node
        self.vp = vp
        self.replica_id = node.name
        self.directory = directory
        self.log = Log.open(directory, VP_LOG_CONFIG, env.now_ms)
        self.epochs = recovered_epochs(self.directory, self.log)
        self.high_watermark = recovered_high_watermark(self.directory, self.log)  # a follower's; the leader's is in risr
        self.role = "none"
        self.leader_epoch = -1
        self.leader_id: str | None = None
        self.risr: RisrState | None = None
        self.progress: FeedProgress | None = None
        self._fed_through: dict[int, int] = {}
        self._physical_high_watermarks: dict[int, int] = {}
        self._serving = False
        self._last_leader_contact_ms = 0
        self._fetch: tuple[int, int] | None = None  # (request, sent at)
        self._risr_write: tuple[int, tuple[str, ...], int, int] | None = None
        self._risr_dirty = False
        self._saved_high_watermark = -1

    # --- checkpoints (restarts read them: physical.recovery) ------------------------------

    def _save_epochs(self) -> None:
        write_checkpoint(self.directory / EPOCH_CHECKPOINT, self.epochs.to_text())

    def records(self):
        offset, end = self.log.log_start_offset, self.log.log_end_offset
        while offset < end:
            records = decode_batches(self.log.read(offset, VP_FETCH_BYTES_MAX))
            assert records, f"vp{self.vp}: no whole batch readable at {offset}"
            yield from records
            offset = records[-1].offset + 1

    def current_high_watermark(self) -> int:
        return self.risr.high_watermark if self.risr is not None else self.high_watermark

    def _send(self, destination: str, message: object) -> None:
        self.env.network.send(self.node.name, destination, message)

    # --- roles ---------------------------------------------------------------------------

    def on_become_leader(self, source: str, message: m.VpBecomeLeader) -> None:
        failure = None
        if not (self.role == "leader" and self.leader_epoch == message.leader_epoch):
            if message.leader_epoch < self.leader_epoch:
                failure = m.Failure.of(StaleEpoch(f"vp{self.vp} is at epoch {self.leader_epoch}"))
            else:
                high_watermark = self.current_high_watermark()
                self.role, self.leader_epoch, self.leader_id = "leader", message.leader_epoch, self.replica_id
                self._fetch = None
                self.epochs.assign(message.leader_epoch, self.log.log_end_offset)
                self._save_epochs()
                self.progress = FeedProgress.rebuild(self.records())
                self._fed_through.clear()
                self.risr = RisrState(f"v{self.vp}", self.env.options.risr_config, self.replica_id, message.replicas,
                                      message.risr, self.log.log_end_offset, high_watermark, self.env.now_ms)
        self._send(source, m.RoleResult(message.request_id, self.vp, self.replica_id, message.leader_epoch, failure, virtual=True))

    def on_become_follower(self, source: str, message: m.VpBecomeFollower) -> None:
        failure = None
        same = self.role == "follower" and (self.leader_epoch, self.leader_id) == (message.leader_epoch, message.leader_id)
        if not same:
            if message.leader_epoch < self.leader_epoch:
                failure = m.Failure.of(StaleEpoch(f"vp{self.vp} is at epoch {self.leader_epoch}"))
            else:
                self.high_watermark = self.current_high_watermark()
                self.role, self.leader_epoch, self.leader_id = "follower", message.leader_epoch, message.leader_id
                self.risr, self.progress, self._serving, self._fetch = None, None, False, None
        self._send(source, m.RoleResult(message.request_id, self.vp, self.replica_id, message.leader_epoch, failure, virtual=True))

    def _require_leader(self, leader_epoch: int) -> RisrState:
        if leader_epoch < self.leader_epoch:
            raise StaleEpoch(f"vp{self.vp}: request for epoch {leader_epoch}, replica at {self.leader_epoch}")
        if self.role != "leader" or leader_epoch != self.leader_epoch:
            raise NotLeader(f"vp{self.vp}: {self.replica_id} is not the leader of epoch {leader_epoch}")
        assert self.risr is not None and self.progress is not None
        return self.risr

    # --- leader: feeding -----------------------------------------------------------------

    def on_feed(self, source: str, message: m.Feed) -> None:
        try:
            risr = self._require_leader(message.leader_epoch)
        except MafkaError as error:
            self._send(source, m.FeedAck(message.request_id, -1, 0, 0, m.Failure.of(error)))
            return
        fresh = self.progress.unapplied(message.records)
        if len(fresh) < len(message.records):
            self.env.count("refeeds_dropped")
        if fresh:
            batch = bytearray(encode_vp_batch(fresh))
            stamp(batch, self.log.log_end_offset, self.leader_epoch)
            self.log.append(batch, self.env.now_ms)
            self.progress.applied(fresh)
            risr.leader_appended(self.log.log_end_offset)
        partition = message.partition
        self._fed_through[partition] = max(self._fed_through.get(partition, 0), message.fed_through)
        self._physical_high_watermarks[partition] = message.physical_high_watermark
        risr.on_feed(self._fed_through, self._physical_high_watermarks, self.env.now_ms)
        self._send(source, m.FeedAck(message.request_id, self.progress.last_applied(partition),
                                     self.log.log_end_offset, risr.high_watermark, None))

    def on_feed_position(self, source: str, message: m.FeedPosition) -> None:
        try:
            self._require_leader(message.leader_epoch)
        except MafkaError as error:
            self._send(source, m.FeedPositionResult(message.request_id, -1, m.Failure.of(error)))
            return
        self._send(source, m.FeedPositionResult(message.request_id, self.progress.last_applied(message.partition), None))

    def on_seal_query(self, source: str, message: m.VpSealQuery) -> None:
        try:
            risr = self._require_leader(message.leader_epoch)
        except MafkaError as error:
            self._send(source, m.VpSealAnswer(message.request_id, self.vp, (), 0, 0, m.Failure.of(error)))
            return
        self._send(source, m.VpSealAnswer(message.request_id, self.vp, tuple(sorted(self._fed_through.items())),
                                          self.log.log_end_offset, risr.high_watermark, None))

    # --- leader: followers and the RISR --------------------------------------------------

    def on_replica_fetch(self, source: str, message: m.VpReplicaFetch) -> None:
        try:
            risr = self._require_leader(message.follower_epoch)
            diverging = divergence(self.epochs, self.log.log_end_offset, message.fetch_offset, message.last_fetched_epoch)
            decision = None if diverging is not None else risr.on_replica_fetch(
                message.follower_id, message.fetch_offset, self.env.now_ms)
        except MafkaError as error:
            self._send(source, m.VpReplicaFetchResult(message.request_id, b"", 0, False, None, m.Failure.of(error)))
            return
        if decision is None:
            self._send(source, m.VpReplicaFetchResult(message.request_id, b"", risr.high_watermark, False, diverging, None))
            return
        if decision.risr_changed:
            self._risr_changed()
        offset = message.fetch_offset
        data = self.log.read(offset, VP_FETCH_BYTES_MAX) if offset < self.log.log_end_offset else b""
        self._send(source, m.VpReplicaFetchResult(message.request_id, data, risr.high_watermark, decision.serving, None, None))

    def _risr_changed(self) -> None:
        self._risr_dirty = True
        if self._risr_write is None:
            self._write_risr()

    def _write_risr(self) -> None:
        if self.role != "leader":
            self._risr_dirty, self._risr_write = False, None
            return
        self._risr_dirty = False
        risr, epoch = tuple(sorted(self.risr.risr)), self.leader_epoch
        request_id = self.env.request_id()
        self._risr_write = (request_id, risr, epoch, self.env.now_ms)
        self._send(COORDINATOR, m.IsrWrite(request_id, self.vp, self.replica_id, epoch, risr, virtual=True))

    def on_risr_write_result(self, message: m.IsrWriteResult) -> None:
        if self._risr_write is None or self._risr_write[0] != message.request_id:
            return
        _, risr, epoch, _ = self._risr_write
        self._risr_write = None
        if message.written and self.role == "leader" and self.leader_epoch == epoch:
            self.risr.risr_committed(risr)
            if self._risr_dirty or frozenset(risr) != self.risr.risr:
                self._write_risr()
        elif not message.written:
            self._risr_dirty = False

    # --- follower ------------------------------------------------------------------------

    def _maybe_fetch(self) -> None:
        if self.role != "follower" or self.leader_id is None:
            return
        if self._fetch is not None and self.env.now_ms - self._fetch[1] < self.env.options.request_timeout_ms:
            return
        request_id = self.env.request_id()
        self._fetch = (request_id, self.env.now_ms)
        self._send(self.leader_id, m.VpReplicaFetch(request_id, self.vp, self.replica_id, self.leader_epoch,
                                                    self.log.log_end_offset, self.epochs.latest_epoch))

    def on_replica_fetch_result(self, message: m.VpReplicaFetchResult) -> None:
        if self._fetch is None or self._fetch[0] != message.request_id:
            return
        self._fetch = None
        if message.failure is not None or self.role != "follower":
            return
        if message.diverging is not None:
            offset = truncation_offset(self.epochs, self.log.log_end_offset, self.high_watermark, *message.diverging)
            if offset < self.log.log_end_offset:
                self.env.count("vp_truncations")
            self.log.truncate_to(offset)
            self.epochs.truncate_from(offset)
            self.high_watermark = min(self.high_watermark, offset)
            self._save_epochs()
            self._maybe_fetch()
            return
        if message.data:
            epoch_before = self.epochs.latest_epoch
            for header in self.log.append_batches(message.data, self.env.now_ms):
                if header.leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(header.leader_epoch, header.base_offset)
            if self.epochs.latest_epoch != epoch_before:
                self._save_epochs()
        self.high_watermark = max(self.high_watermark, min(message.high_watermark, self.log.log_end_offset))
        self._serving = message.serving
        self._last_leader_contact_ms = self.env.now_ms
        if message.data:
            self._maybe_fetch()

    # --- consumers -----------------------------------------------------------------------

    def on_fetch(self, source: str, message: m.VpFetch) -> None:
        lag_ms_max = self.env.options.risr_config.read_replica_lag_ms_max
        serving = self.role == "leader" or (
            self.role == "follower" and self._serving and self.env.now_ms - self._last_leader_contact_ms <= lag_ms_max)
        if not serving:
            failure = m.Failure.of(ReadReplicaNotInSync(f"vp{self.vp}: {self.replica_id} serves no reads"))
            self._send(source, m.VpFetchResult(message.request_id, b"", 0, 0, failure))
            return
        high_watermark = self.current_high_watermark()
        try:
            data = self.log.read(message.offset, message.bytes_max, end_offset=high_watermark)
        except MafkaError as error:
            self._send(source, m.VpFetchResult(message.request_id, b"", 0, 0, m.Failure.of(error)))
            return
        self._send(source, m.VpFetchResult(message.request_id, data, high_watermark, self.log.log_end_offset, None))

    # --- timers --------------------------------------------------------------------------

    def tick(self) -> None:
        now_ms = self.env.now_ms
        if self.risr is not None and self.risr.tick(now_ms):
            self._risr_changed()
        if self._risr_write is not None and now_ms - self._risr_write[3] >= self.env.options.request_timeout_ms:
            self._risr_write, self._risr_dirty = None, True
        if self._risr_dirty and self._risr_write is None:
            self._write_risr()
        self._maybe_fetch()
        high_watermark = self.current_high_watermark()
        if high_watermark != self._saved_high_watermark:
            self._saved_high_watermark = high_watermark
            write_checkpoint(self.directory / HIGH_WATERMARK_CHECKPOINT, str(high_watermark))


class ReadNode:
    def __init__(self, env: Env, name: str):
        self.env = env
        self.name = name
        self.up = False
        self.incarnation = 0
        self.replicas: dict[int, VpReplica] = {}

    def boot(self) -> None:
        assert not self.up
        self.up = True
        self.incarnation += 1
        self.env.network.register(self.name, self.handle)
        self._heartbeat(self.incarnation)
        self._tick(self.incarnation)

    def crash(self, power_loss: bool) -> None:
        assert self.up
        self.up = False
        self.env.network.unregister(self.name)
        self.replicas.clear()
        self.env.disk.crash(self.env.disk.directory(self.name), power_loss)

    def _heartbeat(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        self.env.network.send(self.name, COORDINATOR, m.Heartbeat(self.name, incarnation, tuple(sorted(self.replicas))))
        self.env.scheduler.after(self.env.jitter(self.env.options.heartbeat_interval_ms), lambda: self._heartbeat(incarnation))

    def _tick(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        for vp in sorted(self.replicas):
            self.replicas[vp].tick()
        self.env.scheduler.after(self.env.jitter(self.env.options.tick_interval_ms), lambda: self._tick(incarnation))

    def replica(self, vp: int) -> VpReplica:
        if vp not in self.replicas:
            self.replicas[vp] = VpReplica(self.env, self, vp, self.env.disk.directory(self.name, f"vp-{vp}"))
        return self.replicas[vp]

    def handle(self, source: str, message: object) -> None:
        if isinstance(message, (m.VpReplicaFetchResult, m.IsrWriteResult)):
            for vp in sorted(self.replicas):
                replica = self.replicas[vp]
                if isinstance(message, m.IsrWriteResult):
                    replica.on_risr_write_result(message)
                else:
                    replica.on_replica_fetch_result(message)
            return
        if isinstance(message, m.VpBecomeLeader):
            self.replica(message.vp).on_become_leader(source, message)
        elif isinstance(message, m.VpBecomeFollower):
            self.replica(message.vp).on_become_follower(source, message)
        elif message.vp not in self.replicas:
            self._refuse(source, message)
        else:
            handler = _HANDLERS[type(message)]
            handler(self.replicas[message.vp], source, message)

    def _refuse(self, source: str, message: object) -> None:
        failure = m.Failure("ActorUnavailable", True, f"no replica of that VP runs on {self.name}")
        send = self.env.network.send
        if isinstance(message, m.Feed):
            send(self.name, source, m.FeedAck(message.request_id, -1, 0, 0, failure))
        elif isinstance(message, m.FeedPosition):
            send(self.name, source, m.FeedPositionResult(message.request_id, -1, failure))
        elif isinstance(message, m.VpFetch):
            send(self.name, source, m.VpFetchResult(message.request_id, b"", 0, 0, failure))
        elif isinstance(message, m.VpReplicaFetch):
            send(self.name, source, m.VpReplicaFetchResult(message.request_id, b"", 0, False, None, failure))
        elif isinstance(message, m.VpSealQuery):
            send(self.name, source, m.VpSealAnswer(message.request_id, message.vp, (), 0, 0, failure))


_HANDLERS = {
    m.Feed: VpReplica.on_feed,
    m.FeedPosition: VpReplica.on_feed_position,
    m.VpReplicaFetch: VpReplica.on_replica_fetch,
    m.VpFetch: VpReplica.on_fetch,
    m.VpSealQuery: VpReplica.on_seal_query,
}
