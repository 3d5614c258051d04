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

Uniforms come from xoshiro256+ (Blackman & Vigna; the top 53 bits), seeded by splitmix64 from the caller's
numpy Generator for every chunk, so a seed fixes the result. ``available()`` is False where numba is not installed; the numpy samplers are then used.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import numpy as np

from ..jit import available
from ..jit import njit as _njit

__all__ = ["AliasTable", "available", "block_counts", "next_uniform", "seed_state", "token_counts"]


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
def seed_state(seed):
    """xoshiro256+ state from one 64-bit seed by splitmix64 (Blackman & Vigna's recommended seeding)."""
    state = np.empty(4, dtype=np.uint64)
    z = np.uint64(seed)
    for i in range(4):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        x = z
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        state[i] = x ^ (x >> np.uint64(31))
    return state


@_njit
def next_uniform(state):
    """A double in [0, 1) from the top 53 bits of xoshiro256+ (under a nanosecond; numba's MT19937: ~8 ns)."""
    result = state[0] + state[3]
    t = state[1] << np.uint64(17)
    state[2] ^= state[0]
    state[3] ^= state[1]
    state[1] ^= state[2]
    state[0] ^= state[3]
    state[2] ^= t
    state[3] = (state[3] << np.uint64(45)) | (state[3] >> np.uint64(19))
    return (result >> np.uint64(11)) * (1.0 / 9007199254740992.0)


def _packed(table: AliasTable, value: np.ndarray) -> np.ndarray:
    """(V, 4) rows (prob_i, alias_i, value_i, value_alias_i): one cache line per draw gives the token and its value."""
    return np.stack([table.prob, table.alias.astype(np.float64), value, value[table.alias]], axis=1)


@_njit
def _draw_value(packed, state):
    """A token from a packed alias table and the value stored with it."""
    V = packed.shape[0]
    u = next_uniform(state) * V
    i = min(int(u), V - 1)
    if u - i < packed[i, 0]:
        return i, packed[i, 2]
    return int(packed[i, 1]), packed[i, 3]


@_njit
def _tally(tau, first, tau_counts, first_counts, joint, want_joint):
    tau_counts[tau] += 1
    first_counts[first] += 1
    if want_joint:
        joint[tau, first] += 1


@_njit
def _token_kernel(n, L, seed, draft, residual, tau_counts, first_counts, joint, want_joint):
    state = seed_state(seed)
    for _ in range(n):
        tau = 0
        first = -1
        while tau < L:
            x, accept = _draw_value(draft, state)  # the drafted token and min(1, q/p) there
            if next_uniform(state) < accept:
                if tau == 0:
                    first = x
                tau += 1
            else:
                break
        if tau == 0:  # rejected at once: the first token emitted is the residual's
            first = _draw_value(residual, state)[0]
        _tally(tau, first, tau_counts, first_counts, joint, want_joint)


#: Most buckets of the log-ratio axis that narrow the search for the prefix of tokens with r > 1/w; a row pair
#: gets 2V of them up to this (at V = 32,000: 2.9 M blocks/s with 4,096 buckets, 4.5 M with 65,536).
_BUCKETS = 1 << 16


class _SurplusTable:
    """M(w) = Σ_x (w q(x) − p(x))_+ through y = −log w ≥ 0: the tokens with log r > y are a prefix of the
    descending-ratio order, and ``first[j]`` = #{log r > edge_j} at bucket edges narrows the search to a few."""

    def __init__(self, profile):
        ratio = np.asarray(profile.ratio, dtype=np.float64)[np.asarray(profile.order)]  # descending
        with np.errstate(divide="ignore"):
            self.log_desc = np.log(ratio)
        finite = self.log_desc[np.isfinite(self.log_desc) & (self.log_desc > 0)]
        top = float(finite.max()) if finite.size else 1.0
        buckets = min(_BUCKETS, max(64, 2 * ratio.size))
        self.width = top / buckets
        edges = self.width * np.arange(buckets + 2)
        self.first = np.searchsorted(-self.log_desc, -edges, side="left").astype(np.int32)  # #{log r > edge}
        self.scum_q, self.scum_p = np.asarray(profile.scum_q), np.asarray(profile.scum_p)
        self.tv = float(profile.tv[0])


@_njit
def _surplus(w, y, tv, width, first, rows):
    """M(w) = Σ_x (w q(x) − p(x))_+: TV at w = 1, 0 at w = 0, else w Q_n − P_n with n = #{log r > y}, y = −log w
    (carried by the caller); ``rows`` holds (log r, Q, P) of the tokens in descending order of r, one cache line
    per probe."""
    if w >= 1.0:
        return tv
    if w <= 0.0:
        return 0.0
    j = int(y / width)
    if j >= first.size - 1:
        lo, hi = 0, first[first.size - 1]
    else:
        lo, hi = first[j + 1], first[j]  # edge_j <= y < edge_{j+1}: n lies between the two counts
    while lo < hi:  # first position with log r <= y, in [lo, hi]
        mid = (lo + hi) // 2
        if rows[mid, 0] > y:
            lo = mid + 1
        else:
            hi = mid
    if lo == 0:
        return 0.0
    return max(w * rows[lo - 1, 1] - rows[lo - 1, 2], 0.0)


@_njit
def _block_kernel(n, L, seed, draft, residual, tv, width, first_at, sorted_rows, tau_counts, first_counts, joint,
                  want_joint):
    state = seed_state(seed)
    w = np.empty(L + 1)  # w_i = min(1, w_{i-1} r(X_i)), eq. (13)
    y = np.empty(L + 1)  # −log w_i = max(0, y_{i-1} − log r(X_i)), so that M(w_i) needs no logarithm
    column = np.empty(L, dtype=np.int64)
    coin = np.empty(L)
    V = draft.shape[0]
    for _ in range(n):
        for i in range(L):  # the L alias draws' columns and coins first, so their table reads can overlap
            u = next_uniform(state) * V
            column[i] = min(int(u), V - 1)
            coin[i] = u - column[i]
        w[0] = 1.0
        y[0] = 0.0
        x1 = column[0] if coin[0] < draft[column[0], 0] else int(draft[column[0], 1])
        for i in range(L):
            row = column[i]
            if coin[i] < draft[row, 0]:
                ratio, log_ratio = draft[row, 2], draft[row, 4]
            else:
                ratio, log_ratio = draft[row, 3], draft[row, 5]
            w[i + 1] = min(1.0, w[i] * ratio)
            y[i + 1] = max(0.0, y[i] - log_ratio)
        tau = 0
        for i in range(L, 0, -1):  # τ = max{i : u_i < h_i}: the first pass from the top
            if i == L:
                h = w[L]
            else:
                m = _surplus(w[i], y[i], tv, width, first_at, sorted_rows)
                den = m + 1.0 - w[i]
                h = m / den if den > 0 else 0.0
            if next_uniform(state) < h:
                tau = i
                break
        first = x1 if tau >= 1 else _draw_value(residual, state)[0]
        _tally(tau, first, tau_counts, first_counts, joint, want_joint)


def _residual_table(p: np.ndarray, q: np.ndarray) -> AliasTable:
    res = np.clip(q - p, 0.0, None)
    return AliasTable(res if res.sum() > 0 else q)  # no residual (p = q): never drawn


def _filler(kernel, L: int, V: int, *tables):
    """``fill(n, seed, tau_counts, first_counts, joint=None)``: n blocks added to the histograms of τ (L + 1,) and of
    the first emitted token (V,), and to their joint (L + 1, V) when given (the tests read it)."""
    def fill(n: int, seed: int, tau_counts: np.ndarray, first_counts: np.ndarray, joint=None) -> None:
        want = joint is not None
        kernel(n, L, seed, *tables, tau_counts, first_counts, joint if want else np.zeros((1, 1), np.int64), want)
    return fill


def token_counts(p: np.ndarray, q: np.ndarray, L: int):
    """The filler of token verification on the rows p, q (see :func:`_filler`)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        accept = np.where(p > 0, np.minimum(1.0, q / np.where(p > 0, p, 1.0)), 0.0)
    residual = _residual_table(p, q)
    return _filler(_token_kernel, L, p.size, _packed(AliasTable(p), accept),
                   _packed(residual, np.zeros(p.size)))


def block_counts(profile, p: np.ndarray, q: np.ndarray, L: int):
    """The filler of published block verification; ``profile`` a :class:`RowProfile` of (p, q)."""
    table = _SurplusTable(profile)
    ratio = np.where(p > 0, np.asarray(profile.ratio, dtype=np.float64), 0.0)
    alias = AliasTable(p)
    with np.errstate(divide="ignore"):
        log_ratio = np.log(ratio)  # −inf where q = 0: y becomes inf and w 0, whose surplus is 0
    draft = np.concatenate([_packed(alias, ratio), np.stack([log_ratio, log_ratio[alias.alias]], axis=1)], axis=1)
    return _filler(_block_kernel, L, p.size, draft,
                   _packed(_residual_table(p, q), np.zeros(p.size)), table.tv, table.width, table.first,
                   np.stack([table.log_desc, table.scum_q, table.scum_p], axis=1))
