"""Moving one VP replica between two live read nodes, as a step machine over the VP's state (pure).

A ``ReplicaMove`` takes the replica of one VP from ``source`` to ``target`` without a moment
in which the VP has no in-sync leader, and without a moment in which a record readers may have
seen exists on fewer RISR members than before. It is three writes of the VP's
``VirtualPartitionState``, each a fenced compare-and-swap by the controller at the next leader
epoch, with one wait between the first two::

    ADD_TARGET       replicas + target (last), outside the RISR; the target copies the leader's log
    (wait)           until the VP leader counts the target in sync and etcd holds the RISR with it
    MOVE_LEADERSHIP  only if the source leads: the target leads the next epoch (it is in the RISR)
    REMOVE_SOURCE    the target takes the source's place in ``replicas``; the source leaves
                     ``replicas`` and the RISR; its node deletes its log

With ``read_replicas=1`` (one replica, the leader) every move is a leader move; a follower's
move skips MOVE_LEADERSHIP. Who is in sync is the VP leader's decision alone (``risr.state``):
the machine never adds anyone to the RISR, it only reads what the leader recorded.

**Why each step is safe.** ADD_TARGET changes no RISR and no leader: readers and the HW are
untouched. MOVE_LEADERSHIP elects a RISR member, as a failover does (``virtual.failover``):
every RISR member holds every record below the VP high watermark, and the old leader follows
the new one, truncating a tail it alone held (never below the HW). REMOVE_SOURCE drops a RISR
member that does not lead, while the target (in the RISR) and the leader stay: every record
below the HW keeps a copy on a live RISR member. Every write bumps the leader epoch: the
leader takes office again with the new replica list (``become_leader`` at an epoch it already
holds changes nothing), and a RISR write of the old epoch is refused, so a RISR naming the
source cannot be written back after REMOVE_SOURCE.

**Resuming.** ``next_move_step`` reads only the state etcd holds now and the live read nodes,
so it is idempotent: a controller that died between two writes (or whose write's answer was
lost) calls it again with what etcd holds and gets the next step, or ``MoveDone``. The state
also changes under a move (the leader's RISR writes, a failover, a reshard sealing or retiring
the VP); the machine follows it, e.g. a target that fell out of the RISR is waited for again.

**Abandoning.** A move continues while it can end, and is abandoned (``MoveAbandoned``) when it
cannot, with the state that takes it back if one is needed (``rollback``):

* the VP is gone or retired (its logs are deleted on every replica's node; nothing to move);
* the replicas changed under it (the source left, not for this move; or the target is gone);
* the target is not live before it leads: the rollback removes it. If it is in the RISR, only
  while the leader is live (a dead replica serves no reader, and the live leader, in the RISR,
  holds every record below the HW); while the leader is down the target stays, since it may be
  the one to lead next;
* the source is not live while the target still needs it (nothing written yet, or the source
  leads and the target is outside the RISR, so it can copy from nobody): the rollback removes
  the target; the upkeep of gone read nodes and the repair own the source's replica. A source
  follower that died while the target catches up from a live leader does not stop the move:
  its end removes the dead replica, as the gone-node upkeep would;
* a VP sealed before its move started, when the move only balances load
  (``MovePurpose.BALANCE``): a sealed VP is only drained until it is retired, so copying its log
  gains nothing. A sealed VP's move that started goes on (a sealed VP is never fed again, so a
  target in the RISR holds its whole log: the seal requires HW == LEO), and a move that
  releases a node (``MovePurpose.RELEASE``) moves sealed VPs too, else the node would wait for
  their retention.

While the VP's leader is not live the machine waits (``MoveWaits.LEADER_NOT_LIVE``): the repair
fails it over first, and a move's write would race that failover. Once the target leads, the
move is only ever finished, never taken back: going back would be another leader change.

Invariants (asserted on every state returned): the written state is a valid
``VirtualPartitionState`` (replicas distinct, leader in the RISR); the leader epoch grows by
one; a step's RISR loses no member except the source in REMOVE_SOURCE (a rollback's only the
target); the leader changes only in MOVE_LEADERSHIP, from the source to the target, which was in
the RISR; the replica count is the original's, plus one between ADD_TARGET and REMOVE_SOURCE.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import AbstractSet

from mafka4.virtual.vp_state import VirtualPartitionState


class MovePurpose(enum.Enum):
    """Why a replica moves (it decides whether a sealed VP still moves)."""

    BALANCE = "onto a new read node, to even out hosted replicas"
    RELEASE = "off a read node to release"


@dataclass(frozen=True, slots=True, order=True)
class ReplicaMove:
    """Move the replica of ``topic``'s VP ``vp`` from read node ``source`` to read node ``target``."""

    topic: str
    vp: int
    source: str
    target: str
    purpose: MovePurpose = dataclasses.field(default=MovePurpose.BALANCE, compare=False)

    def __post_init__(self) -> None:
        assert self.source != self.target, f"{self}: a move needs two read nodes"

    def __str__(self) -> str:
        return f"{self.topic}/v{self.vp}: {self.source} -> {self.target}"


class MoveStepKind(enum.Enum):
    ADD_TARGET = "the target joins the replicas, outside the RISR"
    MOVE_LEADERSHIP = "the target, in the RISR, leads the next epoch"
    REMOVE_SOURCE = "the source leaves the replicas and the RISR"


class MoveWaits(enum.Enum):
    TARGET_NOT_IN_SYNC = "the target copies the leader's log; the leader has not counted it in sync yet"
    LEADER_NOT_LIVE = "the VP's leader is not live: the repair fails it over first"


class MoveAbandonedBecause(enum.Enum):
    VP_GONE = "the VP's state is gone (its topic was deleted)"
    VP_RETIRED = "the VP was retired: its logs are deleted everywhere"
    VP_SEALED = "the VP was sealed before the move started: it is only drained now, moving it gains nothing"
    REPLICAS_CHANGED = "the VP's replicas changed under the move (the source or the target left otherwise)"
    SOURCE_NOT_LIVE = "the source read node is not live and the target still needs it"
    TARGET_NOT_LIVE = "the target read node is not live"
    # Decided by the controller, not here: a move that kept waiting past its bound is taken back.
    TOOK_TOO_LONG = "the move kept waiting past replica_move_time_ms_max: its target is taken back"


@dataclass(frozen=True, slots=True)
class WriteState:
    """Write ``state`` (fenced CAS on the revision read), then announce its roles to its replicas."""

    kind: MoveStepKind
    state: VirtualPartitionState


@dataclass(frozen=True, slots=True)
class MoveWait:
    """Nothing to write now; ask again after the VP's state or the live read nodes changed."""

    reason: MoveWaits


@dataclass(frozen=True, slots=True)
class MoveDone:
    """The target holds the replica and the source none: its node may delete the source's log."""


@dataclass(frozen=True, slots=True)
class MoveAbandoned:
    """The move stops; if ``rollback`` is set, write it (fenced CAS) to take the target back out."""

    reason: MoveAbandonedBecause
    rollback: VirtualPartitionState | None = None


MoveOutcome = WriteState | MoveWait | MoveDone | MoveAbandoned


def next_move_step(move: ReplicaMove, state: VirtualPartitionState | None,
                   live_read_nodes: AbstractSet[str]) -> MoveOutcome:
    """What ``move`` does next, given the VP's ``state`` as etcd holds it now (None: no key) and the
    read nodes live now; see the module docstring."""
    if state is None:
        return MoveAbandoned(MoveAbandonedBecause.VP_GONE)
    assert state.vp == move.vp, (move, state.vp)
    if state.retired:
        return MoveAbandoned(MoveAbandonedBecause.VP_RETIRED)
    source, target = move.source, move.target
    if source not in state.replicas:
        if target in state.replicas:
            return MoveDone()
        return MoveAbandoned(MoveAbandonedBecause.REPLICAS_CHANGED)
    if target not in state.replicas:
        return _start(move, state, live_read_nodes)
    if target not in state.risr:
        return _while_joining(move, state, live_read_nodes)
    if state.leader not in live_read_nodes:
        # The target, in the RISR, may be the one to lead next: it stays while the leader is down.
        return MoveWait(MoveWaits.LEADER_NOT_LIVE)
    if target not in live_read_nodes:  # it does not lead: the leader is live
        return MoveAbandoned(MoveAbandonedBecause.TARGET_NOT_LIVE, take_back(move, state, live_read_nodes))
    if state.leader == source:
        return _write(move, state, MoveStepKind.MOVE_LEADERSHIP,
                      dataclasses.replace(state, leader=target, leader_epoch=state.leader_epoch + 1))
    replicas = tuple(target if node == source else node for node in state.replicas if node != target)
    return _write(move, state, MoveStepKind.REMOVE_SOURCE,
                  dataclasses.replace(state, replicas=replicas, risr=tuple(n for n in state.risr if n != source),
                                      leader_epoch=state.leader_epoch + 1))


def _start(move: ReplicaMove, state: VirtualPartitionState, live: AbstractSet[str]) -> MoveOutcome:
    """Before ADD_TARGET: nothing of the move is written yet, so abandoning needs no rollback."""
    if move.source not in live:
        return MoveAbandoned(MoveAbandonedBecause.SOURCE_NOT_LIVE)
    if move.target not in live:
        return MoveAbandoned(MoveAbandonedBecause.TARGET_NOT_LIVE)
    if state.sealed_end_offset is not None and move.purpose is MovePurpose.BALANCE:
        return MoveAbandoned(MoveAbandonedBecause.VP_SEALED)
    if state.leader not in live:
        return MoveWait(MoveWaits.LEADER_NOT_LIVE)
    return _write(move, state, MoveStepKind.ADD_TARGET,
                  dataclasses.replace(state, replicas=(*state.replicas, move.target),
                                      leader_epoch=state.leader_epoch + 1))


def _while_joining(move: ReplicaMove, state: VirtualPartitionState, live: AbstractSet[str]) -> MoveOutcome:
    """Between ADD_TARGET and the leader's RISR write with the target (the target is not in the RISR)."""
    if move.target not in live:
        return MoveAbandoned(MoveAbandonedBecause.TARGET_NOT_LIVE, take_back(move, state, live))
    if state.leader == move.source and move.source not in live:
        return MoveAbandoned(MoveAbandonedBecause.SOURCE_NOT_LIVE, take_back(move, state, live))
    if state.leader not in live:
        return MoveWait(MoveWaits.LEADER_NOT_LIVE)
    return MoveWait(MoveWaits.TARGET_NOT_IN_SYNC)


def take_back(move: ReplicaMove, state: VirtualPartitionState,
              live_read_nodes: AbstractSet[str]) -> VirtualPartitionState | None:
    """The state that takes ``move``'s target back out of the VP: for a controller that abandons a
    move (here, or because it took longer than it allows).

    None if there is nothing to take back (the target holds no replica, or the source left), or
    it must not be: the target leads (finish the move instead, or let the repair fail over if the
    target died), or it is in the RISR while the leader is not live (it may be the one that leads
    next, and the only one left holding every record below the HW).
    """
    if move.target not in state.replicas or state.leader == move.target or move.source not in state.replicas:
        return None
    if move.target in state.risr and state.leader not in live_read_nodes:
        return None
    taken_back = dataclasses.replace(state, replicas=tuple(n for n in state.replicas if n != move.target),
                                     risr=tuple(n for n in state.risr if n != move.target),
                                     leader_epoch=state.leader_epoch + 1)
    _check_epoch_and_count(state, taken_back)
    assert taken_back.leader == state.leader, (state, taken_back)
    assert set(state.risr) - set(taken_back.risr) <= {move.target}, (state, taken_back)
    return taken_back


def _write(move: ReplicaMove, before: VirtualPartitionState, kind: MoveStepKind,
           after: VirtualPartitionState) -> WriteState:
    check_step(move, before, kind, after)
    return WriteState(kind, after)


def check_step(move: ReplicaMove, before: VirtualPartitionState, kind: MoveStepKind,
               after: VirtualPartitionState) -> None:
    """Assert the invariants of one step of ``move`` from ``before`` to ``after`` (module docstring).

    ``VirtualPartitionState`` itself asserts that ``after``'s replicas are distinct and its leader
    is in its RISR."""
    _check_epoch_and_count(before, after)
    lost = set(before.risr) - set(after.risr)
    if kind is MoveStepKind.REMOVE_SOURCE:
        assert lost <= {move.source} and move.source not in after.replicas, (move, before, after)
        assert move.target in after.risr and after.leader != move.source, (move, after)
    else:
        assert not lost, f"{move}: {kind.name} took {sorted(lost)} out of the RISR"
    if kind is MoveStepKind.MOVE_LEADERSHIP:
        assert (before.leader, after.leader) == (move.source, move.target), (move, before, after)
        assert move.target in before.risr, f"{move}: the target leads before it is in the RISR"
    else:
        assert after.leader == before.leader, (move, kind, before, after)
    if kind is MoveStepKind.ADD_TARGET:
        assert move.target not in before.replicas and move.target not in after.risr, (move, before, after)


def _check_epoch_and_count(before: VirtualPartitionState, after: VirtualPartitionState) -> None:
    assert after.leader_epoch == before.leader_epoch + 1, f"v{before.vp}: epoch {before.leader_epoch} -> " \
                                                          f"{after.leader_epoch}, must grow by one"
    assert abs(len(after.replicas) - len(before.replicas)) <= 1, (before, after)
    assert (after.vp, after.hash_range, after.sealed_end_offset, after.retired) == \
           (before.vp, before.hash_range, before.sealed_end_offset, before.retired), (before, after)
