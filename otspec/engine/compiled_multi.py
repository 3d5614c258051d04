"""Compiled multi-round rejection sampling without replacement (MCSD Algorithm 2) on one IID row pair.

The same per-sample recursion as :func:`otspec.engine.rowfree_multi` (``_multiround_without``), one step at a
time in a numba kernel: a draft from p without the tokens drafted so far by inversion of the cumulative row,
skipping them; acceptance min{1, (r(x) − b) Z / S}; after a rejection b ← b + S/Z, the drafted token's residual
numerator frozen, S ← C(b) corrected on the drafted tokens + the frozen numerators; after k rejections Y from
the numerators. C(b) = Σ (q − b p)_+ is the prefix of the tokens sorted by descending r = q/p. Uniforms come
from :mod:`otspec.engine.compiled`'s xoshiro256+.
"""

from __future__ import annotations

import numpy as np

from ..jit import njit
from .compiled import next_uniform, seed_state

__all__ = ["multiround_without_sampler"]


@njit
def _count_above(ratio_desc, b):
    """#{x : r(x) > b} in the descending order."""
    lo, hi = 0, ratio_desc.size
    while lo < hi:
        mid = (lo + hi) // 2
        if ratio_desc[mid] > b:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit
def _mass(b, ratio_desc, scum_q, scum_p):
    """C(b) = Σ_x (q(x) − b p(x))_+."""
    n = _count_above(ratio_desc, b)
    if n == 0:
        return 0.0
    return max(scum_q[n - 1] - b * scum_p[n - 1], 0.0)


@njit
def _search_skipping(cq, cp, b, goal, skip_pos, skip_w, m, n):
    """Smallest j < n with (cq[j] − b cp[j]) − Σ_{l < m, skip_pos[l] <= j} skip_w[l] > goal: inversion of a rising
    cumulative mass with m drafted positions taken out (the answer is never one of them)."""
    extra = 0.0
    j = 0
    for _ in range(m + 1):
        target = goal + extra
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi) // 2
            if cq[mid] - b * cp[mid] > target:
                hi = mid
            else:
                lo = mid + 1
        j = min(lo, n - 1)
        new = 0.0
        for i_ in range(m):
            if skip_pos[i_] <= j:
                new += skip_w[i_]
        if new == extra:
            break
        extra = new
    return j


@njit
def _step(k, support, state, p, q, cum_p, ratio, ratio_desc, scum_q, scum_p, order, rank, drafted, frozen, pos,
          wts):
    """One step: (accepted, Y)."""
    bb, S, Z = 0.0, 1.0, 1.0
    nd = 0
    for _ in range(min(k, support)):
        for i_ in range(nd):  # the drafted tokens in token order, for the draw from p on the others
            pos[i_] = drafted[i_]
            wts[i_] = p[drafted[i_]]
        x = _search_skipping(cum_p, cum_p, 0.0, next_uniform(state) * max(Z, 0.0), pos, wts, nd, p.size)
        while p[x] <= 0 or _is_drafted(x, drafted, nd):  # rounding: step down to a live token
            x = x - 1 if x > 0 else _last_live(p, drafted, nd)
        a = 1.0
        if S > 0:
            a = min(1.0, max(0.0, (ratio[x] - bb) * Z / S))
        if next_uniform(state) < a:
            return 1, x
        bb = bb + S / Z if Z > 0 else bb
        drafted[nd] = x
        frozen[nd] = max(q[x] - bb * p[x], 0.0)
        nd += 1
        Z -= p[x]
        S = _free(bb, nd, drafted, p, q, ratio_desc, scum_q, scum_p) + frozen[:nd].sum()
    free = _free(bb, nd, drafted, p, q, ratio_desc, scum_q, scum_p)
    total = free + frozen[:nd].sum()
    goal = next_uniform(state) * total
    if goal >= free and nd > 0:  # among the drafted tokens' frozen numerators
        acc = free
        for i_ in range(nd):
            acc += frozen[i_]
            if goal < acc and frozen[i_] > 0:
                return 0, drafted[i_]
        for i_ in range(nd - 1, -1, -1):
            if frozen[i_] > 0:
                return 0, drafted[i_]
    n = _count_above(ratio_desc, bb)
    for i_ in range(nd):  # the drafted tokens' positions in the ratio order and their (q − b p)_+
        pos[i_] = rank[drafted[i_]]
        wts[i_] = max(q[drafted[i_]] - bb * p[drafted[i_]], 0.0)
    j = _search_skipping(scum_q, scum_p, bb, min(goal, free), pos, wts, nd, max(n, 1))
    return 0, order[j]


@njit
def _free(bb, nd, drafted, p, q, ratio_desc, scum_q, scum_p):
    own = 0.0
    for i_ in range(nd):
        own += max(q[drafted[i_]] - bb * p[drafted[i_]], 0.0)
    return max(_mass(bb, ratio_desc, scum_q, scum_p) - own, 0.0)


@njit
def _is_drafted(x, drafted, nd):
    for i_ in range(nd):
        if drafted[i_] == x:
            return True
    return False


@njit
def _last_live(p, drafted, nd):
    for x in range(p.size - 1, -1, -1):
        if p[x] > 0 and not _is_drafted(x, drafted, nd):
            return x
    return 0


@njit
def _kernel(n, k, seed, p, q, cum_p, ratio, ratio_desc, scum_q, scum_p, order, rank, accepted, tokens):
    state = seed_state(seed)
    support = 0
    for x in range(p.size):
        if p[x] > 0:
            support += 1
    drafted = np.full(max(k, 1), -1, dtype=np.int64)
    frozen = np.zeros(max(k, 1))
    pos = np.zeros(max(k, 1), dtype=np.int64)
    wts = np.zeros(max(k, 1))
    for s in range(n):
        accepted[s], tokens[s] = _step(k, support, state, p, q, cum_p, ratio, ratio_desc, scum_q, scum_p, order, rank,
                                       drafted, frozen, pos, wts)


def multiround_without_sampler(profile, p: np.ndarray, q: np.ndarray, k: int):
    """``sample(b, rng) -> (accepted, Y)`` as :func:`otspec.engine.rowfree_multi.candidate_sampler`, compiled."""
    order = np.asarray(profile.order, dtype=np.int64)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    ratio = np.asarray(profile.ratio, dtype=np.float64)
    tables = (p, q, np.cumsum(p), ratio, ratio[order], np.asarray(profile.scum_q), np.asarray(profile.scum_p), order,
              rank)

    def sample(b: int, rng):
        accepted, tokens = np.zeros(b, dtype=np.int64), np.zeros(b, dtype=np.int64)
        _kernel(b, k, int(rng.integers(0, 2**63)), *tables, accepted, tokens)
        return accepted, tokens
    return sample
