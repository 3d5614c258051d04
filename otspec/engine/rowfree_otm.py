r"""One OTM-k step without rows or plan: the optimum α_k with i.i.d. drafts, at any vocabulary size.

Spec ``multi_draft_otm.md`` §2–3 (p is the draft, q the target). The plan of
:class:`~otspec.verifiers.OTMVerify` is a transport over the V^k candidate tuples; this sampler reaches the
same acceptance α_k with tables of O(V) entries and O(k log V) work per step. [D; tested by enumeration.]

**Select, then verify one token** (the canonical decomposition of Khisti et al., 2025): pick one candidate Z
by a rule whose law is r, then run single-draft speculative sampling of Z against q: accept with
min{1, q(Z)/r(Z)}, else draw Y from (q − r)_+. Y ~ q for any rule, and P(Y = Z) = Σ_z min{r(z), q(z)}.

**The optimal r.** With A* the min-cut prefix of the tokens sorted by q/p (:func:`otspec.solvers.otm_min_cut`)
and a = p(A*), α_k = q(A*) + 1 − a^k. A rule can select a token outside A* exactly when one is drafted
(probability 1 − a^k), so Σ min{r, q} = α_k iff r ≥ q on A*, r ≤ q outside, and the rule selects outside A*
whenever it can. The laws of selection rules are the core of g(B) = p(B)^k (r(B) ≥ p(B)^k for every B: the
tuples inside B must select in B). Take r = max{q, θ_in p} on A* (Σ = a^k) and r = min{q, θ_out p} outside
(Σ = 1 − a^k). For a vector whose r/p rises with q/p the core conditions reduce to the prefixes in that order,
which hold by the min-cut inequalities up to the point where the cap starts; past it, r(prefix) is linear in
p(prefix) and the bound convex (concave on A*), equal at the end: so they hold everywhere.

**A rule with law r: scores.** Each drafted position draws a score V from a law that depends on its token
only, the candidate with the highest score is selected. If token z draws V uniformly on a set B_z ⊂ [0, 1]
of length p(z), and the sets partition [0, 1], then V is uniform on [0, 1] for every position and
r(z) = ∫_{B_z} k v^{k−1} dv = G(B_z), G(v) = v^k. Tokens of A* take [0, a] and the others [a, 1], so a
position outside A* beats every position inside. The sets come from the left-curtain coupling of
Beiglböck & Juillet: tokens in increasing order of r/p, each takes the stretch of the part of its tier
not taken yet (lengths counted without the holes) whose length is p(z) and whose G-mass is r(z); the core
conditions are exactly what keeps every step feasible, and the holes are nested, so all the sets together
have at most 2V pieces. ``r`` is then recomputed from the pieces themselves, so the law used to verify is
the law the scores produce (to rounding).

Without replacement the positions are not independent and this rule does not apply: OTMVerify with
``replacement=False`` keeps its plan.
"""

from __future__ import annotations

import math

import numpy as np

from ..jit import njit
from ..solvers import otm_min_cut

__all__ = ["OTMScores", "otm_scores", "otm_step_sampler"]


@njit
def _mass(x, y, k):
    """G([x, y]) = y^k − x^k, without cancellation when y is close to x."""
    if y <= x:
        return 0.0
    if x <= 0.0:
        return y ** k
    return x ** k * math.expm1(k * math.log1p((y - x) / x))


@njit
def _stretch_mass(starts, ends, cl, cg, m, s, k):
    """G-mass of the remaining region from collapsed position 0 to s (cl, cg: cumulative length and mass)."""
    lo, hi = 0, m
    while hi - lo > 1:  # last interval whose collapsed start is <= s
        mid = (lo + hi) // 2
        if cl[mid] <= s:
            lo = mid
        else:
            hi = mid
    v = min(starts[lo] + (s - cl[lo]), ends[lo])
    return cg[lo] + _mass(starts[lo], v, k), lo, v


@njit
def _curtain(p, t, lo, hi, k, piece_start, piece_len, piece_mass, first, npieces):
    """Tokens in the given order (increasing t/p) take their stretches of [lo, hi]; pieces of token i are
    piece_start/piece_len/piece_mass (G of the piece)[first[i]:first[i+1]]. Returns the number of pieces written."""
    n = p.size
    starts = np.empty(n + 2)
    ends = np.empty(n + 2)
    cl = np.empty(n + 3)
    cg = np.empty(n + 3)
    starts[0], ends[0] = lo, hi
    m = 1
    w = npieces
    for i in range(n):
        cl[0], cg[0] = 0.0, 0.0
        for j in range(m):
            cl[j + 1] = cl[j] + (ends[j] - starts[j])
            cg[j + 1] = cg[j] + _mass(starts[j], ends[j], k)
        total = cl[m]
        length = min(p[i], total)
        if i == n - 1:
            length = total  # the last token takes what is left (the lengths add up, up to rounding)
        a, b = 0.0, total - length
        for _ in range(200):  # G of the stretch [s, s + length] rises with s: bisection for G = t[i]
            if b - a <= 1e-17 * max(1.0, total):
                break
            s = 0.5 * (a + b)
            g1 = _stretch_mass(starts, ends, cl, cg, m, s + length, k)[0]
            g0 = _stretch_mass(starts, ends, cl, cg, m, s, k)[0]
            if g1 - g0 < t[i]:
                a = s
            else:
                b = s
        s = 0.5 * (a + b) if i < n - 1 else 0.0
        _, j0, v0 = _stretch_mass(starts, ends, cl, cg, m, s, k)
        _, j1, v1 = _stretch_mass(starts, ends, cl, cg, m, s + length, k)
        first[i] = w
        # the stretch covers [v0, ends[j0]], whole intervals j0+1..j1-1, [starts[j1], v1]
        for j in range(j0, j1 + 1):
            x = v0 if j == j0 else starts[j]
            y = v1 if j == j1 else ends[j]
            if y > x:
                piece_start[w] = x
                piece_len[w] = y - x
                piece_mass[w] = _mass(x, y, k)
                w += 1
        # the remaining region loses the stretch: keep [starts[j0], v0] and [v1, ends[j1]]
        keep_s = np.empty(m + 1)
        keep_e = np.empty(m + 1)
        c = 0
        for j in range(m):
            if j < j0 or j > j1:
                keep_s[c], keep_e[c] = starts[j], ends[j]
                c += 1
            else:
                if j == j0 and v0 > starts[j]:
                    keep_s[c], keep_e[c] = starts[j], v0
                    c += 1
                if j == j1 and v1 < ends[j]:
                    keep_s[c], keep_e[c] = v1, ends[j]
                    c += 1
        m = c
        for j in range(m):
            starts[j], ends[j] = keep_s[j], keep_e[j]
        if m == 0:
            starts[0], ends[0] = hi, hi
            m = 1
    first[n] = w
    return w


class OTMScores:
    """The score sets of every token (CSR pieces over [0, 1]) and the law ``r`` of the selected candidate.

    Attributes: ``first`` (V + 1,), ``start``, ``length`` (pieces), ``cum`` (cumulative piece lengths, one
    array over all tokens in token order), ``r`` (V,), ``alpha`` = α_k, ``inside`` the min-cut set A*."""

    def __init__(self, p: np.ndarray, q: np.ndarray, k: int):
        alpha, A = otm_min_cut(p, q, k)
        V = p.size
        inside = np.zeros(V, dtype=bool)
        inside[A] = True
        inside &= p > 0
        out = ~inside & (p > 0)
        a = float(p[inside].sum())
        target = np.zeros(V)
        target[inside] = _capped(q[inside], p[inside], a ** k, "max")
        target[out] = _capped(q[out], p[out], 1.0 - a ** k, "min")
        start, length, mass = (np.zeros(2 * V + 4) for _ in range(3))
        owner, w = [], 0
        for tier, lo, hi in ((inside, 0.0, a), (out, a, 1.0)):
            idx = np.flatnonzero(tier)
            if idx.size == 0:
                continue
            order = idx[np.argsort(target[idx] / p[idx], kind="stable")]
            f = np.zeros(order.size + 1, dtype=np.int64)
            w = _curtain(p[order], target[order], lo, hi, float(k), start, length, mass, f, w)
            owner.append(np.repeat(order, np.diff(f)))
        # pieces regrouped in token order (CSR), and r from the pieces themselves
        owner = np.concatenate([np.zeros(0, dtype=np.int64), *owner])
        gather = np.argsort(owner, kind="stable")
        self.start, self.length = start[gather], length[gather]
        self.first = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=V))])
        self.cum = np.concatenate([[0.0], np.cumsum(self.length)])
        self.r = np.bincount(owner, mass[:w], V)
        self.alpha, self.inside, self.k = float(alpha), inside, k


def _capped(q, p, total, kind):
    """min{q, θp} (kind "min") or max{q, θp} ("max") with Σ = total: θ from the tokens sorted by q/p."""
    if q.size == 0:
        return q
    ratio = q / p
    order = np.argsort(ratio, kind="stable")
    rs, qs, ps = ratio[order], q[order], p[order]

    def below(x):  # Σ over the j tokens of lowest q/p, j = 0..n
        return np.concatenate([[0.0], np.cumsum(x)])

    def above(x):  # Σ over the others
        return np.concatenate([np.cumsum(x[::-1])[::-1], [0.0]])

    # on [rs[j-1], rs[j]] the sum is fixed + θ slope: "min" caps the tokens above at θp, "max" raises those below
    fixed, slope = (below(qs), above(ps)) if kind == "min" else (above(qs), below(ps))
    with np.errstate(divide="ignore", invalid="ignore"):
        theta = (total - fixed) / slope
    lo, hi = np.concatenate([[0.0], rs]), np.concatenate([rs, [np.inf]])
    ok = np.flatnonzero((theta >= lo) & (theta <= hi) & (slope > 0))
    if kind == "min":
        return np.minimum(q, (theta[ok[0]] if ok.size else np.inf) * p)
    return np.maximum(q, (theta[ok[0]] if ok.size else 0.0) * p)


def otm_scores(p: np.ndarray, q: np.ndarray, k: int) -> OTMScores:
    """The score sets and selection law of the OTM-k sampler with i.i.d. drafts (see the module docstring)."""
    return OTMScores(np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64), int(k))


def otm_step_sampler(prof, p: np.ndarray, q: np.ndarray, k: int):
    """``sample(b, rng) -> (accepted (b,), Y (b,))``: one OTM-k step with i.i.d. candidates, accepted iff Y is a
    candidate (as :class:`~otspec.verifiers.OTMVerify`)."""
    sc = otm_scores(p, q, k)
    accept = np.divide(q, sc.r, out=np.ones_like(q), where=sc.r > q)
    residual = np.clip(q - sc.r, 0.0, None)
    from scipy.stats.sampling import DiscreteGuideTable

    guide = DiscreteGuideTable(residual / residual.sum()) if residual.sum() > 0 else None

    def sample(b, rng):
        cand = prof.draw_draft(rng.random((b, k)))
        at = sc.cum[sc.first[cand]] + rng.random((b, k)) * p[cand]  # a point of the token's score set, by length
        piece = np.clip(np.searchsorted(sc.cum, at, side="right") - 1, sc.first[cand], sc.first[cand + 1] - 1)
        score = sc.start[piece] + (at - sc.cum[piece])
        z = cand[np.arange(b), np.argmax(score, axis=1)]
        keep = rng.random(b) < accept[z]
        if guide is None:
            y = z
        else:
            y = np.where(keep, z, guide.ppf(rng.random(b)).astype(np.int64))
        return (cand == y[:, None]).any(axis=1).astype(np.int64), y
    return sample
