"""The delay scheduler: releases every topic's delayed messages at their due time (``mafka4.delays``).

    python -m mafka4.scheduling.delay_service --etcd HOST:PORT[,...] --cluster NAME --home DIR

The active controller runs it as its child (``runtime.controller_process``): one per cluster, and
another once a standby controller takes over. It stops when its parent is gone (a controller
killed outright cannot stop it), within ``DELAY_TOPICS_SCAN_INTERVAL_S``. It is a client of the cluster's ports like any
other (a ``Consumer`` and ``Producer``s, authenticated with the credential of ``--home``), and
keeps its state in etcd (``keys.delay_state``): no Ray.

Every ``DELAY_TOPICS_SCAN_INTERVAL_S`` it lists the delay topics and runs a ``DelayTopicWorker``
on a thread for each new one (and stops those whose topic is gone). A worker reads its delay topic
from every partition with a consumer without a group, from the offsets its state key names
(else from the start), and applies each record to its ``DelayLog``. Once its positions reach the
high watermarks the partitions had when it started (``Consumer.end_offsets``), it has read to the
end of the topic (``delay_log``'s rule: nothing is released before); from then on it releases what
is due, up to ``DELAY_RELEASES_PER_POLL_MAX`` per poll, each as a release copy produced to the
topic (a retry: to its group's retry topic, ``mafka4.retries``) with acks=all, whose
acknowledgement sends its release marker. A poll waits at most ``DELAY_POLL_MS_MAX``, or until the
next due time: the precision of a release is a poll, plus the produce and the read of its copy.

Every ``DELAY_STATE_INTERVAL_MS`` a worker writes its state: the offsets to read again from
(``DelayLog.restart_offsets``), what waits by horizon (``topic describe``), its counts, when it
started and when it had read to the end of the topic (``caught_up_ms``; None before: a restart's
recovery time is the difference).
"""

from __future__ import annotations

import argparse
import logging
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path

from mafka4.client.bootstrap import client_credential
from mafka4.client.cluster_access import ClusterAccess, live_addresses
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from mafka4.batch_payload import laned_headers
from mafka4.delays import RELEASE_OF_HEADER, MessageId, delay_topic_name, delayed_topic_of, encode_release_of
from mafka4.errors import MafkaError, UnknownTopic
from mafka4.limits import (DELAY_POLL_MS_MAX, DELAY_RELEASES_PER_POLL_MAX, DELAY_STATE_INTERVAL_MS,
                           DELAY_TOPICS_SCAN_INTERVAL_S)
from mafka4.metadata import keys
from mafka4.metadata.store import MetadataStore
from mafka4.physical.topics import TopicStore
from mafka4.retries import retry_group_of, retry_topic_name
from mafka4.scheduling.delay_log import DelayLog, Release

log = logging.getLogger("mafka4.delays")

# Release copies and markers: sent at once (a due message waits for nothing else), acknowledged by
# every in-sync replica (a release marked but not written would lose the message).
_PRODUCER_SETTINGS = {"acks": "all", "linger_ms": 1}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class DelayTopicWorker:
    """Releases the delayed messages of one delay topic (the module docstring), on its own thread."""

    def __init__(self, delay_topic: str, topic: str, access: ClusterAccess, store: MetadataStore, cluster: str):
        self.delay_topic, self.topic = delay_topic, topic
        self._access, self._store, self._cluster = access, store, cluster
        self._stop = threading.Event()
        self._failed: queue.SimpleQueue[MessageId] = queue.SimpleQueue()
        self._retry_producers: dict[str, Producer] = {}  # group -> producer of its retry topic
        self._thread = threading.Thread(target=self._run, name=f"delays-{topic}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._serve()
        except UnknownTopic:
            log.info("delay topic %s or its topic is gone: its worker stops", self.delay_topic)
        except Exception:
            log.exception("the worker of delay topic %s failed; it starts again on the next scan", self.delay_topic)

    def _serve(self) -> None:
        found = self._store.get(keys.delay_state(self._cluster, self.topic))
        state = found.value if found is not None else {}
        consumer = Consumer(self.delay_topic, connection=self._access, from_beginning=True)
        markers = Producer(self.delay_topic, self._access, **_PRODUCER_SETTINGS)
        releases = Producer(self.topic, self._access, **_PRODUCER_SETTINGS)
        try:
            for partition, offset in state.get("restart_offsets", {}).items():
                consumer.seek(int(partition), int(offset))
            self._loop(DelayLog(), consumer, markers, releases)
        finally:
            for client in (consumer, markers, releases, *self._retry_producers.values()):
                try:
                    client.close()
                except MafkaError as error:
                    log.warning("delay topic %s: closing a client failed: %s", self.delay_topic, error)

    def _loop(self, delays: DelayLog, consumer: Consumer, markers: Producer, releases: Producer) -> None:
        self._started_ms, self._caught_up_ms = _now_ms(), None
        ends = consumer.end_offsets()  # read to these before releasing anything (``delay_log``'s rule)
        caught_up = False
        next_state_ms = 0
        wait_ms = 0
        while not self._stop.is_set():
            messages = consumer.poll(timeout_ms=wait_ms)
            for message in messages:
                delays.apply(message.partition, message.offset, message.key, message.value, message.headers,
                             message.timestamp_ms)
            if not caught_up and all(consumer.position(partition) >= end for partition, end in ends.items()):
                caught_up, self._caught_up_ms = True, _now_ms()
            while not self._failed.empty():
                delays.release_failed(self._failed.get())
            now_ms = _now_ms()
            if caught_up:
                for release in delays.take_due(now_ms, DELAY_RELEASES_PER_POLL_MAX):
                    self._release(release, markers, releases)
            if now_ms >= next_state_ms:
                self._write_state(delays, now_ms)
                next_state_ms = now_ms + DELAY_STATE_INTERVAL_MS
            next_due_ms = delays.next_due_ms()
            wait_ms = DELAY_POLL_MS_MAX if next_due_ms is None else max(0, min(DELAY_POLL_MS_MAX, next_due_ms - now_ms))

    def _release(self, release: Release, markers: Producer, releases: Producer) -> None:
        message_id = release.message_id

        def released(_metadata, error) -> None:
            if error is not None:
                log.warning("delay topic %s: release of %s failed, due again: %s", self.delay_topic, message_id, error)
                self._failed.put(message_id)
                return
            markers._send_system(b"", None, message_id.partition,
                                 [(RELEASE_OF_HEADER, encode_release_of(message_id.offset))], None, marked, None)

        def marked(_metadata, error) -> None:
            if error is not None:  # the copy is out: released again after a restart (at least once)
                log.warning("delay topic %s: the release marker of %s failed: %s", self.delay_topic, message_id, error)

        group = retry_group_of(release.headers)
        try:
            if group is None:
                releases._send_system(release.value, release.key, None, list(release.headers), release.timestamp_ms,
                                      released, release.lane or None)
            else:  # a retry (``mafka4.retries``): to the group's retry topic, its lane kept as a header
                self._retry_producer(group)._send_system(release.value, release.key, None,
                                                         laned_headers(release.lane, release.headers),
                                                         release.timestamp_ms, released, None)
        except UnknownTopic as error:
            if group is None:
                raise  # the topic is gone: so is its delay topic, and this worker stops
            # Its group's retry topic was deleted (with the group): the retry is dropped, marked released.
            log.warning("delay topic %s: retry %s dropped: %s", self.delay_topic, message_id, error)
            self._retry_producers.pop(group, None)
            released(None, None)
        except MafkaError as error:
            log.warning("delay topic %s: release of %s refused, due again: %s", self.delay_topic, message_id, error)
            self._failed.put(message_id)

    def _retry_producer(self, group: str) -> Producer:
        """The producer of ``group``'s retry topic (the nack that scheduled the retry created it)."""
        producer = self._retry_producers.get(group)
        if producer is None:
            producer = self._retry_producers[group] = Producer(retry_topic_name(self.topic, group), self._access,
                                                               **_PRODUCER_SETTINGS)
        return producer

    def _write_state(self, delays: DelayLog, now_ms: int) -> None:
        state = {"restart_offsets": {str(p): offset for p, offset in delays.restart_offsets().items()},
                 "waiting": delays.waiting(), "horizons": delays.counts_by_horizon(now_ms),
                 "counts": vars(delays.counts), "written_ms": now_ms, "started_ms": self._started_ms,
                 "caught_up_ms": self._caught_up_ms}
        try:
            self._store.put(keys.delay_state(self._cluster, self.topic), state)
        except Exception as error:  # etcd briefly away: releases go on, the state is written later
            log.warning("delay topic %s: its state was not written: %s", self.delay_topic, error)


class DelayService:
    """Keeps a worker running for every delay topic of the cluster (the module docstring)."""

    def __init__(self, store: MetadataStore, cluster: str, home: Path):
        self._store, self._cluster, self._home = store, cluster, home
        self._workers: dict[str, DelayTopicWorker] = {}

    def run(self, stop: threading.Event, parent_pid: int | None = None) -> None:
        """Until ``stop``, or until its parent (the controller that started it) is gone: a
        controller killed outright cannot stop its child, and an orphan beside the next
        controller's scheduler would release every message twice."""
        while not stop.is_set():
            if parent_pid is not None and os.getppid() != parent_pid:
                log.warning("the controller that started this scheduler (pid %d) is gone: stopping", parent_pid)
                break
            try:
                self.scan()
            except Exception as error:  # etcd or the cluster's ports briefly away
                log.warning("delay topics not scanned, again in %d s: %s", DELAY_TOPICS_SCAN_INTERVAL_S, error)
            stop.wait(DELAY_TOPICS_SCAN_INTERVAL_S)
        for worker in self._workers.values():
            worker.stop()
        for worker in self._workers.values():
            worker.join(DELAY_TOPICS_SCAN_INTERVAL_S)

    def scan(self) -> None:
        """Start a worker for each delay topic without a live one; stop those whose topic is gone."""
        names = TopicStore(self._store, self._cluster).names()
        delay_topics = {name: topic for name in names if (topic := delayed_topic_of(name)) is not None}
        for name in list(self._workers):
            if name not in delay_topics:
                self._workers.pop(name).stop()
        # The states of delay topics gone (with their topics), this scheduler's or an earlier one's.
        for item in self._store.get_prefix(keys.delay_states_prefix(self._cluster)):
            topic = item.key.rsplit("/", 1)[1]
            if delay_topic_name(topic) not in delay_topics:
                self._store.delete(item.key)
        for name, topic in delay_topics.items():
            worker = self._workers.get(name)
            if worker is None or not worker.alive:
                access = ClusterAccess(live_addresses(self._store, self._cluster), client_credential(self._home))
                self._workers[name] = worker = DelayTopicWorker(name, topic, access, self._store, self._cluster)
                worker.start()
                log.info("releasing the delayed messages of %s", topic)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mafka4.scheduling.delay_service", description=__doc__.splitlines()[0])
    parser.add_argument("--etcd", required=True, help="etcd endpoint HOST:PORT, or every member: HOST:PORT,...")
    parser.add_argument("--cluster", required=True)
    parser.add_argument("--home", type=Path, required=True, help="the home whose credential the scheduler uses")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    store = MetadataStore(args.etcd)
    try:
        DelayService(store, args.cluster, args.home).run(stop, parent_pid=os.getppid())
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
