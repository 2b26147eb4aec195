"""The protocol state of one virtual-partition (VP) replica, pure: the VP twin of ``ReplicaState``.

``VpReplicaCore`` owns everything a VP replica decides; its shell owns the log and the clock.
The shell is ``virtual.hosted_vp.HostedVp``, inside a ``ReadNode`` actor and, unchanged, inside
the simulator (``simulations.dst.virtual``, which only turns its messages into ``HostedVp`` and
core calls). Inputs are plain values and ``now_ms``; every call that changes something the shell
must act on returns a ``Ready`` (etcd/raft's name): what to cut from the log, what to persist,
what to tell the coordinator, whom to wake. The shell carries it out in field order.

What it owns:

* the role (``VpRole``), the leader epoch and the leader's id, fenced as on the write path:
  a role notice or a request of an older epoch is refused (``StaleEpoch``), one of another
  epoch or for another role is refused (``NotLeader``);
* the leader-epoch history (``EpochHistory``), the log's end offset and its flushed offset
  (below which it is fsynced) as the shell reports them;
* the high watermark (HW): a follower keeps the leader's HW capped at its own log end; the
  leader's is its ``RisrState`` (the RISR's smallest log end, KIP-497's maximal RISR, and no
  more than the leader flushed while it is alone in the RISR);
* on the leader, feeding: ``FeedProgress`` (the last source offset applied per physical
  partition, so re-feeding appends nothing twice) and what the feed streams reported
  (``fed_through`` and the physical HW per partition, for the RISR's feed-lag check and for
  sealing a closed VP);
* on a follower, whether the leader called it a RISR member (``serving``) and when it last
  heard from the leader: a follower cut off for longer than ``read_replica_lag_ms_max``
  stops serving reads by itself.

Leader protocol. ``plan_feed`` picks the records the log lacks; ``leader_appended`` is called
once they are in the log. A follower fetch (``replica_fetch``) either answers "diverging" (the
follower truncates by ``divergence``'s answer and asks again) or reports the follower's log end
to the RISR, which may change the RISR (``Ready.write_risr``: record it in etcd, then
``risr_written``) and the HW (``Ready.wake``). ``tick`` moves followers that stopped catching
up out of the RISR; ``next_tick_ms`` says when the next ``tick`` may do so.

Lone leader (``RisrState``'s module docstring has the why). While a VP with two or more
replicas has a RISR of its leader alone, its HW never passes what the leader flushed, and
every call that leaves the leader alone with unflushed records -- an append, a RISR shrinking
to the leader (before ``Ready.write_risr`` records it), taking leadership -- returns
``Ready.flush``. The shell fsyncs the log (at once, or batched on a worker thread: ``HostedVp``)
and reports the flushed offset through ``flushed`` (also after flushes of its own: the log's
policy, segment rolls, truncation), which moves the HW. So a lone leader's log still holds
every offset a reader saw after a power loss, and the controller may elect it again.

Readers (Kafka's KIP-320). A VP with one replica (``read_replicas=1``) serves what it has not
flushed: after a power loss it feeds what it lost again from the physical log, in a new epoch
and in an order that may differ. Every consumer fetch carries the epoch of the last record the
reader read before its offset; ``reader_divergence`` checks it against the epoch history as
``replica_fetch`` checks a follower's (``divergence``), and a reader whose history is not a
prefix of this log moves back to the answered end offset and reads again.

Follower protocol. ``fetch_position`` is what the follower asks for; the leader's answer comes
back through ``truncate`` (diverging: ``Ready.truncate_to``), ``follower_appended`` (the
batches the shell appended, whose leader epochs extend the history) and ``leader_progress``
(the leader's HW and whether this follower serves reads).

A replica leads an epoch at most once, as on the write path: a repeated notice for the epoch
it leads is a no-op, and a leader that restarted learns a new epoch from the controller
(``virtual.failover``). A new leader rebuilds its ``FeedProgress`` from its log (the shell
reads it: I/O), so the progress is exactly what the log holds.

Invariants (asserted): 0 <= log start <= HW <= log end; 0 <= flushed offset <= log end; the
latest epoch in the history is at most ``leader_epoch`` (equal on the leader once it appended);
a follower's HW never passes its log end.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from mafka4.batch_frame import BatchHeader
from mafka4.errors import InvalidConfig, NotLeader, ReadReplicaNotInSync, StaleEpoch
from mafka4.log.epochs import NO_EPOCH, NO_OFFSET, EpochHistory
from mafka4.risr.state import RisrConfig, RisrState
from mafka4.virtual.divergence import divergence, truncation_offset
from mafka4.virtual.vp_records import FeedProgress, SourcedRecord


class VpRole(enum.Enum):
    NONE = "none"  # opened, no role announced yet (a fresh or restarted replica)
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(frozen=True, slots=True)
class Ready:
    """What a shell does after a core call, in field order; ``Ready()`` is "nothing"."""

    # Cut the log to this offset (a follower whose log diverged from its leader's).
    truncate_to: int | None = None
    # fsync the log now (a leader alone in its RISR), then report the offset to ``flushed``.
    flush: bool = False
    # Rewrite the leader-epoch checkpoint (``log.replica_storage.EPOCH_CHECKPOINT``).
    save_epochs: bool = False
    # Record this RISR in the coordinator (compare-and-swap on the VP key, only while it
    # names this replica as leader of ``leader_epoch``), then call ``risr_written``.
    write_risr: tuple[str, ...] | None = None
    # Long-polling fetches (followers', consumers') may have an answer now.
    wake: bool = False

    def __bool__(self) -> bool:
        """False for "nothing": cheaper than comparing with ``NOTHING``, which a shell asks after every call."""
        return (self.truncate_to is not None or self.flush or self.save_epochs or self.write_risr is not None
                or self.wake)

    def __or__(self, other: "Ready") -> "Ready":
        truncations = [offset for offset in (self.truncate_to, other.truncate_to) if offset is not None]
        return Ready(
            truncate_to=min(truncations) if truncations else None,
            flush=self.flush or other.flush,
            save_epochs=self.save_epochs or other.save_epochs,
            write_risr=other.write_risr if other.write_risr is not None else self.write_risr,
            wake=self.wake or other.wake,
        )


NOTHING = Ready()
# What every append of a fed leader returns (a Ready made per append cost a microsecond, paid
# by every VP in every feed round): it woke readers, and a lone leader also owes a flush.
_APPENDED = Ready(wake=True)
_APPENDED_UNFLUSHED = Ready(flush=True, wake=True)


class ReplicaAnswer(NamedTuple):
    """The leader's answer to one follower fetch (the shell adds the data from ``read_from``).

    Named tuples, not frozen dataclasses, for the values that cross read nodes: Ray pickles
    every call, and tuples pickle several times faster."""

    high_watermark: int
    serving: bool  # the follower is a RISR member and may serve reads below the HW
    diverging: tuple[int, int] | None = None  # (epoch, end offset): the follower truncates; no data
    read_from: int | None = None  # send the batches from this offset (None: nothing to send)


class FetchPosition(NamedTuple):
    """What a follower asks its leader for."""

    leader_id: str
    leader_epoch: int
    fetch_offset: int  # the follower's log end offset
    last_fetched_epoch: int  # the epoch of its last batch (``EpochHistory.latest_epoch``)


@dataclass(slots=True)
class _LeaderState:
    risr: RisrState
    progress: FeedProgress
    fed_through: dict[int, int] = field(default_factory=dict)  # partition -> next offset the stream hands over
    physical_high_watermarks: dict[int, int] = field(default_factory=dict)


class VpReplicaCore:
    """The state of one VP replica; see the module docstring."""

    def __init__(self, vp_name: str, replica_id: str, config: RisrConfig, epochs: EpochHistory,
                 log_start_offset: int, log_end_offset: int, high_watermark: int, *, flushed_offset: int):
        """A replica opened from its recovered log (durable below ``flushed_offset``), with no role yet."""
        self.vp_name = vp_name
        self.replica_id = replica_id
        self.config = config
        self.epochs = epochs
        self.role = VpRole.NONE
        self.leader_epoch = -1
        self.leader_id: str | None = None
        self._log_start_offset = log_start_offset
        self._log_end_offset = log_end_offset
        self._flushed_offset = flushed_offset
        self._high_watermark = high_watermark  # a follower's (or a replica with no role); the leader's is its RISR's
        self._leader: _LeaderState | None = None
        self._serving = False
        self._last_leader_contact_ms: int | None = None
        self._check_invariants()

    # --- read-only view ----------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def flushed_offset(self) -> int:
        """The log is durable below this offset, as the shell last reported (``flushed``)."""
        return self._flushed_offset

    @property
    def high_watermark(self) -> int:
        return self._leader.risr.high_watermark if self._leader is not None else self._high_watermark

    @property
    def is_leader(self) -> bool:
        return self.role is VpRole.LEADER

    @property
    def risr(self) -> frozenset[str]:
        """The leader's RISR (empty on a follower: the coordinator holds the truth)."""
        return self._leader.risr.risr if self._leader is not None else frozenset()

    @property
    def flush_needed(self) -> bool:
        """A lone leader holds records it has not flushed: its HW waits for the fsync (``Ready.flush``)."""
        return self._leader is not None and self._leader.risr.flush_needed

    @property
    def has_followers(self) -> bool:
        return self._leader is not None and len(self._leader.risr.replicas) > 1

    def fed_through(self, partitions: int) -> tuple[int, ...]:
        """Per physical partition, the next offset the feed streams reported handing this leader."""
        reported = self._leader.fed_through if self._leader is not None else {}
        return tuple(reported.get(partition, 0) for partition in range(partitions))

    def check_leader(self, leader_epoch: int) -> None:
        """Raise ``StaleEpoch`` or ``NotLeader`` unless this replica leads ``leader_epoch``."""
        self._require_leader(leader_epoch)

    def last_applied(self, leader_epoch: int, partition: int) -> int:
        """The last source offset of ``partition`` in the log (``NOTHING_APPLIED``: none)."""
        return self._require_leader(leader_epoch).progress.last_applied(partition)

    def reader_divergence(self, offset: int, last_epoch: int) -> tuple[int, int] | None:
        """A consumer's fetch from ``offset``, whose last record before it had ``last_epoch`` (``NO_EPOCH``:
        none known), checked against this log as a follower's is (Kafka's KIP-320): ``(epoch, end
        offset)`` if the reader's history is not a prefix of this log, else None.

        After a power loss a VP's only replica feeds what it lost again in a new epoch, with the
        records at other offsets (``virtual.failover``); a reader that had read the lost tail is
        told so here, moves back to the end offset and reads on (duplicates, never a gap).
        """
        if last_epoch < NO_EPOCH:
            raise InvalidConfig(f"{self.vp_name}: a fetch with last leader epoch {last_epoch}: send the epoch of "
                                f"the last record read, or {NO_EPOCH} if none is known")
        diverging = divergence(self.epochs, self._log_end_offset, offset, last_epoch)
        if diverging == (NO_EPOCH, NO_OFFSET):  # no epochs known here (an empty log): judge the length only
            return divergence(self.epochs, self._log_end_offset, offset, NO_EPOCH)
        return diverging

    def fetch_position(self) -> FetchPosition:
        assert self.role is VpRole.FOLLOWER and self.leader_id is not None, f"{self.vp_name}: not a follower"
        return FetchPosition(self.leader_id, self.leader_epoch, self._log_end_offset, self.epochs.latest_epoch)

    def serving(self, now_ms: int) -> bool:
        """True if this replica may serve consumer reads now (see ``check_serving``)."""
        if self.role is VpRole.LEADER:
            return True
        return (self.role is VpRole.FOLLOWER and self._serving and self._last_leader_contact_ms is not None
                and now_ms - self._last_leader_contact_ms <= self.config.read_replica_lag_ms_max)

    def check_serving(self, now_ms: int) -> None:
        """Raise ``ReadReplicaNotInSync`` unless this replica may serve reads: the leader, or a
        follower its leader called a RISR member within ``read_replica_lag_ms_max``."""
        if not self.serving(now_ms):
            raise ReadReplicaNotInSync(
                f"{self.vp_name}: replica {self.replica_id} ({self.role.value}) is not in the RISR and serves "
                f"no reads; fetch from the leader {self.leader_id} or another RISR member"
            )

    def describe(self, now_ms: int) -> dict:
        if self._leader is not None:
            described = self._leader.risr.describe(now_ms)
            described["fed_through"] = dict(self._leader.fed_through)
            described["last_applied"] = self._leader.progress.snapshot()
        else:
            described = {"virtual_partition": self.vp_name, "leader": self.leader_id,
                         "high_watermark": self._high_watermark, "serving": self.serving(now_ms)}
        return {**described, "role": self.role.value, "replica_id": self.replica_id,
                "leader_epoch": self.leader_epoch, "log_end_offset": self._log_end_offset,
                "flushed_offset": self._flushed_offset}

    # --- role changes ------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, replicas: Sequence[str], risr: Sequence[str],
                      progress: FeedProgress | None, now_ms: int) -> Ready:
        """Lead ``leader_epoch`` with the coordinator's replicas and RISR. ``progress`` is rebuilt
        from this replica's log by the shell; None only while this replica leads already (a new
        epoch of the same leader, as a replica move's steps write), whose held progress goes on:
        the log is its own and unchanged, so reading it again would give the same. A repeated
        notice changes nothing."""
        if self.role is VpRole.LEADER and self.leader_epoch == leader_epoch:
            return NOTHING
        if progress is None:
            assert self._leader is not None, f"{self.vp_name}: a new leader's feed progress must be rebuilt from its log"
            progress = self._leader.progress
        self._check_new_epoch(leader_epoch)
        high_watermark = self.high_watermark
        self.role, self.leader_epoch, self.leader_id = VpRole.LEADER, leader_epoch, self.replica_id
        self.epochs.assign(leader_epoch, self._log_end_offset)
        state = RisrState(self.vp_name, self.config, self.replica_id, replicas, risr, self._log_end_offset,
                          high_watermark, now_ms, flushed_offset=self._flushed_offset)
        self._leader = _LeaderState(state, progress)
        self._serving, self._last_leader_contact_ms = False, None
        self._check_invariants()
        return Ready(flush=state.flush_needed, save_epochs=True, wake=True)

    def become_follower(self, leader_epoch: int, leader_id: str) -> Ready:
        """Follow ``leader_id`` in ``leader_epoch``. A repeated notice changes nothing."""
        assert leader_id != self.replica_id, f"{self.vp_name}: {leader_id} told to follow itself"
        if self.role is VpRole.FOLLOWER and self.leader_epoch == leader_epoch and self.leader_id == leader_id:
            return NOTHING
        self._check_new_epoch(leader_epoch)
        self._high_watermark = self.high_watermark
        self.role, self.leader_epoch, self.leader_id = VpRole.FOLLOWER, leader_epoch, leader_id
        self._leader = None
        self._serving, self._last_leader_contact_ms = False, None
        self._check_invariants()
        return Ready(wake=True)

    def _check_new_epoch(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch:
            raise StaleEpoch(
                f"{self.vp_name}: role notice for leader epoch {leader_epoch} but replica {self.replica_id} "
                f"is at epoch {self.leader_epoch}; the sender is fenced"
            )

    def _require_leader(self, leader_epoch: int) -> _LeaderState:
        if leader_epoch < self.leader_epoch:
            raise StaleEpoch(
                f"{self.vp_name}: request for leader epoch {leader_epoch}, replica {self.replica_id} is at "
                f"epoch {self.leader_epoch}: refresh the VP metadata and retry"
            )
        if self._leader is None or leader_epoch != self.leader_epoch:
            raise NotLeader(
                f"{self.vp_name}: replica {self.replica_id} is not the leader of epoch {leader_epoch} (role "
                f"{self.role.value}, epoch {self.leader_epoch}, leader {self.leader_id}); retry after a metadata refresh"
            )
        return self._leader

    # --- leader: feeding ---------------------------------------------------------------

    def plan_feed(self, leader_epoch: int, records: Sequence[SourcedRecord]) -> list[SourcedRecord]:
        """The records of one feed call (one partition, ascending offsets) the log lacks."""
        return self._require_leader(leader_epoch).progress.unapplied(records)

    def leader_appended(self, records: Sequence[SourcedRecord], log_end_offset: int) -> Ready:
        """``records`` (from ``plan_feed``) are in the log, which now ends at ``log_end_offset``."""
        leader = self._leader
        assert leader is not None and records and log_end_offset == self._log_end_offset + len(records), (
            self.vp_name, len(records), log_end_offset, self._log_end_offset)
        leader.progress.applied(records)
        self._log_end_offset = log_end_offset
        leader.risr.leader_appended(log_end_offset)
        self._check_invariants()
        return _APPENDED_UNFLUSHED if leader.risr.flush_needed else _APPENDED

    def flushed(self, flushed_offset: int) -> Ready:
        """The shell fsynced the log below ``flushed_offset`` (asked by ``Ready.flush``, by the log's
        flush policy, on a segment roll or by a truncation); a lone leader's HW may move."""
        assert 0 <= flushed_offset <= self._log_end_offset, (self.vp_name, flushed_offset, self._log_end_offset)
        self._flushed_offset = flushed_offset
        if self._leader is None:
            return NOTHING
        high_watermark_before = self._leader.risr.high_watermark
        self._leader.risr.leader_flushed(flushed_offset)
        self._check_invariants()
        return Ready(wake=self._leader.risr.high_watermark != high_watermark_before)

    def fed(self, leader_epoch: int, partition: int, fed_through: int, physical_high_watermark: int,
            now_ms: int) -> None:
        """A feed stream handed this leader every record of ``partition`` below ``fed_through``;
        the partition's HW is ``physical_high_watermark`` (capped at the closing cut for a closed VP)."""
        leader = self._require_leader(leader_epoch)
        leader.fed_through[partition] = max(leader.fed_through.get(partition, 0), fed_through)
        leader.physical_high_watermarks[partition] = physical_high_watermark
        leader.risr.on_feed(leader.fed_through, leader.physical_high_watermarks, now_ms)

    # --- leader: followers and the RISR ------------------------------------------------

    def replica_fetch(self, follower_id: str, follower_epoch: int, fetch_offset: int, last_fetched_epoch: int,
                      now_ms: int) -> tuple[ReplicaAnswer, Ready]:
        """A follower fetched from ``fetch_offset``; the answer and what the shell must do."""
        leader = self._require_leader(follower_epoch)
        risr = leader.risr
        diverging = divergence(self.epochs, self._log_end_offset, fetch_offset, last_fetched_epoch)
        if diverging is not None:
            return ReplicaAnswer(risr.high_watermark, False, diverging), NOTHING
        high_watermark_before = risr.high_watermark
        decision = risr.on_replica_fetch(follower_id, fetch_offset, now_ms)
        # As on the write path: wake waiters only when the HW or the RISR moved, or idle
        # followers would end each other's long polls in a busy loop.
        ready = Ready(flush=risr.flush_needed,
                      write_risr=tuple(sorted(risr.risr)) if decision.risr_changed else None,
                      wake=decision.risr_changed or risr.high_watermark != high_watermark_before)
        read_from = fetch_offset if fetch_offset < self._log_end_offset else None
        return ReplicaAnswer(risr.high_watermark, decision.serving, None, read_from), ready

    def current_answer(self, follower_id: str, position: FetchPosition) -> ReplicaAnswer:
        """The answer to a fetch already reported (``replica_fetch``), from the state now: a long
        poll that waited for a change sends the current HW and data without reporting again."""
        leader = self._require_leader(position.leader_epoch)
        risr = leader.risr
        diverging = divergence(self.epochs, self._log_end_offset, position.fetch_offset, position.last_fetched_epoch)
        if diverging is not None:
            return ReplicaAnswer(risr.high_watermark, False, diverging)
        read_from = position.fetch_offset if position.fetch_offset < self._log_end_offset else None
        return ReplicaAnswer(risr.high_watermark, risr.can_serve_reads(follower_id), None, read_from)

    def tick(self, now_ms: int) -> Ready:
        """Move RISR followers that stopped catching up to lagging (leader only)."""
        if self._leader is None or not self._leader.risr.tick(now_ms):
            return NOTHING
        risr = self._leader.risr
        # A RISR of the leader alone is flushed (``Ready.flush``) before it is written.
        return Ready(flush=risr.flush_needed, write_risr=tuple(sorted(risr.risr)), wake=True)

    def next_tick_ms(self) -> int | None:
        """The earliest ``now_ms`` at which ``tick`` may change something, with no other call
        meanwhile (None: never by time alone; always on a follower), for a shell that ticks only
        replicas whose time came (``RisrState.next_tick_ms``)."""
        return None if self._leader is None else self._leader.risr.next_tick_ms()

    def risr_written(self, risr: Sequence[str], leader_epoch: int) -> Ready:
        """The coordinator now holds ``risr`` for this leader and ``leader_epoch``."""
        if self._leader is None or leader_epoch != self.leader_epoch:
            return NOTHING  # deposed meanwhile: the write was fenced or is moot
        self._leader.risr.risr_committed(risr)
        return Ready(flush=self._leader.risr.flush_needed, wake=True)

    # --- follower ----------------------------------------------------------------------

    def truncate(self, diverging: tuple[int, int]) -> Ready:
        """The leader answered "diverging": where this log must be cut (Kafka's KIP-279 search)."""
        assert self.role is VpRole.FOLLOWER, self.vp_name
        offset = truncation_offset(self.epochs, self._log_end_offset, self._high_watermark, *diverging)
        self.epochs.truncate_from(offset)
        self._log_end_offset = offset
        self._flushed_offset = min(self._flushed_offset, offset)
        self._log_start_offset = min(self._log_start_offset, offset)  # a log cut below its start is empty
        self._high_watermark = max(min(self._high_watermark, offset), self._log_start_offset)
        self._check_invariants()
        return Ready(truncate_to=offset, save_epochs=True)

    def follower_appended(self, headers: Sequence[BatchHeader]) -> Ready:
        """The shell appended the leader's batches ``headers`` (in order) to the log."""
        assert self.role is VpRole.FOLLOWER, self.vp_name
        if not headers:
            return NOTHING
        assert headers[0].base_offset == self._log_end_offset, (self.vp_name, headers[0].base_offset,
                                                               self._log_end_offset)
        saved = False
        for header in headers:
            if header.leader_epoch > self.epochs.latest_epoch:
                saved |= self.epochs.assign(header.leader_epoch, header.base_offset)
        self._log_end_offset = headers[-1].next_offset
        self._check_invariants()
        return Ready(save_epochs=saved)

    def leader_progress(self, high_watermark: int, serving: bool, now_ms: int) -> Ready:
        """The leader's answer (after any data was appended): its HW and whether this follower serves."""
        assert self.role is VpRole.FOLLOWER, self.vp_name
        before = (self._high_watermark, self.serving(now_ms))
        self._high_watermark = max(self._high_watermark, min(high_watermark, self._log_end_offset))
        self._serving, self._last_leader_contact_ms = serving, now_ms
        self._check_invariants()
        return Ready(wake=(self._high_watermark, self.serving(now_ms)) != before)

    # --- the log's start (retention) ---------------------------------------------------

    def log_start_moved(self, log_start_offset: int) -> None:
        """Retention deleted segments: the log now starts at ``log_start_offset``."""
        assert self._log_start_offset <= log_start_offset <= self.high_watermark, (
            self.vp_name, self._log_start_offset, log_start_offset, self.high_watermark)
        self._log_start_offset = log_start_offset

    # --- internals ---------------------------------------------------------------------

    def _check_invariants(self) -> None:
        assert 0 <= self._log_start_offset <= self.high_watermark <= self._log_end_offset, (
            self.vp_name, self._log_start_offset, self.high_watermark, self._log_end_offset)
        assert 0 <= self._flushed_offset <= self._log_end_offset, (
            self.vp_name, self._flushed_offset, self._log_end_offset)
        assert self.role is VpRole.NONE or self.epochs.latest_epoch <= self.leader_epoch, (
            self.vp_name, self.epochs.latest_epoch, self.leader_epoch)
