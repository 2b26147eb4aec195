"""InitProducerId: a new random producer id, an epoch bump for a producer that asks with its own
(KIP-360), transactions refused; every served version answered in its own shape."""

from __future__ import annotations

import asyncio
import datetime
import io

from kafka.protocol.producer.transaction import InitProducerIdResponse as KafkaPythonInitProducerIdResponse
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer

from mafka4.kafka import error_codes
from mafka4.kafka.listener import SERVED
from mafka4.kafka.producer_handlers import KafkaProducerHandlers, new_producer_id, producer_id_answer
from mafka4.kafka.producer_sessions import Decision, ProducerSessions
from mafka4.kafka.shapes import shaped
from mafka4.protocol.session import Session

INIT_PRODUCER_ID = 22


def drawn(value: int):
    return lambda: value


def test_a_producer_without_an_id_gets_a_new_one_at_epoch_0():
    answer = producer_id_answer(None, -1, -1, drawn(12345))
    assert (answer.error_code, answer.producer_id, answer.producer_epoch, answer.bumped) == (0, 12345, 0, False)


def test_new_ids_are_random_63_bit_numbers():
    ids = {new_producer_id() for _ in range(100)}
    assert len(ids) == 100 and all(0 <= pid < 2**63 for pid in ids)
    assert max(ids) >= 2**58, "drawn from 63 bits, not a counter"


def test_a_producer_asking_with_its_id_and_epoch_gets_the_next_epoch_of_the_same_id():
    answer = producer_id_answer(None, 777, 4, drawn(1))
    assert (answer.error_code, answer.producer_id, answer.producer_epoch, answer.bumped) == (0, 777, 5, True)


def test_an_epoch_that_cannot_grow_gets_a_new_id():
    answer = producer_id_answer(None, 777, 32767, drawn(99))
    assert (answer.producer_id, answer.producer_epoch, answer.bumped) == (99, 0, False)


def test_only_one_of_id_and_epoch_is_an_invalid_request():
    for producer_id, epoch in ((777, -1), (-1, 3), (-5, -5)):
        answer = producer_id_answer(None, producer_id, epoch, drawn(1))
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (error_codes.INVALID_REQUEST, -1, -1)


def test_a_transactional_id_is_refused_with_a_code_clients_do_not_retry():
    answer = producer_id_answer("payments", -1, -1, drawn(1))
    assert answer.error_code == error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "transactions are not served" in answer.reason and answer.producer_id == -1
    assert producer_id_answer("", -1, -1, drawn(1)).error_code == error_codes.INVALID_REQUEST


def _request(version: int, transactional_id=None, producer_id=-1, producer_epoch=-1):
    values = {"transactional_id": transactional_id, "transaction_timeout": datetime.timedelta(seconds=60),
              "producer_id": producer_id, "producer_epoch": producer_epoch}
    return shaped(load_request_schema(INIT_PRODUCER_ID, version), values)


def _encoded(version: int, description: dict) -> bytes:
    out = io.BytesIO()
    response = load_response_schema(INIT_PRODUCER_ID, version)
    entity_writer(response)(out, shaped(response, description))
    return out.getvalue()


def test_every_served_version_is_answered_and_read_back_by_kafka_python():
    assert SERVED[INIT_PRODUCER_ID] == (0, 4)
    handlers = KafkaProducerHandlers(ProducerSessions(10), new_id=drawn(2**62 + 5))
    session = Session("alice", "127.0.0.1:5000")
    for version in range(0, 5):
        description = asyncio.run(handlers.init_producer_id(session, _request(version)))
        assert (description["error_code"], description["producer_id"], description["producer_epoch"]) == (
            0, 2**62 + 5, 0)
        decoded = KafkaPythonInitProducerIdResponse.decode(io.BytesIO(_encoded(version, description)),
                                                           version=version)
        assert (decoded.error_code, decoded.producer_id, decoded.producer_epoch) == (0, 2**62 + 5, 0)


def test_a_bump_fences_the_old_epoch_in_the_listeners_memory():
    sessions = ProducerSessions(10)
    sessions.admit(777, 2, "orders", 0, 0, 5)
    sessions.recorded(777, 2, "orders", 0, 0, 5, 100)
    handlers = KafkaProducerHandlers(sessions)
    description = asyncio.run(handlers.init_producer_id(Session("alice", "p"), _request(3, None, 777, 2)))
    assert (description["producer_id"], description["producer_epoch"]) == (777, 3)
    assert sessions.admit(777, 2, "orders", 0, 5, 5).decision is Decision.FENCED
    assert sessions.admit(777, 3, "orders", 0, 0, 5).decision is Decision.NEW


def test_a_refusal_answers_no_id():
    handlers = KafkaProducerHandlers(ProducerSessions(10))
    description = asyncio.run(handlers.init_producer_id(Session("alice", "p"), _request(4, "payments")))
    assert (description["error_code"], description["producer_id"], description["producer_epoch"]) == (
        error_codes.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
