"""Exact Poisson intervals of interventions per km, and the test of two rates, against scipy."""

import pytest
from scipy import stats

from drive.sim.poisson import format_rate, rate_interval, rates_differ_p


@pytest.mark.parametrize("n,km", [(0, 6.0), (1, 0.3), (5, 0.3), (2, 6.01), (17, 6.0), (400, 24.0)])
def test_the_interval_is_garwoods_exact_chi_square_interval(n, km):
    lo, hi = rate_interval(n, km)
    want_lo = stats.chi2.ppf(0.025, 2 * n) / 2 / km if n else 0.0
    want_hi = stats.chi2.ppf(0.975, 2 * n + 2) / 2 / km
    assert lo == pytest.approx(want_lo, rel=1e-9, abs=1e-12)
    assert hi == pytest.approx(want_hi, rel=1e-9)


def test_five_interventions_in_the_demos_old_robustness_distance_read_5_to_39_per_km():
    lo, hi = rate_interval(5, 0.3)
    assert (round(lo, 1), round(hi, 1)) == (5.4, 38.9)
    assert format_rate(5, 0.3) == "16.67/km (95% 5.41-38.89)"


@pytest.mark.parametrize(
    "n1,km1,n2,km2", [(2, 6.0, 0, 6.0), (17, 6.0, 2, 6.0), (5, 0.3, 3, 6.0), (0, 1.0, 0, 9.0)]
)
def test_the_two_rate_test_is_the_exact_conditional_binomial_test(n1, km1, n2, km2):
    p = rates_differ_p(n1, km1, n2, km2)
    want = stats.binomtest(n1, n1 + n2, km1 / (km1 + km2)).pvalue if n1 + n2 else 1.0
    assert p == pytest.approx(want, rel=1e-9)


def test_a_count_must_be_a_whole_number():
    with pytest.raises(ValueError, match="whole number"):
        rate_interval(-1, 1.0)
