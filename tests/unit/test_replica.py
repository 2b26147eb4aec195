"""The pure replica core: HW, acks, ISR, epochs, truncation, idempotence.

The last part drives three ``ReplicaState`` cores with a tiny model of logs, a controller
and producers through seeded random histories (appends, fetches, ticks, leader changes,
lost notices, partitions) and checks the write-path guarantees after every step.
"""

from __future__ import annotations

import bisect
import dataclasses
import random
from dataclasses import dataclass, field

import pytest

from mafka4.batch_frame import BatchHeader
from mafka4.errors import NotEnoughReplicas, NotLeader, OutOfOrderSequence, StaleEpoch
from mafka4.limits import Acks
from mafka4.limits.servers import ReplicaConfig
from mafka4.log.epochs import EpochHistory
from mafka4.log.producer_state import ProducerStateTable
from mafka4.physical.replica import NOTHING, AppendPlan, ReplicaState, Ready, Role

LAG_MS = 1_000
CONFIG = ReplicaConfig(replica_lag_ms_max=LAG_MS, min_insync_replicas=2)
ALL = ("r0", "r1", "r2")


def header(base_offset=0, count=1, epoch=-1, producer_id=-1, base_sequence=-1):
    return BatchHeader(base_offset, 100, epoch, 0, 0, count, 0, 0, producer_id, base_sequence)


def replica(replica_id="r0", config=CONFIG, log_end_offset=0, high_watermark=0, epochs=()) -> ReplicaState:
    return ReplicaState(
        replica_id, "orders-1", config, log_end_offset, high_watermark,
        EpochHistory(epochs), ProducerStateTable(5, 100),
    )


def leader(isr=ALL, config=CONFIG, epoch=1, now_ms=0, **kwargs) -> ReplicaState:
    state = replica("r0", config, **kwargs)
    state.become_leader(epoch, ALL, isr, now_ms)
    return state


def produce(state, count=1, producer_id=-1, base_sequence=-1, acks=Acks.ALL, now_ms=0) -> AppendPlan:
    unstamped = header(0, count, -1, producer_id, base_sequence)
    plan = state.plan_append(unstamped, acks, now_ms)
    if not plan.duplicate:
        stamped = unstamped._replace(base_offset=plan.base_offset, leader_epoch=plan.leader_epoch)
        state.appended(stamped, now_ms)
    return plan


def fetch(state, follower_id, offset, now_ms=0, epoch=None):
    return state.on_follower_fetch(follower_id, offset, state.leader_epoch if epoch is None else epoch, now_ms)


# --- high watermark and acks ---------------------------------------------------------------


def test_high_watermark_never_passes_the_smallest_isr_log_end_offset():
    state = leader()
    for _ in range(3):
        produce(state)
    assert state.high_watermark == 0  # follower LEOs unknown yet
    fetch(state, "r1", 3)
    assert state.high_watermark == 0
    assert fetch(state, "r2", 1).high_watermark == 1
    fetch(state, "r2", 2)
    assert state.high_watermark == 2
    fetch(state, "r2", 3)
    assert state.high_watermark == state.log_end_offset == 3


def test_a_leader_alone_in_the_isr_commits_on_append():
    state = leader(isr=("r0",), config=ReplicaConfig(min_insync_replicas=1))
    plan = produce(state, count=4)
    assert (plan.base_offset, plan.next_offset, state.high_watermark) == (0, 4, 4)
    assert state.ack_ready(plan.next_offset)


def test_acks_all_is_answered_only_once_every_isr_member_has_the_batch():
    state = leader()
    first = produce(state, count=2)
    second = produce(state, count=3)
    assert (second.base_offset, second.next_offset) == (2, 5)
    fetch(state, "r1", 5)
    assert not state.ack_ready(first.next_offset)
    fetch(state, "r2", 2)
    assert state.ack_ready(first.next_offset)
    assert not state.ack_ready(second.next_offset)
    fetch(state, "r2", 5)
    assert state.ack_ready(second.next_offset)


def test_acks_all_is_refused_while_the_isr_is_below_min_insync_replicas():
    state = leader(isr=("r0",))
    with pytest.raises(NotEnoughReplicas) as error:
        produce(state)
    assert error.value.retriable
    assert error.value.message.startswith(
        "partition orders-1 has 1 in-sync replica(s) (r0), acks=all needs min_insync_replicas=2"
    )
    assert "lower min_insync_replicas" in error.value.message
    assert state.log_end_offset == 0
    assert produce(state, acks=Acks.LEADER).base_offset == 0
    assert produce(state, acks=Acks.NONE).base_offset == 1


def test_a_committed_batch_is_not_acknowledged_once_the_isr_fell_below_the_minimum():
    state = leader(isr=("r0", "r1"))
    plan = produce(state)
    fetch(state, "r1", 1)
    assert state.tick(LAG_MS + 1).write_isr
    state.isr_committed(state.isr, state.leader_epoch)
    assert state.high_watermark == 1
    with pytest.raises(NotEnoughReplicas, match="appended but not acknowledged"):
        state.ack_ready(plan.next_offset)


def test_the_high_watermark_stands_still_while_the_isr_is_below_min_insync_replicas():
    # KIP-966: the coordinator may elect an eligible leader replica that lacks these batches.
    state = leader(isr=("r0",))
    produce(state, count=3, acks=Acks.LEADER)
    assert state.high_watermark == 0
    assert fetch(state, "r1", 3).ready.write_isr and state.isr == {"r0", "r1"}
    assert state.high_watermark == 0, "until confirmed, etcd may still hold the ISR {r0} and its ELR"
    state.isr_committed(state.isr, state.leader_epoch)
    assert state.high_watermark == 3


def test_a_shrink_below_min_insync_replicas_stops_the_high_watermark_before_it_is_confirmed():
    state = leader()
    fetch(state, "r1", 0)
    fetch(state, "r2", 0)
    produce(state, count=2)
    fetch(state, "r1", 2, now_ms=LAG_MS + 1)
    fetch(state, "r2", 2, now_ms=LAG_MS + 1)
    assert state.high_watermark == 2
    produce(state, count=2, now_ms=3 * LAG_MS)
    assert state.tick(3 * LAG_MS).write_isr and state.isr == {"r0"}
    state.isr_committed(state.isr, state.leader_epoch)
    assert state.high_watermark == 2, "r1 and r2 are eligible leader replicas holding offsets below 2 only"


def test_ack_ready_raises_not_leader_once_leadership_is_lost():
    state = leader()
    plan = produce(state)
    state.become_follower(2, "r1")
    with pytest.raises(NotLeader, match="retry it on the new leader"):
        state.ack_ready(plan.next_offset)
    state.become_leader(3, ALL, ALL, 0)
    with pytest.raises(NotLeader):
        state.ack_ready(plan.next_offset, plan.leader_epoch)


# --- ISR -----------------------------------------------------------------------------------


def test_a_follower_that_stops_fetching_leaves_the_isr_after_the_lag_limit():
    state = leader(now_ms=100)
    fetch(state, "r1", 0, now_ms=100)
    fetch(state, "r2", 0, now_ms=100)
    assert not state.tick(100 + LAG_MS).write_isr  # exactly at the limit: still in sync
    fetch(state, "r1", 0, now_ms=100 + LAG_MS)
    assert state.tick(101 + LAG_MS).write_isr
    assert state.isr == {"r0", "r1"}
    assert state.tick(10 * LAG_MS + 102).write_isr
    assert state.isr == {"r0"}  # never the leader itself
    assert not state.tick(100 * LAG_MS).write_isr


def test_a_follower_that_fetches_but_never_reaches_the_log_end_leaves_the_isr():
    state = leader()
    now_ms = 0
    for _ in range(5):
        produce(state, count=10, acks=Acks.LEADER)
        now_ms += LAG_MS // 2
        fetch(state, "r1", state.log_end_offset, now_ms=now_ms)  # keeps up
        fetch(state, "r2", state.log_end_offset - 20 if state.log_end_offset > 20 else 0, now_ms=now_ms)
        state.tick(now_ms)
    assert state.isr == {"r0", "r1"}


def test_a_follower_reaching_the_previous_fetch_log_end_stays_in_sync():
    # Kafka's rule: reaching the leader LEO seen at the previous fetch proves the follower
    # was caught up at that time, although the leader moved on since.
    state = leader()
    now_ms = 0
    for _ in range(10):
        leo_before = state.log_end_offset
        produce(state, acks=Acks.LEADER)
        now_ms += LAG_MS // 2
        fetch(state, "r1", leo_before, now_ms=now_ms)
        fetch(state, "r2", state.log_end_offset, now_ms=now_ms)
        assert not state.tick(now_ms).write_isr
    assert state.isr == set(ALL)


def test_a_shrunk_follower_rejoins_the_isr_once_it_caught_up():
    state = leader()
    produce(state, count=5)
    fetch(state, "r1", 5, now_ms=LAG_MS)
    state.tick(LAG_MS + 1)
    state.isr_committed(state.isr, state.leader_epoch)
    assert state.isr == {"r0", "r1"} and state.high_watermark == 5
    decision = fetch(state, "r2", 3, now_ms=LAG_MS + 2)
    assert not decision.ready.write_isr and "r2" not in state.isr
    decision = fetch(state, "r2", 5, now_ms=LAG_MS + 3)
    assert decision.ready.write_isr and state.isr == set(ALL)


def test_a_follower_missing_committed_batches_does_not_rejoin_a_new_leader_with_a_lagging_hw():
    # Kafka's KAFKA-7128: the new leader's HW lags the old leader's; a follower at that HW
    # but short of the new epoch's start may lack committed batches, so it must not count
    # as in sync (were it elected, those batches would be lost).
    config = ReplicaConfig(replica_lag_ms_max=LAG_MS, min_insync_replicas=1)
    old = leader(config=config)
    produce(old, count=4)
    fetch(old, "r1", 4, now_ms=LAG_MS)
    fetch(old, "r2", 2, now_ms=LAG_MS)
    old.tick(LAG_MS + 1)
    old.isr_committed(old.isr, old.leader_epoch)
    assert old.isr == {"r0", "r1"} and old.high_watermark == 4  # 0..3 acknowledged
    new = replica("r1", config=config, log_end_offset=4, high_watermark=2, epochs=((1, 0),))
    new.become_leader(2, ALL, ("r0", "r1"), LAG_MS + 2)
    assert not fetch(new, "r2", 2, now_ms=LAG_MS + 3, epoch=1).ready.write_isr
    assert "r2" not in new.isr
    assert fetch(new, "r2", 4, now_ms=LAG_MS + 4, epoch=1).ready.write_isr


def test_an_isr_shrink_lets_the_hw_advance_only_once_the_coordinator_holds_it():
    state = leader()
    plan = produce(state)
    fetch(state, "r1", 1, now_ms=LAG_MS)
    assert state.tick(LAG_MS + 1).write_isr and state.isr == {"r0", "r1"}
    # r2 may still be elected by the coordinator: it bounds the HW until the write lands.
    assert state.high_watermark == 0 and not state.ack_ready(plan.next_offset)
    assert state.describe()["isr_uncommitted"] == ["r2"]
    state.isr_committed(["r0", "r1"], state.leader_epoch)
    assert state.high_watermark == 1 and state.ack_ready(plan.next_offset)


def test_a_stale_leader_whose_isr_write_is_refused_acknowledges_nothing():
    state = leader()
    plan = produce(state)
    state.tick(10 * LAG_MS)  # the followers follow someone else now
    assert state.isr == {"r0"}
    assert not state.ack_ready(plan.next_offset)


def test_a_follower_that_lost_committed_data_leaves_the_isr():
    state = leader()
    produce(state, count=3)
    fetch(state, "r1", 3)
    fetch(state, "r2", 3)
    assert state.high_watermark == 3
    decision = fetch(state, "r2", 1)  # restarted without its unflushed tail
    assert decision.ready.write_isr and state.isr == {"r0", "r1"}


def test_a_fetch_from_a_replica_that_is_not_a_follower_is_refused():
    state = leader()
    with pytest.raises(NotLeader, match="r7 .* is not one of its followers"):
        fetch(state, "r7", 0)


# --- epochs and fencing --------------------------------------------------------------------


def test_requests_with_a_stale_epoch_are_refused():
    state = leader(epoch=5)
    state.check_epoch(None)
    state.check_epoch(5)
    with pytest.raises(StaleEpoch, match="carries leader epoch 4 .* at epoch 5") as error:
        state.check_epoch(4)
    assert error.value.retriable
    with pytest.raises(NotLeader, match="not yet learned"):
        state.check_epoch(6)


def test_role_changes_to_an_older_epoch_are_refused():
    state = leader(epoch=5)
    with pytest.raises(StaleEpoch):
        state.become_leader(4, ALL, ALL, 0)
    with pytest.raises(StaleEpoch):
        state.become_follower(4, "r1")
    with pytest.raises(StaleEpoch):
        state.become_follower(5, "r1")  # r0 leads epoch 5
    state.become_leader(5, ALL, ALL, 0)  # a repeated notice changes nothing
    assert state.role is Role.LEADER
    state.become_follower(6, "r1")
    state.become_follower(6, "r1")
    with pytest.raises(StaleEpoch):
        state.become_follower(6, "r2")
    with pytest.raises(StaleEpoch):
        state.become_leader(6, ALL, ALL, 0)


def test_a_replica_never_leads_the_same_epoch_twice_even_after_a_restart():
    restarted = replica(log_end_offset=4, high_watermark=2, epochs=((3, 0),))
    assert restarted.leader_epoch == 3 and restarted.leader_id is None
    with pytest.raises(StaleEpoch, match="must elect the leader with a new epoch"):
        restarted.become_leader(3, ALL, ALL, 0)
    restarted.become_leader(4, ALL, ALL, 0)
    assert restarted.epochs.entries == ((3, 0), (4, 4))


def test_a_restarted_follower_accepts_the_leader_of_its_latest_epoch():
    restarted = replica("r1", log_end_offset=4, high_watermark=2, epochs=((3, 0),))
    restarted.become_follower(3, "r0")
    assert (restarted.role, restarted.leader_id, restarted.leader_epoch) == (Role.FOLLOWER, "r0", 3)


def test_a_follower_refuses_produce_and_names_the_leader():
    state = replica("r1")
    state.become_follower(2, "r0")
    with pytest.raises(NotLeader, match=r"not the leader of partition orders-1 \(leader: r0, epoch 2\)"):
        produce(state)
    with pytest.raises(NotLeader):
        fetch(state, "r2", 0)


def test_checkpointed_epochs_past_the_recovered_log_end_are_dropped():
    state = replica(log_end_offset=10, high_watermark=5, epochs=((1, 0), (2, 10), (3, 12)))
    assert state.epochs.entries == ((1, 0), (2, 10))
    assert state.last_fetched_epoch == 2


# --- follower side and truncation ----------------------------------------------------------


def test_a_follower_high_watermark_follows_the_leader_but_not_past_its_own_log_end():
    state = replica("r1")
    state.become_follower(1, "r0")
    state.follower_appended(header(0, 3, epoch=1))
    state.follower_high_watermark(2)
    assert state.high_watermark == 2
    state.follower_high_watermark(7)
    assert state.high_watermark == 3
    state.follower_high_watermark(1)
    assert state.high_watermark == 3


def test_follower_truncation_after_a_leader_change_keeps_every_acknowledged_batch():
    r0, r1, r2 = leader(), replica("r1"), replica("r2")
    for follower in (r1, r2):
        follower.become_follower(1, "r0")
    logs = {"r0": [], "r1": [], "r2": []}

    def append_on_leader(state, name, count):
        plan = produce(state, count=count, acks=Acks.LEADER)
        logs[state.replica_id].append((plan.base_offset, count, plan.leader_epoch, name))
        return plan

    def replicate(follower, source, up_to):
        own = logs[follower.replica_id]
        for batch in logs[source.replica_id]:
            base, count, epoch, _ = batch
            if base >= follower.log_end_offset and base + count <= up_to:
                own.append(batch)
                follower.follower_appended(header(base, count, epoch))

    acknowledged = append_on_leader(r0, "a", 2)
    for follower in (r1, r2):
        replicate(follower, r0, 2)
        fetch(r0, follower.replica_id, 2)
    assert r0.ack_ready(acknowledged.next_offset)
    append_on_leader(r0, "b", 1)  # only r1 gets it: not acknowledged
    replicate(r1, r0, 3)
    fetch(r0, "r1", 3)
    append_on_leader(r0, "c", 1)  # nobody gets it

    r2.become_leader(2, ALL, ALL, 0)  # r2 was in the ISR: a clean election
    r1.become_follower(2, "r2")
    r0.become_follower(2, "r2")
    append_on_leader(r2, "d", 1)
    for follower in (r1, r0):
        decision = r2.on_follower_fetch(follower.replica_id, follower.log_end_offset, follower.last_fetched_epoch, 0)
        assert decision.diverging == (1, 2)
        offset = follower.truncation_offset(*decision.diverging)
        assert offset == 2
        logs[follower.replica_id] = [b for b in logs[follower.replica_id] if b[0] < offset]
        follower.truncated(offset)
        assert r2.on_follower_fetch(follower.replica_id, offset, follower.last_fetched_epoch, 0).diverging is None
        replicate(follower, r2, r2.log_end_offset)
    assert logs["r0"] == logs["r1"] == logs["r2"]
    assert [name for *_, name in logs["r0"]] == ["a", "d"]


def test_truncation_takes_several_rounds_when_the_follower_lacks_the_answered_epoch():
    # KIP-279: leader history 1@0 2@8 4@12; the follower has 1@0 3@10 (its epoch-1 batches
    # at 8..9 and its epoch-3 batches never reached the leader).
    leader_state = replica("r0", log_end_offset=20, high_watermark=8, epochs=((1, 0), (2, 8), (4, 12)))
    leader_state.become_leader(5, ALL, ("r0", "r2"), 0)
    follower = replica("r1", log_end_offset=15, high_watermark=8, epochs=((1, 0), (3, 10)))
    follower.become_follower(5, "r0")
    offsets = []
    while True:
        decision = leader_state.on_follower_fetch("r1", follower.log_end_offset, follower.last_fetched_epoch, 0)
        if decision.diverging is None:
            break
        offsets.append(follower.truncation_offset(*decision.diverging))
        follower.truncated(offsets[-1])
    assert offsets == [10, 8]
    assert follower.epochs.entries == ((1, 0),) and follower.high_watermark == 8


def test_a_follower_without_epoch_history_ahead_of_the_leader_truncates_to_the_leader_end():
    leader_state = leader(log_end_offset=3, high_watermark=3, epochs=((0, 0),))
    follower = replica("r1", log_end_offset=5, high_watermark=2)
    follower.become_follower(1, "r0")
    decision = fetch(leader_state, "r1", 5, epoch=-1)
    assert decision.diverging == (-1, 3)
    assert follower.truncation_offset(*decision.diverging) == 3


# --- Ready: what the shell must do after each call -----------------------------------------


def test_role_changes_say_what_to_persist_and_whom_to_wake_and_repeated_notices_nothing():
    state = replica()
    assert state.become_leader(1, ALL, ALL, 0) == Ready(save_epochs=True, wake=True)
    assert state.become_leader(1, ALL, ALL, 0) == NOTHING
    assert state.become_follower(2, "r1") == Ready(wake=True)  # acks=all waiters are refused, long polls end
    assert state.become_follower(2, "r1") == NOTHING


def test_an_isr_write_counts_only_for_the_epoch_this_replica_leads():
    state = leader(isr=("r0", "r1"))
    assert state.tick(LAG_MS + 1) == Ready(write_isr=("r0",), wake=True)
    assert state.isr_committed(["r0"], leader_epoch=0) == NOTHING
    assert state.committed_isr == {"r0", "r1"}
    assert state.isr_committed(["r0"], leader_epoch=1) == Ready(wake=True)
    assert state.committed_isr == {"r0"}
    state.become_follower(2, "r1")
    assert state.isr_committed(["r0"], leader_epoch=1) == NOTHING  # deposed while the write was out
    assert state.tick(10 * LAG_MS) == NOTHING


def test_a_follower_checkpoints_epochs_after_a_truncation_and_for_a_new_epoch_only():
    state = replica("r1")
    state.become_follower(2, "r0")
    assert state.follower_appended(header(0, 2, epoch=1)) == Ready(save_epochs=True)
    assert state.follower_appended(header(2, 1, epoch=1)) == NOTHING
    assert state.follower_appended(header(3, 1, epoch=2)) == Ready(save_epochs=True)
    assert state.follower_high_watermark(3) == Ready(wake=True)
    assert state.follower_high_watermark(3) == NOTHING
    assert state.truncated(3) == Ready(save_epochs=True)


def test_ready_values_combine_field_by_field():
    combined = Ready(save_epochs=True, write_isr=("r0",)) | Ready(write_isr=("r0", "r1"), wake=True)
    assert combined == Ready(save_epochs=True, write_isr=("r0", "r1"), wake=True)
    assert NOTHING | NOTHING == NOTHING


# --- idempotent producer -------------------------------------------------------------------


def test_a_retried_batch_is_not_appended_twice():
    state = leader(isr=("r0",), config=ReplicaConfig(min_insync_replicas=1))
    first = produce(state, count=2, producer_id=7, base_sequence=0)
    produce(state, count=1, producer_id=7, base_sequence=2)
    retry = produce(state, count=2, producer_id=7, base_sequence=0)
    assert retry == AppendPlan(True, first.base_offset, 1, first.next_offset)
    assert state.log_end_offset == 3
    with pytest.raises(OutOfOrderSequence):
        produce(state, producer_id=7, base_sequence=9)


def test_a_new_leader_recognises_a_retry_of_a_batch_its_predecessor_appended():
    old = leader()
    plan = produce(old, count=2, producer_id=7, base_sequence=0, acks=Acks.LEADER)
    new = replica("r1")
    new.become_follower(1, "r0")
    new.follower_appended(header(plan.base_offset, 2, 1, 7, 0))
    new.become_leader(2, ALL, ALL, 0)
    retry = produce(new, count=2, producer_id=7, base_sequence=0)
    assert retry.duplicate and retry.base_offset == 0 and new.log_end_offset == 2


def test_a_retry_of_a_truncated_batch_is_appended_again():
    follower = replica("r1")
    follower.become_follower(1, "r0")
    follower.follower_appended(header(0, 1, 1, 7, 0))
    follower.follower_appended(header(1, 1, 1, 7, 1))
    follower.truncated(1)
    follower.become_leader(2, ALL, ALL, 0)
    assert not produce(follower, producer_id=7, base_sequence=1).duplicate


def test_describe_reports_what_topic_describe_shows():
    state = leader()
    produce(state, count=2)
    fetch(state, "r1", 2, now_ms=5)
    described = state.describe()
    assert described["role"] == "leader" and described["leader"] == "r0"
    assert described["leader_epoch"] == 1 and described["log_end_offset"] == 2
    assert described["isr"] == ["r0", "r1", "r2"] and described["high_watermark"] == 0
    assert described["followers"]["r1"] == {"log_end_offset": 2, "last_caught_up_ms": 5}
    assert described["followers"]["r2"]["log_end_offset"] is None


# --- seeded randomized histories -----------------------------------------------------------


@dataclass(frozen=True)
class ModelBatch:
    ident: tuple[int, int]  # (producer id, base sequence): unique per produced batch
    base_offset: int
    count: int
    epoch: int

    def header(self):
        return header(self.base_offset, self.count, self.epoch, *self.ident)


class ModelNode:
    def __init__(self, replica_id: str, config: ReplicaConfig):
        self.id = replica_id
        self.log: list[ModelBatch] = []
        self.state = ReplicaState(
            replica_id, "t-0", config, 0, 0, EpochHistory(),
            ProducerStateTable(config.producer_batches_remembered, config.producer_ids_max),
        )

    @property
    def log_end_offset(self) -> int:
        return self.log[-1].base_offset + self.log[-1].count if self.log else 0

    def index_of(self, offset: int) -> int:
        """Index of the batch starting at ``offset`` (len(log) at the end); asserts a boundary."""
        starts = [batch.base_offset for batch in self.log]
        index = bisect.bisect_left(starts, offset)
        assert (index < len(starts) and starts[index] == offset) or offset == self.log_end_offset, (
            f"{self.id}: offset {offset} is not a batch boundary"
        )
        return index


@dataclass
class Sent:
    sequence: int
    count: int
    acked_offset: int | None = None
    waiting: tuple[str, int, int] | None = None  # (replica, leader epoch, next offset)


@dataclass
class ModelProducer:
    producer_id: int
    target: str = "r0"  # the replica this producer believes leads
    batches: list[Sent] = field(default_factory=list)
    next_sequence: int = 0
    refresh: bool = False  # a send failed: pick the target again once nothing is in flight


IN_FLIGHT_MAX = 5  # as Kafka's producer: never more than the leader remembers


class Simulation:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.config = ReplicaConfig(
            replica_lag_ms_max=100, min_insync_replicas=self.rng.choice((1, 2, 2, 3)),
            producer_batches_remembered=IN_FLIGHT_MAX,
        )
        self.now_ms = 0
        self.nodes = {replica_id: ModelNode(replica_id, self.config) for replica_id in ALL}
        self.connected = {replica_id: True for replica_id in ALL}
        self.epoch, self.leader, self.isr = 0, "r0", frozenset(ALL)  # the coordinator's view
        self.notices: dict[str, tuple[int, str]] = {}  # delayed become_follower notices
        self.producers = [ModelProducer(1), ModelProducer(2)]
        self.acked: dict[tuple[int, int], ModelBatch] = {}
        self.high_watermarks: dict[tuple[str, int], int] = {}
        self.nodes["r0"].state.become_leader(0, ALL, ALL, 0)
        for replica_id in ("r1", "r2"):
            self.nodes[replica_id].state.become_follower(0, "r0")

    # actions ------------------------------------------------------------------------------

    def step(self) -> None:
        self.now_ms += self.rng.randint(0, 5)
        roll = self.rng.random()
        if roll < 0.35:
            self.produce(self.rng.choice(self.producers))
        elif roll < 0.70:
            self.fetch(self.nodes[self.rng.choice(ALL)], self.rng.randint(0, 3))
        elif roll < 0.82:
            self.now_ms += self.rng.randint(1, 60)
            self.tick()
        elif roll < 0.88:
            replica_id = self.rng.choice(ALL)
            self.connected[replica_id] = not self.connected[replica_id]
        elif roll < 0.92:
            self.change_leader()
        elif roll < 0.96 and self.notices:
            replica_id = self.rng.choice(sorted(self.notices))
            self.deliver_notice(replica_id)
        else:
            self.retry_acknowledged(self.rng.choice(self.producers))
        self.check_acks()
        self.check_invariants()

    def produce(self, producer: ModelProducer, new_allowed: bool = True) -> None:
        """Send like an idempotent producer: in sequence order, to one believed leader.

        After a failure it resends only once every in-flight batch was answered, oldest
        first, and only then looks up the leader again (sometimes getting a stale answer).
        """
        unacked = [sent for sent in producer.batches if sent.acked_offset is None]
        in_flight = [sent for sent in unacked if sent.waiting is not None]
        resend = [sent for sent in unacked if sent.waiting is None]
        if resend:
            if in_flight:
                return
            sent = resend[0]
        elif new_allowed and len(unacked) < IN_FLIGHT_MAX:
            sent = Sent(producer.next_sequence, self.rng.randint(1, 3))
            producer.next_sequence += sent.count
            producer.batches.append(sent)
        else:
            return
        if producer.refresh and not in_flight:
            producer.target = self.leader if self.rng.random() < 0.8 else self.rng.choice(ALL)
            producer.refresh = False
        plan = self.send(self.nodes[producer.target], producer, sent)
        if plan is None:
            producer.refresh = True
        else:
            sent.waiting = (producer.target, plan.leader_epoch, plan.next_offset)

    def send(self, target: ModelNode, producer: ModelProducer, sent: Sent) -> AppendPlan | None:
        ident = (producer.producer_id, sent.sequence)
        unstamped = ModelBatch(ident, 0, sent.count, -1).header()
        try:
            plan = target.state.plan_append(unstamped, Acks.ALL, self.now_ms)
        except (NotLeader, NotEnoughReplicas, OutOfOrderSequence):
            return None
        if plan.duplicate:
            assert target.log[target.index_of(plan.base_offset)].ident == ident
            return plan
        assert all(batch.ident != ident for batch in target.log), f"{ident} appended twice on {target.id}"
        batch = ModelBatch(ident, plan.base_offset, sent.count, plan.leader_epoch)
        target.log.append(batch)
        target.state.appended(batch.header(), self.now_ms)
        return plan

    def retry_acknowledged(self, producer: ModelProducer) -> None:
        """A producer that lost an answer resends a batch that was in fact acknowledged."""
        recent = [sent for sent in producer.batches[-IN_FLIGHT_MAX:] if sent.acked_offset is not None]
        if not recent:
            return
        sent = self.rng.choice(recent)
        plan = self.send(self.nodes[self.leader], producer, dataclasses.replace(sent, waiting=None))
        assert plan is None or (plan.duplicate and plan.base_offset == sent.acked_offset), (plan, sent)

    def fetch(self, follower: ModelNode, batches_max: int) -> None:
        state = follower.state
        if state.role is not Role.FOLLOWER or state.leader_id is None or not self.connected[follower.id]:
            return
        source = self.nodes[state.leader_id]
        try:
            source.state.check_epoch(state.leader_epoch)
            decision = source.state.on_follower_fetch(follower.id, state.log_end_offset, state.last_fetched_epoch, self.now_ms)
            for _ in range(len(ALL) + 10):  # each round drops batches or an epoch: it ends
                if decision.diverging is None:
                    break
                self.truncate(follower, state.truncation_offset(*decision.diverging))
                decision = source.state.on_follower_fetch(
                    follower.id, state.log_end_offset, state.last_fetched_epoch, self.now_ms
                )
            else:
                raise AssertionError(f"{follower.id} never stopped diverging from {source.id}")
        except (StaleEpoch, NotLeader):
            return
        if decision.ready.write_isr:
            self.commit_isr(source)
        start = source.index_of(state.log_end_offset)
        for batch in source.log[start:start + batches_max]:
            follower.log.append(batch)
            state.follower_appended(batch.header())
        if self.rng.random() < 0.5:  # followers learn the HW late: a new leader's HW lags
            state.follower_high_watermark(decision.high_watermark)

    def truncate(self, follower: ModelNode, offset: int) -> None:
        assert offset >= follower.state.high_watermark, (follower.id, offset, follower.state.high_watermark)
        keep = follower.index_of(offset)
        for batch in follower.log[keep:]:
            assert self.acked.get(batch.ident) != batch, f"acknowledged {batch} truncated on {follower.id}"
        del follower.log[keep:]
        follower.state.truncated(offset)

    def tick(self) -> None:
        for node in self.nodes.values():
            if node.state.tick(self.now_ms).write_isr or node.state.isr != node.state.committed_isr:
                self.commit_isr(node)

    def commit_isr(self, node: ModelNode) -> None:
        """The leader's compare-and-swap of its ISR: refused for a stale leader; sometimes late."""
        if node.id != self.leader or node.state.leader_epoch != self.epoch or self.rng.random() < 0.3:
            return
        self.isr = node.state.isr
        node.state.isr_committed(self.isr, node.state.leader_epoch)

    def change_leader(self) -> None:
        candidates = sorted(self.isr - {self.leader})
        if not candidates:
            return
        old, new = self.leader, self.rng.choice(candidates)
        self.epoch += 1
        self.leader = new
        if self.rng.random() < 0.5:
            self.isr -= {old}  # the old leader is considered failed
        self.notices.pop(new, None)
        self.nodes[new].state.become_leader(self.epoch, ALL, sorted(self.isr), self.now_ms)
        for replica_id in ALL:
            if replica_id != new:
                self.notices[replica_id] = (self.epoch, new)
                if replica_id != old or self.rng.random() < 0.5:  # the old leader may not hear it yet
                    self.deliver_notice(replica_id)

    def deliver_notice(self, replica_id: str) -> None:
        epoch, leader_id = self.notices.pop(replica_id)
        self.nodes[replica_id].state.become_follower(epoch, leader_id)

    def check_acks(self) -> None:
        for producer in self.producers:
            for sent in producer.batches:
                if sent.waiting is None:
                    continue
                replica_id, epoch, next_offset = sent.waiting
                node = self.nodes[replica_id]
                try:
                    ready = node.state.ack_ready(next_offset, epoch)
                except (NotLeader, NotEnoughReplicas):
                    sent.waiting = None
                    producer.refresh = True
                    continue
                if ready:
                    batch = node.log[node.index_of(next_offset - sent.count)]
                    assert batch.ident == (producer.producer_id, sent.sequence)
                    assert self.acked.setdefault(batch.ident, batch) == batch
                    sent.acked_offset, sent.waiting = batch.base_offset, None

    # checks -------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        leader = self.nodes[self.leader]
        for node in self.nodes.values():
            state = node.state
            assert state.log_end_offset == node.log_end_offset
            assert len({batch.ident for batch in node.log}) == len(node.log), f"duplicate batch on {node.id}"
            self.check_epochs_match_log(node)
            # Everything below a replica's HW is committed: the true leader holds the same batches.
            committed = [batch for batch in node.log if batch.base_offset + batch.count <= state.high_watermark]
            assert leader.log[:len(committed)] == committed, f"{node.id} committed batches differ from the leader's"
            if state.role is Role.LEADER:
                key = (node.id, state.leader_epoch)
                assert state.high_watermark >= self.high_watermarks.get(key, 0), "leader HW went back"
                self.high_watermarks[key] = state.high_watermark
                for member in state.isr:
                    assert state.high_watermark <= self.nodes[member].log_end_offset, (node.id, member)
        for batch in self.acked.values():
            assert leader.log[leader.index_of(batch.base_offset)] == batch, f"acknowledged {batch} lost"

    @staticmethod
    def check_epochs_match_log(node: ModelNode) -> None:
        derived: list[tuple[int, int]] = []
        for batch in node.log:
            if not derived or derived[-1][0] != batch.epoch:
                derived.append((batch.epoch, batch.base_offset))
        entries = list(node.state.epochs.entries)
        if entries and entries[-1][1] == node.log_end_offset:
            entries.pop()  # an epoch whose leader has not appended yet
        assert entries == derived, (node.id, entries, derived)

    def converge(self) -> None:
        """Heal everything, then require every batch acknowledged and identical logs."""
        for replica_id in sorted(self.notices):
            self.deliver_notice(replica_id)
        self.connected = {replica_id: True for replica_id in ALL}
        for _ in range(400):
            self.now_ms += 10
            for node in self.nodes.values():
                self.fetch(node, 1_000)
            self.tick()
            for producer in self.producers:
                self.produce(producer, new_allowed=False)
            self.check_acks()
            self.check_invariants()
            if self.converged():
                break
        assert self.converged(), {node.id: node.state.describe() for node in self.nodes.values()}
        leader_log = self.nodes[self.leader].log
        assert sorted(self.acked.values(), key=lambda batch: batch.base_offset) == leader_log

    def converged(self) -> bool:
        leader = self.nodes[self.leader]
        return (
            all(sent.acked_offset is not None for producer in self.producers for sent in producer.batches)
            and all(node.log == leader.log for node in self.nodes.values())
            and all(node.state.high_watermark == leader.state.log_end_offset for node in self.nodes.values())
        )


@pytest.mark.parametrize("seed", range(100))
def test_random_histories_keep_acknowledged_batches_and_never_duplicate(seed):
    simulation = Simulation(seed)
    for _ in range(300):
        simulation.step()
    simulation.converge()
    assert simulation.acked, f"seed {seed} acknowledged nothing: the history exercises too little"
