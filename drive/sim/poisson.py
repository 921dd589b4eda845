"""How sure an interventions-per-km figure is: exact Poisson intervals and the two-rate test.

Interventions are counted events over a distance, so their count is Poisson with mean rate x km.

- :func:`rate_interval` is the exact (Garwood 1936) two-sided interval for the rate: the lower bound
  is the rate under which seeing ``n`` or more events has probability ``(1 - level) / 2``, the upper
  bound the rate under which seeing ``n`` or fewer does. 0 in 6 km reads 0-0.61/km; 5 in 0.3 km reads
  5.4-38.9/km (16.7/km observed).
- :func:`rates_differ_p` is the exact conditional test of equal rates: given ``n1 + n2`` events, under
  equal rates ``n1`` is binomial with ``p = km1 / (km1 + km2)``; the two-sided p-value sums the
  outcomes no more likely than the one seen. A p-value above 0.05 means the distances driven are too
  short to tell the two apart.
"""

from __future__ import annotations

import math
from typing import Tuple

__all__ = ["rate_interval", "rates_differ_p", "format_rate", "LEVEL"]

LEVEL = 0.95


def _log_poisson_cdf(n: int, mean: float) -> float:
    """log P(X <= n) for X ~ Poisson(mean)."""
    if mean <= 0.0:
        return 0.0
    log_mean = math.log(mean)
    terms = [k * log_mean - mean - math.lgamma(k + 1) for k in range(n + 1)]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def _solve_mean(n: int, target: float) -> float:
    """The mean at which P(X <= n) equals ``target`` (decreasing in the mean), by bisection."""
    lo, hi = 0.0, n + 10.0 + 10.0 * math.sqrt(n + 1.0)
    while math.exp(_log_poisson_cdf(n, hi)) > target:
        hi *= 2.0
    log_target = math.log(target)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _log_poisson_cdf(n, mid) > log_target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def rate_interval(n: int, exposure: float, level: float = LEVEL) -> Tuple[float, float]:
    """Exact two-sided ``level`` interval of a Poisson rate: ``n`` events over ``exposure`` (e.g. km)."""
    if n < 0 or int(n) != n:
        raise ValueError(f"the event count must be a whole number >= 0, got {n}")
    if not exposure > 0:
        return float("nan"), float("nan")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    tail = 0.5 * (1.0 - level)
    n = int(n)
    lower = 0.0 if n == 0 else _solve_mean(n - 1, 1.0 - tail)  # P(X >= n) = tail
    upper = _solve_mean(n, tail)  # P(X <= n) = tail
    return lower / exposure, upper / exposure


def rates_differ_p(n1: int, exposure1: float, n2: int, exposure2: float) -> float:
    """Two-sided p-value of the exact conditional test that two Poisson rates are equal (docstring)."""
    total = int(n1) + int(n2)
    if total == 0 or not (exposure1 > 0 and exposure2 > 0):
        return 1.0
    p = exposure1 / (exposure1 + exposure2)

    def log_pmf(k: int) -> float:
        return (
            math.lgamma(total + 1)
            - math.lgamma(k + 1)
            - math.lgamma(total - k + 1)
            + k * math.log(p)
            + (total - k) * math.log1p(-p)
        )

    seen = log_pmf(int(n1))
    return min(1.0, sum(math.exp(lp) for lp in map(log_pmf, range(total + 1)) if lp <= seen + 1e-9))


def format_rate(n: int, exposure_km: float, level: float = LEVEL) -> str:
    """``"0.33/km (95% 0.04-1.20)"``: a rate with its exact interval."""
    if not exposure_km > 0:
        return "n/a (no distance driven)"
    lo, hi = rate_interval(n, exposure_km, level)
    return f"{n / exposure_km:.2f}/km ({100 * level:.0f}% {lo:.2f}-{hi:.2f})"
