"""Expected rejections of speculative decoding (Yin, Chen, Huang, Wang, NeurIPS 2024).

Spec ``yin_theory.md`` §1–6, §9–10. Convention: **p is the draft, q the target**. Positions
are 1-based in the spec (x_1..x_T); token n is column n−1 of a token array, and the spec's
prompt x_0 is absorbed into the sources: p_1 = ``draft.initial``, q_1 = ``target.initial``.

* Theorem 1, eq. (1): :func:`rejections_per_position`, :func:`expected_rejections`,
  :func:`speedup`;
* batch speculative decoding, recursion (4)–(5): :func:`batch_rejections_per_position`,
  :func:`batch_expected_rejections`, :func:`batch_curve`;
* the seeded instance of §10: :func:`markov_pair`.

IID / Markov pairs use matrix recursions (O(T V²)); other sources walk the prefix tree
(:func:`~otspec.pairs.walk_prefix_tree`). Simulations of Algorithms 1 and 4 and exact laws
by enumeration are in :mod:`otspec.engine.sequence`; the Theorem-2 LP in
:mod:`otspec.solvers.rejections`.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..checks import MAX_CANDIDATES, check_seed, check_size, grid_entries
from ..distributions import total_variation
from ..errors import SizeLimitError
from ..pairs import check_horizon, check_pair_horizon, markov_chains, walk_prefix_tree
from ..sources import MAX_RANDOM_ENTRIES, IIDSource, MarkovSource, Source
from .multidraft_multiround import multiround_rejection

__all__ = [
    "BATCH_MS",
    "batch_curve",
    "batch_expected_rejections",
    "batch_rejections_per_position",
    "check_batch_size",
    "expected_rejections",
    "markov_pair",
    "rejections_per_position",
    "speedup",
]

#: Batch sizes of the figure's batch curve (spec §6).
BATCH_MS = (1, 2, 4, 8, 16, 32, 1000)


def _both_iid(draft: Source, target: Source) -> bool:
    return isinstance(draft, IIDSource) and isinstance(target, IIDSource)


def check_batch_size(M) -> int:
    """M, the number of parallel draft responses of batch SD: an integer in [1, MAX_CANDIDATES]."""
    return check_size(M, "M", limit=MAX_CANDIDATES, limit_name="MAX_CANDIDATES",
                      what="an integer batch size (number of draft responses)")


def rejections_per_position(draft: Source, target: Source, horizon: int) -> np.ndarray:
    """Per-position terms of Theorem 1 of [1], eq. (1): E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})], n = 1..T.

    The prefix is drawn from the **target** q: each position is verified exactly once and,
    by unbiasedness (2), the realised prefix is q-distributed. Entry n−1 is the rejection
    probability at position n; the sum is E[N_rej].

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both sources' horizons.

    Returns
    -------
    ndarray, shape (T,)
        The rejection probability of each position.

    Raises
    ------
    ValueError
        On a vocabulary mismatch, T < 1 or T beyond either source's horizon.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    The crisp example of spec §4: TV(p_1, q_1) = 0.8; after x_1 = 0 (q-probability 0.1) the rows
    are disjoint (TV 1), after x_1 = 1 they agree (TV 0).

    >>> d = MarkovSource([0.9, 0.1], [[[1.0, 0.0], [0.5, 0.5]]])
    >>> t = MarkovSource([0.1, 0.9], [[[0.0, 1.0], [0.5, 0.5]]])
    >>> rejections_per_position(d, t, 2).round(12).tolist()  # 0.1·1 + 0.9·0 at position 2
    [0.8, 0.1]
    """
    T = check_pair_horizon(draft, target, horizon)
    if _both_iid(draft, target):  # every position sees the same two rows: no V x V matrix is ever built
        return np.full(T, float(total_variation(draft.probs, target.probs)))
    out = np.zeros(T)
    chains = markov_chains(draft, target, T)
    if chains is not None:
        (p1, P), (q1, Q) = chains
        out[0] = total_variation(p1, q1)
        m = q1.copy()
        fixed = T > 1 and P.strides[0] == 0 and Q.strides[0] == 0  # stationary or IID: the same rows every step
        tv = total_variation(P[0], Q[0]) if fixed else None
        for k in range(T - 1):  # position k+2 from token k+1
            out[k + 1] = m @ (tv if fixed else total_variation(P[k], Q[k]))
            m = m @ Q[k]
        return out

    def step(n, prefixes, p, q, mass):
        out[n] = mass @ total_variation(p, q)
        child = mass[:, None] * q
        return (child,), child > 0

    for _ in walk_prefix_tree(draft, target, T, (np.ones(1),), step, what="rejections_per_position"):
        pass
    return out


def expected_rejections(draft: Source, target: Source, horizon: int) -> float:
    """E[N_rej] of speculative decoding with full lookahead — Theorem 1 of [1], eq. (1).

    E[N_rej] = Σ_{n=1}^{T} E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})]; see
    :func:`rejections_per_position`.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both sources' horizons.

    Returns
    -------
    float
        E[N_rej] in [0, T].

    Raises
    ------
    ValueError
        As :func:`rejections_per_position`.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    The crisp example of spec §4 gives 0.8 + 0.1·1 = 0.9:

    >>> d = MarkovSource([0.9, 0.1], [[[1.0, 0.0], [0.5, 0.5]]])
    >>> t = MarkovSource([0.1, 0.9], [[[0.0, 1.0], [0.5, 0.5]]])
    >>> round(expected_rejections(d, t, 2), 12)
    0.9
    """
    return float(rejections_per_position(draft, target, horizon).sum())


def speedup(draft: Source, target: Source, horizon: int) -> float:
    """Acceleration rate T / E[N_rej] of [1] (spec §2; ``inf`` when E[N_rej] = 0), with E[N_rej] from eq. (1).

    With negligible draft cost and full lookahead every rejection ends a round, so the target is
    called about E[N_rej] times for T tokens instead of T times.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both sources' horizons.

    Returns
    -------
    float
        T / E[N_rej], or ``inf``.

    Raises
    ------
    ValueError
        As :func:`rejections_per_position`.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> speedup(bernoulli(0.5), bernoulli(0.25), 4)  # TV = 0.25 per position: 4 / (4 · 0.25)
    4.0
    >>> speedup(bernoulli(0.5), bernoulli(0.5), 4)  # identical models never reject
    inf
    """
    T = check_horizon(horizon)
    e = expected_rejections(draft, target, T)
    return math.inf if e == 0 else T / e


def markov_pair(vocab: int = 4, horizon: int = 50, seed: int = 5) -> tuple[MarkovSource, MarkovSource]:
    """The seeded time-varying instance of spec §10 as (draft, target) MarkovSources.

    Spec §10 draws ``p = dirichlet(ones(V), size=(T+1, V))`` then ``q`` likewise from
    ``default_rng(seed)``, with ``p[n][prev] = p_n(·|x_{n−1} = prev)`` for n = 1..T and
    prompt x_0 = 0 — a non-stationary Markov pair like the simulations of [1]. Mapping onto
    :class:`~otspec.sources.MarkovSource`: ``initial = p[1][0]`` (rows ``p[1][1:]`` and ``p[0]`` are
    drawn, to keep the generator's stream, but never used) and ``transition = [p[2], ..., p[T]]``, so
    ``matrix(k)`` is ``p[k+1]``. With the defaults eq. (1) gives E[N_rej] = 20.8204 (spec §9 item 2).

    Parameters
    ----------
    vocab : int, default 4
        V.
    horizon : int, default 50
        T >= 1.
    seed : int, default 5
        Seed of :func:`numpy.random.default_rng`.

    Returns
    -------
    (draft, target) : (MarkovSource, MarkovSource)
        Both with vocabulary V and horizon T.

    Raises
    ------
    ValueError
        For a vocabulary, horizon or seed that is not one (``SizeLimitError`` past ``MAX_RANDOM_ENTRIES`` rows'
        entries, counted before they are drawn).

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> d, t = markov_pair(vocab=3, horizon=5)
    >>> d.vocab_size, d.horizon, t.horizon  # T - 1 = 4 transition matrices after the initial row
    (3, 5, 5)
    """
    V, T = check_size(vocab, "vocab"), check_horizon(horizon)
    if (T + 1) * V * V > MAX_RANDOM_ENTRIES:  # each model's rows, before the generator allocates them
        raise SizeLimitError(f"markov_pair(vocab={V:,}, horizon={T:,}): spec §10 draws horizon + 1 = {T + 1:,} "
                             f"matrices of {V:,} x {V:,} = {(T + 1) * V * V:,} entries per model, above "
                             f"MAX_RANDOM_ENTRIES = {MAX_RANDOM_ENTRIES:,}", size=(T + 1) * V * V,
                             limit=MAX_RANDOM_ENTRIES)
    rng = np.random.default_rng(check_seed(seed))
    p = rng.dirichlet(np.ones(V), size=(T + 1, V))
    q = rng.dirichlet(np.ones(V), size=(T + 1, V))
    return MarkovSource(p[1][0], p[2:T + 1]), MarkovSource(q[1][0], q[2:T + 1])


def _batch_step(f, qm, P, Q, M, rounds=None):
    """Recursion (4): the new f and the rejection mass, for rows P, Q (N, V) at N prefixes (``rounds``: their
    :func:`multiround_rejection`, when already known)."""
    rej, qM = multiround_rejection(P, Q, M, check=False) if rounds is None else rounds  # a round's start: M candidates
    return (f * rej)[:, None] * qM + (qm - f)[:, None] * np.clip(Q - P, 0.0, None)


def _same_view(a, b) -> bool:
    """Whether two arrays are the same numbers in memory (a stationary chain's matrix at two positions)."""
    a, b = np.asarray(a), np.asarray(b)
    return (a.shape == b.shape and a.strides == b.strides
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def batch_rejections_per_position(draft: Source, target: Source, horizon: int, M: int) -> np.ndarray:
    """Per-position terms Σ_{x_{1:n}} f(x_{1:n}) of recursion (4)–(5) for batch speculative decoding (Algorithm 4 of [1]).

    f(x_{1:n}) = P(x_{1:n} generated and token n produced by a rejection), f(∅) = 1:
    f(x_{1:n}) = f(x_{1:n−1}) Π_m TVᵐ_n q^M_n(x_n) + [q(x_{1:n−1}) − f(x_{1:n−1})] (q_n − p_n)_+(x_n),
    where Π_m TVᵐ_n and q^M_n are the multi-round rejection probability and final residual
    (:func:`~otspec.theory.multidraft.multiround_rejection`, SpecInfer's scheme [2]). For IID/Markov
    sources f is indexed by the last token; other sources walk the prefix tree. The recursion is the
    spec's reconstruction of the paper's Theorem 3.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both sources' horizons.
    M : int
        The number of parallel draft responses, 1 <= M <= :data:`~otspec.checks.MAX_CANDIDATES`.

    Returns
    -------
    ndarray, shape (T,)
        The probability that position n is produced by a rejection, n = 1..T.

    Raises
    ------
    ValueError
        As :func:`rejections_per_position`, or for an invalid M.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.
    .. [2] X. Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based
       Speculative Inference and Verification", ASPLOS 2024, arXiv:2305.09781.

    Examples
    --------
    p = Ber(0.25), q = Ber(0.75), M = 2: a round starts with both responses rejected with probability
    ½ · ¾ = 3/8 (:func:`~otspec.theory.multidraft.multiround_rejection`); inside a followed response
    the rejection probability is TV = ½, so F_2 = (3/8)(3/8) + (5/8)(1/2).

    >>> from otspec.sources import bernoulli
    >>> batch_rejections_per_position(bernoulli(0.25), bernoulli(0.75), 2, 2).tolist()
    [0.375, 0.453125]
    """
    T = check_pair_horizon(draft, target, horizon)
    M = check_batch_size(M)
    out = np.zeros(T)
    if _both_iid(draft, target):  # summed over the last token: F_n = F_{n-1} Π_m TV^m + (1 - F_{n-1}) TV
        rej = float(multiround_rejection(draft.probs[None], target.probs[None], M)[0][0])
        tv, F = float(total_variation(draft.probs, target.probs)), 1.0
        for n in range(T):
            F = out[n] = F * rej + (1.0 - F) * tv if n else rej
        return out
    chains = markov_chains(draft, target, T)
    if chains is not None:
        (p1, Pm), (q1, Qm) = chains
        f, qm, last = np.ones(1), np.ones(1), None  # the single state "prompt" before position 1
        for n in range(T):
            P, Q = (p1[None], q1[None]) if n == 0 else (Pm[n - 1], Qm[n - 1])
            P, Q = np.asarray(P), np.asarray(Q)
            if last is None or not (_same_view(P, last[0]) and _same_view(Q, last[1])):  # a stationary chain: once
                last = (P, Q, multiround_rejection(P, Q, M, check=False))
            newf = (_batch_step(f, qm, P, Q, M, last[2])).sum(axis=0)
            out[n] = newf.sum()
            f, qm = newf, qm @ Q
        return out

    def step(n, prefixes, P, Q, f, qm):
        newf = _batch_step(f, qm, P, Q, M)
        out[n] = newf.sum()
        return (newf, qm[:, None] * Q), None

    for _ in walk_prefix_tree(draft, target, T, (np.ones(1), np.ones(1)), step,
                              what="batch_rejections_per_position"):
        pass
    return out


def batch_expected_rejections(draft: Source, target: Source, horizon: int, M: int) -> float:
    """E[N_rej^{(M)}] of batch speculative decoding (Algorithm 4 of [1]), eq. (5) with recursion (4).

    The sum over positions of :func:`batch_rejections_per_position`. M = 1 equals eq. (1); the value
    decreases in M. On :func:`markov_pair` (V=4, T=50): 20.820 (M=1), 18.968 (2), 17.567 (4),
    16.553 (8), 14.492 (1000) — spec §6.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both sources' horizons.
    M : int
        The number of parallel draft responses, 1 <= M <= :data:`~otspec.checks.MAX_CANDIDATES`.

    Returns
    -------
    float
        E[N_rej^{(M)}] in [0, T].

    Raises
    ------
    ValueError
        As :func:`batch_rejections_per_position`.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> d, t = bernoulli(0.25), bernoulli(0.75)
    >>> batch_expected_rejections(d, t, 2, 1)  # M = 1 is eq. (1): 2 · TV = 2 · 0.5
    1.0
    >>> batch_expected_rejections(d, t, 2, 2)  # 0.375 + 0.453125
    0.828125
    """
    return float(batch_rejections_per_position(draft, target, horizon, M).sum())


def batch_curve(draft: Source, target: Source, horizon: int, Ms: Sequence[int] = BATCH_MS) -> dict:
    """E[N_rej] and T/E[N_rej] against the batch size M (eq. (5) of batch SD, Algorithm 4 of [1]), JSON-ready.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both sources' horizons.
    Ms : sequence of int, default :data:`BATCH_MS`
        Batch sizes, each in [1, :data:`~otspec.checks.MAX_CANDIDATES`].

    Returns
    -------
    dict
        ``{"M": [...], "expected_rejections": [...], "speedup": [...], "horizon": T}``, lists of
        length len(Ms); the speedup is ``inf`` where E[N_rej] = 0.

    Raises
    ------
    ValueError
        As :func:`batch_rejections_per_position`.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> curve = batch_curve(bernoulli(0.25), bernoulli(0.75), 2, Ms=(1, 2))
    >>> curve["expected_rejections"], curve["speedup"][0]  # see batch_expected_rejections; 2 / 1.0
    ([1.0, 0.828125], 2.0)
    """
    T = check_pair_horizon(draft, target, horizon)
    Ms = [check_batch_size(m) for m in grid_entries(Ms, "Ms")]
    vals = [batch_expected_rejections(draft, target, T, m) for m in Ms]
    return {"M": Ms, "expected_rejections": vals,
            "speedup": [T / v if v > 0 else math.inf for v in vals], "horizon": T}
