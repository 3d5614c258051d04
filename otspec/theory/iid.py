r"""Expected accepted lengths of single-draft verification for an IID pair, without enumerating blocks.

Spec ``token_and_block_verification.md`` §3–§9. The draft emits i.i.d. tokens from a row p
(length V), the target i.i.d. from q. With :math:`r = q/p` on ``p > 0``, :math:`Z = \log r(X)`,
:math:`X \sim p` (:math:`Z = -\infty` where q = 0), :math:`S_l = Z_1 + \dots + Z_l`:

* token verification, eq. (4): :math:`E[\tau_{tok}] = \sum_{l=1}^{L} (1 - TV(p, q))^l`;
* block-OT optimum, eq. (8): :math:`E[\tau_{opt}] = \sum_l E[\min(1, e^{S_l})]
  = \sum_l (1 - TV(p^{\otimes l}, q^{\otimes l}))`;
* published block verification, eq. (17): :math:`E[\tau_{BV}] = \sum_l E[e^{U_l}]`, with the
  Lindley chain :math:`U_0 = 0`, :math:`U_l = \min(0, U_{l-1} + Z_l) = S_l - \max_{j \le l} S_j`
  (the log of the weight :math:`w_l` of eq. (13)); equivalently
  :math:`W_l(x^l) = \min_{0 \le j \le l} p(x^j)\, q(x_{j+1}, \dots, x_l)`.

Routes. *Ratio classes (exact)*: tokens with equal r form a class and a block's weight depends only
on its class counts (eq. (10) generalised), so dynamic programmes over count vectors of total
:math:`\le L` give (8) and (17) exactly. *Certified lattice bounds*: every term is non-decreasing
and concave in each :math:`r(X_i)` separately. Lower bounds spread each r onto the lattice points
:math:`e^{kh} \le r \le e^{(k+1)h}` keeping its mean (Jensen, one coordinate at a time). Upper
bounds hold for any test set A and any selector J:
:math:`\sum \min(p^l, q^l) \le p^l(A^c) + q^l(A)` and :math:`W_l \le p(x^J) q(x_{J+1}^l)`; A and J
are read off nearest-rounded lattice sums. The gaps are second order in h when the ratios are spread
out (first order when a few classes carry the mass; the exact route covers those). Laws are
propagated by FFT with an explicit rounding allowance inside a window of half-width
:data:`WINDOW`; mass leaving it is dropped or kept in the direction that keeps each bound valid.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, check_real, check_size
from ..distributions import one_row
from ..errors import SizeLimitError
from .lattice import lattice_walk

__all__ = [
    "LATTICE_POINTS", "MAX_CLASS_WORK", "MAX_DRAFT_LENGTH", "MAX_LATTICE_POINTS", "MAX_LATTICE_WORK", "WINDOW",
    "IIDBlockValue", "IIDBlockValues", "iid_block_optimum", "iid_block_values",
    "iid_block_verification", "iid_token_value",
]

#: Largest C(L+K, K) * K (count vectors of total <= L times K ratio classes) of the exact route;
#: timed on 2 cores: K = 8, L = 12 (1.0e6) 0.11 s; K = 6, L = 16 (0.45e6) 0.08 s.
MAX_CLASS_WORK = 1_000_000
#: Default FFT length of the lattice route: the step h is set so the widest walk fills it.
LATTICE_POINTS = 1 << 17
#: Largest FFT length accepted (refused before allocating).
MAX_LATTICE_POINTS = 1 << 23
#: Largest L × lattice points of one walk (each of the L steps is an FFT of that length, three walks per
#: value): at the default 2^17 points L = 256 took 5.9 s, L = 4,096 took 94 s on 2 cores; this admits L = 512 (~12 s).
MAX_LATTICE_WORK = 80_000_000
#: Half-width (log-ratio units) of the walk window; what leaves it weighs at most e^-WINDOW per step.
WINDOW = 25.0
_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class IIDBlockValue:
    """An expected accepted length, ``low <= exact <= high``, ``value`` the midpoint; ``terms*``:
    per-length terms l = 1..L; ``method``: "closed form", "ratio classes (exact)" or
    "log-ratio lattice, certified bounds (step h)"."""

    value: float
    low: float
    high: float
    method: str
    terms: tuple[float, ...] = ()
    terms_low: tuple[float, ...] = ()
    terms_high: tuple[float, ...] = ()

    @property
    def gap(self) -> float:
        """Width ``high - low`` of the interval (0 on exact routes)."""
        return self.high - self.low


@dataclass(frozen=True)
class IIDBlockValues:
    """The three values of one IID pair: token (4), block verification (17), optimum (8)."""

    token: IIDBlockValue
    verification: IIDBlockValue
    optimum: IIDBlockValue


_NAN = IIDBlockValue(math.nan, math.nan, math.nan, "not computed")


def _result(lo, hi, method: str) -> IIDBlockValue:
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    mid = 0.5 * (lo + hi)
    return IIDBlockValue(math.fsum(mid), math.fsum(lo), math.fsum(hi), method,
                         tuple(mid.tolist()), tuple(lo.tolist()), tuple(hi.tolist()))


def _check_inputs(draft, target, draft_length, route, step):
    p, q = one_row(draft, "draft"), one_row(target, "target")
    if p.size != q.size:
        raise ValueError(f"draft and target differ in length ({p.size} vs {q.size}); "
                         "both rows must cover one vocabulary")
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    if route not in ("auto", "exact", "lattice"):
        raise ValueError(f"route: expected 'auto', 'exact' or 'lattice', got {route!r}")
    if step is not None:
        check_real(step, "step", low=0.0, high=1.0, low_open=True)  # a lattice on [0, 1]: 10 was taken
        if route == "exact":  # the ratio classes have no lattice: a step would be ignored without a word
            raise ValueError("step: the exact route has no lattice step; give route='lattice' (or 'auto') with it")
    return p, q, L


def ratio_classes(p, q):
    """Class masses (P_k, Q_k) of the tokens with p, q > 0, grouped by equal q/p.

    Key: the exact binary exponent of q/p and its correctly rounded mantissa ratio in [1, 2)
    (via :func:`numpy.frexp`; q/p never overflows). Equal ratios get equal keys; distinct ratios
    within half an ulp (relative 1.1e-16) would be merged.
    """
    live = (p > 0) & (q > 0)
    (mq, eq), (mp, ep) = np.frexp(q[live]), np.frexp(p[live])
    low = mq < mp
    mant, expo = np.where(low, 2.0 * mq, mq) / mp, eq.astype(np.int64) - ep - low
    order = np.lexsort((mant, expo))
    mant, expo = mant[order], expo[order]
    new = np.ones(mant.size, dtype=bool)
    new[1:] = (mant[1:] != mant[:-1]) | (expo[1:] != expo[:-1])
    cls = np.cumsum(new) - 1
    return np.bincount(cls, weights=p[live][order]), np.bincount(cls, weights=q[live][order])


def count_states(K: int, L: int) -> np.ndarray:
    """All count vectors in N^K of total <= L, lexicographic (first class most significant).

    Built column by column keeping parent links only, then read back: O(K N) for N vectors.
    """
    used, parents, values = np.zeros(1, dtype=np.int64), [], []
    for _ in range(K):
        reps = L - used + 1
        parent = np.repeat(np.arange(used.size), reps)
        values.append(np.arange(int(reps.sum())) - (np.cumsum(reps) - reps)[parent])
        parents.append(parent)
        used = used[parent] + values[-1]
    states, row = np.empty((used.size, K), dtype=np.int64), np.arange(used.size)
    for j in range(K - 1, -1, -1):
        states[:, j] = values[j][row]
        row = parents[j][row]
    return states


def successors(states: np.ndarray, L: int) -> np.ndarray:
    """Lexicographic rank of c + e_k for each row c and class k (meaningful where |c| < L).

    With n(m, t) = C(t + m, m) vectors of length m and total <= t, the rank of c is
    sum_j [n(K - j, L - s_j) - n(K - j, L - s_j - c_j)], s_j = c_1 + ... + c_{j-1}; adding e_k
    changes term k and raises s_j by one for every j > k.
    """
    N, K = states.shape
    tab = np.zeros((K + 1, L + 2), dtype=np.int64)  # tab[m, t + 1] = n(m, t), n(m, -1) = 0
    for m in range(K + 1):
        tab[m, 1:] = [math.comb(t + m, m) for t in range(L + 1)]
    cols = K - np.arange(K)

    def n(t):
        return tab[cols, np.clip(t, -1, L) + 1]

    s = np.cumsum(states, axis=1) - states
    shift = (n(L - s - 1) - n(L - s - 1 - states)) - (n(L - s) - n(L - s - states))
    after = np.cumsum(shift[:, ::-1], axis=1)[:, ::-1] - shift
    return np.arange(N)[:, None] + n(L - s - states) - n(L - s - states - 1) + after


def _exact_terms(P, Q, L: int):
    """Per-length terms of (8) and (17) by dynamic programmes over class-count vectors.

    Optimum: the law of the count vector n of X^l under p^l is pushed by n -> n + e_k with weight
    P_k, and term_l = sum_{|n| = l} Pr(n) min(1, e^{n.z}), z_k = log(Q_k / P_k). Block
    verification: the state is the count vector c of the suffix since U was last 0, so U = c.z;
    the step to c + e_k resets to 0 when (c + e_k).z >= 0 (at an exact tie both branches carry the
    same U). Tokens with q = 0 drop their mass (their weight stays 0).
    """
    z = np.log(Q) - np.log(P)
    lex = count_states(P.size, L)
    order = np.argsort(lex.sum(axis=1), kind="stable")
    rank, states = np.argsort(order), lex[order]
    nxt = rank[np.clip(successors(lex, L)[order], 0, order.size - 1)]
    total, s = states.sum(axis=1), (states * z).sum(axis=1)
    cut = np.searchsorted(total, np.arange(L + 2))
    nxt_bv = np.where(s[nxt] >= 0.0, 0, nxt)
    weight = np.exp(np.minimum(s, 0.0))
    opt, bv = np.zeros(total.size), np.zeros(total.size)
    opt[0] = bv[0] = 1.0
    t_opt, t_bv = np.zeros(L), np.zeros(L)
    for i in range(L):
        a, b, c = cut[i], cut[i + 1], cut[i + 2]
        opt = np.bincount(nxt[a:b].ravel(), weights=(opt[a:b, None] * P).ravel(), minlength=total.size)
        bv = np.bincount(nxt_bv[:b].ravel(), weights=(bv[:b, None] * P).ravel(), minlength=total.size)
        t_opt[i], t_bv[i] = np.sum(opt[b:c] * weight[b:c]), np.sum(bv * weight)
    return t_opt, t_bv


def _lattice_terms(p, q, L: int, step, kind: str):
    """Certified per-length bounds (lo, hi) and step h of (8) ("optimum") or (17) ("verification")."""
    live = (p > 0) & (q > 0)
    pl, ql = p[live], q[live]
    lp, lq = np.log(pl), np.log(ql)
    z, zc = lq - lp, np.clip(lq - lp, -WINDOW, WINDOW)
    zlo, zhi = (float(zc.min()), float(zc.max())) if z.size else (0.0, 0.0)
    down, up = min(WINDOW, L * max(-zlo, 0.0)), min(WINDOW, L * max(zhi, 0.0))
    extent = down + (up if kind == "optimum" else 0.0) + zhi - zlo  # widest window + step range
    h = float(step) if step is not None else (extent / LATTICE_POINTS if extent > 0 else 1.0)
    ratio = min(extent, 4 * WINDOW) / h  # inf for a step of 5e-324: refused below, not an OverflowError in int()
    need = int(ratio) + 8 if ratio < MAX_LATTICE_POINTS else MAX_LATTICE_POINTS + 1
    if need > MAX_LATTICE_POINTS:
        raise SizeLimitError(f"step = {h:g} needs {f'about {need:,}' if ratio < MAX_LATTICE_POINTS else 'more than'} "
                             f"lattice points, above MAX_LATTICE_POINTS = {MAX_LATTICE_POINTS:,}; use a larger step",
                             size=need, limit=MAX_LATTICE_POINTS)
    if L * need > MAX_LATTICE_WORK:
        raise SizeLimitError(f"the certified lattice bounds for L = {L} walk {L} steps of about {need:,} lattice points "
                             f"({L * need:,}), above MAX_LATTICE_WORK = {MAX_LATTICE_WORK:,}; use a shorter L or a "
                             "larger step", size=L * need, limit=MAX_LATTICE_WORK)
    M = math.ceil(WINDOW / h)
    # Lower bounds: the two-point spread. z is first lowered by a bound on its rounding error so
    # that kh <= log r and the spread's mean never exceeds r.
    zs = z - 8 * _EPS * (np.abs(lp) + np.abs(lq) + 1.0)
    k = np.floor(np.clip(zs / h, -M - 1.0, M + 1.0)).astype(np.int64)
    top, tiny = k >= M, k < -M  # r >= e^{Mh}: lowered to e^{Mh}; r < e^{-Mh}: spread onto {0, e^{-Mh}}
    frac = np.expm1(np.clip(zs - k * h, 0.0, h)) / math.expm1(h)
    theta = np.clip(np.where(tiny, np.exp(np.minimum(zs + M * h, 0.0)), frac), 0.0, 1.0)
    theta[top] = 0.0
    k = np.clip(k, -M, M)
    k1 = np.where(tiny | top, k, k + 1)
    kmin = int(k.min()) if z.size else 0
    size = int(k1.max()) - kmin + 1 if z.size else 1
    spread = (np.bincount(k - kmin, weights=pl * (1.0 - theta) * ~tiny, minlength=size)
              + np.bincount(k1 - kmin, weights=pl * theta, minlength=size))
    # Upper bounds: A = {K_l < 0} for (8); J = last argmax_j K_j for (17), where K sums the
    # nearest lattice indices. Then P(J = j) = a_j b_{l-j}: a_j = p^j(all partial sums >= 0)
    # (time reversal of the prefix), b_m = q^m(all partial sums < 0).
    kh = np.rint(zc / h).astype(np.int64)
    smin = int(kh.min()) if z.size else 0
    sel_p, sel_q = (np.bincount(kh - smin, weights=w, minlength=1) for w in (pl, ql))
    slack = 256 * _EPS  # rounding of one pairwise sum over a law

    def grid(w, o):
        return h * (o + np.arange(w.size))

    if kind == "optimum":
        lo = [float(np.sum(w * np.exp(np.minimum(grid(w, o), 0.0)))) - e - slack
              for w, o, _, e in lattice_walk(spread, kmin, L, -M, M, "drop", "drop")]
        hp = [float(w[max(0, -o):].sum()) + ab + e + slack
              for w, o, ab, e in lattice_walk(sel_p, smin, L, -M, M, "clamp", "absorb")]
        hq = [float(w[:max(0, min(-o, w.size))].sum()) + ab + e + slack
              for w, o, ab, e in lattice_walk(sel_q, smin, L, -M, M, "absorb", "clamp")]
        return np.array(lo), np.array(hp) + np.array(hq), h
    lo = [float(np.sum(w * np.exp(grid(w, o)))) - e - slack
          for w, o, _, e in lattice_walk(spread, kmin, L, -M, 0, "drop", "clamp")]
    a = np.array([1.0] + [float(w.sum()) + ab + e + slack
                          for w, _, ab, e in lattice_walk(sel_p, smin, L, 0, M, "drop", "absorb")])
    b = np.array([1.0] + [float(w.sum()) + ab + e + slack
                          for w, _, ab, e in lattice_walk(sel_q, smin, L, -M, -1, "absorb", "drop")])
    hi = np.array([np.sum(a[: i + 1] * b[i::-1]) for i in range(1, L + 1)]) * (1 + 4 * _EPS * L)
    return np.array(lo), hi, h


def _values(draft, target, draft_length, route: str, step, want: tuple[str, ...]) -> IIDBlockValues:
    p, q, L = _check_inputs(draft, target, draft_length, route, step)
    m1 = float(np.minimum(p, q).sum())  # 1 - TV(p, q): the l = 1 term of (4), (8) and (17)
    tok = m1 ** np.arange(1, L + 1)
    out = dict.fromkeys(("verification", "optimum"), _NAN)
    out["token"] = _result(tok, tok, "closed form")
    if L == 1 or not want:
        return IIDBlockValues(**{key: out["token"] if key in want else v for key, v in out.items()})
    P, Q = ratio_classes(p, q)
    work = math.comb(L + P.size, P.size) * max(P.size, 1)
    if route == "exact" and work > MAX_CLASS_WORK:
        raise SizeLimitError(f"the ratio-class route for K = {P.size} classes, L = {L} needs {work:,} state "
                             f"entries, above MAX_CLASS_WORK = {MAX_CLASS_WORK:,}; use route='lattice'",
                             size=work, limit=MAX_CLASS_WORK)
    if route == "exact" or (route == "auto" and work <= MAX_CLASS_WORK):
        t_opt, t_bv = _exact_terms(P, Q, L) if P.size else (np.zeros(L), np.zeros(L))
        t_opt[0] = t_bv[0] = m1
        for key, t in (("verification", t_bv), ("optimum", t_opt)):
            out[key] = _result(t, t, "ratio classes (exact)") if key in want else _NAN
        return IIDBlockValues(**out)
    bounds, steps = {}, {}
    for key in want:
        lo, hi, steps[key] = _lattice_terms(p, q, L, step, key)
        lo[0] = hi[0] = m1
        bounds[key] = [np.maximum(lo, tok), np.minimum.accumulate(np.minimum(hi, 1.0))]  # (18); non-increasing
    if len(bounds) == 2:  # (18): BV_l <= OPT_l
        bounds["verification"][1] = np.minimum(bounds["verification"][1], bounds["optimum"][1])
        bounds["optimum"][0] = np.maximum(bounds["optimum"][0], bounds["verification"][0])
    for key, (lo, hi) in bounds.items():
        out[key] = _result(lo, hi, f"log-ratio lattice, certified bounds (step {steps[key]:.3g})")
    return IIDBlockValues(**out)


def iid_block_values(draft, target, draft_length: int, *, route: str = "auto",
                     step: float | None = None) -> IIDBlockValues:
    r"""Token (4), block-verification (17) and optimal (8) expected accepted lengths of an IID pair.

    With r = q/p and X ~ p: E[τ_tok] = Σ_{l=1}^{L} (1 − TV(p, q))^l (token verification [1]);
    E[τ_BV] = Σ_l E[w_l], w_l = min(1, w_{l−1} r(X_l)), w_0 = 1 (block verification [3]);
    E[τ_opt] = Σ_l (1 − TV(p^{⊗l}, q^{⊗l})) (the block-OT optimum, Theorem 1 of [2]).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        The rows p (draft) and q (target), checked by :func:`~otspec.distributions.validate_probs`.
    draft_length : int
        Block length L >= 1 (at most :data:`MAX_DRAFT_LENGTH`).
    route : {"auto", "exact", "lattice"}, default "auto"
        "exact": ratio classes, refused with :class:`~otspec.errors.SizeLimitError` (a ValueError)
        when :math:`\binom{L+K}{K} K` for K classes exceeds :data:`MAX_CLASS_WORK`; "lattice":
        certified bounds; "auto": exact when it fits. L = 1 is always the closed form 1 - TV(p, q).
    step : float, optional
        Lattice step h in log-ratio units; default None: the widest walk fills :data:`LATTICE_POINTS`.
        Refused with ``route="exact"``; with ``"auto"`` it applies when the lattice route is taken.

    Returns
    -------
    IIDBlockValues
        ``token`` (closed form), ``verification`` (17) and ``optimum`` (8), each an
        :class:`IIDBlockValue` with ``low <= value <= high`` and per-length ``terms`` (length L).

    Raises
    ------
    ValueError
        On invalid rows, rows of different lengths, an invalid L, route or step;
        :class:`~otspec.errors.SizeLimitError` for the exact route or a lattice above its limits.

    Notes
    -----
    Lattice bounds are tightened termwise by :math:`(1 - TV)^l \le BV_l \le OPT_l` (eq. (18)) and
    by both terms being non-increasing in l. At V = 50,000, L = 16 the default step gives gaps
    below 1e-6 (measured 2e-8 to 3e-7) in about 0.3 s for both values (``benchmarks/bench_iid_blocks.py``).

    References
    ----------
    .. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.
    .. [2] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.
    .. [3] Z. Sun, U. Mendlovic, Y. Leviathan, A. Aharoni, J. H. Ro, A. Beirami, A. T. Suresh,
       "Block Verification Accelerates Speculative Decoding", ICLR 2025, arXiv:2403.10444.

    Examples
    --------
    The motivating example of [3]: p = (2/3, 1/3), q = (1/3, 2/3), L = 2 (spec §7).

    >>> v = iid_block_values([2 / 3, 1 / 3], [1 / 3, 2 / 3], 2)  # 10/9, 11/9, 12/9
    >>> [round(9 * x.value, 12) for x in (v.token, v.verification, v.optimum)]
    [10.0, 11.0, 12.0]
    """
    return _values(draft, target, draft_length, route, step, ("verification", "optimum"))


def iid_token_value(draft, target, draft_length: int) -> IIDBlockValue:
    r"""Token verification, eq. (4) for IID rows: :math:`\sum_{l=1}^{L} (1 - TV(p, q))^l` (exact)."""
    return _values(draft, target, draft_length, "auto", None, ()).token


def iid_block_verification(draft, target, draft_length: int, *, route: str = "auto",
                           step: float | None = None) -> IIDBlockValue:
    """Published block verification [1], eq. (17), of an IID pair: Σ_{l=1}^{L} E_{p^{⊗l}}[w_l].

    w_0 = 1 and w_l = min(1, w_{l−1} r(X_l)) with r = q/p, X_i ~ p i.i.d.; routes as in
    :func:`iid_block_values`.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        The rows p (draft) and q (target).
    draft_length : int
        L >= 1, at most :data:`MAX_DRAFT_LENGTH`.
    route : {"auto", "exact", "lattice"}, default "auto"
        As in :func:`iid_block_values`.
    step : float, optional
        Lattice step h; default None (see :func:`iid_block_values`).

    Returns
    -------
    IIDBlockValue
        ``value`` with certified ``low <= exact <= high`` (equal on the exact routes) and ``terms``.

    Raises
    ------
    ValueError
        As :func:`iid_block_values`.

    References
    ----------
    .. [1] Z. Sun, U. Mendlovic, Y. Leviathan, A. Aharoni, J. H. Ro, A. Beirami, A. T. Suresh,
       "Block Verification Accelerates Speculative Decoding", ICLR 2025, arXiv:2403.10444.

    Examples
    --------
    p = (0.75, 0.25), q = (0.25, 0.75), L = 2: r = (1/3, 3), so w_1 = (1/3, 1) and
    E[w_1] = 0.75/3 + 0.25 = 0.5; over 00, 01, 10, 11,
    E[w_2] = (9/16)(1/9) + (3/16)(1) + (3/16)(1/3) + (1/16)(1) = 6/16.

    >>> v = iid_block_verification([0.75, 0.25], [0.25, 0.75], 2)
    >>> round(v.value, 12), v.gap  # 0.5 + 0.375, exact
    (0.875, 0.0)
    """
    return _values(draft, target, draft_length, route, step, ("verification",)).verification


def iid_block_optimum(draft, target, draft_length: int, *, route: str = "auto",
                      step: float | None = None) -> IIDBlockValue:
    """Block-OT optimum [1], eq. (8), of an IID pair: Σ_{l=1}^{L} (1 − TV(p^{⊗l}, q^{⊗l})).

    Theorem 1 of [1] for blocks of i.i.d. tokens: Σ_l Σ_{x^l} min(p(x^l), q(x^l)); routes as in
    :func:`iid_block_values`.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        The rows p (draft) and q (target).
    draft_length : int
        L >= 1, at most :data:`MAX_DRAFT_LENGTH`.
    route : {"auto", "exact", "lattice"}, default "auto"
        As in :func:`iid_block_values`.
    step : float, optional
        Lattice step h; default None (see :func:`iid_block_values`).

    Returns
    -------
    IIDBlockValue
        ``value`` with certified ``low <= exact <= high`` (equal on the exact routes) and ``terms``.

    Raises
    ------
    ValueError
        As :func:`iid_block_values`.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    p = (0.75, 0.25), q = (0.25, 0.75): 1 − TV(p, q) = 0.5, and Bin(2, 0.25), Bin(2, 0.75) overlap in 0.5.

    >>> v = iid_block_optimum([0.75, 0.25], [0.25, 0.75], 2)
    >>> round(v.value, 12), v.gap
    (1.0, 0.0)
    """
    return _values(draft, target, draft_length, route, step, ("optimum",)).optimum
