r"""Closed forms of multi-draft verification at one position (k candidates).

Spec ``multi_draft_otm.md`` §4–8 (SpecTr) and ``mcsd.md`` §4. Convention: **p is the draft,
q the target** (MCSD swaps the letters). Acceptance means P(the output is an accepted
candidate).

* SpecTr's closed forms: eq. (14) (Bernoulli pairs) and eq. (15) (uniform pairs);
* k-Seq: β(ρ) eq. (8), the residual eq. (9), ρ* eq. (10) — one batched implementation
  (:func:`kseq_parameters`, :func:`kseq_rho_star`) behind the scalar helpers, in
  :mod:`otspec.theory.multidraft_kseq` (re-exported here);
* multi-round rejection sampling (SpecInfer; MCSD Algorithms 1–2): the residual recursion
  (:func:`multiround_rejection`) and its acceptance, in :mod:`otspec.theory.multidraft_multiround`
  (re-exported here);
* the naive scheme (MCNS) and SpecTr's Lemma 3 upper bound, eq. (12).

The optimum α_k itself is a transport problem: see :mod:`otspec.solvers.otm` (LP, max-flow)
and :mod:`otspec.solvers.otm_dual` (min-cut over sorted prefixes).

Spec: ``docs/multi_draft_otm.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from ..checks import check_flag, check_real
from ..distributions import row_pair
from ..drafts.laws import (
    check_k,
    draft_inclusion_probs,
    draft_tuple_law,
    inclusion_iid,
    tuple_membership,
)
from ..errors import SizeLimitError
from .multidraft_kseq import (
    KSEQ_RESIDUAL_TOL,
    RHO_TOL,
    KSeqParameters,
    kseq_acceptance,
    kseq_beta,
    kseq_parameters,
    kseq_residual,
    kseq_rho_star,
)
from .multidraft_multiround import (
    MAX_MULTIROUND_PATHS,
    multiround_acceptance,
    multiround_rejection,
    uniform_multiround_without_replacement,
)

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

#: Largest vocabulary whose 2^V token sets :func:`lemma3_upper_bound` (and the dual's brute
#: force) enumerate.
MAX_BRUTEFORCE_VOCAB = 16
#: Most (subset, tuple) pairs :func:`lemma3_upper_bound` evaluates.
MAX_LEMMA3_TERMS = 2**24


def _check_unit(x, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):  # text ('0.3') and booleans are not read as numbers
        raise ValueError(f"{name}: expected a probability in [0, 1] (a real number), got {x!r} ({type(x).__name__})")
    if not 0.0 <= float(x) <= 1.0:
        raise ValueError(f"{name}: expected a probability in [0, 1], got {x!r}")
    return float(x)


def bernoulli_alpha(draft_p: float, target_p: float, k: int) -> float:
    """The optimal k-draft acceptance of a Bernoulli pair, eq. (14) (SpecTr's Eq. (10) [1]).

    α_k(Ber p₁, Ber q₁) = min{q₁, 1 − (1 − p₁)^k} + min{1 − q₁, 1 − p₁^k}: some draft is 1 with
    probability 1 − (1 − p₁)^k and some draft is 0 with probability 1 − p₁^k, and the optimal plan
    accepts every mixed tuple.

    Parameters
    ----------
    draft_p : float
        p₁ = P(draft token = 1), in [0, 1].
    target_p : float
        q₁ = P(target token = 1), in [0, 1].
    k : int
        Number of i.i.d. drafts, >= 1.

    Returns
    -------
    float
        α_k in [0, 1].

    Raises
    ------
    ValueError
        For a probability outside [0, 1] or an invalid k.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    >>> bernoulli_alpha(0.25, 0.75, 1)  # one draft: 1 - |p1 - q1|
    0.5
    >>> bernoulli_alpha(0.25, 0.75, 2)  # min(0.75, 1 - 0.75**2) + min(0.25, 1 - 0.25**2)
    0.6875
    """
    p1, q1, k = _check_unit(draft_p, "draft_p"), _check_unit(target_p, "target_p"), check_k(k)
    return min(q1, 1.0 - (1.0 - p1) ** k) + min(1.0 - q1, 1.0 - p1**k)


def uniform_alpha(r: float, k: int) -> float:
    """The optimal k-draft acceptance of a uniform pair, eq. (15) (SpecTr's App. B [1]): α_k = 1 − (1 − 1/r)^k.

    The draft is p = U(d) and the target q = U(d/r), r = d/d_q >= 1: a draft lands in q's support with
    probability 1/r, and the output can be accepted iff some draft does.

    Parameters
    ----------
    r : float
        The ratio d/d_q >= 1 (finite).
    k : int
        Number of i.i.d. drafts, >= 1.

    Returns
    -------
    float
        α_k in [0, 1].

    Raises
    ------
    ValueError
        For r < 1, infinite or not a number, or an invalid k.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    >>> uniform_alpha(2.0, 2)  # 1 - (1/2)**2
    0.75
    >>> uniform_alpha(1.0, 3)  # p = q: always accepted
    1.0
    """
    k = check_k(k)
    r = check_real(r, "r", allow_inf=True)  # '2' and True were read as numbers
    if not (math.isfinite(r) and r >= 1.0):
        raise ValueError(f"r: expected a finite ratio d/d_q >= 1, got {r!r}")
    return 1.0 - (1.0 - 1.0 / r) ** k


def naive_acceptance(draft, target, k: int, replacement: bool = True) -> float:
    """MCNS acceptance (spec §8; MCSD [1]): Y ~ q independent of the candidates, accepted iff Y ∈ S(X).

    Σ_y q(y) P_D(y ∈ S(X)) (:func:`~otspec.drafts.draft_inclusion_probs`); with replacement
    Σ_y q(y) (1 − (1 − p(y))^k). For k = 1 it is Σ_y p(y) q(y), below speculative sampling's
    Σ_y min(p(y), q(y)).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of candidates, >= 1.
    replacement : bool, default True
        i.i.d. candidates or candidates drawn without replacement.

    Returns
    -------
    float
        The acceptance probability in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows or k, or a vocabulary mismatch.

    References
    ----------
    .. [1] S. Yang, S. Huang, X. Dai, J. Chen, "Multi-Candidate Speculative Decoding",
       arXiv:2401.06706, 2024.

    Examples
    --------
    >>> naive_acceptance([0.5, 0.5], [0.5, 0.5], 2)  # 2 · 0.5 · (1 - 0.5**2)
    0.75
    >>> naive_acceptance([0.5, 0.5], [0.5, 0.5], 2, replacement=False)  # both tokens always drafted
    1.0
    """
    p, q = row_pair(draft, target)
    return float(q @ draft_inclusion_probs(p, k, check_flag(replacement, "replacement")))


# ============================================================================ Lemma 3
def subset_masses(w: np.ndarray) -> np.ndarray:
    """Σ_{x ∈ A} w(x) for every bitmask A (bit x = token x), by adding one token at a time."""
    out = np.zeros(1)
    for x in range(w.size):
        out = np.concatenate([out, out + w[x]])
    return out


def lemma3_upper_bound(draft, target, k: int, replacement: bool = True) -> float:
    r"""SpecTr's Lemma 3 upper bound ᾱ_k (eq. (12) of [1]), by brute force over Ω₀ ⊆ Ω.

    .. math::
        \bar\alpha_k = \min_{\Omega_0 \subseteq \Omega} \Big\{ \sum_{y \in \Omega_0}
        \min\{q(y), 1 - (1 - p(y))^k\} + \sum_{x \in \Omega^k} \min\Big\{\prod_i p(x_i),
        \sum_{y \in S(x) \setminus \Omega_0} q(y)\Big\}\Big\}.

    With ``replacement=False`` the same bound for sampling without replacement: ∏ p(x_i)
    becomes P_D(x) and 1 − (1 − p(y))^k becomes P_D(y ∈ S(X)); the proof (split the
    acceptance into Y ∈ Ω₀ and Y ∉ Ω₀) is unchanged. Ω₀ = Ω∖A gives every cut value of the
    dual (4), so ᾱ_k = α_k (spec §5).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary; V <= :data:`MAX_BRUTEFORCE_VOCAB`.
    k : int
        Number of drafts, >= 1.
    replacement : bool, default True
        i.i.d. drafts or drafts without replacement.

    Returns
    -------
    float
        ᾱ_k in [0, 1].

    Raises
    ------
    ValueError
        On invalid rows or k, a vocabulary mismatch; :class:`~otspec.errors.SizeLimitError` for
        V > :data:`MAX_BRUTEFORCE_VOCAB` or more than :data:`MAX_LEMMA3_TERMS` (set, tuple) pairs.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    The bound is tight: for the Bernoulli pair p₁ = 0.25, q₁ = 0.75 it equals eq. (14).

    >>> round(lemma3_upper_bound([0.75, 0.25], [0.25, 0.75], 2), 12)  # 0.4375 + 0.25
    0.6875
    """
    p, q = row_pair(draft, target)
    k = check_k(k)
    replacement = check_flag(replacement, "replacement")
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
