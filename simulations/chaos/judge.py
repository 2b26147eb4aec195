"""Judging a chaos run: read the final logs from the live cluster and run every checker.

``read_final_logs`` reads, once production stopped and the cluster healed: every physical
replica's bytes below its high watermark (the leader's decoded into the committed records),
then, once every VP leader was fed through those high watermarks, every VP replica's bytes
below the VP high watermark (the leader's decoded, with their physical sources). ``judge``
runs the checkers of ``simulations.checkers`` over the merged history and those logs, and
explains each acknowledged message the group never read: where it is, and how far the group
committed past it.

Counts per anomaly kind are of what the checkers report, and each checker reports at most
``checkers.ANOMALIES_MAX``; the exact number of unread acknowledged messages and of
re-deliveries (at-least-once repeats, not anomalies) is counted here.

Delayed and nacked traffic (issue 41, ``simulations.chaos.traffic``):

* a delayed message (``Send.deliver_at_ms``) is acknowledged by the topic's delay topic: its
  ``Ack`` is the delay topic's partition and offset, so it is not looked for in the topic's log
  there (``check_acks_in_log``), gives no read its physical source (``with_sources``: the VP log's
  header does), and its acknowledgements are in send order per key among the delayed ones only
  (``check_producer_order``, as a producer of their own: the delay topic's). It must be read by
  the group (or dead-lettered) like any acknowledged message, and never before it is due
  (``check_not_delivered_early``). The scheduler releases it at least once, so it may sit twice
  in the topic's log: the check that no value sits at two offsets leaves it out;
* per-key order (``check_per_key_order``) leaves out the delayed messages, released after later
  messages of their key by design (and maybe twice), and the reads of the group's retry topic,
  a retry being out of its key's order by design (unordered retries). Every other message of a
  key is still judged in order, around them;
* a nacked message may be read several times (its retries: counted as ``retried``, not as
  re-deliveries); it must be read again by the group after its back-off, not before
  (``check_not_delivered_early``, no tolerance: ``EARLY_TOLERANCE_MS``), or dead-lettered
  (``check_nacked_not_lost``, once the run drained); a dead-lettered message counts as read.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass

import ray

from mafka4.batch_frame import iter_batches
from mafka4.client.dead_letter_queue import read_dead_letters
from mafka4.errors import MafkaError, ReadReplicaNotInSync, UnknownTopic
from mafka4.physical.handles import replica_handle
from mafka4.physical.topics import TopicStore
from mafka4.runtime.connect import Connection
from mafka4.virtual.consumer_reads import ConsumerRead
from mafka4.virtual.handles import ask_leader_nodes, read_node_handle
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.vp_store import VirtualStore
from simulations import checkers
from simulations.chaos.traffic import is_retry_stream
from simulations.checkers import Ack, Anomaly, Commit, Consumed, DeadLettered, HistoryRecord, Kind, Nack, Send, StoredRecord

FETCH_BYTES_MAX = 1 << 20
FETCHES_MAX = 100_000  # per replica: bounds the read of a log that keeps growing (it must not)
CALL_TIMEOUT_S = 30
FED_TIMEOUT_S = 60
OUT_OF_SYNC_WAIT_S = 60
OUT_OF_SYNC_RETRY_S = 0.5
UNREAD_EXPLAINED_MAX = 20
# A read before its due time by this much or less is not early. None: every process of a chaos run
# runs on one machine and reads one realtime clock (``time.time_ns``) for the due times (the
# producer's, the nacking consumer's), the scheduler's release and the members' read times; each
# recorded due time is a lower bound of the one the scheduler keeps, and each read time is taken
# after poll() returned. So a read 1 ms before its recorded due time was released early.
EARLY_TOLERANCE_MS = 0
DEAD_LETTER_READS_MAX = 3
# The producer of the delayed messages' acknowledgements, for ``check_producer_order``: the delay
# topic's own producer (the topic's producer hands delayed messages to it).
DELAYS_PRODUCER_SUFFIX = "/delays"


@dataclass(frozen=True, slots=True)
class FinalLogs:
    committed: dict[int, list[StoredRecord]]  # physical partition -> records below the leader's HW
    expected_vp: dict[tuple[int, int], int]  # (partition, offset) -> the VP the layout names
    physical_replicas: dict[int, dict[str, tuple[int, bytes]]]  # partition -> replica -> (HW, bytes below it)
    vp_logs: dict[int, list[StoredRecord]]
    vp_replicas: dict[int, dict[str, tuple[int, bytes]]]
    unreadable: list[str]  # replicas whose log could not be read (judged without them)


def _read_replica(fetch) -> tuple[int, bytes]:
    """(high watermark, every batch below it) through ``fetch(offset)`` of a replica actor."""
    chunks, offset, high_watermark = [], 0, 0
    for _ in range(FETCHES_MAX):
        result = ray.get(fetch(offset), timeout=CALL_TIMEOUT_S)
        high_watermark = result.high_watermark
        if not result.data:
            break
        chunks.append(result.data)
        for _, header in iter_batches(result.data, check_crc=False):
            offset = header.next_offset
    return high_watermark, b"".join(chunks)


def _vp_read(handle, topic: str, vp: int, offset: int):
    """A fetch of one VP replica through its read node, answered like a replica actor's ``fetch``."""
    answer = ray.get(handle.fetch.remote([ConsumerRead(VpId(topic, vp), offset)], FETCH_BYTES_MAX, 0),
                     timeout=CALL_TIMEOUT_S)[0]
    if answer.error is not None:
        raise answer.error
    return ray.put(answer.read)


def _read_vp_replica(handle, topic: str, vp: int) -> tuple[int, bytes]:
    """``_read_replica`` of one VP replica; a follower out of the RISR refuses reads, so one that
    left it after the heal (lagging on a loaded machine) is asked again until it is back, for at
    most ``OUT_OF_SYNC_WAIT_S``; then it counts as unreadable."""
    deadline = time.monotonic() + OUT_OF_SYNC_WAIT_S
    while True:
        try:
            return _read_replica(lambda offset: _vp_read(handle, topic, vp, offset))
        except ReadReplicaNotInSync:
            if time.monotonic() > deadline:
                raise
            time.sleep(OUT_OF_SYNC_RETRY_S)


def read_final_logs(connection: Connection, topic: str) -> FinalLogs:
    cluster = connection.cluster
    metadata = TopicStore(connection.store, cluster).get(topic)
    virtual = VirtualStore(connection.store, cluster)
    layout, states = virtual.layout_and_states(topic, metadata.config.partitions, metadata.config.virtual_config())
    committed, expected_vp, physical_replicas, unreadable = {}, {}, {}, []
    for state in metadata.partitions:
        physical_replicas[state.partition] = {}
        for replica in state.replicas:
            handle = replica_handle(cluster, topic, state.partition, replica)
            try:
                read = _read_replica(lambda offset, h=handle, r=replica: h.fetch.remote(
                    offset, FETCH_BYTES_MAX, 0, r != state.leader))
            except (AttributeError, MafkaError, ray.exceptions.RayError, TimeoutError) as error:
                unreadable.append(f"p{state.partition}/{replica}: {type(error).__name__}")
                continue
            physical_replicas[state.partition][f"p{state.partition}/{replica}"] = read
            if replica == state.leader:
                committed[state.partition], placed = checkers.committed_records(read[1], state.partition, layout)
                expected_vp.update(placed)
    _wait_fed(connection, topic, states, {p: max((r.offset + 1 for r in records), default=0)
                                          for p, records in committed.items()})
    vp_logs, vp_replicas = {}, {}
    for vp, (state, _) in sorted(states.items()):
        vp_replicas[vp] = {}
        if state.retired:
            continue
        for replica in state.replicas:
            handle = read_node_handle(cluster, replica)
            try:
                read = _read_vp_replica(handle, topic, vp)
            except (AttributeError, MafkaError, ray.exceptions.RayError, TimeoutError) as error:
                unreadable.append(f"v{vp}/{replica}: {type(error).__name__}")
                continue
            vp_replicas[vp][f"v{vp}/{replica}"] = read
            if replica == state.leader:
                vp_logs[vp] = checkers.vp_records(read[1])
    return FinalLogs(committed, expected_vp, physical_replicas, vp_logs, vp_replicas, unreadable)


def _wait_fed(connection: Connection, topic: str, states: dict, ends: dict[int, int]) -> None:
    """Wait (bounded) until every VP leader was fed through ``ends`` and exposes all it holds."""
    deadline = time.monotonic() + FED_TIMEOUT_S
    while time.monotonic() < deadline:
        live = [state for state, _ in states.values() if not state.retired]
        answers = ask_leader_nodes(connection.cluster, topic, live, "describe_vps", timeout_s=CALL_TIMEOUT_S)
        described = [answers[state.vp] for state in live]
        if any(d is None or isinstance(d, BaseException) for d in described):
            described = []
        if described and all(d["high_watermark"] == d["log_end_offset"]
                             and all(d["fed_through"].get(p, 0) >= end for p, end in ends.items()) for d in described):
            return
        time.sleep(0.5)


def read_dead_lettered(connection: Connection, topic: str, group: str, expected: set[bytes]) -> list[DeadLettered]:
    """``group``'s dead letters of ``topic`` as history records; none if it never dead-lettered one.

    A read ends at the first poll that waits ``DEAD_LETTERS_IDLE_MS`` for nothing, which a slow first
    fetch can end early: the topic is read again, up to ``DEAD_LETTER_READS_MAX`` times, until it
    holds every ``expected`` value (those the members' nacks dead-lettered)."""
    letters: list[DeadLettered] = []
    for _ in range(DEAD_LETTER_READS_MAX):
        try:
            found = read_dead_letters(topic, group, where=connection)
        except UnknownTopic:
            found = None
        letters = [] if found is None else [DeadLettered(group, message.value, letter.delivery_count, letter.dead_at_ms)
                                            for message, letter in found.letters]
        if expected <= {letter.value for letter in letters}:
            break
    return letters


def delayed_values(history: list[HistoryRecord]) -> set[bytes]:
    """The values sent with a delay (their Ack is of the delay topic)."""
    return {record.value for record in history if isinstance(record, Send) and record.deliver_at_ms is not None}


def topic_acks(history: list[HistoryRecord]) -> list[Ack]:
    """The acknowledgements of the topic itself: every Ack but those of delayed messages."""
    delayed = delayed_values(history)
    return [record for record in history if isinstance(record, Ack) and record.value not in delayed]


def with_sources(consumed: list[tuple[float, Consumed]], acks: list[Ack],
                 vp_logs: dict[int, list[StoredRecord]]) -> list[tuple[float, Consumed]]:
    """Each consumed record with its physical source: where its Ack put it, else the VP log's header.

    ``acks``: of the topic only (``topic_acks``): a delayed message's Ack is of the delay topic."""
    acked = {ack.value: (ack.partition, ack.offset) for ack in acks}
    stored = {record.value: (record.partition, record.partition_offset) for log in vp_logs.values() for record in log}
    out = []
    for t, record in consumed:
        source = acked.get(record.value) or stored.get(record.value)
        if source is not None:
            record = dataclasses.replace(record, partition=source[0], partition_offset=source[1])
        out.append((t, record))
    return out


def judge(history: list[HistoryRecord], logs: FinalLogs, group: str, drained: bool,
          drained_at_ms: int | None = None) -> dict:
    """Every checker's anomalies, counts per kind, and the delivery counts.

    ``drained_at_ms``: the epoch ms by which every nack's redelivery had been read, if its back-off
    passed by then (``check_nacked_not_lost``); None: the nacks are not judged."""
    delayed = delayed_values(history)
    acks = checkers.of_type(history, Ack)
    own_acks = [ack for ack in acks if ack.value not in delayed]
    delayed_acks = [ack for ack in acks if ack.value in delayed]
    consumed = checkers.of_type(history, Consumed)
    dead = {record.value for record in checkers.of_type(history, DeadLettered) if record.group == group}
    found: dict[str, list[Anomaly]] = {}
    for partition, replicas in sorted(logs.physical_replicas.items()):
        found[f"replicas_identical p{partition}"] = checkers.check_replicas_identical(replicas)
    for vp, replicas in sorted(logs.vp_replicas.items()):
        found[f"replicas_identical v{vp}"] = checkers.check_replicas_identical(replicas)
    found["acks_in_log"] = checkers.check_acks_in_log(
        own_acks, {p: [r for r in records if r.value not in delayed] for p, records in logs.committed.items()})
    found["producer_order"] = checkers.check_producer_order(_delayed_by_their_producer(history, delayed))
    found["exactly_once_in_vps"] = checkers.check_exactly_once_in_vps(
        logs.committed, logs.vp_logs, lambda record, partition: logs.expected_vp[(partition, record.offset)])
    found["reads_match_logs"] = checkers.check_reads_match_logs(
        consumed, {f"vp{vp}": log for vp, log in logs.vp_logs.items()})
    found["per_key_order"] = checkers.check_per_key_order(
        [record for record in consumed if record.value not in delayed and not is_retry_stream(record.stream)])
    found["no_duplicates_after_commit"] = checkers.check_no_duplicates_after_commit(history, group)
    found["commits_monotonic"] = checkers.check_commits_monotonic(history)
    found["classify_reads"] = checkers.classify_reads([ack for ack in own_acks if ack.value not in dead], consumed,
                                                      drained)
    read_values = Counter(record.value for record in consumed)
    found["delayed_reads"] = classify_delayed_reads(delayed_acks, set(read_values) | dead, drained)
    found["not_delivered_early"] = checkers.check_not_delivered_early(history, EARLY_TOLERANCE_MS)
    found["nacked_not_lost"] = checkers.check_nacked_not_lost(history, drained_at_ms)
    kinds = Counter(anomaly.kind.value for anomalies in found.values() for anomaly in anomalies)
    first_reads = Counter(record.value for record in consumed if not is_retry_stream(record.stream))
    unread = [ack for ack in acks if ack.value not in read_values and ack.value not in dead]
    return {
        "anomalies": {kind.value: kinds.get(kind.value, 0) for kind in checkers.Kind},
        "capped_checkers": sorted(name for name, anomalies in found.items() if len(anomalies) >= checkers.ANOMALIES_MAX),
        "anomaly_samples": {name: [str(a) for a in anomalies] for name, anomalies in found.items() if anomalies},
        "consumed_records": len(consumed),
        "consumed_unique": len(read_values),
        # Reads of the topic again (at least once); a nacked message's reads of the retry topic are ``retried``.
        "redelivered": sum(count - 1 for count in first_reads.values()),
        "delayed_acknowledged": len(delayed_acks),
        "nacked": len(checkers.of_type(history, Nack)),
        "retried": sum(1 for record in consumed if is_retry_stream(record.stream)),
        "dead_lettered": len(dead),
        "unread_acknowledged": len(unread),
        "unread_explained": _explain_unread(unread, logs, history, delayed),
    }


def _delayed_by_their_producer(history: list[HistoryRecord], delayed: set[bytes]) -> list[HistoryRecord]:
    """``history`` with each delayed message's Send as one of the delay topic's producer (see the module doc)."""
    return [dataclasses.replace(record, producer=record.producer + DELAYS_PRODUCER_SUFFIX)
            if isinstance(record, Send) and record.value in delayed else record for record in history]


def classify_delayed_reads(delayed_acks: list[Ack], accounted: set[bytes], drained: bool) -> list[Anomaly]:
    """``classify_reads`` of the acknowledged delayed messages: each one the group neither read nor
    dead-lettered (``accounted``) is ``LOST`` once the run drained, else ``UNSEEN``. No "went past":
    a delayed message is out of its key's order by design."""
    missing = [ack for ack in delayed_acks if ack.value not in accounted]
    kind, reason = (Kind.LOST, "the run was drained") if drained else (Kind.UNSEEN, "the run did not drain")
    return [Anomaly(kind, f"delayed {ack.value!r} acknowledged by the delay topic at p{ack.partition}@{ack.offset} "
                          f"was never read: {reason}") for ack in missing[:checkers.ANOMALIES_MAX]]


def _explain_unread(unread: list[Ack], logs: FinalLogs, history: list[HistoryRecord], delayed: set[bytes]) -> list[str]:
    """Where the first unread acknowledged messages are, and what the group committed there."""
    in_vp = {record.value: (vp, record.offset) for vp, log in logs.vp_logs.items() for record in log}
    committed: dict[str, int] = {}
    for record in checkers.of_type(history, Commit):
        committed[record.stream] = max(committed.get(record.stream, 0), record.offset)
    in_physical = {(p, r.offset): r.value for p, records in logs.committed.items() for r in records}
    released = {value: at for at, value in sorted(in_physical.items(), reverse=True)}  # the first place of each
    explained = []
    for ack in unread[:UNREAD_EXPLAINED_MAX]:
        if ack.value in delayed:
            where = f"delayed {ack.value!r} acked by the delay topic at p{ack.partition}@{ack.offset}"
            if ack.value not in released:
                explained.append(f"{where}: never released to the topic")
                continue
            where += f", released to p{released[ack.value][0]}@{released[ack.value][1]}"
        else:
            where = f"{ack.value!r} acked at p{ack.partition}@{ack.offset}"
            if in_physical.get((ack.partition, ack.offset)) != ack.value:
                explained.append(f"{where}: not in the final physical log there")
                continue
        if ack.value not in in_vp:
            explained.append(f"{where}: in the physical log, in no VP")
        else:
            vp, offset = in_vp[ack.value]
            group_at = committed.get(f"vp{vp}")
            verdict = "the group committed past it without reading it" if group_at is not None and group_at > offset \
                else "the group has not read that far"
            explained.append(f"{where}: in vp{vp}@{offset}; group committed vp{vp}@{group_at}: {verdict}")
    return explained
