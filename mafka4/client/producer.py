"""``Producer``: the public API for writing messages to a topic.

    producer = Producer("orders", acks="all", linger_ms=5)
    future = producer.send(b"payload", key=b"customer-7")
    future.add_callback(lambda metadata, error: ...)
    producer.send(b"more", callback=lambda metadata, error: ...)   # the same, cheaper
    producer.send_sync(b"another")        # returns RecordMetadata once acknowledged
    producer.send_many([b"a", b"b", b"c"], callback=lambda sent, error: ...)   # one call, one future
    producer.send(b"test order", key=b"customer-7", lane="swimlane-17")   # a lane of the topic
    producer.flush(); producer.close()

``send`` validates and buffers the message and returns at once; a sender thread batches
messages per partition (``linger_ms``, ``batch_bytes_max``), sends them to the partition
leaders' client ports and retries retriable failures idempotently (see ``sender.py``).

The producer is a client of the cluster's ports only (no Ray, no etcd): it starts from
``$MAFKA4_BOOTSTRAP`` or the local cluster's record and authenticates as ``$MAFKA4_USER`` or the
local admin (``client.cluster_access``, which also says what else ``cluster`` may name). It
needs the ``produce`` ACL on the topic. The buffer is
bounded by ``buffer_bytes_max``; ``on_full`` chooses between blocking and ``BufferFull``.
``compression`` ("none", "lz4", "zstd"; by default ``$MAFKA4_COMPRESSION``, else "none")
compresses each batch as the sender encodes it (``mafka4.compression``). Header names starting
with ``mafka4.`` are reserved for the system's own headers and refused (``InvalidRecord``).

Delayed messages (``delay_ms=`` or ``deliver_at_ms=``, ``mafka4.delays``): due ``DELAY_MS_MIN``
(1 s) to the topic's ``delay_ms_max`` (default 7 days) from now, else ``DelayOutOfRange``. The
message goes to the topic's delay topic ``<topic>.mafka4-delays`` (created with the topic's config
on the first one, through a producer of it as for a mafka3-mode lane), durable once acknowledged;
its acknowledgement's partition and offset are its message id (``Admin.cancel_delayed``). The
cluster's delay scheduler produces it to the topic, in its lane, at its due time; consumers see
it with the header ``mafka4.deliver_at`` (the due time), at least once.

Lanes (``lane=``; none or "" is the trunk). A message in a lane carries the lane's name as its
first header (``batch_payload.LANE_HEADER``) and, in the batch, its lane id
(``batch_payload``'s lane-id column), so read nodes put it in the lane's own VPs
(``virtual.layout``). A lane opens on its first message: the producer asks any node where the lane
is (``client.topic_admin.open_lane``, one round trip; the controller opens it if it is new, up to
the topic's ``lanes_max``) and remembers the answer. A mafka3-mode topic keeps a lane as a topic of
its own, ``<topic>.<lane>``, created with the topic's config on first use: the producer sends it
there through a producer of that topic, which it opens then (a sender thread and connections per
lane: the cost of isolation the old way, which queue merging removes).
"""

from __future__ import annotations

import time
from itertools import accumulate
from typing import Any, Callable, Iterable

from mafka4.batch_frame import TIMESTAMP_MS_MAX
from mafka4.batch_payload import RESERVED_HEADER_PREFIX, laned_headers
from mafka4.client.accumulator import RECORD_OVERHEAD_BYTES, RecordAccumulator
from mafka4.client.cluster_access import cluster_access
from mafka4.client.futures import Callback, RecordFuture, RecordMetadata
from mafka4.client.leader_routes import LeaderRoutes
from mafka4.client.loop_thread import LoopThread
from mafka4.client.node_links import NodeLinks
from mafka4.client.send_many import ManyCallback, ManyFuture
from mafka4.client.sender import Sender
from mafka4.client.topic_admin import open_companion, open_lane
from mafka4.delays import DELAY_LANE, DELIVER_AT_HEADER, due_time_ms, encode_deliver_at
from mafka4.errors import InvalidRecord, MessageTooLarge, ProducerClosed, UnknownTopic
from mafka4.limits import ProducerConfig, ReadMode
from mafka4.names import lane_topic_name, validate_lane_name, validate_topic_name

Serializer = Callable[[Any], bytes]


def _as_bytes(what: str, value: Any, serializer: Serializer | None) -> bytes | None:
    if value is None:
        return None
    if serializer is not None:
        value = serializer(value)
    if isinstance(value, bytes):
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise InvalidRecord(
        f"message {what} of type {type(value).__name__} is not bytes: pass bytes, or give the "
        f"Producer a {what}_serializer (e.g. {what}_serializer=str.encode)"
    )


def _values_as_bytes(values: Iterable[Any], serializer: Serializer | None) -> list[bytes]:
    """``send_many``'s values as a list of bytes, checked in C when they are bytes already."""
    value_list = [serializer(value) for value in values] if serializer is not None else list(values)
    if set(map(type, value_list)) <= {bytes}:
        return value_list
    for index, value in enumerate(value_list):
        if value is None:
            raise InvalidRecord(f"send_many: message {index}'s value is None: send bytes (an empty value is b'')")
        try:
            value_list[index] = _as_bytes("value", value, None)
        except InvalidRecord as error:
            raise InvalidRecord(f"send_many: message {index}: {error}") from None
    return value_list


def _running_sizes(values: list[bytes], overhead_bytes: int, config: ProducerConfig) -> list[int]:
    """For each i, the buffer bytes of ``send_many``'s ``values[:i + 1]``, after checking each value
    against ``message_bytes_max`` and the whole call against ``buffer_bytes_max``."""
    largest = max(map(len, values)) + overhead_bytes
    if largest > config.message_bytes_max:
        index = next(i for i, value in enumerate(values) if len(value) + overhead_bytes == largest)
        raise MessageTooLarge(
            f"send_many: message {index} of {largest} bytes exceeds message_bytes_max="
            f"{config.message_bytes_max}: split it, or raise message_bytes_max (and batch_bytes_max) "
            f"on the Producer"
        )
    ends = list(accumulate(map(overhead_bytes.__add__, map(len, values))))
    if ends[-1] > config.buffer_bytes_max:
        raise MessageTooLarge(
            f"send_many of {len(values)} messages takes {ends[-1]} bytes of buffer, more than "
            f"buffer_bytes_max={config.buffer_bytes_max} holds: send them in smaller calls, or raise "
            f"buffer_bytes_max on the Producer"
        )
    return ends


def _checked_headers(headers: Iterable[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    pairs = [(str(name), _as_bytes("header", data, None) or b"") for name, data in headers]
    for name, _ in pairs:
        if name.startswith(RESERVED_HEADER_PREFIX):
            raise InvalidRecord(
                f"header {name!r}: names starting with {RESERVED_HEADER_PREFIX!r} are mafka4's own (a virtual "
                f"partition's source, a loss marker); rename the header"
            )
    return pairs


def _checked_timestamp_ms(timestamp_ms: Any) -> int:
    """A caller's timestamp, refused here rather than when its batch is encoded (the header holds an int64)."""
    try:
        stamp_ms = int(timestamp_ms)
    except (TypeError, ValueError):
        stamp_ms = None
    if stamp_ms is None or not 0 <= stamp_ms <= TIMESTAMP_MS_MAX:
        raise InvalidRecord(
            f"timestamp_ms={timestamp_ms!r} is not milliseconds since the epoch (0 to {TIMESTAMP_MS_MAX}): "
            f"pass e.g. time.time_ns() // 1_000_000, or leave it out to stamp the send time"
        )
    return stamp_ms


class Producer:
    def __init__(self, topic: str, connection: object = None,
                 key_serializer: Serializer | None = None, value_serializer: Serializer | None = None,
                 **settings: Any):
        """``connection``: which cluster, as ``client.cluster_access`` reads it (None: the environment's or
        the local one). ``settings`` are ``ProducerConfig`` fields: acks, compression, linger_ms, ..."""
        self.topic = validate_topic_name(topic)
        self.config = ProducerConfig(**settings).resolved()
        self._key_serializer, self._value_serializer = key_serializer, value_serializer
        self._connection, self._settings = connection, settings
        # Lane name -> its id in this topic's layout, or (mafka3 mode) the producer of its own topic.
        self._lanes: dict[str, int | Producer] = {}
        links = NodeLinks(cluster_access(connection))
        routes = LeaderRoutes(links, topic)
        loop_thread = LoopThread(f"mafka4-sender-{topic}")
        try:
            metadata = loop_thread.run(routes.refresh())
        except BaseException:
            loop_thread.call_soon(links.close)
            loop_thread.stop()
            raise
        self._read_mode = metadata.config.read_mode
        self._delay_ms_max = metadata.config.delay_ms_max
        self.partition_count = len(metadata.partitions)
        self._accumulator = RecordAccumulator(topic, self.config, self.partition_count)
        self._sender = Sender(topic, self.config, self._accumulator, routes, links, loop_thread)
        self._closed = False

    def send(self, value: Any, key: Any = None, partition: int | None = None,
             headers: Iterable[tuple[str, bytes]] | None = None, timestamp_ms: int | None = None,
             callback: Callback | None = None, lane: str | None = None, delay_ms: int | None = None,
             deliver_at_ms: int | None = None) -> RecordFuture:
        """Buffer one message; the returned future resolves to its ``RecordMetadata``. ``callback(metadata,
        error)``, if given, runs on the sender thread once the message is answered, as one added with
        the future's ``add_callback`` does, at less cost: no lock is taken to register it. ``lane``:
        the lane to send it in (the module docstring; the first message of a lane waits for it to open).
        ``delay_ms`` / ``deliver_at_ms``: deliver it that long after now / at that epoch time (the
        module docstring); its ``RecordMetadata`` is then its place in the delay topic, its message id."""
        if self._closed:
            raise ProducerClosed(f"producer for {self.topic!r} is closed: create a new Producer")
        checked = _checked_headers(headers) if headers else None
        if delay_ms is not None or deliver_at_ms is not None:
            return self._send_delayed(value, key, partition, checked, timestamp_ms, callback, lane, delay_ms,
                                      deliver_at_ms)
        return self._send_system(value, key, partition, checked, timestamp_ms, callback, lane)

    def _send_delayed(self, value: Any, key: Any, partition: int | None, headers: list | None,
                      timestamp_ms: int | None, callback: Callback | None, lane: str | None,
                      delay_ms: int | None, deliver_at_ms: int | None) -> RecordFuture:
        """Send a delayed message to the delay topic, its due time (and its lane) in its headers."""
        due_ms = due_time_ms(delay_ms=delay_ms, deliver_at_ms=deliver_at_ms, now_ms=time.time_ns() // 1_000_000,
                             delay_ms_max=self._delay_ms_max)
        if partition is not None:
            raise InvalidRecord(f"partition={partition} with a delay: a delayed message is released to the "
                                f"partition its key picks; send it with a key, or without a delay")
        laned = laned_headers(validate_lane_name(lane), headers) if lane else list(headers or ())
        return self._delay_producer()._send_system(value, key, None, [*laned, (DELIVER_AT_HEADER, encode_deliver_at(due_ms))],
                                                   timestamp_ms, callback, None)

    def _delay_producer(self) -> "Producer":
        """The producer of this topic's delay topic, opened (and the topic created) on the first delayed message."""
        route = self._lanes.get(DELAY_LANE)
        if route is None:
            opened = open_companion(self.topic, DELAY_LANE, where=self._connection)
            route = Producer(opened.name, self._connection, self._key_serializer, self._value_serializer,
                             **self._settings)
            kept = self._lanes.setdefault(DELAY_LANE, route)  # another thread's, if it was first
            if kept is not route:
                route.close()
                route = kept
        assert isinstance(route, Producer), route
        return route

    def _send_system(self, value: Any, key: Any, partition: int | None, header_list: list | None,
                     timestamp_ms: int | None, callback: Callback | None, lane: str | None) -> RecordFuture:
        """``send`` of headers checked already, or written by mafka4 itself (``mafka4.`` ones: the delay
        scheduler's release copies and markers)."""
        if self._closed:
            raise ProducerClosed(f"producer for {self.topic!r} is closed: create a new Producer")
        lane_id, elsewhere = self._routed(lane)
        if elsewhere is not None:
            return elsewhere._send_system(value, key, partition, header_list, timestamp_ms, callback, None)
        key_bytes = _as_bytes("key", key, self._key_serializer)
        value_bytes = _as_bytes("value", value, self._value_serializer)
        if value_bytes is None:
            raise InvalidRecord("message value is None: send bytes (an empty value is b'')")
        if lane_id:
            header_list = laned_headers(lane, header_list)
        size_bytes = self._size_bytes(key_bytes, value_bytes, header_list)
        stamp_ms = time.time_ns() // 1_000_000 if timestamp_ms is None else _checked_timestamp_ms(timestamp_ms)
        future, target, opened, closed = self._accumulator.append(
            key_bytes, value_bytes, partition, stamp_ms, header_list, size_bytes, time.monotonic() * 1000, callback,
            lane_id)
        if closed:
            self._sender.batch_ready(target)
        if opened:
            self._sender.batch_opened(target)
        return future

    def send_many(self, values: Iterable[Any], key: Any = None, partition: int | None = None,
                  headers: Iterable[tuple[str, bytes]] | None = None, timestamp_ms: int | None = None,
                  callback: ManyCallback | None = None, lane: str | None = None) -> ManyFuture:
        """Buffer many messages in one call, in order, with one ``key``, ``partition``, ``headers``
        and timestamp for all (as RocketMQ's batch send). The returned future resolves to
        ``SentMessages``, each message's ``RecordMetadata`` in the order given, once every message
        is answered; ``callback(sent, error)``, if given, runs then on the sender thread (at once for
        no values). It fails with the first error of any of its batches, and is not atomic: messages
        in other batches may have been written, as with separate sends. The whole call is accepted
        or refused: a bad value, or a call larger than ``buffer_bytes_max``, raises before any is
        buffered.

        A ``send`` costs a few microseconds of Python per message; here that work is done once per
        call and once per batch the call's messages fill, so a caller who already holds its
        messages in a list sends them at the rate the cluster takes them. ``lane``: as ``send``'s,
        one for every message of the call."""
        if self._closed:
            raise ProducerClosed(f"producer for {self.topic!r} is closed: create a new Producer")
        lane_id, elsewhere = self._routed(lane)
        if elsewhere is not None:
            return elsewhere.send_many(values, key, partition, headers, timestamp_ms, callback)
        value_list = _values_as_bytes(values, self._value_serializer)
        key_bytes = _as_bytes("key", key, self._key_serializer)
        header_list = _checked_headers(headers) if headers else None
        if lane_id:
            header_list = laned_headers(lane, header_list)
        if partition is not None:
            self._accumulator.partitioner.partition(key_bytes, partition)  # refuses a bad one before any byte is taken
        stamp_ms = time.time_ns() // 1_000_000 if timestamp_ms is None else _checked_timestamp_ms(timestamp_ms)
        future = ManyFuture(callback)
        if value_list:
            ends = _running_sizes(value_list, self._size_bytes(key_bytes, b"", header_list), self.config)
            self._accumulator.reserve(ends[-1])
            opened, closed = self._accumulator.append_many(
                key_bytes, value_list, ends, partition, stamp_ms, header_list, time.monotonic() * 1000, future,
                lane_id)
            for target in closed:
                self._sender.batch_ready(target)
            for target in opened:
                self._sender.batch_opened(target)
        else:
            future.seal()
        return future

    def open_lane(self, lane: str) -> None:
        """Learn where lane ``lane`` is (opening it if it is new) now rather than at its first
        message, as a Kafka producer's ``partitionsFor`` fetches a topic's metadata ahead: a sender
        that measures or bounds its latency keeps the lookup out of its first message's."""
        self._lane(validate_lane_name(lane))

    def _routed(self, lane: str | None) -> "tuple[int, Producer | None]":
        """(lane id, None) for a lane of this topic (0: the trunk, no ``lane``), or (0, the producer of
        its own topic) for a lane of a mafka3-mode topic."""
        if not lane:
            return 0, None
        route = self._lane(lane)
        return (0, route) if isinstance(route, Producer) else (route, None)

    def _lane(self, lane: str) -> "int | Producer":
        """Where lane ``lane``'s messages go: its lane id here, or the producer of its own topic (mafka3 mode).

        Asked of a node once per lane (opening the lane if it is new) and remembered: a lane never
        closes, and its id never changes. A mafka3-mode lane whose topic exists is sent to without
        asking: a cluster with no read nodes has no node to ask (its replicas serve data and groups)."""
        route = self._lanes.get(lane)
        if route is not None:
            return route
        route = self._lane_topic_producer(lane) if self._read_mode is ReadMode.MAFKA3 else None
        if route is None:
            opened = open_lane(self.topic, validate_lane_name(lane), where=self._connection)
            if opened.name == self.topic:
                route = opened.lane_id
            else:
                route = Producer(opened.name, self._connection, self._key_serializer, self._value_serializer,
                                 **self._settings)
        kept = self._lanes.setdefault(lane, route)  # another thread's, if it was first
        if kept is not route and isinstance(route, Producer):
            route.close()
        return kept

    def _lane_topic_producer(self, lane: str) -> "Producer | None":
        """A producer of mafka3-mode lane ``lane``'s topic (``<topic>.<lane>``), or None if it does not exist yet."""
        try:
            return Producer(lane_topic_name(self.topic, validate_lane_name(lane)), self._connection,
                            self._key_serializer, self._value_serializer, **self._settings)
        except UnknownTopic:
            return None

    def _lane_producers(self) -> list["Producer"]:
        return [route for route in list(self._lanes.values()) if isinstance(route, Producer)]

    def _size_bytes(self, key: bytes | None, value: bytes, headers: list | None) -> int:
        size = RECORD_OVERHEAD_BYTES + len(value) + (len(key) if key else 0)
        if headers:
            size += sum(len(name) + len(data) + 4 for name, data in headers)
        if size > self.config.message_bytes_max:
            raise MessageTooLarge(
                f"message of {size} bytes exceeds message_bytes_max={self.config.message_bytes_max}: "
                f"split it, or raise message_bytes_max (and batch_bytes_max) on the Producer"
            )
        return size

    def send_sync(self, value: Any, key: Any = None, partition: int | None = None,
                  headers: Iterable[tuple[str, bytes]] | None = None, timeout_s: float | None = None,
                  lane: str | None = None, delay_ms: int | None = None,
                  deliver_at_ms: int | None = None) -> RecordMetadata:
        """Send one message (in ``lane``, delayed, as ``send``) and wait for its acknowledgement (flushes its batch at once)."""
        future = self.send(value, key=key, partition=partition, headers=headers, lane=lane, delay_ms=delay_ms,
                           deliver_at_ms=deliver_at_ms)
        self._sender.flush_all()
        for lane_producer in self._lane_producers():
            lane_producer._sender.flush_all()
        return future.result(timeout_s if timeout_s is not None else self.config.delivery_timeout_ms / 1000 + 5)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send every buffered message now and wait until all are answered; False on timeout."""
        self._sender.flush_all()
        flushed = all([lane_producer.flush(timeout_s) for lane_producer in self._lane_producers()])
        return self._accumulator.wait_idle(timeout_s) and flushed

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, then stop the sender thread. Messages not answered by then fail."""
        if self._closed:
            return
        self._closed = True
        try:
            self.flush(timeout_s)
        finally:
            self._sender.stop()
            for lane_producer in self._lane_producers():
                lane_producer.close(timeout_s)

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
