"""``PhysicalReplica``: one physical-partition replica -- its log, its core, its acks=all waiters.

The shell around ``ReplicaState``, the write side's twin of ``virtual.hosted_vp.HostedVp``. It owns
the replica's ``ReplicaStorage`` (the segmented log and the leader-epoch and high-watermark
checkpoints, ``log.replica_storage``), turns what happens to the log into core calls, and carries
out every ``Ready`` the core returns: the disk work itself (the epoch checkpoint), the acks=all
waiters itself, and the rest through the ``notify`` callback of its driver. Two drivers host it
unchanged: the ``PhysicalPartition`` Ray actor (``physical.actor``) and the simulator's replica
(``simulations.dst.physical``). What differs between them is injected or left to them:

* ``notify(ready)``: ``Ready.write_isr`` (the actor hands it to its etcd side,
  ``physical.replica_metadata``; the simulator sends the coordinator a message),
  ``Ready.sequence_advanced`` (the actor's ``sequencer.SequenceGate`` looks again; the simulator
  lets its parked batches through) and ``Ready.wake`` (the actor ends its long polls; nobody
  long-polls in the simulator);
* an acks=all waiter (``CommitWaiter``): the actor's is an asyncio future, the simulator's sends
  the produce answer;
* the clock (every call takes ``now_ms``), and when to flush and checkpoint the HW (the actor on
  worker threads: ``start_flush``/``finish_flush``, ``stage_high_watermark``/``commit_high_watermark``;
  the simulator in a row: ``flush_by_policy``, ``checkpoint_high_watermark``);
* how a batch early for its producer waits for its turn (``is_early`` is the rule; the actor waits
  on its event loop, the simulator on timers).

Every method is synchronous and does no network I/O.

Order of a ``Ready``: the epoch checkpoint first, so that nothing hears of a new epoch before its
history is on disk; then ``notify``, then the waiters. A log is cut or appended to before the
core hears of it (``apply_leader_answer``, ``append``): a disk write that fails leaves the core
agreeing with the log, and the next fetch or retry asks again.

Waiters are answered in the order they came (appends are ordered) as ``ReplicaState.ack_ready``
decides: committed, or refused (``NotLeader`` once leadership is lost, ``NotEnoughReplicas`` when
the ISR fell below ``min_insync_replicas``). A waiter already done (the actor's timed out) is
dropped. Closing the replica refuses every waiter left.

Damaged data on disk is never served: a read that meets it raises ``CorruptRecord`` naming the
replica and the offset, and is logged as an error (``physical.actor`` says what happens next).
"""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from typing import Callable, Protocol, Sequence

from mafka4.batch_frame import NO_PRODUCER_ID, BatchHeader, stamp
from mafka4.errors import CorruptRecord, DiskFull, MafkaError, NotLeader
from mafka4.limits import Acks
from mafka4.limits.servers import LogConfig, ReplicaConfig
from mafka4.log.log_dir_budget import LogDirBudget, is_disk_full
from mafka4.log.pending_flush import PendingFlush
from mafka4.log.replica_storage import ReplicaStorage, StagedHighWatermark
from mafka4.physical.replica import NOTHING, AppendPlan, FetchDecision, ReplicaState, Ready, Role

logger = logging.getLogger(__name__)


class CommitWaiter(Protocol):
    """An acks=all producer's pending answer (an asyncio future has this shape)."""

    def done(self) -> bool: ...

    def set_result(self, result: None) -> None: ...

    def set_exception(self, exception: BaseException) -> None: ...


class _CommitWaiters:
    """acks=all producers waiting for the high watermark, in the order they came."""

    def __init__(self):
        self._queue: deque[tuple[int, int, CommitWaiter]] = deque()

    def add(self, next_offset: int, leader_epoch: int, waiter: CommitWaiter) -> None:
        self._queue.append((next_offset, leader_epoch, waiter))

    def release(self, state: ReplicaState) -> None:
        while self._queue:
            next_offset, leader_epoch, waiter = self._queue[0]
            if waiter.done():
                self._queue.popleft()
                continue
            try:
                if not state.ack_ready(next_offset, leader_epoch):
                    return
                waiter.set_result(None)
            except MafkaError as error:  # NotEnoughReplicas after append, NotLeader: the producer retries
                waiter.set_exception(error)
            self._queue.popleft()

    def fail_all(self, error: MafkaError) -> None:
        while self._queue:
            _, _, waiter = self._queue.popleft()
            if not waiter.done():
                waiter.set_exception(error)


class PhysicalReplica:
    """One replica of one physical partition; see the module docstring."""

    def __init__(self, replica_id: str, partition_name: str, directory: str | Path, log_config: LogConfig,
                 replica_config: ReplicaConfig, now_ms: int, notify: Callable[[Ready], None],
                 budget: LogDirBudget | None = None, flushes_in_background: bool = False,
                 state_class: type[ReplicaState] = ReplicaState):
        """Open and recover the replica directory (``budget``, ``flushes_in_background``: see
        ``ReplicaStorage``); ``state_class`` is the core (the simulator's tests plant broken ones)."""
        self.replica_id = replica_id
        self.partition_name = partition_name
        self.storage = ReplicaStorage(directory, log_config, now_ms, budget, flushes_in_background)
        self.log = self.storage.log
        self.state = state_class(
            replica_id, partition_name, replica_config, self.log.log_end_offset,
            self.storage.recovered_high_watermark(), self.storage.recovered_epochs(),
            self.storage.recovered_producers(replica_config),
        )
        self._notify = notify
        self._waiters = _CommitWaiters()
        self.closed = False

    def _execute(self, ready: Ready) -> None:
        if ready.save_epochs:
            self.storage.save_epochs(self.state.epochs)
        if ready.write_isr is not None or ready.sequence_advanced or ready.wake:
            self._notify(ready)
        if ready.wake:
            self._waiters.release(self.state)

    # --- roles ---------------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: Sequence[str], isr: Sequence[str], now_ms: int) -> None:
        self._execute(self.state.become_leader(leader_epoch, replicas, isr, now_ms))

    def become_follower(self, leader_epoch: int, leader_id: str) -> None:
        self._execute(self.state.become_follower(leader_epoch, leader_id))

    # --- leader: produce -----------------------------------------------------------------

    def is_early(self, header: BatchHeader) -> bool:
        """True while an idempotent batch is ahead of its producer's next sequence (``sequencer``):
        it waits for its turn. A producer the leader does not know yet is expected at 0."""
        if header.producer_id == NO_PRODUCER_ID:
            return False
        expected = self.state.producers.next_sequence(header.producer_id)
        return header.base_sequence > (0 if expected is None else expected)

    def append(self, header: BatchHeader, batch: bytes | bytearray, acks: Acks, now_ms: int) -> AppendPlan:
        """Plan one produced batch (``header``: ``records.check_producer_batch``'s) and, unless it is
        a retry already in the log, stamp and append it. A bytearray is stamped where it lies (the
        caller's own copy), other bytes are copied first."""
        plan = self.state.plan_append(header, acks, now_ms)
        if plan.duplicate:
            return plan
        stamped = batch if type(batch) is bytearray else bytearray(batch)
        stamp(stamped, plan.base_offset, plan.leader_epoch)
        try:
            appended = self.log.append(stamped, now_ms, check_crc=False)  # checked on receipt
        except OSError as error:
            if not is_disk_full(error):
                raise
            raise DiskFull(f"{self.partition_name}: replica {self.replica_id} cannot append "
                           f"({error.strerror}: {error.filename}); nothing of the batch was written. The producer "
                           f"retries; free space on the node or raise its log_dir_bytes_max") from None
        self._execute(self.state.appended(appended, now_ms))
        return plan

    def wait_for_commit(self, plan: AppendPlan, waiter: CommitWaiter) -> None:
        """Answer ``waiter`` once the batch of ``plan`` is committed (at once if it is), or refused."""
        try:
            if self.state.ack_ready(plan.next_offset, plan.leader_epoch):
                waiter.set_result(None)
                return
        except MafkaError as error:
            waiter.set_exception(error)
            return
        self._waiters.add(plan.next_offset, plan.leader_epoch, waiter)

    # --- leader: followers and the ISR ---------------------------------------------------

    def answer_follower(self, follower_id: str, follower_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                        now_ms: int) -> FetchDecision:
        """Report one follower's fetch to the core (fenced by the epoch it carries); the data comes
        from ``read_for_follower`` unless the answer is ``diverging``."""
        self.state.check_epoch(follower_epoch)  # a follower of another epoch is fenced or must wait
        decision = self.state.on_follower_fetch(follower_id, fetch_offset, last_fetched_epoch, now_ms)
        self._execute(decision.ready)
        return decision

    def read_for_follower(self, offset: int, bytes_max: int) -> bytes:
        return self._read(offset, bytes_max) if offset < self.log.log_end_offset else b""

    def tick(self, now_ms: int) -> None:
        self._execute(self.state.tick(now_ms))

    def isr_to_write(self) -> tuple[tuple[str, ...], int] | None:
        """The ISR (sorted) and epoch to record in the coordinator now; None when this replica no
        longer leads or is closed."""
        if self.state.role is not Role.LEADER or self.closed:
            return None
        return tuple(sorted(self.state.isr)), self.state.leader_epoch

    def isr_written(self, isr: Sequence[str], leader_epoch: int) -> None:
        """The coordinator now holds ``isr`` for ``leader_epoch`` (moot if deposed meanwhile)."""
        self._execute(self.state.isr_committed(isr, leader_epoch))

    # --- follower ------------------------------------------------------------------------

    def apply_leader_answer(self, diverging: tuple[int, int] | None, data: bytes, high_watermark: int,
                            now_ms: int) -> int | None:
        """Apply the leader's answer to this follower's fetch: on a divergence (leader-epoch
        truncation, KIP-279) cut the log where the core says; else append ``data`` and take the
        leader's ``high_watermark``. The offset the log was cut to, or None."""
        state = self.state
        if diverging is not None:
            offset = state.truncation_offset(*diverging)
            self.log.truncate_to(offset)
            self._execute(state.truncated(offset))
            return offset
        ready = NOTHING
        if data:
            for header in self.log.append_batches(data, now_ms):
                ready |= state.follower_appended(header)
        self._execute(ready | state.follower_high_watermark(high_watermark))
        return None

    # --- consumers -----------------------------------------------------------------------

    def check_serving(self, from_follower: bool) -> None:
        """Raise ``NotLeader`` unless this replica answers consumers: the leader, or with
        ``from_follower`` a follower too (Kafka's KIP-392)."""
        role = self.state.role
        if role is not Role.LEADER and not (from_follower and role is Role.FOLLOWER):
            raise NotLeader(f"{self.partition_name}: {self.replica_id} is not the leader (leader: {self.state.leader_id})")

    def read_committed(self, offset: int, bytes_max: int) -> bytes:
        """Whole batches from ``offset`` below the high watermark."""
        return self._read(offset, bytes_max, end_offset=self.state.high_watermark)

    def _read(self, offset: int, bytes_max: int, end_offset: int | None = None) -> bytes:
        """``Log.read``, with damage on disk logged as an error before the caller hears of it."""
        try:
            return self.log.read(offset, bytes_max, end_offset)
        except CorruptRecord as error:
            logger.error("%s: replica %s (%s) refuses to serve offset %d: %s", self.partition_name,
                         self.replica_id, self.state.role.value, offset, error)
            raise CorruptRecord(f"replica {self.replica_id} of partition {self.partition_name} cannot serve "
                                f"offset {offset}: {error.message}") from None

    def describe(self) -> dict:
        return {**self.state.describe(), "log_start_offset": self.log.log_start_offset,
                "log_end_offset": self.log.log_end_offset, "size_bytes": self.log.size_bytes}

    # --- housekeeping --------------------------------------------------------------------

    def flush_by_policy(self, now_ms: int) -> None:
        """Flush if the log's policy says one is due (``LogConfig.flush_interval_ms``), on this thread."""
        self.log.maybe_flush(now_ms)

    def start_flush(self, now_ms: int) -> PendingFlush | None:
        """``flush_by_policy`` in three steps: what to ``run`` on a worker thread, then ``finish_flush``."""
        return self.log.start_flush(now_ms)

    def finish_flush(self, pending: PendingFlush) -> None:
        self.log.finish_flush(pending)

    def checkpoint_high_watermark(self) -> None:
        """Checkpoint the HW if it moved since the last checkpoint, on this thread."""
        self.storage.save_high_watermark(self.state.high_watermark)

    def stage_high_watermark(self, high_watermark: int) -> StagedHighWatermark | None:
        """The write and fsync of ``checkpoint_high_watermark`` for ``high_watermark`` (the caller reads
        ``state.high_watermark`` on the replica's own thread), for a worker thread; None if the HW did
        not move. ``commit_high_watermark`` puts it in place."""
        return self.storage.stage_high_watermark(high_watermark)

    def commit_high_watermark(self, staged: StagedHighWatermark) -> None:
        """Put a staged checkpoint in place, unless closed meanwhile (a late checkpoint must not land
        in a directory a new replica may have taken over)."""
        if not self.closed:
            self.storage.commit_high_watermark(staged)

    def close(self, delete_data: bool = False) -> None:
        """Refuse the waiters left and close the log (flushed, marked clean); with ``delete_data``
        remove the directory."""
        self.closed = True
        self._waiters.fail_all(NotLeader(f"{self.partition_name}: replica {self.replica_id} is shutting down"))
        self.storage.close(delete_data)
