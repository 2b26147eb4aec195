"""Intent values: what a client writes and what the controller answers (no etcd)."""

from __future__ import annotations

import pytest

from mafka4.errors import InvalidReshard, MafkaError, ReshardConflict, UnknownTopic
from mafka4.metadata.intents import Intent, IntentKind, IntentResult, new_intent_id


def test_ids_sort_in_submission_order():
    ids = [new_intent_id() for _ in range(50)]
    assert ids == sorted(ids) and len(set(ids)) == 50


def test_an_intent_round_trips_through_its_json():
    intent = Intent(new_intent_id(), IntentKind.SPLIT, "orders", {"vp": 3}, revision=17)
    back = Intent.from_json(intent.intent_id, intent.to_json(), revision=17)
    assert back == intent and intent.to_json()["kind"] == "split"


def test_a_result_gives_its_value_or_raises_the_controller_s_error_as_its_own_class():
    assert IntentResult.from_json(IntentResult(True, {"epochs": []}).to_json()).unwrap() == {"epochs": []}
    refused = IntentResult.of_error(InvalidReshard("virtual_partitions=5 is out of range: ..."))
    with pytest.raises(InvalidReshard, match="virtual_partitions=5 is out of range"):
        IntentResult.from_json(refused.to_json()).unwrap()
    assert IntentResult.of_error(ReshardConflict("retry")).retriable
    with pytest.raises(UnknownTopic):
        IntentResult(False, None, "UnknownTopic", "topic 'x' does not exist").unwrap()


def test_an_error_class_this_client_does_not_know_is_still_a_mafka_error_with_its_name():
    with pytest.raises(MafkaError, match="SomethingNew: what happened"):
        IntentResult(False, None, "SomethingNew", "what happened").unwrap()
    with pytest.raises(MafkaError, match="KeyError"):
        IntentResult(False, None, "KeyError", "not a mafka4 error").unwrap()
