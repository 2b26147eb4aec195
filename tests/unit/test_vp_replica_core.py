"""The pure VP replica core: roles and epoch fencing, feeding, the RISR seen from follower
fetches, follower truncation and catch-up, the serving window, and the ``Ready`` each call returns.

No files: the core is driven with plain values and ``now_ms``, as its two shells drive it.
"""

from __future__ import annotations

import pytest

from mafka4.batch_frame import BatchHeader
from mafka4.errors import InvalidConfig, NotLeader, ProtocolError, ReadReplicaNotInSync, StaleEpoch
from mafka4.log.epochs import NO_EPOCH, EpochHistory
from mafka4.client.positions import rewound
from mafka4.risr.state import RisrConfig
from mafka4.virtual.replica_core import NOTHING, FetchPosition, Ready, ReplicaAnswer, VpReplicaCore, VpRole
from mafka4.virtual.vp_records import NOTHING_APPLIED, FeedProgress, SourcedRecord

LAG_MS = 1_000
FEED_LAG_MS = 500
CONFIG = RisrConfig(read_replica_lag_ms_max=LAG_MS, feed_lag_ms_max=FEED_LAG_MS)
PAIR = ("r0", "r1")


def core(replica_id="r0", epochs=(), log_start_offset=0, log_end_offset=0, high_watermark=0,
         flushed_offset=None) -> VpReplicaCore:
    """A replica opened from a recovered log, which is durable to its end unless said otherwise."""
    flushed_offset = log_end_offset if flushed_offset is None else flushed_offset
    return VpReplicaCore("orders/v3", replica_id, CONFIG, EpochHistory(epochs), log_start_offset, log_end_offset,
                         high_watermark, flushed_offset=flushed_offset)


def leader(risr=PAIR, epoch=1, progress=None, now_ms=0, **kwargs) -> VpReplicaCore:
    replica = core("r0", **kwargs)
    replica.become_leader(epoch, PAIR, risr, progress or FeedProgress(), now_ms)
    return replica


def follower(epoch=1, **kwargs) -> VpReplicaCore:
    replica = core("r1", **kwargs)
    replica.become_follower(epoch, "r0")
    return replica


def records(partition, *offsets) -> list[SourcedRecord]:
    return [SourcedRecord(partition, offset, offset * 7, 1_000 + offset, b"k%d" % offset, b"v%d" % offset)
            for offset in offsets]


def append(replica: VpReplicaCore, partition, *offsets) -> Ready:
    """Feed the leader and append what it planned, as ``HostedVp.feed`` does."""
    fresh = replica.plan_feed(replica.leader_epoch, records(partition, *offsets))
    return replica.leader_appended(fresh, replica.log_end_offset + len(fresh))


def header(base_offset, count, epoch) -> BatchHeader:
    return BatchHeader(base_offset, 100, epoch, 0, 0, count, 0, 0, -1, -1)


def fetch(replica: VpReplicaCore, offset, now_ms=0, last_epoch=None, follower_id="r1", epoch=None):
    last_epoch = replica.epochs.latest_epoch if last_epoch is None else last_epoch
    epoch = replica.leader_epoch if epoch is None else epoch
    return replica.replica_fetch(follower_id, epoch, offset, last_epoch, now_ms)


# --- role changes ---------------------------------------------------------------------------


def test_a_new_leader_saves_its_epoch_and_a_repeated_notice_changes_nothing():
    replica = core(epochs=[(0, 0)], log_end_offset=5, high_watermark=2)
    assert replica.role is VpRole.NONE and not replica.serving(0)
    ready = replica.become_leader(1, PAIR, ("r0",), FeedProgress(), now_ms=0)
    assert ready == Ready(save_epochs=True, wake=True)
    assert replica.is_leader and replica.leader_id == "r0" and replica.epochs.entries == ((0, 0), (1, 5))
    assert replica.high_watermark == 5, "alone in its RISR, a new leader serves its whole log at once"
    assert replica.become_leader(1, PAIR, ("r0",), FeedProgress(), now_ms=10) == NOTHING
    assert replica.epochs.entries == ((0, 0), (1, 5))


def test_a_leader_at_a_new_epoch_of_its_own_keeps_its_feed_progress_without_a_rebuild():
    replica = leader(risr=("r0",))
    append(replica, 0, 0, 1, 2)
    append(replica, 1, 5)
    assert replica.become_leader(2, ("r0", "r2"), ("r0",), None, now_ms=0).save_epochs
    assert replica.leader_epoch == 2 and replica.epochs.entries == ((1, 0), (2, 4))
    assert (replica.last_applied(2, 0), replica.last_applied(2, 1)) == (2, 5)
    assert [record.offset for record in replica.plan_feed(2, records(0, 2, 3))] == [3], \
        "what was fed before the new epoch is not fed again"


def test_a_replica_that_does_not_lead_yet_needs_its_progress_rebuilt():
    replica = follower()
    with pytest.raises(AssertionError, match="rebuilt from its log"):
        replica.become_leader(2, PAIR, PAIR, None, now_ms=0)


def test_a_repeated_follower_notice_is_a_no_op_and_a_new_leader_is_followed():
    replica = core("r1")
    assert replica.become_follower(1, "r0") == Ready(wake=True)
    assert replica.become_follower(1, "r0") == NOTHING
    assert replica.become_follower(2, "r2") == Ready(wake=True)
    assert (replica.role, replica.leader_epoch, replica.leader_id) == (VpRole.FOLLOWER, 2, "r2")
    assert replica.fetch_position() == FetchPosition("r2", 2, 0, -1)


def test_role_notices_of_an_older_epoch_are_refused():
    replica = leader(epoch=3)
    with pytest.raises(StaleEpoch, match="epoch 2"):
        replica.become_leader(2, PAIR, PAIR, FeedProgress(), now_ms=0)
    with pytest.raises(StaleEpoch):
        replica.become_follower(2, "r1")
    assert replica.is_leader and replica.leader_epoch == 3


def test_requests_of_another_epoch_are_refused():
    replica = leader(epoch=3)
    with pytest.raises(StaleEpoch):
        replica.plan_feed(2, records(0, 1))
    with pytest.raises(NotLeader):
        replica.plan_feed(4, records(0, 1))
    with pytest.raises(NotLeader):
        fetch(replica, 0, epoch=4)
    with pytest.raises(StaleEpoch):
        fetch(replica, 0, epoch=2)
    with pytest.raises(NotLeader, match="not one of its followers"):
        fetch(replica, 0, follower_id="r9")
    deposed = follower(epoch=3)
    with pytest.raises(NotLeader, match="follower"):
        deposed.plan_feed(3, records(0, 1))
    with pytest.raises(NotLeader):
        deposed.last_applied(3, 0)


# --- leader: feeding ------------------------------------------------------------------------


def test_plan_feed_drops_what_the_progress_already_holds():
    replica = leader(risr=("r0",), progress=FeedProgress({0: 5, 1: 2}))
    assert [r.offset for r in replica.plan_feed(1, records(0, 3, 4, 5, 6, 8))] == [6, 8]
    assert [r.offset for r in replica.plan_feed(1, records(1, 1, 2, 3))] == [3]
    assert replica.plan_feed(1, records(2, 0)) == records(2, 0), "a partition not fed yet starts from nothing"


def test_leader_appended_moves_the_log_end_and_the_progress_and_wakes():
    replica = leader(risr=("r0",))
    assert append(replica, 0, 10, 11, 12) == Ready(flush=True, wake=True), "alone in its RISR: flush first"
    assert replica.log_end_offset == 3 and replica.high_watermark == 0
    assert replica.flushed(3) == Ready(wake=True)
    assert replica.high_watermark == 3
    assert replica.last_applied(1, 0) == 12 and replica.last_applied(1, 1) == NOTHING_APPLIED
    assert replica.plan_feed(1, records(0, 11, 12, 13)) == records(0, 13), "re-feeding appends nothing twice"


def test_a_ready_is_false_only_when_it_asks_for_nothing():
    assert not NOTHING and not Ready()
    for asked in (Ready(truncate_to=0), Ready(flush=True), Ready(save_epochs=True), Ready(write_risr=("r0",)),
                  Ready(wake=True)):
        assert asked, asked


def test_every_append_wakes_readers_and_a_lone_leader_owes_the_flush_of_each():
    alone, with_follower = leader(risr=("r0",)), leader()
    for offset in range(3):
        assert append(alone, 0, offset) == Ready(flush=True, wake=True)
        assert append(with_follower, 0, offset) == Ready(wake=True)
    assert alone.flushed(3) == Ready(wake=True) and alone.high_watermark == 3


def test_with_a_follower_in_the_risr_the_leaders_appends_are_not_readable_until_it_has_them():
    replica = leader()
    append(replica, 0, 1, 2, 3)
    assert replica.high_watermark == 0


def test_fed_reports_keep_the_furthest_offset_per_partition():
    replica = leader(risr=("r0",))
    assert replica.fed_through(2) == (0, 0)
    replica.fed(1, 0, fed_through=10, physical_high_watermark=12, now_ms=0)
    replica.fed(1, 0, fed_through=8, physical_high_watermark=12, now_ms=0)  # a resumed stream repeats
    replica.fed(1, 1, fed_through=4, physical_high_watermark=4, now_ms=0)
    assert replica.fed_through(2) == (10, 4)
    assert replica.describe(0)["fed_through"] == {0: 10, 1: 4}
    with pytest.raises(NotLeader):
        replica.fed(2, 0, 11, 12, now_ms=0)
    assert follower().fed_through(2) == (0, 0)


def test_a_feed_that_stays_behind_the_physical_high_watermark_is_reported_lagging():
    replica = leader(risr=("r0",))
    replica.fed(1, 0, fed_through=10, physical_high_watermark=12, now_ms=0)
    replica.fed(1, 1, fed_through=4, physical_high_watermark=4, now_ms=0)
    assert replica.describe(FEED_LAG_MS)["feed_lagging_partitions"] == []
    # The streams report again (every report_interval_ms): partition 1 is caught up, 0 still is not.
    replica.fed(1, 0, fed_through=10, physical_high_watermark=12, now_ms=FEED_LAG_MS + 1)
    replica.fed(1, 1, fed_through=4, physical_high_watermark=4, now_ms=FEED_LAG_MS + 1)
    assert replica.describe(FEED_LAG_MS + 1)["feed_lagging_partitions"] == [0]


# --- leader: follower fetches and the RISR ---------------------------------------------------


def test_a_follower_catching_up_joins_the_risr_and_the_leader_asks_to_record_it():
    replica = leader(risr=("r0",))
    append(replica, 0, 1, 2, 3, 4, 5)
    replica.flushed(5)
    answer, ready = fetch(replica, 0, now_ms=10)
    assert answer == ReplicaAnswer(5, serving=False, read_from=0)
    assert ready == NOTHING, "catching up changes neither the RISR nor the HW"
    answer, ready = fetch(replica, 5, now_ms=20)
    assert answer == ReplicaAnswer(5, serving=True, read_from=None)
    assert ready == Ready(write_risr=("r0", "r1"), wake=True)
    assert replica.risr == {"r0", "r1"}


def test_a_follower_fetch_that_moves_the_high_watermark_wakes_and_an_idle_one_does_not():
    replica = leader()
    append(replica, 0, 1, 2, 3, 4, 5)
    answer, ready = fetch(replica, 3, now_ms=10)
    assert answer == ReplicaAnswer(3, serving=True, read_from=3)
    assert ready == Ready(wake=True)
    assert fetch(replica, 3, now_ms=20)[1] == NOTHING, "idle followers must not end each other's long polls"
    answer, ready = fetch(replica, 5, now_ms=30)
    assert (answer.high_watermark, answer.read_from, ready) == (5, None, Ready(wake=True))


def test_a_diverging_follower_gets_the_epoch_end_and_no_data_and_is_not_reported():
    replica = core(epochs=[(0, 0), (1, 5)], log_end_offset=8, high_watermark=5)
    replica.become_leader(2, PAIR, ("r0",), FeedProgress(), now_ms=0)
    # The follower's last batch is of epoch 0 and it ends at 7; epoch 0 ended at 5 here.
    answer, ready = fetch(replica, 7, last_epoch=0, now_ms=10)
    assert answer == ReplicaAnswer(8, serving=False, diverging=(0, 5), read_from=None)
    assert ready == NOTHING
    assert replica.describe(10)["replicas"]["r1"] == {"status": "joining", "log_end_offset": None}
    answer, _ = fetch(replica, 5, last_epoch=0, now_ms=20)
    assert answer.diverging is None and answer.read_from == 5, "a prefix of the leader's log fetches on"


def test_current_answer_matches_the_reported_fetch_and_reports_nothing_again():
    replica = leader()
    append(replica, 0, 1, 2, 3, 4, 5)
    answer, _ = fetch(replica, 3, now_ms=10)
    position = FetchPosition("r0", 1, 3, replica.epochs.latest_epoch)
    assert replica.current_answer("r1", position) == answer
    append(replica, 0, 6, 7)
    later = replica.current_answer("r1", position)
    assert later == ReplicaAnswer(3, serving=True, read_from=3), "a long poll sends the new data"
    ahead = FetchPosition("r0", 1, 7, replica.epochs.latest_epoch)
    assert replica.current_answer("r1", ahead).high_watermark == 3, "the follower's end was not reported again"
    assert replica.describe(10)["replicas"]["r1"]["log_end_offset"] == 3
    with pytest.raises(NotLeader):
        replica.current_answer("r1", FetchPosition("r0", 2, 3, 1))


def test_current_answer_tells_a_diverging_follower_where_to_cut():
    replica = core(epochs=[(0, 0), (1, 5)], log_end_offset=8, high_watermark=5)
    replica.become_leader(2, PAIR, ("r0",), FeedProgress(), now_ms=0)
    answer = replica.current_answer("r1", FetchPosition("r0", 2, 7, 0))
    assert answer == ReplicaAnswer(8, serving=False, diverging=(0, 5))


def test_tick_moves_a_silent_follower_out_of_the_risr_and_the_written_risr_frees_the_high_watermark():
    replica = leader()
    append(replica, 0, 1, 2, 3)
    fetch(replica, 3, now_ms=0)
    append(replica, 0, 4, 5)
    assert replica.tick(LAG_MS) == NOTHING
    assert replica.tick(LAG_MS + 1) == Ready(flush=True, write_risr=("r0",), wake=True), "alone: flush, then record"
    assert replica.risr == {"r0"}
    assert replica.flushed(5) == NOTHING
    assert replica.high_watermark == 3, "the coordinator may still elect r1 until it holds the new RISR"
    assert replica.risr_written(("r0",), 1) == Ready(wake=True)
    assert replica.high_watermark == 5
    assert follower().tick(LAG_MS * 10) == NOTHING


def test_risr_written_after_a_depose_is_a_no_op():
    replica = leader()
    fetch(replica, 0, now_ms=0)
    ready = replica.tick(LAG_MS + 1)
    assert ready.write_risr == ("r0",)
    replica.become_follower(2, "r1")
    assert replica.risr_written(ready.write_risr, 1) == NOTHING
    assert replica.risr == frozenset() and replica.role is VpRole.FOLLOWER


def test_risr_written_for_another_epoch_is_a_no_op():
    replica = leader(epoch=2)
    assert replica.risr_written(("r0",), 1) == NOTHING


# --- follower ---------------------------------------------------------------------------------


def test_a_diverging_follower_truncates_cuts_its_epochs_and_caps_its_high_watermark():
    replica = follower(epoch=2, epochs=[(0, 0), (1, 5)], log_end_offset=9, high_watermark=7)
    ready = replica.truncate((0, 5))
    assert ready == Ready(truncate_to=5, save_epochs=True)
    assert replica.log_end_offset == 5 and replica.epochs.entries == ((0, 0),)
    assert replica.high_watermark == 5
    assert replica.fetch_position() == FetchPosition("r0", 2, 5, 0)


def test_a_follower_with_an_epoch_the_leader_lacks_truncates_to_where_its_older_epoch_ends():
    replica = follower(epoch=3, epochs=[(0, 0), (2, 6)], log_end_offset=9, high_watermark=4)
    # The leader knows epochs 0 and 1 only: its answer for epoch 2 is epoch 1, ending at 7.
    assert replica.truncate((1, 7)).truncate_to == 6
    assert replica.epochs.entries == ((0, 0),) and replica.high_watermark == 4


def test_follower_appended_extends_the_epoch_history_only_for_new_epochs():
    replica = follower(epoch=2, epochs=[(0, 0)], log_end_offset=5)
    assert replica.follower_appended([]) == NOTHING
    assert replica.follower_appended([header(5, 2, 0)]) == Ready(save_epochs=False)
    assert replica.follower_appended([header(7, 3, 2), header(10, 1, 2)]) == Ready(save_epochs=True)
    assert replica.epochs.entries == ((0, 0), (2, 7)) and replica.log_end_offset == 11
    with pytest.raises(AssertionError):
        replica.follower_appended([header(12, 1, 2)])  # a gap: not where the log ends


def test_leader_progress_caps_the_high_watermark_at_the_followers_log_end_and_never_lowers_it():
    replica = follower(log_end_offset=5)
    assert replica.leader_progress(9, serving=True, now_ms=0) == Ready(wake=True)
    assert replica.high_watermark == 5
    assert replica.leader_progress(9, serving=True, now_ms=10) == Ready(wake=False)
    replica.follower_appended([header(5, 4, 1)])
    assert replica.leader_progress(9, serving=True, now_ms=20) == Ready(wake=True)
    assert replica.high_watermark == 9
    replica.leader_progress(6, serving=True, now_ms=30)
    assert replica.high_watermark == 9


def test_a_follower_serves_only_while_its_leader_calls_it_in_sync_within_the_lag_bound():
    replica = follower(log_end_offset=5)
    assert not replica.serving(0), "not before the leader said so"
    with pytest.raises(ReadReplicaNotInSync, match="not in the RISR"):
        replica.check_serving(0)
    replica.leader_progress(5, serving=True, now_ms=100)
    assert replica.serving(100 + LAG_MS)
    replica.check_serving(100 + LAG_MS)
    assert not replica.serving(100 + LAG_MS + 1), "cut off from its leader, it stops serving by itself"
    with pytest.raises(ReadReplicaNotInSync):
        replica.check_serving(100 + LAG_MS + 1)
    assert replica.leader_progress(5, serving=True, now_ms=5_000) == Ready(wake=True)
    assert replica.serving(5_000)
    assert replica.leader_progress(5, serving=False, now_ms=5_010) == Ready(wake=True)
    assert not replica.serving(5_010)


def test_a_leader_always_serves_and_a_replica_without_a_role_never_does():
    assert leader().serving(10**9)
    leader().check_serving(0)
    with pytest.raises(ReadReplicaNotInSync):
        core().check_serving(0)


def test_a_deposed_leader_keeps_its_high_watermark_as_a_follower():
    replica = leader(risr=("r0",))
    append(replica, 0, 1, 2, 3)
    replica.flushed(3)
    replica.become_follower(2, "r1")
    assert replica.high_watermark == 3 and not replica.serving(0)
    assert replica.fetch_position() == FetchPosition("r1", 2, 3, 1)


def test_log_start_moves_only_up_to_the_high_watermark():
    replica = leader(risr=("r0",))
    append(replica, 0, 1, 2, 3)
    replica.flushed(3)
    replica.log_start_moved(2)
    with pytest.raises(AssertionError):
        replica.log_start_moved(1)
    with pytest.raises(AssertionError):
        replica.log_start_moved(4)


# --- the lone leader: its flushed offset bounds the HW ----------------------------------------
#
# While a VP with two or more replicas has a RISR of its leader alone, the leader's HW never
# passes what it flushed and every call that leaves it alone with unflushed records asks for a
# flush (``Ready.flush``): a power loss then never takes an offset a reader saw.


def test_a_vp_with_one_replica_is_not_covered_by_the_lone_leader_rule():
    """It serves its unflushed tail: its readers detect a diverged log after a power loss (below)."""
    replica = core()
    replica.become_leader(1, ("r0",), ("r0",), FeedProgress(), now_ms=0)
    assert append(replica, 0, 1, 2, 3) == Ready(wake=True)
    assert replica.high_watermark == 3 and replica.flushed_offset == 0


# --- readers: a fetch names the epoch of the last record read (Kafka's KIP-320) ----------------


def test_a_reader_that_read_a_tail_lost_in_a_power_loss_is_told_where_the_epochs_part():
    """The one-replica VP served 0..9 in epoch 1 with only 0..3 flushed; after the power loss the
    controller hands it epoch 2 (``virtual.failover``) and it feeds the lost records again, at
    other offsets. The reader that was at 10 moves back to 4 and reads on from there."""
    before = core()
    before.become_leader(1, ("r0",), ("r0",), FeedProgress(), now_ms=0)
    append(before, 0, *range(10))
    assert before.reader_divergence(10, 1) is None, "a reader of what the log holds goes on"
    after = core(epochs=((1, 0),), log_end_offset=4, high_watermark=4)  # recovered: the flushed part
    after.become_leader(2, ("r0",), ("r0",), FeedProgress(), now_ms=0)
    append(after, 1, *range(6))  # fed again, another partition first
    assert after.reader_divergence(10, 1) == (1, 4)
    position, last_epoch = rewound(10, (1, 4))
    assert (position, last_epoch) == (4, 1)
    assert after.reader_divergence(position, last_epoch) is None, "the next fetch reads from where the epochs part"
    assert after.reader_divergence(7, 2) is None, "a reader of the new epoch goes on"


def test_a_reader_without_an_epoch_is_checked_for_length_only():
    """An offset committed before fetches named epochs (or sought by hand) has none."""
    replica = core(epochs=((1, 0), (2, 4)), log_end_offset=8, high_watermark=8)
    assert replica.reader_divergence(8, NO_EPOCH) is None
    assert replica.reader_divergence(11, NO_EPOCH) == (NO_EPOCH, 8), "past the log's end: back to it"
    assert rewound(11, (NO_EPOCH, 8)) == (8, NO_EPOCH)


def test_a_replica_that_knows_no_epoch_checks_the_length_only():
    empty = core()
    assert empty.reader_divergence(0, 3) is None
    assert empty.reader_divergence(5, 3) == (NO_EPOCH, 0)


def test_a_reader_answered_diverging_never_moves_forward():
    assert rewound(3, (1, 9)) == (3, 1), "a replica behind the reader (a follower) moves it nowhere"
    with pytest.raises(ProtocolError, match="end offset -1"):
        rewound(3, (1, -1))


def test_a_fetch_with_an_epoch_below_no_epoch_is_refused():
    with pytest.raises(InvalidConfig, match="last leader epoch -2"):
        core().reader_divergence(0, -2)


def test_a_follower_taking_over_alone_flushes_before_it_serves_its_unflushed_tail():
    replica = core(log_end_offset=5, flushed_offset=2)
    assert replica.become_leader(1, PAIR, ("r0",), FeedProgress(), now_ms=0) == Ready(
        flush=True, save_epochs=True, wake=True)
    assert replica.high_watermark == 2
    replica.flushed(5)
    assert replica.high_watermark == 5


def test_a_leader_left_alone_flushes_before_it_records_its_risr():
    replica = leader()
    append(replica, 0, 1, 2, 3, 4)
    answer, ready = fetch(replica, 4, now_ms=0)
    assert replica.high_watermark == 4 and not ready.flush, "r1 holds 0..3: no flush needed"
    ready = replica.tick(LAG_MS + 1)  # r1 went quiet
    assert ready.write_risr == ("r0",) and ready.flush, "readers saw 0..3: durable before {r0} is recorded"


def test_a_truncated_follower_is_flushed_no_further_than_its_log():
    replica = follower(epoch=2, epochs=[(1, 0)], log_end_offset=6, high_watermark=0)
    replica.truncate((1, 4))
    assert replica.flushed_offset == replica.log_end_offset == 4


# --- invariants -------------------------------------------------------------------------------


def test_inconsistent_offsets_are_refused_on_open():
    with pytest.raises(AssertionError):
        core(log_end_offset=3, high_watermark=4)
    with pytest.raises(AssertionError):
        core(log_start_offset=2, log_end_offset=3, high_watermark=1)
    with pytest.raises(AssertionError):
        core(log_end_offset=3, flushed_offset=4)


def test_bad_calls_are_refused():
    with pytest.raises(AssertionError):
        core("r0").become_follower(1, "r0")
    replica = leader(risr=("r0",))
    fresh = replica.plan_feed(1, records(0, 1, 2))
    with pytest.raises(AssertionError):
        replica.leader_appended(fresh, replica.log_end_offset + 1)
    with pytest.raises(AssertionError):
        replica.leader_appended([], replica.log_end_offset)
    with pytest.raises(AssertionError):
        replica.plan_feed(1, records(0, 2, 1))  # out of offset order
    with pytest.raises(AssertionError):
        replica.fetch_position()
    with pytest.raises(AssertionError):
        replica.truncate((0, 0))
    with pytest.raises(AssertionError):
        replica.leader_progress(0, True, now_ms=0)
