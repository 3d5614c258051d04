r"""Multi-round rejection sampling (SpecInfer; MCSD Algorithms 1–2) at one position, k candidates.

Spec ``multi_draft_otm.md`` §8 and ``mcsd.md`` §4. Convention: **p is the draft, q the target**
(MCSD swaps the letters). The candidates are verified one after another against a residual target:
t_0 = q, and after a rejected candidate t_i = Norm[(t_{i−1} − d)_+], d the current draft law (p
itself with replacement, p without the rejected tokens, renormalised, without replacement). The
output is the first accepted candidate, or a draw from t_k. Re-exported by
:mod:`otspec.theory.multidraft`.

Spec: ``docs/multi_draft_otm.md``.
"""

from __future__ import annotations

import math

import numpy as np

from ..checks import COUNT_CAP, MAX_CANDIDATES, capped_perm, check_flag, check_size
from ..distributions import namespace, residual, row_pair, validate_probs
from ..drafts.laws import check_k
from ..errors import SizeLimitError

__all__ = [
    "MAX_MULTIROUND_PATHS",
    "multiround_acceptance",
    "multiround_rejection",
    "uniform_multiround_without_replacement",
]

#: Most draft paths :func:`multiround_acceptance` explores without replacement.
MAX_MULTIROUND_PATHS = 2**18


def multiround_rejection(draft_probs, target_probs, k: int, *, check: bool = True):
    """Multi-round rejection with replacement, row-wise: (Π_{i=1}^{k} ρ_i (B,), t_k (B, V)).

    SpecInfer's multi-round rejection sampling [1] as written in MCSD's Algorithm 1 [2]: residual
    targets t_0 = q, t_i = Norm[(t_{i−1} − p)_+] (spec §8); the i-th candidate, drawn from p
    independently of the earlier rejections, is rejected with probability
    ρ_i = Σ_x (p(x) − t_{i−1}(x))_+. Once a normaliser Σ(t − p)_+ is 0 rejection has probability 0
    and t stays put. One pass over the rows per round.

    Parameters
    ----------
    draft_probs, target_probs : array, shape (B, V)
        Probability rows p and q of one shape (numpy or torch).
    k : int
        Number of rounds (candidates), 1 <= k <= :data:`~otspec.checks.MAX_CANDIDATES`.
    check : bool, default True
        Validate the rows (one read-back each); False takes them as valid.

    Returns
    -------
    reject : array, shape (B,)
        Π_i ρ_i, the probability that all k candidates are rejected.
    residual : array, shape (B, V)
        t_k, the law of the output after k rejections.

    Raises
    ------
    ValueError
        For an invalid k; :class:`~otspec.errors.SizeLimitError` above ``MAX_CANDIDATES``.

    References
    ----------
    .. [1] X. Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
       Speculative Inference and Verification", ASPLOS 2024, arXiv:2305.09781.
    .. [2] S. Yang, S. Huang, X. Dai, J. Chen, "Multi-Candidate Speculative Decoding",
       arXiv:2401.06706, 2024.

    Examples
    --------
    p = (3/4, 1/4), q = (1/4, 3/4): ρ_1 = 1/2 and t_1 = (0, 1); then ρ_2 = 3/4 and t_2 = t_1.

    >>> import numpy as np
    >>> reject, t = multiround_rejection(np.array([[0.75, 0.25]]), np.array([[0.25, 0.75]]), 2)
    >>> reject.tolist(), t.tolist()  # 1/2 · 3/4
    ([0.375], [[0.0, 1.0]])
    """
    k = check_size(k, "k", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES", what="an integer number of rounds")
    if check_flag(check, "check"):  # NaN rows gave a NaN rejection, mismatched ones an IndexError
        draft_probs = validate_probs(draft_probs, "draft_probs", min_ndim=2)
        target_probs = validate_probs(target_probs, "target_probs", min_ndim=2)
        if tuple(draft_probs.shape) != tuple(target_probs.shape):
            raise ValueError(f"draft_probs, target_probs: expected rows of one shape (B, V), got "
                             f"{tuple(draft_probs.shape)} and {tuple(target_probs.shape)}")
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
    """P(some candidate accepted) under multi-round rejection sampling (spec §8; SpecInfer [1], MCSD Alg. 1/2 [2]).

    *With replacement*: 1 − Π_i ρ_i, with ρ_i = Σ_x (p(x) − t_{i−1}(x))_+ and
    t_i = Norm[(t_{i−1} − p)_+], t_0 = q (:func:`multiround_rejection`).

    *Without replacement* (Alg. 2): the draft law d changes along the path (rejected tokens
    are removed, d renormalised) while t_i = Norm[(t_{i−1} − d_{i−1})_+] uses the current d;
    exact recursion over all draft paths,
    acc(t, d) = Σ_x min{d(x), t(x)} + Σ_x (d(x) − t(x))_+ · acc(t', d_{−x}), stopping after k
    drafts or when the support is exhausted.

    The final residual draw can land on a drafted token; it is not counted (as in §6).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of candidates, 1 <= k <= :data:`~otspec.checks.MAX_CANDIDATES`.
    replacement : bool, default True
        i.i.d. candidates (Alg. 1) or candidates drawn without replacement (Alg. 2).

    Returns
    -------
    float
        The acceptance probability in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows or k, a vocabulary mismatch; :class:`~otspec.errors.SizeLimitError` for more
        than :data:`MAX_MULTIROUND_PATHS` draft paths without replacement.

    References
    ----------
    .. [1] X. Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
       Speculative Inference and Verification", ASPLOS 2024, arXiv:2305.09781.
    .. [2] S. Yang, S. Huang, X. Dai, J. Chen, "Multi-Candidate Speculative Decoding",
       arXiv:2401.06706, 2024.

    Examples
    --------
    For p = (¾, ¼), q = (¼, ¾), k = 2: ρ_1 = ½, t_1 = (0, 1), ρ_2 = ¾, so 1 − 3/8:

    >>> round(multiround_acceptance([0.75, 0.25], [0.25, 0.75], 2), 12)
    0.625

    Without replacement the first draft is accepted with probability min(¾, ¼) + min(¼, ¾) = ½;
    after rejecting token 0 the second draft is token 1, which t_1 = (0, 1) accepts surely:

    >>> round(multiround_acceptance([0.75, 0.25], [0.25, 0.75], 2, replacement=False), 12)
    1.0
    """
    p, q = row_pair(draft, target)
    k = check_size(k, "k", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES", what="an integer number of drafts")
    if check_flag(replacement, "replacement"):
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


def uniform_multiround_without_replacement(support: int, target_support: int, k: int) -> float:
    """Multi-round acceptance without replacement for p = U(N), q = U(d_q) inside it: 1 − C(N−d_q, k)/C(N, k).

    MCSD's Algorithm 2 [1] (SpecInfer's multi-round rejection sampling [2] with the drafts drawn
    without replacement) accepts the first candidate that lands in q's support (there
    min{1, t(x)/d(x)} = 1, and a candidate outside it leaves t = q and d uniform on the rest), so it
    accepts iff one of k draws without replacement from N tokens hits the d_q tokens.

    Parameters
    ----------
    support : int
        N, the size of the draft's support.
    target_support : int
        d_q, 1 <= d_q <= N.
    k : int
        Number of drafts, 1 <= k <= N (k distinct drafts of N tokens).

    Returns
    -------
    float
        The acceptance probability in [0, 1].

    Raises
    ------
    ValueError
        For d_q outside [1, N], or k outside [1, N].

    References
    ----------
    .. [1] S. Yang, S. Huang, X. Dai, J. Chen, "Multi-Candidate Speculative Decoding",
       arXiv:2401.06706, 2024.
    .. [2] X. Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
       Speculative Inference and Verification", ASPLOS 2024, arXiv:2305.09781.

    Examples
    --------
    N = 4, d_q = 2, k = 2: both drafts miss q's support in C(2, 2) = 1 of the C(4, 2) = 6 pairs.

    >>> round(6 * uniform_multiround_without_replacement(4, 2, 2), 12)  # 6 (1 - 1/6)
    5.0
    """
    N, k = check_size(support, "support"), check_k(k)
    dq = check_size(target_support, "target_support")
    if not dq <= N:
        raise ValueError(f"target_support: expected 1 <= d_q <= N = {N}, got {target_support!r}")
    if k > N:  # C(N, k) = 0: k distinct drafts do not exist
        raise ValueError(f"k = {k}: drawing without replacement from a support of N = {N} tokens takes k <= N")
    return 1.0 - math.comb(N - dq, k) / math.comb(N, k)
