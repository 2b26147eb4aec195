"""Welch's t-test and Student's t tail without scipy, checked against tabulated values."""

import math

import pytest

from simulations.fleet.welch import regularized_incomplete_beta, student_t_p_two_sided, welch_test


@pytest.mark.parametrize("t, df", [(12.7062047, 1), (4.30265273, 2), (2.77644511, 4), (2.22813885, 10),
                                   (2.04227246, 30), (1.95996398, 1e7)])
def test_the_two_sided_p_of_tabulated_t_quantiles_is_five_percent(t, df):
    assert student_t_p_two_sided(t, df) == pytest.approx(0.05, abs=1e-6)
    assert student_t_p_two_sided(-t, df) == pytest.approx(0.05, abs=1e-6)


def test_special_cases_of_the_t_tail_and_the_incomplete_beta():
    assert student_t_p_two_sided(0.0, 3.5) == 1.0
    assert student_t_p_two_sided(math.inf, 3.5) == 0.0
    # df = 2 has a closed form: p = 1 - t / sqrt(2 + t^2)
    assert student_t_p_two_sided(1.5, 2) == pytest.approx(1 - 1.5 / math.sqrt(2 + 1.5 ** 2), abs=1e-12)
    # I_x(1, 1) = x and I_x(a, b) = 1 - I_{1-x}(b, a)
    assert regularized_incomplete_beta(0.3, 1, 1) == pytest.approx(0.3, abs=1e-12)
    assert regularized_incomplete_beta(0.8, 2.5, 0.5) == pytest.approx(1 - regularized_incomplete_beta(0.2, 0.5, 2.5), abs=1e-12)


def test_welch_statistics_of_two_samples():
    test = welch_test([10.0, 11.0, 12.0], [14.0, 16.0, 18.0, 20.0])
    assert test.difference == pytest.approx(17.0 - 11.0)
    assert test.standard_error == pytest.approx(math.sqrt(1.0 / 3 + (20.0 / 3) / 4))
    assert test.t == pytest.approx(6.0 / test.standard_error)
    share_a, share_b = 1.0 / 3, (20.0 / 3) / 4
    assert test.degrees_of_freedom == pytest.approx((share_a + share_b) ** 2 / (share_a ** 2 / 2 + share_b ** 2 / 3))
    assert test.p_two_sided == pytest.approx(student_t_p_two_sided(test.t, test.degrees_of_freedom))
    assert 0.001 < test.p_two_sided < 0.05


def test_samples_without_spread_and_too_small_samples():
    assert welch_test([1.0, 1.0], [1.0, 1.0]).p_two_sided == 1.0
    assert welch_test([1.0, 1.0], [2.0, 2.0]).p_two_sided == 0.0
    with pytest.raises(AssertionError, match="two values"):
        welch_test([1.0], [2.0, 3.0])
