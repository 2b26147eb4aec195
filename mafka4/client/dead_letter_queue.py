"""A group's dead letters of a topic: read them, and replay them to the topic (``mafka4 dlq``).

``read_dead_letters(topic, group)`` reads ``<topic>.<group>.dlq`` (``mafka4.dead_letters``) from
its start to its end as it was when the read began (``Consumer.end_offsets``), without a group, and returns each record with what its headers say. Records
of another (topic, group) pair that names the same topic (``dead_letters``' module doc), and
records mafka4 did not write there, are left out and counted.

``replay_dead_letters(topic, group)`` sends each dead letter not replayed before back to
``topic``, in its lane, with its own headers and the replay key (``dead_letters.replay_headers``):
it reads the dead-letter topic as a member of group ``<group>.mafka4-replay``, and commits after
the sends are acknowledged, so a second replay sends only what came since. Idempotently as far as
the replayer goes: a replay that dies between its sends and its commit sends those again, with
the same replay key (``dead_letters.replay_key_of``), by which a consumer can drop the second.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mafka4.client.cluster_access import cluster_access
from mafka4.client.cluster_metadata import topic_metadata
from mafka4.client.consumer import Consumer
from mafka4.client.message import Message
from mafka4.client.producer import Producer
from mafka4.dead_letters import DeadLetter, dlq_topic_name, parse_dead_letter, replay_headers
from mafka4.errors import InvalidDeadLetter, UnknownTopic
from mafka4.limits import DEAD_LETTERS_POLL_MS

REPLAY_GROUP_SUFFIX = ".mafka4-replay"


@dataclass
class DeadLetters:
    """What a read of a dead-letter topic found: the group's dead letters of the topic, in order."""

    letters: list[tuple[Message, DeadLetter]] = field(default_factory=list)
    others: int = 0  # another (topic, group) pair's, named alike
    invalid: int = 0  # records mafka4 did not dead-letter


def read_dead_letters(topic: str, group: str, where: object = None, max_messages: int | None = None) -> DeadLetters:
    """``group``'s dead letters of ``topic`` (the module docstring); ``UnknownTopic`` if it has none."""
    name = dlq_topic_name(topic, group)
    found = DeadLetters()
    try:
        consumer = Consumer(name, connection=where, from_beginning=True)
    except UnknownTopic:
        raise UnknownTopic(f"group {group!r} has no dead letters of topic {topic!r}: no topic {name!r} (it is "
                           f"created by the group's first dead letter)") from None
    with consumer:
        ends = consumer.end_offsets()
        while not _read_to(consumer, ends) and (max_messages is None or len(found.letters) < max_messages):
            for message in consumer.poll(DEAD_LETTERS_POLL_MS):
                _sort(message, topic, group, found)
    if max_messages is not None:
        del found.letters[max_messages:]
    return found


def _read_to(consumer: Consumer, ends: dict[int, int]) -> bool:
    """True once ``consumer`` has read every partition to ``ends``."""
    return all(consumer.position(partition) >= end for partition, end in ends.items())


def _sort(message: Message, topic: str, group: str, found: DeadLetters) -> None:
    try:
        letter = parse_dead_letter(message.headers)
    except InvalidDeadLetter:
        found.invalid += 1
        return
    if (letter.topic, letter.group) != (topic, group):
        found.others += 1
    else:
        found.letters.append((message, letter))


@dataclass(frozen=True, slots=True)
class Replayed:
    replayed: int
    skipped: int  # not the group's dead letters of the topic (``DeadLetters.others`` and ``invalid``)


def replay_dead_letters(topic: str, group: str, where: object = None) -> Replayed:
    """Send ``group``'s dead letters of ``topic`` not replayed yet back to ``topic`` (the module docstring)."""
    name = dlq_topic_name(topic, group)
    try:
        topic_metadata(cluster_access(where), topic)
    except UnknownTopic:
        raise UnknownTopic(f"cannot replay the dead letters of {name!r}: topic {topic!r} no longer exists; create it "
                           f"again (its dead letters are kept) or read them with 'mafka4 dlq show {group} {topic}'") from None
    replayed = skipped = 0
    with Consumer(name, group=group + REPLAY_GROUP_SUFFIX, connection=where, from_beginning=True,
                  auto_commit_interval_ms=None) as consumer, Producer(topic, where, acks="all") as producer:
        ends = None
        while True:
            messages = consumer.poll(DEAD_LETTERS_POLL_MS)
            if ends is None and consumer.assignment():
                ends = consumer.end_offsets()  # once the group's member reads the partitions it owns
                ends = ends if set(ends) == set(consumer.assignment()) else None
            if not messages:
                if ends is not None and _read_to(consumer, ends):
                    break
                continue
            found = DeadLetters()
            for message in messages:
                _sort(message, topic, group, found)
            skipped += found.others + found.invalid
            futures = [producer._send_system(message.value, message.key, None, replay_headers(message.headers),
                                             message.timestamp_ms, None, letter.lane or None)
                       for message, letter in found.letters]
            producer.flush()
            try:
                for future in futures:
                    future.result(0)  # raises the send's error
            except Exception:
                for message in reversed(messages):  # nothing is committed past a dead letter not replayed
                    consumer.seek(message.partition, message.offset)
                raise
            consumer.commit()
            replayed += len(futures)
    return Replayed(replayed, skipped)
