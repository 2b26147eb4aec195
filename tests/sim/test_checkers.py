"""The checkers of ``simulations/checkers.py`` on tiny hand-made histories.

Each checker gets a history that is fine (no anomaly) and one that holds exactly the anomaly
it exists to find, so that no checker can silently pass everything.
"""

from __future__ import annotations

import pytest

from mafka4 import batch_frame, batch_payload
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.vp_records import encode_vp_batch, route_batch
from simulations.checkers import (Ack, Anomaly, Commit, Consumed, DeadLettered, Kind, Nack, Rewound, Send, StoredRecord,
                                  check_acks_in_log, check_commits_monotonic, check_exactly_once_in_vps, check_lanes,
                                  check_nacked_not_lost, check_no_duplicates_after_commit, check_not_delivered_early,
                                  check_per_key_order, check_producer_order, check_reads_match_logs,
                                  check_replicas_identical, classify_reads, committed_records, vp_records)


def kinds(anomalies: list[Anomaly]) -> list[Kind]:
    return [anomaly.kind for anomaly in anomalies]


def stored(offset: int, value: bytes, key: bytes | None = b"k", source: tuple[int, int] | None = None) -> StoredRecord:
    partition, partition_offset = source if source else (None, None)
    return StoredRecord(offset, key, value, partition, partition_offset)


def stamped(batch: bytes, base_offset: int) -> bytes:
    """A batch as a log holds it once its leader assigned ``base_offset``."""
    batch = bytearray(batch)
    batch_frame.stamp(batch, base_offset, 1)
    return bytes(batch)


# --- final logs -------------------------------------------------------------------------------


def test_the_expected_vp_of_every_committed_record_is_where_the_feeder_splits_it():
    layout = TopicLayout.initial(partitions=2, virtual_partitions=2)
    layout = layout.append(layout.plan_split(1, (25, 35), (0, 0)))  # VP 1 -> VPs 2, 3 from p1@35 on
    keyed = [(b"key-%d" % i, b"k%d" % i, 1_000 + i, None) for i in range(20)]
    keyless = [(None, b"n%d" % i, 2_000 + i, None) for i in range(20)]
    # The second batch straddles p1's cut, so the feeder places it record by record.
    log = stamped(batch_payload.encode_batch(keyed, 7, 0), 10) + stamped(batch_payload.encode_batch(keyless, 7, 20), 30)

    committed, expected_vp = committed_records(log, 1, layout)

    assert [(r.offset, r.value) for r in committed] == [(10 + i, b"k%d" % i) for i in range(20)] + \
        [(30 + i, b"n%d" % i) for i in range(20)]
    fed = {(1, record.offset): vp for position, _ in batch_frame.iter_batches(log)
           for vp, vp_batch in route_batch(log[position:], 1, layout).items() for record in vp_batch}
    assert expected_vp == fed
    assert 1 in {expected_vp[(1, offset)] for offset in range(10, 35)}
    assert 1 not in {expected_vp[(1, offset)] for offset in range(35, 50)}, "VP 1 is closed from the cut on"


def test_vp_records_carry_their_physical_source_and_the_producer_s_record():
    layout = TopicLayout.initial(partitions=3, virtual_partitions=1)
    batch = batch_payload.encode_batch([(b"k", b"a", 5, [("trace", b"t")]), (b"k", b"b", 6, None)])
    (fed,) = route_batch(stamped(batch, 40), 2, layout).values()

    assert vp_records(stamped(encode_vp_batch(fed), 0)) == [StoredRecord(0, b"k", b"a", 2, 40, leader_epoch=1),
                                                            StoredRecord(1, b"k", b"b", 2, 41, leader_epoch=1)]


# --- write path -------------------------------------------------------------------------------


def test_an_acknowledged_write_in_the_final_log_is_fine():
    acks = [Ack(b"k", b"a", 0, 0), Ack(b"k", b"b", 0, 1)]
    assert check_acks_in_log(acks, {0: [stored(0, b"a"), stored(1, b"b")]}) == []


def test_an_acknowledged_write_missing_from_the_final_log_is_lost():
    acks = [Ack(b"k", b"a", 0, 0), Ack(b"k", b"b", 0, 1)]
    assert kinds(check_acks_in_log(acks, {0: [stored(0, b"a")]})) == [Kind.LOST]


def test_an_acknowledged_write_replaced_at_its_offset_is_lost():
    acks = [Ack(b"k", b"a", 0, 0)]
    assert kinds(check_acks_in_log(acks, {0: [stored(0, b"other")]})) == [Kind.LOST]


def test_a_value_twice_in_a_final_log_is_a_duplicate():
    acks = [Ack(b"k", b"a", 0, 0)]
    assert kinds(check_acks_in_log(acks, {0: [stored(0, b"a"), stored(1, b"a")]})) == [Kind.DUPLICATE]


def test_replicas_with_the_same_bytes_below_their_high_watermarks_agree():
    replicas = {"r0": (2, b"AABB"), "r1": (1, b"AA"), "r2": (2, b"AABB")}
    assert check_replicas_identical(replicas) == []


def test_replicas_that_differ_below_the_high_watermark_diverged():
    replicas = {"r0": (2, b"AABB"), "r1": (2, b"AACC")}
    [anomaly] = check_replicas_identical(replicas)
    assert anomaly.kind is Kind.DIVERGED and "byte 2" in anomaly.detail


def test_a_producer_s_messages_land_in_the_order_it_sent_them():
    history = [Send("p", b"k", b"a", 0), Send("p", b"k", b"b", 0), Ack(b"k", b"b", 0, 8), Ack(b"k", b"a", 0, 7)]
    assert check_producer_order(history) == []


def test_a_later_message_of_a_producer_at_a_lower_offset_is_reordered():
    history = [Send("p", b"k", b"a", 0), Send("p", b"k", b"b", 0), Ack(b"k", b"a", 0, 8), Ack(b"k", b"b", 0, 7)]
    assert kinds(check_producer_order(history)) == [Kind.REORDERED]


def test_producer_order_is_per_producer_and_key():
    history = [Send("p", b"k", b"a", 0), Send("q", b"k", b"b", 0), Send("p", b"j", b"c", 0),
               Ack(b"k", b"a", 0, 8), Ack(b"k", b"b", 0, 7), Ack(b"j", b"c", 0, 1)]
    assert check_producer_order(history) == []


# --- read path --------------------------------------------------------------------------------


def test_every_committed_record_once_in_its_vp_is_fine():
    committed = {0: [stored(0, b"a"), stored(1, b"b")]}
    vps = {1: [stored(0, b"a", source=(0, 0))], 2: [stored(0, b"b", source=(0, 1))]}
    expected = {0: 1, 1: 2}
    assert check_exactly_once_in_vps(committed, vps, lambda record, p: expected[record.offset]) == []


def test_a_committed_record_in_no_vp_is_lost():
    committed = {0: [stored(0, b"a"), stored(1, b"b")]}
    assert kinds(check_exactly_once_in_vps(committed, {1: [stored(0, b"a", source=(0, 0))]})) == [Kind.LOST]


def test_a_record_in_two_vps_or_twice_in_one_is_a_duplicate():
    committed = {0: [stored(0, b"a")]}
    twice = {1: [stored(0, b"a", source=(0, 0)), stored(1, b"a", source=(0, 0))]}
    two_vps = {1: [stored(0, b"a", source=(0, 0))], 2: [stored(0, b"a", source=(0, 0))]}
    assert kinds(check_exactly_once_in_vps(committed, twice)) == [Kind.DUPLICATE]
    assert kinds(check_exactly_once_in_vps(committed, two_vps)) == [Kind.DUPLICATE]


def test_a_vp_record_that_is_not_the_committed_record_or_not_in_its_vp_is_misplaced():
    committed = {0: [stored(0, b"a")]}
    assert kinds(check_exactly_once_in_vps(committed, {1: [stored(0, b"zz", source=(0, 0))]})) == [Kind.MISPLACED]
    assert kinds(check_exactly_once_in_vps(committed, {1: [stored(0, b"a", source=(0, 0))]},
                                           lambda record, p: 2)) == [Kind.MISPLACED]


def test_reads_that_match_the_final_log_are_fine_and_others_misplaced():
    logs = {"vp1": [stored(0, b"a"), stored(1, b"b")]}
    good = [Consumed("c", "vp1", 0, b"k", b"a"), Consumed("c", "vp1", 1, b"k", b"b")]
    bad = [Consumed("c", "vp1", 1, b"k", b"x"), Consumed("c", "vp1", 5, b"k", b"y")]
    assert check_reads_match_logs(good, logs) == []
    assert kinds(check_reads_match_logs(bad, logs)) == [Kind.MISPLACED, Kind.MISPLACED]


def test_a_read_of_an_epoch_the_final_log_does_not_hold_there_is_left_to_the_loss_checks():
    """A one-replica VP's lost unflushed tail, fed again in a new epoch: its readers are told and
    read again; only a read in the epoch the log holds there must match it."""
    logs = {"vp1": [StoredRecord(0, b"k", b"a", leader_epoch=1), StoredRecord(1, b"k", b"c", leader_epoch=2)]}
    lost_tail = [Consumed("c", "vp1", 1, b"k", b"b", leader_epoch=1)]
    same_epoch = [Consumed("c", "vp1", 1, b"k", b"b", leader_epoch=2)]
    assert check_reads_match_logs(lost_tail, logs) == []
    assert kinds(check_reads_match_logs(same_epoch, logs)) == [Kind.MISPLACED]


def test_a_key_read_in_physical_order_across_vps_is_fine():
    consumed = [Consumed("c", "vp0", 0, b"k", b"a", 0, 3), Consumed("c", "vp1", 0, b"k", b"b", 0, 9),
                Consumed("d", "vp0", 0, b"k", b"a", 0, 3)]  # a re-read is not a reordering
    assert check_per_key_order(consumed) == []


def test_a_key_read_out_of_physical_order_is_reordered():
    consumed = [Consumed("c", "vp1", 0, b"k", b"b", 0, 9), Consumed("c", "vp0", 0, b"k", b"a", 0, 3)]
    assert kinds(check_per_key_order(consumed)) == [Kind.REORDERED]


def test_keys_are_independent_and_keyless_messages_have_no_order():
    consumed = [Consumed("c", "vp1", 0, b"k", b"b", 0, 9), Consumed("c", "vp0", 0, b"j", b"a", 0, 3),
                Consumed("c", "vp0", 1, None, b"x", 0, 5), Consumed("c", "vp0", 2, None, b"y", 0, 1)]
    assert check_per_key_order(consumed) == []


def test_a_key_s_order_is_per_lane():
    # The same key in the trunk and in lane "blue": two orders, each read in physical order.
    consumed = [Consumed("c", "vp4", 0, b"k", b"b", 0, 9, lane="blue"), Consumed("d", "vp0", 0, b"k", b"a", 0, 3)]
    assert check_per_key_order(consumed) == []
    late = [*consumed, Consumed("c", "vp4", 1, b"k", b"c", 0, 5, lane="blue")]
    assert kinds(check_per_key_order(late)) == [Kind.REORDERED]


def test_a_message_read_by_its_lane_or_by_the_trunk_while_its_lane_falls_back_to_it_is_fine():
    readers = {"trunk.1": frozenset({""}), "blue.1": frozenset({"blue"}), "both.1": frozenset({"", "env"})}
    fallbacks = {"blue": "trunk", "env": "none"}
    consumed = [Consumed("trunk.1", "vp0", 0, b"k", b"t"), Consumed("trunk.1", "vp4", 0, b"k", b"b", lane="blue"),
                Consumed("blue.1", "vp4", 1, b"k", b"c", lane="blue"),
                Consumed("both.1", "vp5", 0, b"k", b"e", lane="env"),
                Consumed("both.1", "vp0", 1, b"k", b"u"), Consumed("other.1", "vp0", 2, b"k", b"v")]
    assert check_lanes(consumed, readers, fallbacks) == []


def test_a_message_read_by_a_member_of_another_lane_is_a_wrong_lane_read():
    readers = {"trunk.1": frozenset({""}), "blue.1": frozenset({"blue"}), "green.1": frozenset({"green"})}
    fallbacks = {"blue": "trunk", "green": "trunk", "env": "none"}
    planted = [
        Consumed("blue.1", "vp5", 0, b"k", b"g", lane="green"),  # a lane member reads another lane
        Consumed("green.1", "vp0", 0, b"k", b"t"),  # a lane-only member reads the trunk
        Consumed("trunk.1", "vp6", 0, b"k", b"e", lane="env"),  # a trunk member reads a fallback-"none" lane
        Consumed("blue.1", "vp6", 1, b"k", b"f", lane="env"),  # so does a member of another lane
    ]
    found = check_lanes(planted, readers, fallbacks)
    assert kinds(found) == [Kind.WRONG_LANE] * 4
    assert "blue.1 (reading 'blue') read b'g' of lane 'green'" in str(found[0])


def read(value: bytes, at_ms: int, group: str = "g", consumer: str = "c") -> Consumed:
    return Consumed(consumer, "vp0", 0, b"k", value, at_ms=at_ms, group=group)


def test_a_delayed_message_read_at_its_due_time_or_within_the_tolerance_is_fine_and_earlier_is_early():
    sent = Send("p", b"k", b"d", 0, deliver_at_ms=10_000)
    assert check_not_delivered_early([sent, read(b"d", 10_000), read(b"d", 9_800)], tolerance_ms=200) == []
    found = check_not_delivered_early([sent, read(b"d", 9_000, group="other")], tolerance_ms=200)
    assert kinds(found) == [Kind.DELIVERED_EARLY]
    assert "c read b'd' at vp0@0 at 9000, 1000 ms before it was due at 10000 (sent to be delivered then)" in str(found[0])
    assert check_not_delivered_early([Send("p", b"k", b"n", 0), read(b"n", 0)], tolerance_ms=0) == [], "not delayed"


def test_a_nacked_message_read_again_by_its_group_before_its_redelivery_is_due_is_early():
    nack = Nack("g", "c", b"m", delivery_count=2, at_ms=5_000, due_ms=10_000)
    fine = [read(b"m", 4_000), nack, read(b"m", 3_000, group="h"), read(b"m", 10_000, consumer="d")]
    assert check_not_delivered_early(fine, tolerance_ms=0) == [], "the failed delivery, another group, on time"
    found = check_not_delivered_early([read(b"m", 4_000), nack, read(b"m", 6_000, consumer="d")], tolerance_ms=0)
    assert kinds(found) == [Kind.DELIVERED_EARLY]
    assert "4000 ms before it was due at 10000 (its redelivery after c's nack of delivery 2 at 5000)" in str(found[0])
    last = Nack("g", "c", b"m", delivery_count=16, at_ms=5_000, due_ms=None)
    assert check_not_delivered_early([last, read(b"m", 5_001)], tolerance_ms=0) == [], "dead-lettered: no due time"


def test_a_read_naming_its_delivery_is_due_at_the_earliest_nack_of_the_delivery_before_it():
    def delivery(count: int, at_ms: int, consumer: str = "c") -> Consumed:
        return Consumed(consumer, "vp0", 0, b"k", b"m", at_ms=at_ms, group="g", delivery_count=count)

    first = Nack("g", "c", b"m", delivery_count=1, at_ms=1_000, due_ms=1_300)
    # c crashed before its commit: d read delivery 1 again and nacked it too; c's copy came first.
    again = Nack("g", "d", b"m", delivery_count=1, at_ms=1_200, due_ms=1_500)
    fine = [delivery(1, 900), first, delivery(1, 1_100, "d"), again, delivery(2, 1_300, "e"), delivery(2, 1_500)]
    assert check_not_delivered_early(fine, tolerance_ms=0) == [], "re-read originals, then both copies on time"
    found = check_not_delivered_early([delivery(1, 900), first, again, delivery(2, 1_250)], tolerance_ms=0)
    assert kinds(found) == [Kind.DELIVERED_EARLY]
    assert "50 ms before it was due at 1300 (its redelivery after c's nack of delivery 1 at 1000)" in str(found[0])
    unnamed = Consumed("c", "vp0", 0, b"k", b"m", at_ms=1_400, group="g")
    assert kinds(check_not_delivered_early([first, again, unnamed], tolerance_ms=0)) == [Kind.DELIVERED_EARLY], \
        "a read without its delivery is judged against the last nack"


def test_a_read_that_has_a_due_time_must_carry_its_time():
    unstamped = Consumed("c", "vp0", 0, b"k", b"d", group="g")
    with pytest.raises(AssertionError, match="unstamped"):
        check_not_delivered_early([Send("p", b"k", b"d", 0, deliver_at_ms=1), unstamped], tolerance_ms=0)


def test_a_nacked_message_read_again_or_dead_lettered_is_not_lost():
    nack = Nack("g", "c", b"m", delivery_count=1, at_ms=1_000, due_ms=2_000)
    last = Nack("g", "c", b"m", delivery_count=2, at_ms=3_000, due_ms=None)
    fine = [read(b"m", 500), nack, read(b"m", 2_000, consumer="d"), last, DeadLettered("g", b"m", 2, 3_001)]
    assert check_nacked_not_lost(fine, drained_at_ms=10_000) == []


def test_a_nacked_message_its_group_never_had_again_is_lost_once_its_redelivery_was_due_before_the_drain():
    nack = Nack("g", "c", b"m", delivery_count=3, at_ms=1_000, due_ms=2_000)
    history = [read(b"m", 500), nack, read(b"m", 2_500, group="h"), DeadLettered("h", b"m", 16, 3_000)]
    found = check_nacked_not_lost(history, drained_at_ms=2_000)
    assert kinds(found) == [Kind.LOST_AFTER_NACK]
    assert "c of group g nacked delivery 3 of b'm' at 1000 (due again at 2000)" in str(found[0])
    assert check_nacked_not_lost(history, drained_at_ms=1_999) == [], "still scheduled when the run drained"
    assert check_nacked_not_lost(history, drained_at_ms=None) == [], "not drained: nothing judged"
    dead = [Nack("g", "c", b"x", delivery_count=16, at_ms=1_000, due_ms=None)]
    assert "(dead-lettered)" in str(check_nacked_not_lost(dead, drained_at_ms=1_000)[0])


def test_committed_offsets_that_only_grow_are_fine_and_a_step_back_regressed():
    fine = [Commit("g", "vp0", 3), Commit("g", "vp0", 3), Commit("g", "vp1", 1), Commit("g", "vp0", 5)]
    back = [Commit("g", "vp0", 5), Commit("g", "vp1", 9), Commit("g", "vp0", 4)]
    assert check_commits_monotonic(fine) == []
    assert kinds(check_commits_monotonic(back)) == [Kind.COMMIT_REGRESSED]


def test_a_commit_may_step_back_to_where_a_reader_rewound():
    rewound = [Commit("g", "vp0", 11), Rewound("c", "vp0", 8), Commit("g", "vp0", 8), Commit("g", "vp1", 3)]
    assert check_commits_monotonic(rewound) == []
    assert kinds(check_commits_monotonic([*rewound, Commit("g", "vp0", 7)])) == [Kind.COMMIT_REGRESSED]


def test_rereading_uncommitted_messages_is_at_least_once_but_rereading_committed_ones_is_a_duplicate():
    at_least_once = [Consumed("c", "vp0", 0, b"k", b"a"), Commit("g", "vp0", 0), Consumed("d", "vp0", 0, b"k", b"a")]
    duplicate = [Consumed("c", "vp0", 0, b"k", b"a"), Commit("g", "vp0", 1), Consumed("d", "vp0", 0, b"k", b"a")]
    assert check_no_duplicates_after_commit(at_least_once, "g") == []
    assert kinds(check_no_duplicates_after_commit(duplicate, "g")) == [Kind.DUPLICATE]


def test_a_reader_told_the_log_diverged_reads_again_from_where_it_rewound():
    rewound = [Consumed("c", "vp0", 0, b"k", b"a"), Consumed("c", "vp0", 1, b"k", b"b"), Commit("g", "vp0", 2),
               Rewound("c", "vp0", 1), Consumed("c", "vp0", 1, b"k", b"x")]
    assert check_no_duplicates_after_commit(rewound, "g") == []
    again = [*rewound, Consumed("d", "vp0", 1, b"k", b"x")]
    assert kinds(check_no_duplicates_after_commit(again, "g")) == [Kind.DUPLICATE], "read again since the rewind"


def test_a_commit_made_before_a_rewind_covers_none_of_the_records_read_again_there():
    # vp0@0..2 read and committed in epoch 1, lost with the power; the log holds other records there
    # now: one member reads them and lapses before it commits, the next reads them again (seed 923).
    history = [Consumed("c", "vp0", 0, b"k", b"a"), Consumed("c", "vp0", 1, b"k", b"b"), Commit("g", "vp0", 2),
               Rewound("c", "vp0", 0), Commit("g", "vp0", 0),
               Consumed("d", "vp0", 0, b"k", b"x"), Consumed("d", "vp0", 1, b"k", b"y"),
               Consumed("e", "vp0", 0, b"k", b"x"), Consumed("e", "vp0", 1, b"k", b"y")]
    assert check_no_duplicates_after_commit(history, "g") == []
    committed_again = [*history, Commit("g", "vp0", 2), Consumed("f", "vp0", 1, b"k", b"y")]
    assert kinds(check_no_duplicates_after_commit(committed_again, "g")) == [Kind.DUPLICATE]


def test_unread_acknowledged_messages_are_unseen_until_readers_pass_them_or_the_run_drains():
    acks = [Ack(b"k", b"a", 0, 0), Ack(b"k", b"b", 0, 1), Ack(b"j", b"c", 0, 2)]
    read_b = [Consumed("c", "vp0", 0, b"k", b"b", 0, 1)]
    # "a" was passed by a later message of its key: lost. "c" has no later read: unseen.
    assert kinds(classify_reads(acks, read_b, drained=False)) == [Kind.LOST, Kind.UNSEEN]
    assert kinds(classify_reads(acks, read_b, drained=True)) == [Kind.LOST, Kind.LOST]
    everything = read_b + [Consumed("c", "vp0", 1, b"k", b"a", 0, 0), Consumed("c", "vp1", 0, b"j", b"c", 0, 2)]
    assert classify_reads(acks, everything, drained=True) == []


def test_a_later_read_of_a_key_passes_only_its_own_lane_s_messages():
    # "a" waits in lane "env" (no reader yet) while the trunk's "b" of the same key is read: unseen, not lost.
    acks = [Ack(b"k", b"a", 0, 0, lane="env"), Ack(b"k", b"b", 0, 1), Ack(b"k", b"c", 0, 2, lane="env")]
    read = [Consumed("c", "vp0", 0, b"k", b"b", 0, 1)]
    assert kinds(classify_reads(acks, read, drained=False)) == [Kind.UNSEEN, Kind.UNSEEN]
    passed = read + [Consumed("e", "vp4", 0, b"k", b"c", 0, 2, lane="env")]
    assert kinds(classify_reads(acks, passed, drained=False)) == [Kind.LOST]
