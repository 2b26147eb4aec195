"""A read node's answers to consumers (``consumer_reads``) over real ``HostedVp`` replicas: one
answer per read in order, a byte budget shared in that order, and errors that stay with their VP.
No Ray."""

from __future__ import annotations

import pytest

from mafka4.errors import ReadReplicaNotInSync
from mafka4.limits import END_TO_END_LATENCY_BUCKETS_S
from mafka4.limits.servers import LogConfig
from mafka4.metrics.histogram import LatencyHistogram
from mafka4.risr.state import RisrConfig
from mafka4.virtual import consumer_reads
from mafka4.virtual.consumer_reads import ConsumerRead
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.vp_records import SourcedRecord

NODE = "n0"
LOG_CONFIG = LogConfig(segment_bytes_max=4096, index_interval_bytes=512, flush_interval_ms=None)
LEADERS = tuple(VpId("orders", vp) for vp in range(2))
FOLLOWER, ABSENT = VpId("orders", 2), VpId("orders", 3)
BATCH_RECORDS = 4


@pytest.fixture
def hosted(tmp_path):
    """Two VP leaders with two batches each (records at timestamps 1000 + offset), and a
    follower that has not caught up (it may not serve reads)."""
    replicas = {}
    for vp_id in (*LEADERS, FOLLOWER):
        replicas[vp_id] = HostedVp(vp_id, NODE, tmp_path / str(vp_id.vp), LOG_CONFIG,
                                   RisrConfig(read_replica_lag_ms_max=1_000), 0, lambda replica, ready: None)
    for vp_id in LEADERS:
        leader = replicas[vp_id]
        leader.become_leader(0, (NODE,), (NODE,), now_ms=0)
        for first in (0, BATCH_RECORDS):
            batch = [SourcedRecord(0, offset, offset, 1_000 + offset, None, b"x" * 100)
                     for offset in range(first, first + BATCH_RECORDS)]
            assert leader.feed(0, batch, now_ms=0) == BATCH_RECORDS
    replicas[FOLLOWER].become_follower(0, "n1")
    yield replicas
    for replica in replicas.values():
        replica.close()


def test_every_read_gets_its_answer_in_order_and_an_error_stays_with_its_vp(hosted):
    reads = [ConsumerRead(ABSENT, 0), ConsumerRead(LEADERS[0], 0), ConsumerRead(FOLLOWER, 0),
             ConsumerRead(LEADERS[1], 2 * BATCH_RECORDS)]
    answers = consumer_reads.read_all(reads, 1 << 20, hosted.get, NODE, now_ms=10)
    assert isinstance(answers[0].error, ReadReplicaNotInSync) and "not hosted on read node n0" in str(answers[0].error)
    assert answers[1].error is None and answers[1].read.high_watermark == 2 * BATCH_RECORDS and answers[1].read.data
    assert isinstance(answers[2].error, ReadReplicaNotInSync)
    assert answers[3].error is None and answers[3].read.data == b""  # at the HW: nothing yet


def test_the_byte_budget_is_shared_in_the_order_of_the_reads_and_a_first_batch_always_fits(hosted):
    reads = [ConsumerRead(vp_id, 0) for vp_id in LEADERS]
    whole = consumer_reads.read_all(reads, 1 << 20, hosted.get, NODE, now_ms=10)
    one_batch = consumer_reads.read_all(reads, 1, hosted.get, NODE, now_ms=10)
    assert 0 < len(one_batch[0].read.data) < len(whole[0].read.data)  # one whole batch past a budget of 1 byte
    assert one_batch[1].read.data == b""  # the budget is spent


def test_a_read_answers_at_once_when_it_has_data_or_an_error_and_waits_at_the_high_watermark(hosted):
    assert not consumer_reads.any_readable([ConsumerRead(LEADERS[0], 2 * BATCH_RECORDS)], hosted.get, now_ms=10)
    assert consumer_reads.any_readable([ConsumerRead(LEADERS[0], 0)], hosted.get, now_ms=10)
    assert consumer_reads.any_readable([ConsumerRead(ABSENT, 0)], hosted.get, now_ms=10)


def test_offsets_are_listed_and_found_by_time_per_vp_with_an_error_for_a_vp_not_hosted(hosted):
    listed = consumer_reads.list_offsets([LEADERS[0], ABSENT, FOLLOWER], hosted.get, NODE, now_ms=10)
    assert listed[0] == (0, 2 * BATCH_RECORDS)
    assert isinstance(listed[1], ReadReplicaNotInSync) and isinstance(listed[2], ReadReplicaNotInSync)
    found = consumer_reads.offsets_for_time([LEADERS[0], ABSENT], 1_000 + BATCH_RECORDS, hosted.get, NODE)
    assert found[0] == BATCH_RECORDS and isinstance(found[1], ReadReplicaNotInSync)
    assert consumer_reads.offsets_for_time([LEADERS[0]], 5_000, hosted.get, NODE) == [None]


def test_lag_positions_give_the_hw_and_the_timestamp_a_group_lags_from(hosted):
    """What ``group describe`` asks a VP's leader for its lag in time (``metrics.group_lag``)."""
    vp_ids = [LEADERS[0], LEADERS[1], FOLLOWER, ABSENT]
    answers = consumer_reads.lag_positions(vp_ids, {0: 5, 1: 2 * BATCH_RECORDS}, hosted.get, NODE, now_ms=10)
    assert answers[0] == (2 * BATCH_RECORDS, 1_000 + BATCH_RECORDS), "offset 5 is in the batch starting at 4"
    assert answers[1] == (2 * BATCH_RECORDS, None), "caught up: nothing to lag from"
    assert isinstance(answers[2], ReadReplicaNotInSync) and isinstance(answers[3], ReadReplicaNotInSync)
    assert consumer_reads.lag_positions([LEADERS[0]], {}, hosted.get, NODE, now_ms=10) == [(2 * BATCH_RECORDS, None)], \
        "nothing committed"


def test_each_batch_served_is_observed_once_per_fetch_in_its_topic_s_end_to_end_latency(hosted):
    """One observation per VP batch (its newest record's timestamp, from the header), none for
    errors or empty reads; a re-read observes again."""
    reads = [ConsumerRead(LEADERS[0], 0), ConsumerRead(FOLLOWER, 0), ConsumerRead(LEADERS[1], 2 * BATCH_RECORDS)]
    latency = {}

    def of_topic(topic: str) -> LatencyHistogram:
        return latency.setdefault(topic, LatencyHistogram(END_TO_END_LATENCY_BUCKETS_S))

    for _ in range(2):
        answers = consumer_reads.read_all(reads, 1 << 20, hosted.get, NODE, now_ms=2_000)
        consumer_reads.observe_end_to_end(reads, answers, of_topic, now_ms=2_000)
    [orders] = latency.values()
    assert list(latency) == ["orders"]
    assert orders.count == 4, "two batches of LEADERS[0], read twice; the follower's error and the read at the HW: none"
    # The batches' newest records are stamped 1003 and 1007: 997 ms and 993 ms old at 2000.
    assert abs(orders.sum_s - 2 * (0.997 + 0.993)) < 1e-9
