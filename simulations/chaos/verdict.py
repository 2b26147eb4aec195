"""The verdict of a chaos run: it passes only when nothing went wrong, and names everything that did.

A run that could not be judged whole must not pass: a cluster that never healed may have
hidden a loss behind a replica still catching up, a replica whose log could not be read was
left out of the divergence and loss checks, and a member that exited abnormally read nothing
after its exit. So the verdict fails on any of (``Failure``, in the order reasons are listed):

* ``anomaly``: a checker of ``simulations.checkers`` found something other than a commit
  regression (lost, unseen, duplicate, reordered, diverged, misplaced, wrong-lane, delivered-early,
  lost-after-nack);
* ``commit-regressed``: a group's committed offset moved backwards
  (``checkers.check_commits_monotonic``), named on its own because it breaks a promise to
  the group, not to the data;
* ``not-healed``: faults stopped, and the cluster did not get its full ISRs and RISRs, its
  replicas, VP leaders and read nodes back within the heal bound (``heal_timeout_s``);
* ``member-exited-abnormally``: a consumer-group member the nemesis did not kill exited with
  a non-zero code, by a signal, or did not stop within its bound once asked to;
* ``log-unreadable``: a physical or VP replica's final log could not be read.

Every reason is listed, not only the first: a run that did not heal and lost messages says
both. Pure: plain values in (``Evidence``), a ``Verdict`` out.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping

from simulations.checkers import Kind


class Failure(enum.Enum):
    ANOMALY = "anomaly"
    COMMIT_REGRESSED = "commit-regressed"
    NOT_HEALED = "not-healed"
    MEMBER_EXITED_ABNORMALLY = "member-exited-abnormally"
    LOG_UNREADABLE = "log-unreadable"


@dataclass(frozen=True, slots=True)
class MemberExit:
    """How one member process ended."""

    name: str
    killed: bool  # by the nemesis (``kill-member``): a fault, so its exit says nothing
    exit_code: int | None  # None: still running; negative: the signal that ended it
    stop_timed_out: bool = False  # asked to stop, did not within its bound, and was killed

    @property
    def abnormal(self) -> bool:
        return not self.killed and (self.stop_timed_out or self.exit_code != 0)

    def describe(self) -> str:
        if self.stop_timed_out:
            return f"{self.name} did not stop when asked and was killed"
        if self.exit_code is None:
            return f"{self.name} is still running"
        if self.exit_code < 0:
            return f"{self.name} was ended by signal {-self.exit_code}"
        return f"{self.name} exited with {self.exit_code}"


@dataclass(frozen=True, slots=True)
class Evidence:
    """What a run found, as the report holds it."""

    anomalies: Mapping[str, int]  # anomaly kind (``checkers.Kind`` value) -> count
    healed: bool
    heal_timeout_s: float
    unhealthy: tuple[str, ...] = ()  # what was still broken when the heal bound ran out
    members: tuple[MemberExit, ...] = ()
    unreadable: tuple[str, ...] = ()  # replicas whose final log could not be read


@dataclass(frozen=True, slots=True)
class Reason:
    failure: Failure
    detail: str

    def to_json(self) -> dict:
        return {"reason": self.failure.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Verdict:
    reasons: tuple[Reason, ...]

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict:
        return {"passed": self.passed, "reasons": [reason.to_json() for reason in self.reasons]}


def verdict(evidence: Evidence) -> Verdict:
    """The run's verdict; see the module docstring."""
    reasons = []
    found = {kind: count for kind, count in sorted(evidence.anomalies.items()) if count}
    regressed = found.pop(Kind.COMMIT_REGRESSED.value, 0)
    if found:
        reasons.append(Reason(Failure.ANOMALY, ", ".join(f"{kind} {count}" for kind, count in found.items())))
    if regressed:
        reasons.append(Reason(Failure.COMMIT_REGRESSED, f"{regressed} committed offsets moved backwards"))
    if not evidence.healed:
        still = "; ".join(evidence.unhealthy) or "nothing recorded"
        reasons.append(Reason(Failure.NOT_HEALED, f"not healed within {evidence.heal_timeout_s:g} s: {still}"))
    abnormal = [member.describe() for member in evidence.members if member.abnormal]
    if abnormal:
        reasons.append(Reason(Failure.MEMBER_EXITED_ABNORMALLY, "; ".join(abnormal)))
    if evidence.unreadable:
        reasons.append(Reason(Failure.LOG_UNREADABLE, ", ".join(evidence.unreadable)))
    return Verdict(tuple(reasons))
