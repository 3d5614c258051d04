r"""Rejections versus distribution bias: closed forms (Yin et al. 2024, Theorems 4–5).

Spec ``yin_theory.md`` §7. A rejection-based verifier at one position draws x̃ ~ p (the
**draft**), accepts it with probability b(x̃) and otherwise resamples from P. With accepted
mass a(x) = p(x) b(x), rejection probability r = 1 − Σ a and resampled mass s = r P, its
output law is a + s and its bias is TV(a + s, q) against the **target** q.

* :func:`pareto_front` — Theorem 5, eq. (8): the least bias at rejection r, max{0, TV − r};
* :func:`optimal_resampling` — Theorem 4, eqs. (6)–(7): the best P for a given b;
* :func:`over_acceptance_kernel`, :func:`over_acceptance`, :func:`family_curve` — the family
  b_ε = min{1, (q + ε)/p} (eq. (9)) with Decoding-OPT (P = P*) or Decoding-UNO (P = q); the
  verifiers are :class:`otspec.verifiers.biased.DecodingOPT` / ``DecodingUNO``;
* :func:`per_step_curve` — per-step token-level verifiers applied along whole sequences,
  evaluated exactly (upper bounds on the sequence-level front, whose LP is
  :func:`otspec.solvers.pareto.sequence_min_bias`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..distributions import namespace, residual, row_pair, total_variation
from ..pairs import check_pair_horizon
from ..sources import Source
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
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number in [0, 1], got {value!r}") from None
    if not math.isfinite(r) or not -FRACTION_ROUNDING <= r <= 1.0 + FRACTION_ROUNDING:
        raise ValueError(f"{name}: expected a rejection probability in [0, 1], got {value!r}")
    return min(max(r, 0.0), 1.0)


def pareto_front(draft, target, rejection) -> float | np.ndarray:
    """Theorem 5, eq. (8): the least bias at rejection probability r, max{0, TV(p, q) − r}.

    ``rejection`` may be a scalar or an array of values in [0, 1] (the result has its shape).
    """
    p, q = row_pair(draft, target)
    r = np.asarray(rejection, dtype=np.float64)
    if not np.all(np.isfinite(r)) or np.any((r < -FRACTION_ROUNDING) | (r > 1 + FRACTION_ROUNDING)):
        raise ValueError(f"rejection: expected values in [0, 1], got {rejection!r}")
    r = np.clip(r, 0.0, 1.0)
    out = np.maximum(0.0, float(total_variation(p, q)) - r)
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------- Theorem 4
def optimal_resampling(draft, target, accept_probs) -> ResamplingResult:
    r"""Theorem 4, eqs. (6)–(7): the best resampling law for given acceptance probabilities.

    .. math::
        \min_{P \in \Delta_V} \mathrm{TV}(p b + r P, q) = \sum_x (p(x) b(x) - q(x))_+,
        \qquad P^*(x) = \frac{(q(x) - p(x) b(x))_+}{\sum_z (q(z) - p(z) b(z))_+},

    with r = 1 − Σ p b. P* puts r P* ≤ (q − pb)_+ (its mass Σ (q − pb)_+ = Σ (pb − q)_+ + r ≥ r)
    and nothing where pb > q, so only the over-accepted excess remains. If Σ (q − pb)_+ = 0
    then p b = q, r = 0 and P is irrelevant; q is returned.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
    accept_probs : array_like, shape (V,)
        b ∈ [0, 1] (entries where p = 0 are irrelevant but must still lie in [0, 1]).

    Returns
    -------
    ResamplingResult
        ``(resampling, bias)``.
    """
    p, q = row_pair(draft, target)
    b = np.asarray(accept_probs, dtype=np.float64)
    if b.shape != p.shape:
        raise ValueError(f"accept_probs: expected shape {p.shape} (the vocabulary of draft and target), got {b.shape}")
    if not np.all(np.isfinite(b)) or np.any((b < 0) | (b > 1)):
        raise ValueError("accept_probs: expected acceptance probabilities in [0, 1] (finite)")
    a = p * b
    gap = np.maximum(q - a, 0.0)
    mass = gap.sum()
    P = gap / mass if mass > 0 else q.copy()
    return ResamplingResult(P, float(np.maximum(a - q, 0.0).sum()))


# ---------------------------------------------------- over-acceptance family
def _check_eps(eps) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"eps: expected a number >= 0, got {eps!r}") from None
    if math.isnan(e) or e < 0:
        raise ValueError(f"eps: expected an over-acceptance parameter >= 0 (inf allowed), got {eps!r}")
    return e


def _check_mode(mode: str) -> str:
    if mode not in ("opt", "uno"):
        raise ValueError(f"mode: expected 'opt' (Decoding-OPT, P = P*) or 'uno' (Decoding-UNO, P = q), got {mode!r}")
    return mode


def over_acceptance_kernel(draft_probs, target_probs, eps, mode: str = "opt"):
    """The step kernel of b_ε (eq. (9)) for rows (..., V), numpy or torch: (a, r, P).

    a = p b_ε = min(p, q + ε) is the accepted mass (..., V), r = (1 − Σ a)_+ the rejection
    probability (...), P the resampling row (..., V): Theorem 4's P* = Norm[(q − a)_+] for
    Decoding-OPT (equal to the SD residual Norm[(q − p)_+], and q where that is empty), q
    itself for Decoding-UNO. The output law is a + r P. ``eps`` is a scalar or broadcasts.
    """
    xp = namespace(draft_probs, target_probs)
    a = xp.minimum(draft_probs, target_probs + eps)
    r = xp.clip(1.0 - xp.sum(a, axis=-1), min=0.0)
    return a, r, (residual(target_probs, a) if mode == "opt" else target_probs)


def _over_acceptance(p, q, e, mode) -> dict:
    a, r, P = over_acceptance_kernel(p, q, e, mode)  # a = p b_eps; equal to p where p = 0
    b = np.divide(a, p, out=np.ones_like(p), where=p > 0)
    r = float(r)
    law = a + r * P
    return {"eps": e, "mode": mode, "rejection": r, "bias": float(total_variation(law, q)),
            "front": max(0.0, float(total_variation(p, q)) - r), "accept_probs": b, "resampling": P,
            "output_law": law}


def over_acceptance(draft, target, eps: float, mode: str = "opt") -> dict:
    r"""Exact rejection and bias of the over-acceptance verifier b_ε (eq. (9)).

    .. math::
        b_\varepsilon(x) = \min\{1, (q(x) + \varepsilon)/p(x)\},\quad
        r = 1 - \sum_x \min(p, q + \varepsilon) = \mathrm{TV} - \sum_x \min\{(p - q)_+, \varepsilon\}.

    ``mode="opt"`` (Decoding-OPT) resamples from Theorem 4's P* = Norm[(q − p b_ε)_+],
    which for this family is the standard SD residual Norm[(q − p)_+]; its bias is
    Σ min{(p − q)_+, ε} = TV − r, exactly on the front. ``mode="uno"`` (Decoding-UNO)
    resamples from q: bias TV(min(p, q + ε) + r q, q), above the front (already at ε = 0).

    Returns
    -------
    dict
        ``eps``, ``mode``, ``rejection``, ``bias``, ``front`` (= max{0, TV − r}) as floats;
        ``accept_probs`` (b_ε, 1 where p = 0), ``resampling`` (P) and ``output_law``
        (p b_ε + r P) as arrays of shape (V,).
    """
    p, q = row_pair(draft, target)
    return _over_acceptance(p, q, _check_eps(eps), _check_mode(mode))


def family_curve(draft, target, eps_grid, mode: str = "opt") -> dict:
    """:func:`over_acceptance` over a grid of ε: JSON-ready lists ``eps``, ``rejection``, ``bias``, ``front``."""
    p, q = row_pair(draft, target)
    mode = _check_mode(mode)
    grid = [_check_eps(e) for e in np.atleast_1d(np.asarray(eps_grid, dtype=np.float64))]
    rows = [_over_acceptance(p, q, e, mode) for e in grid]
    return {"mode": mode, **{k: [row[k] for row in rows] for k in ("eps", "rejection", "bias", "front")}}


# ----------------------------------------------------------- sequence level
def level_rows(source: Source, T: int) -> list[np.ndarray]:
    """rows[n-1][k] = law of token n after the k-th prefix of length n − 1 (lexicographic), shape (V**(n-1), V)."""
    out = []
    for n in range(1, T + 1):
        prefixes = source.enumerate(n - 1).tokens
        out.append(np.asarray(source.next_probs(prefixes), dtype=np.float64).reshape(-1, source.vocab_size))
    return out


def sequence_laws(draft: Source, target: Source, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """The draft's and the target's laws of x_{1:T}, shape (V**T,) each, lexicographic."""
    T = check_pair_horizon(draft, target, horizon)
    return draft.enumerate(T).probs, target.enumerate(T).probs


def sequence_expected_rejections_sd(draft: Source, target: Source, horizon: int) -> float:
    """E_SD[N_rej] of Theorem 1, eq. (1) (:func:`~otspec.theory.rejections.expected_rejections`)."""
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

    ``rule="mixture"``: at every prefix reject with probability θ TV_n(prefix) on the token
    front (a = min(p, q) + (1 − θ)(p − q)_+, s = θ (q − p)_+, output (1 − θ) p_n + θ q_n).
    ``rule="eps"``: Decoding-OPT with one ε at every prefix. The parameter is found by
    bisection so that the exact E[N_rej] (under the algorithm's own prefix law) equals R;
    budgets ≥ E_SD[N_rej] give SD (bias 0).

    Returns
    -------
    dict
        ``rejections``, ``bias``, ``parameter`` (θ or ε) lists.
    """
    T = check_pair_horizon(draft, target, horizon)
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
    for R in np.atleast_1d(np.asarray(rejections_grid, dtype=np.float64)):
        if not np.isfinite(R) or R < 0:
            raise ValueError(f"rejections_grid: expected budgets >= 0, got {R!r}")
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
