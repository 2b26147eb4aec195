"""Consumer groups in Mafka3 mode on the real cluster: membership churn, ownership, offsets.

Consumers run in threads of this process (one etcd client and lease each), except the one
that crashes, which is a separate process killed with SIGKILL. Committed offsets and owner
keys are recorded by watching etcd, so the checks see every change, not samples.
"""

from __future__ import annotations

import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import pytest

from mafka4 import errors
from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.group_admin import GroupAdmin
from mafka4.client.producer import Producer
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore

from wait_helpers import wait_until

WAIT_S_MAX = 90  # bound of every wait: far above what a loaded machine needs


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def mafka4(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mafka4.cli", *args], capture_output=True, timeout=timeout)


class KeyHistory:
    """Every put and delete under a prefix, in etcd revision order, seen through one watch."""

    def __init__(self, connection, prefix: str):
        self._store = MetadataStore(connection.store.endpoint)
        self.events: list[tuple[str, object]] = []
        self.broken = False
        self._watch = self._store.watch_prefix(prefix, self._record, self._on_broken)

    def _record(self, events) -> None:
        self.events.extend((event.key, event.value) for event in events)

    def _on_broken(self) -> None:
        self.broken = True

    def close(self) -> None:
        self._store.cancel_watch(self._watch)
        self._store.close()
        assert not self.broken, "the watch ended early: the history is incomplete"


class ConsumerThread:
    """Polls one group member in a thread and keeps every message it returned."""

    def __init__(self, topic: str, group: str, connection, **settings):
        self.consumer = Consumer(topic, group=group, connection=connection, from_beginning=True, **settings)
        self.messages: list = []
        self.assignment: list[int] = []  # as of its last poll (read by the test thread)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.messages.extend(self.consumer.poll(timeout_ms=100))
            self.assignment = self.consumer.assignment()

    def close(self) -> None:
        """Stop polling, then leave the group (close commits what was returned)."""
        self._stop.set()
        self._thread.join()
        self.consumer.close()


def produce_paced(topic: str, connection, count: int, per_s: int, produced: list[int]) -> None:
    with Producer(topic, connection=connection, linger_ms=5) as producer:
        start = time.monotonic()
        for number in range(count):
            producer.send(str(number).encode(), key=str(number).encode())
            produced[0] = number + 1
            ahead_s = number / per_s - (time.monotonic() - start)
            if ahead_s > 0:
                time.sleep(ahead_s)


def assert_offsets_never_go_back(history: KeyHistory) -> int:
    last: dict[str, int] = {}
    for key, value in history.events:
        assert value is not None, f"offset key {key} was deleted"
        assert value["offset"] >= last.get(key, 0), f"{key} went back from {last[key]} to {value['offset']}"
        last[key] = value["offset"]
    return len(history.events)


def assert_zero_lag(connection, group: str, partitions: int) -> None:
    with GroupAdmin(connection) as admin:
        description = admin.describe_group(group)
    assert len(description.partitions) == partitions
    assert all(row.lag == 0 and row.committed_offset == row.high_watermark for row in description.partitions), description


CRASHING_MEMBER = """
import sys
from mafka4.client.consumer import Consumer
# No auto-commit: what it consumed before the kill is uncommitted and must be delivered again.
consumer = Consumer(sys.argv[1], group=sys.argv[2], from_beginning=True, member_lease_ttl_s=3, auto_commit_interval_ms=None)
while True:
    for message in consumer.poll(timeout_ms=100):
        print(message.value.decode(), flush=True)
"""


def start_crashing_member(topic: str, group: str) -> tuple[subprocess.Popen, list[str]]:
    process = subprocess.Popen([sys.executable, "-c", CRASHING_MEMBER, topic, group], stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(line.strip() for line in process.stdout), daemon=True).start()
    return process, lines


def test_members_join_leave_and_crash_while_producing_every_message_is_consumed(cluster):
    topic, group, total = unique("grp"), unique("g"), 20_000
    Admin(cluster).create_topic(topic, partitions=6, replication_factor=2, read_mode="mafka3")
    offsets = KeyHistory(cluster, keys.group_offsets_prefix(cluster.cluster, group))
    settings = dict(auto_commit_interval_ms=300, member_lease_ttl_s=3)
    members = [ConsumerThread(topic, group, cluster, **settings) for _ in range(3)]
    everyone = list(members)  # including those that left: what they consumed counts
    produced = [0]
    producer = threading.Thread(target=produce_paced, args=(topic, cluster, total, 2000, produced))
    producer.start()
    crashed, crashed_lines = None, []
    try:
        assert wait_until(lambda: produced[0] >= 4000, WAIT_S_MAX), "gave up waiting for 4,000 messages produced"
        crashed, crashed_lines = start_crashing_member(topic, group)
        assert wait_until(lambda: len(crashed_lines) > 0 or crashed.poll() is not None, WAIT_S_MAX), \
            "gave up waiting for the separate member to consume"
        crashed.send_signal(signal.SIGKILL)  # no commit, no release: its lease has to expire
        members.pop(0).close()  # a clean leave
        members.append(ConsumerThread(topic, group, cluster, **settings))
        everyone.append(members[-1])
    finally:
        producer.join()
        if crashed is not None:
            crashed.wait()
    assert produced[0] == total

    def consumed() -> set[str]:
        return {m.value.decode() for member in everyone for m in member.messages} | set(crashed_lines)

    assert wait_until(lambda: consumed() >= {str(n) for n in range(total)}, WAIT_S_MAX), \
        "gave up waiting for every message consumed at least once"
    for member in members:
        member.close()
    offsets.close()
    assert assert_offsets_never_go_back(offsets) > 0
    assert_zero_lag(cluster, group, partitions=6)
    described = mafka4("group", "describe", group)
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.decode().splitlines() if line.startswith(topic)]
    # The last two columns: lag in messages, then in seconds.
    assert len(rows) == 6 and all(row[-2:] == ["0", "0.0"] for row in rows), described.stdout.decode()


def owner_overlaps(history: KeyHistory) -> list[str]:
    """Owner-key puts that found the key held by someone else (a second owner), in revision order."""
    holders: dict[str, str] = {}
    overlaps = []
    for key, value in history.events:
        if value is None:
            holders.pop(key, None)
        elif key in holders:
            overlaps.append(f"{key}: {value['member_id']} while {holders[key]} owned it")
        else:
            holders[key] = value["member_id"]
    return overlaps


def test_no_partition_ever_has_two_owners_and_clean_rebalances_deliver_exactly_once(cluster):
    topic, group, total = unique("own"), unique("g"), 3000
    Admin(cluster).create_topic(topic, partitions=4, replication_factor=1, read_mode="mafka3")
    owners = KeyHistory(cluster, keys.group_owners_prefix(cluster.cluster, group))
    produced = [0]
    producer = threading.Thread(target=produce_paced, args=(topic, cluster, total, 1000, produced))
    producer.start()
    members, everyone = [], []
    rng = random.Random(7)
    try:
        for step in range(10):  # joins and clean leaves, between one and six members
            if len(members) < 2 or (len(members) < 6 and rng.random() < 0.6):
                members.append(ConsumerThread(topic, group, cluster, assignor="sticky"))
                everyone.append(members[-1])
            else:
                members.pop(rng.randrange(len(members))).close()
            time.sleep(0.2)
    finally:
        producer.join()

    def received() -> Counter:
        return Counter(m.value for member in everyone for m in member.messages)

    assert wait_until(lambda: len(received()) == total, WAIT_S_MAX), "gave up waiting for every message consumed"
    for member in members:
        member.close()
    owners.close()
    assert len(owners.events) > 10, "the churn moved partitions between members"
    assert owner_overlaps(owners) == []
    duplicates = {value: count for value, count in received().items() if count > 1}
    assert duplicates == {}, "commit-on-release hands each partition over at its exact position"
    assert_zero_lag(cluster, group, partitions=4)


def produce_two_halves(topic: str, connection, per_half: int) -> tuple[int, dict[int, int], dict[int, int]]:
    """Messages with old timestamps, then with new ones; (boundary timestamp, end offsets of each half per partition)."""
    old_ms, new_ms = 1_600_000_000_000, 1_700_000_000_000
    ends = []
    with Producer(topic, connection=connection) as producer:
        for stamp_ms in (old_ms, new_ms):
            futures = [producer.send(f"{stamp_ms}-{n}".encode(), key=str(n).encode(), timestamp_ms=stamp_ms)
                       for n in range(per_half)]
            producer.flush()
            end: dict[int, int] = defaultdict(int)
            for future in futures:
                metadata = future.result()
                end[metadata.partition] = max(end[metadata.partition], metadata.offset + 1)
            ends.append(dict(end))
    return new_ms, ends[0], ends[1]


def poll_until(consumer: Consumer, count: int) -> list:
    messages: list = []

    def enough() -> bool:
        messages.extend(consumer.poll(timeout_ms=100))
        return len(messages) >= count

    assert wait_until(enough, WAIT_S_MAX), f"gave up waiting for {count} messages"
    return messages


def test_reset_offsets_needs_an_empty_group_and_moves_offsets_either_way(cluster):
    topic, group = unique("rst"), unique("g")
    Admin(cluster).create_topic(topic, partitions=2, read_mode="mafka3")
    boundary_ms, first_half_end, second_half_end = produce_two_halves(topic, cluster, 100)
    with Consumer(topic, group=group, connection=cluster, from_beginning=True) as consumer:
        assert len(poll_until(consumer, 200)) == 200
        consumer.commit()
        with GroupAdmin(cluster) as admin, pytest.raises(errors.GroupNotEmpty, match="active member"):
            admin.reset_offsets(group, topic, "earliest")
        refused = mafka4("group", "reset-offsets", group, "--topic", topic, "--to-earliest")
        assert refused.returncode == 1 and b"close those consumers first" in refused.stderr
    with GroupAdmin(cluster) as admin:
        assert admin.reset_offsets(group, topic, boundary_ms) == {p: (second_half_end[p], first_half_end[p]) for p in (0, 1)}
        assert admin.reset_offsets(group, topic, "latest") == {p: (first_half_end[p], second_half_end[p]) for p in (0, 1)}
    reset = mafka4("group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert reset.returncode == 0, reset.stderr
    consumed = mafka4("consume", topic, "--group", group, "--max-messages", "150", "--timeout-ms", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert len(consumed.stdout.split()) == 150
    rest = mafka4("consume", topic, "--group", group, "--max-messages", "50", "--timeout-ms", "20000")
    assert len(rest.stdout.split()) == 50, "the group resumes after the 150 messages printed, not after the fetched ones"
    assert sorted(consumed.stdout.split() + rest.stdout.split()) == sorted(
        f"{stamp}-{n}".encode() for stamp in (1_600_000_000_000, boundary_ms) for n in range(100))
    assert_zero_lag(cluster, group, partitions=2)
    assert group.encode() in mafka4("group", "list").stdout


def test_seek_to_time_and_seek_in_a_group_and_commits_never_go_back(cluster):
    topic, group = unique("seek"), unique("g")
    Admin(cluster).create_topic(topic, partitions=2, read_mode="mafka3")
    boundary_ms, first_half_end, second_half_end = produce_two_halves(topic, cluster, 100)
    with Consumer(topic, group=group, connection=cluster) as consumer:  # auto_offset_reset=latest
        assert wait_until(lambda: consumer.poll(timeout_ms=100) == [] and consumer.assignment() == [0, 1],
                          WAIT_S_MAX), "gave up waiting for assignment"
        assert {p: consumer.position(p) for p in (0, 1)} == second_half_end, "a new group starts at the end by default"
        consumer.seek_to_time(boundary_ms)
        assert {p: consumer.position(p) for p in (0, 1)} == first_half_end
        second_half = poll_until(consumer, 100)
        assert sorted(m.value for m in second_half) == sorted(f"{boundary_ms}-{n}".encode() for n in range(100))
        assert consumer.commit() == second_half_end
        consumer.seek(0, 0)
        assert consumer.commit() == {}, "a position behind the committed offset is not committed"
        with pytest.raises(errors.PartitionNotAssigned):
            consumer.seek(7, 0)
    with GroupAdmin(cluster) as admin:
        assert {row.partition: row.committed_offset for row in admin.describe_group(group).partitions} == second_half_end


def test_a_member_that_stops_polling_leaves_after_the_rebalance_timeout_and_rejoins_when_it_polls(cluster):
    topic, group = unique("slow"), unique("g")
    Admin(cluster).create_topic(topic, partitions=2, read_mode="mafka3")
    # Its lease thread checks every 2/3 s; once it polls again, each poll clears the timer well within 1.5 s.
    stuck = Consumer(topic, group=group, connection=cluster, member_lease_ttl_s=2, rebalance_timeout_ms=1500)
    try:
        assert stuck.assignment() == [0, 1], "the only member owns everything"
        joiner = ConsumerThread(topic, group, cluster)
        assert wait_until(lambda: joiner.assignment == [0, 1], WAIT_S_MAX), \
            "gave up waiting for the stuck member to leave and the joiner to take over"
        assert wait_until(lambda: stuck.poll(timeout_ms=100) == [] and len(stuck.assignment()) == 1, WAIT_S_MAX), \
            "gave up waiting for the stuck member to rejoin"
        assert wait_until(lambda: joiner.assignment == [1 - stuck.assignment()[0]], WAIT_S_MAX), \
            "gave up waiting for the joiner to keep the other partition"
        joiner.close()
    finally:
        stuck.close()


def test_bad_group_input_names_the_problem_and_the_fix(cluster):
    topic = unique("bad")
    Admin(cluster).create_topic(topic, partitions=2, read_mode="mafka3")
    with Producer(topic, connection=cluster) as producer:
        for n in range(10):
            producer.send(str(n).encode(), partition=n % 2)
    unknown_group = mafka4("group", "describe", unique("nobody"))
    assert unknown_group.returncode == 2 and b"has no members and no committed offsets" in unknown_group.stderr
    unknown_topic = mafka4("consume", unique("missing"), "--group", unique("g"), "--timeout-ms", "100")
    assert unknown_topic.returncode == 2 and b"mafka4 topic create" in unknown_topic.stderr
    illegal = mafka4("consume", topic, "--group", "bad/group", "--timeout-ms", "100")
    assert illegal.returncode == 2 and b"may contain only letters, digits" in illegal.stderr
    group = unique("g")
    before_log_start = mafka4("group", "reset-offsets", group, "--topic", topic, "--to-time", "1970-01-02T00:00:00")
    assert before_log_start.returncode == 0, before_log_start.stderr
    assert before_log_start.stdout.split(b"\n")[:2] == [f"{topic} 0: - -> 0".encode(), f"{topic} 1: - -> 0".encode()], \
        "a time before the log start resets to the log start"
    not_iso = mafka4("group", "reset-offsets", group, "--topic", topic, "--to-time", "yesterday")
    assert not_iso.returncode == 2 and b"is not an ISO 8601 time" in not_iso.stderr
