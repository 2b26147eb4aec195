"""Welch's two-sample t-test, with numpy and math only (pure): the calibration's noise test.

``fit`` keeps a measured difference (the produce latency per extra replica) only if it can be
told from the run-to-run noise. scipy is not a dependency, so the Student t distribution's
tail is computed here from the regularized incomplete beta function:

    P(|T| >= t) = I_x(df / 2, 1 / 2),  x = df / (df + t^2)      (T ~ Student t with df degrees)

and ``I_x(a, b)`` by its continued fraction (modified Lentz, the form of Numerical Recipes'
``betacf``; it converges fast for x < (a + 1) / (a + b + 2), else the symmetry
I_x(a, b) = 1 - I_{1-x}(b, a) is used). Accurate to about 1e-12, far below any p-value that
decides anything here; the unit tests compare it with tabulated t quantiles.

Welch's test does not assume equal variances: t = (mean_b - mean_a) / se, se^2 = s_a^2 / n_a +
s_b^2 / n_b, with the Welch-Satterthwaite degrees of freedom
df = se^4 / ((s_a^2 / n_a)^2 / (n_a - 1) + (s_b^2 / n_b)^2 / (n_b - 1)). When both samples
have no spread at all, se = 0: the test says p = 0 if the means differ and p = 1 if not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONTINUED_FRACTION_TERMS_MAX = 300  # the fraction converges in far fewer for a = df / 2, b = 1 / 2
CONTINUED_FRACTION_EPSILON = 1e-15
TINY = 1e-300  # keeps Lentz's denominators away from 0


@dataclass(frozen=True, slots=True)
class WelchTest:
    """Welch's test of mean(b) - mean(a) against 0."""

    difference: float  # mean(b) - mean(a)
    standard_error: float  # of the difference
    t: float
    degrees_of_freedom: float
    p_two_sided: float


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > TINY else TINY)
    fraction = d
    for m in range(1, CONTINUED_FRACTION_TERMS_MAX + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > TINY else TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > TINY else TINY
            fraction *= c * d
        if abs(c * d - 1.0) < CONTINUED_FRACTION_EPSILON:
            return fraction
    raise AssertionError(f"the incomplete beta fraction did not converge for x={x}, a={a}, b={b}")


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 <= x <= 1 and a, b > 0."""
    assert 0.0 <= x <= 1.0 and a > 0 and b > 0, (x, a, b)
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(1.0 - x, b, a) / b


def student_t_p_two_sided(t: float, degrees_of_freedom: float) -> float:
    """P(|T| >= |t|) for Student's t with ``degrees_of_freedom`` (> 0, need not be whole)."""
    assert degrees_of_freedom > 0, degrees_of_freedom
    if math.isinf(t):
        return 0.0
    return regularized_incomplete_beta(degrees_of_freedom / (degrees_of_freedom + t * t), degrees_of_freedom / 2, 0.5)


def welch_test(a: Sequence[float], b: Sequence[float]) -> WelchTest:
    """Welch's two-sided test that mean(b) differs from mean(a); each sample needs two values or more."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    assert a.size >= 2 and b.size >= 2, f"Welch's test needs two values a sample, not {a.size} and {b.size}"
    difference = float(b.mean() - a.mean())
    share_a, share_b = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    standard_error = math.sqrt(share_a + share_b)
    if standard_error == 0.0:
        return WelchTest(difference, 0.0, math.copysign(math.inf, difference) if difference else 0.0,
                         float(a.size + b.size - 2), 0.0 if difference else 1.0)
    df = (share_a + share_b) ** 2 / (share_a ** 2 / (a.size - 1) + share_b ** 2 / (b.size - 1))
    t = difference / standard_error
    return WelchTest(difference, standard_error, t, float(df), student_t_p_two_sided(t, df))
