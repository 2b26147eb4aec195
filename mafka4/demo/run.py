"""``mafka4 demo``: the product in under a minute, on a throwaway local cluster.

Steps, each printed with the time since the start:

1. start etcd and a Ray cluster on loopback in a temporary home: 2 write nodes, 2 read nodes;
2. create a Mafka4-mode topic: 2 physical partitions x 2 replicas, read through 1 virtual
   partition (VP);
3. start a producer: keyed messages at a steady rate with ``acks=all``, each key's messages
   numbered 0, 1, 2, ...;
4. grow a consumer group from 1 to 4 members, one join at a time. Each join leaves the group
   with more members than VPs, so one member asks for a split of the busiest VP; the others
   read on. Each split is printed as the cluster records it (parent -> children, hash ranges,
   the cut in physical offsets: the topic's split epochs in etcd), then the parent read to its
   sealed end, then which member owns which VP on which read node (``GroupAdmin.describe_group``
   and the VP states). The next member joins once every member owns a VP;
5. stop producing and drain: wait until the group has read every acknowledged message, then
   close the members (each commits and leaves) and print the group's committed offsets and lag;
6. judge what the group read (``demo.verdict``): every acknowledged message exactly once, and
   each key in production order; then stop everything the demo started.

Exit status 0 when the verdict passed; 1 when it failed, a join did not settle within
``JOIN_WAIT_S`` or the drain within ``DRAIN_WAIT_S``. Members are threads of this process, each a
``Consumer`` with its own etcd lease, as the group integration tests run them.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.group_admin import GroupAdmin, GroupDescription, VpStatus
from mafka4.client.producer import Producer
from mafka4.demo.narrator import Narrator
from mafka4.demo.verdict import Acknowledged, Delivery, judge
from mafka4.limits import ReadMode
from mafka4.limits.servers import ClusterConfig
from mafka4.runtime.connect import Connection
from mafka4.runtime.temporary import temporary_cluster

TOPIC, GROUP = "demo", "demo-group"
CLUSTER = ClusterConfig(write_nodes=2, read_nodes=2)
PARTITIONS, REPLICATION_FACTOR = 2, 2
MEMBERS_MAX = 4
KEYS = tuple(b"key-%02d" % index for index in range(24))
RATE_MSGS_PER_S = 1000
# Members commit every second (not every 5 s), so the lag the group reports, by which a split
# picks the busiest VP, is fresh.
AUTO_COMMIT_INTERVAL_MS = 1000
# After a join settled, the group reads this long before the next member joins.
DWELL_S = 1.0
# A join settles in about a second here; these bound a stuck one, and the drain.
JOIN_WAIT_S = 20
DRAIN_WAIT_S = 20
# How often the demo looks at the layout and the group while it waits.
LOOK_INTERVAL_S = 0.2
# After the last acknowledged message was read, members poll this long more: a duplicate would show.
AFTER_DRAIN_S = 0.5
PRODUCER_TICK_S = 0.005
POLL_TIMEOUT_MS = 200
THREAD_JOIN_S = 30


class Timeline:
    """Prints each step with the seconds since the demo started."""

    def __init__(self):
        self._start_s = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self._start_s

    def say(self, text: str) -> None:
        print(f"[{self.elapsed_s():5.1f} s] {text}", flush=True)


class History:
    """What the producer had acknowledged and what the members read, in delivery order (thread-safe)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.acknowledged: list[Acknowledged] = []
        self.deliveries: list[Delivery] = []
        self.send_errors: list[BaseException] = []
        self._read: set[tuple[bytes, int]] = set()

    def acked(self, key: bytes, sequence: int, metadata, error: BaseException | None) -> None:
        with self._lock:
            if error is None:
                self.acknowledged.append(Acknowledged(key, sequence, metadata.partition, metadata.offset))
            else:
                self.send_errors.append(error)

    def delivered(self, member: str, messages) -> None:
        with self._lock:
            for message in messages:
                delivery = Delivery(member, message.partition, message.offset, message.key, int(message.value))
                self.deliveries.append(delivery)
                self._read.add((delivery.key, delivery.sequence))

    def unread(self) -> int:
        """Acknowledged messages the group has not read yet."""
        with self._lock:
            return sum(1 for ack in self.acknowledged if (ack.key, ack.sequence) not in self._read)


class ProducerThread:
    """Sends ``RATE_MSGS_PER_S`` keyed messages a second, round robin over ``KEYS``, until stopped."""

    def __init__(self, connection: Connection, history: History):
        self.sent = 0
        self.error: BaseException | None = None
        self._history = history
        self._stop = threading.Event()
        self._producer = Producer(TOPIC, connection=connection, acks="all", linger_ms=5)
        self._thread = threading.Thread(target=self._run, name="demo-producer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sequences = dict.fromkeys(KEYS, 0)
        start_s = time.monotonic()
        try:
            while not self._stop.is_set():
                due = int((time.monotonic() - start_s) * RATE_MSGS_PER_S)
                while self.sent < due:
                    key = KEYS[self.sent % len(KEYS)]
                    sequence = sequences[key]
                    sequences[key] += 1
                    self._producer.send(b"%d" % sequence, key=key,
                                        callback=lambda md, error, k=key, s=sequence: self._history.acked(k, s, md, error))
                    self.sent += 1
                self._stop.wait(PRODUCER_TICK_S)
        except BaseException as error:  # the demo's main thread reports it
            self.error = error
        finally:
            self._producer.close()  # flushes: every message sent is answered

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(THREAD_JOIN_S)


class Member:
    """One group member polling in a thread of its own, recording what it reads, until stopped."""

    def __init__(self, name: str, connection: Connection, history: History):
        self.name = name
        self.consumer = Consumer(TOPIC, group=GROUP, connection=connection, from_beginning=True,
                                 auto_commit_interval_ms=AUTO_COMMIT_INTERVAL_MS)
        self.error: BaseException | None = None
        self._history = history
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"demo-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._history.delivered(self.name, self.consumer.poll(timeout_ms=POLL_TIMEOUT_MS))
        except BaseException as error:  # the demo's main thread reports it
            self.error = error
        finally:
            self.consumer.close()  # commits and leaves the group

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join(THREAD_JOIN_S)


def run_demo() -> int:
    timeline = Timeline()
    timeline.say(f"starting a throwaway local cluster: etcd and Ray on 127.0.0.1, {CLUSTER.write_nodes} write nodes, "
                 f"{CLUSTER.read_nodes} read nodes ...")
    cluster = None
    try:
        with temporary_cluster(CLUSTER, home_prefix="m4demo-") as cluster:
            state = cluster.state
            timeline.say(f"cluster up in {cluster.home}: etcd {state.etcd_endpoint}, Ray {state.ray_address}")
            passed = _tour(cluster.connection, timeline)
            timeline.say("stopping the cluster ...")
    finally:
        if cluster is not None:  # else the start failed, and its error says why
            timeline.say(f"cluster stopped ({len(cluster.stopped_pids)} processes)")
    timeline.say(f"demo {'passed' if passed else 'FAILED'} in {timeline.elapsed_s():.1f} s")
    return 0 if passed else 1


def _tour(connection: Connection, timeline: Timeline) -> bool:
    """Steps 2 to 6 of the module docstring; True if every step and the verdict passed."""
    say = timeline.say
    metadata = Admin(connection).create_topic(TOPIC, partitions=PARTITIONS, replication_factor=REPLICATION_FACTOR,
                                              virtual_partitions=1, read_replicas=1, read_mode=ReadMode.MAFKA4)
    history = History()
    members: list[Member] = []
    with GroupAdmin(connection) as groups:
        narrator = Narrator(connection, groups, TOPIC, metadata.config, GROUP, say)
        leaders = ", ".join(f"p{state.partition} led by {state.leader}" for state in metadata.partitions)
        say(f"created topic {TOPIC!r}: {PARTITIONS} physical partitions x {REPLICATION_FACTOR} replicas ({leaders}), "
            f"read mode mafka4, {narrator.describe_layout()}")
        producer = ProducerThread(connection, history)
        say(f"producer started: {RATE_MSGS_PER_S:,} messages/s over {len(KEYS)} keys with acks=all, "
            f"each key's messages numbered 0, 1, 2, ...")
        try:
            grown = _grow_group(connection, history, narrator, members, timeline)
            producer.stop()
            say(f"producer stopped: {producer.sent:,} messages sent, {len(history.acknowledged):,} acknowledged, "
                f"{len(history.send_errors)} failed")
            drained = _drain(history, timeline)
        finally:
            producer.stop()
            _stop_members(members)
        _print_group(groups.describe_group(GROUP), history, say)
    failed = [(name, thread.error) for name, thread in [("the producer", producer)] + [(m.name, m) for m in members]
              if thread.error is not None]
    for name, error in failed:
        say(f"{name} failed: {type(error).__name__}: {error}")
    verdict = judge(history.acknowledged, history.deliveries)
    for line in verdict.lines():
        say(line)
    return verdict.passed and grown and drained and not history.send_errors and not failed


def _grow_group(connection: Connection, history: History, narrator: Narrator, members: list[Member],
                timeline: Timeline) -> bool:
    """Members join one at a time up to ``MEMBERS_MAX``, each once the group settled; False if one did not."""
    for count in range(1, MEMBERS_MAX + 1):
        member = Member(f"m{count}", connection, history)
        members.append(member)
        narrator.names[member.consumer.member_id] = member.name
        joined_s = timeline.elapsed_s()
        timeline.say(f"member {member.name} joins group {GROUP!r} ({count} member{'s' if count > 1 else ''})")
        if not narrator.follow(lambda description: _settled(description, members), JOIN_WAIT_S, LOOK_INTERVAL_S):
            timeline.say(f"the group did not settle within {JOIN_WAIT_S} s of {member.name}'s join: giving up")
            return False
        timeline.say(f"  settled {timeline.elapsed_s() - joined_s:.1f} s after the join: every member owns a VP")
        time.sleep(DWELL_S)
    return True


def _settled(description: GroupDescription, members: list[Member]) -> bool:
    """Every member is in the group and owns an active VP, and no VP waits for its parent or is draining."""
    rows = description.virtual_partitions
    owners = {row.member_id for row in rows if row.status is VpStatus.ACTIVE}
    return (all(row.status in (VpStatus.ACTIVE, VpStatus.READ) for row in rows)
            and {member.consumer.member_id for member in members} <= owners
            and len(description.members) == len(members))


def _drain(history: History, timeline: Timeline) -> bool:
    """Wait until the group read every acknowledged message (then a little more: a duplicate would show)."""
    began_s = timeline.elapsed_s()
    deadline_s = time.monotonic() + DRAIN_WAIT_S
    while history.unread() and time.monotonic() < deadline_s:
        time.sleep(LOOK_INTERVAL_S)
    unread = history.unread()
    if unread:
        timeline.say(f"gave up draining after {DRAIN_WAIT_S} s: {unread:,} acknowledged messages not read")
        return False
    time.sleep(AFTER_DRAIN_S)
    timeline.say(f"drained {timeline.elapsed_s() - began_s:.1f} s after the producer stopped: the group read "
                 f"every acknowledged message; the members commit and leave")
    return True


def _stop_members(members: list[Member]) -> None:
    for member in members:
        member.stop()
    for member in members:
        member.join()


def _print_group(description: GroupDescription, history: History, say: Callable[[str], None]) -> None:
    """The group's committed offsets and lag per VP (as ``mafka4 group describe`` has them), and who read what."""
    readers: dict[int, set[str]] = {}
    counts: dict[str, int] = {}
    for delivery in history.deliveries:
        readers.setdefault(delivery.vp, set()).add(delivery.member)
        counts[delivery.member] = counts.get(delivery.member, 0) + 1
    say(f"group {GROUP!r} after the drain (mafka4 group describe {GROUP}): total lag {description.total_lag}")
    for row in description.virtual_partitions:
        say(f"  v{row.vp:<2} {row.status.value:<7} committed {row.committed_offset} of {row.high_watermark}, "
            f"lag {row.lag}, read by {','.join(sorted(readers.get(row.vp, ()))) or '-'}")
    say("  messages read per member: " + ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items())))
