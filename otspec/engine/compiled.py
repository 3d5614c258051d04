"""Compiled (numba) Monte Carlo of token and published block verification on one IID row pair.

The row-free samplers of :mod:`otspec.engine.rowfree` draw every block's L tokens and uniforms as numpy
arrays; here one loop per block does the same algorithm, with what a block's outcome does not read left
undrawn: token verification stops drafting at the first rejection (tokens after it are discarded by the
verifier), block verification tests the positions from L downwards and stops at the first pass
(P(τ = i) = h_i ∏_{j>i} (1 − h_j), eq. (15), the same law as drawing all L + 1 uniforms), and the extra
token is drawn only when it is the first token emitted (τ = 0). Draws use Walker alias tables (one
uniform each); the surplus mass M(w) = Σ (w q − p)_+ is the sorted-ratio prefix of
:class:`~otspec.engine.rowfree.RowProfile`. The kernels fill a (L + 1, V) histogram of (τ, first emitted
token), which is all :class:`~otspec.engine.montecarlo.MonteCarloResult` keeps.

numba's generator is seeded from the caller's numpy Generator for every chunk, so a seed fixes the
result. ``available()`` is False where numba is not installed; the numpy samplers are then used.
"""

from __future__ import annotations

import numpy as np

from ..jit import available
from ..jit import njit as _njit

__all__ = ["AliasTable", "available", "block_counts", "token_counts"]


class AliasTable:
    """Walker's alias table of a probability row (Vose's construction): ``prob``, ``alias``, O(1) per draw."""

    def __init__(self, row: np.ndarray):
        row = np.asarray(row, dtype=np.float64)
        self.prob, self.alias = _build_alias(row / row.sum())


@_njit
def _build_alias(p):
    V = p.size
    scaled = p * V
    prob = np.ones(V)
    alias = np.arange(V)
    small = np.empty(V, dtype=np.int64)
    large = np.empty(V, dtype=np.int64)
    ns = nl = 0
    for i in range(V):
        if scaled[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        g = large[nl - 1]
        prob[s] = scaled[s]
        alias[s] = g
        scaled[g] = (scaled[g] + scaled[s]) - 1.0
        if scaled[g] < 1.0:
            nl -= 1
            small[ns] = g
            ns += 1
    best = np.argmax(p)
    for i in range(nl):  # what rounding leaves is a full column
        prob[large[i]] = 1.0
    for i in range(ns):
        if p[small[i]] > 0:
            prob[small[i]] = 1.0
        else:  # a token of mass 0 is never drawn, not even by rounding
            prob[small[i]] = 0.0
            alias[small[i]] = best
    return prob, alias


@_njit
def _draw(prob, alias):
    V = prob.size
    u = np.random.random() * V
    i = min(int(u), V - 1)
    return i if u - i < prob[i] else alias[i]


@_njit
def _token_kernel(n, L, seed, accept, p_prob, p_alias, r_prob, r_alias, counts):
    np.random.seed(seed)
    for _ in range(n):
        tau = 0
        first = -1
        while tau < L:
            x = _draw(p_prob, p_alias)
            if np.random.random() < accept[x]:
                if tau == 0:
                    first = x
                tau += 1
            else:
                break
        if tau == 0:  # rejected at once: the first token emitted is the residual's
            first = _draw(r_prob, r_alias)
        counts[tau, first] += 1


#: Buckets of the log-ratio axis that narrow the search for the prefix of tokens with r > 1/w.
_BUCKETS = 4096


class _SurplusTable:
    """M(w) = Σ_x (w q(x) − p(x))_+ as a function of y = −log w ≥ 0: the tokens with log r > y are a prefix of the
    descending-ratio order, and ``first[j]`` = #{log r > edge_j} at bucket edges narrows the search to a few."""

    def __init__(self, profile):
        ratio = np.asarray(profile.ratio, dtype=np.float64)[np.asarray(profile.order)]  # descending
        with np.errstate(divide="ignore"):
            self.log_desc = np.log(ratio)
        finite = self.log_desc[np.isfinite(self.log_desc) & (self.log_desc > 0)]
        top = float(finite.max()) if finite.size else 1.0
        self.width = top / _BUCKETS
        edges = self.width * np.arange(_BUCKETS + 2)
        self.first = np.searchsorted(-self.log_desc, -edges, side="left").astype(np.int64)  # #{log r > edge}
        self.scum_q, self.scum_p = np.asarray(profile.scum_q), np.asarray(profile.scum_p)
        self.tv = float(profile.tv[0])


@_njit
def _surplus(y, tv, width, first, log_desc, scum_q, scum_p):
    """M(e^{-y}) for y = −log w: TV at w = 1, 0 at w = 0, else w Q_n − P_n with n = #{log r > y}."""
    if y <= 0.0:
        return tv
    if not y < np.inf:
        return 0.0
    j = int(y / width)
    if j >= first.size - 1:
        lo, hi = 0, first[first.size - 1]
    else:
        lo, hi = first[j + 1], first[j]  # edge_j <= y < edge_{j+1}: n lies between the two counts
    while lo < hi:  # first position with log r <= y, in [lo, hi]
        mid = (lo + hi) // 2
        if log_desc[mid] > y:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return 0.0
    return max(np.exp(-y) * scum_q[lo - 1] - scum_p[lo - 1], 0.0)


@_njit
def _block_kernel(n, L, seed, log_ratio, p_prob, p_alias, r_prob, r_alias, tv, width, first_at, log_desc, scum_q,
                  scum_p, counts):
    np.random.seed(seed)
    lw = np.empty(L + 1)  # log w_i = min(0, log w_{i-1} + log r(X_i)), eq. (13) in log space
    for _ in range(n):
        lw[0] = 0.0
        x1 = -1
        for i in range(1, L + 1):
            x = _draw(p_prob, p_alias)
            if i == 1:
                x1 = x
            lw[i] = min(0.0, lw[i - 1] + log_ratio[x])
        tau = 0
        for i in range(L, 0, -1):  # τ = max{i : u_i < h_i}: the first pass from the top
            w = np.exp(lw[i])
            if i == L:
                h = w
            else:
                m = _surplus(-lw[i], tv, width, first_at, log_desc, scum_q, scum_p)
                den = m + 1.0 - w
                h = m / den if den > 0 else 0.0
            if np.random.random() < h:
                tau = i
                break
        first = x1 if tau >= 1 else _draw(r_prob, r_alias)
        counts[tau, first] += 1


def _residual_table(p: np.ndarray, q: np.ndarray) -> AliasTable:
    res = np.clip(q - p, 0.0, None)
    return AliasTable(res if res.sum() > 0 else q)  # no residual (p = q): never drawn


def token_counts(p: np.ndarray, q: np.ndarray, L: int):
    """``fill(n, seed, counts)``: n blocks of token verification added to the (L + 1, V) histogram ``counts``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(p > 0, np.minimum(1.0, q / np.where(p > 0, p, 1.0)), 0.0)
    draft, res = AliasTable(p), _residual_table(p, q)

    def fill(n: int, seed: int, counts: np.ndarray) -> None:
        _token_kernel(n, L, seed, accept, draft.prob, draft.alias, res.prob, res.alias, counts)
    return fill


def block_counts(profile, p: np.ndarray, q: np.ndarray, L: int):
    """``fill(n, seed, counts)`` for published block verification; ``profile`` a :class:`RowProfile` of (p, q)."""
    draft, res, table = AliasTable(p), _residual_table(p, q), _SurplusTable(profile)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(np.asarray(profile.ratio, dtype=np.float64))

    def fill(n: int, seed: int, counts: np.ndarray) -> None:
        _block_kernel(n, L, seed, log_ratio, draft.prob, draft.alias, res.prob, res.alias, table.tv, table.width,
                      table.first, table.log_desc, table.scum_q, table.scum_p, counts)
    return fill
