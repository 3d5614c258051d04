"""Confidence intervals used by the simulation engines (one place for all of them)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Estimate", "check_confidence", "mean_estimate", "proportion_intervals", "ratio_estimate"]


def check_confidence(confidence) -> float:
    """A confidence level strictly between 0 and 1 (else ``ValueError`` naming ``confidence``)."""
    from ..checks import check_real

    c = check_real(confidence, "confidence", low=0.0, high=1.0, low_open=True)
    if c >= 1.0:
        raise ValueError(f"confidence: expected a level in (0, 1), got {confidence!r}")
    return c


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

    def record_fields(self, key: str) -> dict:
        """``{key: {mean, low, high}}`` for a record, or ``{key: None, key_status: why}`` where the interval is
        undefined (fewer than two units: one batch)."""
        if all(np.isfinite(x) for x in (self.value, self.low, self.high)):
            return {key: {"mean": self.value, "low": self.low, "high": self.high}}
        return {key: None, f"{key}_status": "undefined: fewer than two independent units (batches) to take the "
                                           "interval from"}

    def as_dict(self) -> dict:
        """JSON-ready fields; an undefined interval (too few units) is null with ``interval_status`` saying why."""
        if all(np.isfinite(x) for x in (self.stderr, self.low, self.high)):
            return {"value": self.value, "stderr": self.stderr, "low": self.low, "high": self.high,
                    "confidence": self.confidence}
        return {"value": self.value, "stderr": None, "low": None, "high": None, "confidence": self.confidence,
                "interval_status": "undefined: fewer than two independent units (runs, blocks or sequence segments)"}


def _z(confidence: float) -> float:
    # scipy.stats.norm.ppf's own kernel: scipy.stats takes a second to import
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2.0))


def mean_estimate(total: float, total_sq: float, n: int, confidence: float = 0.95) -> Estimate:
    """Normal-approximation interval for a mean from the running sums Σx and Σx².

    With fewer than two observations the spread is unknown: ``stderr``, ``low`` and
    ``high`` are NaN (undefined), never a zero-width interval.
    """
    confidence = check_confidence(confidence)
    mean = total / n
    if n < 2:
        return Estimate(float(mean), float("nan"), float("nan"), float("nan"), confidence)
    var = max(total_sq / n - mean * mean, 0.0) * n / max(n - 1, 1)
    se = float(np.sqrt(var / n))
    z = _z(confidence)
    return Estimate(float(mean), se, float(mean - z * se), float(mean + z * se), confidence)


def ratio_estimate(numerators, denominators, confidence: float = 0.95, *, floor: float = -np.inf) -> Estimate:
    """Σnum / Σden with a delta-method interval over independent units (batch means).

    Each unit (an independent sequence, or a long segment of one) contributes
    (num_i, den_i); the variance uses residuals num_i − R·den_i and a Student t
    quantile with (units − 1) degrees of freedom. ``floor``: a bound the ratio cannot go below (block efficiency
    >= 1: every iteration emits a token); the interval is cut there (a t-interval on two units can reach below it),
    which keeps its coverage.
    """
    confidence = check_confidence(confidence)
    num = np.asarray(numerators, dtype=np.float64)
    den = np.asarray(denominators, dtype=np.float64)
    n = num.size
    ratio = float(num.sum() / den.sum())
    if n < 2:
        return Estimate(ratio, float("nan"), float("nan"), float("nan"), confidence)
    resid = num - ratio * den
    se = float(np.sqrt(np.sum(resid**2) / (n * (n - 1))) / den.mean())
    # scipy.stats.t.ppf's own kernel, without importing scipy.stats
    from scipy.special import stdtrit

    t = float(stdtrit(n - 1, 0.5 + confidence / 2.0))
    return Estimate(ratio, se, max(ratio - t * se, floor), ratio + t * se, confidence)


def proportion_intervals(counts, n: int, confidence: float = 0.95) -> np.ndarray:
    """Wilson score intervals for each count out of ``n``: array (K, 2)."""
    counts = np.asarray(counts, dtype=np.float64)
    z = _z(confidence)
    phat = counts / n
    denom = 1 + z**2 / n
    centre = (phat + z**2 / (2 * n)) / denom
    half = z * np.sqrt(phat * (1 - phat) / n + z**2 / (4 * n * n)) / denom
    return np.clip(np.stack([centre - half, centre + half], axis=-1), 0.0, 1.0)
