r"""The OTM-k optimum α_k without a plan: the min-cut dual minimised over sorted prefixes.

Spec ``multi_draft_otm.md`` §3, eqs. (4)–(7). By max-flow/min-cut on the network of
:func:`otspec.solvers.otm.otm_maxflow` (any draft law P_D),
α_k = min_{A ⊆ Ω} [q(A) + 1 − P_D(S(X) ⊆ A)], and the minimum is attained at one of the V + 1
prefixes of the tokens sorted by q/p (:func:`otm_value`, proof in its docstring). With
replacement P_D(S ⊆ A) = p(A)^k; without replacement it is the exponential-race integral (7)
(:func:`otspec.drafts.prob_drafts_within`). :func:`otm_value_bruteforce` minimises (4) over
all 2^V sets (a check for small V).

Spec: ``docs/multi_draft_otm.md``.
"""

from __future__ import annotations

import numpy as np

from ..checks import check_flag
from ..distributions import row_pair
from ..drafts.laws import (
    check_k,
    draw_name,
    inclusion_iid,
    race_add_token,
    race_nodes,
    race_weights,
    top_tokens_of,
)
from ..errors import SizeLimitError
from ..jit import available
from ..progress import tqdm
from ..theory.multidraft import MAX_BRUTEFORCE_VOCAB, subset_masses

__all__ = ["PROGRESS_TOKENS", "otm_min_cut", "otm_value", "otm_value_bruteforce", "structured_value"]

#: Supports above this many tokens show a progress bar (on a terminal) while the cuts without replacement are
#: walked token by token (V = 3·10^6 takes about 45 s).
PROGRESS_TOKENS = 200_000


def _sorted_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    ratio = np.divide(q, p, out=np.full(p.size, np.inf), where=p > 0)
    return np.argsort(ratio)


def _prefix_cuts_iid(p: np.ndarray, q: np.ndarray, k: int, order: np.ndarray) -> np.ndarray:
    """Cut values q(A_j) + 1 − p(A_j)^k for j = 0..V (eq. (6) with replacement)."""
    ps, qs = p[order], q[order]
    head = np.concatenate([[0.0], np.cumsum(ps)])  # p(A_j)
    tail = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])  # p(Ω ∖ A_j), accurate when small
    # 1 − p(A)^k: directly while p(A) < 1/2; via the tail mass s as −expm1(k log1p(−s)) beyond
    split = int(np.searchsorted(head, 0.5))  # head is non-decreasing
    miss = np.empty(head.size)
    miss[:split] = 1.0 - head[:split] ** k
    miss[split:] = inclusion_iid(tail[split:], k)
    return np.concatenate([[0.0], np.cumsum(qs)]) + miss


def _prefix_cuts_wor(p: np.ndarray, q: np.ndarray, k: int, order: np.ndarray) -> np.ndarray:
    """Cut values q(A_j) + 1 − P_D(S ⊆ A_j), j = 0..V, without replacement (eqs. (6)–(7)).

    One Poisson-binomial DP over quadrature nodes grows with the prefix (a token
    per step), so all prefixes cost O(V·k·nodes) together.
    """
    ps, qs = p[order], q[order]
    V = p.size
    n_supp = int(np.count_nonzero(ps))  # zero-mass tokens come last in `order`
    tail = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])
    head_q = np.concatenate([[0.0], np.cumsum(qs)])  # q(A_j)
    within = np.zeros(V + 1)
    within[n_supp:] = 1.0  # the support is inside A_j: every draft is
    kk = min(k, n_supp)  # draws stop when the support is exhausted
    if kk < n_supp:  # otherwise only A ⊇ supp has P_D(S ⊆ A) > 0
        bound, best = _cut_bounds(ps, head_q, kk, n_supp)
        last = int(np.flatnonzero(bound[:n_supp] < best + 1e-12).max(initial=kk - 1))  # no later prefix can win
        if last >= kk:
            t, h = race_nodes(kk, float(tail[last]))
            if available():  # the same recursion, compiled: one pass over tokens x nodes
                from .race_kernel import race_prefix_within

                race_prefix_within(np.ascontiguousarray(ps[:last + 1]), tail, kk, t, h, within, bound, best)
            else:
                _race_prefixes(ps, tail, last + 1, kk, k, t, h, within)
    return head_q + (1.0 - within)


def _cut_bounds(ps, head_q, kk: int, n_supp: int):
    """Bounds on the cut q(A_j) + 1 − P_D(S ⊆ A_j) of every prefix, without replacement: from below q(A_j) + 1 −
    p(A_j)^kk (each draw's chance of A only falls), and the least upper bound over prefixes, from
    P_D(S ⊆ A) >= p(A) Π_{i<kk} (p(A) − i m)/(1 − i m) with m the largest mass in A (after i draws in A, the next
    lands in A with chance (p(A) − d)/(1 − d), d <= i m the mass drawn). A prefix whose lower bound is not below
    that least upper bound cannot be the minimum; the prefix A = supp (cut q(supp)) bounds it too."""
    head = np.concatenate([[0.0], np.cumsum(ps)])
    largest = np.concatenate([[0.0], np.maximum.accumulate(ps)])
    low = head.copy()
    for i in range(1, kk):
        low *= np.clip((head - i * largest) / np.maximum(1.0 - i * largest, 1e-300), 0.0, 1.0)
    best = min(1.0, float(head_q[n_supp]), float(np.min(head_q[:n_supp] + 1.0 - low[:n_supp])))
    return head_q + 1.0 - head ** kk, best


def _race_prefixes(ps, tail, n_supp: int, kk: int, k: int, t, h, within) -> None:
    """within[j] for kk <= j < n_supp by the race DP in numpy, one token at a time (a bar on a terminal above
    :data:`PROGRESS_TOKENS`)."""
    dp = np.zeros((kk + 1, t.size))
    dp[0] = 1.0
    chunk = max(1, min(512, (1 << 22) // t.size))
    rows, idx = [], []

    def flush():
        if rows:
            j = np.asarray(idx)
            within[j] = np.minimum(1.0, np.einsum("jn,jn->j", race_weights(tail[j], t, h), np.asarray(rows)))
            rows.clear()
            idx.clear()

    bar = tqdm(total=n_supp - 1, unit="token", desc=f"OTM-{k} cuts without replacement", leave=False,
               disable=None if n_supp > PROGRESS_TOKENS else True)
    for j in range(1, n_supp):  # prefix A_j = first j sorted tokens, all of positive mass
        race_add_token(dp, float(ps[j - 1]), t)
        if j >= kk:
            rows.append(dp[kk].copy())
            idx.append(j)
            if len(rows) >= chunk:
                flush()
                bar.update(j - bar.n)
    flush()
    bar.close()


def otm_min_cut(draft, target, k: int, replacement: bool = True) -> tuple[float, np.ndarray]:
    """α_k and a minimising token set A of the min-cut dual (4), found among the sorted prefixes (6).

    α_k = min_{A ⊆ Ω} [q(A) + 1 − P_D(S(X) ⊆ A)] (max-flow/min-cut [3] on SpecTr's transport
    problem [1], the dual studied by [2]); with replacement P_D(S(X) ⊆ A) = p(A)^k. The minimum
    is attained at a prefix of the tokens sorted by q/p (see :func:`otm_value`).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of drafts, >= 1.
    replacement : bool, default True
        i.i.d. drafts (True) or sampling without replacement.

    Returns
    -------
    value : float
        α_k, as :func:`otm_value`.
    subset : ndarray of int64
        Tokens of the minimising prefix A_j (sorted ids); empty when the trivial cut
        A = ∅ (value 1) is optimal. The bound α ≤ q(A) + P_D(S ⊄ A) is tight here, so
        (complementary slackness) an optimal plan accepts every output Y ∈ A, and
        accepts every tuple with S(X) ⊄ A with an output outside A.

    Raises
    ------
    ValueError
        On invalid rows or k, or a vocabulary mismatch.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.
    .. [2] Z. Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025,
       arXiv:2502.18779.
    .. [3] L. R. Ford, D. R. Fulkerson, "Maximal flow through a network", Canadian Journal of
       Mathematics 8:399–404, 1956.

    Examples
    --------
    p = (0.75, 0.25), q = (0.25, 0.75), k = 2: the cuts of A = ∅, {0}, {0, 1} are 1,
    0.25 + 1 − 0.75² = 0.6875 and 1, so A = {0} wins (the Bernoulli closed form, eq. (14), gives the same α_2).

    >>> value, subset = otm_min_cut([0.75, 0.25], [0.25, 0.75], 2)
    >>> round(value, 12), subset.tolist()
    (0.6875, [0])
    """
    p, q = row_pair(draft, target)
    k, replacement = check_k(k), check_flag(replacement, "replacement")  # 'False' is true
    order = _sorted_order(p, q)
    # one draft is the same with or without replacement: the closed form (5), O(V log V)
    cuts = (_prefix_cuts_iid if replacement or k == 1 else _prefix_cuts_wor)(p, q, k, order)
    j = int(np.argmin(cuts))
    return float(min(1.0, max(0.0, cuts[j]))), np.sort(order[:j])


def otm_value(draft, target, k: int, replacement: bool = True) -> float:
    r"""Route (c): the OTM-k optimum α_k [1] from the min-cut dual, minimised over sorted prefixes (eqs. (4)–(6)).

    α_k = min_j [q(A_j) + 1 − P_D(S(X) ⊆ A_j)] over the prefixes A_j of the tokens sorted by
    q/p; with replacement this is 1 − max_j [p(A_j)^k − q(A_j)]. The dual is that of [2], the
    min-cut of max-flow/min-cut [3]; no plan is built, so any vocabulary size works.

    By max-flow/min-cut on the network of :func:`otm_maxflow` (any draft law P_D)

    .. math::
        \alpha_k = \min_{A \subseteq \Omega} \big[ q(A) + 1 - P_D(S(X) \subseteq A) \big]
        \qquad (4),

    and with replacement P_D(S ⊆ A) = p(A)^k, so α_k = 1 − max_A [p(A)^k − q(A)] (5).
    Sort the tokens by r(x) = q(x)/p(x) ascending (p(x) = 0 ⇒ r = +∞, last; ties
    in any order) and let A_j be the first j tokens. Then (6)

    .. math::
        \alpha_k = \min_{0 \le j \le V} \big[ q(A_j) + 1 - P_D(S(X) \subseteq A_j) \big].

    **Why sorting by q/p suffices** (our proof [D]; the spec lists (6) as derived
    and verified numerically; it is also checked against the 2^V brute force in
    the tests). Write G(A) = P_D(S ⊆ A), Φ(A) = G(A) − q(A) (maximise Φ), and
    for z ∉ A with p(z) > 0 the marginal gain per unit draft mass
    μ(A, z) = [G(A ∪ z) − G(A)] / p(z).

    *Lemma.* For disjoint A, x, y (p(x), p(y) > 0): μ(A ∪ x, y) ≥ μ(A, x).

    *Lemma ⇒ (6).* Zero-mass tokens never enter S(X), so removing them from A does
    not lower Φ; consider optimal sets of positive-mass tokens. Let A be optimal,
    x ∈ A, y ∉ A with r(y) ≤ r(x). Optimality gives G(A) − G(A∖x) ≥ q(x), i.e.
    μ(A∖x, x) ≥ r(x), and G(A∪y) − G(A) ≤ q(y), i.e. μ(A, y) ≤ r(y). With the lemma
    (base A∖x): r(y) ≥ μ(A, y) ≥ μ(A∖x, x) ≥ r(x) ≥ r(y), so all are equal and
    Φ(A ∪ y) = Φ(A): A ∪ y is optimal too. Hence an optimal set of maximal size
    has r(y) > r(x) for every x ∈ A and every positive-mass y ∉ A: it is a union of
    whole ratio classes, the first j tokens in the sorted order for any tie order
    (or A = ∅, j = 0).

    *Lemma, with replacement.* μ(A, z) = ((P + p_z)^k − P^k)/p_z with P = p(A) lies
    between the slopes k P^{k−1} and k (P + p_z)^{k−1} of the convex t ↦ t^k, so
    μ(A ∪ x, y) ≥ k (P + p_x)^{k−1} ≥ μ(A, x). (Equivalently: a supporting line of
    t^k at p(A*) shows the linear maximiser {x : q(x) < λ p(x)}, λ = k p(A*)^{k−1},
    is at least as good as an optimal A* — a lower level set of q/p.)

    *Lemma, without replacement* (exponential race, see :func:`prob_drafts_within`).
    Let a_1 ≤ a_2 ≤ … be the arrival times of A's tokens (a_0 = 0, a_j = ∞ if A
    has fewer than j tokens) and s = p(Ω ∖ (A ∪ z)). z joins the first k draws,
    with the other k−1 from A, iff T_z < a_k and max(T_z, a_{k−1}) precedes the
    first arrival outside A ∪ z, so

        μ(A, z) = E ∫_0^{a_k} e^{−p_z t} e^{−s·max(t, a_{k−1})} dt
                = E[ ∫_0^{a_{k−1}} e^{−σ a_{k−1} + p_z (a_{k−1} − t)} dt + ∫_{a_{k−1}}^{a_k} e^{−σ t} dt ],

    σ = s + p_z = p(Ω∖A). For fixed A this is non-decreasing in p_z, so with
    A' = A ∪ x, s' = p(Ω∖A'): μ(A', y) ≥ L(A') := E ∫_0^{a'_k} e^{−s' max(t, a'_{k−1})} dt,
    where a'_j are the arrivals of A'. Condition L(A') on T_x = u: for u ≥ a_k the
    first k arrivals of A' are A's, giving I := ∫_0^{a_k} g with
    g(t) = e^{−s' max(t, a_{k−1})}; for u < a_k they are x and a_1..a_{k−1}, giving
    J(u) = ∫_0^{max(u, a_{k−1})} e^{−s' max(t, max(min(u, a_{k−1}), a_{k−2}))} dt.
    Writing e^{−p_x t} = e^{−p_x a_k} + ∫_t^{a_k} p_x e^{−p_x u} du in μ(A, x) gives
    L(A') − μ(A, x) = E ∫_0^{a_k} p_x e^{−p_x u} [J(u) − ∫_0^u g] du, and
    J(u) ≥ ∫_0^u g: equality if u ≥ a_{k−1}; if u < a_{k−1}, J integrates over
    [0, a_{k−1}] ⊇ [0, u] an integrand ≥ e^{−s' a_{k−1}} = g(t) on t ≤ u. (If p has
    fewer than k tokens the draws stop, i.e. k is replaced by the support size.)
    The lemma was also checked numerically on 68,000 random (A, x, y).

    Cost: with replacement one argsort and cumulative sums, O(V log V) — 3–4 ms
    for V = 32,000, k = 8 on 2 cores (``benchmarks/bench_otm.py``; goal 20 ms).
    Without replacement one Poisson-binomial DP over ≈ (log(45/s) + 30/(k+1))/h quadrature
    nodes (h = :func:`~otspec.drafts.laws.race_step`, 0.19 at k = 8) grows one token per prefix, up to
    the last prefix whose lower bound q(A) + 1 − p(A)^k is below a certified upper bound on the minimum
    (only those prefixes are integrated; s is the smallest of their tail masses): O(V·k·nodes), memory
    O(k·nodes); compiled, nodes whose P(N ≥ k) has saturated drop out. V = 32,000, k = 8, Dirichlet(1)
    rows: 12 ms on one core (``benchmarks/bench_vocab_goals.py``; 1.38 s before the compiled DP).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of drafts, >= 1.
    replacement : bool or {"greedy", "hub"}, default True
        i.i.d. drafts (True), sampling without replacement (False), or one of the structured draws
        of :func:`structured_value`.

    Returns
    -------
    float
        α_k in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows, k or ``replacement``, or a vocabulary mismatch.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.
    .. [2] Z. Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025,
       arXiv:2502.18779.
    .. [3] L. R. Ford, D. R. Fulkerson, "Maximal flow through a network", Canadian Journal of
       Mathematics 8:399–404, 1956.

    Examples
    --------
    >>> round(otm_value([0.5, 0.5], [0.75, 0.25], 1), 12)  # one draft: 1 - TV(p, q) = 1 - 0.25
    0.75
    >>> p, q = [0.75, 0.25], [0.25, 0.75]
    >>> round(otm_value(p, q, 2), 12)  # eq. (14): min(0.75, 1 - 0.75**2) + min(0.25, 1 - 0.25**2)
    0.6875
    >>> otm_value(p, q, 2, replacement=False)  # two draws without replacement hold both tokens
    1.0
    """
    draw = draw_name(replacement)
    if draw in ("greedy", "hub"):
        return structured_value(draft, target, k, draw)
    return otm_min_cut(draft, target, k, replacement)[0]


def structured_value(draft, target, k: int, draw: str = "greedy") -> float:
    r"""α_k for Hu et al.'s greedy drafts or SpecHub's hub pair (:data:`otspec.drafts.laws.DRAWS`), in closed form.

    Both drafts always hold a fixed set T (the top k − 1 tokens of p; the hub a = argmax p for k = 2, which is the
    greedy draw's T) and one token J from p' = p restricted to the rest, renormalised. A token of T can be emitted
    whenever the target draws it, a token x ∉ T only when J = x, so (4) has the optimum

    .. math::
        \alpha_k = q(T) + \sum_{x \notin T} \min\{q(x), p'(x)\},

    reached by token verification of J against p' (:class:`otspec.verifiers.GreedyDraftVerify`); equal to the
    OTM-k LP over the draw's exact tuple law in the tests. O(V log V).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of drafts, >= 1 (at most 2 for the hub draw).
    draw : {"greedy", "hub"}, default "greedy"
        Hu et al.'s greedy draw [1] or SpecHub's hub pair [2].

    Returns
    -------
    float
        α_k in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows or k, a vocabulary mismatch, another draw, or the hub draw with k > 2.

    References
    ----------
    .. [1] Z. Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025,
       arXiv:2502.18779.
    .. [2] R. Sun et al., "SpecHub: Provable Acceleration to Multi-Draft Speculative Decoding",
       EMNLP 2024, arXiv:2411.05289.

    Examples
    --------
    p = (0.5, 0.25, 0.25), q = (0.125, 0.125, 0.75), k = 2: T = {0}, and J is token 1 or 2 with
    p' = (0, 0.5, 0.5), so α_2 = 0.125 + min(0.125, 0.5) + min(0.75, 0.5).

    >>> structured_value([0.5, 0.25, 0.25], [0.125, 0.125, 0.75], 2)
    0.75
    """
    p, q = row_pair(draft, target)
    k, draw = check_k(k), draw_name(draw)
    if draw not in ("greedy", "hub") or (draw == "hub" and k > 2):
        raise ValueError(f"structured_value: the greedy draw (any k) or the hub draw (k <= 2), got {draw!r}, k = {k}")
    top = top_tokens_of(p, k - 1)
    rest = np.ones(p.size, dtype=bool)
    rest[top] = False
    mass = float(p[rest].sum())
    if mass <= 0:  # T holds the whole draft support: no J, Y ~ q is accepted on T
        return float(min(1.0, q[top].sum()))
    return float(min(1.0, q[top].sum() + np.minimum(q[rest], p[rest] / mass).sum()))


# ------------------------------------------------------------- brute force
def _wor_within_all(p: np.ndarray, k: int) -> np.ndarray:
    """P_D(S ⊆ A) without replacement for every bitmask A, exactly (no quadrature).

    P(first j draws form the set T) = Σ_{x∈T} P(T∖x) p(x)/p(Ω∖(T∖x)), layer by layer,
    then a subset-sum transform over A ⊇ T.
    """
    V = p.size
    n = 1 << V
    bits = np.arange(n)
    rem = subset_masses(p)[(n - 1) ^ bits]  # mass of the complement, summed directly
    popcount = np.zeros(n, dtype=np.int64)
    for x in range(V):
        popcount += (bits >> x) & 1
    kk = min(k, int(np.count_nonzero(p)))
    P = np.zeros(n)
    P[0] = 1.0
    for j in range(1, kk + 1):
        layer = bits[popcount == j]
        for x in np.flatnonzero(p > 0):
            T = layer[(layer >> x) & 1 == 1]
            prev = T ^ (1 << x)
            ok = rem[prev] > 0
            P[T[ok]] += P[prev[ok]] * p[x] / rem[prev[ok]]
    g = np.where(popcount == kk, P, 0.0)
    for x in range(V):  # g[A] = Σ_{T ⊆ A} f[T]
        has = (bits >> x) & 1 == 1
        g[bits[has]] += g[bits[has] ^ (1 << x)]
    return g


def otm_value_bruteforce(draft, target, k: int, replacement: bool = True) -> float:
    """α_k [1] as the minimum of the min-cut dual (4) over all 2^V token sets A (for tests; V <= 16).

    α_k = min_{A ⊆ Ω} [q(A) + 1 − P_D(S(X) ⊆ A)] by max-flow/min-cut [2]. With replacement
    P_D(S ⊆ A) = p(A)^k; without replacement it is computed exactly for every A by a recursion
    over the set of drawn tokens (no quadrature, no tuple enumeration).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of drafts, >= 1.
    replacement : bool, default True
        i.i.d. drafts (True) or sampling without replacement.

    Returns
    -------
    float
        α_k in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows or k, a vocabulary mismatch, or (:class:`~otspec.errors.SizeLimitError`)
        V above :data:`~otspec.theory.multidraft.MAX_BRUTEFORCE_VOCAB`.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.
    .. [2] L. R. Ford, D. R. Fulkerson, "Maximal flow through a network", Canadian Journal of
       Mathematics 8:399–404, 1956.

    Examples
    --------
    The four sets of two tokens give the cuts 1, 1.25 − 0.75², 1.75 − 0.25², 1 (the Bernoulli closed form, eq. (14)):

    >>> round(otm_value_bruteforce([0.75, 0.25], [0.25, 0.75], 2), 12)
    0.6875
    """
    p, q = row_pair(draft, target)
    k, replacement = check_k(k), check_flag(replacement, "replacement")  # 'False' is true
    if p.size > MAX_BRUTEFORCE_VOCAB:
        raise SizeLimitError(f"otm_value_bruteforce enumerates 2^V subsets; V={p.size} is above "
                             f"MAX_BRUTEFORCE_VOCAB = {MAX_BRUTEFORCE_VOCAB}; use otm_value",
                             size=p.size, limit=MAX_BRUTEFORCE_VOCAB)
    within = subset_masses(p) ** k if replacement else _wor_within_all(p, k)
    cuts = subset_masses(q) + 1.0 - within
    return float(min(1.0, max(0.0, cuts.min())))
