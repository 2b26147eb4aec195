"""Physical-partition replicas: the simulator's ``PhysicalPartition`` shell.

``SimReplica`` is to the simulator what ``mafka4.physical.actor.PhysicalPartition`` is to Ray:
a thin shell that turns messages into calls of the real cores and does the disk and network
work they decide on. It builds the real ``ReplicaStorage`` (the log and its checkpoints, on
``SimDisk``) and the real ``ReplicaState`` (or the class in ``options.replica_state_class``)
and follows the actor step by step: recovery, the sequence gate (``sequencer.SequenceGate``:
an early batch waits for its turn up to ``sequence_wait_ms_max``), produce with acks=all
waiters, serving follower fetches, the follower's fetch/truncate/append loop, the ISR
compare-and-swap before ``isr_committed``, ticks, flushes and checkpoints. What the actor
does with asyncio (long polls, tasks) happens here on timers; no protocol decision is made
here that the cores do not make.

The machine that hosts replicas is ``write_node.WriteNode``.
"""

from __future__ import annotations

from pathlib import Path

from mafka4.batch_frame import NO_PRODUCER_ID, check_single_batch, stamp
from mafka4.errors import CorruptRecord, MafkaError, NotLeader
from mafka4.limits import Acks
from mafka4.log.replica_storage import ReplicaStorage
from mafka4.physical.follower import apply_leader_answer
from mafka4.physical.replica import ReplicaState, Role
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 100


class SimReplica:
    """One replica of one physical partition on one write node; see the module docstring."""

    def __init__(self, env: Env, node, partition: int, directory: Path):
        self.env = env
        self.node = node
        self.partition = partition
        self.replica_id = node.name
        options = env.options
        self.storage = ReplicaStorage(directory, options.log_config, env.now_ms)
        self.log = self.storage.log
        self.state: ReplicaState = options.replica_state_class(
            self.replica_id, f"t-{partition}", options.replica_config,
            self.log.log_end_offset, self.storage.recovered_high_watermark(),
            self.storage.recovered_epochs(), self.storage.recovered_producers(options.replica_config),
        )
        self._waiters: list[tuple[int, int, int, str, int]] = []  # (next offset, epoch, base offset, client, request)
        self._parked: list[tuple[int, str, m.Produce]] = []  # (deadline, client, request): the sequence gate
        self._fetch: tuple[int, int, str, int] | None = None  # (request, epoch, leader, sent at)
        self._isr_write: tuple[int, tuple[str, ...], int, int] | None = None  # (request, isr, epoch, sent at)
        self._isr_dirty = False
        self._next_checkpoint_ms = env.now_ms

    def close(self) -> None:
        """A clean stop (the actor's ``close``): flush, mark the log clean."""
        self._fail_waiters(NotLeader(f"replica {self.replica_id} is shutting down"))
        self.storage.close()

    def _send(self, destination: str, message: object) -> None:
        self.env.network.send(self.node.name, destination, message)

    # --- roles ---------------------------------------------------------------------------

    def on_become_leader(self, source: str, message: m.BecomeLeader) -> None:
        failure = None
        if not (self.state.role is Role.LEADER and self.state.leader_epoch == message.leader_epoch):
            try:
                self.state.become_leader(message.leader_epoch, message.replicas, message.isr, self.env.now_ms)
            except MafkaError as error:
                failure = m.Failure.of(error)
            else:
                self._fetch = None
                self.storage.save_epochs(self.state.epochs)
                self._release()
        self._send(source, m.RoleResult(message.request_id, self.partition, self.replica_id, message.leader_epoch, failure))

    def on_become_follower(self, source: str, message: m.BecomeFollower) -> None:
        failure = None
        try:
            self.state.become_follower(message.leader_epoch, message.leader_id)
        except MafkaError as error:
            failure = m.Failure.of(error)
        else:
            self._fail_waiters(NotLeader(f"{self.replica_id} now follows {message.leader_id}"))
            if self._fetch is not None and self._fetch[1:3] != (message.leader_epoch, message.leader_id):
                self._fetch = None
        self._send(source, m.RoleResult(message.request_id, self.partition, self.replica_id, message.leader_epoch, failure))

    # --- leader: produce -----------------------------------------------------------------

    def on_produce(self, source: str, message: m.Produce) -> None:
        try:
            header = check_single_batch(message.batch)
        except CorruptRecord as error:
            self._send(source, m.ProduceResult(message.request_id, None, m.Failure.of(error)))
            return
        if self._is_early(header):
            deadline = self.env.now_ms + self.env.options.replica_config.sequence_wait_ms_max
            self._parked.append((deadline, source, message))
            return
        self._produce(source, message, header)

    def _is_early(self, header) -> bool:
        """``SequenceGate._is_early``: a batch ahead of its producer's next sequence waits."""
        if header.producer_id == NO_PRODUCER_ID:
            return False
        expected = self.state.producers.next_sequence(header.producer_id)
        return header.base_sequence > (0 if expected is None else expected)

    def _produce(self, source: str, message: m.Produce, header) -> None:
        now_ms = self.env.now_ms
        try:
            plan = self.state.plan_append(header, message.acks, now_ms)
        except MafkaError as error:
            self._send(source, m.ProduceResult(message.request_id, None, m.Failure.of(error)))
            return
        if plan.duplicate:
            self.env.count("duplicates_refused")
        else:
            stamped = bytearray(message.batch)
            stamp(stamped, plan.base_offset, plan.leader_epoch)
            appended = self.log.append(stamped, now_ms, check_crc=False)  # checked on receipt, as the actor does
            self.state.appended(appended, now_ms)
            self._unpark(expired_only=False)
        if message.acks is Acks.ALL:
            self._waiters.append((plan.next_offset, plan.leader_epoch, plan.base_offset, source, message.request_id))
            self._release()
        else:
            self._send(source, m.ProduceResult(message.request_id, plan.base_offset, None))

    def _unpark(self, expired_only: bool) -> None:
        """Let parked batches whose turn came (or whose wait ran out) through, oldest first."""
        progressed = True
        while progressed:
            progressed = False
            for index, (deadline, source, message) in enumerate(self._parked):
                header = check_single_batch(message.batch)
                if self.env.now_ms >= deadline or (not expired_only and not self._is_early(header)):
                    del self._parked[index]
                    self._produce(source, message, header)
                    progressed = True
                    break

    def _release(self) -> None:
        """``_Waiters.release``: answer acks=all producers whose batch is committed, in order."""
        while self._waiters:
            next_offset, epoch, base_offset, client, request_id = self._waiters[0]
            try:
                if not self.state.ack_ready(next_offset, epoch):
                    return
                result = m.ProduceResult(request_id, base_offset, None)
            except MafkaError as error:
                result = m.ProduceResult(request_id, None, m.Failure.of(error))
            self._waiters.pop(0)
            self._send(client, result)

    def _fail_waiters(self, error: MafkaError) -> None:
        for _, _, _, client, request_id in self._waiters:
            self._send(client, m.ProduceResult(request_id, None, m.Failure.of(error)))
        self._waiters.clear()

    # --- leader: followers and the ISR ---------------------------------------------------

    def on_replica_fetch(self, source: str, message: m.ReplicaFetch) -> None:
        try:
            self.state.check_epoch(message.follower_epoch)
            decision = self.state.on_follower_fetch(
                message.follower_id, message.fetch_offset, message.last_fetched_epoch, self.env.now_ms)
        except MafkaError as error:
            self._send(source, m.ReplicaFetchResult(message.request_id, b"", 0, None, m.Failure.of(error)))
            return
        if decision.isr_changed:
            self._isr_changed()
        self._release()
        if decision.diverging is not None:
            self._send(source, m.ReplicaFetchResult(message.request_id, b"", self.state.high_watermark,
                                                    decision.diverging, None))
            return
        offset, bytes_max = message.fetch_offset, self.env.options.replica_config.fetch_bytes_max
        try:
            data = self.log.read(offset, bytes_max) if offset < self.log.log_end_offset else b""
        except CorruptRecord as error:  # damage on disk is never served (the actor's _read_own_log)
            self._send(source, m.ReplicaFetchResult(message.request_id, b"", 0, None, m.Failure.of(error)))
            return
        self._send(source, m.ReplicaFetchResult(message.request_id, data, self.state.high_watermark, None, None))

    def _isr_changed(self) -> None:
        self._isr_dirty = True
        if self._isr_write is None:
            self._write_isr()

    def _write_isr(self) -> None:
        """One compare-and-swap of the current ISR in flight at a time (``_persist_isr``)."""
        if self.state.role is not Role.LEADER:
            self._isr_dirty, self._isr_write = False, None
            return
        self._isr_dirty = False
        isr, epoch = tuple(sorted(self.state.isr)), self.state.leader_epoch
        request_id = self.env.request_id()
        self._isr_write = (request_id, isr, epoch, self.env.now_ms)
        self._send(COORDINATOR, m.IsrWrite(request_id, self.partition, self.replica_id, epoch, isr))

    def on_isr_write_result(self, message: m.IsrWriteResult) -> None:
        if self._isr_write is None or self._isr_write[0] != message.request_id:
            return
        _, isr, epoch, _ = self._isr_write
        self._isr_write = None
        if not message.written:
            self.env.note(f"{self.replica_id} p{self.partition}: ISR write refused, fenced")
            self._isr_dirty = False
            return
        if self.state.role is Role.LEADER and self.state.leader_epoch == epoch:
            self.state.isr_committed(isr)
            self._release()
            if self._isr_dirty or frozenset(isr) != self.state.isr:
                self._write_isr()

    # --- consumers (the feeder) ----------------------------------------------------------

    def on_fetch(self, source: str, message: m.Fetch) -> None:
        role = self.state.role
        if role is not Role.LEADER and not (message.from_follower and role is Role.FOLLOWER):
            failure = m.Failure.of(NotLeader(f"{self.replica_id} is not the leader of p{self.partition}"))
            self._send(source, m.FetchResult(message.request_id, b"", 0, failure))
            return
        try:
            data = self.log.read(message.offset, message.bytes_max, end_offset=self.state.high_watermark)
        except MafkaError as error:
            self._send(source, m.FetchResult(message.request_id, b"", 0, m.Failure.of(error)))
            return
        self._send(source, m.FetchResult(message.request_id, data, self.state.high_watermark, None))

    # --- follower ------------------------------------------------------------------------

    def _maybe_fetch(self) -> None:
        state = self.state
        if state.role is not Role.FOLLOWER or state.leader_id is None:
            return
        timeout_ms = self.env.options.request_timeout_ms
        if self._fetch is not None and self.env.now_ms - self._fetch[3] < timeout_ms:
            return
        request_id = self.env.request_id()
        self._fetch = (request_id, state.leader_epoch, state.leader_id, self.env.now_ms)
        self._send(state.leader_id, m.ReplicaFetch(
            request_id, self.partition, self.replica_id, state.leader_epoch, state.log_end_offset,
            state.last_fetched_epoch))

    def on_replica_fetch_result(self, message: m.ReplicaFetchResult) -> None:
        if self._fetch is None or self._fetch[0] != message.request_id:
            return  # late, duplicated, or for a role this replica no longer has
        self._fetch = None
        if message.failure is not None or self.state.role is not Role.FOLLOWER:
            return
        try:
            self._apply_fetch(message)
        except CorruptRecord as error:  # this replica's own log is damaged: fetch again later (the actor's _follow)
            self.env.note(f"{self.replica_id} p{self.partition}: fetch not applied: {error}")
            return
        if message.data or message.diverging is not None:
            self._maybe_fetch()  # more to read: fetch at once, as the actor's loop does

    def _apply_fetch(self, message: m.ReplicaFetchResult) -> None:
        end_before = self.log.log_end_offset
        truncated_to = apply_leader_answer(self.state, self.storage, message.diverging, message.data,
                                           message.high_watermark, self.env.now_ms)
        if truncated_to is not None and truncated_to < end_before:
            self.env.count("truncations")

    def on_result(self, message: object) -> None:
        """An answer to one of this replica's calls (matched by request id, else ignored)."""
        if isinstance(message, m.ReplicaFetchResult):
            self.on_replica_fetch_result(message)
        else:
            self.on_isr_write_result(message)

    # --- timers --------------------------------------------------------------------------

    def tick(self) -> None:
        """What the actor's background tasks do, once per tick."""
        now_ms = self.env.now_ms
        if self.state.tick(now_ms):
            self._isr_changed()
        if self._isr_write is not None and now_ms - self._isr_write[3] >= self.env.options.request_timeout_ms:
            self._isr_write = None
            self._isr_dirty = True
        if self._isr_dirty and self._isr_write is None:
            self._write_isr()
        self._release()
        self._unpark(expired_only=True)
        self._maybe_fetch()
        self.log.maybe_flush(now_ms)
        if now_ms >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = now_ms + HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS
            self.storage.save_high_watermark(self.state.high_watermark)


# The calls a write node dispatches to one of its replicas, by message type.
HANDLERS = {
    m.Produce: SimReplica.on_produce,
    m.ReplicaFetch: SimReplica.on_replica_fetch,
    m.Fetch: SimReplica.on_fetch,
    m.BecomeLeader: SimReplica.on_become_leader,
    m.BecomeFollower: SimReplica.on_become_follower,
}
