"""The rule every keeper of an etcd lease follows: when to refresh it, and when to stop trusting it.

Pure: times in (milliseconds of one monotonic clock), answers out. ``lease_holder`` makes the
etcd calls.

**Refreshes** are due every third of the TTL (``LEASE_REFRESHES_PER_TTL``) after the last one was
sent, answered or not: two refreshes in a row may go unanswered before the lease is at risk,
and a keeper never calls an etcd that is away more often than that.

**Expiry.** etcd renews a lease to a whole TTL when it *receives* a refresh, which is after the
keeper sent it. So a refresh that etcd confirmed, sent at ``t``, keeps the lease alive until at
least ``t + TTL``, and not necessarily longer. A keeper therefore treats its lease as expired
once a whole TTL passed since it sent the grant or the last refresh that etcd confirmed, and at
once when etcd answers that the lease is gone. Measured from the answer instead, a keeper would
trust its lease for up to one round trip after etcd dropped it, and an active controller could
still act after etcd handed its key to another. The rule errs on the early side (after an etcd
outage the lease may in fact live on), so keepers act on it only in ways that are safe then: the
controller steps down, a keeper of a liveness key writes it again under a new lease.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mafka4.limits import LEASE_REFRESHES_PER_TTL


def refresh_interval_ms(lease_ttl_s: int) -> int:
    """The time between two refreshes of a lease of ``lease_ttl_s``."""
    assert lease_ttl_s > 0, lease_ttl_s
    return lease_ttl_s * 1000 // LEASE_REFRESHES_PER_TTL


def refresh_due_ms(last_attempt_ms: int | None, lease_ttl_s: int) -> int:
    """When the next grant or refresh is due: one interval after the last was sent; at once (0) if none was."""
    return 0 if last_attempt_ms is None else last_attempt_ms + refresh_interval_ms(lease_ttl_s)


@dataclass(frozen=True, slots=True)
class LeaseLife:
    """What a keeper knows about the life of one lease it was granted."""

    ttl_s: int
    confirmed_sent_ms: int  # when the grant, or the last refresh that etcd confirmed, was sent
    gone: bool = False  # etcd answered a refresh with TTL 0: the lease no longer exists

    def __post_init__(self) -> None:
        assert self.ttl_s > 0, self.ttl_s

    @classmethod
    def granted(cls, ttl_s: int, sent_ms: int) -> "LeaseLife":
        """A lease whose grant, sent at ``sent_ms``, etcd answered."""
        return cls(ttl_s, sent_ms)

    def answered(self, sent_ms: int, remaining_ttl_s: int) -> "LeaseLife":
        """After etcd answered a refresh sent at ``sent_ms`` with the lease's remaining TTL (0: gone)."""
        assert not self.gone, "etcd never brings a lease back: a gone lease is not refreshed again"
        assert sent_ms >= self.confirmed_sent_ms, (sent_ms, self.confirmed_sent_ms)
        if remaining_ttl_s <= 0:
            return replace(self, gone=True)
        return replace(self, confirmed_sent_ms=sent_ms)

    def expired(self, now_ms: int) -> bool:
        """True once etcd said the lease is gone, or a whole TTL passed since the last confirmed send."""
        return self.gone or now_ms - self.confirmed_sent_ms >= self.ttl_s * 1000
