"""The compiled recursion of the OTM-k cuts without replacement (:func:`otspec.solvers.otm_dual.otm_value`).

Imported only where it runs (it loads numba); the Python loop in :mod:`otspec.solvers.otm_dual` is the same
recursion and the tests compare the two.
"""

from __future__ import annotations

import numpy as np

from ..jit import njit

__all__ = ["SATURATED", "race_prefix_within"]


@njit
def _expm1_taylor(x):
    """expm1(−x) for 0 <= x < 10^-3: its Taylor series to x^5 (relative error < 2·10^-21, no libm call)."""
    return -x * (1.0 - x * 0.5 * (1.0 - x / 3.0 * (1.0 - x * 0.25 * (1.0 - x * 0.2))))


@njit
def _expm1_neg(x):
    """expm1(−x) for x >= 0: below 10^-3 :func:`_expm1_taylor`, above 0.5 e^{-x} − 1 (no cancellation there), between
    them libm's expm1."""
    if x < 1e-3:
        return _expm1_taylor(x)
    if x > 0.5:  # e^{-x} < 0.61: 1 − e^{-x} loses no digits, and exp is cheaper than expm1
        return np.exp(-x) - 1.0
    return np.expm1(-x)


#: P(N < k) below which a node counts as saturated. Waiting for P(N >= k) to round to 1 instead kept most nodes
#: live to the end (their last increments round away below half an ulp of 1): 170 of 301 nodes per token at
#: V = 32,000, k = 8.
SATURATED = 1e-18


@njit
def _saturated(dp, kk, n):
    if dp[kk, n] >= 1.0:
        return True
    low = 0.0
    for i in range(kk):
        low += dp[i, n]
    return low < SATURATED


@njit
def race_prefix_within(ps, tail, kk, t, h, within, bound, best):
    """within[j] = min(1, Σ_n h s_j t_n e^{−s_j t_n} P(N_{A_j}(t_n) ≥ kk)) for kk <= j < len(ps), s_j = tail[j]:
    :func:`~otspec.drafts.laws.race_add_token` for one token after another, then
    :func:`~otspec.drafts.laws.race_weights` of the prefix, at every node. A node whose P(N < kk) has fallen below
    :data:`SATURATED` stays there (the law only moves mass up), so it is no longer updated and counts P(N ≥ kk) as
    1 (``within`` rises by less than SATURATED); nodes rise in t and so in P(N ≥ kk): these are a top range. ``bound[j]`` = q(A_j) + 1 − p(A_j)^kk is below the cut of
    A_j (without replacement P_D(S ⊆ A) <= p(A)^kk, each draw's chance of A only falls); where it is not below the
    best cut found so far (``best`` starts at a known cut), the prefix is skipped and its ``within`` left 0.

    The law is stored count-major (``dp[i, n]``) so that every update is a loop over nodes the compiler
    vectorises; per element the arithmetic is the token-by-token recursion's, in the same order."""
    T = t.size
    dp = np.zeros((kk + 1, T))
    dp[0, :] = 1.0
    c = np.empty(T)
    b = np.empty(T)
    top_live = T  # nodes >= top_live have P(N >= kk) = 1
    mass = 0.0  # p(A_j)
    for j in range(1, ps.size):
        rate = ps[j - 1]
        mass += rate
        # e^{-rate t} = 1 + em, em = expm1(−rate t): a polynomial below rate·t = 10^-3 (the low nodes), libm above
        n1 = min(np.searchsorted(t, 1e-3 / rate), top_live)
        while n1 > 0 and rate * t[n1 - 1] >= 1e-3:
            n1 -= 1
        while n1 < top_live and rate * t[n1] < 1e-3:
            n1 += 1
        for n in range(n1):
            x = rate * t[n]
            em = _expm1_taylor(x)
            c[n] = 1.0 + em
            b[n] = -em
        for n in range(n1, top_live):
            em = _expm1_neg(rate * t[n])
            c[n] = 1.0 + em
            b[n] = -em
        for n in range(top_live):  # P(N >= kk) absorbs
            dp[kk, n] = dp[kk, n] + dp[kk - 1, n] * b[n]
        for i in range(kk - 1, 0, -1):
            for n in range(top_live):
                dp[i, n] = dp[i, n] * c[n] + dp[i - 1, n] * b[n]
        for n in range(top_live):
            dp[0, n] *= c[n]
        while top_live > 0 and _saturated(dp, kk, top_live - 1):
            top_live -= 1
        if j >= kk and bound[j] < best + 1e-12:  # else A_j cannot be the minimum: within[j] stays 0 (cut >= 1)
            s = tail[j]
            acc = 0.0
            for n in range(T):
                st = s * t[n]
                if st >= 50.0:  # st rises with n, and the rest of the sum is below 50 e^{-50} Σ e^{-(e^{mh}-1)50} < 1e-19
                    break
                acc += h * st * (1.0 + _expm1_neg(st)) * (1.0 if n >= top_live else dp[kk, n])
            within[j] = min(1.0, acc)
            best = min(best, bound[j] + mass ** kk - within[j])
