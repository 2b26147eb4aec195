"""The terms both drains share (``mafka4.bench.drain_terms``): one backlog bound and default, one spelling of the
acknowledgement cadence, so that ``bench consume`` and ``bench redis-streams`` refuse and accept the same."""

from __future__ import annotations

import re

import pytest

from benchmarks.redis_streams_figures import RedisStreamsBenchSettings
from mafka4.bench.drain import ConsumeBenchSettings
from mafka4.bench.drain_terms import (ACK_CADENCES_DEFAULT, BACKLOG_BYTES_MAX, AckCadence, AckKind, check_backlog,
                                      parse_cadences)
from mafka4.errors import InvalidConfig
from mafka4.limits import ConsumerConfig


@pytest.mark.parametrize("text, cadence", [
    ("per-read", AckCadence(AckKind.PER_READ)),
    ("none", AckCadence(AckKind.NONE)),
    ("every-5000ms", AckCadence(AckKind.EVERY, 5000)),
    (" Every-20ms ", AckCadence(AckKind.EVERY, 20)),
])
def test_a_cadence_is_spelled_one_way_and_read_back_the_same(text, cadence):
    assert AckCadence.parse(text) == cadence
    assert AckCadence.parse(str(cadence)) == cadence


@pytest.mark.parametrize("text", ["xack", "every-0ms", "every-5s", "every-600001ms", "per read", ""])
def test_a_cadence_that_is_not_one_is_refused_naming_the_spellings(text):
    with pytest.raises(InvalidConfig, match="use per-read, every-<N>ms with N from 1 to 600000"):
        AckCadence.parse(text)


def test_a_mafka4_member_auto_commits_only_at_an_every_cadence_and_as_often():
    assert AckCadence.parse("every-250ms").auto_commit_interval_ms == 250
    assert AckCadence.parse("per-read").auto_commit_interval_ms is None, "it commits after each poll itself"
    assert AckCadence.parse("none").auto_commit_interval_ms is None, "it commits nothing during the drain"


def test_the_default_sweep_is_per_read_and_as_often_as_mafka4_auto_commits():
    assert ACK_CADENCES_DEFAULT == ("per-read", f"every-{ConsumerConfig().auto_commit_interval_ms}ms")
    assert parse_cadences(["none", "per-read"]) == (AckCadence(AckKind.NONE), AckCadence(AckKind.PER_READ))
    for texts in ([], ["per-read", "PER-READ"]):
        with pytest.raises(InvalidConfig, match="each once"):
            parse_cadences(texts)


def test_a_backlog_redis_server_cannot_hold_is_refused_on_both_sides_with_the_same_bound():
    most = BACKLOG_BYTES_MAX // 1024
    check_backlog(most, 1024)
    for settings in (ConsumeBenchSettings, RedisStreamsBenchSettings):
        assert settings(messages=most).messages == most
        with pytest.raises(InvalidConfig, match=re.escape(
                f"messages={most + 1} is out of range: use 1 to {most} (1024-byte messages: the drains of bench consume "
                "and bench redis-streams take equal backlogs, and redis-server holds its backlog in memory, 1024 MiB "
                "at most")):
            settings(messages=most + 1)
    assert ConsumeBenchSettings().messages == RedisStreamsBenchSettings().messages, "equal backlogs by default"
    assert ConsumeBenchSettings().ack_cadences == RedisStreamsBenchSettings().ack_cadences


def test_both_benches_hold_the_cadences_as_spelled_here():
    assert ConsumeBenchSettings(ack_cadences=(" None", "EVERY-10ms")).ack_cadences == ("none", "every-10ms")
    assert RedisStreamsBenchSettings(ack_cadences=("Per-Read",)).cadences == (AckCadence(AckKind.PER_READ),)
