"""A replica's state after a restart, from its directory and its recovered log.

Shared by the physical and the virtual replica actors and by the simulator's shells of both,
so that every one of them restarts by the same rules:

* leader epochs: the checkpoint, cut at the log end; without one, rebuilt from the batches,
  which carry their leader epoch;
* high watermark: the checkpoint, within the log's range (a checkpoint can be older or, after
  a lost tail, newer than the log);
* producer state: every batch header from the log start, in order.
"""

from __future__ import annotations

from pathlib import Path

from mafka4.limits import ReplicaConfig
from mafka4.log.checkpoint import read_checkpoint
from mafka4.log.epochs import EpochHistory
from mafka4.log.log import Log
from mafka4.log.producer_state import ProducerStateTable

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "high-watermark"


def recovered_epochs(directory: Path, log: Log) -> EpochHistory:
    text = read_checkpoint(directory / EPOCH_CHECKPOINT)
    epochs = EpochHistory.from_text(text) if text else EpochHistory()
    epochs.truncate_from(log.log_end_offset)
    if text is None:
        for header in log.batch_headers(log.log_start_offset):
            if header.leader_epoch > epochs.latest_epoch:
                epochs.assign(header.leader_epoch, header.base_offset)
    return epochs


def recovered_high_watermark(directory: Path, log: Log) -> int:
    text = read_checkpoint(directory / HIGH_WATERMARK_CHECKPOINT)
    saved = int(text) if text and text.strip().isdigit() else 0
    return max(log.log_start_offset, min(saved, log.log_end_offset))


def recovered_producers(log: Log, config: ReplicaConfig) -> ProducerStateTable:
    producers = ProducerStateTable(config.producer_batches_remembered, config.producer_ids_max)
    for header in log.batch_headers(log.log_start_offset):
        producers.record(header)
    return producers
