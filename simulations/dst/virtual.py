"""Read nodes and VP replicas: the simulator's ``ReadNode`` and its hosted VPs.

A VP replica here is production's: ``VpReplica`` owns a ``virtual.hosted_vp.HostedVp`` (the
real ``Log`` on ``SimDisk``, the checkpoints, the pure ``VpReplicaCore`` with its
``RisrState``, ``EpochHistory`` and ``FeedProgress``) and only translates the simulator's
messages into its calls, as ``virtual.read_node.ReadNode`` translates Ray calls:

* ``Feed`` -> ``HostedVp.feed`` then ``core.fed``; ``FeedPosition`` -> ``core.last_applied``;
* ``VpReplicaFetch`` (leader) -> ``answer_follower`` and ``read_for_follower``; its answer
  (follower) -> ``apply_answer``; the follower asks again at once after data or a truncation,
  else on its next tick;
* ``VpFetch`` (consumer) -> ``read``; ``VpSealQuery`` -> ``core.fed_through``,
  ``core.high_watermark``, ``core.log_end_offset``;
* ticks -> ``tick``; housekeeping every ``housekeeping_interval_ms`` -> ``housekeep`` (flush by
  the log's policy, HW checkpoint; no retention: simulated VP logs delete nothing);
* ``Ready.write_risr`` -> an ``IsrWrite`` to the coordinator, one in flight per VP, re-sent
  after ``request_timeout_ms`` without an answer, and ``risr_written`` once it is confirmed
  (``ReadNodeRecords.risr_changed``). ``Ready.wake`` needs nothing: nobody long-polls here, every
  fetch is answered at once.

VP logs flush as in production: ``VP_LOG_CONFIG`` is what a read node opens a topic's VPs with
(``topic_log_config``: an fsync once ``flush_interval_ms`` passed, checked every
``housekeeping_interval_ms``, and on every segment roll), in simulated time. Production runs
housekeeping's fsyncs on a worker thread while feeding goes on; here ``housekeep`` runs its
three steps in a row, so no append lands during an fsync. A read
node's power loss therefore loses the unflushed tails of its VP logs; the bytes are counted
(``vp_lost_bytes``), and when the node boots, every VP log that recovered shorter than it was
is reported in the trace and counted (``vp_tails_lost``, ``vp_records_lost``). Recovery is
production's: ``HostedVp`` opens the log, which cuts a torn tail, and the coordinator sees the
restarted replica (its boot incarnation) and takes it out of the RISR.

A ``ReadNode`` hosts one replica per VP it was told about, opens it lazily on the first role
notice (from what is on its disk), and sends heartbeats (its lease) with its boot
incarnation so the coordinator notices restarts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from mafka4.batch_frame import iter_batches
from mafka4.errors import MafkaError, StaleEpoch
from mafka4.limits import KiB, TopicConfig, replace_config
from mafka4.limits.servers import topic_log_config
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.replica_core import FetchPosition, Ready, ReplicaAnswer, VpReplicaCore, VpRole
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

TOPIC = "t"
VP_FETCH_BYTES_MAX = 4096
# A read node's VP log config (``ReadNode._open``: the topic's ``topic_log_config``), so its flush
# policy is production's; on small segments, which roll (and so flush) often, with a denser
# index, and no retention (the simulator deletes nothing).
VP_LOG_CONFIG = replace_config(topic_log_config(TopicConfig(segment_bytes_max=4 * KiB, retention_ms=None)),
                               index_interval_bytes=256)
# The final checks read whole logs in chunks of this many bytes.
READ_ALL_BYTES_MAX = 1 << 20


class VpReplica:
    """One VP replica of a simulated read node; see the module docstring."""

    def __init__(self, env: Env, node: "ReadNode", vp: int, directory: Path):
        self.env = env
        self.node = node
        self.vp = vp
        self.hosted = HostedVp(VpId(TOPIC, vp), node.name, directory, VP_LOG_CONFIG, env.options.risr_config,
                               env.now_ms, self._on_ready)
        self._fetch: tuple[int, int] | None = None  # (request, sent at)
        self._risr_write: tuple[int, tuple[str, ...], int, int] | None = None  # (request, risr, epoch, sent at)
        self._risr_dirty = False

    @property
    def core(self) -> VpReplicaCore:
        return self.hosted.core

    def _send(self, destination: str, message: object) -> None:
        self.env.network.send(self.node.name, destination, message)

    def read_all(self, end_offset: int) -> bytes:
        """The log's batches from its start up to ``end_offset`` (a batch boundary), for the final checks."""
        chunks, offset = [], self.hosted.log_start_offset
        while offset < end_offset:
            data = self.hosted.read_for_follower(offset, READ_ALL_BYTES_MAX)
            kept = 0
            for position, header in iter_batches(data, check_crc=False):
                if header.next_offset > end_offset:
                    break
                kept, offset = position + header.size_bytes, header.next_offset
            if kept == 0:
                break
            chunks.append(data[:kept])
        return b"".join(chunks)

    # --- roles ---------------------------------------------------------------------------

    def on_become_leader(self, source: str, message: m.VpBecomeLeader) -> None:
        failure = self._change_role(lambda: self.hosted.become_leader(
            message.leader_epoch, message.replicas, message.risr, self.env.now_ms))
        self._send(source, m.RoleResult(message.request_id, self.vp, self.node.name, message.leader_epoch, failure,
                                        virtual=True))

    def on_become_follower(self, source: str, message: m.VpBecomeFollower) -> None:
        failure = self._change_role(lambda: self.hosted.become_follower(message.leader_epoch, message.leader_id))
        self._send(source, m.RoleResult(message.request_id, self.vp, self.node.name, message.leader_epoch, failure,
                                        virtual=True))

    def _change_role(self, change: Callable[[], None]) -> m.Failure | None:
        core = self.core
        before = (core.role, core.leader_epoch, core.leader_id)
        try:
            change()
        except StaleEpoch as error:
            return m.Failure.of(error)
        if (core.role, core.leader_epoch, core.leader_id) != before:
            self._fetch = None  # the answer to a fetch of the previous role would be moot
        return None

    # --- leader: feeding -----------------------------------------------------------------

    def on_feed(self, source: str, message: m.Feed) -> None:
        core, now_ms = self.core, self.env.now_ms
        try:
            appended = self.hosted.feed(message.leader_epoch, message.records, now_ms)
            core.fed(message.leader_epoch, message.partition, message.fed_through, message.physical_high_watermark,
                     now_ms)
            last_applied = core.last_applied(message.leader_epoch, message.partition)
        except MafkaError as error:
            self._send(source, m.FeedAck(message.request_id, -1, 0, 0, m.Failure.of(error)))
            return
        if appended < len(message.records):
            self.env.count("refeeds_dropped")
        self._send(source, m.FeedAck(message.request_id, last_applied, core.log_end_offset, core.high_watermark, None))

    def on_feed_position(self, source: str, message: m.FeedPosition) -> None:
        try:
            last_applied = self.core.last_applied(message.leader_epoch, message.partition)
        except MafkaError as error:
            self._send(source, m.FeedPositionResult(message.request_id, -1, m.Failure.of(error)))
            return
        self._send(source, m.FeedPositionResult(message.request_id, last_applied, None))

    def on_seal_query(self, source: str, message: m.VpSealQuery) -> None:
        core = self.core
        try:
            core.check_leader(message.leader_epoch)
        except MafkaError as error:
            self._send(source, m.VpSealAnswer(message.request_id, self.vp, (), 0, 0, m.Failure.of(error)))
            return
        self.hosted.flush_now()  # as a read node does before it records a sealed end: never fed again
        fed_through = tuple(enumerate(core.fed_through(self.env.options.partitions)))
        self._send(source, m.VpSealAnswer(message.request_id, self.vp, fed_through, core.log_end_offset,
                                          core.high_watermark, None))

    # --- leader: followers and the RISR --------------------------------------------------

    def on_replica_fetch(self, source: str, message: m.VpReplicaFetch) -> None:
        position = FetchPosition(self.node.name, message.follower_epoch, message.fetch_offset,
                                 message.last_fetched_epoch)
        try:
            answer = self.hosted.answer_follower(message.follower_id, position, self.env.now_ms)
        except MafkaError as error:
            self._send(source, m.VpReplicaFetchResult(message.request_id, b"", 0, False, None, m.Failure.of(error)))
            return
        data = self.hosted.read_for_follower(answer.read_from, VP_FETCH_BYTES_MAX)
        self._send(source, m.VpReplicaFetchResult(message.request_id, data, answer.high_watermark, answer.serving,
                                                  answer.diverging, None))

    def _on_ready(self, hosted: HostedVp, ready: Ready) -> None:
        if ready.write_risr is not None:
            self._risr_dirty = True
            self._maybe_write_risr()

    def _maybe_write_risr(self) -> None:
        """Send the current RISR to the coordinator unless a write is in flight (single flight per VP)."""
        core = self.core
        if self._risr_write is not None or not self._risr_dirty:
            return
        self._risr_dirty = False
        if not core.is_leader:
            return
        risr, epoch = tuple(sorted(core.risr)), core.leader_epoch
        request_id = self.env.request_id()
        self._risr_write = (request_id, risr, epoch, self.env.now_ms)
        self._send(COORDINATOR, m.IsrWrite(request_id, self.vp, self.node.name, epoch, risr, virtual=True))

    def on_risr_write_result(self, message: m.IsrWriteResult) -> None:
        if self._risr_write is None or self._risr_write[0] != message.request_id:
            return
        _, risr, epoch, _ = self._risr_write
        self._risr_write = None
        if not message.written:
            return  # the coordinator names another leader or epoch: this replica is fenced
        self.hosted.risr_written(risr, epoch)
        self._maybe_write_risr()

    # --- follower ------------------------------------------------------------------------

    def _maybe_fetch(self) -> None:
        core = self.core
        if core.role is not VpRole.FOLLOWER:
            return
        if self._fetch is not None and self.env.now_ms - self._fetch[1] < self.env.options.request_timeout_ms:
            return
        position = core.fetch_position()
        request_id = self.env.request_id()
        self._fetch = (request_id, self.env.now_ms)
        self._send(position.leader_id, m.VpReplicaFetch(request_id, self.vp, self.node.name, position.leader_epoch,
                                                        position.fetch_offset, position.last_fetched_epoch))

    def on_replica_fetch_result(self, message: m.VpReplicaFetchResult) -> None:
        if self._fetch is None or self._fetch[0] != message.request_id:
            return
        self._fetch = None
        core = self.core
        if message.failure is not None or core.role is not VpRole.FOLLOWER:
            return
        end_before = core.log_end_offset
        answer = ReplicaAnswer(message.high_watermark, message.serving, message.diverging)
        self.hosted.apply_answer(answer, message.data, self.env.now_ms)
        if core.log_end_offset < end_before:
            self.env.count("vp_truncations")
        if message.diverging is not None or message.data:
            self._maybe_fetch()

    # --- consumers -----------------------------------------------------------------------

    def on_fetch(self, source: str, message: m.VpFetch) -> None:
        try:
            read = self.hosted.read(message.offset, message.bytes_max, self.env.now_ms, message.last_epoch)
        except MafkaError as error:
            self._send(source, m.VpFetchResult(message.request_id, b"", 0, 0, m.Failure.of(error)))
            return
        self._send(source, m.VpFetchResult(message.request_id, read.data, read.high_watermark, read.log_end_offset,
                                           None, read.diverging))

    # --- timers --------------------------------------------------------------------------

    def tick(self) -> None:
        now_ms = self.env.now_ms
        self.hosted.tick(now_ms)
        if self._risr_write is not None and now_ms - self._risr_write[3] >= self.env.options.request_timeout_ms:
            self._risr_write, self._risr_dirty = None, True  # no answer: the write may or may not have landed
        self._maybe_write_risr()
        self._maybe_fetch()

    def housekeep(self) -> None:
        self.hosted.housekeep(self.env.now_ms, retention_due=False)


class ReadNode:
    def __init__(self, env: Env, name: str):
        self.env = env
        self.name = name
        self.up = False
        self.incarnation = 0
        self.replicas: dict[int, VpReplica] = {}
        # VP log ends when the node last lost power, to report what its boot recovered.
        self._log_ends_at_power_loss: dict[int, int] = {}

    def boot(self) -> None:
        assert not self.up
        self.up = True
        self.incarnation += 1
        self.env.network.register(self.name, self.handle)
        # Open every VP log on this node's disk (no role yet), as the real read node does when the
        # controller asks for their lengths (``ReadNode.log_end_offsets``).
        root = self.env.disk.directory(self.name)
        if root.is_dir():
            for vp in sorted(int(path.name[3:]) for path in root.glob("vp-*")):
                self.replica(vp)
        self._report_lost_tails()
        self._heartbeat(self.incarnation)
        self._tick(self.incarnation)
        self._housekeep(self.incarnation)

    def crash(self, power_loss: bool) -> None:
        assert self.up
        self.up = False
        self.env.network.unregister(self.name)
        if power_loss:
            self._log_ends_at_power_loss = {vp: replica.hosted.log_end_offset for vp, replica in self.replicas.items()}
        self.replicas.clear()
        lost_bytes = self.env.disk.crash(self.env.disk.directory(self.name), power_loss)
        if lost_bytes:
            self.env.count("vp_lost_bytes", lost_bytes)

    def _report_lost_tails(self) -> None:
        """Every VP log that came back shorter than it was when the node lost power."""
        before, self._log_ends_at_power_loss = self._log_ends_at_power_loss, {}
        for vp, end_before in sorted(before.items()):
            replica = self.replicas.get(vp)
            end_after = replica.hosted.log_end_offset if replica is not None else 0
            if end_after < end_before:
                self.env.count("vp_tails_lost")
                self.env.count("vp_records_lost", end_before - end_after)
                self.env.note(f"{self.name} boots: vp{vp} log recovered to {end_after}, "
                              f"{end_before - end_after} unflushed records lost with the power")

    def _heartbeat(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        log_ends = tuple((vp, replica.hosted.log_end_offset) for vp, replica in sorted(self.replicas.items()))
        self.env.network.send(self.name, COORDINATOR, m.Heartbeat(self.name, incarnation, tuple(sorted(self.replicas)),
                                                                  log_ends))
        self.env.scheduler.after(self.env.jitter(self.env.options.heartbeat_interval_ms), lambda: self._heartbeat(incarnation))

    def _tick(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        for vp in sorted(self.replicas):
            self.replicas[vp].tick()
        self.env.scheduler.after(self.env.jitter(self.env.options.tick_interval_ms), lambda: self._tick(incarnation))

    def _housekeep(self, incarnation: int) -> None:
        if not self.up or incarnation != self.incarnation:
            return
        for vp in sorted(self.replicas):
            self.replicas[vp].housekeep()
        self.env.scheduler.after(self.env.jitter(self.env.options.housekeeping_interval_ms),
                                 lambda: self._housekeep(incarnation))

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
