r"""Rejections versus distribution bias: closed forms (Yin et al. 2024, Theorems 4–5).

Spec ``yin_theory.md`` §7. A rejection-based verifier at one position draws x̃ ~ p (the
**draft**), accepts it with probability b(x̃) and otherwise resamples from P. With accepted
mass a(x) = p(x) b(x), rejection probability r = 1 − Σ a and resampled mass s = r P, its
output law is a + s and its bias is TV(a + s, q) against the **target** q.

* :func:`pareto_front` — Theorem 5, eq. (8): the least bias at rejection r, max{0, TV − r};
* :func:`optimal_resampling` — Theorem 4, eqs. (6)–(7): the best P for a given b;
* :func:`over_acceptance_kernel`, :func:`over_acceptance`, :func:`family_curve` — the family
  b_ε = min{1, (q + ε)/p} (eq. (9)) with Decoding-OPT (P = P*) or Decoding-UNO (P = q); the
  verifiers are :class:`otspec.verifiers.biased.DecodingOPT` / ``DecodingUNO``; they live in
  :mod:`otspec.theory.pareto_family` and are re-exported here;
* :func:`per_step_curve` — per-step token-level verifiers applied along whole sequences,
  evaluated exactly (upper bounds on the sequence-level front, whose LP is
  :func:`otspec.solvers.pareto.sequence_min_bias`).

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..checks import check_real, real_array, real_grid
from ..distributions import row_pair, total_variation
from ..pairs import check_pair_horizon
from ..sources import Source
from .pareto_family import family_curve, over_acceptance, over_acceptance_kernel
from .rejections import expected_rejections

__all__ = [
    "FRACTION_ROUNDING",
    "ResamplingResult",
    "check_fraction",
    "family_curve",
    "level_rows",
    "optimal_resampling",
    "over_acceptance",
    "over_acceptance_kernel",
    "pareto_front",
    "per_step_curve",
    "sequence_expected_rejections_sd",
    "sequence_laws",
]


class ResamplingResult(NamedTuple):
    """Theorem 4's optimum; unpacks as ``(resampling, bias)``."""

    resampling: np.ndarray
    bias: float



#: How far past 0 or 1 a rejection probability may lie and still be read as that bound (float rounding, e.g. a TV of
#: 1 + 2e-16 computed on disjoint supports).
FRACTION_ROUNDING = 1e-12


def check_fraction(value, name: str) -> float:
    """``value`` as a probability in [0, 1]; values within :data:`FRACTION_ROUNDING` outside are clipped to the
    bound, anything else (NaN, infinite, not a number, further out) is a ``ValueError`` naming ``name``."""
    r = check_real(value, name, allow_inf=True)  # '0.5' and True were read as numbers
    if not math.isfinite(r) or not -FRACTION_ROUNDING <= r <= 1.0 + FRACTION_ROUNDING:
        raise ValueError(f"{name}: expected a rejection probability in [0, 1], got {value!r}")
    return min(max(r, 0.0), 1.0)


def pareto_front(draft, target, rejection) -> float | np.ndarray:
    """Theorem 5 of [1], eq. (8): the least bias at rejection probability r, max{0, TV(p, q) − r}.

    A verifier that rejects with probability r accepts mass 1 − r, of which at most
    Σ min(p, q) = 1 − TV(p, q) fits under q; the excess is unavoidable bias. The front is the
    straight line from (0, TV) to (TV, 0); speculative decoding sits at (TV, 0).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    rejection : float or array_like
        r, values in [0, 1] (within :data:`FRACTION_ROUNDING`), any shape.

    Returns
    -------
    float or ndarray
        The least bias; an array of ``rejection``'s shape for array input.

    Raises
    ------
    ValueError
        On invalid rows, a vocabulary mismatch, or r outside [0, 1] or not finite.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    p = (0.5, 0.5), q = (0.75, 0.25), TV(p, q) = 0.25:

    >>> pareto_front([0.5, 0.5], [0.75, 0.25], [0.0, 0.125, 0.25, 0.5]).tolist()  # 0.25 - r, then 0
    [0.25, 0.125, 0.0, 0.0]
    """
    p, q = row_pair(draft, target)
    r = real_array(rejection, "rejection", finite=False)  # text ('0.1'), booleans, tensors that require grad
    if not np.all(np.isfinite(r)) or np.any((r < -FRACTION_ROUNDING) | (r > 1 + FRACTION_ROUNDING)):
        raise ValueError(f"rejection: expected values in [0, 1], got {rejection!r}")
    r = np.clip(r, 0.0, 1.0)
    out = np.maximum(0.0, float(total_variation(p, q)) - r)
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------- Theorem 4
def optimal_resampling(draft, target, accept_probs) -> ResamplingResult:
    r"""Theorem 4 of [1], eqs. (6)–(7): the best resampling law for given acceptance probabilities.

    .. math::
        \min_{P \in \Delta_V} \mathrm{TV}(p b + r P, q) = \sum_x (p(x) b(x) - q(x))_+,
        \qquad P^*(x) = \frac{(q(x) - p(x) b(x))_+}{\sum_z (q(z) - p(z) b(z))_+},

    with r = 1 − Σ p b. P* puts r P* ≤ (q − pb)_+ (its mass Σ (q − pb)_+ = Σ (pb − q)_+ + r ≥ r)
    and nothing where pb > q, so only the over-accepted excess remains. If Σ (q − pb)_+ = 0
    then p b = q, r = 0 and P is irrelevant; q is returned.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    accept_probs : array_like, shape (V,)
        b ∈ [0, 1] (entries where p = 0 are irrelevant but must still lie in [0, 1]).

    Returns
    -------
    ResamplingResult
        ``(resampling, bias)``: P*, shape (V,), and the least bias Σ (p b − q)_+.

    Raises
    ------
    ValueError
        On invalid rows, a vocabulary mismatch, or b of another shape or outside [0, 1].

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    p = (0.5, 0.5), q = (0.75, 0.25), b = (1, 0.75): p b = (0.5, 0.375) over-accepts token 1 by
    0.125, and only token 0 has room left, so P* = (1, 0).

    >>> res = optimal_resampling([0.5, 0.5], [0.75, 0.25], [1.0, 0.75])
    >>> res.resampling.tolist(), res.bias
    ([1.0, 0.0], 0.125)
    """
    p, q = row_pair(draft, target)
    b = real_array(accept_probs, "accept_probs", finite=False)  # True was read as 1.0
    if b.shape != p.shape:
        raise ValueError(f"accept_probs: expected shape {p.shape} (the vocabulary of draft and target), got {b.shape}")
    if not np.all(np.isfinite(b)) or np.any((b < 0) | (b > 1)):
        raise ValueError("accept_probs: expected acceptance probabilities in [0, 1] (finite)")
    a = p * b
    gap = np.maximum(q - a, 0.0)
    mass = gap.sum()
    P = gap / mass if mass > 0 else q.copy()
    return ResamplingResult(P, float(np.maximum(a - q, 0.0).sum()))


# ----------------------------------------------------------- sequence level
def level_rows(source: Source, T: int) -> list[np.ndarray]:
    """rows[n-1][k] = law of token n after the k-th prefix of length n − 1 (lexicographic), shape (V**(n-1), V)."""
    out = []
    for n in range(1, T + 1):
        prefixes = source.enumerate(n - 1).tokens
        out.append(np.asarray(source.next_probs(prefixes), dtype=np.float64).reshape(-1, source.vocab_size))
    return out


def sequence_laws(draft: Source, target: Source, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """The draft's and the target's laws of x_{1:T}: p(x_{1:T}) = Π_n p_n(x_n | x_{1:n−1}), and the same for q.

    These are the sequence laws whose distance TV(p^{(T)}, q^{(T)}) is the bias of never rejecting,
    the top of the sequence-level front of [1].

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both horizons; V**T at most :data:`~otspec.sources.MAX_ENUMERATION`.

    Returns
    -------
    p, q : ndarray, shape (V**T,) each
        Lexicographic laws.

    Raises
    ------
    ValueError
        On a vocabulary mismatch, an invalid T, or V**T above the enumeration limit.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> p, q = sequence_laws(bernoulli(0.25), bernoulli(0.75), 2)
    >>> p.tolist()  # 00, 01, 10, 11: products of (0.75, 0.25)
    [0.5625, 0.1875, 0.1875, 0.0625]
    """
    T = check_pair_horizon(draft, target, horizon)
    return draft.enumerate(T).probs, target.enumerate(T).probs


def sequence_expected_rejections_sd(draft: Source, target: Source, horizon: int) -> float:
    """E_SD[N_rej] of Theorem 1 of [1], eq. (1) (:func:`~otspec.theory.rejections.expected_rejections`).

    E_SD[N_rej] = Σ_{n=1}^{T} E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})]: the right end of the
    sequence-level front, where the bias reaches 0.

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both horizons.

    Returns
    -------
    float
        E_SD[N_rej] in [0, T].

    Raises
    ------
    ValueError
        On a vocabulary mismatch or an invalid T.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    >>> from otspec.sources import bernoulli
    >>> sequence_expected_rejections_sd(bernoulli(0.5), bernoulli(0.25), 3)  # 3 · TV = 3 · 0.25
    0.75
    """
    return expected_rejections(draft, target, check_pair_horizon(draft, target, horizon))


def _per_step_run(prow, qrow, qT, rule, theta):
    """Exact (E[N_rej], bias) of the per-step verifier ``rule`` at parameter ``theta``, by forward propagation."""
    law, rej = np.ones(1), 0.0
    for p, q in zip(prow, qrow, strict=True):
        out, r = rule(p, q, theta)
        rej += float(law @ r)
        law = (law[:, None] * out).reshape(-1)
    return rej, float(0.5 * np.abs(law - qT).sum())


def _mixture_rule(p, q, theta):
    # a = min(p,q) + (1-θ)(p-q)_+, s = θ (q-p)_+: r = θ TV and bias (1-θ) TV at every prefix
    return (1.0 - theta) * p + theta * q, theta * 0.5 * np.abs(p - q).sum(axis=1)


def _eps_rule(p, q, eps):
    a, r, P = over_acceptance_kernel(p, q, eps, "opt")
    return a + r[:, None] * P, r


def per_step_curve(draft: Source, target: Source, horizon: int, rejections_grid, rule: str = "mixture") -> dict:
    """Per-step token-level-optimal verifiers at the budgets in ``rejections_grid`` (feasible upper bounds).

    Theorem 5 of [1] applied at every prefix. ``rule="mixture"``: at every prefix reject with
    probability θ TV_n(prefix) on the token front (a = min(p, q) + (1 − θ)(p − q)_+,
    s = θ (q − p)_+, output (1 − θ) p_n + θ q_n). ``rule="eps"``: Decoding-OPT with one ε at every
    prefix. The parameter is found by bisection so that the exact E[N_rej] (under the algorithm's
    own prefix law) equals R; budgets ≥ E_SD[N_rej] give SD (bias 0).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both horizons (the laws of x_{1:T} are enumerated).
    rejections_grid : array_like of float, shape (G,)
        Budgets R >= 0 on E[N_rej].
    rule : {"mixture", "eps"}, default "mixture"
        The per-step verifier family.

    Returns
    -------
    dict
        ``rejections``, ``bias``, ``parameter`` (θ or ε): lists of length G.

    Raises
    ------
    ValueError
        On a vocabulary mismatch, an invalid T, an unknown rule, or a negative or non-finite budget.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    One position, p = Ber(0.5), q = Ber(0.25), TV = 0.25: the mixture rule rejects θ · 0.25 and
    leaves bias (1 − θ) · 0.25, the token front.

    >>> from otspec.sources import bernoulli
    >>> curve = per_step_curve(bernoulli(0.5), bernoulli(0.25), 1, [0.0, 0.125, 0.25])
    >>> curve["bias"], curve["parameter"]  # theta = R / TV
    ([0.25, 0.125, 0.0], [0.0, 0.5, 1.0])
    """
    T = check_pair_horizon(draft, target, horizon)
    grid = real_grid(rejections_grid, "rejections_grid", low=0.0)  # '0.1' and True refused, not read as numbers
    prow, qrow = level_rows(draft, T), level_rows(target, T)
    qT = target.enumerate(T).probs
    if rule == "mixture":
        fn, lo0, hi0 = _mixture_rule, 0.0, 1.0  # R increases from 0 (θ = 0) to E_SD (θ = 1)
    elif rule == "eps":
        fn, lo0, hi0 = _eps_rule, 1.0, 0.0  # ε = 1 accepts everything; ε = 0 is SD
    else:
        raise ValueError(f"rule: expected 'mixture' or 'eps', got {rule!r}")
    r_sd = _per_step_run(prow, qrow, qT, fn, hi0)[0]
    out = {"rejections": [], "bias": [], "parameter": []}
    for R in grid:
        if R >= r_sd:
            theta = hi0
        else:
            lo, hi = lo0, hi0  # R(lo) <= R < R(hi)
            for _ in range(60):
                mid = 0.5 * (lo + hi)
                if _per_step_run(prow, qrow, qT, fn, mid)[0] <= R:
                    lo = mid
                else:
                    hi = mid
            theta = lo
        rj, bias = _per_step_run(prow, qrow, qT, fn, theta)
        out["rejections"].append(rj)
        out["bias"].append(bias)
        out["parameter"].append(float(theta))
    return out
