"""The replica core of one physical partition: roles, offsets, ISR, high watermark, epochs.

``ReplicaState`` is pure (no I/O, no clock). Its shell is ``physical.physical_replica.PhysicalReplica``,
driven by the ``PhysicalPartition`` actor and, unchanged, by the simulator
(``simulations.dst.physical``). Inputs are plain values and ``now_ms``; every call that changes
something the shell must act on returns a ``Ready`` (etcd/raft's name, as the VP core's
``virtual.replica_core.Ready``): what to persist, what to tell the coordinator, whom to wake.
It owns:

* the role (``Role.LEADER`` or ``Role.FOLLOWER``) and the ``leader_epoch`` that fences stale
  leaders and stale requests (``check_epoch``, ``StaleEpoch``);
* ``log_end_offset`` (LEO) and ``high_watermark`` (HW) of this replica's log;
* on the leader: each follower's LEO and last caught-up time, the ISR, acks=all completion;
* the leader-epoch history (``EpochHistory``) and the idempotent-producer table.

Leader protocol. ``plan_append`` decides where a batch goes (or that it is a retry),
``appended`` is called once it is in the log. Followers fetch with their LEO and the epoch of
their last batch; ``on_follower_fetch`` either answers "diverging" (the follower truncates,
``truncation_offset``/``truncated``, and fetches again) or records the follower's LEO,
expands the ISR and advances the HW. ``tick`` shrinks the ISR.

Follower protocol. The leader's answer comes back through ``truncation_offset`` and, once the
shell cut its log there, ``truncated`` (the log first: a cut that fails leaves the core and the
log agreeing, and the next fetch asks again), or through ``follower_appended`` for each fetched
batch and ``follower_high_watermark``.

ISR changes and the coordinator (Kafka KIP-497's "maximal ISR"). A change (``Ready.write_isr``,
from ``tick`` or a follower fetch) must be written to the coordinator, which elects the next
leader from its copy of the ISR; ``isr_committed`` reports the write. The HW is bounded by
every member of any ISR the coordinator may hold: the current ISR, the last confirmed one
(``isr_committed``) and every follower removed since that confirmation. The last set matters when a write's answer is
lost: a follower added by that write (which may well be in etcd) and removed again before
any later write is confirmed is in neither of the other two, yet the coordinator could
elect it. Otherwise this leader could acknowledge a batch that follower lacks. A stale
leader whose write is refused therefore acknowledges nothing more. A follower added to the
ISR bounds the HW at once (conservative).

The HW advances only while both the current ISR and the last confirmed one have at least
``min_insync_replicas`` members (Kafka's KIP-966). The coordinator turns followers removed
below that size into eligible leader replicas (``PartitionState.with_isr``) and may elect
one when no ISR member can lead; a HW moved by a lone leader would make visible batches
that such an election removes. The confirmed ISR counts too: until an expansion is
confirmed the coordinator may still hold the small ISR and its ELR, whose members do not
bound the HW.

Invariants (asserted): 0 <= HW <= LEO; the leader's HW never decreases during its epoch;
HW <= LEO of every ISR member whose LEO is known; the leader is in its ISR; the latest epoch
in the history is at most ``leader_epoch`` (equal on the leader). Two of ``mafka4.planted_bugs``
break the HW and the acks=all rule here on purpose, for demonstrations only.

Safety rules chosen here:

* A replica leads an epoch at most once: ``become_leader`` refuses an epoch the replica
  already knows (e.g. after a restart), because a second term in the same epoch could write
  different batches under an (epoch, offset) that followers already hold.
* A follower in the ISR whose fetch offset falls below the HW lost committed data (crash
  before fsync): it leaves the ISR at once.
* Truncation follows Kafka's KIP-101/KIP-279 rule and never cuts below the point where this
  log and the leader's log agree; acknowledged batches live below that point.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Sequence

from mafka4 import planted_bugs
from mafka4.batch_frame import BatchHeader
from mafka4.errors import NotEnoughReplicas, NotLeader, StaleEpoch
from mafka4.limits import Acks
from mafka4.limits.servers import ReplicaConfig
from mafka4.log.epochs import NO_EPOCH, EpochHistory
from mafka4.log.producer_state import ProducerStateTable
from mafka4.planted_bugs import PlantedBug


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class Ready:
    """What the shell does after a core call, in field order; ``Ready()`` is "nothing"."""

    # Rewrite the leader-epoch checkpoint (``log.replica_storage.EPOCH_CHECKPOINT``).
    save_epochs: bool = False
    # Record this ISR in the coordinator (compare-and-swap on the partition key, only while it
    # names this replica as leader of this epoch, with the ELR it implies), then call
    # ``isr_committed``. The writer sends the ISR of the moment it writes.
    write_isr: tuple[str, ...] | None = None
    # A producer's next expected sequence moved (a batch was appended): batches that wait for
    # their turn (``sequencer``) look again.
    sequence_advanced: bool = False
    # acks=all waiters may be answered now (committed, or refused) and long-polling fetches
    # (followers', consumers') may have an answer.
    wake: bool = False

    def __or__(self, other: "Ready") -> "Ready":
        if other is NOTHING:  # the common case on a follower's path, which combines one per batch
            return self
        return Ready(
            save_epochs=self.save_epochs or other.save_epochs,
            write_isr=other.write_isr if other.write_isr is not None else self.write_isr,
            sequence_advanced=self.sequence_advanced or other.sequence_advanced,
            wake=self.wake or other.wake,
        )


NOTHING = Ready()


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """What the leader does with a produced batch."""

    # True: a retry of a batch already in the log at base_offset; append nothing.
    duplicate: bool
    # Where the batch goes (or went): stamp it with this base offset.
    base_offset: int
    # Stamp the batch with this epoch (for a duplicate: the epoch that must still commit it).
    leader_epoch: int
    # acks=all is answered once ack_ready(next_offset) is True.
    next_offset: int


@dataclass(frozen=True, slots=True)
class FetchDecision:
    """The leader's answer to a follower fetch."""

    # (epoch, end_offset) when the follower's log diverges: it must call truncation_offset
    # with these, truncate, and fetch again; no data is sent. None: send data from the offset.
    diverging: tuple[int, int] | None
    high_watermark: int
    # What the leader's shell does: write a changed ISR, wake waiters if the ISR or the HW moved.
    ready: Ready = NOTHING


@dataclass(slots=True)
class _FollowerProgress:
    """What the leader knows about one follower; None means "not yet known"."""

    log_end_offset: int | None
    last_caught_up_ms: int | None
    last_fetch_ms: int | None = None
    last_fetch_leader_log_end_offset: int | None = None


class ReplicaState:
    """Pure state machine of one partition replica; see the module docstring."""

    def __init__(
        self,
        replica_id: str,
        partition_name: str,
        config: ReplicaConfig,
        log_end_offset: int,
        high_watermark: int,
        epochs: EpochHistory,
        producers: ProducerStateTable,
    ):
        """Start as a follower with no known leader, from the recovered log.

        ``epochs`` and ``producers`` describe the log as recovered; epochs starting past
        ``log_end_offset`` (a checkpoint newer than the recovered tail) are dropped here.
        """
        assert 0 <= high_watermark <= log_end_offset, (high_watermark, log_end_offset)
        self.replica_id = replica_id
        self.partition_name = partition_name
        self.config = config
        self.epochs = epochs
        self.producers = producers
        epochs.truncate_from(log_end_offset + 1)
        self._log_end_offset = log_end_offset
        self._high_watermark = high_watermark
        self._role = Role.FOLLOWER
        self._leader_epoch = epochs.latest_epoch
        self._leader_id: str | None = None
        self._replicas: tuple[str, ...] = ()
        self._isr: frozenset[str] = frozenset()
        self._committed_isr: frozenset[str] = frozenset()
        # Followers removed from the ISR since the last confirmed write (see the module docstring).
        self._removed_unconfirmed: frozenset[str] = frozenset()
        self._followers: dict[str, _FollowerProgress] = {}
        self._epoch_start_offset = log_end_offset
        self._check_invariants()

    # --- read-only view ------------------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._role

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def isr(self) -> frozenset[str]:
        """The leader's ISR (empty on a follower, which does not track it)."""
        return self._isr

    @property
    def committed_isr(self) -> frozenset[str]:
        """The ISR last confirmed written to the coordinator (leader only)."""
        return self._committed_isr

    @property
    def replicas(self) -> tuple[str, ...]:
        return self._replicas

    def leads(self, leader_epoch: int) -> bool:
        """True if this replica is the leader of ``leader_epoch``."""
        return self._role is Role.LEADER and leader_epoch == self._leader_epoch

    @property
    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch in this log: what a follower sends with each fetch."""
        return self.epochs.latest_epoch

    def describe(self) -> dict:
        return {
            "partition": self.partition_name,
            "replica": self.replica_id,
            "role": self._role.value,
            "leader": self._leader_id,
            "leader_epoch": self._leader_epoch,
            "log_end_offset": self._log_end_offset,
            "high_watermark": self._high_watermark,
            "replicas": list(self._replicas),
            "isr": sorted(self._isr),
            "isr_uncommitted": sorted(self._isr ^ self._committed_isr) if self._role is Role.LEADER else [],
            "isr_removed_unconfirmed": sorted(self._removed_unconfirmed),
            "followers": {
                follower_id: {
                    "log_end_offset": progress.log_end_offset,
                    "last_caught_up_ms": progress.last_caught_up_ms,
                }
                for follower_id, progress in sorted(self._followers.items())
            },
        }

    # --- role changes --------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: Sequence[str], isr: Sequence[str], now_ms: int) -> Ready:
        """Take office in ``leader_epoch`` with the coordinator's replicas and ISR.

        Repeating the call for the epoch this replica already leads is a no-op (the
        coordinator's notice can arrive twice). ISR followers get ``now_ms`` as their last
        caught-up time so they are not shrunk before they had a chance to fetch.
        """
        if self.leads(leader_epoch):
            return NOTHING
        if leader_epoch <= self._leader_epoch:
            raise StaleEpoch(
                f"replica {self.replica_id} of partition {self.partition_name} cannot lead epoch "
                f"{leader_epoch}: it already knows epoch {self._leader_epoch}; the coordinator must "
                f"elect the leader with a new epoch"
            )
        replicas = tuple(replicas)
        isr_set = frozenset(isr)
        assert len(set(replicas)) == len(replicas), f"duplicate replicas {replicas}"
        assert self.replica_id in isr_set and isr_set <= set(replicas), (self.replica_id, replicas, isr_set)
        self._role = Role.LEADER
        self._leader_epoch = leader_epoch
        self._leader_id = self.replica_id
        self._replicas = replicas
        self._isr = isr_set
        self._committed_isr = isr_set
        self._removed_unconfirmed = frozenset()
        self._followers = {
            replica: _FollowerProgress(None, now_ms if replica in isr_set else None)
            for replica in replicas
            if replica != self.replica_id
        }
        self.epochs.assign(leader_epoch, self._log_end_offset)
        self._epoch_start_offset = self._log_end_offset
        self._advance_high_watermark()
        self._check_invariants()
        return Ready(save_epochs=True, wake=True)

    def become_follower(self, leader_epoch: int, leader_id: str) -> Ready:
        """Follow ``leader_id`` in ``leader_epoch``; a no-op if that is already the case.

        The wake fails a former leader's acks=all waiters (``ack_ready`` raises ``NotLeader``:
        the producer retries on the new leader) and ends its long polls.
        """
        assert leader_id != self.replica_id, "use become_leader for this replica"
        if leader_epoch == self._leader_epoch and self._role is Role.FOLLOWER and self._leader_id in (None, leader_id):
            self._leader_id = leader_id
            return NOTHING
        if leader_epoch <= self._leader_epoch:
            raise StaleEpoch(
                f"replica {self.replica_id} of partition {self.partition_name} is at epoch "
                f"{self._leader_epoch} (leader {self._leader_id}) and refuses to follow "
                f"{leader_id} in epoch {leader_epoch}: the notice is stale; refresh metadata"
            )
        self._role = Role.FOLLOWER
        self._leader_epoch = leader_epoch
        self._leader_id = leader_id
        self._isr = frozenset()
        self._committed_isr = frozenset()
        self._removed_unconfirmed = frozenset()
        self._followers = {}
        self._check_invariants()
        return Ready(wake=True)

    def check_epoch(self, request_epoch: int | None) -> None:
        """Fence a request by the leader epoch it carries (None: the sender does not care).

        Older than ours: ``StaleEpoch``, the sender is fenced. Newer than ours: this replica
        has not yet heard of the new epoch; ``NotLeader`` (retriable), the sender retries
        after the notice arrived here (Kafka answers UNKNOWN_LEADER_EPOCH).
        """
        if request_epoch is None or request_epoch == self._leader_epoch:
            return
        if request_epoch < self._leader_epoch:
            raise StaleEpoch(
                f"request for partition {self.partition_name} carries leader epoch {request_epoch} "
                f"but replica {self.replica_id} is at epoch {self._leader_epoch}: the sender is "
                f"fenced; refresh metadata and retry"
            )
        raise NotLeader(
            f"replica {self.replica_id} of partition {self.partition_name} is at epoch "
            f"{self._leader_epoch} but the request carries {request_epoch}: it has not yet "
            f"learned the new leader; retry shortly"
        )

    # --- leader: produce -----------------------------------------------------------------

    def plan_append(self, header: BatchHeader, acks: Acks, now_ms: int) -> AppendPlan:
        """Decide where a produced batch goes; raise if the leader must refuse it.

        The actor must stamp and append a non-duplicate batch and call ``appended`` before
        planning the next one (the plan holds the current log end offset).
        """
        self._require_leader()
        if acks is Acks.ALL and len(self._isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicas(self._not_enough_replicas_message("refused"))
        original = self.producers.check(header)
        if original is not None:
            return AppendPlan(True, original, self._leader_epoch, original + header.count)
        base_offset = self._log_end_offset
        return AppendPlan(False, base_offset, self._leader_epoch, base_offset + header.count)

    def appended(self, header: BatchHeader, now_ms: int) -> Ready:
        """The stamped batch is in the leader's log."""
        assert self._role is Role.LEADER, "appended() on a follower"
        assert header.base_offset == self._log_end_offset, (header.base_offset, self._log_end_offset)
        assert header.leader_epoch == self._leader_epoch, (header.leader_epoch, self._leader_epoch)
        self._log_end_offset = header.next_offset
        self.producers.record(header)
        self._advance_high_watermark()
        self._check_invariants()
        # Followers parked at the old log end fetch the batch; a lone leader's HW may have moved.
        return Ready(sequence_advanced=True, wake=True)

    def ack_ready(self, next_offset: int, leader_epoch: int | None = None) -> bool:
        """acks=all completion: True once every ISR member has offsets below ``next_offset``.

        ``leader_epoch`` (the plan's) detects a leadership lost and regained meanwhile.
        Raises ``NotLeader`` when leadership was lost (the batch may be truncated: the
        producer retries, idempotence deduplicates) and ``NotEnoughReplicas`` when the
        batch is committed but the ISR has fallen below ``min_insync_replicas`` (Kafka's
        NOT_ENOUGH_REPLICAS_AFTER_APPEND).
        """
        if self._role is not Role.LEADER or leader_epoch not in (None, self._leader_epoch):
            raise NotLeader(
                f"replica {self.replica_id} lost the leadership of partition {self.partition_name} "
                f"(now epoch {self._leader_epoch}, leader {self._leader_id}) before the batch "
                f"ending at offset {next_offset} was committed: retry it on the new leader"
            )
        committed = self._high_watermark
        if planted_bugs.PLANTED is PlantedBug.ACK_BEFORE_ISR:  # a demo of a broken promise: mafka4.planted_bugs
            committed = self._log_end_offset
        if committed < next_offset:
            return False
        if len(self._isr) < self.config.min_insync_replicas:
            raise NotEnoughReplicas(self._not_enough_replicas_message("appended but not acknowledged"))
        return True

    # --- leader: followers and ISR -------------------------------------------------------

    def on_follower_fetch(self, follower_id: str, fetch_offset: int, last_fetched_epoch: int, now_ms: int) -> FetchDecision:
        """Account for a follower fetch; say whether the follower must truncate first.

        A fetch from a replica not assigned to this partition raises ``NotLeader``: this
        leader's assignment and the follower's disagree, one of them must refresh metadata.
        """
        self._require_leader()
        progress = self._followers.get(follower_id)
        if progress is None:
            raise NotLeader(
                f"replica {follower_id} fetched partition {self.partition_name} from leader "
                f"{self.replica_id} (epoch {self._leader_epoch}) but is not one of its followers "
                f"{[r for r in self._replicas if r != self.replica_id]}: refresh metadata"
            )
        assert fetch_offset >= 0, fetch_offset
        diverging = self._divergence(fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return FetchDecision(diverging, self._high_watermark)
        high_watermark_before = self._high_watermark
        self._update_caught_up(progress, fetch_offset, now_ms)
        progress.log_end_offset = fetch_offset
        isr_changed = self._update_isr_membership(follower_id, progress, now_ms)
        self._advance_high_watermark()
        self._check_invariants()
        # Only a changed ISR or a moved HW wakes anyone (producers, HW-bound readers): waking on
        # every fetch would make two idle followers end each other's long polls in a busy loop.
        ready = Ready(write_isr=self._isr_to_write() if isr_changed else None,
                      wake=isr_changed or self._high_watermark != high_watermark_before)
        return FetchDecision(None, self._high_watermark, ready)

    def tick(self, now_ms: int) -> Ready:
        """Shrink the ISR by followers not caught up for over ``replica_lag_ms_max`` (leader only).

        Every leader tick wakes, whether the ISR shrank or not: it ends followers' long polls, so
        an idle follower fetches again (and shows it is caught up) at least once a tick, even
        when its fetches may park longer than ``replica_lag_ms_max``.
        """
        if self._role is not Role.LEADER:
            return NOTHING
        lagging = frozenset(
            follower_id
            for follower_id in self._isr
            if follower_id != self.replica_id and self._is_lagging(self._followers[follower_id], now_ms)
        )
        if not lagging:
            return Ready(wake=True)
        self._remove_from_isr(lagging)
        self._advance_high_watermark()
        self._check_invariants()
        return Ready(write_isr=self._isr_to_write(), wake=True)

    def isr_committed(self, isr: Iterable[str], leader_epoch: int) -> Ready:
        """The coordinator now holds ``isr`` for this partition and ``leader_epoch``; nothing
        changes if this replica no longer leads that epoch (deposed while the write was out)."""
        if not self.leads(leader_epoch):
            return NOTHING
        isr_set = frozenset(isr)
        assert isr_set <= set(self._replicas), (isr_set, self._replicas)
        self._committed_isr = isr_set
        # The coordinator holds exactly ``isr_set`` now: followers removed before this write
        # can no longer be elected. One removed after it was sent is in ``isr_set`` itself.
        self._removed_unconfirmed = frozenset()
        self._advance_high_watermark()
        self._check_invariants()
        return Ready(wake=True)

    # --- follower ------------------------------------------------------------------------

    def truncation_offset(self, leader_epoch_answer: int, leader_end_offset: int) -> int:
        """Where to truncate this log after the leader answered ``diverging``.

        Kafka's KIP-279 rule. If this log has batches of the answered epoch, both logs hold
        a prefix of what that epoch's leader wrote: truncate to the shorter one. Otherwise
        truncate to where this log's largest epoch below the answer ends; the next fetch
        (with an older last epoch) continues the search. Each round removes batches or an
        epoch entry, so the search ends. With no usable epoch (answer -1, or no history
        here) fall back to ``min(leader_end_offset, log end offset)`` or the HW.
        """
        assert self._role is Role.FOLLOWER, "only a follower truncates to its leader"
        own_epoch, own_end = self.epochs.end_offset_for(leader_epoch_answer, self._log_end_offset)
        if leader_epoch_answer == NO_EPOCH or own_epoch == NO_EPOCH:
            if leader_end_offset >= 0:
                return min(leader_end_offset, self._log_end_offset)
            return self._high_watermark
        if own_epoch == leader_epoch_answer:
            return min(leader_end_offset, own_end, self._log_end_offset)
        return min(own_end, self._log_end_offset)

    def truncated(self, offset: int) -> Ready:
        """The log was truncated to ``offset``: forget epochs and producer batches past it.

        The HW follows down only if the leader made this replica cut committed data (a leader
        that lost unflushed data in a crash); it cannot happen with intact logs.
        """
        assert self._role is Role.FOLLOWER, "a leader never truncates its log"
        assert 0 <= offset <= self._log_end_offset, (offset, self._log_end_offset)
        self._log_end_offset = offset
        self.epochs.truncate_from(offset)
        self.producers.truncate_from(offset)
        self._high_watermark = min(self._high_watermark, offset)
        self._check_invariants()
        # The cut may have removed epochs; the log is cut already, so after a crash in between
        # recovery cuts the checkpointed epochs at the log end (``log.replica_storage``).
        return Ready(save_epochs=True)

    def follower_appended(self, header: BatchHeader) -> Ready:
        """A batch fetched from the leader is in this log."""
        assert self._role is Role.FOLLOWER, "follower_appended() on the leader"
        assert header.base_offset == self._log_end_offset, (header.base_offset, self._log_end_offset)
        assert self.epochs.latest_epoch <= header.leader_epoch <= self._leader_epoch, (
            f"batch epoch {header.leader_epoch} outside [{self.epochs.latest_epoch}, {self._leader_epoch}]: "
            f"the follower appended without truncating first"
        )
        new_epoch = self.epochs.assign(header.leader_epoch, header.base_offset)
        self._log_end_offset = header.next_offset
        self.producers.record(header)
        self._check_invariants()
        return Ready(save_epochs=True) if new_epoch else NOTHING

    def follower_high_watermark(self, leader_high_watermark: int) -> Ready:
        """Learn the leader's HW from a fetch answer; never moves backwards."""
        assert self._role is Role.FOLLOWER, "follower_high_watermark() on the leader"
        high_watermark_before = self._high_watermark
        self._high_watermark = max(self._high_watermark, min(leader_high_watermark, self._log_end_offset))
        self._check_invariants()
        return Ready(wake=self._high_watermark != high_watermark_before)

    # --- internals -----------------------------------------------------------------------

    def _require_leader(self) -> None:
        if self._role is not Role.LEADER:
            leader = self._leader_id if self._leader_id is not None else "unknown"
            raise NotLeader(
                f"replica {self.replica_id} is not the leader of partition {self.partition_name} "
                f"(leader: {leader}, epoch {self._leader_epoch}): refresh metadata and send to the leader"
            )

    def _isr_to_write(self) -> tuple[str, ...]:
        return tuple(sorted(self._isr))

    def _not_enough_replicas_message(self, outcome: str) -> str:
        return (
            f"partition {self.partition_name} has {len(self._isr)} in-sync replica(s) "
            f"({', '.join(sorted(self._isr))}), acks=all needs "
            f"min_insync_replicas={self.config.min_insync_replicas} ({outcome}): wait for "
            f"followers to catch up or lower min_insync_replicas"
        )

    def _divergence(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """The (epoch, end offset) answer if the follower's log is not a prefix of ours."""
        if last_fetched_epoch == NO_EPOCH:
            # A follower without an epoch history cannot be checked; only an impossible
            # offset is refused (it truncates to our end and fetches again).
            return (NO_EPOCH, self._log_end_offset) if fetch_offset > self._log_end_offset else None
        epoch, end_offset = self.epochs.end_offset_for(last_fetched_epoch, self._log_end_offset)
        if epoch != last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    def _update_caught_up(self, progress: _FollowerProgress, fetch_offset: int, now_ms: int) -> None:
        # Kafka's rule: a follower is caught up at a fetch reaching our LEO; a fetch reaching
        # the LEO we had at its previous fetch proves it was caught up at that earlier time.
        if fetch_offset >= self._log_end_offset:
            caught_up_ms = now_ms
        elif (
            progress.last_fetch_leader_log_end_offset is not None
            and fetch_offset >= progress.last_fetch_leader_log_end_offset
        ):
            caught_up_ms = progress.last_fetch_ms
        else:
            caught_up_ms = None
        if caught_up_ms is not None and (
            progress.last_caught_up_ms is None or caught_up_ms > progress.last_caught_up_ms
        ):
            progress.last_caught_up_ms = caught_up_ms
        progress.last_fetch_leader_log_end_offset = self._log_end_offset
        progress.last_fetch_ms = now_ms

    def _update_isr_membership(self, follower_id: str, progress: _FollowerProgress, now_ms: int) -> bool:
        leo = progress.log_end_offset
        assert leo is not None
        if follower_id in self._isr:
            if leo >= self._high_watermark:
                return False
            # It lost committed data (e.g. crashed before fsync): no longer in sync.
            self._remove_from_isr(frozenset({follower_id}))
            return True
        # Kafka's three conditions. Reaching this epoch's start offset guards against a HW
        # that lags the previous leader's (KAFKA-7128); being caught up within this term
        # implies it, the explicit check keeps the reason visible.
        if (
            leo >= self._high_watermark
            and leo >= self._epoch_start_offset
            and not self._is_lagging(progress, now_ms)
        ):
            self._isr |= {follower_id}
            return True
        return False

    def _remove_from_isr(self, followers: frozenset[str]) -> None:
        self._isr -= followers
        self._removed_unconfirmed |= followers

    def _is_lagging(self, progress: _FollowerProgress, now_ms: int) -> bool:
        if progress.last_caught_up_ms is None:
            return True
        return now_ms - progress.last_caught_up_ms > self.config.replica_lag_ms_max

    def _advance_high_watermark(self) -> bool:
        """HW = min LEO over every ISR the coordinator may hold; only ever moves forward,
        and only while the ISR has ``min_insync_replicas`` members (module docstring)."""
        if self._role is not Role.LEADER:
            return False
        if min(len(self._isr), len(self._committed_isr)) < self.config.min_insync_replicas:
            return False
        members = self._isr | self._committed_isr | self._removed_unconfirmed
        if planted_bugs.PLANTED is PlantedBug.HIGH_WATERMARK:  # a demo of a broken promise: mafka4.planted_bugs
            members = frozenset()  # no follower bounds the HW: it follows this log's end
        lowest = self._log_end_offset
        for member in members:
            if member == self.replica_id:
                continue
            leo = self._followers[member].log_end_offset
            if leo is None:
                return False
            lowest = min(lowest, leo)
        if lowest <= self._high_watermark:
            return False
        self._high_watermark = lowest
        return True

    def _check_invariants(self) -> None:
        assert 0 <= self._high_watermark <= self._log_end_offset, (self._high_watermark, self._log_end_offset)
        assert self.epochs.latest_epoch <= self._leader_epoch, (self.epochs.latest_epoch, self._leader_epoch)
        if self._role is Role.LEADER:
            assert self.epochs.latest_epoch == self._leader_epoch
            assert self.replica_id in self._isr, f"leader {self.replica_id} left its own ISR {self._isr}"
            assert self._isr <= set(self._replicas)
            if planted_bugs.PLANTED is PlantedBug.HIGH_WATERMARK:
                return  # the planted bug breaks the check below; the demo is that the checkers see it
            for member in self._isr - {self.replica_id}:
                leo = self._followers[member].log_end_offset
                assert leo is None or leo >= self._high_watermark, (member, leo, self._high_watermark)
