"""The Kafka listener's answer to INIT_PRODUCER_ID (API 22, v0-4), on a read node.

An idempotent Kafka producer asks any broker for a producer id and epoch before it sends its
first batch, and again when it must start its sequences over (KIP-360). The answer:

- **A new producer id**: a random 63-bit number (as ``client.sender.new_producer_id`` draws for
  mafka4's own producers), epoch 0. Read nodes hand out ids without asking each other: two
  producers drawing the same id is as unlikely as a collision of random 63-bit numbers, and
  would be caught by their sequences (OUT_OF_ORDER), not by a silent merge. The node keeps
  nothing: the id becomes state only where its batches are admitted
  (``kafka.producer_sessions``).
- **v3+ with the producer's id and current epoch**: the same id with the next epoch (KIP-360's
  bump, which Java clients and kafka-python send; librdkafka asks for a new id instead). This
  node's memory of the producer forgets the old epoch's sequences and fences its batches; other
  nodes learn the new epoch from its first batch there (sequence 0 of a newer epoch). An epoch
  that cannot grow (32767) gets a new id, as a Kafka broker does. Only one of the two given is
  INVALID_REQUEST, as on a Kafka broker.
- **A transactional id** (any but null) is refused: transactions are not served here.
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which Kafka clients take as final (a code they retry
  would have them ask for ever); the response has no message field, so the reason is logged.
  An empty one is INVALID_REQUEST, as on a Kafka broker.

**Authorization.** Kafka asks for IDEMPOTENT_WRITE on the cluster, or since 2.8 WRITE on any
topic (KIP-679). Here every authenticated principal gets an id, and Produce's per-topic check
(``produce`` on the topic) is the only one: a producer id is a random number that names no
resource, grants nothing and costs the node nothing (Kafka's check guards the cluster-wide id
blocks its brokers allocate and store; nothing is allocated or stored here). A principal
allowed to produce nowhere can do nothing with one.
"""

from __future__ import annotations

import datetime
import logging
import secrets
from dataclasses import dataclass
from typing import Callable

from mafka4.kafka import error_codes
from mafka4.kafka.producer_sessions import EPOCH_LAST, ProducerSessions
from mafka4.protocol.session import Session

logger = logging.getLogger(__name__)

NO_PRODUCER_ID, NO_PRODUCER_EPOCH = -1, -1


@dataclass(frozen=True, slots=True)
class ProducerIdAnswer:
    error_code: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    bumped: bool = False  # an existing producer's next epoch: its older epochs are fenced
    reason: str = ""  # why it was refused, for the log


def producer_id_answer(transactional_id: str | None, producer_id: int, producer_epoch: int,
                       new_id: Callable[[], int]) -> ProducerIdAnswer:
    """The answer to an InitProducerId request (v0-2 have no id and epoch: pass -1 for both);
    ``new_id`` draws a new producer id. See the module docstring."""
    if transactional_id is not None:
        if not transactional_id:
            return ProducerIdAnswer(error_codes.INVALID_REQUEST, reason="an empty transactional id")
        return ProducerIdAnswer(error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, reason=(
            f"transactional id {transactional_id!r}: transactions are not served by mafka4's Kafka listener; "
            f"produce without a transactional.id (idempotent producers are served)"))
    if (producer_id, producer_epoch) != (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
        if producer_id < 0 or producer_epoch < 0:
            return ProducerIdAnswer(error_codes.INVALID_REQUEST, reason=(
                f"producer id {producer_id} with epoch {producer_epoch}: give both (a producer's current id and "
                f"epoch, to bump its epoch) or neither (for a new id)"))
        if producer_epoch < EPOCH_LAST:
            return ProducerIdAnswer(error_codes.NONE, producer_id, producer_epoch + 1, bumped=True)
    drawn = new_id()
    assert 0 <= drawn < 2**63, drawn
    return ProducerIdAnswer(error_codes.NONE, drawn, 0)


def new_producer_id() -> int:
    """A random 63-bit producer id; collisions between producers are negligible at this size."""
    return secrets.randbits(63)


class KafkaProducerHandlers:
    """INIT_PRODUCER_ID over the listener's ``ProducerSessions`` (shared with Produce)."""

    def __init__(self, sessions: ProducerSessions, new_id: Callable[[], int] = new_producer_id):
        self._sessions, self._new_id = sessions, new_id

    def handlers(self) -> dict:
        return {22: self.init_producer_id}

    async def init_producer_id(self, session: Session, request) -> dict:
        answer = producer_id_answer(request.transactional_id, getattr(request, "producer_id", NO_PRODUCER_ID),
                                    getattr(request, "producer_epoch", NO_PRODUCER_EPOCH), self._new_id)
        if answer.reason:
            logger.info("refused InitProducerId of %s (%s): %s", session.principal, session.peer, answer.reason)
        elif answer.bumped:
            self._sessions.bump(answer.producer_id, answer.producer_epoch)
        return {"throttle_time": datetime.timedelta(0), "error_code": answer.error_code,
                "producer_id": answer.producer_id, "producer_epoch": answer.producer_epoch}
