"""Splits, merges and scaling of a running mafka4-mode topic, on a cluster with two read nodes (RR=2).

``mafka4 scale`` from 4 to 8 virtual partitions and back to 4, while a producer and a group
member run, keeps the counts and each key's order.

Checked against what producers had acknowledged: every acknowledged message is in exactly one
VP (over every VP, closed ones included) once, in the VP the layout names for its record, in
produce order per key within each VP; a reader that follows parent-before-child sees each
key's messages in produce order across the splits and merges; a read node restarted after a
split resumes its streams by the rule (not from offset 0) and loses or duplicates nothing.
"""

from __future__ import annotations

import collections
import subprocess
import sys
import time

import pytest
import ray

from mafka4 import errors
from mafka4.client.admin import Admin
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.metadata import keys
from mafka4.physical.topics import TopicStore
from mafka4.virtual.feed_plan import resume_point, served_vps
from mafka4.virtual.handles import read_node_handle
from mafka4.virtual.vp_records import NOTHING_APPLIED
from mafka4.virtual.vp_store import VirtualStore

from virtual_helpers import (
    FAULT_TEST_PAUSE_S, WAIT_S, Deliveries, Member, ProduceLoop, check_exactly_once, describe_vp, feed_of, topic_name,
)
from wait_helpers import wait_until


def layout_of(connection, topic: str):
    config = TopicStore(connection.store, connection.cluster).get(topic).config
    return VirtualStore(connection.store, connection.cluster).layout(topic, config.partitions, config.virtual_config())


def sealed_ends(connection, topic: str) -> dict[int, int]:
    states = VirtualStore(connection.store, connection.cluster).states(topic)
    return {vp: s.sealed_end_offset for vp, (s, _) in states.items() if s.sealed_end_offset is not None}


def read_in_order(connection, topic: str, expected: int) -> list:
    """Every message, read by one group-less reader from the beginning (parents before children)."""
    messages = []
    with VirtualConsumer(topic, connection=connection, from_beginning=True, metadata_max_age_ms=500) as consumer:
        deadline = time.monotonic() + WAIT_S
        while len(messages) < expected and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
        messages.extend(consumer.poll(timeout_ms=300))
    return messages


def check_per_key_order(messages) -> None:
    per_key = collections.defaultdict(list)
    for message in messages:
        per_key[message.key].append(int(message.value.rsplit(b":", 1)[1]))
    for key, numbers in per_key.items():
        assert numbers == sorted(numbers), f"key {key!r} out of produce order: {numbers[:20]}..."


def test_split_and_merge_while_producing_keep_every_message_once_and_in_order(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = topic_name("reshard")
    admin.create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=2, read_mode="mafka4")
    loop = ProduceLoop(connection, topic, pause_s=FAULT_TEST_PAUSE_S)
    try:
        loop.wait_for(400)
        epoch = admin.split_virtual_partition(topic, 0)
        assert (epoch.epoch, epoch.parents, epoch.children) == (1, (0,), (2, 3))
        assert all(offset > 0 for offset in epoch.cut), "the cut is where the held feeders stood"
        assert wait_until(lambda: 0 in sealed_ends(connection, topic)), "the parent was not sealed"
        loop.wait_for(len(loop.acknowledged) + 400)
        merged = admin.merge_virtual_partitions(topic, 3, 2)
        assert (merged.parents, merged.children) == ((2, 3), (4,))
        assert merged.ranges.range_of(4) == layout_of(connection, topic).epochs[0].ranges.range_of(0)
        loop.wait_for(len(loop.acknowledged) + 400)
    finally:
        acknowledged = loop.stop()
    logs = check_exactly_once(connection, topic, acknowledged)
    assert all(logs[vp] for vp in (0, 1, 2, 3, 4)), "every VP received records"
    assert not cluster_holds(connection, topic), "the reshards left no hold or lock key"
    messages = read_in_order(connection, topic, len(acknowledged))
    assert sorted(m.value for m in messages) == sorted(v for _, _, _, v in acknowledged)
    check_per_key_order(messages)


def cluster_holds(connection, topic: str) -> list:
    prefix = keys.topic_children_prefix(connection.cluster, topic)
    return [item.key for item in connection.store.get_prefix(prefix) if "/holds/" in item.key]


def test_a_read_node_restarted_after_a_split_resumes_by_the_rule_and_loses_nothing(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = topic_name("resume")
    admin.create_topic(topic, partitions=2, replication_factor=1, virtual_partitions=2, read_replicas=1, read_mode="mafka4")
    loop = ProduceLoop(connection, topic)
    try:
        loop.wait_for(1000)
    finally:
        first = loop.stop()
    epoch = admin.split_virtual_partition(topic, 1)
    assert wait_until(lambda: 1 in sealed_ends(connection, topic))
    # Nothing produced since the cut: the children hold nothing. The node leading child 2 dies
    # and comes back; its stream of partition 0 must resume by the rule, not from offset 0.
    states = VirtualStore(connection.store, connection.cluster).states(topic)
    node = states[epoch.children[0]][0].leader
    dead = read_node_handle(connection.cluster, node)
    dead_id = dead._actor_id.hex()
    ray.kill(dead)
    assert wait_until(lambda: (h := read_node_handle(connection.cluster, node)) is not None
                      and h._actor_id.hex() != dead_id, 180), "the read node was not restarted"
    assert wait_until(lambda: all(describe_vp(connection, topic, vp, node) is not None
                                  and describe_vp(connection, topic, vp, node)["role"] == "leader"
                                  for vp, (s, _) in VirtualStore(connection.store, connection.cluster).states(topic).items()
                                  if s.leader == node), 180), "its VPs do not lead again"
    layout = layout_of(connection, topic)
    led = {vp for vp, (s, _) in VirtualStore(connection.store, connection.cluster).states(topic).items() if s.leader == node}
    served = set(served_vps(layout, sealed_ends(connection, topic))) & led
    positions = {vp: describe_vp(connection, topic, vp, node)["last_applied"].get(0, NOTHING_APPLIED) for vp in served}
    expected = resume_point(layout, 0, positions).next_offset
    # A child holds nothing yet: its records of partition 0 start at the cut, so it must not pull
    # the stream back further; an unsplit VP the node also leads resumes after its last record.
    others_next = [positions[vp] + 1 for vp in served if vp not in epoch.children]
    assert expected == min([epoch.cut[0], *others_next]) > 0, "a child of the split pulls the stream back below the cut"
    # The stream resumes at the rule's offset, then reads on (the records after it may belong to no VP it feeds).
    assert wait_until(lambda: (feed_of(connection, topic, 0, node) or {}).get("resumed_at") == expected)
    loop = ProduceLoop(connection, topic, after=first)
    try:
        loop.wait_for(1000)
    finally:
        second = loop.stop()
    check_exactly_once(connection, topic, first + second)


def mafka4_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mafka4.cli", *args], capture_output=True, timeout=timeout)


def test_bad_reshard_input_is_refused_with_the_fix(read_cluster):
    connection = read_cluster
    admin = Admin(connection)
    topic = topic_name("bad")
    metadata = admin.create_topic(topic, partitions=1, virtual_partitions=2, read_replicas=2, read_mode="mafka4",
                                  virtual_partitions_max=4)
    with pytest.raises(errors.InvalidReshard, match="virtual_partitions=0 is out of range"):
        admin.scale(topic, 0)
    with pytest.raises(errors.InvalidReshard, match="virtual_partitions=5 is out of range.*virtual_partitions_max=4"):
        admin.scale(topic, 5)
    with pytest.raises(errors.UnknownVirtualPartition, match="virtual partition 9 does not exist"):
        admin.split_virtual_partition(topic, 9)
    with pytest.raises(errors.InvalidReshard, match="VP 0 cannot be merged with itself"):
        admin.merge_virtual_partitions(topic, 0, 0)
    with pytest.raises(errors.NotEnoughReadNodes, match="needs 3 live read nodes, 2 are live"):
        admin.create_topic(topic_name("wide"), partitions=1, read_replicas=3, read_mode="mafka4")
    full = topic_name("full")
    admin.create_topic(full, partitions=1, virtual_partitions=2, read_replicas=1, read_mode="mafka4",
                       virtual_partitions_max=2)
    with pytest.raises(errors.InvalidReshard, match="would make 3 virtual partitions, more than virtual_partitions_max=2"):
        admin.split_virtual_partition(full, 0)
    with pytest.raises(errors.UnknownTopic, match="does not exist"):
        admin.split_virtual_partition(topic_name("nosuch"), 0)
    classic = topic_name("m3")
    admin.create_topic(classic, partitions=1, read_mode="mafka3")
    with pytest.raises(errors.WrongReadMode, match="read_mode='mafka3'.*no virtual partitions"):
        admin.split_virtual_partition(classic, 0)
    assert layout_of(connection, topic).current.epoch == 0, "a refused reshard changes nothing"
    assert not connection.store.get_prefix(keys.feeder_holds_of_topic(connection.cluster, topic)), "no hold left"
    assert [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if topic in a["name"]] == \
        [f"{connection.cluster}/{topic}/0/{metadata.partitions[0].leader}"], "a VP is a log in a read node, not an actor"
    for node in ("r0", "r1"):
        roles = ray.get(read_node_handle(connection.cluster, node).roles.remote(topic), timeout=WAIT_S)
        assert set(roles) == {0, 1}, f"{node} hosts both VPs and nothing else"


def test_mafka4_scale_from_4_to_8_and_back_while_producing_keeps_counts_and_per_key_order(read_cluster):
    connection = read_cluster
    topic, group = topic_name("scale"), topic_name("g")
    created = mafka4_cli("topic", "create", topic, "--partitions", "2", "--replication-factor", "2",
                         "--virtual-partitions", "4", "--read-replicas", "2")
    assert created.returncode == 0 and b"read mode mafka4, 4 virtual partition(s)" in created.stdout, created.stderr
    deliveries = Deliveries()
    loop = ProduceLoop(connection, topic, pause_s=FAULT_TEST_PAUSE_S)
    member = Member(connection, topic, group, "m0", deliveries, auto_commit_interval_ms=1000)
    try:
        loop.wait_for(500)
        up = mafka4_cli("scale", topic, "--virtual-partitions", "8")
        assert up.returncode == 0, up.stderr
        assert up.stdout.count(b"split epoch") == 4 and b"has 8 virtual partition(s)" in up.stdout
        assert len(layout_of(connection, topic).current.ranges) == 8
        loop.wait_for(len(loop.acknowledged) + 500)
        down = mafka4_cli("scale", topic, "--virtual-partitions", "4")
        assert down.returncode == 0, down.stderr
        layout = layout_of(connection, topic)
        assert layout.current.ranges.ranges == layout.epochs[0].ranges.ranges, "back to the four even ranges"
        loop.wait_for(len(loop.acknowledged) + 500)
    finally:
        acknowledged = loop.stop()
    try:
        deliveries.wait_for_all(acknowledged, 120)
    finally:
        member.leave()
    deliveries.check_per_key_order()
    logs = check_exactly_once(connection, topic, acknowledged)
    assert len(logs) == 4 + 8 + 4, "every VP ever opened holds its records"
    described = mafka4_cli("group", "describe", group)
    assert described.returncode == 0 and b"status" in described.stdout and b"active" in described.stdout, described.stderr
    topic_described = mafka4_cli("topic", "describe", topic)
    assert topic_described.returncode == 0 and topic_described.stdout.count(b"sealed") == 12, topic_described.stdout


def test_cli_refuses_bad_scaling_in_one_line_with_the_fix(read_cluster):
    # Every refusal is tested through Admin above; the CLI's part is the one-line message with the fix.
    admin = Admin(read_cluster)
    topic, classic = topic_name("clibad"), topic_name("m3")
    admin.create_topic(topic, partitions=1, virtual_partitions=2, read_replicas=2, read_mode="mafka4",
                       virtual_partitions_max=4)
    admin.create_topic(classic, partitions=1, read_mode="mafka3")
    refused = mafka4_cli("scale", topic, "--virtual-partitions", "5")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(b"mafka4: error: virtual_partitions=5 is out of range: a topic keeps 1 to "
                                     b"virtual_partitions_max=4"), refused.stderr
    assert refused.stderr.count(b"\n") == 1
    wrong = mafka4_cli("scale", classic, "--virtual-partitions", "2")
    assert wrong.returncode == 2 and b"read_mode='mafka3'" in wrong.stderr and b"--read-mode mafka4" in wrong.stderr
    assert wrong.stderr.count(b"\n") == 1
