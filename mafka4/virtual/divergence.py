"""Where a VP follower's log leaves its leader's: leader-epoch truncation for read replicas.

After a VP leader failover, the new leader holds everything below the old VP high watermark
(it was in the RISR) but may lack the old leader's last records above it; a follower (or the
old leader, restarted) may hold them. Those records were never readable, yet they must go:
the new leader appends different records at those VP offsets. As on the write path
(``physical.replica``, Kafka's KIP-101/KIP-279), each follower fetch carries the epoch of the
follower's last batch; the leader answers "diverging" with the end of that epoch in its own
history, and the follower truncates and asks again until its log is a prefix of the leader's.

Truncating to the follower's high watermark instead would be unsafe: a follower's HW can be
below what readers already read from the leader, and the records between would come back at
other VP offsets when refed (feeders interleave physical partitions differently each time).

Pure: no I/O. Both sides pass their ``EpochHistory`` and log end offset.
"""

from __future__ import annotations

from mafka4.log.epochs import NO_EPOCH, EpochHistory


def divergence(
    epochs: EpochHistory, log_end_offset: int, fetch_offset: int, last_fetched_epoch: int
) -> tuple[int, int] | None:
    """The leader's ``(epoch, end offset)`` answer if the follower's log is not a prefix of its own.

    None: the follower may fetch from ``fetch_offset``.
    """
    if last_fetched_epoch == NO_EPOCH:
        # A follower without batches of any epoch can only be wrong about its length.
        return (NO_EPOCH, log_end_offset) if fetch_offset > log_end_offset else None
    epoch, end_offset = epochs.end_offset_for(last_fetched_epoch, log_end_offset)
    if epoch != last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def truncation_offset(
    epochs: EpochHistory, log_end_offset: int, high_watermark: int, answer_epoch: int, leader_end_offset: int
) -> int:
    """Where a follower truncates its log after the leader answered ``(answer_epoch, leader_end_offset)``.

    If this log has batches of the answered epoch, both logs hold a prefix of what that
    epoch's leader wrote: truncate to the shorter. Otherwise truncate to where this log's
    largest epoch below the answer ends; the next fetch (with an older last epoch) continues
    the search. Each round removes batches or an epoch entry, so the search ends.
    """
    own_epoch, own_end = epochs.end_offset_for(answer_epoch, log_end_offset)
    if answer_epoch == NO_EPOCH or own_epoch == NO_EPOCH:
        if leader_end_offset >= 0:
            return min(leader_end_offset, log_end_offset)
        return min(high_watermark, log_end_offset)
    if own_epoch == answer_epoch:
        return min(leader_end_offset, own_end, log_end_offset)
    return min(own_end, log_end_offset)
