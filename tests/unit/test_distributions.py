"""The distributions the verdict reads, against their closed forms (no reference library:
each expected value is a formula, not a number copied from the code).

- the regularized incomplete beta: I_x(a, 1) = x^a, I_x(1, b) = 1 - (1 - x)^b,
  I_x(1/2, 1/2) = (2/pi) asin(sqrt(x));
- Student's t: df = 1 is Cauchy, 1/2 + atan(t)/pi; df = 2 is 1/2 + t / (2 sqrt(2 + t^2));
  a very large df is the normal distribution;
- F(2, d2): 1 - (1 + 2f/d2)^(-d2/2).
"""

from __future__ import annotations

import math
import statistics

import pytest

from perfgate.stats.decide import combined_df
from perfgate.stats.distributions import (
    _incomplete_beta,
    f_cdf,
    log_spread,
    median,
    median_efficiency,
    t_cdf,
    t_quantile,
)

XS = (0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99)


@pytest.mark.parametrize("x", XS)
@pytest.mark.parametrize("k", (0.5, 1.0, 2.5, 7.0, 30.0))
def test_incomplete_beta_matches_its_closed_forms(x, k):
    assert _incomplete_beta(k, 1.0, x) == pytest.approx(x**k, rel=1e-9, abs=1e-12)
    assert _incomplete_beta(1.0, k, x) == pytest.approx(1 - (1 - x) ** k, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("x", XS)
def test_incomplete_beta_of_halves_is_the_arcsine_law(x):
    expected = 2 / math.pi * math.asin(math.sqrt(x))
    assert _incomplete_beta(0.5, 0.5, x) == pytest.approx(expected, rel=1e-9)


def test_incomplete_beta_ends():
    assert _incomplete_beta(2.0, 3.0, 0.0) == 0.0 and _incomplete_beta(2.0, 3.0, 1.0) == 1.0


@pytest.mark.parametrize("t", (-12.0, -3.0, -1.0, -0.2, 0.0, 0.2, 1.0, 3.0, 12.0))
def test_t_cdf_matches_cauchy_and_two_degrees_of_freedom(t):
    assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, rel=1e-9)
    assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), rel=1e-9)


@pytest.mark.parametrize("t", (-2.5, -1.0, 0.5, 1.96, 3.0))
def test_t_cdf_with_many_degrees_of_freedom_is_normal(t):
    assert t_cdf(t, 1e7) == pytest.approx(statistics.NormalDist().cdf(t), abs=1e-6)
    assert t_cdf(t, 4000) == pytest.approx(statistics.NormalDist().cdf(t), abs=5e-4)


@pytest.mark.parametrize("p", (0.6, 0.9, 0.975, 0.995))
@pytest.mark.parametrize("df", (1, 2))
def test_t_quantile_inverts_the_closed_forms(p, df):
    if df == 1:
        expected = math.tan(math.pi * (p - 0.5))
    else:  # invert 1/2 + t / (2 sqrt(2 + t^2))
        a = 2 * p - 1
        expected = a * math.sqrt(2 / (1 - a * a))
    assert t_quantile(p, df) == pytest.approx(expected, rel=1e-6)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, rel=1e-6)


@pytest.mark.parametrize("f", (0.05, 0.5, 1.0, 3.0, 20.0))
@pytest.mark.parametrize("d2", (2.0, 4.0, 10.0, 40.0))
def test_f_cdf_with_two_numerator_degrees_matches_its_closed_form(f, d2):
    assert f_cdf(f, 2, d2) == pytest.approx(1 - (1 + 2 * f / d2) ** (-d2 / 2), rel=1e-9)


def test_f_cdf_of_nothing_is_zero():
    assert f_cdf(0.0, 3, 7) == 0.0 and f_cdf(-1.0, 3, 7) == 0.0


def test_median_log_spread_and_median_efficiency():
    assert median([5.0, 1.0, 3.0]) == 3.0 and median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert log_spread([2.0]) is None
    e = math.e
    assert log_spread([1.0, e, e * e]) == pytest.approx(1.0)  # ln: 0, 1, 2; sample sd 1
    assert median_efficiency(1) == 1.0  # one run: the median is the run
    assert median_efficiency(10_000) == pytest.approx(math.sqrt(math.pi / 2))


def test_welch_satterthwaite_degrees_of_freedom():
    # two equal variances with equal df: the sum's df is the sum of the dfs
    assert combined_df(1.0, 4.0, 1.0, 4.0) == pytest.approx(8.0)
    # one term alone keeps its own df
    assert combined_df(1.0, 5.0, 0.0, 9.0) == pytest.approx(5.0)
    # (v1 + v2)^2 / (v1^2/d1 + v2^2/d2)
    assert combined_df(2.0, 3.0, 1.0, 10.0) == pytest.approx(9 / (4 / 3 + 1 / 10))
