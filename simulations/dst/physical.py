"""Physical-partition replicas: the simulator's ``PhysicalPartition`` shell.

``SimReplica`` is to the simulator what ``mafka4.physical.actor.PhysicalPartition`` is to Ray: a
thin driver of production's ``PhysicalReplica`` (``mafka4.physical.physical_replica``: the real
``ReplicaStorage`` on ``SimDisk``, the real ``ReplicaState`` or the class in
``options.replica_state_class``, the acks=all waiters, and every follow-up of the core's
``Ready``). It only turns the simulator's messages into the replica's calls, as the actor turns
Ray calls, and does what the replica leaves to its driver, on timers where the actor uses asyncio:

* ``Produce`` -> ``is_early`` (an early batch is parked until its turn, up to
  ``sequence_wait_ms_max``: the actor's ``SequenceGate``), ``append``, and for acks=all
  ``wait_for_commit`` with a waiter that sends the answer; ``Ready.sequence_advanced`` lets parked
  batches through;
* ``ReplicaFetch`` (leader) -> ``answer_follower`` and ``read_for_follower``; its answer
  (follower) -> ``apply_leader_answer``; the follower asks again at once after data or a
  truncation, else on its next tick;
* ``Fetch`` (the feeder) -> ``check_serving`` and ``read_committed``;
* ``Ready.write_isr`` -> an ``IsrWrite`` to the coordinator, one in flight, re-sent after
  ``request_timeout_ms`` without an answer, and ``isr_written`` once it is confirmed (the actor's
  ``InSyncRecorder``). ``Ready.wake`` needs nothing more: nobody long-polls here;
* ticks -> ``tick``, the log's flush by its policy, and a HW checkpoint every
  ``HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS``.

No protocol decision is made here that the replica does not make.

The machine that hosts replicas is ``write_node.WriteNode``.
"""

from __future__ import annotations

from pathlib import Path

from mafka4.batch_frame import BatchHeader, check_producer_batch
from mafka4.errors import CorruptRecord, MafkaError
from mafka4.limits import Acks
from mafka4.log.log import Log
from mafka4.physical.physical_replica import PhysicalReplica
from mafka4.physical.replica import Ready, ReplicaState, Role
from simulations.dst import messages as m
from simulations.dst.coordinator import NAME as COORDINATOR
from simulations.dst.env import Env

HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 100


class _ProduceAnswer:
    """An acks=all producer's pending answer, as ``PhysicalReplica``'s waiters hold it (the actor's is
    an asyncio future): answering sends the ``ProduceResult``."""

    __slots__ = ("_replica", "_client", "_request_id", "_base_offset", "_done")

    def __init__(self, replica: "SimReplica", client: str, request_id: int, base_offset: int):
        self._replica, self._client, self._request_id, self._base_offset = replica, client, request_id, base_offset
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: None) -> None:
        self._answer(m.ProduceResult(self._request_id, self._base_offset, None))

    def set_exception(self, exception: BaseException) -> None:
        self._answer(m.ProduceResult(self._request_id, None, m.Failure.of(exception)))

    def _answer(self, result: m.ProduceResult) -> None:
        self._done = True
        self._replica.send(self._client, result)


class SimReplica:
    """One replica of one physical partition on one write node; see the module docstring."""

    def __init__(self, env: Env, node, partition: int, directory: Path):
        self.env = env
        self.node = node
        self.partition = partition
        self.replica_id = node.name
        options = env.options
        self.replica = PhysicalReplica(self.replica_id, f"t-{partition}", directory, options.log_config,
                                       options.replica_config, env.now_ms, self._on_ready,
                                       state_class=options.replica_state_class)
        self._parked: list[tuple[int, str, m.Produce, BatchHeader]] = []  # (deadline, client, request, header)
        self._fetch: tuple[int, int, str, int] | None = None  # (request, epoch, leader, sent at)
        self._isr_write: tuple[int, tuple[str, ...], int, int] | None = None  # (request, isr, epoch, sent at)
        self._isr_dirty = False
        self._next_checkpoint_ms = env.now_ms

    @property
    def state(self) -> ReplicaState:
        """The replica's core, for reading (the checkers, the cluster's drain)."""
        return self.replica.state

    @property
    def log(self) -> Log:
        return self.replica.log

    def close(self) -> None:
        """A clean stop (the actor's ``close``): refuse the waiters, flush, mark the log clean."""
        self.replica.close()

    def send(self, destination: str, message: object) -> None:
        self.env.network.send(self.node.name, destination, message)

    def _on_ready(self, ready: Ready) -> None:
        if ready.write_isr is not None:
            self._isr_changed()
        if ready.sequence_advanced:
            self._unpark(expired_only=False)

    # --- roles ---------------------------------------------------------------------------

    def on_become_leader(self, source: str, message: m.BecomeLeader) -> None:
        failure = None
        try:
            self.replica.become_leader(message.leader_epoch, message.replicas, message.isr, self.env.now_ms)
        except MafkaError as error:
            failure = m.Failure.of(error)
        else:
            self._fetch = None
        self.send(source, m.RoleResult(message.request_id, self.partition, self.replica_id, message.leader_epoch, failure))

    def on_become_follower(self, source: str, message: m.BecomeFollower) -> None:
        failure = None
        try:
            self.replica.become_follower(message.leader_epoch, message.leader_id)
        except MafkaError as error:
            failure = m.Failure.of(error)
        else:
            if self._fetch is not None and self._fetch[1:3] != (message.leader_epoch, message.leader_id):
                self._fetch = None
        self.send(source, m.RoleResult(message.request_id, self.partition, self.replica_id, message.leader_epoch, failure))

    # --- leader: produce -----------------------------------------------------------------

    def on_produce(self, source: str, message: m.Produce) -> None:
        try:
            header = check_producer_batch(message.batch)
        except CorruptRecord as error:
            self.send(source, m.ProduceResult(message.request_id, None, m.Failure.of(error)))
            return
        if self.replica.is_early(header):
            deadline = self.env.now_ms + self.env.options.replica_config.sequence_wait_ms_max
            self._parked.append((deadline, source, message, header))
            return
        self._produce(source, message, header)

    def _produce(self, source: str, message: m.Produce, header: BatchHeader) -> None:
        try:
            plan = self.replica.append(header, message.batch, message.acks, self.env.now_ms)
        except MafkaError as error:
            self.send(source, m.ProduceResult(message.request_id, None, m.Failure.of(error)))
            return
        if plan.duplicate:
            self.env.count("duplicates_refused")
        if message.acks is Acks.ALL:
            self.replica.wait_for_commit(plan, _ProduceAnswer(self, source, message.request_id, plan.base_offset))
        else:
            self.send(source, m.ProduceResult(message.request_id, plan.base_offset, None))

    def _unpark(self, expired_only: bool) -> None:
        """Let parked batches whose turn came (or whose wait ran out) through, oldest first."""
        progressed = True
        while progressed:
            progressed = False
            for index, (deadline, source, message, header) in enumerate(self._parked):
                if self.env.now_ms >= deadline or (not expired_only and not self.replica.is_early(header)):
                    del self._parked[index]
                    self._produce(source, message, header)
                    progressed = True
                    break

    # --- leader: followers and the ISR ---------------------------------------------------

    def on_replica_fetch(self, source: str, message: m.ReplicaFetch) -> None:
        try:
            decision = self.replica.answer_follower(message.follower_id, message.follower_epoch, message.fetch_offset,
                                                    message.last_fetched_epoch, self.env.now_ms)
        except MafkaError as error:
            self.send(source, m.ReplicaFetchResult(message.request_id, b"", 0, None, m.Failure.of(error)))
            return
        if decision.diverging is not None:
            self.send(source, m.ReplicaFetchResult(message.request_id, b"", self.state.high_watermark,
                                                   decision.diverging, None))
            return
        try:
            data = self.replica.read_for_follower(message.fetch_offset, self.env.options.replica_config.fetch_bytes_max)
        except CorruptRecord as error:  # damage on disk is never served
            self.send(source, m.ReplicaFetchResult(message.request_id, b"", 0, None, m.Failure.of(error)))
            return
        self.send(source, m.ReplicaFetchResult(message.request_id, data, self.state.high_watermark, None, None))

    def _isr_changed(self) -> None:
        self._isr_dirty = True
        if self._isr_write is None:
            self._write_isr()

    def _write_isr(self) -> None:
        """One compare-and-swap of the current ISR in flight at a time (the actor's ``InSyncRecorder``)."""
        self._isr_dirty = False
        to_write = self.replica.isr_to_write()
        if to_write is None:
            self._isr_write = None
            return
        isr, epoch = to_write
        request_id = self.env.request_id()
        self._isr_write = (request_id, isr, epoch, self.env.now_ms)
        self.send(COORDINATOR, m.IsrWrite(request_id, self.partition, self.replica_id, epoch, isr))

    def on_isr_write_result(self, message: m.IsrWriteResult) -> None:
        if self._isr_write is None or self._isr_write[0] != message.request_id:
            return
        _, isr, epoch, _ = self._isr_write
        self._isr_write = None
        if not message.written:
            self.env.note(f"{self.replica_id} p{self.partition}: ISR write refused, fenced")
            self._isr_dirty = False
            return
        self.replica.isr_written(isr, epoch)
        if self.state.leads(epoch) and (self._isr_dirty or frozenset(isr) != self.state.isr):
            self._write_isr()

    # --- consumers (the feeder) ----------------------------------------------------------

    def on_fetch(self, source: str, message: m.Fetch) -> None:
        try:
            self.replica.check_serving(message.from_follower)
            data = self.replica.read_committed(message.offset, message.bytes_max)
        except MafkaError as error:
            self.send(source, m.FetchResult(message.request_id, b"", 0, m.Failure.of(error)))
            return
        self.send(source, m.FetchResult(message.request_id, data, self.state.high_watermark, None))

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
        self.send(state.leader_id, m.ReplicaFetch(
            request_id, self.partition, self.replica_id, state.leader_epoch, state.log_end_offset,
            state.last_fetched_epoch))

    def on_replica_fetch_result(self, message: m.ReplicaFetchResult) -> None:
        if self._fetch is None or self._fetch[0] != message.request_id:
            return  # late, duplicated, or for a role this replica no longer has
        self._fetch = None
        if message.failure is not None or self.state.role is not Role.FOLLOWER:
            return
        end_before = self.log.log_end_offset
        try:
            truncated_to = self.replica.apply_leader_answer(message.diverging, message.data, message.high_watermark,
                                                            self.env.now_ms)
        except CorruptRecord as error:  # this replica's own log is damaged: fetch again later (the actor's _follow)
            self.env.note(f"{self.replica_id} p{self.partition}: fetch not applied: {error}")
            return
        if truncated_to is not None and truncated_to < end_before:
            self.env.count("truncations")
        if message.data or message.diverging is not None:
            self._maybe_fetch()  # more to read: fetch at once, as the actor's loop does

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
        if self._isr_write is not None and now_ms - self._isr_write[3] >= self.env.options.request_timeout_ms:
            self._isr_write = None  # no answer: the write may or may not have landed
            self._isr_dirty = True
        self.replica.tick(now_ms)
        if self._isr_dirty and self._isr_write is None:
            self._write_isr()
        self._unpark(expired_only=True)
        self._maybe_fetch()
        self.replica.flush_by_policy(now_ms)
        if now_ms >= self._next_checkpoint_ms:
            self._next_checkpoint_ms = now_ms + HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS
            self.replica.checkpoint_high_watermark()


# The calls a write node dispatches to one of its replicas, by message type.
HANDLERS = {
    m.Produce: SimReplica.on_produce,
    m.ReplicaFetch: SimReplica.on_replica_fetch,
    m.Fetch: SimReplica.on_fetch,
    m.BecomeLeader: SimReplica.on_become_leader,
    m.BecomeFollower: SimReplica.on_become_follower,
}
