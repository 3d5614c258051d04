"""Confidence intervals used by the simulation engines (one place for all of them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["Estimate", "mean_estimate", "proportion_intervals", "ratio_estimate"]


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a two-sided confidence interval.

    Attributes
    ----------
    value : float
    stderr : float
    low, high : float
        Interval bounds at level :attr:`confidence`.
    confidence : float
    """

    value: float
    stderr: float
    low: float
    high: float
    confidence: float

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def as_dict(self) -> dict:
        return {"value": self.value, "stderr": self.stderr, "low": self.low, "high": self.high,
                "confidence": self.confidence}


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(0.5 + confidence / 2.0))


def mean_estimate(total: float, total_sq: float, n: int, confidence: float = 0.95) -> Estimate:
    """Normal-approximation interval for a mean from the running sums Σx and Σx²."""
    mean = total / n
    var = max(total_sq / n - mean * mean, 0.0) * n / max(n - 1, 1)
    se = float(np.sqrt(var / n))
    z = _z(confidence)
    return Estimate(float(mean), se, float(mean - z * se), float(mean + z * se), confidence)


def ratio_estimate(numerators, denominators, confidence: float = 0.95) -> Estimate:
    """Σnum / Σden with a delta-method interval over independent units (batch means).

    Each unit (an independent sequence, or a long segment of one) contributes
    (num_i, den_i); the variance uses residuals num_i − R·den_i and a Student t
    quantile with (units − 1) degrees of freedom.
    """
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    n = num.size
    ratio = float(num.sum() / den.sum())
    if n < 2:
        return Estimate(ratio, float("nan"), float("nan"), float("nan"), confidence)
    resid = num - ratio * den
    se = float(np.sqrt(np.sum(resid**2) / (n * (n - 1))) / den.mean())
    t = float(stats.t.ppf(0.5 + confidence / 2.0, n - 1))
    return Estimate(ratio, se, ratio - t * se, ratio + t * se, confidence)


def proportion_intervals(counts, n: int, confidence: float = 0.95) -> np.ndarray:
    """Wilson score intervals for each count out of ``n``: array (K, 2)."""
    counts = np.asarray(counts, dtype=np.float64)
    z = _z(confidence)
    phat = counts / n
    denom = 1 + z**2 / n
    centre = (phat + z**2 / (2 * n)) / denom
    half = z * np.sqrt(phat * (1 - phat) / n + z**2 / (4 * n * n)) / denom
    return np.clip(np.stack([centre - half, centre + half], axis=-1), 0.0, 1.0)
