r"""k-Seq, SpecTr's sequential multi-draft selection with division factor ρ (spec ``multi_draft_otm.md`` §4).

Convention: **p is the draft, q the target**. k candidates X_1 … X_k are drawn i.i.d. from p; the
i-th is accepted with probability min{1, q(X_i)/(ρ p(X_i))}, the first accepted one is the output,
and if none is, the output is drawn from the residual res_ρ. With
β(ρ) = Σ_x min{p(x), q(x)/ρ} (eq. (8)) some candidate is accepted with probability
p_acc = 1 − (1 − β(ρ))^k; the residual is eq. (9), and k-Seq is a valid transport plan from
p^{⊗k} to q for ρ ≥ ρ*, the root of eq. (10) (SpecTr's Theorem 1).

One batched implementation (numpy or torch rows, :func:`kseq_parameters`, :func:`kseq_rho_star`)
sits behind the scalar helpers. Re-exported by :mod:`otspec.theory.multidraft`.

Spec: ``docs/multi_draft_otm.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import array_api_compat
import numpy as np

from ..checks import check_flag, check_real, check_size, real_array
from ..distributions import first_index, likelihood_ratio, namespace, row_pair, validate_probs
from ..drafts.laws import check_k
from ..sources import Source

__all__ = [
    "KSEQ_RESIDUAL_TOL",
    "RHO_TOL",
    "KSeqParameters",
    "kseq_acceptance",
    "kseq_beta",
    "kseq_parameters",
    "kseq_residual",
    "kseq_rho_star",
]

#: Most negative entry of the k-Seq residual numerator (9) that is clipped to 0 (float64);
#: dtypes narrower than float64 get ``64 * eps``. Below it the call raises (ρ < ρ*).
KSEQ_RESIDUAL_TOL = 1e-12
#: Bisection accuracy of ρ* (eq. (10)).
RHO_TOL = 1e-12
_GRID = 32  # the k-Seq ρ* search splits its bracket into this many pieces per round


@dataclass
class KSeqParameters:
    """Per-row k-Seq quantities (spec eqs. (8)–(10)), each of shape (B,) except ``residual`` (B, V)."""

    rho: Any
    beta: Any
    p_acc: Any
    residual: Any


def _as_row_vector(x, like):
    xp = namespace(like)
    if array_api_compat.is_array_api_obj(x) and getattr(x, "ndim", 1) == 0:  # np.int64(2): one value for every row
        x = x.item()
    if isinstance(x, bool | str):  # float() would read True and '2'
        raise ValueError(f"k, rho: expected numbers, got {x!r}")
    if array_api_compat.is_array_api_obj(x):
        if "bool" in str(x.dtype) or getattr(x.dtype, "kind", "f") not in "iuf":  # True was k = 1, '2' was 2
            raise ValueError(f"k, rho: expected numbers, got dtype {x.dtype}")
        return xp.astype(xp.asarray(x, device=array_api_compat.device(like)), like.dtype)
    if isinstance(x, list | tuple):  # one value per row, read entry by entry ('2' and True refused)
        return xp.astype(xp.asarray(real_array(x, "k, rho", finite=False), device=array_api_compat.device(like)),
                         like.dtype)
    return xp.full((like.shape[0],), float(x), dtype=like.dtype, device=array_api_compat.device(like))


def _check_batch_k(k) -> None:
    """A ``ValueError`` unless every entry of a batch's k (B,) is a finite number >= 0 (one read-back; a row with no
    candidate has k = 0)."""
    xp = namespace(k)
    bad = ~xp.isfinite(k) | (k < 0) | (k != xp.floor(k))
    if bool(xp.any(bad)):
        raise ValueError(f"k: expected whole numbers of candidates >= 0, got {float(k[first_index(bad)])!r}")


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
    for name, rows in (("draft", draft), ("target", target)):
        if isinstance(rows, Source):
            raise ValueError(f"{name}: expected probability rows, got a {type(rows).__name__} (pass its row, e.g. "
                             f"{name}.next_probs([[]])[0])")
    if getattr(draft, "ndim", np.ndim(draft)) == 1 or getattr(target, "ndim", np.ndim(target)) == 1:
        p, q = row_pair(draft, target)
        return p[None], q[None], True
    return draft, target, False


def kseq_rho_star(draft, target, k, *, tol: float = RHO_TOL, max_k: int | None = None, check: bool = True):
    """ρ*: the root of eq. (10), f(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ), to ``tol`` — the division factor of k-Seq [1].

    β(ρ) = Σ_x min{p(x), q(x)/ρ}. SpecTr's Theorem 1 [1] makes k-Seq a valid transport plan from
    p^{⊗k} to q for every ρ ≥ ρ*, and ρ* gives its acceptance guarantee (11).

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

    Parameters
    ----------
    draft, target : array_like, shape (V,) or (B, V)
        The draft rows p and the target rows q (one pair, validated, or a batch of valid rows).
    k : int or array_like of int, shape (B,)
        Candidate counts (>= 1 for a single pair).
    tol : float, default :data:`RHO_TOL`
        Width of the final bracket.
    check : bool, default True
        For a batch: validate its rows and k (one read-back each); False takes them as valid.
    max_k : int, optional
        An upper bound on every row's k (default None). It fixes the number of rounds from the widest
        bracket it allows, k − 1, instead of reading the widest one back from a device: rows that are
        done stop refining either way, so the result is the same.

    Returns
    -------
    float or array, shape (B,)
        ρ* >= 1: a float for one pair of rows, an array (of the rows' namespace) for a batch.

    Raises
    ------
    ValueError
        For a single pair: invalid rows, a vocabulary mismatch or an invalid k.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    With p = U(6) and q = U(2) (r = 3) and k = 3, eq. (15) gives ρ* = r (1 − (1 − 1/r)^k) = 57/27:

    >>> uniform6, uniform2 = [1 / 6] * 6, [0.5, 0.5, 0, 0, 0, 0]
    >>> round(kseq_rho_star(uniform6, uniform2, 3) * 27, 9)
    57.0
    >>> kseq_rho_star(uniform6, uniform2, 1)  # one candidate: f(1) = 0, so ρ* = 1
    1.0
    """
    tol = check_real(tol, "tol", low=0.0, low_open=True)
    if max_k is not None:
        check_size(max_k, "max_k")
    p, q, scalar = _batched(draft, target)
    if scalar:
        k = check_k(k)
    elif check_flag(check, "check"):  # a batch with NaN rows or k = -1 gave rho* = 1 without a word
        p, q = validate_probs(p, "draft", min_ndim=2), validate_probs(q, "target", min_ndim=2)
    xp = namespace(p, q)
    k = _as_row_vector(k, p)
    if not scalar and check:
        _check_batch_k(k)
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
    r"""ρ, β(ρ), p_acc(ρ) = 1 − (1 − β)^k (eq. (8)) and the residual res_ρ (eq. (9)) of k-Seq [1], for each row.

    .. math::
        \mathrm{res}_\rho(x) = \frac{q(x) - \min\{p(x), q(x)/\rho\}\, p_{acc}/\beta(\rho)}{1 - p_{acc}}.

    The numerator is q(x) − P(Y = x, a candidate accepted); entries below −:data:`KSEQ_RESIDUAL_TOL`
    raise ``ValueError`` (k-Seq would not be a valid transport plan; this can happen only for
    ρ < ρ*, and need not: on uniform pairs every ρ ≤ r gives the same, valid, residual), smaller
    negative rounding is clipped to 0 and the row renormalised. Where every candidate is surely
    accepted (p_acc = 1) or none ever is (β = 0) the residual is q.

    Parameters
    ----------
    draft_probs, target_probs : array, shape (B, V)
        Valid probability rows p and q (numpy or torch; not re-validated).
    k : int or array, shape (B,)
        Candidate counts.
    rho : float or array, shape (B,), optional
        Division factors ρ >= 1; default None: ρ* from :func:`kseq_rho_star`.
    check : bool, default True
        Validate the rows and k, and test for negative residual entries; False skips all three (they read back
        from a device; with valid rows and ρ = ρ* the residual's negatives are rounding only).
    max_k : int, optional
        Passed to :func:`kseq_rho_star` (default None).

    Returns
    -------
    KSeqParameters
        ``rho``, ``beta`` and ``p_acc`` of shape (B,), ``residual`` of shape (B, V).

    Raises
    ------
    ValueError
        If ``check`` and some residual numerator is below −:data:`KSEQ_RESIDUAL_TOL`.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    p = U(4), q = U(2), k = 2: ρ* = 2 (1 − 1/4) = 1.5 (eq. (15)), β = Σ min(1/4, (1/2)/1.5) = 1/2 and
    p_acc = 1 − (1/2)² = 3/4; the residual puts (1/2 − (1/4)(3/4)/(1/2)) / (1/4) = 1/2 on each of q's tokens.

    >>> import numpy as np
    >>> par = kseq_parameters(np.array([[0.25] * 4]), np.array([[0.5, 0.5, 0.0, 0.0]]), 2)
    >>> round(float(par.rho[0]), 9), float(par.beta[0]), float(par.p_acc[0])
    (1.5, 0.5, 0.75)
    >>> par.residual.tolist()
    [[0.5, 0.5, 0.0, 0.0]]
    """
    p, q = draft_probs, target_probs
    if not (array_api_compat.is_array_api_obj(p) and array_api_compat.is_array_api_obj(q)):  # lists: read and checked
        p, q = validate_probs(p, "draft_probs", min_ndim=2), validate_probs(q, "target_probs", min_ndim=2)
    check = check_flag(check, "check")
    if max_k is not None:
        check_size(max_k, "max_k")
    if isinstance(k, str | bool) or isinstance(rho, str | bool):  # float() would read '2' and True
        raise ValueError(f"k, rho: expected numbers or arrays, got k={k!r}, rho={rho!r}")
    if not array_api_compat.is_array_api_obj(k) or not getattr(k, "ndim", 1):  # a number, a numpy scalar
        k = check_size(k.item() if hasattr(k, "item") else k, "k", minimum=0,
                       what="an integer number of candidates")  # 2.5 was taken
    shapes = [getattr(x, "shape", np.shape(x)) for x in (p, q)]
    if any(len(shape) != 2 for shape in shapes) or shapes[0] != shapes[1]:
        raise ValueError(f"draft_probs, target_probs: expected two batches of rows of one shape (B, V), got shapes "
                         f"{tuple(shapes[0])} and {tuple(shapes[1])} (one pair: kseq_acceptance / kseq_residual)")
    if check and array_api_compat.is_array_api_obj(draft_probs):  # arrays were taken as valid without a look
        p, q = validate_probs(p, "draft_probs", min_ndim=2), validate_probs(q, "target_probs", min_ndim=2)
    xp = namespace(p, q)
    k = _as_row_vector(k, p)
    if check:
        _check_batch_k(k)
    rho = kseq_rho_star(p, q, k, max_k=max_k, check=False) if rho is None else _as_row_vector(rho, p)
    m, beta, gap = _kseq_terms(p, q, rho)
    p_acc = 1.0 - gap**k
    scale = xp.where(beta > 0, p_acc / xp.where(beta > 0, beta, xp.ones_like(beta)), xp.zeros_like(beta))
    num = q - m * scale[:, None]
    tol = max(KSEQ_RESIDUAL_TOL, 64.0 * float(xp.finfo(p.dtype).eps))
    neg = num < -tol
    if check and bool(xp.any(neg)):
        b, x = first_index(neg)
        star = kseq_rho_star(p[b:b + 1], q[b:b + 1], k[b:b + 1], check=False)
        raise ValueError(f"k-Seq residual is negative: rho={float(rho[b])!r} gives a negative residual mass "
                         f"{float(num[b, x]):.3g} at row {b}, token {x}; rho must be >= rho* = {float(star[0])!r} "
                         "(spec eq. (10)) for k-Seq to be lossless")
    num = xp.clip(num, min=0.0)
    mass = xp.sum(num, axis=-1, keepdims=True)
    res = xp.where((mass > 0) & (p_acc < 1)[:, None], num / xp.where(mass > 0, mass, xp.ones_like(mass)), q)
    return KSeqParameters(rho, beta, p_acc, res)


def _check_rho(rho) -> float:
    return check_real(rho, "rho", low=1.0)  # a finite division factor >= 1; text and booleans refused


def _kseq_row(draft, target, k, rho) -> KSeqParameters:
    p, q = row_pair(draft, target)
    return kseq_parameters(p[None], q[None], check_k(k), None if rho is None else _check_rho(rho))


def kseq_beta(draft, target, rho: float) -> float:
    """Eq. (8) of k-Seq [1]: β(ρ) = Σ_x min{p(x), q(x)/ρ} for one (p, q) pair.

    β(1) = Σ_x min{p(x), q(x)} = 1 − TV(p, q); β decreases in ρ, and k-Seq accepts some candidate
    with probability 1 − (1 − β(ρ))^k.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    rho : float
        The division factor ρ >= 1 (finite).

    Returns
    -------
    float
        β(ρ) in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows, a vocabulary mismatch, or ρ < 1, infinite or not a number.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    >>> kseq_beta([0.5, 0.5], [0.75, 0.25], 1.0)  # 1 - TV(p, q) = 1 - 0.25
    0.75
    >>> kseq_beta([0.5, 0.5], [0.75, 0.25], 2.0)  # min(0.5, 0.375) + min(0.5, 0.125)
    0.5
    """
    p, q = row_pair(draft, target)
    return float(_kseq_terms(p[None], q[None], np.array([_check_rho(rho)]))[1][0])


def kseq_acceptance(draft, target, k: int, rho: float | None = None) -> float:
    """k-Seq's p_acc = 1 − (1 − β(ρ))^k (eq. (8)) at ρ (default ρ*): P(some candidate is accepted).

    β(ρ) = Σ_x min{p(x), q(x)/ρ}. The coupling's P(Y ∈ S(X)) can be larger, since the residual
    draw may hit a drafted token (spec (11)). k-Seq is optimal on uniform pairs (eq. (15)).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of candidates, >= 1.
    rho : float, optional
        The division factor ρ >= 1; default None: ρ* (:func:`kseq_rho_star`).

    Returns
    -------
    float
        p_acc in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows, k or ρ, a vocabulary mismatch, or a ρ whose residual (9) is negative
        (possible only below ρ*; see :func:`kseq_parameters`).

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    1 − (1 − 1/3)^3 = 19/27 for p = U(6), q = U(2), k = 3 (eq. (15)):

    >>> round(kseq_acceptance([1 / 6] * 6, [0.5, 0.5, 0, 0, 0, 0], 3) * 27, 9)
    19.0
    >>> kseq_acceptance([0.5, 0.5], [0.75, 0.25], 1)  # one candidate, ρ* = 1: 1 - TV(p, q)
    0.75
    """
    return float(_kseq_row(draft, target, k, rho).p_acc[0])


def kseq_residual(draft, target, k: int, rho: float) -> np.ndarray:
    """The k-Seq residual res_ρ (eq. (9) of [1]) of one (p, q) pair: the output law when every candidate is rejected.

    res_ρ(x) = [q(x) − min{p(x), q(x)/ρ} p_acc/β(ρ)] / (1 − p_acc), with β(ρ) = Σ_x min{p(x), q(x)/ρ}
    and p_acc = 1 − (1 − β(ρ))^k; see :func:`kseq_parameters` for the edge cases.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of candidates, >= 1.
    rho : float
        The division factor ρ >= 1.

    Returns
    -------
    ndarray, shape (V,)
        res_ρ, a probability row.

    Raises
    ------
    ValueError
        On invalid rows, k or ρ, a vocabulary mismatch, or a negative residual.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    p = U(4), q = U(2), k = 2, ρ = ρ* = 1.5: β = 1/2, p_acc = 3/4, and each of q's tokens keeps
    (1/2 − (1/4)(3/4)/(1/2)) / (1/4) = 1/2.

    >>> kseq_residual([0.25] * 4, [0.5, 0.5, 0.0, 0.0], 2, 1.5).tolist()
    [0.5, 0.5, 0.0, 0.0]
    """
    return _kseq_row(draft, target, k, rho).residual[0]
