"""Closed forms of single-draft verification: expected accepted length per iteration.

Spec ``token_and_block_verification.md``; numbering follows it (its eq. (4) is Theorem 2 of
the block-verification v1 paper, numbered (7) there). Token verification (4) and (11a), the
block-OT optimum (8), (10) and (11b), the published block verification (17).

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, all_numbers, check_real, check_size, real_array
from ..distributions import total_variation
from ..errors import SizeLimitError
from ..pairs import check_pair, markov_chains, walk_prefix_tree
from ..sources import IIDSource, Source
from .cost import predicted_speedup
from .iid import iid_block_values

__all__ = [
    "FIGURE2_QUANTITY",
    "bernoulli_expected_accepted_optimal",
    "bernoulli_expected_accepted_token",
    "expected_accepted_block",
    "expected_accepted_optimal",
    "expected_accepted_token",
    "positional_window_values",
    "predicted_speedup",
    "tokens_per_iteration",
]

#: What Figure 2 of Sun et al.'s block verification paper (v1) plots (spec §6, summation-range note).
FIGURE2_QUANTITY = (
    "The v1 text writes both sums from i = 0, so its formulas equal E[tau] + 1 (tokens per "
    "iteration, counting the correction/bonus token), while its caption says 'expected number of "
    "accepted tokens' (E[tau], sums from i = 1). otspec plots E[tau] and reports E[tau] + 1 beside it."
)


def tokens_per_iteration(expected_accepted):
    """Expected tokens emitted per iteration: E[τ] + 1 (the accepted drafts plus the correction or bonus token).

    Every iteration of speculative decoding [1] emits its τ accepted draft tokens and one more token
    from the target, so the block efficiency is E[τ] + 1; the v1 block-verification paper [2] plots
    this quantity in its Figure 2 while calling it the accepted length (see :data:`FIGURE2_QUANTITY`).

    Parameters
    ----------
    expected_accepted : float or ndarray
        E[τ], any shape.

    Returns
    -------
    float or ndarray
        E[τ] + 1, the same shape.

    References
    ----------
    .. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.
    .. [2] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    >>> tokens_per_iteration(0.75)  # 0.75 accepted drafts, then one target token
    1.75
    """
    values = real_array(expected_accepted, "expected_accepted")  # text, booleans (np.bool_ too), complex: refused
    if not (values >= 0).all():
        raise ValueError(f"expected_accepted: expected finite numbers >= 0 (accepted drafts), got {expected_accepted!r}")
    if hasattr(expected_accepted, "detach"):  # a torch tensor stays one, on its device
        return expected_accepted + 1.0
    return float(values) + 1.0 if values.ndim == 0 else values + 1.0


def positional_window_values(overlaps) -> tuple[float, float]:
    r"""E[τ] of token verification and an upper bound on every lossless single-draft verifier, for position-only rows.

    The rows depend on the position only (logged rows); both values are averaged over windows.
    ``overlaps`` holds :math:`\alpha_{w,i} = 1 - TV(p_i, q_i)` at position i of window w. With the
    rows independent across positions, eq. (4) factorises: :math:`E[\tau_{tok}] = \sum_l \prod_{i \le l}
    \alpha_i` ([1], Theorem 2 of [2]). The block-OT optimum eq. (8) (Theorem 1 of [2]) is
    :math:`\sum_l (1 - TV(\otimes_{i \le l} p_i, \otimes_{i \le l} q_i))`, and the TV of a product is at
    least the TV of each factor, so :math:`E[\tau_{opt}] \le \sum_l \min_{i \le l} \alpha_i`. Published
    block verification (17) [3] lies between the two: it is optimal among on-path verifiers, token
    verification is one, and every valid verifier is bounded by (8).

    Parameters
    ----------
    overlaps : array_like, shape (W, L)
        1 − TV(p_i, q_i) for W windows of L positions, each in [0, 1].

    Returns
    -------
    (token, bound) : (float, float)
        E[τ] of token verification and the upper bound, each the mean over windows.

    Raises
    ------
    ValueError
        If ``overlaps`` is not a non-empty 2-D array of values in [0, 1].

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
    >>> positional_window_values([[0.5, 1.0]])  # 0.5 + 0.5·1 and 0.5 + min(0.5, 1)
    (1.0, 1.0)
    >>> positional_window_values([[0.5, 0.5]])  # 0.5 + 0.25 and 0.5 + 0.5
    (0.75, 1.0)
    """
    if isinstance(overlaps, list | tuple) and not all_numbers(overlaps, booleans=False):  # '0.5' is not a number
        raise ValueError(f"overlaps: expected numbers in [0, 1], got text, booleans or other objects in {overlaps!r}")
    a = real_array(overlaps, "overlaps", finite=False)  # a boolean array was read as 0 and 1
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0 or not np.all((a >= 0) & (a <= 1 + 1e-12)):
        raise ValueError(f"overlaps: expected a non-empty (windows, L) array of values in [0, 1], got shape {a.shape}")
    return (float(np.cumprod(a, axis=1).sum(axis=1).mean()),
            float(np.minimum.accumulate(a, axis=1).sum(axis=1).mean()))


def bernoulli_expected_accepted_token(draft_p: float, target_p: float, draft_length: int) -> float:
    """E[τ] of token verification for an IID Ber(p₁) draft against an IID Ber(q₁) target — spec eq. (11a).

    E[τ] = Σ_{i=1}^{L} (1 − |p₁ − q₁|)^i (accepted draft tokens, not counting the correction/bonus
    token): each position is accepted with probability 1 − TV = 1 − |p₁ − q₁| ([1]; eq. (9)).

    Parameters
    ----------
    draft_p : float
        p₁ = P(draft token = 1), in [0, 1].
    target_p : float
        q₁ = P(target token = 1), in [0, 1].
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH`.

    Returns
    -------
    float
        E[τ] in [0, L].

    Raises
    ------
    ValueError
        For a probability outside [0, 1] or an invalid L.

    References
    ----------
    .. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.
    .. [2] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    >>> bernoulli_expected_accepted_token(0.25, 0.75, 2)  # 0.5 + 0.5**2
    0.75
    >>> bernoulli_expected_accepted_token(0.5, 0.5, 3)  # p = q: every draft accepted
    3.0
    """
    p1, q1, L = _bernoulli_args(draft_p, target_p, draft_length)
    overlap = 1.0 - abs(p1 - q1)
    return float(sum(overlap**i for i in range(1, L + 1)))


def _bernoulli_args(draft_p, target_p, draft_length) -> tuple[float, float, int]:
    return (check_real(draft_p, "draft_p", low=0.0, high=1.0), check_real(target_p, "target_p", low=0.0, high=1.0),
            check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH"))


def _check_length(draft: Source, target: Source, draft_length) -> int:
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    check_pair(draft, target, L)
    return L


def expected_accepted_token(draft: Source, target: Source, draft_length: int) -> float:
    r"""E[τ] of token verification from an empty context — spec eq. (4), Theorem 2 of [3].

    .. math::
        E[τ] = \sum_{l=1}^{L} \sum_{x^l} \prod_{i=1}^{l} \min\{p(x_i|x^{i-1}), q(x_i|x^{i-1})\}

    (the sum over prefixes of the product of conditional minima: each position of speculative
    sampling [1], [2] keeps its draft with probability min{1, q/p}). IID pairs use Σ_l (1 − TV)^l;
    Markov pairs the forward recursion m_1 = min(p_1, q_1), m_l(b) = Σ_a m_{l-1}(a) min(P_l[a, b],
    Q_l[a, b]), costing O(L V²); other sources walk the prefix tree
    (:func:`~otspec.pairs.walk_prefix_tree`).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH` and within both horizons.

    Returns
    -------
    float
        E[τ] in [0, L] (accepted drafts, not counting the correction/bonus token).

    Raises
    ------
    ValueError
        On a vocabulary mismatch, an invalid L, or L beyond a horizon; a prefix-tree walk above
        its size limit raises :class:`~otspec.errors.SizeLimitError`.

    References
    ----------
    .. [1] Y. Leviathan, M. Kalman, Y. Matias, "Fast Inference from Transformers via Speculative
       Decoding", ICML 2023, arXiv:2211.17192.
    .. [2] C. Chen, S. Borgeaud, G. Irving, J.-B. Lespiau, L. Sifre, J. Jumper, "Accelerating Large
       Language Model Decoding with Speculative Sampling", arXiv:2302.01318, 2023.
    .. [3] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> expected_accepted_token(bernoulli(0.25), bernoulli(0.75), 2)  # (1 - 0.5) + (1 - 0.5)**2
    0.75
    >>> expected_accepted_token(bernoulli(0.5), bernoulli(0.5), 3)  # identical models: L
    3.0
    """
    L = _check_length(draft, target, draft_length)
    if isinstance(draft, IIDSource) and isinstance(target, IIDSource):
        ov = 1.0 - float(total_variation(draft.probs, target.probs))
        return float(sum(ov**i for i in range(1, L + 1)))
    chains = markov_chains(draft, target, L)
    if chains is not None:
        (p1, P), (q1, Q) = chains
        mass = np.minimum(p1, q1)
        total = mass.sum()
        for k in range(L - 1):
            mass = mass @ np.minimum(P[k], Q[k])
            total += mass.sum()
        return float(total)

    def step(level, prefixes, p_rows, q_rows, mass):  # product of conditional minima along every prefix
        child = mass[:, None] * np.minimum(p_rows, q_rows)
        return (child,), child > 0

    return float(sum(mass.sum() for _, (mass,) in walk_prefix_tree(draft, target, L, (np.ones(1),), step)))


def bernoulli_expected_accepted_optimal(draft_p: float, target_p: float, draft_length: int) -> float:
    """Block-OT optimum for IID Ber(p₁) against IID Ber(q₁) — spec eq. (11b), Theorem 1 of [1].

    E[τ_opt] = Σ_{i=1}^{L} (1 − TV(Bin(i, p₁), Bin(i, q₁))): all sequences with the same number of
    ones share one likelihood ratio, so Σ_{x^i} min(p(x^i), q(x^i)) is the overlap of the two
    Binomial laws (eq. (10)).

    Parameters
    ----------
    draft_p : float
        p₁ = P(draft token = 1), in [0, 1].
    target_p : float
        q₁ = P(target token = 1), in [0, 1].
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH`.

    Returns
    -------
    float
        E[τ_opt] in [0, L].

    Raises
    ------
    ValueError
        For a probability outside [0, 1] or an invalid L.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    Bin(2, 0.25) = (9, 6, 1)/16 and Bin(2, 0.75) = (1, 6, 9)/16 overlap in 8/16:

    >>> round(bernoulli_expected_accepted_optimal(0.25, 0.75, 2), 12)  # (1 - 0.5) + (1 - 0.5)
    1.0
    """
    from scipy.special import (  # not scipy.stats: it takes about a second to import
        gammaln,
        xlog1py,
        xlogy,
    )

    draft_p, target_p, L = _bernoulli_args(draft_p, target_p, draft_length)
    def pmf(i, k, log_n_k, p):  # Bin(i, p)(k) = C(i, k) p^k (1 − p)^(i − k), 0^0 = 1
        return np.exp(log_n_k + xlogy(k, p) + xlog1py(i - k, -p))

    total = 0.0
    for i in range(1, L + 1):
        k = np.arange(i + 1)
        log_n_k = gammaln(i + 1) - gammaln(k + 1) - gammaln(i - k + 1)  # C(i, k) overflows past i = 1029: logs
        # 1 − TV as the overlap Σ min: no cancellation as it vanishes
        total += np.minimum(pmf(i, k, log_n_k, draft_p), pmf(i, k, log_n_k, target_p)).sum()
    return float(total)


def _iid_exact(draft: Source, target: Source, L: int, key: str) -> float | None:
    """An IID pair's exact value by ratio classes (:mod:`otspec.theory.iid`), or None if that route is too large."""
    if not (isinstance(draft, IIDSource) and isinstance(target, IIDSource)):
        return None
    try:
        return float(getattr(iid_block_values(draft.probs, target.probs, L, route="exact"), key).value)
    except SizeLimitError:
        return None


def _tree_sum(draft: Source, target: Source, draft_length: int, child) -> float:
    """Σ over levels 1..L of the children's values, pruning nodes whose value is 0.

    ``child(value, p_joint, q_joint, p_rows, q_rows)`` maps the per-node state to the
    children's (value, p_joint, q_joint), each broadcastable to (N, V).
    """
    L = _check_length(draft, target, draft_length)

    def step(level, prefixes, p_rows, q_rows, value, pj, qj):
        out = child(value[:, None], pj[:, None], qj[:, None], p_rows, q_rows)
        return out, np.broadcast_to(out[0], p_rows.shape) > 0

    ones = np.ones(1)
    return float(sum(value.sum() for _, (value, _, _) in walk_prefix_tree(draft, target, L, (ones, ones, ones),
                                                                        step)))


def expected_accepted_optimal(draft: Source, target: Source, draft_length: int) -> float:
    r"""Block-OT optimum E[τ_opt] — spec eq. (8), Theorem 1 of [1].

    .. math::
        \max_\pi E_\pi[\beta] = \sum_{l=1}^{L} \sum_{x^l} \min\{p(x^l), q(x^l)\}

    (the sum over prefixes of the minimum of the joint laws; no valid verifier accepts more).
    IID Bernoulli pairs use the Binomial form (11b), other IID pairs its generalisation over classes
    of equal q/p when that is small enough (:mod:`otspec.theory.iid`); other sources walk the prefix
    tree (nodes where either joint is 0 are pruned). For IID pairs beyond both,
    :func:`otspec.theory.iid.iid_block_optimum` gives certified bounds.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH` and within both horizons.

    Returns
    -------
    float
        E[τ_opt] in [0, L].

    Raises
    ------
    ValueError
        On a vocabulary mismatch, an invalid L, or L beyond a horizon; a prefix-tree walk above
        its size limit raises :class:`~otspec.errors.SizeLimitError`.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> round(expected_accepted_optimal(bernoulli(0.25), bernoulli(0.75), 1), 12)  # L = 1: 1 - TV
    0.5
    >>> round(expected_accepted_optimal(bernoulli(0.25), bernoulli(0.75), 2), 12)  # 0.5 + 0.5 by (11b)
    1.0
    """
    if isinstance(draft, IIDSource) and isinstance(target, IIDSource) and draft.vocab_size == 2 == target.vocab_size:
        return bernoulli_expected_accepted_optimal(draft.probs[1], target.probs[1], draft_length)
    exact = _iid_exact(draft, target, _check_length(draft, target, draft_length), "optimum")
    if exact is not None:
        return exact

    def step(value, pj, qj, p_rows, q_rows):
        pj, qj = pj * p_rows, qj * q_rows
        return np.minimum(pj, qj), pj, qj

    return _tree_sum(draft, target, draft_length, step)


def expected_accepted_block(draft: Source, target: Source, draft_length: int) -> float:
    """E[τ] of the published block verification [1] — spec eq. (17).

    W_0 = 1, W_l(x^l) = min{p(x^l), q(x_l|x^{l−1}) W_{l−1}(x^{l−1})},
    E[τ_BV] = Σ_{l=1}^{L} Σ_{x^l} W_l(x^l). Between eq. (4) and eq. (8) (eq. (18)). IID pairs
    with few classes of equal q/p are computed over those classes (:mod:`otspec.theory.iid`),
    other sources by walking the prefix tree.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    draft_length : int
        L >= 1, at most :data:`~otspec.checks.MAX_DRAFT_LENGTH` and within both horizons.

    Returns
    -------
    float
        E[τ_BV] in [0, L].

    Raises
    ------
    ValueError
        On a vocabulary mismatch, an invalid L, or L beyond a horizon; a prefix-tree walk above
        its size limit raises :class:`~otspec.errors.SizeLimitError`.

    References
    ----------
    .. [1] Z. Sun, U. Mendlovic, Y. Leviathan, A. Aharoni, J. H. Ro, A. Beirami, A. T. Suresh,
       "Block Verification Accelerates Speculative Decoding", ICLR 2025, arXiv:2403.10444.

    Examples
    --------
    p = Ber(0.25), q = Ber(0.75), L = 2: W_1 = (0.25, 0.25); W_2 over 00, 01, 10, 11 is
    min(9/16, 1/16), min(3/16, 3/16), min(3/16, 1/16), min(1/16, 3/16), summing to 6/16.

    >>> from otspec.sources import bernoulli
    >>> round(expected_accepted_block(bernoulli(0.25), bernoulli(0.75), 2), 12)  # 0.5 + 0.375
    0.875
    """
    exact = _iid_exact(draft, target, _check_length(draft, target, draft_length), "verification")
    if exact is not None:
        return exact

    def step(value, pj, qj, p_rows, q_rows):
        pj = pj * p_rows
        return np.minimum(pj, q_rows * value), pj, qj

    return _tree_sum(draft, target, draft_length, step)
