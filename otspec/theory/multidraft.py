r"""Closed forms of multi-draft verification at one position (k candidates).

Spec ``multi_draft_otm.md`` §4–8 (SpecTr) and ``mcsd.md`` §4. Convention: **p is the draft,
q the target** (MCSD swaps the letters). Acceptance means P(the output is an accepted
candidate).

* SpecTr's closed forms: eq. (14) (Bernoulli pairs) and eq. (15) (uniform pairs);
* k-Seq: β(ρ) eq. (8), the residual eq. (9), ρ* eq. (10) — one batched implementation
  (:func:`kseq_parameters`, :func:`kseq_rho_star`) behind the scalar helpers;
* multi-round rejection sampling (SpecInfer; MCSD Algorithms 1–2): the residual recursion
  (:func:`multiround_rejection`) and its acceptance;
* the naive scheme (MCNS) and SpecTr's Lemma 3 upper bound, eq. (12).

The optimum α_k itself is a transport problem: see :mod:`otspec.solvers.otm` (LP, max-flow)
and :mod:`otspec.solvers.otm_dual` (min-cut over sorted prefixes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from ..checks import COUNT_CAP, MAX_CANDIDATES, capped_perm, check_size
from ..distributions import first_index, likelihood_ratio, namespace, residual, row_pair
from ..drafts.laws import (
    check_k,
    draft_inclusion_probs,
    draft_tuple_law,
    inclusion_iid,
    tuple_membership,
)
from ..errors import SizeLimitError

__all__ = [
    "KSEQ_RESIDUAL_TOL",
    "MAX_BRUTEFORCE_VOCAB",
    "MAX_LEMMA3_TERMS",
    "MAX_MULTIROUND_PATHS",
    "RHO_TOL",
    "KSeqParameters",
    "bernoulli_alpha",
    "kseq_acceptance",
    "kseq_beta",
    "kseq_parameters",
    "kseq_residual",
    "kseq_rho_star",
    "lemma3_upper_bound",
    "multiround_acceptance",
    "multiround_rejection",
    "naive_acceptance",
    "subset_masses",
    "uniform_alpha",
    "uniform_multiround_without_replacement",
]

#: Most negative entry of the k-Seq residual numerator (9) that is clipped to 0 (float64);
#: dtypes narrower than float64 get ``64 * eps``. Below it the call raises (ρ < ρ*).
KSEQ_RESIDUAL_TOL = 1e-12
#: Bisection accuracy of ρ* (eq. (10)).
RHO_TOL = 1e-12
_GRID = 32  # the k-Seq ρ* search splits its bracket into this many pieces per round
#: Largest vocabulary whose 2^V token sets :func:`lemma3_upper_bound` (and the dual's brute
#: force) enumerate.
MAX_BRUTEFORCE_VOCAB = 16
#: Most (subset, tuple) pairs :func:`lemma3_upper_bound` evaluates.
MAX_LEMMA3_TERMS = 2**24
#: Most draft paths :func:`multiround_acceptance` explores without replacement.
MAX_MULTIROUND_PATHS = 2**18


def _check_unit(x, name: str) -> float:
    try:
        val = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {x!r}") from None
    if not (0.0 <= val <= 1.0):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {x!r}")
    return val


def bernoulli_alpha(draft_p: float, target_p: float, k: int) -> float:
    """Eq. (14): α_k(Ber p₁, Ber q₁) = min{q₁, 1 − (1−p₁)^k} + min{1 − q₁, 1 − p₁^k}.

    ``draft_p`` = p₁ = P(draft token = 1), ``target_p`` = q₁ = P(target token = 1).

    >>> bernoulli_alpha(0.25, 0.75, 1)
    0.5
    """
    p1, q1, k = _check_unit(draft_p, "draft_p"), _check_unit(target_p, "target_p"), check_k(k)
    return min(q1, 1.0 - (1.0 - p1) ** k) + min(1.0 - q1, 1.0 - p1**k)


def uniform_alpha(r: float, k: int) -> float:
    """Eq. (15): α_k = 1 − (1 − 1/r)^k for draft p = U(d) and target q = U(d/r), r >= 1.

    >>> uniform_alpha(2.0, 2)
    0.75
    """
    k = check_k(k)
    try:
        r = float(r)
    except (TypeError, ValueError):
        raise ValueError(f"r: expected a real ratio >= 1, got {r!r}") from None
    if not (math.isfinite(r) and r >= 1.0):
        raise ValueError(f"r: expected a finite ratio d/d_q >= 1, got {r!r}")
    return 1.0 - (1.0 - 1.0 / r) ** k


def uniform_multiround_without_replacement(support: int, target_support: int, k: int) -> float:
    """Multi-round acceptance without replacement for p = U(N), q = U(d_q) inside it: 1 − C(N−d_q, k)/C(N, k).

    MCSD Algorithm 2 accepts the first candidate that lands in q's support (there
    min{1, t(x)/d(x)} = 1, and a candidate outside it leaves t = q and d uniform on the rest),
    so it accepts iff one of k draws without replacement from N tokens hits the d_q tokens.

    >>> uniform_multiround_without_replacement(4, 2, 2)
    0.8333333333333334
    """
    N, dq, k = int(support), int(target_support), check_k(k)
    if not 1 <= dq <= N:
        raise ValueError(f"target_support: expected 1 <= d_q <= N = {N}, got {target_support!r}")
    return 1.0 - math.comb(N - dq, k) / math.comb(N, k)


# =============================================================================== k-Seq
@dataclass
class KSeqParameters:
    """Per-row k-Seq quantities (spec eqs. (8)–(10)), each of shape (B,) except ``residual`` (B, V)."""

    rho: Any
    beta: Any
    p_acc: Any
    residual: Any


def _as_row_vector(x, like):
    xp = namespace(like)
    if array_api_compat.is_array_api_obj(x):
        return xp.astype(xp.asarray(x, device=array_api_compat.device(like)), like.dtype)
    return xp.full((like.shape[0],), float(x), dtype=like.dtype, device=array_api_compat.device(like))


def _kseq_terms(p, q, rho):
    """min{p, q/ρ} (B, V), β(ρ) and 1 − β(ρ) = Σ (p − q/ρ)_+ (summed directly, no cancellation)."""
    xp = namespace(p, q)
    scaled = q / rho[:, None]
    m = xp.minimum(p, scaled)
    return m, xp.sum(m, axis=-1), xp.sum(xp.clip(p - scaled, min=0.0), axis=-1)


def _kseq_f(p, q, k, rho):
    """f(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ) (eq. (10)), row-wise."""
    _, beta, gap = _kseq_terms(p, q, rho)
    return 1.0 - gap**k - rho * beta


def _batched(draft, target):
    """(p, q, scalar): 1-D rows are validated and lifted to a batch of one."""
    if getattr(draft, "ndim", np.ndim(draft)) == 1 or getattr(target, "ndim", np.ndim(target)) == 1:
        p, q = row_pair(draft, target)
        return p[None], q[None], True
    return draft, target, False


def kseq_rho_star(draft, target, k, *, tol: float = RHO_TOL, max_k: int | None = None):
    r"""ρ*: the root of eq. (10), f(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ), to ``tol``.

    ``draft`` and ``target`` are one row each (V,) — validated, a float is returned — or
    batches (B, V) of valid rows (numpy or torch, not re-validated), giving shape (B,); ``k``
    is an int or a (B,) array of candidate counts.

    f is non-increasing on [1, ∞) (β(ρ) decreases, ρβ(ρ) = Σ min(ρp, q) increases),
    f(1) ≥ 0 and f(k) ≤ 0 by Bernoulli's inequality. SpecTr's Lemma 4 also places ρ* below
    max_x q(x)/p(x); that holds when supp q ⊆ supp p but **not in general**: for
    p = (½, ½, 0), q = (0.6, 0, 0.4), k = 2, f(1.2) = 0.15 > 0 and ρ* = 1.6325 > max q/p.
    Here max q/p = ∞ (target mass outside the draft's support), so the bracket
    [1, max(1, min(k, max q/p))] is [1, k]; when supp q ⊆ supp p the lemma holds.
    One sort of the likelihood ratios q/p per row finds the piece between two consecutive ratios
    that holds ρ* (there β(ρ) = P + Q/ρ in closed form); a search on that closed form, 31 points per
    round (so about 8 rounds to 1e-12), then costs O(1) per point instead of a pass over the vocabulary.
    The upper end of the final bracket is returned, so f(ρ) ≤ 0 and the residual (9) is
    non-negative (Theorem 1 needs ρ ≥ ρ*). Rows with f(1) ≤ 0 — k ≤ 1, TV(p, q) = 0 or
    disjoint supports (β ≡ 0) — get ρ = 1. A row stops refining once its own bracket is
    below ``tol``, so results depend on the batch only through rounding (summation order).
    ``max_k`` (an upper bound on every row's k) fixes the number of rounds from the widest bracket
    it allows, k − 1, instead of reading the widest one back from a device: rows that are done stop
    refining either way, so the result is the same.

    With p = U(6) and q = U(2) (r = 3) and k = 3, ρ* = 57/27 (β(ρ*) = 1/3, spec §4):

    >>> uniform6, uniform2 = [1 / 6] * 6, [0.5, 0.5, 0, 0, 0, 0]
    >>> round(kseq_rho_star(uniform6, uniform2, 3) * 27, 9)
    57.0
    """
    p, q, scalar = _batched(draft, target)
    if scalar:
        k = check_k(k)
    xp = namespace(p, q)
    k = _as_row_vector(k, p)
    ratio = likelihood_ratio(p, q)
    ones = xp.ones_like(k)
    hi = xp.maximum(xp.minimum(k, xp.max(ratio, axis=-1)), ones)  # f(hi) <= 0 (Lemma 4, or hi = k)
    lo, hi, p_tail, q_head = _kseq_segment(p, q, k, ratio, hi)
    if not hi.shape[0]:
        width = 0.0
    elif max_k is not None and not isinstance(hi, np.ndarray):
        width = max(float(max_k) - 1.0, 0.0)  # hi <= k <= max_k and lo >= 1: no read-back from the device
    else:
        width = float(xp.max(hi - lo))
    steps = xp.astype(xp.arange(1, _GRID, device=array_api_compat.device(p)), p.dtype) / _GRID
    for _ in range(math.ceil(math.log(width / tol) / math.log(_GRID)) if width > tol else 0):
        live = (hi - lo) > tol
        grid = lo[:, None] + (hi - lo)[:, None] * steps  # _GRID − 1 interior points of each bracket
        f = 1.0 - xp.clip(1.0 - p_tail[:, None] - q_head[:, None] / grid, min=0.0)**k[:, None] \
            - grid * p_tail[:, None] - q_head[:, None]
        up = xp.sum(xp.astype(f > 0, xp.int64), axis=-1)  # f is non-increasing: points left of ρ*
        new_lo = xp.where(up > 0, xp.take_along_axis(grid, xp.clip(up - 1, min=0)[:, None], axis=-1)[:, 0], lo)
        new_hi = xp.where(up < _GRID - 1, xp.take_along_axis(grid, xp.clip(up, max=_GRID - 2)[:, None], axis=-1)[:, 0],
                          hi)
        lo, hi = xp.where(live, new_lo, lo), xp.where(live, new_hi, hi)
    rho = xp.where((_kseq_f(p, q, k, ones) <= 0) | (k <= 1), ones, hi)
    return float(rho[0]) if scalar else rho


def _kseq_segment(p, q, k, ratio, hi):
    """The piece of [1, hi] holding ρ*, from the sorted likelihood ratios r = q/p of each row.

    Between consecutive ratios β(ρ) = P + Q/ρ, with P the draft mass of the tokens whose ratio is
    at least the piece's upper end and Q the target mass of the others, so f is known in closed form
    there. f at every ratio inside [1, hi) is one vectorised pass after one sort; the last ratio
    below 1 or with f > 0 and the next one (capped at hi) bracket the root. Returns (lower, upper, P, Q), each of shape (B,)."""
    xp = namespace(p, q)
    order = xp.argsort(ratio, axis=-1, stable=False)
    r = xp.take_along_axis(ratio, order, axis=-1)
    p_head = xp.cumulative_sum(xp.take_along_axis(p, order, axis=-1), axis=-1)
    q_head = xp.cumulative_sum(xp.take_along_axis(q, order, axis=-1), axis=-1)
    p_tail = xp.clip(xp.sum(p, axis=-1, keepdims=True) - p_head, min=0.0)  # draft mass after each ratio
    at_r = xp.minimum(xp.clip(r, min=1.0), hi[:, None])  # f is only used at the ratios inside [1, hi)
    beta = p_tail + q_head / at_r
    f = 1.0 - xp.clip(1.0 - beta, min=0.0)**k[:, None] - at_r * beta
    right = (r < 1.0) | ((r < hi[:, None]) & (f > 0))  # ρ* lies above this ratio; non-increasing f
    count = xp.sum(xp.astype(right, xp.int64), axis=-1)
    V = r.shape[-1]
    at = xp.clip(count - 1, min=0)[:, None]
    nxt = xp.take_along_axis(r, xp.clip(count, max=V - 1)[:, None], axis=-1)[:, 0]
    upper = xp.where(count < V, xp.minimum(nxt, hi), hi)
    first = count > 0
    lower = xp.where(first, xp.clip(xp.take_along_axis(r, at, axis=-1)[:, 0], min=1.0), xp.ones_like(hi))
    tail = xp.where(first, xp.take_along_axis(p_tail, at, axis=-1)[:, 0], xp.sum(p, axis=-1))
    head = xp.where(first, xp.take_along_axis(q_head, at, axis=-1)[:, 0], xp.zeros_like(hi))
    return lower, upper, tail, head


def kseq_parameters(draft_probs, target_probs, k, rho=None, *, check: bool = True,
                    max_k: int | None = None) -> KSeqParameters:
    """ρ, β(ρ), p_acc(ρ) = 1 − (1 − β)^k (eq. (8)) and the residual res_ρ (eq. (9)) for each row.

    .. math::
        \\mathrm{res}_\\rho(x) = \\frac{q(x) - \\min\\{p(x), q(x)/\\rho\\}\\, p_{acc}/\\beta(\\rho)}{1 - p_{acc}}.

    ``draft_probs``, ``target_probs`` are (B, V) valid rows (numpy or torch); ``k`` and ``rho``
    (default :func:`kseq_rho_star`) are scalars or (B,) arrays. The numerator is
    q(x) − P(Y = x, a candidate accepted); entries below −:data:`KSEQ_RESIDUAL_TOL` raise
    ``ValueError`` (ρ < ρ*: k-Seq would not be a valid transport plan), smaller negative
    rounding is clipped to 0 and the row renormalised. Where every candidate is surely
    accepted (p_acc = 1) or none ever is (β = 0) the residual is q. ``check=False`` skips the test for
    negative entries (it reads back from a device; with ρ = ρ* they are rounding only), and ``max_k``
    goes to :func:`kseq_rho_star`.
    """
    p, q = draft_probs, target_probs
    xp = namespace(p, q)
    k = _as_row_vector(k, p)
    rho = kseq_rho_star(p, q, k, max_k=max_k) if rho is None else _as_row_vector(rho, p)
    m, beta, gap = _kseq_terms(p, q, rho)
    p_acc = 1.0 - gap**k
    scale = xp.where(beta > 0, p_acc / xp.where(beta > 0, beta, xp.ones_like(beta)), xp.zeros_like(beta))
    num = q - m * scale[:, None]
    tol = max(KSEQ_RESIDUAL_TOL, 64.0 * float(xp.finfo(p.dtype).eps))
    neg = num < -tol
    if check and bool(xp.any(neg)):
        b, x = first_index(neg)
        star = kseq_rho_star(p[b:b + 1], q[b:b + 1], k[b:b + 1])
        raise ValueError(f"k-Seq residual is negative: rho={float(rho[b])!r} gives a negative residual mass "
                         f"{float(num[b, x]):.3g} at row {b}, token {x}; rho must be >= rho* = {float(star[0])!r} "
                         "(spec eq. (10)) for k-Seq to be lossless")
    num = xp.clip(num, min=0.0)
    mass = xp.sum(num, axis=-1, keepdims=True)
    res = xp.where((mass > 0) & (p_acc < 1)[:, None], num / xp.where(mass > 0, mass, xp.ones_like(mass)), q)
    return KSeqParameters(rho, beta, p_acc, res)


def _check_rho(rho) -> float:
    try:
        val = float(rho)
    except (TypeError, ValueError):
        raise ValueError(f"rho: expected a real division factor >= 1, got {rho!r}") from None
    if not (math.isfinite(val) and val >= 1.0):
        raise ValueError(f"rho: expected a finite division factor >= 1, got {rho!r}")
    return val


def _kseq_row(draft, target, k, rho) -> KSeqParameters:
    p, q = row_pair(draft, target)
    return kseq_parameters(p[None], q[None], check_k(k), None if rho is None else _check_rho(rho))


def kseq_beta(draft, target, rho: float) -> float:
    """Eq. (8): β(ρ) = Σ_x min{p(x), q(x)/ρ} for one (p, q) pair."""
    p, q = row_pair(draft, target)
    return float(_kseq_terms(p[None], q[None], np.array([_check_rho(rho)]))[1][0])


def kseq_acceptance(draft, target, k: int, rho: float | None = None) -> float:
    """k-Seq's p_acc = 1 − (1 − β(ρ))^k (eq. (8)) at ρ (default ρ*); ρ < ρ* raises ``ValueError``.

    This is P(some candidate is accepted); the coupling's P(Y ∈ S(X)) can be larger, since
    the residual draw may hit a drafted token (spec (11)).

    k-Seq is optimal on uniform pairs: 1 − (1 − 1/3)^3 = 19/27 for p = U(6), q = U(2), k = 3 (eq. (15)).

    >>> round(kseq_acceptance([1 / 6] * 6, [0.5, 0.5, 0, 0, 0, 0], 3) * 27, 9)
    19.0
    """
    return float(_kseq_row(draft, target, k, rho).p_acc[0])


def kseq_residual(draft, target, k: int, rho: float) -> np.ndarray:
    """The k-Seq residual res_ρ (eq. (9)) of one (p, q) pair; see :func:`kseq_parameters`."""
    return _kseq_row(draft, target, k, rho).residual[0]


# ========================================================================= multi-round
def multiround_rejection(draft_probs, target_probs, k: int):
    """Multi-round rejection with replacement, row-wise: (Π_{i=1}^{k} ρ_i (B,), t_k (B, V)).

    Residual targets t_0 = q, t_i = Norm[(t_{i−1} − p)_+] (spec §8; MCSD Algorithm 1); the
    i-th candidate, drawn from p independently of the earlier rejections, is rejected with
    probability ρ_i = Σ_x (p(x) − t_{i−1}(x))_+. Once a normaliser Σ(t − p)_+ is 0 rejection
    has probability 0 and t stays put. Rows are (B, V) valid rows, numpy or torch; k is at most
    :data:`~otspec.checks.MAX_CANDIDATES` (one pass over the rows per round).
    """
    k = check_size(k, "k", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES", what="an integer number of rounds")
    xp = namespace(draft_probs, target_probs)
    t = target_probs
    reject = xp.ones_like(t[..., 0])
    for _ in range(int(k)):
        reject = reject * xp.sum(xp.clip(draft_probs - t, min=0.0), axis=-1)
        if not bool(xp.any(reject > 0)):
            break
        t = residual(t, draft_probs)
    return reject, t


def multiround_acceptance(draft, target, k: int, replacement: bool = True) -> float:
    r"""P(some candidate accepted) under multi-round rejection sampling (spec §8; MCSD Alg. 1/2).

    *With replacement*: 1 − Π_i ρ_i (:func:`multiround_rejection`).

    *Without replacement* (Alg. 2): the draft law d changes along the path (rejected tokens
    are removed, d renormalised) while t_i = Norm[(t_{i−1} − d_{i−1})_+] uses the current d;
    exact recursion over all draft paths,
    acc(t, d) = Σ_x min{d(x), t(x)} + Σ_x (d(x) − t(x))_+ · acc(t', d_{−x}), stopping after k
    drafts or when the support is exhausted. At most :data:`MAX_MULTIROUND_PATHS` paths.

    The final residual draw can land on a drafted token; it is not counted (as in §6).

    For p = (¾, ¼), q = (¼, ¾), k = 2: ρ_1 = ½, t_1 = (0, 1), ρ_2 = ¾, so 1 − 3/8:

    >>> round(multiround_acceptance([0.75, 0.25], [0.25, 0.75], 2), 12)
    0.625
    """
    p, q = row_pair(draft, target)
    k = check_size(k, "k", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES", what="an integer number of drafts")
    if replacement:
        return 1.0 - float(multiround_rejection(p[None], q[None], k)[0][0])
    s = int(np.count_nonzero(p))
    paths = min(sum(capped_perm(s, i) for i in range(min(k, s, 64))), COUNT_CAP)
    if paths > MAX_MULTIROUND_PATHS:
        raise SizeLimitError(f"multiround_acceptance without replacement explores {paths:,} draft paths for {s} "
                             f"tokens and k={k}, above MAX_MULTIROUND_PATHS = {MAX_MULTIROUND_PATHS:,}",
                             size=paths, limit=MAX_MULTIROUND_PATHS)

    def acc(t: np.ndarray, d: np.ndarray, depth: int) -> float:
        accept = float(np.minimum(d, t).sum())
        pos = np.maximum(t - d, 0.0)
        if depth == k or pos.sum() <= 0.0:
            return accept
        rej = np.maximum(d - t, 0.0)
        t_next = pos / pos.sum()
        if depth + 1 == k:  # the last draft: every rejected token's branch at once
            return accept + _last_draft(t_next, d, rej)
        for x in np.flatnonzero(rej > 0):
            d_next = d.copy()
            d_next[x] = 0.0
            if d_next.sum() > 0.0:  # else the support is exhausted: no further draft
                accept += float(rej[x]) * acc(t_next, d_next / d_next.sum(), depth + 1)
        return accept

    return acc(q, p, 1)


def _last_draft(t: np.ndarray, d: np.ndarray, rej: np.ndarray) -> float:
    r"""Σ_x rej(x) · Σ_y min{d_x(y), t(y)} over the tokens x with rej(x) > 0, where d_x is d without x,
    renormalised (a branch whose d_x has no mass left adds nothing): the last round of
    :func:`multiround_acceptance` without replacement for every rejected token together.

    With c = 1 / (1 − d(x)), Σ_{y≠x} min{c d(y), t(y)} = G(c) − min{c d(x), t(x)} and
    G(c) = Σ_{r(y) < c} t(y) + c Σ_{r(y) ≥ c} d(y) over the tokens y of positive d, r = t / d: one sort by r
    and a search per x, O(V log V) in place of O(V²)."""
    xs = np.flatnonzero(rej > 0)
    rest = d.sum() - d[xs]
    for i in np.flatnonzero(d[xs] > 0.5):  # at most one token: the mass left without it, summed, not subtracted
        rest[i] = np.delete(d, xs[i]).sum()
    keep = rest > 0.0
    xs, rest = xs[keep], rest[keep]
    if xs.size == 0:
        return 0.0
    supp = np.flatnonzero(d > 0)
    ratio = t[supp] / d[supp]
    order = np.argsort(ratio, kind="stable")
    r, ds, ts = ratio[order], d[supp][order], t[supp][order]
    t_below = np.concatenate([[0.0], np.cumsum(ts)])  # Σ t over the j smallest ratios
    d_above = np.concatenate([np.cumsum(ds[::-1])[::-1], [0.0]])  # Σ d over the others, accurate when small
    c = 1.0 / rest
    j = np.searchsorted(r, c, side="left")
    g = t_below[j] + c * d_above[j]
    own = np.minimum(c * d[xs], t[xs])
    return float(rej[xs] @ (g - own))


def naive_acceptance(draft, target, k: int, replacement: bool = True) -> float:
    """MCNS acceptance (spec §8): Y ~ q independent of the candidates, accepted iff Y ∈ S(X).

    Σ_y q(y) P_D(y ∈ S(X)) (:func:`~otspec.drafts.draft_inclusion_probs`); with replacement
    Σ_y q(y) (1 − (1 − p(y))^k).

    >>> naive_acceptance([0.5, 0.5], [0.5, 0.5], 2)
    0.75
    """
    p, q = row_pair(draft, target)
    return float(q @ draft_inclusion_probs(p, k, replacement))


# ============================================================================ Lemma 3
def subset_masses(w: np.ndarray) -> np.ndarray:
    """Σ_{x ∈ A} w(x) for every bitmask A (bit x = token x), by adding one token at a time."""
    out = np.zeros(1)
    for x in range(w.size):
        out = np.concatenate([out, out + w[x]])
    return out


def lemma3_upper_bound(draft, target, k: int, replacement: bool = True) -> float:
    r"""SpecTr's Lemma 3 upper bound ᾱ_k (eq. (12)), by brute force over Ω₀ ⊆ Ω.

    .. math::
        \bar\alpha_k = \min_{\Omega_0 \subseteq \Omega} \Big\{ \sum_{y \in \Omega_0}
        \min\{q(y), 1 - (1 - p(y))^k\} + \sum_{x \in \Omega^k} \min\Big\{\prod_i p(x_i),
        \sum_{y \in S(x) \setminus \Omega_0} q(y)\Big\}\Big\}.

    With ``replacement=False`` the same bound for sampling without replacement: ∏ p(x_i)
    becomes P_D(x) and 1 − (1 − p(y))^k becomes P_D(y ∈ S(X)); the proof (split the
    acceptance into Y ∈ Ω₀ and Y ∉ Ω₀) is unchanged. Ω₀ = Ω∖A gives every cut value of the
    dual (4), so ᾱ_k = α_k (spec §5). Refuses V > :data:`MAX_BRUTEFORCE_VOCAB` and more than
    :data:`MAX_LEMMA3_TERMS` (set, tuple) pairs.
    """
    p, q = row_pair(draft, target)
    k = check_k(k)
    V = p.size
    if V > MAX_BRUTEFORCE_VOCAB:
        raise SizeLimitError(f"lemma3_upper_bound enumerates 2^V sets; V={V} is above MAX_BRUTEFORCE_VOCAB = "
                             f"{MAX_BRUTEFORCE_VOCAB}", size=V, limit=MAX_BRUTEFORCE_VOCAB)
    tuples, probs = draft_tuple_law(p, k, bool(replacement))
    if (1 << V) * probs.size > MAX_LEMMA3_TERMS:
        raise SizeLimitError(f"lemma3_upper_bound needs 2^{V} x {probs.size:,} terms, above MAX_LEMMA3_TERMS = "
                             f"{MAX_LEMMA3_TERMS:,}", size=(1 << V) * probs.size, limit=MAX_LEMMA3_TERMS)
    member = tuple_membership(tuples, V)
    hit = inclusion_iid(p, k) if replacement else probs @ member
    first = subset_masses(np.minimum(q, hit))  # Σ_{y ∈ Ω0} min(q, P(y ∈ S))
    qmask = subset_masses(q)
    set_code = member.astype(np.int64) @ (1 << np.arange(V, dtype=np.int64))
    full = (1 << V) - 1
    best, step = np.inf, max(1, (1 << 22) // probs.size)
    for start in range(0, 1 << V, step):
        omega0 = np.arange(start, min(1 << V, start + step))
        outside = set_code[None, :] & (full ^ omega0)[:, None]  # S(x) ∖ Ω0
        second = np.minimum(probs[None, :], qmask[outside]).sum(axis=1)
        best = min(best, float((first[omega0] + second).min()))
    return best
