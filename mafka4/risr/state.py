"""RISR: the read in-sync replicas of one virtual partition (VP), the read-side twin of the ISR.

``RisrState`` is the VP leader's pure view (no I/O, no clock): the VP replica core
(``virtual.replica_core``) calls it with the leader's appends and flushes, its followers'
fetches, the feed streams' progress and ``now_ms``, and carries out its decisions. It owns:

* each replica's ``ReplicaStatus`` (the state machine below), log end offset (LEO) and last
  caught-up time;
* the RISR (the ``IN_SYNC`` replicas, the leader always among them) and the VP high watermark
  (HW) = the minimum LEO of the RISR (capped at the leader's flushed offset while the leader is
  alone, see below); consumers read only below it;
* whether the leader's feed lags the physical high watermarks (``feed_lagging_partitions``).

Replica states and transitions (``_TRANSITIONS``; any other transition is a bug, asserted)::

    JOINING     -> CATCHING_UP   first fetch, behind
    JOINING     -> IN_SYNC       first fetch, caught up
    CATCHING_UP -> IN_SYNC       caught up
    IN_SYNC     -> LAGGING       not caught up for over read_replica_lag_ms_max, or lost data
    LAGGING     -> IN_SYNC       caught up again

A replica is caught up when its fetch reaches the leader's LEO (or the LEO the leader had at
its previous fetch: Kafka's rule, which proves it was caught up then). An ``IN_SYNC`` replica
not caught up for more than ``read_replica_lag_ms_max`` (``tick``), or whose fetch offset falls
below the HW (it lost data), leaves the RISR: ``LAGGING``, it stops serving reads. It returns
once caught up with a LEO at or above the HW. Only RISR members serve reads and only they may
become leader (``pick_leader``).

The leader lagging the physical partitions. The leader is fed from the physical partitions;
when its fed offsets have not reached the physical HWs for ``feed_lag_ms_max`` (same
caught-up rule; a partition whose last report reached its HW is idle, not lagging: streams
send an idle VP nothing on a timer), ``feed_lagging_partitions`` names them and the actor
reports it, so the controller can move leadership to another RISR member. The leader stays in the RISR
meanwhile: every follower copies the leader, so removing it would stop reads without making
any read fresher (a deliberate refinement of DESIGN.md section 6, which says it leaves).

RISR changes and the coordinator: as for the physical ISR (KIP-497's "maximal RISR"), a
change returned by ``tick`` / ``RisrDecision.risr_changed`` must be written to the
coordinator, and the HW is bounded by every member of any RISR the coordinator may hold: the
current RISR, the last confirmed one (``risr_committed``) and every replica that left the RISR
since that confirmation (a replica added by a write whose answer was lost, then moved to
``LAGGING``, is in neither of the other two but may be in etcd). The coordinator could elect
any of them, and consumers must never have read VP offsets a new leader lacks.

A new leader computes its HW at once: alone in its RISR it serves its whole log (a closed
parent VP is never fed again, so waiting for the next feed could hide its tail for ever), up
to what it flushed (below).

The lone leader (the RISR twin of the write side's eligible leader replicas, KIP-966). VP logs
are flushed lazily: replication, not fsync, protects what readers saw. A leader alone in the
RISR has no copy to lean on, and the coordinator would elect it again after a power loss that
cut its unflushed tail, so readers could have seen offsets the next epoch fills with other
records. Hence: while a VP with two or more replicas has a RISR of its leader alone -- this
leader's RISR, or any RISR the coordinator may hold (the last confirmed one, and every one
this leader had since that confirmation, any of which may have been written) -- the HW never
passes the leader's flushed offset (``leader_flushed``), and ``flush_needed`` asks the leader
to flush right after each append in that state (and at once on entering it, so the tail
readers already saw becomes durable before a RISR of the leader alone is written).

A VP with one replica (``read_replicas=1``) is not a lone leader: it serves its unflushed
tail, and its log flushes by policy. Its records have another copy, the replicated physical
log, so a power loss loses nothing: what it cut from the unflushed tail, the restarted leader
feeds again from the physical log (its ``FeedProgress`` is rebuilt from the log it kept), in a
new leader epoch (``virtual.failover`` bumps it for a restarted leader). The feed interleaves
the physical partitions as their data arrives, so the fed-again tail may hold the same records
at other offsets; a reader that had seen the old tail is told so by its next fetch, which
carries the epoch of the last record it read (``VpReplicaCore.reader_divergence``, Kafka's
KIP-320), and reads again from where the epochs part: duplicates, never a gap. A VP with two
replicas keeps the rule above while its follower is out: the follower's log, the RISR written
in etcd and the failover all lean on a lone leader's tail being durable, and only the
one-replica case was worked through for the divergence readers now detect.

Invariants (asserted): 0 <= HW <= leader LEO; the HW never decreases; HW <= LEO of every RISR
member whose LEO is known; 0 <= flushed offset <= leader LEO, never decreasing; the leader is
``IN_SYNC``; RISR members are replicas.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from mafka4.errors import MafkaError, NotLeader
from mafka4.hashing import key_hash
from mafka4.limits import SECOND_MS, _check_range

_NO_REPLICAS: frozenset[str] = frozenset()  # shared: each empty frozenset() is an object of its own

# --- errors and bounds (to move to mafka4/errors.py and mafka4/limits) ---------------------


class NoReadReplica(MafkaError):
    """No replica of the VP is in sync, so none may serve reads; retry after it catches up."""

    retriable = True


@dataclass(frozen=True, slots=True)
class RisrConfig:
    """Bounds of the read-replica protocol of one VP."""

    # A follower not caught up with the VP leader for this long leaves the RISR and stops serving reads.
    read_replica_lag_ms_max: int = 10 * SECOND_MS
    # The leader's feed not caught up with a physical partition's HW for this long is reported.
    feed_lag_ms_max: int = 10 * SECOND_MS
    # A reader more than this many records below the VP HW is a catch-up reader and is routed
    # away from the replicas serving real-time readers.
    catch_up_lag_records_min: int = 10_000

    def __post_init__(self) -> None:
        _check_range(self, "read_replica_lag_ms_max", 1)
        _check_range(self, "feed_lag_ms_max", 1)
        _check_range(self, "catch_up_lag_records_min", 0)


# --- states and decisions --------------------------------------------------------------------


class ReplicaStatus(enum.Enum):
    JOINING = "joining"  # assigned, has not fetched from this leader yet
    CATCHING_UP = "catching_up"  # fetching, never caught up under this leader
    IN_SYNC = "in_sync"  # RISR member: bounds the HW, serves reads, may lead
    LAGGING = "lagging"  # left the RISR; returns once caught up


_TRANSITIONS = {
    ReplicaStatus.JOINING: {ReplicaStatus.CATCHING_UP, ReplicaStatus.IN_SYNC},
    ReplicaStatus.CATCHING_UP: {ReplicaStatus.IN_SYNC},
    ReplicaStatus.IN_SYNC: {ReplicaStatus.LAGGING},
    ReplicaStatus.LAGGING: {ReplicaStatus.IN_SYNC},
}


@dataclass(frozen=True, slots=True)
class RisrDecision:
    """The leader's answer to a follower fetch."""

    high_watermark: int
    # The fetching replica is a RISR member and may serve reads below high_watermark.
    serving: bool
    # The RISR changed: write it to the coordinator, then call risr_committed.
    risr_changed: bool = False


@dataclass(frozen=True, slots=True)
class FetchRoute:
    """Where a consumer fetch should go."""

    replica_id: str
    catching_up: bool


@dataclass(slots=True)
class _CatchUpClock:
    """When something that follows a moving target (a follower, the leader's feed) last caught up.

    Kafka's rule: a report that reaches the current target proves "caught up now"; one that
    reaches the target of the previous report proves "caught up at the previous report".
    """

    last_caught_up_ms: int | None
    last_report_ms: int | None = None
    last_report_target: int | None = None
    last_report_caught_up: bool = False  # the last report reached its own target

    def report(self, reached: int, target: int, now_ms: int) -> None:
        self.last_report_caught_up = reached >= target
        if reached >= target:
            caught_up_ms: int | None = now_ms
        elif self.last_report_target is not None and reached >= self.last_report_target:
            caught_up_ms = self.last_report_ms
        else:
            caught_up_ms = None
        if caught_up_ms is not None and (self.last_caught_up_ms is None or caught_up_ms > self.last_caught_up_ms):
            self.last_caught_up_ms = caught_up_ms
        self.last_report_target = target
        self.last_report_ms = now_ms

    def lagging(self, lag_ms_max: int, now_ms: int) -> bool:
        return self.last_caught_up_ms is None or now_ms - self.last_caught_up_ms > lag_ms_max

    def lagging_from_ms(self, lag_ms_max: int) -> int | None:
        """The first time at which ``lagging`` holds with no report meanwhile (None: it holds already)."""
        return None if self.last_caught_up_ms is None else self.last_caught_up_ms + lag_ms_max + 1


@dataclass(slots=True)
class _Follower:
    """What the leader knows about one follower; a None LEO means "not fetched yet"."""

    status: ReplicaStatus
    log_end_offset: int | None
    clock: _CatchUpClock


# --- the leader's view -----------------------------------------------------------------------


class RisrState:
    """The VP leader's replica states, RISR and HW; see the module docstring."""

    def __init__(
        self,
        vp_name: str,
        config: RisrConfig,
        leader_id: str,
        replicas: Sequence[str],
        risr: Iterable[str],
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        *,
        flushed_offset: int,
    ):
        """Take office with the coordinator's replicas and RISR and this replica's log, which is
        durable (fsynced) below ``flushed_offset``.

        RISR members start ``IN_SYNC`` with ``now_ms`` as their caught-up time (they get a
        full lag period to fetch); the others start ``JOINING``.
        """
        replicas = tuple(replicas)
        risr_set = frozenset(risr) | {leader_id}
        assert len(set(replicas)) == len(replicas) and leader_id in replicas, (leader_id, replicas)
        assert risr_set <= set(replicas), (risr_set, replicas)
        assert 0 <= high_watermark <= log_end_offset, (high_watermark, log_end_offset)
        assert 0 <= flushed_offset <= log_end_offset, (flushed_offset, log_end_offset)
        self.vp_name = vp_name
        self.config = config
        self.leader_id = leader_id
        self.replicas = replicas
        self._log_end_offset = log_end_offset
        self._flushed_offset = flushed_offset
        self._high_watermark = high_watermark
        self._followers = {
            replica: _Follower(ReplicaStatus.IN_SYNC, None, _CatchUpClock(now_ms)) if replica in risr_set
            else _Follower(ReplicaStatus.JOINING, None, _CatchUpClock(None))
            for replica in replicas if replica != leader_id
        }
        in_sync = self._in_sync()
        # One set where the two agree, as they do in an idle VP: a read node holds 100,000 of them.
        self._risr = risr_set if in_sync == risr_set else in_sync
        self._committed_risr = risr_set
        # Replicas that left the RISR since the last confirmed write (see the module docstring).
        self._removed_unconfirmed: frozenset[str] = _NO_REPLICAS
        # The RISR was the leader alone at the last confirmed write or since (module docstring).
        self._alone_since_committed = risr_set == {leader_id}
        self._sources: dict[int, _CatchUpClock] = {}
        self._advance_high_watermark()
        self._check_invariants()

    # --- read-only view ------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def risr(self) -> frozenset[str]:
        return self._risr

    def _in_sync(self) -> frozenset[str]:
        """The RISR, made from the followers' states: kept in ``_risr`` (made again on every move), as
        every append reads it several times (a VP leader appends hundreds of times a feed round)."""
        in_sync = (r for r, follower in self._followers.items() if follower.status is ReplicaStatus.IN_SYNC)
        return frozenset(in_sync) | {self.leader_id}

    @property
    def committed_risr(self) -> frozenset[str]:
        return self._committed_risr

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def leader_alone(self) -> bool:
        """True while the leader is, or may be in the coordinator, the only RISR member of a VP
        with other replicas: its flushed offset then bounds the HW (see the module docstring; a
        VP with one replica serves unflushed records, and its readers detect a diverged log)."""
        return len(self.replicas) > 1 and self._alone_since_committed

    @property
    def flush_needed(self) -> bool:
        """The leader must flush its log now: it is alone and holds records not yet flushed."""
        return self.leader_alone and self._flushed_offset < self._log_end_offset

    def status(self, replica_id: str) -> ReplicaStatus:
        return ReplicaStatus.IN_SYNC if replica_id == self.leader_id else self._followers[replica_id].status

    def log_end_offset_of(self, replica_id: str) -> int | None:
        return self._log_end_offset if replica_id == self.leader_id else self._followers[replica_id].log_end_offset

    def can_serve_reads(self, replica_id: str) -> bool:
        return replica_id in self.risr

    def feed_lagging_partitions(self, now_ms: int) -> tuple[int, ...]:
        """Physical partitions whose HW the leader's feed has not reached for over ``feed_lag_ms_max``.

        A partition whose last report reached its HW is not lagging however old that report is:
        an idle partition's stream reports nothing new, and a read node does not send each of its
        VPs the same "still caught up" on a timer (an idle VP costs nothing). Kafka's ISR reads an
        idle follower the same way (its LEO equals the leader's: caught up)."""
        lag_ms_max = self.config.feed_lag_ms_max
        return tuple(sorted(
            p for p, clock in self._sources.items()
            if not clock.last_report_caught_up and clock.lagging(lag_ms_max, now_ms)
        ))

    def next_tick_ms(self) -> int | None:
        """The earliest ``now_ms`` at which ``tick`` may move a follower, with no input meanwhile
        (None: none can move by time alone), so that a read node ticks a VP only then, not on
        every pass: the first time an ``IN_SYNC`` follower passes ``read_replica_lag_ms_max``
        since it last caught up. Inputs only move that time later (a catch-up) or add a member
        (a follower entering the RISR): the caller asks again after each."""
        lag_ms_max = self.config.read_replica_lag_ms_max
        deadlines = [progress.clock.lagging_from_ms(lag_ms_max) for progress in self._followers.values()
                     if progress.status is ReplicaStatus.IN_SYNC]
        if not deadlines:
            return None
        return min(0 if deadline is None else deadline for deadline in deadlines)

    def describe(self, now_ms: int) -> dict:
        return {
            "virtual_partition": self.vp_name,
            "leader": self.leader_id,
            "log_end_offset": self._log_end_offset,
            "flushed_offset": self._flushed_offset,
            "high_watermark": self._high_watermark,
            "leader_alone": self.leader_alone,
            "risr": sorted(self.risr),
            "risr_uncommitted": sorted(self.risr ^ self._committed_risr),
            "risr_removed_unconfirmed": sorted(self._removed_unconfirmed),
            "feed_lagging_partitions": list(self.feed_lagging_partitions(now_ms)),
            "replicas": {
                replica: {"status": self.status(replica).value, "log_end_offset": self.log_end_offset_of(replica)}
                for replica in self.replicas
            },
        }

    # --- inputs ------------------------------------------------------------------------

    def leader_appended(self, log_end_offset: int) -> None:
        """The leader's VP log now ends at ``log_end_offset`` (a fed batch was appended)."""
        assert log_end_offset >= self._log_end_offset, (log_end_offset, self._log_end_offset)
        self._log_end_offset = log_end_offset
        self._advance_high_watermark()
        self._check_invariants()

    def leader_flushed(self, flushed_offset: int) -> None:
        """The leader's VP log is durable (fsynced) below ``flushed_offset``."""
        assert self._flushed_offset <= flushed_offset <= self._log_end_offset, (
            flushed_offset, self._flushed_offset, self._log_end_offset)
        self._flushed_offset = flushed_offset
        self._advance_high_watermark()
        self._check_invariants()

    def on_feed(
        self, fed_through: Mapping[int, int], physical_high_watermarks: Mapping[int, int], now_ms: int
    ) -> None:
        """The feeder's progress into this VP (next physical offset per partition) vs the physical HWs.

        For a VP closed by a split epoch, pass each physical HW capped at the closing cut:
        nothing past the cut is meant for it.
        """
        for partition, target in physical_high_watermarks.items():
            clock = self._sources.setdefault(partition, _CatchUpClock(now_ms))
            clock.report(fed_through.get(partition, 0), target, now_ms)

    def on_replica_fetch(self, replica_id: str, fetch_offset: int, now_ms: int) -> RisrDecision:
        """A follower fetched from ``fetch_offset`` (so its LEO is ``fetch_offset``)."""
        progress = self._followers.get(replica_id)
        if progress is None:
            raise NotLeader(
                f"replica {replica_id} fetched virtual partition {self.vp_name} from leader "
                f"{self.leader_id} but is not one of its followers "
                f"{[r for r in self.replicas if r != self.leader_id]}: refresh metadata"
            )
        assert 0 <= fetch_offset <= self._log_end_offset, (
            f"{replica_id} fetches from {fetch_offset}, past the leader's LEO {self._log_end_offset}: "
            f"it must truncate to the leader's log first"
        )
        progress.clock.report(fetch_offset, self._log_end_offset, now_ms)
        progress.log_end_offset = fetch_offset
        changed = self._update_status(replica_id, progress, now_ms)
        self._advance_high_watermark()
        self._check_invariants()
        return RisrDecision(self._high_watermark, progress.status is ReplicaStatus.IN_SYNC, changed)

    def tick(self, now_ms: int) -> bool:
        """Move RISR followers not caught up for over ``read_replica_lag_ms_max`` to ``LAGGING``."""
        changed = False
        lag_ms_max = self.config.read_replica_lag_ms_max
        for replica_id, progress in self._followers.items():
            if progress.status is ReplicaStatus.IN_SYNC and progress.clock.lagging(lag_ms_max, now_ms):
                self._move(replica_id, progress, ReplicaStatus.LAGGING)
                changed = True
        if changed:
            self._advance_high_watermark()
            self._check_invariants()
        return changed

    def risr_committed(self, risr: Iterable[str]) -> None:
        """The coordinator now holds ``risr`` for this VP and this leader."""
        risr_set = frozenset(risr)
        assert self.leader_id in risr_set and risr_set <= set(self.replicas), (risr_set, self.replicas)
        # One set where the two agree (the usual case): ``_bounding_members`` then takes it as is.
        self._committed_risr = self._risr if risr_set == self._risr else risr_set
        # The coordinator holds exactly ``risr_set`` now: replicas that left before this write
        # can no longer be elected. One that left after it was sent is in ``risr_set`` itself.
        self._removed_unconfirmed = _NO_REPLICAS
        self._alone_since_committed = risr_set == {self.leader_id} or self.risr == {self.leader_id}
        self._advance_high_watermark()
        self._check_invariants()

    def route_fetch(self, reader_id: str, position: int) -> FetchRoute:
        """``route_fetch`` over this VP's RISR and HW."""
        return route_fetch(
            reader_id, position, self._high_watermark, self.risr, self.leader_id, self.config, self.vp_name
        )

    # --- internals -----------------------------------------------------------------------

    def _update_status(self, replica_id: str, progress: _Follower, now_ms: int) -> bool:
        """Apply the state machine after a fetch; True if the RISR changed."""
        leo = progress.log_end_offset
        assert leo is not None
        lagging = progress.clock.lagging(self.config.read_replica_lag_ms_max, now_ms)
        caught_up = leo >= self._high_watermark and not lagging
        status = progress.status
        if status is ReplicaStatus.IN_SYNC:
            if leo >= self._high_watermark:
                return False
            self._move(replica_id, progress, ReplicaStatus.LAGGING)  # it lost data below the HW
            return True
        if caught_up:
            self._move(replica_id, progress, ReplicaStatus.IN_SYNC)
            return True
        if status is ReplicaStatus.JOINING:
            self._move(replica_id, progress, ReplicaStatus.CATCHING_UP)
        return False

    def _move(self, replica_id: str, progress: _Follower, status: ReplicaStatus) -> None:
        assert status in _TRANSITIONS[progress.status], (
            f"illegal RISR transition of {replica_id} in {self.vp_name}: {progress.status.value} -> {status.value}"
        )
        if progress.status is ReplicaStatus.IN_SYNC:
            self._removed_unconfirmed |= {replica_id}
        progress.status = status
        self._risr = self._in_sync()
        if self.risr == {self.leader_id}:
            self._alone_since_committed = True  # this RISR may be written at any time from now

    def _advance_high_watermark(self) -> None:
        """HW = min LEO over every RISR the coordinator may hold, and at most the flushed offset
        while the leader is alone; only ever moves forward."""
        lowest = self._flushed_offset if self.leader_alone else self._log_end_offset
        for member in self._bounding_members():
            if member == self.leader_id:
                continue
            leo = self._followers[member].log_end_offset
            if leo is None:
                return
            lowest = min(lowest, leo)
        self._high_watermark = max(self._high_watermark, lowest)

    def _bounding_members(self) -> frozenset[str]:
        """Every member of a RISR the coordinator may hold (the leader included): the RISR itself
        while it is the one last written and no member left unconfirmed, as in a VP being fed,
        whose every append asks (a union made per append cost more than the rest of the check)."""
        risr = self._risr
        if risr is self._committed_risr and not self._removed_unconfirmed:
            return risr
        return risr | self._committed_risr | self._removed_unconfirmed

    def _check_invariants(self) -> None:
        assert 0 <= self._high_watermark <= self._log_end_offset, (self._high_watermark, self._log_end_offset)
        assert 0 <= self._flushed_offset <= self._log_end_offset, (self._flushed_offset, self._log_end_offset)
        assert self.leader_id in self._risr
        for member in self._risr:
            if member != self.leader_id:
                follower = self._followers.get(member)
                assert follower is not None, (member, self.replicas)  # every member is a replica
                leo = follower.log_end_offset
                assert leo is None or leo >= self._high_watermark, (member, leo, self._high_watermark)


# --- decisions that need no state ------------------------------------------------------------


def route_fetch(
    reader_id: str,
    position: int,
    high_watermark: int,
    risr: Iterable[str],
    leader_id: str,
    config: RisrConfig,
    vp_name: str = "",
) -> FetchRoute:
    """The RISR member a reader at VP offset ``position`` should fetch from.

    With one member everyone reads there. Otherwise the members, leader first, split into a
    real-time half (the first ``ceil(n / 2)``: the leader's page cache holds the tail it just
    appended) and a catch-up half. A reader more than ``catch_up_lag_records_min`` below the
    HW reads from the catch-up half, so its reads of old segments evict nobody's tail. Within
    a half a stable hash of ``reader_id`` spreads readers and keeps each on one replica.
    """
    members = sorted(risr, key=lambda replica: (replica != leader_id, replica))
    if not members:
        raise NoReadReplica(
            f"virtual partition {vp_name} has no in-sync read replica: retry once a replica caught up"
        )
    catching_up = high_watermark - position > config.catch_up_lag_records_min
    real_time_count = (len(members) + 1) // 2
    if len(members) == 1:
        group = members
    elif catching_up:
        group = members[real_time_count:]
    else:
        group = members[:real_time_count]
    return FetchRoute(group[key_hash(reader_id.encode()) % len(group)], catching_up)


def pick_leader(
    replicas: Sequence[str], risr: Iterable[str], alive: Iterable[str], exclude: Iterable[str] = ()
) -> str | None:
    """The next VP leader: the first replica (preferred order) in the RISR, alive, not excluded.

    None when no RISR member qualifies: the VP stays leaderless (consumers wait) rather than
    elect a replica that may lack records consumers have already read. Every RISR member
    holds every record below the HW, so any of them is a safe choice.
    """
    risr_set, alive_set, excluded = frozenset(risr), frozenset(alive), frozenset(exclude)
    assert risr_set <= set(replicas), (risr_set, replicas)
    for replica in replicas:
        if replica in risr_set and replica in alive_set and replica not in excluded:
            return replica
    return None
