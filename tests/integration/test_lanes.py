"""Lanes on a real cluster (issue 40): one topic's physical partitions carry a trunk and three lanes.

A group's trunk member reads the trunk and the swimlanes nobody in the group reads; a lane member
joining mid-stream takes its lane over after the trunk member's commit; an environment lane
(fallback "none") keeps its messages until its own member arrives. Checked against what the
producer had acknowledged: every message is consumed, only by members that may read its lane, and
each key's messages within a lane are first seen in produce order. A mafka3-mode topic keeps a lane
as a topic of its own. Bad input gets errors that name the problem.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest

from mafka4.batch_payload import LANE_HEADER
from mafka4.client.admin import Admin
from mafka4.client.cluster_access import ClusterAccess, cluster_access
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.topic_admin import describe_topic, open_lane
from mafka4.errors import InvalidConfig, InvalidLaneName, LanesExhausted, WrongReadMode
from mafka4.metadata import keys
from mafka4.metadata.endpoints import parse_endpoints

from virtual_helpers import KEYS, WAIT_S, topic_name
from wait_helpers import wait_until

TRUNK, SWIM_A, SWIM_B, STAGE = "", "swim-a", "swim-b", "env-stage"
LANES = (TRUNK, SWIM_A, SWIM_B, STAGE)


class LaneProducer:
    """Keyed messages "<lane>|<key>:<n>" (n counts per lane and key), round robin over ``LANES``, in a thread."""

    def __init__(self, connection, topic: str, messages: int, pause_s: float):
        self.acknowledged: list[tuple[str, bytes, int]] = []  # (lane, key, n)
        self.failures: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(connection, topic, messages, pause_s), daemon=True)
        self._thread.start()

    def _run(self, connection, topic: str, messages: int, pause_s: float) -> None:
        counts: collections.Counter = collections.Counter()
        with Producer(topic, connection=connection, acks="all", linger_ms=2) as producer:
            for sent in range(messages):
                lane, key = LANES[sent % len(LANES)], KEYS[(sent // len(LANES)) % len(KEYS)]
                n = counts[lane, key]
                counts[lane, key] += 1
                producer.send(b"%s|%s:%d" % (lane.encode(), key, n), key=key, lane=lane or None).add_callback(
                    lambda md, err, lane=lane, key=key, n=n: self.acknowledged.append((lane, key, n))
                    if err is None else self.failures.append(err))
                if sent % 100 == 99:
                    producer.flush()
                    time.sleep(pause_s)

    def sent_in(self, lane: str) -> int:
        return sum(1 for acked_lane, _, _ in list(self.acknowledged) if acked_lane == lane)

    def stop(self) -> list[tuple[str, bytes, int]]:
        self._thread.join(timeout=600)
        assert not self._thread.is_alive() and not self.failures, self.failures[:3]
        return list(self.acknowledged)


class LaneMember:
    """A group member polling in a thread; records (sequence, lane, key, n) of every message, and
    checks that the lane header agrees with the lane the value names."""

    sequence = 0
    lock = threading.Lock()

    def __init__(self, connection, topic: str, group: str, lane: str | None, received: list):
        self.lane = lane
        self.consumer = Consumer(topic, group=group, connection=connection, from_beginning=True, lane=lane,
                                 auto_commit_interval_ms=500, member_lease_ttl_s=6)
        self.seen: list[tuple[int, str, bytes, int]] = []
        self._received = received
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self.consumer.poll(timeout_ms=200):
                    lane, _, rest = message.value.partition(b"|")
                    key, _, n = rest.rpartition(b":")
                    header = dict(message.headers or ()).get(LANE_HEADER, b"")
                    assert header == lane, f"lane header {header!r} on a message of lane {lane!r}"
                    with LaneMember.lock:
                        LaneMember.sequence += 1
                        row = (LaneMember.sequence, lane.decode(), key, int(n))
                    self.seen.append(row)
                    self._received.append(row)
        except BaseException as error:  # the test thread re-raises it
            self.error = error
        finally:
            self.consumer.close()

    def lanes_seen(self) -> set[str]:
        return {lane for _, lane, _, _ in self.seen}

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive() and self.error is None, self.error


def check_per_key_order_within_lanes(received: list) -> None:
    """Each (lane, key)'s messages are first seen in produce order (a repeat after a handover is allowed)."""
    highest: dict[tuple[str, bytes], int] = {}
    for sequence, lane, key, n in sorted(received):
        if n > highest.get((lane, key), -1):
            assert n == highest.get((lane, key), -1) + 1, (
                f"lane {lane!r} key {key!r}: {n} first seen after {highest.get((lane, key))} (delivery {sequence})")
            highest[lane, key] = n


def test_lanes_swimlane_fallback_takeover_and_environment_wait(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic, group = topic_name("lanes"), topic_name("g")
    admin.create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=2, read_replicas=2,
                       read_mode="mafka4")
    assert admin.open_lane(topic, STAGE, fallback="none").lane_id == 1  # an environment: opened before its traffic
    with pytest.raises(InvalidConfig, match="fixed when it opens"):
        admin.open_lane(topic, STAGE, fallback="trunk")
    received: list = []
    members: list[LaneMember] = []
    producer = LaneProducer(connection, topic, messages=4_000, pause_s=0.05)
    try:
        trunk = LaneMember(connection, topic, group, None, received)
        members.append(trunk)
        assert wait_until(lambda: producer.sent_in(SWIM_B) >= 200, 120), "the producer did not get going"
        assert wait_until(lambda: {TRUNK, SWIM_A, SWIM_B} <= trunk.lanes_seen(), 120), trunk.lanes_seen()
        swim_b = LaneMember(connection, topic, group, SWIM_B, received)  # joins mid-stream, takes its lane over
        members.append(swim_b)
        assert wait_until(lambda: swim_b.seen, 120), "the swimlane's member never received a message"
        assert STAGE not in trunk.lanes_seen(), "an environment lane (fallback none) was read by the trunk member"
        stage = LaneMember(connection, topic, group, STAGE, received)
        members.append(stage)
        acknowledged = producer.stop()
        expected = {(lane, key, n) for lane, key, n in acknowledged}
        assert wait_until(lambda: expected <= {row[1:] for row in received}, 300), \
            f"{len(expected - {row[1:] for row in received})} acknowledged messages never consumed"
        # The trunk member released swim-b's VP (commit, then release, in its poll's sync) before swim-b's
        # member could claim it: once that member has a message, the trunk member delivers none of swim-b.
        handed_over_at = min(sequence for sequence, *_ in swim_b.seen)
        after = [row for row in trunk.seen if row[1] == SWIM_B and row[0] > handed_over_at]
        assert not after, f"the trunk member read swim-b after the handover: {after[:3]}"
    finally:
        for member in members:
            member.leave()
    assert trunk.lanes_seen() <= {TRUNK, SWIM_A, SWIM_B}
    assert swim_b.lanes_seen() == {SWIM_B} and stage.lanes_seen() == {STAGE}
    check_per_key_order_within_lanes(received)
    described = describe_topic(topic, connection)
    assert [row["lane"] for row in described["lanes"]] == [STAGE, SWIM_A, SWIM_B], "in opening order"
    assert {row["lane"]: row["fallback"] for row in described["lanes"]}[STAGE] == "none"
    assert described["config"].partitions == 2, "lanes add no physical partition"


def test_a_mafka3_topic_keeps_each_lane_as_a_topic_of_its_own(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = topic_name("lanes3")
    admin.create_topic(topic, partitions=2, replication_factor=1, read_mode="mafka3")
    with Producer(topic, connection=connection, acks="all") as producer:
        for n in range(20):
            producer.send(b"swim:%d" % n, key=b"k", lane="swim")
        producer.send(b"trunk", key=b"k")
    assert f"{topic}.swim" in admin.list_topics()
    with pytest.raises(WrongReadMode, match=f"{topic}.swim"):
        Consumer(topic, group="g", connection=connection, lane="swim")
    with Consumer(f"{topic}.swim", connection=connection, from_beginning=True) as consumer:
        values = []
        assert wait_until(lambda: values.extend(m.value for m in consumer.poll(timeout_ms=200)) or len(values) >= 20,
                          WAIT_S)
    assert values == [b"swim:%d" % n for n in range(20)]

    # A cluster without read nodes has only its replicas' ports, which serve no admin API (LANE_OPEN):
    # a producer reaching only them still sends to a lane whose topic exists.
    replicas_only = ClusterAccess(tuple(parse_endpoints(item.value["client"], what=item.key)[0]
                                        for item in connection.store.get_prefix(keys.replicas_prefix(connection.cluster))
                                        if isinstance(item.value, dict) and item.value.get("client")),
                                  cluster_access(connection).credential)
    with Producer(topic, connection=replicas_only, acks="all") as producer:
        assert producer.send_sync(b"swim:replicas", key=b"k", lane="swim").partition is not None


def test_bad_lanes_are_refused_with_errors_that_name_the_problem(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = topic_name("badlanes")
    admin.create_topic(topic, partitions=1, replication_factor=1, read_mode="mafka4", lanes_max=1)
    with Producer(topic, connection=connection) as producer:
        with pytest.raises(InvalidLaneName, match="contains"):
            producer.send(b"x", lane="no spaces")
        producer.send_sync(b"x", lane="first")
        sent = producer.send_many([b"y", b"z"], key=b"k", lane="first").result(WAIT_S)
        assert len(sent) == 2
        with pytest.raises(LanesExhausted, match="lanes_max=1"):
            producer.send(b"x", lane="second")
    with pytest.raises(InvalidLaneName):
        open_lane(topic, "../etc", where=connection)
    with pytest.raises(InvalidConfig, match="fallback"):
        admin.open_lane(topic, "first", fallback="sometimes")


@pytest.mark.parametrize("lane_order", ["strict", "weighted"])
def test_a_reader_of_two_lanes_serves_the_higher_priority_first_or_by_weight(read_cluster, lane_order):
    connection = read_cluster
    admin = Admin(connection)
    topic = topic_name(f"prio-{lane_order}")
    admin.create_topic(topic, partitions=1, replication_factor=1, virtual_partitions=1, read_mode="mafka4")
    admin.open_lane(topic, "urgent", priority=9)
    count = 2_000
    with Producer(topic, connection=connection, acks="all", linger_ms=5) as producer:
        for n in range(count):  # a backlog in both, interleaved
            producer.send(b"trunk:%d" % n, key=b"k%d" % (n % 10))
            producer.send(b"urgent:%d" % n, key=b"k%d" % (n % 10), lane="urgent")
    order: list[str] = []
    # A trunk reader ("urgent" falls back to it), with polls small enough for the lanes' shares to matter.
    with Consumer(topic, group=topic_name("g"), connection=connection, from_beginning=True,
                  lane_order=lane_order, poll_messages_max=100) as consumer:
        assert wait_until(lambda: order.extend(m.lane for m in consumer.poll(timeout_ms=200)) or
                          len(order) >= 2 * count, 120), f"read {len(order)} of {2 * count}"
    first_half = order[:count]
    urgent_share = first_half.count("urgent") / len(first_half)
    print(f"lane_order={lane_order}: urgent's share of the first {count} messages read: {urgent_share:.3f}")
    if lane_order == "strict":
        assert first_half == ["urgent"] * count, "the higher lane is drained first"
    else:  # weighted by priority + 1: 10 to 1, and the trunk is never starved
        assert 0.75 <= urgent_share < 1.0, urgent_share
