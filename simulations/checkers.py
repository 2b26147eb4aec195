"""Checkers over histories: what a run of mafka4 did, judged against what it promises.

Pure functions of plain values, shared by the deterministic simulator (``simulations.dst``)
and by chaos runs against a real cluster: whoever drives the system records what clients
saw as history records (frozen dataclasses below) and hands them here together with what
the logs hold at the end. Nothing here knows how the history was produced.

History records (one list, in the order the recorder observed them):

* ``Send``: a producer handed a message to its idempotent pipeline (send order per producer);
* ``Ack``: a message was acknowledged with ``acks=all`` at ``(partition, offset)``;
* ``Consumed``: a consumer read a message from a *stream*: a physical partition (Mafka3
  mode, e.g. ``"p0"``) or a virtual partition (e.g. ``"vp3"``); ``partition`` and
  ``partition_offset`` name the physical source when known (a VP record carries it);
* ``Commit``: a group committed ``offset`` (the next offset to read) on a stream;
* ``Rewound``: a consumer's fetch was answered "diverging" (the VP's log no longer holds what it
  read there, after a power loss of a one-replica VP) and it reads ``stream`` again from ``offset``;
* ``Nack``: a group member nacked a message it consumed (or its handler raised): the group must
  deliver it again, not before ``due_ms``, or dead-letter it;
* ``DeadLettered``: a group's dead-letter topic holds a message (``mafka4.dead_letters``).

Values are unique per produced message: they identify a message across Ack and Consumed.

Anomalies follow Jepsen's Kafka checker where the words overlap:

* ``LOST``: acknowledged, but missing where it must be: not in the final log at its acked
  offset, or never read although readers went past it (or the run ended drained);
* ``UNSEEN``: acknowledged, never read, and no reader of its partition went past it yet (it
  may still show up: only a drained run turns it into ``LOST``);
* ``DUPLICATE``: one message twice where it must be once (a log, a VP, a group's reads after
  a commit had covered it);
* ``REORDERED``: per-key or per-producer order broken;
* ``DIVERGED``: two replicas hold different bytes below the high watermark;
* ``COMMIT_REGRESSED``: a group's committed offset moved backwards;
* ``MISPLACED``: a record in a VP that the layout does not name, or one whose content is
  not the committed physical record it claims to be, or a record read at a VP offset (in a
  leader epoch) where the final log holds another in that epoch;
* ``WRONG_LANE``: a message read by a group member that neither reads its lane nor may read it
  by the lane's fallback (``check_lanes``);
* ``DELIVERED_EARLY``: a message read before its due time: a delayed one (``Send.deliver_at_ms``)
  or a nacked one before its redelivery was due (``Nack.due_ms``) (``check_not_delivered_early``);
* ``LOST_AFTER_NACK``: a nacked message its group neither read again nor dead-lettered, although
  its redelivery was due before the run drained (``check_nacked_not_lost``).

Retries and delays (issue 41). Times of these checks (``Send.deliver_at_ms``, ``Consumed.at_ms``,
``Nack``'s, ``DeadLettered.at_ms``) are epoch ms of the recording process's clock; a check of
earliness takes the clocks' disagreement as a tolerance. A nack is per group: ``Consumed.group``
names the reader's group ("" none), and only a read by the nacking group counts as a redelivery.

Lanes. A message may be sent in a lane (``Send.lane``, ``Ack.lane``, ``Consumed.lane``; "" the
trunk). Per-key order is per lane: the same key in two lanes is two orders (``check_per_key_order``,
``classify_reads``).

Final logs reach the checkers as ``StoredRecord`` lists. Each driver reads the bytes its own
way (Ray actors, simulated replicas) and decodes them here: ``committed_records`` for a
physical leader (with the expected-VP oracle), ``vp_records`` for a VP leader.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from dataclasses import dataclass
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from mafka4.batch_frame import iter_batches
from mafka4.batch_payload import decode_batch, decode_checked_batch, lane_of_headers
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.ranges import message_hash
from mafka4.virtual.vp_records import source_of, strip_source


class Kind(enum.Enum):
    LOST = "lost"
    UNSEEN = "unseen"
    DUPLICATE = "duplicate"
    REORDERED = "reordered"
    DIVERGED = "diverged"
    COMMIT_REGRESSED = "commit-regressed"
    MISPLACED = "misplaced"
    WRONG_LANE = "wrong-lane"
    DELIVERED_EARLY = "delivered-early"
    LOST_AFTER_NACK = "lost-after-nack"


@dataclass(frozen=True, slots=True)
class Send:
    producer: str
    key: bytes | None
    value: bytes
    partition: int
    lane: str = ""  # "" the trunk
    deliver_at_ms: int | None = None  # a delayed message's due time (epoch ms); None: due at once


@dataclass(frozen=True, slots=True)
class Ack:
    key: bytes | None
    value: bytes
    partition: int
    offset: int
    lane: str = ""  # "" the trunk


@dataclass(frozen=True, slots=True)
class Consumed:
    consumer: str
    stream: str
    offset: int
    key: bytes | None
    value: bytes
    partition: int | None = None
    partition_offset: int | None = None
    leader_epoch: int | None = None  # of the VP batch it was read from, when known
    lane: str = ""  # the message's lane (its first header), "" the trunk
    at_ms: int | None = None  # when the consumer got it (epoch ms), for the checks of due times
    group: str = ""  # the consumer's group, "" none (or not recorded)
    # Which delivery of the message to its group this was (``Message.delivery_count``, 1 the
    # original), None when not recorded (``check_not_delivered_early``).
    delivery_count: int | None = None


@dataclass(frozen=True, slots=True)
class Rewound:
    consumer: str
    stream: str
    offset: int  # where it reads again


@dataclass(frozen=True, slots=True)
class Nack:
    """A member of ``group`` nacked delivery ``delivery_count`` of ``value`` at ``at_ms``; its
    redelivery is due at ``due_ms`` (the group's back-off or the nack's own ``retry_after_ms``
    added to the nack's time), None when the nack dead-letters it (its deliveries were exhausted)."""

    group: str
    consumer: str
    value: bytes
    delivery_count: int
    at_ms: int
    due_ms: int | None


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """``group``'s dead-letter topic holds ``value``, dead after ``delivery_count`` deliveries at ``at_ms``."""

    group: str
    value: bytes
    delivery_count: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class Commit:
    group: str
    stream: str
    offset: int  # the next offset the group reads


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record as a log holds it at the end of a run."""

    offset: int
    key: bytes | None
    value: bytes
    # For a VP record: its physical source and the leader epoch of its batch.
    partition: int | None = None
    partition_offset: int | None = None
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Anomaly:
    kind: Kind
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}"


HistoryRecord = Send | Ack | Consumed | Commit | Rewound | Nack | DeadLettered
# Bound on anomalies reported per checker: one broken invariant tends to break thousands of
# records, and the first few say everything.
ANOMALIES_MAX = 20


def _bounded(anomalies: Iterable[Anomaly]) -> list[Anomaly]:
    out = []
    for anomaly in anomalies:
        out.append(anomaly)
        if len(out) >= ANOMALIES_MAX:
            break
    return out


def of_type(history: Iterable[HistoryRecord], kind: type) -> list:
    return [record for record in history if isinstance(record, kind)]


# --- final logs -------------------------------------------------------------------------------


def committed_records(
    data: bytes, partition: int, layout: TopicLayout
) -> tuple[list[StoredRecord], dict[tuple[int, int], int]]:
    """The records of a physical leader's batches below its high watermark, and the expected-VP
    oracle for them: ``(partition, offset)`` -> the VP ``layout`` names for that record.

    The oracle places every record on its own, by its message hash, its lane (its first header) and
    the split epoch of its offset. It shares only the hash and the layout with the feeder's ``route_records`` (which
    places a whole batch by one epoch when it can), so a fault in that shortcut shows up as
    ``MISPLACED``.
    """
    records, expected_vp = [], {}
    for position, header in iter_batches(data):
        for index, record in enumerate(decode_batch(data, position)):
            records.append(StoredRecord(record.offset, record.key, record.value))
            hash_value = message_hash(record.key, partition, header.producer_id, header.base_sequence + index, record.offset)
            lane_id = layout.epoch_for(partition, record.offset).lane_id(lane_of_headers(record.headers))
            expected_vp[(partition, record.offset)] = layout.vp_for(  # (UnknownLane for a lane ``layout`` lacks)
                partition, record.offset, hash_value, -1 if lane_id is None else lane_id)
    return records, expected_vp


def vp_records(data: bytes) -> list[StoredRecord]:
    """The records of a VP leader's batches, each with the physical source it carries and its batch's epoch."""
    stored = []
    for position, header in iter_batches(data):
        for record in decode_checked_batch(data, position, header):
            partition, offset = source_of(record)
            plain = strip_source(record)
            stored.append(StoredRecord(record.offset, plain.key, plain.value, partition, offset, header.leader_epoch))
    return stored


# --- write path -------------------------------------------------------------------------------


def check_acks_in_log(acks: Sequence[Ack], final_logs: Mapping[int, Sequence[StoredRecord]]) -> list[Anomaly]:
    """No acknowledged write lost: each ``Ack`` is in its partition's final committed log, at its
    offset, with its key and value; and no value sits at two offsets of the final logs.

    Partitions missing from ``final_logs`` (their final log could not be read) are not judged.
    """

    def anomalies():
        by_offset = {p: {r.offset: r for r in records} for p, records in final_logs.items()}
        for ack in acks:
            if ack.partition not in by_offset:
                continue
            stored = by_offset[ack.partition].get(ack.offset)
            if stored is None or (stored.key, stored.value) != (ack.key, ack.value):
                found = "nothing" if stored is None else f"{stored.value!r}"
                yield Anomaly(Kind.LOST, f"{ack.value!r} acknowledged at p{ack.partition}@{ack.offset}, the final log holds {found}")
        for p, records in final_logs.items():
            first_at: dict[bytes, int] = {}
            for record in records:
                if record.value in first_at:
                    yield Anomaly(Kind.DUPLICATE, f"{record.value!r} at p{p}@{first_at[record.value]} and again at @{record.offset}")
                first_at.setdefault(record.value, record.offset)

    return _bounded(anomalies())


def check_replicas_identical(replicas: Mapping[str, tuple[int, bytes]]) -> list[Anomaly]:
    """Replicas byte-identical below the high watermark.

    ``replicas`` maps a replica id to ``(high watermark, the log's bytes below it)``. Logs
    are compared pairwise on the bytes below the lower of the two high watermarks; since a
    high watermark is a batch boundary, the shorter byte string must be a prefix of the
    longer one.
    """

    def anomalies():
        ordered = sorted(replicas.items(), key=lambda item: (item[1][0], item[0]))
        for (id_a, (hw_a, bytes_a)), (id_b, (hw_b, bytes_b)) in zip(ordered, ordered[1:]):
            if not bytes_b.startswith(bytes_a):
                at = next((i for i, (x, y) in enumerate(zip(bytes_a, bytes_b)) if x != y), min(len(bytes_a), len(bytes_b)))
                yield Anomaly(Kind.DIVERGED, f"{id_a} (HW {hw_a}) and {id_b} (HW {hw_b}) differ at byte {at} below the HW")

    return _bounded(anomalies())


def check_producer_order(history: Sequence[HistoryRecord]) -> list[Anomaly]:
    """Per producer, partition and key, messages acknowledged in the order they were sent
    land at ascending offsets (the idempotent producer's ordering promise)."""
    sent_order: dict[bytes, tuple[str, int]] = {}
    counters: dict[str, int] = defaultdict(int)
    for record in history:
        if isinstance(record, Send):
            sent_order[record.value] = (record.producer, counters[record.producer])
            counters[record.producer] += 1

    def anomalies():
        streams: dict[tuple[str, int, bytes | None], list[tuple[int, int, bytes]]] = defaultdict(list)
        for ack in of_type(history, Ack):
            if ack.value in sent_order:
                producer, position = sent_order[ack.value]
                streams[(producer, ack.partition, ack.key)].append((position, ack.offset, ack.value))
        for (producer, partition, key), acked in sorted(streams.items(), key=repr):
            acked.sort()
            for (_, offset_a, value_a), (_, offset_b, value_b) in zip(acked, acked[1:]):
                if offset_b <= offset_a:
                    yield Anomaly(Kind.REORDERED, f"{producer} sent {value_a!r} before {value_b!r} (key {key!r}) but "
                                                  f"p{partition} holds them at {offset_a} and {offset_b}")

    return _bounded(anomalies())


# --- read path ------------------------------------------------------------------------------


def check_exactly_once_in_vps(
    committed: Mapping[int, Sequence[StoredRecord]],
    vp_logs: Mapping[int, Sequence[StoredRecord]],
    expected_vp: Callable[[StoredRecord, int], int] | None = None,
) -> list[Anomaly]:
    """Every committed physical record is in exactly one VP, exactly once, as it was committed.

    ``committed``: per physical partition, the records below its final high watermark.
    ``vp_logs``: per VP id, its final records (each with its physical source).
    ``expected_vp(record, partition)``: the VP the layout names for a committed record.
    """

    def anomalies():
        physical = {(p, r.offset): r for p, records in committed.items() for r in records}
        seen: dict[tuple[int, int], tuple[int, int]] = {}
        for vp, records in sorted(vp_logs.items()):
            for record in records:
                source = (record.partition, record.partition_offset)
                if source in seen:
                    yield Anomaly(Kind.DUPLICATE, f"p{source[0]}@{source[1]} is in vp{seen[source][0]}@{seen[source][1]} "
                                                  f"and again in vp{vp}@{record.offset}")
                    continue
                seen[source] = (vp, record.offset)
                original = physical.get(source)
                if original is None or (original.key, original.value) != (record.key, record.value):
                    yield Anomaly(Kind.MISPLACED, f"vp{vp}@{record.offset} claims p{source[0]}@{source[1]} "
                                                  f"({record.value!r}), which is not that committed record")
                elif expected_vp is not None and expected_vp(original, source[0]) != vp:
                    yield Anomaly(Kind.MISPLACED, f"p{source[0]}@{source[1]} is in vp{vp}, the layout names "
                                                  f"vp{expected_vp(original, source[0])}")
        for source in sorted(set(physical) - set(seen)):
            yield Anomaly(Kind.LOST, f"committed p{source[0]}@{source[1]} ({physical[source].value!r}) is in no VP")

    return _bounded(anomalies())


def check_reads_match_logs(consumed: Sequence[Consumed], logs: Mapping[str, Sequence[StoredRecord]]) -> list[Anomaly]:
    """What a consumer read at ``stream@offset`` is what the final log of that stream holds
    there: readers never saw records a later leader replaced (the RISR / HW promise).

    Except a read of a leader epoch the final log does not hold at that offset: a one-replica VP
    serves its unflushed tail and, after a power loss, feeds it again in a new epoch at other
    offsets. Its readers are told (they rewind, ``Rewound``) and read the records again; that
    nothing is skipped is for ``classify_reads`` and ``check_per_key_order`` to judge.
    """

    def anomalies():
        by_offset = {stream: {r.offset: r for r in records} for stream, records in logs.items()}
        for record in consumed:
            if record.stream not in by_offset:
                continue
            stored = by_offset[record.stream].get(record.offset)
            if (stored is not None and None not in (stored.leader_epoch, record.leader_epoch)
                    and stored.leader_epoch != record.leader_epoch):
                continue  # read in an epoch whose records the log lost here (see above)
            if stored is None or stored.value != record.value:
                found = "nothing" if stored is None else repr(stored.value)
                yield Anomaly(Kind.MISPLACED, f"{record.consumer} read {record.value!r} at {record.stream}@{record.offset}, "
                                              f"the final log holds {found} there")

    return _bounded(anomalies())


def check_per_key_order(consumed: Sequence[Consumed]) -> list[Anomaly]:
    """Each key's messages are first read in their physical order, per lane (a key's messages in two
    lanes are two orders: each lane has VPs of its own).

    Re-reads (a message read again, e.g. after a consumer crashed before committing) are
    skipped: they are at-least-once delivery, judged by ``check_no_duplicates_after_commit``.
    Records without a physical source are ordered by ``(stream, offset)`` instead.
    """

    def anomalies():
        seen: set[bytes] = set()
        last: dict[tuple[str, bytes], tuple[tuple, bytes]] = {}
        for record in consumed:
            if record.key is None or record.value in seen:
                continue
            seen.add(record.value)
            if record.partition is not None and record.partition_offset is not None:
                position: tuple = (0, record.partition, record.partition_offset)
            else:
                position = (1, record.stream, record.offset)
            previous = last.get((record.lane, record.key))
            if previous is not None and position <= previous[0]:
                in_lane = f" in lane {record.lane!r}" if record.lane else ""
                yield Anomaly(Kind.REORDERED, f"key {record.key!r}{in_lane}: {record.value!r} at {position[1:]} read "
                                              f"after {previous[1]!r} at {previous[0][1:]}")
            last[(record.lane, record.key)] = (position, record.value)

    return _bounded(anomalies())


def check_lanes(consumed: Sequence[Consumed], member_lanes: Mapping[str, AbstractSet[str]],
                fallbacks: Mapping[str, str]) -> list[Anomaly]:
    """Every message is read by a member of its lane, or by a trunk reader while the lane falls back to the trunk.

    ``member_lanes``: member (``Consumed.consumer``) -> the lanes it reads ("" the trunk); a member
    not in it reads the trunk only. ``fallbacks``: lane -> its fallback, "trunk" (when absent) or
    "none". A member may read a message of lane ``L`` if it reads ``L``, or if it reads the trunk
    and ``L`` falls back to the trunk. That a trunk reader reads such a lane only while the group
    has no live reader of its own is not judged: a handover to a joining lane reader lets the
    trunk reader finish what it has fetched, as any handover does. So a member that reads lanes
    only never reads another lane's message nor the trunk's, and nobody reads a fallback-"none"
    lane it does not name.
    """

    def anomalies():
        for record in consumed:
            lanes = member_lanes.get(record.consumer, frozenset({""}))
            if record.lane in lanes or (record.lane and "" in lanes and fallbacks.get(record.lane, "trunk") == "trunk"):
                continue
            reads = ", ".join(repr(lane) for lane in sorted(lanes))
            fallback = fallbacks.get(record.lane, "trunk")
            of = f"lane {record.lane!r} (fallback {fallback})" if record.lane else "the trunk"
            yield Anomaly(Kind.WRONG_LANE, f"{record.consumer} (reading {reads}) read {record.value!r} of {of} at "
                                           f"{record.stream}@{record.offset}")

    return _bounded(anomalies())


def check_not_delivered_early(history: Sequence[HistoryRecord], tolerance_ms: int) -> list[Anomaly]:
    """No message is read before it is due, give or take ``tolerance_ms`` (the clocks' disagreement
    and the recorders' stamping): a delayed message (``Send.deliver_at_ms``) by no one before its
    due time, and a nacked one by no member of the nacking group after the ``Nack`` and before its
    ``due_ms`` (a read by the group before the nack is the delivery that failed).

    A read that names its delivery (``Consumed.delivery_count``) is judged against the nacks of the
    delivery before it: delivery ``n + 1`` is due at the earliest of the group's nacks of delivery
    ``n`` (a member crash can have delivery ``n`` read, and nacked, twice; the copy of the first
    nack comes first). A read of delivery ``n`` or earlier after a nack of delivery ``n`` (the original
    read again after a member crash, or after a copy whose send failed) is at-least-once delivery of
    what was nacked, not the redelivery the nack scheduled: ``check_no_duplicates_after_commit``
    judges it. A read that does not name its delivery is judged against the group's last nack.

    A read of a message that has a due time must carry its time (``Consumed.at_ms``): a recorder
    that sends delayed or nacked traffic stamps every read."""
    assert tolerance_ms >= 0, tolerance_ms

    def redelivery_of(nacks: list[Nack], record: Consumed) -> Nack | None:
        """The nack ``record`` is the redelivery of, by its due time (None: none with one)."""
        if record.delivery_count is None:
            return nacks[-1] if nacks[-1].due_ms is not None else None
        before = [nack for nack in nacks if nack.delivery_count == record.delivery_count - 1 and nack.due_ms is not None]
        return min(before, key=lambda nack: nack.due_ms, default=None)

    def anomalies():
        delayed = {record.value: record.deliver_at_ms for record in history
                   if isinstance(record, Send) and record.deliver_at_ms is not None}
        nacked: dict[tuple[str, bytes], list[Nack]] = defaultdict(list)  # the group's nacks of the value so far
        for record in history:
            if isinstance(record, Nack):
                nacked[(record.group, record.value)].append(record)
                continue
            if not isinstance(record, Consumed):
                continue
            dues = []
            if record.value in delayed:
                dues.append((delayed[record.value], "sent to be delivered then"))
            nacks = nacked.get((record.group, record.value))
            nack = redelivery_of(nacks, record) if nacks else None
            if nack is not None:
                dues.append((nack.due_ms, f"its redelivery after {nack.consumer}'s nack of delivery "
                                          f"{nack.delivery_count} at {nack.at_ms}"))
            if not dues:
                continue
            assert record.at_ms is not None, f"{record.consumer} read {record.value!r} with a due time, unstamped"
            due_ms, why = max(dues)
            if record.at_ms + tolerance_ms < due_ms:
                yield Anomaly(Kind.DELIVERED_EARLY, f"{record.consumer} read {record.value!r} at {record.stream}@"
                                                    f"{record.offset} at {record.at_ms}, {due_ms - record.at_ms} ms "
                                                    f"before it was due at {due_ms} ({why})")

    return _bounded(anomalies())


def check_nacked_not_lost(history: Sequence[HistoryRecord], drained_at_ms: int | None) -> list[Anomaly]:
    """A nacked message is read again by its group or dead-lettered by it (``DeadLettered``).

    Judged once the run drained: ``drained_at_ms`` is a time by which every reader had read
    everything due (the end of the drain less the delivery precision); a nack whose redelivery
    was due later is still scheduled, not lost. None: the run did not drain, nothing is judged.
    Only each message's last nack by a group counts (an earlier one was followed by a read).
    """

    def anomalies():
        if drained_at_ms is None:
            return
        pending: dict[tuple[str, bytes], Nack] = {}  # nacked and not read again or dead-lettered since
        for record in history:
            if isinstance(record, Nack):
                pending[(record.group, record.value)] = record
            elif isinstance(record, (Consumed, DeadLettered)):
                pending.pop((record.group, record.value), None)
        for nack in pending.values():
            due_ms = nack.at_ms if nack.due_ms is None else nack.due_ms
            if due_ms > drained_at_ms:
                continue
            then = "dead-lettered" if nack.due_ms is None else f"due again at {nack.due_ms}"
            yield Anomaly(Kind.LOST_AFTER_NACK, f"{nack.consumer} of group {nack.group} nacked delivery "
                                                f"{nack.delivery_count} of {nack.value!r} at {nack.at_ms} ({then}); "
                                                f"the group never read it again nor dead-lettered it")

    return _bounded(anomalies())


def check_commits_monotonic(history: Sequence[HistoryRecord]) -> list[Anomaly]:
    """A group's committed offset on a stream never moves backwards, except back to where a reader
    rewound (``Rewound``): the log no longer held what the commit was past."""

    def anomalies():
        last: dict[tuple[str, str], int] = {}
        for commit in history:
            if isinstance(commit, Rewound):
                last.update({stream: min(offset, commit.offset) for stream, offset in last.items()
                             if stream[1] == commit.stream})
                continue
            if not isinstance(commit, Commit):
                continue
            stream = (commit.group, commit.stream)
            if stream in last and commit.offset < last[stream]:
                yield Anomaly(Kind.COMMIT_REGRESSED, f"group {commit.group} committed {commit.stream}@{commit.offset} "
                                                     f"after @{last[stream]}")
            last[stream] = max(commit.offset, last.get(stream, commit.offset))

    return _bounded(anomalies())


def check_no_duplicates_after_commit(history: Sequence[HistoryRecord], group: str) -> list[Anomaly]:
    """A group reads a stream offset again only while no commit of the group covered it.

    Re-reading uncommitted messages after a member crash is at-least-once delivery; reading
    a message the group had already committed is a duplicate. A ``Rewound`` reader reads the
    offsets from where it rewound again: the log there no longer holds what was read and
    committed (a one-replica VP's power loss), so those reads count afresh; and the group's
    first commit of the stream after a rewind is its committed offset, even below an earlier one
    (``check_commits_monotonic`` allows that step back).
    """

    def anomalies():
        committed: dict[str, int] = {}
        read: set[tuple[str, int]] = set()
        rewound: set[str] = set()  # streams a reader rewound since the group's last commit of them
        for record in history:
            if isinstance(record, Rewound):
                read = {(stream, offset) for stream, offset in read
                        if stream != record.stream or offset < record.offset}
                rewound.add(record.stream)
            elif isinstance(record, Commit) and record.group == group:
                if record.stream in rewound:
                    rewound.discard(record.stream)
                    committed[record.stream] = record.offset
                else:
                    committed[record.stream] = max(committed.get(record.stream, 0), record.offset)
            elif isinstance(record, Consumed):
                at = (record.stream, record.offset)
                if at in read and record.offset < committed.get(record.stream, 0):
                    yield Anomaly(Kind.DUPLICATE, f"{record.consumer} read {record.stream}@{record.offset} "
                                                  f"({record.value!r}) again after the group committed "
                                                  f"@{committed[record.stream]}")
                read.add(at)

    return _bounded(anomalies())


def classify_reads(acks: Sequence[Ack], consumed: Sequence[Consumed], drained: bool) -> list[Anomaly]:
    """Jepsen's lost/unseen split of acknowledged messages that were never read.

    An unread acknowledged message is ``LOST`` when readers went past it or the run was
    ``drained`` (every reader read everything there was); otherwise ``UNSEEN``. "Went past"
    is judged per partition and key: a message of the same key acknowledged at a higher
    offset of the same partition and lane was read. Per key, not per partition, because a
    partition is read through several VPs at independent paces; only a key's order is promised,
    and only within a lane (a lane may wait for its readers while the trunk is read on).
    """
    read_values = {record.value for record in consumed}
    acked_at = {ack.value: ack for ack in acks}
    highest_read: dict[tuple[int, str, bytes], int] = {}
    for record in consumed:
        ack = acked_at.get(record.value)
        if ack is not None and ack.key is not None:
            stream = (ack.partition, ack.lane, ack.key)
            highest_read[stream] = max(highest_read.get(stream, -1), ack.offset)

    def anomalies():
        for ack in sorted(acks, key=lambda a: (a.partition, a.offset)):
            if ack.value in read_values:
                continue
            passed = ack.key is not None and highest_read.get((ack.partition, ack.lane, ack.key), -1) > ack.offset
            if passed:
                kind, reason = Kind.LOST, f"a later message of key {ack.key!r} was read"
            elif drained:
                kind, reason = Kind.LOST, "the run was drained"
            else:
                kind, reason = Kind.UNSEEN, "no reader went past it yet"
            yield Anomaly(kind, f"{ack.value!r} acknowledged at p{ack.partition}@{ack.offset} was never read: {reason}")

    return _bounded(anomalies())
