"""The lease-keeping rule every keeper follows: when to refresh, when a lease no longer counts."""

from __future__ import annotations

import ast

import pytest

from mafka4.metadata.lease import LeaseLife, refresh_due_ms, refresh_interval_ms
import mafka4.metadata.lease as lease_module


def test_a_lease_counts_as_expired_a_whole_ttl_after_the_last_confirmed_refresh_was_sent():
    life = LeaseLife.granted(ttl_s=5, sent_ms=1_000).answered(sent_ms=10_000, remaining_ttl_s=5)

    assert not life.expired(now_ms=14_999)
    assert life.expired(now_ms=15_000)


def test_expiry_counts_from_the_send_not_from_etcds_late_answer():
    # The refresh sent at 10 000 ms is answered only at 12 000 ms: etcd may have renewed the
    # lease as early as 10 000 ms, so it may be gone from 15 000 ms on, not 17 000 ms.
    life = LeaseLife.granted(ttl_s=5, sent_ms=0).answered(sent_ms=10_000, remaining_ttl_s=5)

    assert life.expired(now_ms=15_000)


def test_a_grant_counts_as_a_confirmed_refresh_sent_when_the_grant_was():
    life = LeaseLife.granted(ttl_s=2, sent_ms=500)

    assert not life.expired(now_ms=2_499)
    assert life.expired(now_ms=2_500)


def test_a_lease_etcd_answers_with_ttl_zero_is_expired_at_once_and_for_good():
    life = LeaseLife.granted(ttl_s=5, sent_ms=0).answered(sent_ms=1_000, remaining_ttl_s=0)

    assert life.gone and life.expired(now_ms=1_000)
    with pytest.raises(AssertionError):
        life.answered(sent_ms=2_000, remaining_ttl_s=5)


def test_refreshes_are_due_every_third_of_the_ttl_after_the_last_was_sent_and_at_once_before_any():
    assert refresh_interval_ms(6) == 2_000
    assert refresh_interval_ms(10) == 3_333
    assert refresh_due_ms(None, 6) == 0
    assert refresh_due_ms(7_000, 6) == 9_000


def test_two_refreshes_in_a_row_may_go_unanswered_before_the_lease_counts_as_expired():
    life = LeaseLife.granted(ttl_s=6, sent_ms=0)
    third = refresh_due_ms(refresh_due_ms(0, 6), 6)  # the third refresh after the grant

    assert third == 4_000 and not life.expired(third)


def test_the_rule_imports_no_io_clock_or_randomness():
    tree = ast.parse(open(lease_module.__file__).read())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not imported & {"ray", "etcd3", "grpc", "time", "random", "os", "socket", "threading", "asyncio"}, imported
    assert imported <= {"__future__", "dataclasses", "mafka4.limits"}, imported  # limits: the refreshes per TTL
