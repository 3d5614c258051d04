r"""The audit's statistics: a pooled randomised probability-integral transform, binned G and KS tests, the bias it
estimates and the samples needed to detect a given bias.

Each emitted token z comes with the target row q it should follow (a different row pair for nearly every sample).
Order the row's tokens by q(x)/p(x) ascending (ties by id), so that a sampler leaning toward its draft moves mass
toward the low end; then

.. math::
    U = F_q(z^-) + V\,q(z), \qquad V \sim \mathrm{Uniform}(0, 1),

is uniform on (0, 1) when z ~ q, whatever the row, and independent across samples. The audit pools U over every
sample and tests uniformity twice: a G-test on K equal bins and a Kolmogorov–Smirnov test (shifts). The bias
estimate is the total variation between the binned U and uniform, with a bootstrap interval; the power curve
gives, for a sampler that mixes a fraction ε of draft-row mass into the emitted token (TV δ = ε·E[TV(p, q)]), the
binned test's power at n samples from the noncentral χ² (noncentrality n Σ_k (f_k − 1/K)² K).
"""

from __future__ import annotations

import numpy as np

__all__ = ["BINS", "MIN_EXPECTED", "bias_interval", "per_pair_test", "binned_test", "mixture_bin_law", "pit_tables", "pit_values", "power_curve",
           "samples_needed"]

#: Equal bins of the binned G-test on U.
BINS = 20


def pit_tables(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rank (…, V): each token's position in the q/p order, before (…, V): q mass of the tokens ranked below)."""
    ratio = np.divide(q, p, out=np.full(q.shape, np.inf), where=p > 0)
    order = np.lexsort((np.broadcast_to(np.arange(q.shape[-1]), q.shape), ratio), axis=-1)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.broadcast_to(np.arange(q.shape[-1]), q.shape), axis=-1)
    q_sorted = np.take_along_axis(q, order, axis=-1)
    cum_before = np.cumsum(q_sorted, axis=-1) - q_sorted
    return rank, np.take_along_axis(cum_before, rank, axis=-1)


def pit_values(tokens: np.ndarray, q: np.ndarray, before: np.ndarray, rng) -> np.ndarray:
    """Randomised PIT of ``tokens`` (n,) against rows ``q`` (n, V) with their ``before`` table (n, V)."""
    rows = np.arange(tokens.size)
    return before[rows, tokens] + rng.random(tokens.size) * q[rows, tokens]


def binned_test(u: np.ndarray, bins: int = BINS) -> dict:
    """G-test of ``u`` against uniform on ``bins`` equal bins, and the KS test: counts, p-values."""
    counts = np.bincount(np.minimum((u * bins).astype(np.int64), bins - 1), minlength=bins)
    expected = np.full(bins, u.size / bins)
    from scipy import stats  # here, not at import: scipy.stats takes about a second to import

    g = stats.power_divergence(counts, expected, lambda_="log-likelihood")
    ks = stats.kstest(u, "uniform")
    return {"counts": counts.tolist(), "g_statistic": float(g.statistic), "g_p_value": float(g.pvalue),
            "ks_statistic": float(ks.statistic), "ks_p_value": float(ks.pvalue)}


#: Cells of the per-pair test with fewer expected counts are merged into one.
MIN_EXPECTED = 5.0


def per_pair_test(counts: np.ndarray, q: np.ndarray) -> dict:
    """Every row pair's first-token counts (P, V) against its target row (P, V), pooled over the pairs: Pearson's X²
    per pair on the tokens expected at least :data:`MIN_EXPECTED` times (the rest merged into one cell, itself merged
    into the least likely of them when it is expected less often), summed. A pair's X² has mean k − 1 and variance
    2(k − 1) + (Σ_i 1/π_i − k² − 2k + 2)/n exactly (k cells of masses π_i, n draws), so the sum is referred to the
    scaled chi-square law c·χ²_ν with that mean and variance (Satterthwaite: ν = 2 mean² / var, c = var / (2 mean)),
    which keeps the sum's right skew — the normal law with the same two moments has too thin a tail and called a
    lossless sampler biased (p ≈ 1e-6) in about one audit in sixteen at 2,000 samples. Summed G-statistics drift
    upward with few draws per pair; this does not. It sees biases whose direction changes from row to row, which the
    pooled PIT averages out. A token the target never emits fails it outright."""
    counts = np.asarray(counts, dtype=float)
    n = counts.sum(axis=1)
    live = n > 0
    counts, q, n = counts[live], q[live], n[live]
    big = n[:, None] * q >= MIN_EXPECTED
    rest_mass = (q * ~big).sum(axis=1)
    cells_obs = np.concatenate([np.where(big, counts, 0.0), (counts * ~big).sum(axis=1, keepdims=True)], axis=1)
    cells_p = np.concatenate([np.where(big, q, 0.0), rest_mass[:, None]], axis=1)
    used = np.concatenate([big, (rest_mass > 0)[:, None]], axis=1)
    small_rest = (rest_mass > 0) & (n * rest_mass < MIN_EXPECTED) & big.any(axis=1)  # into the least likely big cell
    rows, into = np.flatnonzero(small_rest), np.argmin(np.where(big, q, np.inf), axis=1)[small_rest]
    cells_obs[rows, into] += cells_obs[rows, -1]
    cells_p[rows, into] += cells_p[rows, -1]
    cells_obs[rows, -1], cells_p[rows, -1], used[rows, -1] = 0.0, 0.0, False
    k = used.sum(axis=1)
    ok = k >= 2
    exp = n[:, None] * cells_p
    x2 = np.where(used, (cells_obs - exp) ** 2 / np.where(used, exp, 1.0), 0.0).sum(axis=1)
    inv = np.where(used, 1.0 / np.where(used, cells_p, 1.0), 0.0).sum(axis=1)
    mean = np.where(ok, k - 1.0, 0.0)
    var = np.where(ok, 2 * (k - 1.0) + (inv - k**2 - 2 * k + 2) / n, 0.0)
    stat, mu, sd = float(x2[ok].sum()), float(mean.sum()), float(np.sqrt(max(var.sum(), 1e-300)))
    impossible = int((counts * (q <= 0)).sum())
    z = (stat - mu) / sd if mu > 0 else 0.0
    from scipy import stats  # here, not at import: scipy.stats takes about a second to import

    if impossible > 0:
        p = 0.0
    elif mu > 0:  # c·χ²_ν with the statistic's exact mean and variance (docstring)
        nu, scale = 2 * mu**2 / sd**2, sd**2 / (2 * mu)
        p = float(stats.chi2.sf(stat / scale, nu))
    else:
        p = 1.0
    return {"statistic": stat, "mean": mu, "sd": sd, "z": float(z), "p_value": p, "pairs": int(live.sum()),
            "tokens_the_target_never_emits": impossible}


def bias_interval(counts, draws: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict:
    """The total variation between the binned U and uniform: a bias-corrected estimate (2 TV − its bootstrap mean:
    sampling noise alone makes the raw value positive), a simultaneous interval from per-bin binomial intervals
    (Bonferroni over the bins: the true binned TV lies in ½ Σ_k max(0, |f_k − 1/K| ∓ h_k) with the stated
    confidence), and the raw value an unbiased sampler stays below at this size (99 %)."""
    counts = np.asarray(counts, dtype=float)
    n, K = counts.sum(), counts.size
    f = counts / n
    tv = 0.5 * np.abs(f - 1 / K).sum()
    rng = np.random.default_rng(seed)
    boot = 0.5 * np.abs(rng.multinomial(int(n), f, size=draws) / n - 1 / K).sum(axis=1)
    null = 0.5 * np.abs(rng.multinomial(int(n), np.full(K, 1 / K), size=draws) / n - 1 / K).sum(axis=1)
    from scipy import stats  # here, not at import: scipy.stats takes about a second to import

    z = stats.norm.ppf(1 - (1 - confidence) / (2 * K))
    half = z * np.sqrt(np.maximum(f * (1 - f), 1 / (K * n)) / n)
    dev = np.abs(f - 1 / K)
    return {"binned_tv": max(0.0, 2 * tv - float(boot.mean())), "binned_tv_raw": float(tv),
            "low": float(0.5 * np.maximum(dev - half, 0.0).sum()), "high": float(0.5 * (dev + half).sum()),
            "null_level": float(np.quantile(null, 0.99)), "confidence": confidence,
            "interval": "simultaneous per-bin binomial intervals (Bonferroni over the bins)",
            "null_level_note": "the raw binned TV an unbiased sampler stays below at this size (99 %)"}


def mixture_bin_law(p: np.ndarray, q: np.ndarray, rank: np.ndarray, before: np.ndarray, bins: int = BINS) -> np.ndarray:
    """Bin law of U when the emitted token is drawn from the draft row p instead of q (rows (n, V)), averaged over
    the rows: each token's p mass spread uniformly over its PIT interval [before, before + q)."""
    edges = np.linspace(0.0, 1.0, bins + 1)
    width = np.where(q > 0, q, 1.0)
    # G(u) = Σ_z p(z) clip((u − before(z)) / q(z), 0, 1), the CDF of U under p-draws; tokens with q = 0 sit at before
    cdf = np.stack([np.sum(p * np.where(q > 0, np.clip((u - before) / width, 0.0, 1.0), (before <= u).astype(float)),
                           axis=-1) for u in edges], axis=-1)
    return np.diff(cdf, axis=-1).mean(axis=0)


def _power(n, w2: float, bins: int, alpha: float) -> np.ndarray:
    from scipy import stats  # here, not at import: scipy.stats takes about a second to import

    crit = stats.chi2.ppf(1 - alpha, bins - 1)
    return stats.ncx2.sf(crit, bins - 1, np.asarray(n, dtype=float) * w2)


def samples_needed(w2: float, bins: int = BINS, alpha: float = 1e-3, power: float = 0.99) -> float:
    """Samples at which the binned test reaches ``power`` for an effect of size w² = Σ (f_k − 1/K)² K."""
    if w2 <= 0:
        return float("inf")
    lo, hi = 1.0, 1.0
    while _power(hi, w2, bins, alpha) < power:
        hi *= 2
        if hi > 2.0**62:  # never, at any sample count (a level so small its critical value is infinite)
            return float("inf")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _power(mid, w2, bins, alpha) < power else (lo, mid)
    return float(hi)


def power_curve(g: np.ndarray, mean_tv: float, n: int, deltas=None, bins: int = BINS, alpha: float = 1e-3) -> dict:
    """For TV biases δ (emitted law (1 − ε) q + ε p with ε = δ / E[TV(p, q)]): the binned test's power at ``n``
    samples and the samples it needs for power 0.99; ``g`` is :func:`mixture_bin_law`."""
    deltas = np.array([0.005, 0.01, 0.02, 0.03, 0.05, 0.1] if deltas is None else deltas, dtype=float)
    dev = (np.asarray(g) - 1.0 / bins) * bins  # f_k − 1/K = ε (g_k − 1/K)
    w2_unit = float(np.sum(dev**2) / bins)  # w² at ε = 1
    eps = np.minimum(deltas / max(mean_tv, 1e-12), 1.0)
    w2 = eps**2 * w2_unit
    return {"deltas": deltas.tolist(), "epsilon": eps.tolist(), "power_at_n": _power(n, w2, bins, alpha).tolist(),
            "samples_for_power_0.99": [samples_needed(w, bins, alpha) for w in w2], "alpha": alpha, "n": int(n),
            "bias_model": "emitted token from (1 − ε) q + ε p, TV δ = ε · mean TV(p, q) over the rows"}
