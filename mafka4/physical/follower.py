"""What a physical follower does with its leader's answer to a fetch.

One sequence of core calls and disk writes, run by the actor (``PhysicalPartition._follow``)
and by the simulator's ``SimReplica`` alike, so the simulated follower cannot drift from the
real one:

* the leader reports a divergence (leader-epoch truncation, KIP-279): the core says where to
  cut (``ReplicaState.truncation_offset``), the log is cut there, the core forgets what lay
  past it, and the epoch checkpoint is rewritten, since the cut may have removed epochs;
* otherwise the fetched batches are appended and each one reported to the core, which tracks
  epochs and producer state per batch; the epoch checkpoint is rewritten only when a batch
  brought a new epoch; then the follower takes the leader's high watermark.

A truncation cuts the log before it rewrites the epoch checkpoint: after a crash in between,
recovery cuts the checkpointed epochs at the log end (``log.replica_storage``), so the
history still matches the log.
"""

from __future__ import annotations

from mafka4.log.replica_storage import ReplicaStorage
from mafka4.physical.replica import ReplicaState


def apply_leader_answer(state: ReplicaState, storage: ReplicaStorage, diverging: tuple[int, int] | None,
                        data: bytes, high_watermark: int, now_ms: int) -> int | None:
    """Apply one answer of the leader (``diverging`` or else ``data`` and its ``high_watermark``);
    the offset the log was truncated to, or None if it was not."""
    if diverging is not None:
        offset = state.truncation_offset(*diverging)
        storage.log.truncate_to(offset)
        state.truncated(offset)
        storage.save_epochs(state.epochs)
        return offset
    if data:
        epoch_before = state.last_fetched_epoch
        for header in storage.log.append_batches(data, now_ms):
            state.follower_appended(header)
        if state.last_fetched_epoch != epoch_before:
            storage.save_epochs(state.epochs)
    state.follower_high_watermark(high_watermark)
    return None
