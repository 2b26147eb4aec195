"""Delayed and nacked traffic in chaos runs (issue 41): its settings, which values the members nack,
the delays a seed draws, and how the judge reads delays, nacks, retries and dead letters.

The run itself is an integration test (tests/integration/test_chaos.py); here hand-made histories
stand for it: a healthy one with a delayed message, a retried one and a poison one passes, and each
planted fault (an early read, a nack with no redelivery, a delayed message never read) is caught.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from mafka4.cli import main
from mafka4.client.retry_policy import RetryPolicy
from mafka4.errors import InvalidConfig
from simulations.chaos.judge import FinalLogs, judge, with_sources
from simulations.chaos.settings import RETRY_POLICY, ChaosSettings
from simulations.chaos.traffic import (awaiting_redelivery, draw_delay_ms, fails, is_retry_stream, nacked_once, poison,
                                       retry_stream)
from simulations.chaos.workload import Members
from simulations.checkers import Ack, Commit, Consumed, DeadLettered, Nack, Send, StoredRecord

GROUP = "chaos"
KEY = b"k00"
# A is nacked once, P is poison, B is plain, D is sent with a delay (due at 5000).
A, P, B, D = b"k00:0000000", b"k00:0000001", b"k00:0000002", b"k00:0000003"
DUE_D = 5_000


# --- settings -------------------------------------------------------------------------------------


def test_a_run_sends_delayed_and_nacked_traffic_by_default_with_short_unordered_retries():
    settings = ChaosSettings()
    assert 0 < settings.delayed_share <= 0.1 and 0 < settings.nack_share <= 0.1 and 0 < settings.poison_share <= 0.05
    assert 1000 <= settings.delay_ms_max <= 4000
    assert settings.retry_policy == RETRY_POLICY
    assert RETRY_POLICY.backoff_ms == (300, 600) and RETRY_POLICY.deliveries_max == 3
    assert RETRY_POLICY.mode.value == "unordered"


@pytest.mark.parametrize("field, value, match", [
    ("delayed_share", 1.5, "delayed_share=1.5 must be a fraction from 0 to 1"),
    ("nack_share", -0.1, "nack_share=-0.1 must be a fraction from 0 to 1"),
    ("poison_share", "0.1", "poison_share='0.1' must be a fraction from 0 to 1"),
    ("delay_ms_max", 999, "delay_ms_max=999 must be from 1000 .* to 60000 ms"),
    ("delay_ms_max", 60_001, "delay_ms_max=60001 must be from 1000"),
    ("retry_policy", RetryPolicy(mode="ordered"), "mode 'ordered': a chaos run retries unordered"),
    ("retry_policy", RetryPolicy(backoff_ms=[30_000], backoff_ms_max=30_000, deliveries_max=4),
     "waits 90000 ms in all before a poison message is dead-lettered; at most 60000 ms"),
    ("retry_policy", {"deliveries_max": 3}, "must be a RetryPolicy"),
])
def test_settings_refuse_shares_delays_and_retry_policies_out_of_bounds(field, value, match):
    with pytest.raises(InvalidConfig, match=match):
        ChaosSettings(**{field: value})


def test_a_run_without_delays_or_nacks_is_allowed():
    settings = ChaosSettings(delayed_share=0, nack_share=0, poison_share=0, delay_ms_max=1000)
    assert settings.delayed_share == settings.nack_share == settings.poison_share == 0


def test_the_command_line_flags_reach_the_settings_and_a_bad_share_is_a_usage_error(monkeypatch, tmp_path):
    import simulations.chaos.run as run

    asked = []
    monkeypatch.setattr(run, "run_chaos", lambda settings: asked.append(settings) or
                        {"seed": settings.seed, "verdict": {"passed": True, "reasons": []}})
    monkeypatch.setattr(run, "summary", lambda report: "summary")
    assert main(["chaos", "--seed", "5", "--delayed-share", "0.2", "--delay-ms-max", "2000", "--nack-share", "0",
                 "--poison-share", "0.03", "--out", str(tmp_path / "chaos.json")]) == 0
    assert [(s.delayed_share, s.delay_ms_max, s.nack_share, s.poison_share) for s in asked] == [(0.2, 2000, 0, 0.03)]
    assert main(["chaos", "--nack-share", "2"]) == 2


# --- which values are nacked, which messages delayed -----------------------------------------------


def test_a_value_is_nacked_once_or_always_by_its_hash_the_same_in_every_process():
    values = [b"k%02d:%07d" % (n % 16, n) for n in range(20_000)]
    once = [v for v in values if nacked_once(v, 0.05)]
    always = [v for v in values if poison(v, 0.01)]
    assert 0.04 < len(once) / len(values) < 0.06 and 0.005 < len(always) / len(values) < 0.015
    assert not set(once) <= set(always) and not set(always) <= set(once), "independent draws"
    assert [v for v in values if nacked_once(v, 0.05)] == once, "a function of the value alone"
    one = once[0]
    assert fails(one, 1, 0.05, 0) and not fails(one, 2, 0.05, 0), "nacked on its first delivery only"
    bad = always[0]
    assert all(fails(bad, delivery, 0, 0.01) for delivery in (1, 2, 3)), "a poison value on every delivery"
    assert not any(fails(v, 1, 0, 0) for v in values[:1000]), "shares of 0 nack nothing"
    assert all(fails(v, 1, 1, 0) for v in values[:1000])


def test_a_seed_delays_the_same_messages_by_the_same_amounts_within_the_bounds():
    def draws(seed: int) -> list[int | None]:
        rng = random.Random(f"chaos-delays-{seed}")
        return [draw_delay_ms(rng, 0.05, 4000) for _ in range(10_000)]

    first = draws(7)
    assert first == draws(7) and first != draws(8)
    delays = [d for d in first if d is not None]
    assert 0.04 < len(delays) / len(first) < 0.06
    assert min(delays) >= 1000 and max(delays) <= 4000 and max(delays) - min(delays) > 2500
    assert draws(7)[:100] == [d for d in draws(7)[:100]], "every draw takes one random() per message"
    assert all(draw_delay_ms(random.Random(1), 0, 4000) is None for _ in range(100))


def test_a_nack_awaits_its_redelivery_until_the_group_reads_the_message_again_or_dead_letters_it():
    nack = Nack(GROUP, "m0", A, 1, 1_000, 1_300)
    assert awaiting_redelivery([read(A, 0, 900), nack]) == [nack]
    assert awaiting_redelivery([read(A, 0, 900), nack, read(A, 0, 1_300, stream=retry_stream(0), delivery=2)]) == []
    assert awaiting_redelivery([nack, read(A, 0, 1_300, group="other")]) == [nack], "another group's read"
    assert awaiting_redelivery([nack, Nack(GROUP, "m0", A, 2, 1_400, None)]) == [], "dead-lettered: nothing to read"


# --- member records --------------------------------------------------------------------------------


class _Lines:
    def __init__(self, name: str, lines: list[dict]):
        self.name, self._lines = name, lines

    def lines(self) -> list[dict]:
        return self._lines


def test_member_lines_become_reads_of_the_topic_and_of_the_retry_topic_and_nacks():
    members = Members.__new__(Members)  # only its records: no cluster, no processes
    members.group = GROUP
    members.all = [_Lines("member-0", [
        {"t": 1.0, "ready": "id"},
        {"t": 2.0, "vp": 3, "offset": 7, "lane": "", "key": KEY.hex(), "value": A.hex(), "delivery": 1, "at_ms": 900},
        {"t": 2.1, "nack": A.hex(), "delivery": 1, "at_ms": 901, "due_ms": 1_201},
        {"t": 3.0, "retry": 0, "offset": 0, "lane": "chaos-1", "key": KEY.hex(), "value": A.hex(), "delivery": 2,
         "at_ms": 1_250},
        {"t": 4.0, "nack": P.hex(), "delivery": 1, "at_ms": 1_300, "due_ms": 1_600},
        {"t": 4.1, "nack_failed": P.hex(), "delivery": 1, "error": "nack: CoordinatorUnavailable: etcd"},
    ])]
    assert [record for _, record in members.consumed()] == [
        Consumed("member-0", "vp3", 7, KEY, A, at_ms=900, group=GROUP, delivery_count=1),
        Consumed("member-0", "retry-p0", 0, KEY, A, lane="chaos-1", at_ms=1_250, group=GROUP, delivery_count=2)]
    assert members.nacks() == [(2.1, Nack(GROUP, "member-0", A, 1, 901, 1_201))], "the failed nack is taken back"
    assert members.errors() == ["member-0: nack: CoordinatorUnavailable: etcd"]
    assert is_retry_stream("retry-p0") and not is_retry_stream("vp0")


# --- the judge ---------------------------------------------------------------------------------------


def read(value: bytes, offset: int, at_ms: int, stream: str = "vp0", delivery: int = 1, group: str = GROUP,
         source: int | None = None) -> Consumed:
    at = offset if source is None else source
    return Consumed("member-0", stream, offset, KEY, value, 0 if stream == "vp0" else None,
                    at if stream == "vp0" else None, at_ms=at_ms, group=group, delivery_count=delivery)


def final_logs(released: list[bytes] = (A, P, B, D)) -> FinalLogs:
    """The topic's p0 holds ``released`` at offsets 0, 1, ... (D released last), fed to vp0 alike."""
    return FinalLogs(
        committed={0: [StoredRecord(offset, KEY, value) for offset, value in enumerate(released)]},
        expected_vp={(0, offset): 0 for offset in range(len(released))},
        physical_replicas={0: {"p0/w0": (len(released), b"")}},
        vp_logs={0: [StoredRecord(offset, KEY, value, 0, offset) for offset, value in enumerate(released)]},
        vp_replicas={},
        unreadable=[],
    )


def written() -> list:
    """A, P, D (delayed) and B sent in that order; D's Ack is the delay topic's p0@0, where the topic holds A."""
    return [Send("producer-0", KEY, A, 0), Send("producer-0", KEY, P, 0), Send("producer-0", KEY, D, 0,
                                                                                deliver_at_ms=DUE_D),
            Send("producer-0", KEY, B, 0), Ack(KEY, A, 0, 0), Ack(KEY, P, 0, 1), Ack(KEY, D, 0, 0), Ack(KEY, B, 0, 2)]


def healthy() -> list:
    """A nacked once and retried; P nacked on each of its 3 deliveries and dead-lettered; D read when due."""
    retry = retry_stream(0)
    return written() + [
        read(A, 0, 1_000), Nack(GROUP, "member-0", A, 1, 1_000, 1_300),
        read(P, 1, 1_000), Nack(GROUP, "member-0", P, 1, 1_000, 1_300),
        read(B, 2, 1_001),
        read(A, 0, 1_300, retry, delivery=2),
        read(P, 1, 1_300, retry, delivery=2), Nack(GROUP, "member-0", P, 2, 1_300, 1_900),
        read(P, 2, 1_900, retry, delivery=3), Nack(GROUP, "member-0", P, 3, 1_900, None),
        read(D, 3, DUE_D),
        Commit(GROUP, "vp0", 4),
        DeadLettered(GROUP, P, 3, 1_901),
    ]


def anomalies(judged: dict) -> dict[str, int]:
    return {kind: count for kind, count in judged["anomalies"].items() if count}


def test_a_healthy_history_with_a_delay_retries_and_a_dead_letter_passes():
    judged = judge(healthy(), final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {}, judged["anomaly_samples"]
    assert (judged["delayed_acknowledged"], judged["nacked"], judged["retried"], judged["dead_lettered"]) == (1, 4, 3, 1)
    assert judged["redelivered"] == 0 and judged["unread_acknowledged"] == 0, "retries are not re-deliveries"


def test_a_delayed_message_read_before_it_is_due_is_early():
    history = [read(D, 3, DUE_D - 1) if record == read(D, 3, DUE_D) else record for record in healthy()]
    judged = judge(history, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {"delivered-early": 1}
    assert "1 ms before it was due at 5000 (sent to be delivered then)" in judged["anomaly_samples"]["not_delivered_early"][0]


def test_a_retry_read_before_its_back_off_passed_is_early_but_the_original_read_again_is_not():
    early = read(A, 0, 1_299, retry_stream(0), delivery=2)
    history = [early if record == read(A, 0, 1_300, retry_stream(0), delivery=2) else record for record in healthy()]
    judged = judge(history, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {"delivered-early": 1}
    # A member crashed before its commit: the next owner reads delivery 1 again at once, and nacks it again.
    again = healthy()
    at = again.index(read(B, 2, 1_001))
    again[at:at] = [read(A, 0, 1_100), Nack(GROUP, "member-0", A, 1, 1_100, 1_400)]
    judged = judge(again, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {}, judged["anomaly_samples"]
    assert judged["redelivered"] == 1


def test_a_nacked_message_neither_read_again_nor_dead_lettered_is_lost_after_its_nack():
    no_retry = [r for r in healthy() if r != read(A, 0, 1_300, retry_stream(0), delivery=2)]
    judged = judge(no_retry, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {"lost-after-nack": 1}
    assert "nacked delivery 1 of b'k00:0000000' at 1000 (due again at 1300)" in \
        judged["anomaly_samples"]["nacked_not_lost"][0]
    no_dead_letter = [r for r in healthy() if not isinstance(r, DeadLettered)]
    judged = judge(no_dead_letter, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {"lost-after-nack": 1}
    assert "(dead-lettered)" in judged["anomaly_samples"]["nacked_not_lost"][0]
    assert anomalies(judge(no_retry, final_logs(), GROUP, drained=False)) == {}, "not drained: nacks not judged"


def test_a_delayed_message_never_read_is_lost_once_drained_and_explained_by_the_delay_topic():
    unread = [r for r in healthy() if r != read(D, 3, DUE_D)]
    judged = judge(unread, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {"lost": 1} and judged["unread_acknowledged"] == 1
    assert judged["unread_explained"] == [
        "delayed b'k00:0000003' acked by the delay topic at p0@0, released to p0@3: in vp0@3; group committed vp0@4: "
        "the group committed past it without reading it"]
    never_released = judge(unread, final_logs([A, P, B]), GROUP, drained=False)
    assert anomalies(never_released) == {"unseen": 1}
    assert never_released["unread_explained"] == ["delayed b'k00:0000003' acked by the delay topic at p0@0: never "
                                                   "released to the topic"]


def test_a_dead_lettered_message_counts_as_read():
    history = [r for r in healthy() if not (isinstance(r, Consumed) and r.value == P)]
    history = [r for r in history if not (isinstance(r, Nack) and r.value == P)]
    judged = judge(history, final_logs(), GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {} and judged["unread_acknowledged"] == 0


def test_a_delayed_message_released_twice_is_neither_a_duplicate_nor_out_of_its_keys_order():
    """At least once: the scheduler released D again after a restart, at p0@5, after E; the member
    read D, E, then D again. Its read takes one source (the VP log's last), out of E's order."""
    e = b"k00:0000004"
    logs = final_logs([A, P, B, D, e, D])
    history = healthy()[:-2] + [Send("producer-0", KEY, e, 0), Ack(KEY, e, 0, 4)]
    reads = [(1.0, read(D, 3, DUE_D, source=None)), (2.0, read(e, 4, DUE_D)), (3.0, read(D, 5, DUE_D))]
    plain = [(t, dataclasses.replace(r, partition=None, partition_offset=None)) for t, r in reads]
    acks = [r for r in history if isinstance(r, Ack) and r.value != D]
    sourced = [r for _, r in with_sources(plain, acks, logs.vp_logs)]
    assert (sourced[0].partition, sourced[0].partition_offset) == (0, 5)
    history = [r for r in history if r != read(D, 3, DUE_D)] + sourced + [Commit(GROUP, "vp0", 6),
                                                                          DeadLettered(GROUP, P, 3, 1_901)]
    judged = judge(history, logs, GROUP, drained=True, drained_at_ms=10_000)
    assert anomalies(judged) == {}, judged["anomaly_samples"]
