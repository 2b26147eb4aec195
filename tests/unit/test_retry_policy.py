"""A group's retry policy: the back-off schedule a nacked message waits out, when it is dead-lettered
instead, and the bad policies refused with the field, the value and what is allowed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mafka4.client.retry_policy import RetryMode, RetryPolicy
from mafka4.errors import InvalidConfig
from mafka4.limits import (RETRY_BACKOFF_MS_MAX_DEFAULT, RETRY_BACKOFF_STEPS_MAX, RETRY_DELAY_MS_MAX,
                           RETRY_DELIVERIES_MAX, SECOND_MS)


def test_the_default_schedule_is_the_issue_s_then_doubles_up_to_two_hours():
    policy = RetryPolicy()
    delays_s = [policy.delay_ms_after(n) // SECOND_MS for n in range(1, 16)]
    assert delays_s == [1, 5, 10, 30, 60, 120, 240, 480, 960, 1920, 3840, 7200, 7200, 7200, 7200]
    assert policy.mode is RetryMode.UNORDERED and policy.deliveries_max == 16
    assert RETRY_BACKOFF_MS_MAX_DEFAULT == 2 * 3600 * SECOND_MS


def test_a_message_is_delivered_deliveries_max_times_then_dead_lettered():
    policy = RetryPolicy(deliveries_max=3)
    assert [policy.exhausted(n) for n in (1, 2, 3, 4)] == [False, False, True, True]
    assert RetryPolicy(deliveries_max=1).exhausted(1), "one delivery: the first failure dead-letters"


def test_a_nack_s_own_delay_replaces_the_schedule_up_to_the_longest_delay():
    policy = RetryPolicy(backoff_ms=(1000,), backoff_ms_max=1000)
    assert policy.delay_ms_after(1, retry_after_ms=0) == 0
    assert policy.delay_ms_after(9, retry_after_ms=RETRY_DELAY_MS_MAX) == RETRY_DELAY_MS_MAX, "not the group's cap"
    for bad in (-1, RETRY_DELAY_MS_MAX + 1, 1.5, "5", True):
        with pytest.raises(InvalidConfig, match=r"retry_after_ms=.* must be an integer from 0 to 604800000"):
            policy.delay_ms_after(1, retry_after_ms=bad)


def test_a_schedule_of_zeros_retries_at_once_for_ever():
    policy = RetryPolicy(backoff_ms=(0,), backoff_ms_max=0)
    assert {policy.delay_ms_after(n) for n in range(1, 100)} == {0}


def test_a_delivery_count_below_one_is_a_caller_s_bug():
    with pytest.raises(AssertionError, match="the first delivery is 1"):
        RetryPolicy().delay_ms_after(0)
    with pytest.raises(AssertionError, match="the first delivery is 1"):
        RetryPolicy().exhausted(0)


@pytest.mark.parametrize("settings, error", [
    ({"backoff_ms": ()}, r"backoff_ms has 0 steps, must have at least 1 and at most 64"),
    ({"backoff_ms": (1,) * (RETRY_BACKOFF_STEPS_MAX + 1)}, r"backoff_ms has 65 steps"),
    ({"backoff_ms": "1000"}, r"backoff_ms='1000' must be a list of delays in ms"),
    ({"backoff_ms": 1000}, r"backoff_ms=1000 must be a list"),
    ({"backoff_ms": (1000, 500)}, r"backoff_ms\[1\]=500 must be at least backoff_ms\[0\]=1000: .* never shortens"),
    ({"backoff_ms": (1000, -1)}, r"backoff_ms\[1\]=-1 must be at least 0 and at most backoff_ms_max=7200000"),
    ({"backoff_ms": (10_000,), "backoff_ms_max": 5000}, r"backoff_ms\[0\]=10000 .* at most backoff_ms_max=5000: "
                                                         r"shorten the step or raise backoff_ms_max"),
    ({"backoff_ms": (1000, 2.5)}, r"backoff_ms\[1\]=2.5 must be an integer"),
    ({"backoff_ms": (True,)}, r"backoff_ms\[0\]=True must be an integer"),
    ({"backoff_ms_max": RETRY_DELAY_MS_MAX + 1}, r"backoff_ms_max=604800001 must be at least 0 and at most 604800000"),
    ({"deliveries_max": 0}, r"deliveries_max=0 must be at least 1 and at most 1000"),
    ({"deliveries_max": RETRY_DELIVERIES_MAX + 1}, r"deliveries_max=1001 must be at least 1 and at most 1000"),
    ({"deliveries_max": "16"}, r"deliveries_max='16' must be an integer"),
    ({"mode": "fifo"}, r"mode='fifo' is not valid: use 'unordered' .* or 'ordered'"),
])
def test_bad_policies_are_refused_naming_the_field_the_value_and_the_range(settings, error):
    with pytest.raises(InvalidConfig, match=error):
        RetryPolicy(**settings)


def test_a_policy_takes_lists_and_strings_and_holds_tuples_and_modes():
    policy = RetryPolicy(backoff_ms=[5, 5, 9], backoff_ms_max=9, mode="ordered")
    assert policy.backoff_ms == (5, 5, 9) and policy.mode is RetryMode.ORDERED
    assert hash(policy) == hash(RetryPolicy(backoff_ms=(5, 5, 9), backoff_ms_max=9, mode=RetryMode.ORDERED))


def test_a_stored_policy_reads_back_and_fields_it_lacks_take_their_defaults():
    policy = RetryPolicy(backoff_ms=(100, 200), backoff_ms_max=60_000, deliveries_max=5, mode=RetryMode.ORDERED)
    stored = policy.to_json()
    assert stored == {"backoff_ms": [100, 200], "backoff_ms_max": 60_000, "deliveries_max": 5, "mode": "ordered"}
    assert RetryPolicy.from_json(stored) == policy
    assert RetryPolicy.from_json({"deliveries_max": 4}) == RetryPolicy(deliveries_max=4)
    with pytest.raises(InvalidConfig, match="deliveries_max=0"):
        RetryPolicy.from_json({"deliveries_max": 0})
    with pytest.raises(InvalidConfig, match="must be an object"):
        RetryPolicy.from_json([100, 200])


@st.composite
def policies(draw):
    cap = draw(st.integers(0, RETRY_DELAY_MS_MAX))
    steps = sorted(draw(st.lists(st.integers(0, cap), min_size=1, max_size=RETRY_BACKOFF_STEPS_MAX)))
    return RetryPolicy(backoff_ms=tuple(steps), backoff_ms_max=cap, deliveries_max=draw(st.integers(1, RETRY_DELIVERIES_MAX)))


@given(policies(), st.integers(1, 10_000))
def test_the_delays_of_one_message_never_shrink_never_pass_the_cap_and_follow_the_steps(policy, count):
    delays = [policy.delay_ms_after(n) for n in range(max(1, count - 70), count + 1)]
    assert delays == sorted(delays)
    assert all(0 <= delay <= policy.backoff_ms_max for delay in delays)
    if count <= len(policy.backoff_ms):
        assert policy.delay_ms_after(count) == policy.backoff_ms[count - 1]
    else:
        last = policy.backoff_ms[-1]
        assert policy.delay_ms_after(count) in (policy.backoff_ms_max, last << (count - len(policy.backoff_ms)))


@given(policies())
def test_the_doubling_reaches_the_cap_unless_the_last_step_is_zero(policy):
    far = policy.delay_ms_after(len(policy.backoff_ms) + 64)
    assert far == (0 if policy.backoff_ms[-1] == 0 else policy.backoff_ms_max)


@given(policies())
def test_every_valid_policy_survives_being_stored(policy):
    assert RetryPolicy.from_json(policy.to_json()) == policy
