"""Queueing tails of the fleet model: Erlang C, inverse-tail draws, quantiles."""

import numpy as np
import pytest

from simulations.fleet.latency import UNSTABLE_WAIT_MS, erlang_c, queue_tail, tail_ms


def test_erlang_c_matches_known_values():
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    assert erlang_c(2, 0.5) == pytest.approx(1 / 3)  # M/M/2: 2 rho^2 / (1 + rho)
    assert erlang_c(32, 0.5) < 0.01 < erlang_c(32, 0.9)


def test_draws_follow_the_tail_and_its_quantile():
    tail = queue_tail(1, 0.5, 2.0, 1.0)  # M/M/1: P(wait > t) = 0.5 exp(-t / 4 ms)
    waits = tail.wait_ms(np.random.default_rng(1).random(400_000))
    assert np.mean(waits == 0) == pytest.approx(0.5, abs=0.01)
    assert np.mean(waits) == pytest.approx(2.0, rel=0.03)  # rho * service / (1 - rho)
    assert np.quantile(waits, 0.999) == pytest.approx(float(tail.quantile_ms(0.999)), rel=0.05)


def test_waits_only_fall_as_utilisation_falls_for_the_same_uniforms():
    uniforms = np.random.default_rng(2).random(10_000)
    busy = queue_tail(8, 0.8, 1.0, 1.0).wait_ms(uniforms)
    calm = queue_tail(8, 0.4, 1.0, 1.0).wait_ms(uniforms)
    assert np.all(calm <= busy) and calm.sum() < busy.sum()


def test_an_overloaded_queue_never_meets_a_target():
    assert queue_tail(4, 1.2, 1.0, 1.0).wait_ms(np.array([0.5]))[0] == UNSTABLE_WAIT_MS


def test_tail_uses_nearest_rank():
    assert tail_ms(np.arange(1, 1001, dtype=float)) == {"tp50": 500.0, "tp99": 990.0, "tp999": 999.0}
