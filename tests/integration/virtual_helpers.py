"""Helpers of the read-path integration tests: a keyed produce loop and checks of the VP logs."""

from __future__ import annotations

import collections
import secrets
import threading
import time

import ray

from mafka4.batch_payload import decode_batches
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.client.virtual_consumer import VirtualConsumer
from mafka4.errors import ReadReplicaNotInSync
from mafka4.hashing import key_hash
from mafka4.physical.topics import TopicStore
from mafka4.virtual.consumer_reads import ConsumerRead
from mafka4.virtual.handles import ask_leader_nodes, read_node_handle
from mafka4.virtual.hosted_vp import VpId
from mafka4.virtual.vp_records import source_of
from mafka4.virtual.vp_store import VirtualStore

from wait_helpers import wait_until

KEYS = [f"key-{i}".encode() for i in range(24)]
WAIT_S = 60
# ProduceLoop's pause after each 100 messages in tests that inject faults into an unbounded
# loop. A shorter one floods the 2 cores while the cluster heals, and every message sent
# meanwhile is read back, several times, by the final checks.
FAULT_TEST_PAUSE_S = 0.1


def topic_name(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


class ProduceLoop:
    """Keyed messages "<key>:<n>" (n counts per key) in a thread; remembers what was acknowledged.

    ``after``: the acknowledged messages of an earlier loop on the topic, whose numbering this one
    continues. ``messages_max``: stop sending after that many. ``pause_s``: pause after each 100.
    """

    def __init__(self, connection, topic: str, after=(), messages_max: int | None = None, pause_s: float = 0.01):
        self.acknowledged: list[tuple[int, int, bytes, bytes]] = []  # (partition, offset, key, value)
        self.failures: list[BaseException] = []
        self.sent = 0
        self.sent_values: list[bytes] = []  # in send order
        self._counts = collections.Counter()
        for _, _, key, value in after:
            self._counts[key] = max(self._counts[key], int(value.rsplit(b":", 1)[1]) + 1)
        self._messages_max, self._pause_s = messages_max, pause_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(connection, topic), daemon=True)
        self._thread.start()

    def _run(self, connection, topic: str) -> None:
        counts = self._counts
        with Producer(topic, connection=connection, acks="all", linger_ms=2) as producer:
            while not self._stop.is_set() and (self._messages_max is None or self.sent < self._messages_max):
                key = KEYS[self.sent % len(KEYS)]
                value = b"%s:%d" % (key, counts[key])
                counts[key] += 1
                self.sent_values.append(value)
                producer.send(value, key=key).add_callback(
                    lambda md, err, key=key, value=value: self.acknowledged.append((md.partition, md.offset, key, value))
                    if err is None else self.failures.append(err))
                self.sent += 1
                if self.sent % 100 == 0:
                    producer.flush()
                    time.sleep(self._pause_s)  # a steady stream, not a flood, on a shared machine
            producer.flush()

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait_for(self, count: int) -> None:
        assert wait_until(lambda: len(self.acknowledged) >= count), f"only {len(self.acknowledged)} acknowledged"

    def stop(self) -> list[tuple[int, int, bytes, bytes]]:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive() and not self.failures, self.failures[:3]
        return list(self.acknowledged)


def vp_log(connection, topic: str, vp: int, replica: str) -> list:
    """Every record of one VP replica below its HW (with source headers), read through its read node."""
    handle = read_node_handle(connection.cluster, replica)
    records, offset = [], 0
    while True:
        answer = ray.get(handle.fetch.remote([ConsumerRead(VpId(topic, vp), offset)], 1 << 20, 0), timeout=WAIT_S)[0]
        if answer.error is not None:
            raise answer.error
        batch = decode_batches(answer.read.data)
        if not batch:
            return records
        records.extend(batch)
        offset = batch[-1].offset + 1


def describe_vp(connection, topic: str, vp: int, replica: str) -> dict | None:
    """What the read node ``replica`` reports of its replica of ``vp`` (None: it does not host it)."""
    handle = read_node_handle(connection.cluster, replica)
    return ray.get(handle.describe_vps.remote([VpId(topic, vp)]), timeout=WAIT_S)[0]


def feed_of(connection, topic: str, partition: int, node: str) -> dict | None:
    """What read node ``node``'s feed stream of ``topic``-``partition`` reports (None: it runs none)."""
    described = ray.get(read_node_handle(connection.cluster, node).describe.remote(topic), timeout=WAIT_S)
    return described["feeds"].get(topic, {}).get(partition)


def leaders_fed(connection, topic: str, acknowledged) -> bool:
    """True once every VP leader heard that its feed streams passed every acknowledged record it can
    receive (a closed VP: every record below its closing cut), and exposes all it holds."""
    return not feed_shortfalls(connection, topic, acknowledged)


def feed_shortfalls(connection, topic: str, acknowledged) -> list[str]:
    """Why ``leaders_fed`` is not true yet, one line per VP that falls short."""
    ends = collections.defaultdict(int)
    for partition, offset, _, _ in acknowledged:
        ends[partition] = max(ends[partition], offset + 1)
    virtual = VirtualStore(connection.store, connection.cluster)
    config = TopicStore(connection.store, connection.cluster).get(topic).config
    layout, states = virtual.layout_and_states(topic, config.partitions, config.virtual_config())
    described = ask_leader_nodes(connection.cluster, topic, [state for state, _ in states.values()], "describe_vps",
                                 timeout_s=WAIT_S)
    shortfalls = []
    for vp in states:
        if states[vp][0].retired:
            continue  # its logs are gone (check_exactly_once finds any acknowledged record it took along)
        answer = described[vp]
        if answer is None or isinstance(answer, BaseException) or answer["role"] != "leader":
            shortfalls.append(f"v{vp}: leader not answering as leader ({answer})")
            continue
        sealed_end = states[vp][0].sealed_end_offset
        if sealed_end is not None:  # complete when sealed; a restarted leader hears no feed report again
            if answer["log_end_offset"] != sealed_end or answer["high_watermark"] != sealed_end:
                shortfalls.append(f"v{vp}: sealed at {sealed_end} but holds {answer['log_end_offset']}")
            continue
        fed_through = answer["fed_through"]
        for p, end in ends.items():
            bound = layout.source_bounds(vp, p)[1]
            if fed_through.get(p, 0) < (end if bound is None else min(end, bound)):
                shortfalls.append(f"v{vp}: fed through {fed_through} short of {dict(ends)} (bound {bound}) {answer}")
                break
        if answer["high_watermark"] != answer["log_end_offset"]:
            shortfalls.append(f"v{vp}: HW {answer['high_watermark']} below LEO {answer['log_end_offset']}")
    return shortfalls


def check_exactly_once(connection, topic: str, acknowledged) -> dict[int, list]:
    """Assert the VP leaders' logs hold every acknowledged message once, placed and ordered right."""
    assert wait_until(lambda: leaders_fed(connection, topic, acknowledged)), \
        "the feed streams did not catch up: " + "; ".join(feed_shortfalls(connection, topic, acknowledged))
    virtual = VirtualStore(connection.store, connection.cluster)
    config = TopicStore(connection.store, connection.cluster).get(topic).config
    layout = virtual.layout(topic, config.partitions, config.virtual_config())
    # A retired VP's logs are gone. The upkeep retires a closed VP that took no record at once (a
    # merge right after the split that made it); one that held acknowledged records shows below
    # as records missing from the fed ones.
    logs = {}
    for vp, (state, _) in virtual.states(topic).items():
        if not state.retired:
            records = _vp_log_unless_retired(connection, virtual, topic, vp, state.leader)
            if records is not None:
                logs[vp] = records
    sources = collections.Counter(source_of(r) for records in logs.values() for r in records)
    assert not [s for s, n in sources.items() if n > 1], "a physical record was fed twice"
    assert set(sources) == {(p, o) for p, o, _, _ in acknowledged}, "fed records differ from the acknowledged ones"
    for vp, records in logs.items():
        assert [r.offset for r in records] == list(range(len(records))), "VP offsets are dense"
        per_key = collections.defaultdict(list)
        for record in records:
            assert layout.vp_for(source_of(record)[0], source_of(record)[1], key_hash(record.key)) == vp
            per_key[record.key].append(int(record.value.rsplit(b":", 1)[1]))
        assert all(values == sorted(values) for values in per_key.values()), f"per-key order broken in VP {vp}"
    return logs


def _vp_log_unless_retired(connection, virtual: VirtualStore, topic: str, vp: int, leader: str) -> list | None:
    """``vp_log`` of ``vp``; None if the upkeep retired it (and dropped its logs) since its state was read."""
    try:
        return vp_log(connection, topic, vp, leader)
    except ReadReplicaNotInSync:
        state, _ = virtual.states(topic)[vp]
        if state.retired:
            return None
        raise


def read_everything(connection, topic: str, expected: int, wanted: set | None = None) -> list:
    """What a reader from the beginning gets: at least ``expected`` messages, and with ``wanted`` (values)
    until it has read every one of them (a topic may hold older messages besides), or ``WAIT_S`` passed."""
    messages = []

    def done() -> bool:
        return len(messages) >= expected and (wanted is None or wanted <= {m.value for m in messages})

    with VirtualConsumer(topic, connection=connection, from_beginning=True) as consumer:
        deadline = time.monotonic() + WAIT_S
        while not done() and time.monotonic() < deadline:
            messages.extend(consumer.poll(timeout_ms=500))
        messages.extend(consumer.poll(timeout_ms=300))  # anything beyond `expected` would be a duplicate
    return messages


class TimedReader:
    """A ``VirtualConsumer`` from the VPs' high watermarks, polling in a thread; remembers when it got what.

    ``consumed``: (time.monotonic(), vp, value) of every message, in the order received.
    """

    def __init__(self, connection, topic: str):
        self.consumed: list[tuple[float, int, bytes]] = []
        self.error: BaseException | None = None
        self._consumer = VirtualConsumer(topic, connection=connection)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timed-reader", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for message in self._consumer.poll(timeout_ms=200):
                    self.consumed.append((time.monotonic(), message.partition, message.value))
        except BaseException as error:  # the test thread re-raises it
            self.error = error
        finally:
            self._consumer.close()

    def first_of(self, vp: int, values: set[bytes]) -> float | None:
        """When the first message of ``vp`` among ``values`` was received; None if none was."""
        return next((t for t, v, value in list(self.consumed) if v == vp and value in values), None)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive() and self.error is None, self.error


class Deliveries:
    """Every message any member received, stamped with one sequence number across members."""

    def __init__(self):
        self._lock = threading.Lock()
        self.records: list[tuple[int, str, int, bytes, int]] = []  # (sequence, member, vp, key, n)

    def add(self, member: str, messages) -> None:
        with self._lock:
            for message in messages:
                self.records.append((len(self.records), member, message.partition, message.key,
                                     int(message.value.rsplit(b":", 1)[1])))

    def values(self) -> set[bytes]:
        with self._lock:
            return {b"%s:%d" % (key, n) for _, _, _, key, n in self.records}

    def wait_for_all(self, acknowledged, timeout_s: float) -> None:
        """Assert that every acknowledged message (as ``ProduceLoop.stop`` returns them) reaches some
        member within ``timeout_s``."""
        expected = {value for _, _, _, value in acknowledged}
        assert wait_until(lambda: expected <= self.values(), timeout_s), self._never_consumed(expected)

    def _never_consumed(self, expected: set[bytes]) -> str:
        missing = sorted(expected - self.values())
        return f"{len(missing)} of {len(expected)} acknowledged messages never consumed, e.g. {missing[:3]}"

    def by_member(self, member: str) -> int:
        with self._lock:
            return sum(1 for record in self.records if record[1] == member)

    def check_per_key_order(self) -> None:
        """Each key's messages are first seen in produce order (a repeat after a handover is allowed)."""
        highest: dict[bytes, int] = {}
        with self._lock:
            for sequence, member, vp, key, n in self.records:
                if n > highest.get(key, -1):
                    assert n == highest.get(key, -1) + 1, f"key {key!r}: {n} first seen after {highest.get(key)} " \
                                                          f"(member {member}, VP {vp}, delivery {sequence})"
                    highest[key] = n


class Member:
    """One group member polling in a thread of its own until told to leave."""

    def __init__(self, connection, topic: str, group: str, name: str, deliveries: Deliveries, **settings):
        self.name = name
        self.consumer = Consumer(topic, group=group, connection=connection, from_beginning=True, **settings)
        self._deliveries = deliveries
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._deliveries.add(self.name, self.consumer.poll(timeout_ms=200))
        except BaseException as error:  # the test thread re-raises it
            self.error = error
        finally:
            self.consumer.close()

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_S)
        assert not self._thread.is_alive() and self.error is None, self.error
