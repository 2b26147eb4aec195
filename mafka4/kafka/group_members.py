"""A Kafka group member as the Kafka listener keeps it: its generation, its assignment, when it must rejoin (pure).

Each Kafka consumer that joins a group through the listener is one member session of mafka4's
group coordinator (``frontend.group_sessions``); the listener runs that session's steps on the
consumer's behalf (``kafka.group_handlers``). What Kafka's protocol needs beyond the session is
kept here, per member:

- **generation**: a counter of the member's own, one more at each JoinGroup. SyncGroup,
  Heartbeat and OffsetCommit name the generation they belong to; another one is
  ``ILLEGAL_GENERATION``, as a Kafka coordinator answers a member that missed a rebalance.
  Members do not share a generation: mafka4's ownership has none (each member's sync is its
  own step, ``coordinator.groups.vp_ownership``), and a Kafka client compares only its own.
- **syncing**: from a JoinGroup to its SyncGroup, the member is rebalancing: its heartbeats and
  commits are ``REBALANCE_IN_PROGRESS``.
- **assignment**: what the last SyncGroup handed out, the partitions (VP numbers in Mafka4
  mode) the session owned then. A commit of a partition outside it is ``ILLEGAL_GENERATION``:
  the client's idea of what it owns is of another generation, and it rejoins.
- **rejoin**: the listener asks the client to rejoin at its next heartbeat
  (``REBALANCE_IN_PROGRESS``) even though the coordinator has no change for the member: after a
  commit that reached a closed VP's sealed end (the parent is consumed: the rejoin's sync
  releases it and hands out its children, ``kafka.group_handlers``), or after a commit the
  coordinator answered lost (the VP changed owner: what the client holds is stale).
- **committed**: the offsets (and leader epochs) this member committed, sent as its positions
  with each sync: a VP it releases is committed there once more (never backwards,
  ``vp_groups``), as the mafka4 client's positions are.
- **sealed**: the sealed end offsets of closed VPs, as the last sync told them.

``KafkaMembers`` holds the members a listener serves, by member id (the session's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

from mafka4.errors import UnknownMember
from mafka4.kafka import error_codes
from mafka4.log.epochs import NO_EPOCH
from mafka4.protocol.group_api import MemberPosition


@dataclass(frozen=True, slots=True)
class CommitAsked:
    """One partition of an OffsetCommit: its offset and the leader epoch the client gave (-1: none)."""

    partition: int
    offset: int
    leader_epoch: int = NO_EPOCH


@dataclass(eq=False)
class KafkaMember:
    member_id: str
    group: str
    topic: str
    principal: str
    protocol: str  # the assignor name the answers carry (``consumer_protocol.chosen_protocol``)
    virtual: bool = True  # it reads a Mafka4-mode topic's VPs (else a Mafka3-mode topic's partitions)
    session_timeout_s: float = 10.0
    generation: int = 0
    syncing: bool = True
    rejoin: bool = False
    assignment: tuple[int, ...] = ()
    committed: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (offset, leader epoch)
    sealed: dict[int, int] = field(default_factory=dict)  # closed VP -> its sealed end offset

    def joined(self) -> int:
        """A JoinGroup of this member: its new generation."""
        self.generation += 1
        self.syncing = True
        return self.generation

    def generation_error(self, generation: int) -> int:
        """``ILLEGAL_GENERATION`` for a request of another generation than the member's, else ``NONE``."""
        return error_codes.NONE if generation == self.generation else error_codes.ILLEGAL_GENERATION

    def positions(self) -> tuple[MemberPosition, ...]:
        """The member's positions for a sync or a leave: its commits of what it owns (the high
        watermark it saw is not known here: the offset stands for it)."""
        return tuple(MemberPosition(p, offset, offset, epoch)
                     for p, (offset, epoch) in sorted(self.committed.items()) if p in self.assignment)

    def synced(self, owned: Iterable[int], sealed: Mapping[int, int] | None) -> tuple[int, ...]:
        """A SyncGroup's session sync answered: the assignment is ``owned`` (``sealed``: the closed
        VPs' sealed ends, None: not told, keep what was known)."""
        self.assignment = tuple(sorted(owned))
        self.syncing = False
        self.rejoin = False
        if sealed is not None:
            self.sealed = dict(sealed)
        self.committed = {p: c for p, c in self.committed.items() if p in self.assignment}
        return self.assignment

    def heartbeat_error(self, generation: int, changed: bool) -> int:
        """The error code of a Heartbeat of ``generation``; ``changed``: the session must sync."""
        error = self.generation_error(generation)
        if error:
            return error
        if self.syncing or self.rejoin or changed:
            return error_codes.REBALANCE_IN_PROGRESS
        return error_codes.NONE

    def commit_request(self, generation: int,
                       asked: Iterable[CommitAsked]) -> tuple[dict[int, int], tuple[MemberPosition, ...]]:
        """An OffsetCommit of ``generation``: the error codes of the partitions refused, and the
        positions to commit for the others."""
        asked = list(asked)
        error = self.generation_error(generation)
        if not error and self.syncing:
            error = error_codes.REBALANCE_IN_PROGRESS
        if error:
            return {a.partition: error for a in asked}, ()
        refused = {a.partition: error_codes.ILLEGAL_GENERATION for a in asked if a.partition not in self.assignment}
        if refused:
            self.rejoin = True
        positions = tuple(MemberPosition(a.partition, a.offset, a.offset, a.leader_epoch)
                          for a in asked if a.partition in self.assignment)
        return refused, positions

    def commit_answered(self, positions: Iterable[MemberPosition], lost: Iterable[int]) -> dict[int, int]:
        """The session's commit of ``positions`` answered with ``lost`` (no longer owned): each
        partition's error code. A commit that reached a closed VP's sealed end asks the client to
        rejoin (see the module docstring)."""
        lost = set(lost)
        codes = {}
        for position in positions:
            if position.id in lost:
                codes[position.id] = error_codes.ILLEGAL_GENERATION
                self.rejoin = True
                continue
            codes[position.id] = error_codes.NONE
            before = self.committed.get(position.id)
            if before is None or before[0] <= position.offset:
                self.committed[position.id] = (position.offset, position.leader_epoch)
            sealed = self.sealed.get(position.id)
            if sealed is not None and position.offset >= sealed:
                self.rejoin = True
        return codes


class KafkaMembers:
    """The Kafka members a listener serves, by member id."""

    def __init__(self) -> None:
        self._members: dict[str, KafkaMember] = {}

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member: KafkaMember) -> None:
        self._members[member.member_id] = member

    def get(self, group: str, member_id: str, principal: str) -> KafkaMember:
        """The member; ``UnknownMember`` if there is none of that id in ``group`` for ``principal``."""
        member = self._members.get(member_id)
        if member is None or member.group != group or member.principal != principal:
            raise UnknownMember(f"group {group!r} has no Kafka member {member_id!r} on this coordinator (its session "
                                f"expired, or the coordinator restarted): join the group again")
        return member

    def drop(self, member_id: str) -> None:
        self._members.pop(member_id, None)

    def prune(self, hosted: Callable[[str], bool]) -> list[str]:
        """Forget the members whose session is no longer ``hosted`` (expired); their ids."""
        gone = [member_id for member_id in self._members if not hosted(member_id)]
        for member_id in gone:
            del self._members[member_id]
        return gone
