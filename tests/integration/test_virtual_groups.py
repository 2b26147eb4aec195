"""Mafka4-mode consumer groups on a real cluster with two read nodes (RR=2).

Members own virtual partitions; a joiner takes a free VP, a handed-over VP or a child of a
split of the busiest VP; a leaver's VPs move to the others after its last commit. Checked
against what the producer had acknowledged: every acknowledged message is consumed at least
once, each key's messages are first seen in produce order (across handovers and splits), and
no physical record is in two VPs. The full-size runs (50,000 messages; 256 VPs joined to 16
members, about 4 minutes here) are marked slow.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.group_admin import GroupAdmin
from mafka4.coordinator.groups.vp_groups import VirtualGroupStore, VpOffset
from mafka4.errors import GroupNotEmpty
from mafka4.physical.topics import TopicStore
from mafka4.virtual.vp_store import VirtualStore

from virtual_helpers import Deliveries, Member, ProduceLoop, check_exactly_once, topic_name
from wait_helpers import wait_until


def active_vps(connection, topic: str) -> tuple[int, ...]:
    config = TopicStore(connection.store, connection.cluster).get(topic).config
    layout = VirtualStore(connection.store, connection.cluster).layout(topic, config.partitions, config.virtual_config())
    return layout.current.ranges.vp_ids


def run_joins_and_leaves(connection, messages: int, members_max: int, leavers: int, join_interval_s: float,
                         virtual_partitions: int = 4) -> None:
    admin = Admin(connection)
    topic, group = topic_name("vgroup"), topic_name("g")
    admin.create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=virtual_partitions, read_replicas=2,
                       read_mode="mafka4")
    deliveries = Deliveries()
    settings = dict(auto_commit_interval_ms=1000, member_lease_ttl_s=6)
    # Paced so that the joins happen while the producer runs.
    duration_s = join_interval_s * (members_max + leavers + 2)
    loop = ProduceLoop(connection, topic, messages_max=messages, pause_s=max(100 * duration_s / messages, 0.001))
    members: list[Member] = []
    try:
        for index in range(members_max):
            member = Member(connection, topic, group, f"m{index}", deliveries, **settings)
            members.append(member)
            # Each joiner gets capacity (a free VP, a handover or a split) and reads, while the others go on.
            assert wait_until(lambda: deliveries.by_member(member.name) > 0 or loop.done, 120), \
                f"{member.name} never received a message"
            time.sleep(join_interval_s)
        assert len(active_vps(connection, topic)) >= members_max, "the VPs were split up to one per member"
        for member in members[:leavers]:
            member.leave()
            time.sleep(join_interval_s)
        assert wait_until(lambda: loop.done, 600), "the producer did not finish"
        acknowledged = loop.stop()
        deliveries.wait_for_all(acknowledged, 300)
        with GroupAdmin(connection) as groups:
            described = groups.describe_group(group)
        assert {row.vp for row in described.virtual_partitions} >= set(active_vps(connection, topic))
        assert len(described.members) == members_max - leavers
    finally:
        loop.stop()
        for member in members[leavers:]:
            member.leave()
    assert len(acknowledged) == messages
    deliveries.check_per_key_order()
    check_exactly_once(connection, topic, acknowledged)


def test_members_joining_one_by_one_split_vps_and_leavers_hand_theirs_over(read_cluster):
    run_joins_and_leaves(read_cluster, messages=12_000, members_max=8, leavers=2, join_interval_s=2)


@pytest.mark.slow
def test_fifty_thousand_messages_while_eight_members_join_and_two_leave(read_cluster):
    run_joins_and_leaves(read_cluster, messages=50_000, members_max=8, leavers=2, join_interval_s=4)


@pytest.mark.slow
def test_256_vps_on_two_read_nodes_while_members_join_to_16_and_leave_to_4(read_cluster):
    """256 VPs with two replicas each are 512 logs in two read node processes; members join one by
    one to 16 (each takes VPs handed over) and leave down to 4 while 50,000 keyed messages flow."""
    run_joins_and_leaves(read_cluster, messages=50_000, members_max=16, leavers=12, join_interval_s=2,
                         virtual_partitions=256)


def test_256_vps_on_two_read_nodes_while_members_join_to_4_and_leave_to_2(read_cluster):
    """The default suite's share of the run above: the same 512 logs, fewer members and messages."""
    run_joins_and_leaves(read_cluster, messages=4_000, members_max=4, leavers=2, join_interval_s=1,
                         virtual_partitions=256)


def consume_all(connection, topic: str, group: str, expected: int) -> list:
    """What one member of ``group`` reads until it has ``expected`` messages (and a little more); it commits on close."""
    messages = []
    with Consumer(topic, group=group, connection=connection, from_beginning=True) as consumer:
        deadline = time.monotonic() + 120
        while len(messages) < expected and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
        messages.extend(consumer.poll(timeout_ms=300))
    return messages


def test_reset_offsets_of_a_mafka4_group_moves_every_vp_either_way_and_needs_an_empty_group(read_cluster):
    admin = Admin(read_cluster)
    topic, group = topic_name("vreset"), topic_name("g")
    admin.create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=2, read_replicas=1,
                       read_mode="mafka4")
    loop = ProduceLoop(read_cluster, topic, messages_max=60, pause_s=0)
    assert wait_until(lambda: loop.done, 120)
    acknowledged = loop.stop()
    assert len(acknowledged) == 60
    assert len(consume_all(read_cluster, topic, group, 60)) == 60
    with GroupAdmin(read_cluster) as groups:
        ends = {row.vp: row.high_watermark for row in groups.describe_group(group).virtual_partitions}
        assert sum(ends.values()) == 60
        with Consumer(topic, group=group, connection=read_cluster) as member:
            member.poll(timeout_ms=500)  # joined: the group is not empty
            with pytest.raises(GroupNotEmpty, match="close those consumers first"):
                groups.reset_offsets(group, topic, "earliest")
        assert groups.reset_offsets(group, topic, "earliest") == {vp: (end, 0) for vp, end in ends.items()}
        assert {row.vp: row.committed_offset for row in groups.describe_group(group).virtual_partitions} == dict.fromkeys(ends, 0)
    again = consume_all(read_cluster, topic, group, 60)
    assert sorted(m.value for m in again) == sorted(value for _, _, _, value in acknowledged)
    with GroupAdmin(read_cluster) as groups:
        groups.reset_offsets(group, topic, 0)  # a time before every message: the log start, as "earliest"
        assert groups.describe_group(group).total_lag == 60
    cli = subprocess.run([sys.executable, "-m", "mafka4.cli", "group", "reset-offsets", group, "--topic", topic,
                          "--to-latest"], capture_output=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    assert sorted(cli.stdout.decode().splitlines()) == [f"{topic} vp {vp}: 0 -> {end}" for vp, end in sorted(ends.items())]
    with GroupAdmin(read_cluster) as groups:
        assert groups.describe_group(group).total_lag == 0


def test_a_late_commit_cannot_move_an_offset_back_nor_can_a_seek_back(read_cluster, monkeypatch):
    """A commit sent to a stopped etcd member is applied when it wakes up, possibly after a newer
    commit went through another member (chaos seed 102 met this). The late one was built on the
    offsets read before the newer one, so it finds the offset key changed and writes nothing."""
    topic, group = topic_name("vlate"), topic_name("g")
    Admin(read_cluster).create_topic(topic, partitions=1, replication_factor=1, virtual_partitions=1,
                                     read_replicas=1, read_mode="mafka4")
    loop = ProduceLoop(read_cluster, topic, messages_max=40, pause_s=0)
    assert wait_until(lambda: loop.done, 120)
    assert len(loop.stop()) == 40
    late = VirtualGroupStore(read_cluster.store.endpoint, read_cluster.cluster)
    try:
        with Consumer(topic, group=group, connection=read_cluster, from_beginning=True,
                      auto_commit_interval_ms=None) as consumer:
            read = []
            assert wait_until(lambda: read.extend(consumer.poll(timeout_ms=500)) or len(read) >= 40, 120)
            (vp,) = consumer.assignment()
            consumer.seek(vp, 10)
            assert consumer.commit() == {vp: 10}
            seen_before = late._committed(group, topic)  # what the late commit read
            consumer.seek(vp, 40)
            assert consumer.commit() == {vp: 40}
            monkeypatch.setattr(late, "_committed", lambda *_: seen_before)
            assert late.commit(group, consumer.member_id, topic, {vp: VpOffset(20, 40)}) == (set(), set()), \
                "the late commit was written over the newer one"
            consumer.seek(vp, 5)
            assert consumer.commit() == {}, "a position behind the committed offset is not committed"
            with GroupAdmin(read_cluster) as groups:
                assert [row.committed_offset for row in groups.describe_group(group).virtual_partitions] == [40]
    finally:
        late.close()


def test_a_member_that_stops_polling_stays_while_nothing_changes_and_leaves_after_a_join_waits_out_its_timeout(
        read_cluster):
    """The rebalance timeout runs from a change that asks the member to act, as in Mafka3 mode: not from
    its last poll (which dropped a member of a drain that waited a minute for a quiet machine)."""
    topic, group = topic_name("vslow"), topic_name("g")
    Admin(read_cluster).create_topic(topic, partitions=2, replication_factor=2, virtual_partitions=2, read_replicas=1,
                                     read_mode="mafka4")
    # Its lease thread looks every 2/3 s; once it polls again, each poll clears the clock well within 1.5 s.
    stuck = Consumer(topic, group=group, connection=read_cluster, member_lease_ttl_s=2, rebalance_timeout_ms=1500)
    try:
        assert wait_until(lambda: stuck.poll(timeout_ms=100) == [] and stuck.assignment() == [0, 1], 60), \
            "gave up waiting for the only member to own both VPs"
        time.sleep(4.5)  # three timeouts without a poll, and nothing changes
        with GroupAdmin(read_cluster) as groups:
            assert [m.member_id for m in groups.describe_group(group).members] == [stuck.member_id], \
                "a member that is not polling while nothing changes stays in the group"
        deliveries = Deliveries()
        joiner = Member(read_cluster, topic, group, "joiner", deliveries)
        assert wait_until(lambda: joiner.consumer.assignment() == [0, 1], 60), \
            "gave up waiting for the stuck member to leave and the joiner to take over"
        assert wait_until(lambda: stuck.poll(timeout_ms=100) == [] and len(stuck.assignment()) == 1, 60), \
            "gave up waiting for the stuck member to rejoin"
        joiner.leave()
    finally:
        stuck.close()

