"""``bench kafka-clients``'s settings and figures (``benchmarks.kafka_clients_settings``)."""

from __future__ import annotations

import pytest

from benchmarks.kafka_clients_settings import KafkaClientsBenchSettings, latency_figures, ratios
from mafka4.errors import InvalidConfig


def test_latency_figures_are_nearest_rank_percentiles():
    assert latency_figures([float(v) for v in range(1, 1001)])["p99_9_ms"] == 999.0
    assert latency_figures([])["p50_ms"] is None
    assert latency_figures([2.0, 1.0]) == {"count": 2, "p50_ms": 1.0, "p99_ms": 2.0, "p99_9_ms": 2.0}


def run(client: str, repetition: int, msgs_s: float, p999: float, consume: float) -> dict:
    return {"client": client, "repetition": repetition, "produce_msgs_s": msgs_s,
            "latency": {"p99_9_ms": p999}, "consume_msgs_s": consume}


def test_ratios_pair_the_two_clients_of_each_repetition_and_skip_an_unpaired_one():
    runs = [run("mafka4", 0, 1000, 10, 500), run("kafka", 0, 2000, 5, 1000), run("mafka4", 1, 1000, 10, 500)]
    assert ratios(runs) == {"kafka_over_mafka4": [
        {"repetition": 0, "produce_msgs_s": 2.0, "produce_p99_9_ms": 0.5, "consume_msgs_s": 2.0}]}


@pytest.mark.parametrize("field, value", [("messages", 0), ("rate_msgs_s", True), ("latency_s", 0)])
def test_bad_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(InvalidConfig, match=field):
        KafkaClientsBenchSettings(**{field: value})
