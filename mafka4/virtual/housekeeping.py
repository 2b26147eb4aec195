"""``VpHousekeeping``: a read node's periodic passes over its VPs, visiting only those with work.

A read node hosts many VPs (``read_node``: 100,000 on one node once lanes multiply them), most
of them idle; a pass that walked them all cost 7.7 cores per 100,000 idle VPs. So no work runs
per VP on a timer: each pass has a ``VisitSchedule`` of the VPs it must visit, filled by the
VPs' changes (``changed``, called by ``HostedVp``'s ``on_change``: the log grew or was cut, the
HW, the role or the RISR moved) and by deadlines the pass computes from a VP's state after
visiting it. The passes (their timing is the read node's):

* **housekeeping** (every ``housekeeping_interval_ms``): the changed VPs flush by the log's
  policy and checkpoint their HW, their fsyncs on one worker thread (``HostedVp``'s three
  steps). A VP stays in the pass while it has a flush or a checkpoint pending
  (``HostedVp.housekeeping_pending``), so every flush by time and every HW move still reaches
  the disk, and one pass more, which finds it idle and closes its log's files (a read that
  opened them is a change too); then it drops out until it changes again, holding no descriptor.
* **retention** (with the housekeeping pass, every ``retention_check_interval_ms``): the VPs
  changed since the last check (an append may pass ``retention_bytes`` or roll a segment, a HW
  move may free a segment the fed floor held) and those whose oldest segment's
  ``retention_ms`` ran out since (``Log.retention_due_ms``). Segments are deleted at most one
  check late, as before.
* **RISR ticks** (every ``LEADER_TICK_INTERVAL_S``): the leaders with followers that changed and
  those whose next tick came (``VpReplicaCore.next_tick_ms``: the first time an in-sync
  follower may pass ``read_replica_lag_ms_max`` without catching up). A follower that stops
  fetching leaves the RISR at the same tick as when every leader was ticked.

An idle VP is therefore visited only when one of its deadlines comes: an old segment to delete,
a follower that may lag out. ``visits`` counts what each pass visited (``describe``).

Flushing. A lone leader (``RisrState``) fsyncs after each append, and its HW waits for that
fsync. Run on the event loop, those fsyncs took 26-31% of a read node's loop at 256 VPs (py-spy,
``bench feed-lag``), every feed and fetch of the node waiting behind each. So the VP owes the
flush instead (``owe_flush``, wired as ``HostedVp``'s ``owe_flush``), and ``flush_owed_forever``
runs the owed flushes on the worker thread as soon as there are any, in one batch of every VP
that became owed while the batch before ran (``flush_owed``: ``Log.start_flush`` forced, the
fsyncs, then ``HostedVp.finish_owed_flush`` moves the HW). Correctness is unchanged: the HW
still passes only what is fsynced. A log has one flush in flight at most (``Log.start_flush``:
both stage the same checkpoint file), so the housekeeping pass and the owed flushes take turns
with the disk (one lock): an owed flush may wait for a pass's fsyncs to end. A VP dropped
meanwhile is skipped; one whose flush fails is logged and owes it again at the next housekeeping
pass (not at once: a broken disk would spin the loop), and the others' flushes go on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from mafka4.virtual.hosted_vp import HostedVp, VpChores, VpId, run_chores
from mafka4.virtual.visit_schedule import VisitSchedule

logger = logging.getLogger(__name__)


class VpHousekeeping:
    """The passes of one read node over the VPs ``hosted`` finds; see the module docstring."""

    def __init__(self, hosted: Callable[[VpId], HostedVp | None]):
        self._hosted = hosted
        self._flushes: VisitSchedule[VpId] = VisitSchedule()
        self._retention: VisitSchedule[VpId] = VisitSchedule()
        self._ticks: VisitSchedule[VpId] = VisitSchedule()
        self._owed: dict[VpId, None] = {}  # VPs owing a lone leader's fsync, in the order owed (at most every VP)
        self._owed_again: dict[VpId, None] = {}  # those whose owed flush failed: owed again at the next pass
        self._owed_signal = asyncio.Event()  # set when a VP became owed, cleared when a batch takes them
        self._disk = asyncio.Lock()  # one flush of a log at a time: the pass and the owed flushes take turns
        self.visits = {"housekeeping": 0, "retention": 0, "risr_ticks": 0,
                       "owed_flushes": 0}  # VPs visited (owed flushes run) since the start

    def changed(self, hosted: HostedVp) -> None:
        """``hosted`` changed (``HostedVp``'s ``on_change``): the next passes visit it."""
        vp_id = hosted.vp_id
        self._flushes.changed(vp_id)
        self._retention.changed(vp_id)
        if hosted.core.has_followers:
            self._ticks.changed(vp_id)

    def forget(self, vp_id: VpId) -> None:
        """``vp_id`` is no longer hosted."""
        for schedule in (self._flushes, self._retention, self._ticks):
            schedule.forget(vp_id)
        self._owed.pop(vp_id, None)
        self._owed_again.pop(vp_id, None)

    def describe(self) -> dict:
        return {"pending": {"housekeeping": len(self._flushes), "retention": len(self._retention),
                            "risr_ticks": len(self._ticks), "owed_flushes": len(self._owed)},
                "visits": dict(self.visits)}

    # --- housekeeping and retention -------------------------------------------------------

    async def housekeep(self, now_ms: int, retention_due: bool) -> None:
        """One housekeeping pass (with retention when ``retention_due``), its fsyncs on a worker
        thread: on the loop each VP's fsyncs held up every feed and fetch of the node (a physical
        replica's took 5-37 ms each here)."""
        self._owe_again()
        async with self._disk:
            started = self.start(now_ms, retention_due)
            if started:
                await asyncio.to_thread(run_chores, [chores for _, chores, _ in started])
                self.finish(started, now_ms)

    def start(self, now_ms: int, retention_due: bool) -> list[tuple[HostedVp, VpChores, bool]]:
        """The first step of a pass: the chores of each VP to visit, and whether retention looks at it."""
        visits = self._flushes.take(now_ms)
        retained = set(self._retention.take(now_ms)) if retention_due else set()
        started: list[tuple[HostedVp, VpChores, bool]] = []
        for vp_id in dict.fromkeys([*visits, *retained]):
            hosted = self._hosted(vp_id)
            if hosted is None or hosted.closed:
                continue
            try:
                started.append((hosted, hosted.start_housekeeping(now_ms), vp_id in retained))
            except Exception:  # one VP's disk trouble must not stop the others' flushing
                logger.exception("%s: housekeeping failed", vp_id)
                self._revisit(vp_id, vp_id in retained)
        self.visits["housekeeping"] += len(started)
        self.visits["retention"] += sum(1 for _, _, retain in started if retain)
        return started

    def finish(self, started: list[tuple[HostedVp, VpChores, bool]], now_ms: int) -> None:
        """The last step of a pass, once the chores ran: take their results in, apply retention,
        and schedule each VP's next visit."""
        for hosted, chores, retain in started:
            if hosted.closed:
                continue
            vp_id = hosted.vp_id
            try:
                hosted.finish_housekeeping(chores, now_ms, retain)
            except Exception:
                logger.exception("%s: housekeeping failed", vp_id)
                self._revisit(vp_id, retain)
                continue
            if hosted.housekeeping_pending:  # a flush not due yet, or a HW that moved meanwhile
                self._flushes.changed(vp_id)
            if retain:
                self._retention.at(vp_id, retention_deadline(hosted, now_ms))

    def _revisit(self, vp_id: VpId, retain: bool) -> None:
        """A VP whose housekeeping failed is tried again at the next pass (its retention at the next check)."""
        self._flushes.changed(vp_id)
        if retain:
            self._retention.changed(vp_id)

    # --- owed flushes ---------------------------------------------------------------------

    def owe_flush(self, hosted: HostedVp) -> None:
        """``hosted``, a lone leader, owes an fsync (``HostedVp``'s ``owe_flush``): the next
        ``flush_owed`` runs it."""
        self._owed[hosted.vp_id] = None
        self._owed_signal.set()

    async def flush_owed_forever(self, clock: Callable[[], int]) -> None:
        """Run the owed flushes as soon as any VP owes one, until cancelled; each batch holds every
        VP that became owed while the batch before ran. ``clock``: now in ms (``wall_ms``)."""
        while True:
            await self._owed_signal.wait()
            await self.flush_owed(clock())

    async def flush_owed(self, now_ms: int) -> None:
        """fsync the logs of the VPs owed so far on a worker thread, then let their HWs follow."""
        async with self._disk:
            started = self._start_owed(now_ms)
            if started:
                await asyncio.to_thread(run_chores, [chores for _, chores in started])
                self._finish_owed(started)

    def _start_owed(self, now_ms: int) -> list[tuple[HostedVp, VpChores]]:
        owed, self._owed = self._owed, {}
        self._owed_signal.clear()
        started: list[tuple[HostedVp, VpChores]] = []
        for vp_id in owed:
            hosted = self._hosted(vp_id)
            if hosted is None or hosted.closed:
                continue
            try:
                chores = hosted.start_owed_flush(now_ms)
            except Exception:  # one VP's disk trouble must not stop the others' flushing
                logger.exception("%s: owed flush failed", vp_id)
                self._owed_again[vp_id] = None
                continue
            if chores is not None:  # None: flushed meanwhile, or no longer a lone leader
                started.append((hosted, chores))
        self.visits["owed_flushes"] += len(started)
        return started

    def _finish_owed(self, started: list[tuple[HostedVp, VpChores]]) -> None:
        for hosted, chores in started:
            if hosted.closed:
                continue
            vp_id = hosted.vp_id
            try:
                hosted.finish_owed_flush(chores)
            except Exception:
                logger.exception("%s: owed flush failed", vp_id)
                self._owed_again[vp_id] = None
                continue
            if hosted.core.flush_needed and vp_id not in self._owed:
                # Appends since the flush began owe one already; this flush was void instead (a
                # file of it replaced or cut meanwhile: ``Log.finish_flush``).
                self._owed_again[vp_id] = None

    def _owe_again(self) -> None:
        """The VPs whose owed flush failed owe it again (once a pass, so a failing disk is retried
        at the pace of housekeeping, not in a loop)."""
        if self._owed_again:
            self._owed.update(self._owed_again)
            self._owed_again = {}
            self._owed_signal.set()

    # --- RISR ticks -----------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Tick the RISR of the leaders with followers that changed or whose next tick came."""
        for vp_id in self._ticks.take(now_ms):
            hosted = self._hosted(vp_id)
            if hosted is None or hosted.closed or not hosted.core.has_followers:
                continue  # dropped, or leads no followers any more: a change schedules it again
            self.visits["risr_ticks"] += 1
            try:
                hosted.tick(now_ms)
            except Exception:  # a lone leader's flush met a disk error: the other VPs still tick
                logger.exception("%s: RISR tick failed", vp_id)
                self._ticks.changed(vp_id)
                continue
            self._ticks.at(vp_id, hosted.core.next_tick_ms())


def retention_deadline(hosted: HostedVp, now_ms: int) -> int | None:
    """When retention must look at ``hosted`` again if nothing happens to it (None: only after a change)."""
    due_ms = hosted.retention_due_ms()
    # Due already, yet retention just kept the segment: the fed floor (the HW) holds it, and the
    # HW's next move marks the VP changed. Looking at it at every check would find the same.
    return None if due_ms is not None and due_ms <= now_ms else due_ms
