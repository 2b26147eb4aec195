"""``ReplicaStorage``: what one replica keeps on disk, and how it comes back after a restart.

Every replica keeps its data the same way, physical (``physical.actor.PhysicalPartition`` and
the simulator's ``SimReplica``) or virtual (``virtual.hosted_vp.HostedVp``), so that all of
them restart by the same rules. One directory per replica:

    <segments, indexes, recovery-point>   the segmented ``Log`` (see log.py)
    leader-epoch-checkpoint               ``EpochHistory.to_text``: one ``<epoch> <start offset>`` line per epoch
    high-watermark                        the high watermark, in decimal

Both checkpoints are replaced atomically (``checkpoint.write_checkpoint``), so a crash leaves
the old or the new text. The owner saves the epochs whenever its history changes (a new
leader epoch, a truncation) and the high watermark as often as it likes: ``save_high_watermark``
writes only a value that differs from the last one written, so a periodic caller costs no
fsync while the HW stands still. Replicas save the HW in two steps, the write and fsync on a
worker thread (``stage_high_watermark``) and the rename on their own (``commit_high_watermark``),
which they skip once closed: a late checkpoint never lands in a directory that a new replica
may have taken over.

Deleting a replica's data (its topic was deleted) closes the log unflushed and first renames the
directory aside (``discard``: ``~discarded-<name>-<token>``), so a replica opened in the same
place at once starts empty however long the removal takes (``remove_trees``, on a worker thread
where an owner hosts many replicas); an owner removes what a crash left discarded at its start
(``remove_discarded``).

Recovery, after ``Log.open`` recovered the segments:

* leader epochs: the checkpoint, cut at the log end; without one, rebuilt from the batches,
  which carry their leader epoch;
* high watermark: the checkpoint, within the log's range (a checkpoint can be older or, after
  a lost tail, newer than the log); 0 (then the log start) without one;
* producer state (physical replicas only): every batch header from the log start, in order.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import Iterable, NamedTuple

from mafka4.limits.servers import LogConfig, ReplicaConfig
from mafka4.log.checkpoint import commit_checkpoint, read_checkpoint, stage_checkpoint, write_checkpoint
from mafka4.log.epochs import EpochHistory
from mafka4.log.log import Log
from mafka4.log.log_dir_budget import LogDirBudget
from mafka4.log.producer_state import ProducerStateTable

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "high-watermark"
# The name a discarded replica directory starts with: no replica is ever opened under it ('~' is
# in no topic name, so no replica directory starts so).
DISCARDED_PREFIX = "~discarded-"


class StagedHighWatermark(NamedTuple):
    """A high-watermark checkpoint written and fsynced beside its place, not yet renamed into it."""

    path: Path
    high_watermark: int


class ReplicaStorage:
    """One replica's directory: its ``Log`` and the checkpoints beside it; see the module docstring."""

    def __init__(self, directory: str | os.PathLike, log_config: LogConfig, now_ms: int,
                 budget: LogDirBudget | None = None, flushes_in_background: bool = False):
        """Open (creating if missing) and recover the log in ``directory``, its appends bounded by
        ``budget``; ``flushes_in_background``: see ``Log.open``."""
        self.directory = Path(directory)
        self.log = Log.open(self.directory, log_config, now_ms, budget, flushes_in_background)
        # None until this instance wrote one: the first save always writes, whatever the file holds.
        self._saved_high_watermark: int | None = None

    # --- recovery -------------------------------------------------------------------------

    def recovered_epochs(self) -> EpochHistory:
        text = read_checkpoint(self.directory / EPOCH_CHECKPOINT)
        epochs = EpochHistory.from_text(text) if text else EpochHistory()
        epochs.truncate_from(self.log.log_end_offset)
        if text is None:
            for header in self.log.batch_headers(self.log.log_start_offset):
                if header.leader_epoch > epochs.latest_epoch:
                    epochs.assign(header.leader_epoch, header.base_offset)
        return epochs

    def recovered_high_watermark(self) -> int:
        text = read_checkpoint(self.directory / HIGH_WATERMARK_CHECKPOINT)
        saved = int(text) if text and text.strip().isdigit() else 0
        return max(self.log.log_start_offset, min(saved, self.log.log_end_offset))

    def recovered_producers(self, config: ReplicaConfig) -> ProducerStateTable:
        producers = ProducerStateTable(config.producer_batches_remembered, config.producer_ids_max)
        for header in self.log.batch_headers(self.log.log_start_offset):
            producers.record(header)
        return producers

    # --- checkpoints ----------------------------------------------------------------------

    def save_epochs(self, epochs: EpochHistory) -> None:
        write_checkpoint(self.directory / EPOCH_CHECKPOINT, epochs.to_text())

    def high_watermark_saved(self, high_watermark: int) -> bool:
        """Whether ``high_watermark`` is the value this instance last wrote (a save would write nothing)."""
        return high_watermark == self._saved_high_watermark

    def save_high_watermark(self, high_watermark: int) -> bool:
        """Checkpoint ``high_watermark`` unless it is the value last written; True if it wrote."""
        staged = self.stage_high_watermark(high_watermark)
        if staged is not None:
            self.commit_high_watermark(staged)
        return staged is not None

    def stage_high_watermark(self, high_watermark: int) -> StagedHighWatermark | None:
        """The write and fsync of ``save_high_watermark``, None if ``high_watermark`` is the value
        last written. It touches the checkpoint's tmp file only, so one caller at a time may run it
        on a worker thread while the log is used on its own."""
        if high_watermark == self._saved_high_watermark:
            return None
        return StagedHighWatermark(stage_checkpoint(self.directory / HIGH_WATERMARK_CHECKPOINT, str(high_watermark)),
                                   high_watermark)

    def commit_high_watermark(self, staged: StagedHighWatermark) -> None:
        """Put a staged checkpoint in place (on the replica's own thread, while it is open)."""
        commit_checkpoint(staged.path, self.directory / HIGH_WATERMARK_CHECKPOINT)
        self._saved_high_watermark = staged.high_watermark

    # --- closing --------------------------------------------------------------------------

    def close(self, delete_data: bool = False) -> None:
        """Close the log (flushed, marked clean; again is a no-op); with ``delete_data`` remove the directory."""
        if delete_data:
            remove_trees([self.discard()])
        else:
            self.log.close()

    def discard(self) -> Path | None:
        """Close the log unflushed and move the directory aside (see the module docstring); the
        path to remove, None if the directory was gone already."""
        self.log.close_unflushed()
        aside = self.directory.with_name(f"{DISCARDED_PREFIX}{self.directory.name}-{secrets.token_hex(4)}")
        try:
            os.rename(self.directory, aside)
        except FileNotFoundError:
            return None
        return aside


def remove_trees(paths: Iterable[Path | None]) -> None:
    """Remove discarded directories (None entries skipped)."""
    for path in paths:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def remove_discarded(root: str | os.PathLike) -> int:
    """Remove the discarded directories directly under ``root`` that a crash left; how many."""
    try:
        names = [name for name in os.listdir(root) if name.startswith(DISCARDED_PREFIX)]
    except FileNotFoundError:
        return 0
    remove_trees(Path(root, name) for name in names)
    return len(names)
