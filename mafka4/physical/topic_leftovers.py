"""What a delete of a topic name answers when no topic of that name exists, and what it cleans up then.

A topic's creation may go in several etcd transactions, its config key last
(``TopicStore.create``): one that died between them leaves keys below an absent config key. So
may a node that wrote a key of a topic (a feed position, a read loss) just after it was deleted.
No reader sees such *leftovers* (every reader looks a topic up by its config key), and the next
creation of the name deletes them. A delete of the name deletes them too, as Kafka's
``kafka-topics --delete`` of a topic that does not exist answers: ``UnknownTopic``, here saying
what was deleted, so a user who saw a creation fail can clean up with the command a Kafka user
would try, and learns that nothing of a topic was there.

Only the controller deletes leftovers (``control.topic_control.delete_topic``): it executes
intents one at a time, so when it runs a delete no creation of the name is under way, and a
creation between its transactions looks exactly like leftovers. A node that finds keys below an
absent config key therefore asks the controller (``frontend.topic_intents.delete_topic``) rather
than deleting them or answering at once.

Pure: the answer's words.
"""

from __future__ import annotations

from mafka4.errors import UnknownTopic


def absent_topic(name: str, leftover_keys_deleted: int = 0) -> UnknownTopic:
    """The error of a request for topic ``name`` when no topic of that name exists; for a delete,
    naming the leftover keys it removed (if any)."""
    assert leftover_keys_deleted >= 0
    if leftover_keys_deleted == 0:
        return UnknownTopic(f"topic {name!r} does not exist: create it with 'mafka4 topic create {name}'")
    return UnknownTopic(
        f"topic {name!r} does not exist; deleted the {leftover_keys_deleted} key(s) left below its name in etcd "
        f"(by a creation that failed between its transactions, or written late for a deleted topic): "
        f"create it with 'mafka4 topic create {name}'")
