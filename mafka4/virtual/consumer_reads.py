"""What a read node answers consumers: the reads of ``ReadNode.fetch``, ``list_offsets`` and
``offsets_for_time``, over the VP replicas it hosts, where a group lags from (``lag_positions``,
for ``mafka4 group describe``), and the end-to-end latency of the batches a fetch serves
(``observe_end_to_end``: one observation per batch, ``metrics.end_to_end``).

A consumer sends one fetch per read node for every VP it reads there (a ``ConsumerRead`` each)
and gets one ``ConsumerAnswer`` per read, in the same order: whole batches below the VP's high
watermark, or the error that keeps this replica from serving (not hosted here, not a RISR
member, an offset out of range), or "diverging" (the reader's last epoch says it read records
this log no longer holds there: it moves back). One VP's error never fails the others' reads. The long poll
and the fault delay are the actor's; these functions only read, at the ``now_ms`` given.

Invariant: a fetch answer holds at most ``bytes_max`` bytes of batches in all, shared out in
the order of the reads, except that a read with budget left gets at least one whole batch if
its VP has one (``HostedVp.read``), so a batch larger than the budget is never stuck.
"""

from __future__ import annotations

from typing import Callable, Mapping, NamedTuple, Sequence

from mafka4.errors import MafkaError, ReadReplicaNotInSync
from mafka4.log.epochs import NO_EPOCH
from mafka4.metrics.end_to_end import observe_served
from mafka4.metrics.histogram import LatencyHistogram
from mafka4.virtual.hosted_vp import HostedVp, VpId, VpRead

# The node's hosted replica of a VP, or None if it hosts none.
Hosted = Callable[[VpId], HostedVp | None]


class ConsumerRead(NamedTuple):
    """One VP of a consumer's fetch: where it reads from, and the leader epoch of the last record
    it read before ``offset`` (``NO_EPOCH``: none known), so a diverged log is told (``HostedVp.read``)."""

    vp_id: VpId
    offset: int
    last_epoch: int = NO_EPOCH


class ConsumerAnswer(NamedTuple):
    read: VpRead | None
    error: MafkaError | None = None


def not_hosted(vp_id: VpId, node_id: str) -> MafkaError:
    return ReadReplicaNotInSync(f"{vp_id} is not hosted on read node {node_id}: re-read the VP's metadata and fetch "
                                f"from a RISR member")


def any_readable(reads: Sequence[ConsumerRead], hosted: Hosted, now_ms: int) -> bool:
    """True if a read of one of ``reads`` would answer now (data, or an error)."""
    return any((replica := hosted(read.vp_id)) is None or replica.readable(read.offset, now_ms, read.last_epoch)
               for read in reads)


def read_all(reads: Sequence[ConsumerRead], bytes_max: int, hosted: Hosted, node_id: str,
             now_ms: int) -> list[ConsumerAnswer]:
    """One answer per read, in order, sharing ``bytes_max`` (see the module docstring)."""
    answers, budget = [], bytes_max
    for read in reads:
        replica = hosted(read.vp_id)
        if replica is None:
            answers.append(ConsumerAnswer(None, not_hosted(read.vp_id, node_id)))
            continue
        try:
            result = replica.read(read.offset, max(budget, 0), now_ms, read.last_epoch)
        except MafkaError as error:
            answers.append(ConsumerAnswer(None, error))
            continue
        budget -= len(result.data)
        answers.append(ConsumerAnswer(result))
    return answers


def observe_end_to_end(reads: Sequence[ConsumerRead], answers: Sequence[ConsumerAnswer],
                       latency: Callable[[str], LatencyHistogram], now_ms: int) -> None:
    """Observe in ``latency(topic)`` the age at ``now_ms`` of each batch ``answers`` (to ``reads``, in
    order) serve (``metrics.end_to_end.observe_served``)."""
    for read, answer in zip(reads, answers, strict=True):
        if answer.read is not None and answer.read.data:
            observe_served(latency(read.vp_id.topic), answer.read.data, now_ms)


def list_offsets(vp_ids: Sequence[VpId], hosted: Hosted, node_id: str,
                 now_ms: int) -> list[tuple[int, int] | MafkaError]:
    """Per VP: (log start offset, HW), or the error that keeps this replica from answering."""
    answers: list[tuple[int, int] | MafkaError] = []
    for vp_id in vp_ids:
        replica = hosted(vp_id)
        try:
            if replica is None:
                raise not_hosted(vp_id, node_id)
            answers.append(replica.list_offsets(now_ms))
        except MafkaError as error:
            answers.append(error)
    return answers


def offsets_for_time(vp_ids: Sequence[VpId], timestamp_ms: int, hosted: Hosted,
                     node_id: str) -> list[int | None | MafkaError]:
    """Per VP: its first offset at or after ``timestamp_ms`` below the HW (None: none)."""
    return [not_hosted(vp_id, node_id) if (replica := hosted(vp_id)) is None
            else replica.offset_for_timestamp(timestamp_ms) for vp_id in vp_ids]


def lag_positions(vp_ids: Sequence[VpId], committed: Mapping[int, int], hosted: Hosted, node_id: str,
                  now_ms: int) -> list[tuple[int, int | None] | MafkaError]:
    """Per VP: (HW, the timestamp a group at offset ``committed[vp]`` lags from: ``HostedVp.timestamp_at``;
    None if it lags none, or committed nothing), or the error that keeps this replica from answering."""
    answers: list[tuple[int, int | None] | MafkaError] = []
    for vp_id in vp_ids:
        replica = hosted(vp_id)
        try:
            if replica is None:
                raise not_hosted(vp_id, node_id)
            _, high_watermark = replica.list_offsets(now_ms)
            offset = committed.get(vp_id.vp)
            answers.append((high_watermark, None if offset is None else replica.timestamp_at(offset)))
        except MafkaError as error:
            answers.append(error)
    return answers
