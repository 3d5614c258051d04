r"""Adaptive draft length (SpecDec++): the exact optimal stopping policy for an IID pair.

Spec ``specdecpp.md`` §2–4 (p is the draft, q the target). Each iteration drafts X_1, X_2, …
i.i.d. from p and, after each drafted token, decides whether to draft one more (at most K);
the K drafted tokens are then verified by token verification in one target call. With
a(x) = min{1, q(x)/p(x)} and Π_l = ∏_{i ≤ l} a(X_i) = P(all l first drafts accepted | drafts),
an iteration costs C = t_draft·K + t_target and emits R = τ + 1 tokens with
E[τ | X_1..X_K] = Σ_{l ≤ K} Π_l. The long-run latency per generated token of a stationary
policy is the renewal ratio E[C] / E[R] (eq. (4) of the spec in expectation).

**Exact optimum** (:func:`optimal_stopping`). Two routes. ``method="bracket"``
(:mod:`otspec.theory.adaptive_bracket`) uses that the optimal rule is one threshold on Π_j for every
step and brackets its latency within ``tol`` at any vocabulary size (V = 32,000, K = 8 in tens of
milliseconds). ``method="induction"`` is the backward induction below, exact over classes of equal
q/p at toy sizes; ``"auto"`` takes it where its tables are small. Induction: Dinkelbach's method: for a trial ratio λ,
minimise E[C − λR] = t_target − λ + E[Σ_{l ≤ K} (t_draft − λ Π_l)] by backward induction, whose
state after j drafts is (j, Π_j) — here the class-count vector of the drafted tokens, grouping
tokens of equal a(x) (the exact route of :mod:`otspec.theory.iid`);
W_K ≡ 0, W_j(π) = min{0, Σ_x p(x) [t_draft − λ π a(x) + W_{j+1}(π a(x))]}; then set λ to the
ratio of the policy found, until the policy repeats (finitely many policies: the last λ is the
optimum exactly). Since W_{j+1} is non-increasing in π, so is the bracket: the optimal policy
continues iff Π_j is above a step-dependent threshold, i.e. iff the probability that some drafted
token is rejected, 1 − Π_j, is below h_j (Theorem 4.3's structure). :func:`optimal_stopping`
checks this on every state of the induction — those the policy reaches and those it never does
(after an earlier stop), a stronger check — and reports the thresholds.

:func:`fixed_length_latency` gives the latency of always drafting k tokens:
(t_draft k + t_target) / (1 + Σ_{l ≤ k} β^l), β = Σ_x min(p, q) (eq. (4) of the single-draft
spec for an IID pair).

Spec: ``docs/specdecpp.md``, ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, check_real, check_size
from ..distributions import row_pair
from ..errors import SizeLimitError
from .adaptive_bracket import DEFAULT_TOL, bracket_latency
from .iid import count_states, ratio_classes, successors

__all__ = ["AUTO_INDUCTION_ENTRIES", "MAX_ADAPTIVE_ENTRIES", "MAX_ADAPTIVE_STATES", "AdaptiveOptimum", "fixed_length_latency", "optimal_stopping", "step_threshold",
           "threshold_policy_latency"]

#: Most (step, class-count) states of the exact backward induction: C(m + K, K) for m classes of equal
#: q/p and at most K drafts (2^21 states take about a second per Dinkelbach step on 2 cores).
MAX_ADAPTIVE_STATES = 2**21
#: Most states × classes (the entries of the count and successor tables, each built with several temporaries of
#: that size): 1.8·10^7 entries took 1 GB and 2.5 s (V = 200, L = 3), 2.1·10^8 took 11.7 GB (V = 1500, L = 2).
MAX_ADAPTIVE_ENTRIES = 2**23
#: ``method="auto"`` runs the exact backward induction up to this many states × classes (tens of milliseconds), the
#: certified bracket above.
AUTO_INDUCTION_ENTRIES = 2**16
METHODS = ("auto", "induction", "bracket")


def step_threshold(step: int, continuing, stopping) -> dict:
    """The threshold entry of one step from Π_j of the states (or paths) where a rule continues and where it stops:
    ``continue_below`` (draft another iff P(some drafted token rejected) < it; ``None``: always stop) and the
    interval ``[low, high]`` of values that give the same rule there."""
    continuing, stopping = np.asarray(continuing), np.asarray(stopping)
    if continuing.size == 0:
        return {"step": step, "continue_below": None, "low": None, "high": None}
    high = 1.0 - float(stopping.max() if stopping.size else 0.0)
    low = 1.0 - float(continuing.min())
    return {"step": step, "continue_below": 0.5 * (low + high), "low": low, "high": high}


def stopping_costs(t_draft, t_target) -> tuple[float, float]:
    return (check_real(t_draft, "t_draft", low=0.0),
            check_real(t_target, "t_target", low=0.0, low_open=True))


def fixed_length_latency(draft, target, length: int, t_draft: float, t_target: float = 1.0) -> float:
    """Latency per generated token of always drafting k tokens: (t_draft k + t_target) / (1 + Σ_{l=1}^{k} β^l).

    β = Σ_x min(p(x), q(x)) = 1 − TV(p, q) is the per-token acceptance of an IID pair, so an iteration
    emits 1 + Σ_l β^l tokens on average (token verification [2]) for k draft calls and one target
    call: the fixed-length baseline that SpecDec++ [1] improves on.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    length : int
        k >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH`.
    t_draft : float
        Time of one draft call, >= 0.
    t_target : float, default 1.0
        Time of one target call, > 0.

    Returns
    -------
    float
        The latency per generated token, in the unit of the times.

    Raises
    ------
    ValueError
        On invalid rows, a vocabulary mismatch, or an invalid length or time.

    References
    ----------
    .. [1] K. Huang, X. Guo, M. Wang, "SpecDec++: Boosting Speculative Decoding via Adaptive
       Candidate Lengths", COLM 2025, arXiv:2405.19715.
    .. [2] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.

    Examples
    --------
    >>> round(fixed_length_latency([0.5, 0.5], [0.5, 0.5], 3, 0.1), 12)  # p = q: (0.3 + 1) / 4
    0.325
    >>> fixed_length_latency([0.5, 0.5], [0.75, 0.25], 1, 0.75)  # beta = 0.75: (0.75 + 1) / 1.75
    1.0
    """
    p, q = row_pair(draft, target)
    k = check_size(length, "length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    t_draft, t_target = stopping_costs(t_draft, t_target)
    beta = float(np.minimum(p, q).sum())
    return (t_draft * k + t_target) / (1.0 + sum(beta**ell for ell in range(1, k + 1)))


@dataclass(frozen=True)
class AdaptiveOptimum:
    """The optimal draft-length policy of an IID pair (:func:`optimal_stopping`).

    Attributes
    ----------
    latency : float
        min over stopping policies of E[time per iteration] / E[tokens per iteration].
    expected_drafted, expected_tokens : float
        E[K] and E[τ + 1] per iteration under the optimal policy.
    thresholds : list of dict
        One entry per step j = 1..K−1 (after the j-th drafted token): ``continue_below`` — the policy
        drafts another token iff P(some drafted token is rejected) = 1 − Π_j is below it (any value in
        ``[low, high]`` gives the same policy; ``None`` when no reachable state continues, i.e. always stop).
    is_threshold_policy : bool
        Whether at every step the continue states all have larger Π_j than the stop states (every state of the
        induction, reached by the policy or not).
    iterations : int
        Dinkelbach steps until the policy repeated (both bounds, on the bracket).
    method : str
        ``"induction"`` (exact backward induction) or ``"bracket"`` (certified bounds; ``latency`` is the midpoint
        and the thresholds' ``[low, high]`` bound the one optimal threshold instead).
    latency_bounds, expected_drafted_bounds, expected_tokens_bounds : tuple of float
        low <= exact <= high (equal ends on the induction; on the bracket E[K] and E[R] are known to first order in
        the lattice step and cover every optimal rule).
    """

    latency: float
    expected_drafted: float
    expected_tokens: float
    thresholds: list
    is_threshold_policy: bool
    iterations: int
    method: str = "induction"
    latency_bounds: tuple = ()
    expected_drafted_bounds: tuple = ()
    expected_tokens_bounds: tuple = ()

    def __post_init__(self):
        for name, value in (("latency_bounds", self.latency), ("expected_drafted_bounds", self.expected_drafted),
                            ("expected_tokens_bounds", self.expected_tokens)):
            if not getattr(self, name):
                object.__setattr__(self, name, (value, value))


def _solve(a, w, dead, K, t_draft, lam, nxt, total, pi):
    """Backward induction at ratio λ: continue mask over states (levels 1..K−1)."""
    W = np.zeros(total.size)
    go = np.zeros(total.size, dtype=bool)
    for j in range(K - 1, 0, -1):
        at = np.flatnonzero(total == j)
        g = (w * (t_draft - lam * pi[at, None] * a + W[nxt[at]])).sum(axis=1) + dead * t_draft
        go[at] = g < 0
        W[at] = np.minimum(g, 0.0)
    return go


def _evaluate(a, w, dead, K, go, nxt, total, pi):
    """E[K] and E[Σ Π_l] per iteration under the continue mask ``go`` (forward over levels)."""
    reach = np.zeros(total.size)
    first = nxt[0]  # level-1 states e_k
    reach[first] = w
    drafted, accepted = 1.0, float(w @ a)
    for j in range(1, K):
        at = np.flatnonzero((total == j) & go)
        if at.size == 0:
            break
        r = reach[at]
        drafted += r.sum()  # one more draft from each continuing state (dead tokens included)
        accepted += float(r @ (pi[at, None] * a * w).sum(axis=1))
        np.add.at(reach, nxt[at], r[:, None] * w)
    return drafted, accepted


def _iid_states(p, q, K):
    """(a, w, dead, successors, totals, Π) of the class-count states, or None if no draft is ever accepted."""
    P, Q = ratio_classes(p, q)
    with np.errstate(over="ignore"):  # q/p overflows only where q >> p: accepted surely either way
        a, w = np.minimum(1.0, Q / P), P
    sure = a >= 1.0  # every token with q >= p is accepted surely: one class
    if sure.sum() > 1:
        a, w = np.append(a[~sure], 1.0), np.append(w[~sure], w[sure].sum())
    dead = float(p[(p > 0) & (q == 0)].sum())  # drafts the target never emits: Π becomes 0
    m = a.size
    count = math.comb(m + K, K) if m else 1
    if count > MAX_ADAPTIVE_STATES:
        raise SizeLimitError(f"the exact adaptive policy for {m} classes of equal q/p and max_length={K} has "
                             f"{count:,} states, above MAX_ADAPTIVE_STATES = {MAX_ADAPTIVE_STATES:,}",
                             size=count, limit=MAX_ADAPTIVE_STATES)
    if count * m > MAX_ADAPTIVE_ENTRIES:  # refused before any table is built
        raise SizeLimitError(f"the exact adaptive policy for {m} classes of equal q/p and max_length={K} needs "
                             f"{count:,} states x {m} classes = {count * m:,} table entries, above "
                             f"MAX_ADAPTIVE_ENTRIES = {MAX_ADAPTIVE_ENTRIES:,}", size=count * m,
                             limit=MAX_ADAPTIVE_ENTRIES)
    if m == 0:
        return None
    lex = count_states(m, K)
    pi = np.exp(lex @ np.log(a))  # classes here have q > 0, so a > 0
    return a, w, dead, successors(lex, K), lex.sum(axis=1), pi


def threshold_policy_latency(draft, target, max_length: int, t_draft: float, t_target: float = 1.0,
                             thresholds=0.5) -> float:
    """Exact latency of the rule "draft another token iff P(some drafted token rejected) < h_j" on an IID pair.

    ``thresholds`` is one h for every step or a list h_1..h_{K−1} (``None``: always stop there).
    """
    p, q = row_pair(draft, target)
    K = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    t_draft, t_target = stopping_costs(t_draft, t_target)
    hs = [thresholds] * (K - 1) if thresholds is None or isinstance(thresholds, int | float) else list(thresholds)
    states = _iid_states(p, q, K)
    if states is None:
        return t_draft + t_target
    a, w, dead, nxt, total, pi = states
    go = np.zeros(total.size, dtype=bool)
    for j in range(1, K):
        if hs[j - 1] is not None:
            go |= (total == j) & ((1.0 - pi) < check_real(hs[j - 1], "thresholds", low=0.0, high=1.0))
    drafted, accepted = _evaluate(a, w, dead, K, go, nxt, total, pi)
    return (t_draft * drafted + t_target) / (1.0 + accepted)


def optimal_stopping(draft, target, max_length: int, t_draft: float, t_target: float = 1.0, *,
                     method: str = "auto", tol: float = DEFAULT_TOL) -> AdaptiveOptimum:
    """The optimal draft-length policy of an IID pair under token verification (SpecDec++ [1]; see the module docstring).

    It minimises the renewal ratio E[C] / E[R] over stopping rules that decide, after each drafted
    token, whether to draft one more (at most K), where C = t_draft·K + t_target is the time of an
    iteration and R = τ + 1 its tokens. ``"induction"`` solves the ratio by Dinkelbach's method [2]
    with a backward induction over classes of equal q/p; ``"bracket"`` uses that the optimal rule is
    one threshold on Π_j = Π_{i ≤ j} min{1, q(X_i)/p(X_i)} and brackets its latency. The optimal
    policy drafts on while P(some drafted token rejected) = 1 − Π_j is below a threshold (the
    structure of [1], Theorem 4.3).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    max_length : int
        K >= 1, the most tokens drafted per iteration (at most :data:`~otspec.checks.MAX_DRAFT_LENGTH`).
    t_draft : float
        Time of one draft call, >= 0.
    t_target : float, default 1.0
        Time of one target call, > 0.
    method : {"auto", "induction", "bracket"}, default "auto"
        ``"induction"`` (exact; refuses, :class:`~otspec.errors.SizeLimitError`, pairs whose classes
        of equal q/p and ``max_length`` give more than :data:`MAX_ADAPTIVE_STATES` states),
        ``"bracket"`` (bounds within ``tol`` times the latency of drafting one token, at any vocabulary
        size) or ``"auto"`` (the induction up to :data:`AUTO_INDUCTION_ENTRIES` states × classes, the
        bracket above).
    tol : float, default :data:`~otspec.theory.adaptive_bracket.DEFAULT_TOL`
        Relative width of the bracket, > 0.

    Returns
    -------
    AdaptiveOptimum
        ``latency``, ``expected_drafted``, ``expected_tokens``, the per-step ``thresholds`` (K − 1
        entries) and their bounds.

    Raises
    ------
    ValueError
        On invalid rows, sizes, times, method or tol; :class:`~otspec.errors.SizeLimitError` for the
        induction above its state limits.

    References
    ----------
    .. [1] K. Huang, X. Guo, M. Wang, "SpecDec++: Boosting Speculative Decoding via Adaptive
       Candidate Lengths", COLM 2025, arXiv:2405.19715.
    .. [2] W. Dinkelbach, "On nonlinear fractional programming", Management Science
       13(7):492–498, 1967.

    Examples
    --------
    >>> opt = optimal_stopping([0.5, 0.5], [0.5, 0.5], 4, 0.1)   # p = q: always draft the maximum
    >>> round(opt.latency, 12), opt.expected_drafted  # (0.1·4 + 1) / (1 + 4)
    (0.28, 4.0)
    >>> opt = optimal_stopping([1.0, 0.0], [0.0, 1.0], 4, 0.1)  # disjoint: every draft is rejected
    >>> round(opt.latency, 12), opt.expected_drafted  # one draft, then the target's token: 0.1 + 1
    (1.1, 1.0)
    """
    p, q = row_pair(draft, target)
    K = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    t_draft, t_target = stopping_costs(t_draft, t_target)
    if method not in METHODS:
        raise ValueError(f"method: expected one of {', '.join(METHODS)}, got {method!r}")
    tol = check_real(tol, "tol", low=0.0, low_open=True)
    if method == "auto":
        m = ratio_classes(p, q)[0].size
        method = "induction" if math.comb(m + K, K) * max(m, 1) <= AUTO_INDUCTION_ENTRIES else "bracket"
    if method == "bracket":
        return _bracketed(p, q, K, t_draft, t_target, tol)
    return _induction(p, q, K, t_draft, t_target)


def _bracketed(p, q, K, t_draft, t_target, tol) -> AdaptiveOptimum:
    live = p > 0
    p, q = p[live], q[live]
    a = np.ones_like(p)
    np.divide(q, p, out=a, where=q < p)  # q >= p: accepted surely (and no overflow where p is tiny)
    b = bracket_latency(p, a, K, t_draft, t_target, tol)
    c_low, c_high = b.threshold
    if not math.isfinite(c_high) or b.drafted[1] <= 1.0:  # no optimal rule drafts a second token
        steps = [step_threshold(j, [], []) for j in range(1, K)]
    else:
        h_low, h_high = max(0.0, 1.0 - c_high), min(1.0, 1.0 - c_low)
        steps = [{"step": j, "continue_below": 0.5 * (h_low + h_high), "low": h_low, "high": h_high}
                 for j in range(1, K)]
    return AdaptiveOptimum(0.5 * sum(b.latency), 0.5 * sum(b.drafted), 0.5 * sum(b.tokens), steps, True,
                           b.iterations, "bracket", b.latency, b.drafted, b.tokens)


def _induction(p, q, K, t_draft, t_target) -> AdaptiveOptimum:
    states = _iid_states(p, q, K)
    if states is None:  # every draft is rejected: draft one token per target call
        return AdaptiveOptimum(t_draft + t_target, 1.0, 1.0, [], True, 0)
    a, w, dead, nxt, total, pi = states
    lam, seen, steps = t_target, None, 0
    while True:
        steps += 1
        go = _solve(a, w, dead, K, t_draft, lam, nxt, total, pi)
        drafted, accepted = _evaluate(a, w, dead, K, go, nxt, total, pi)
        new = (t_draft * drafted + t_target) / (1.0 + accepted)
        if seen is not None and np.array_equal(go, seen) or steps > 200:
            lam = new
            break
        seen, lam = go, new
    thresholds, ok = [], True
    for j in range(1, K):
        at = total == j
        cont, stop = pi[at & go], pi[at & ~go]
        if cont.size and stop.size and stop.max() >= cont.min():
            ok = False
        thresholds.append(step_threshold(j, cont, stop))
    return AdaptiveOptimum(float(lam), float(drafted), float(1.0 + accepted), thresholds, ok, steps)
