"""The compiled recursion of the OTM-k cuts without replacement (:func:`otspec.solvers.otm_dual.otm_value`).

Imported only where it runs (it loads numba); the Python loop in :mod:`otspec.solvers.otm_dual` is the same
recursion and the tests compare the two.
"""

from __future__ import annotations

import numpy as np

from ..jit import njit

__all__ = ["race_prefix_within"]


@njit
def _expm1_neg(x):
    """expm1(−x) for x >= 0: below 10^-3 its Taylor series to x^5 (relative error < 2·10^-21, no libm call), above 0.5
    e^{-x} − 1 (no cancellation there), between them libm's expm1."""
    if x < 1e-3:
        return -x * (1.0 - x * 0.5 * (1.0 - x / 3.0 * (1.0 - x * 0.25 * (1.0 - x * 0.2))))
    if x > 0.5:  # e^{-x} < 0.61: 1 − e^{-x} loses no digits, and exp is cheaper than expm1
        return np.exp(-x) - 1.0
    return np.expm1(-x)


@njit
def race_prefix_within(ps, tail, kk, t, h, within, bound, best):
    """within[j] = min(1, Σ_n h s_j t_n e^{−s_j t_n} P(N_{A_j}(t_n) ≥ kk)) for kk <= j < len(ps), s_j = tail[j]:
    :func:`~otspec.drafts.laws.race_add_token` for one token after another, then
    :func:`~otspec.drafts.laws.race_weights` of the prefix, at every node. A node whose P(N ≥ kk) has reached 1
    in double precision stays there (the law only moves mass up), so it is no longer updated; nodes rise in t and
    so in P(N ≥ kk): the saturated ones are a top range. ``bound[j]`` = q(A_j) + 1 − p(A_j)^kk is below the cut of
    A_j (without replacement P_D(S ⊆ A) <= p(A)^kk, each draw's chance of A only falls); where it is not below the
    best cut found so far (``best`` starts at a known cut), the prefix is skipped and its ``within`` left 0."""
    T = t.size
    dp = np.zeros((T, kk + 1))
    dp[:, 0] = 1.0
    top_live = T  # nodes >= top_live have P(N >= kk) = 1
    mass = 0.0  # p(A_j)
    for j in range(1, ps.size):
        rate = ps[j - 1]
        mass += rate
        for n in range(top_live):
            em = _expm1_neg(rate * t[n])  # c = e^{-rate t} = 1 + em, b = 1 - c = -em (no cancellation)
            c, b = 1.0 + em, -em
            top = dp[n, kk] + dp[n, kk - 1] * b  # P(N >= kk) absorbs
            for i in range(kk - 1, 0, -1):
                dp[n, i] = dp[n, i] * c + dp[n, i - 1] * b
            dp[n, 0] *= c
            dp[n, kk] = top
        while top_live > 0 and dp[top_live - 1, kk] >= 1.0:
            top_live -= 1
        if j >= kk and bound[j] < best + 1e-12:  # else A_j cannot be the minimum: within[j] stays 0 (cut >= 1)
            s = tail[j]
            acc = 0.0
            for n in range(T):
                st = s * t[n]
                if st >= 50.0:  # st rises with n, and the rest of the sum is below 50 e^{-50} Σ e^{-(e^{mh}-1)50} < 1e-19
                    break
                acc += h * st * (1.0 + _expm1_neg(st)) * (1.0 if n >= top_live else dp[n, kk])
            within[j] = min(1.0, acc)
            best = min(best, bound[j] + mass ** kk - within[j])
