r"""Rejections versus distribution bias at one position: the token-level LP (Yin et al. 2024, Theorem 5).

Spec ``yin_theory.md`` §7. A rejection-based verifier draws x̃ ~ p (the **draft**), accepts it
with probability b(x̃) and otherwise resamples from P; with accepted mass a = p b, rejection
probability r = 1 − Σ a and resampled mass s = r P its output law is a + s, and its bias is
TV(a + s, q) against the **target** q. :func:`min_bias` minimises that bias at a given r; the
closed form max{0, TV(p, q) − r} is :func:`otspec.theory.pareto.pareto_front`. The sequence-level
programmes are in :mod:`otspec.solvers.pareto`, which re-exports everything here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..distributions import row_pair, total_variation
from ..errors import SizeLimitError, SolveError
from ..theory.pareto import check_fraction
from .lp import LPBackend, check_method, solve_lp

__all__ = ["MAX_TOKEN_LP_VOCAB", "PARETO_RESIDUAL_TOL", "ParetoResult", "ParetoSolveError", "min_bias"]

#: Largest vocabulary of the token-level LP :func:`min_bias` (3V variables): V = 5,000 takes 0.3 s,
#: V = 20,000 about 5 s on 2 cores; the front itself is the closed form max{0, TV − r}.
MAX_TOKEN_LP_VOCAB = 10_000
#: Largest constraint residual accepted from a solver's solution (HiGHS; cvxpy gets 1e3 times more).
PARETO_RESIDUAL_TOL = 1e-8


class ParetoSolveError(SolveError):
    """A solver failed, or returned a point that violates the constraints."""


@dataclass(frozen=True)
class ParetoResult:
    """Minimal bias at one rejection probability (token level, :func:`min_bias`).

    Attributes
    ----------
    value : float
        min TV(a + s, q), recomputed from the returned a and s.
    rejection : float
        r = Σ s = 1 − Σ a.
    accepted : ndarray, shape (V,)
        a(x) = p(x) b(x) ∈ [0, p(x)].
    resampled : ndarray, shape (V,)
        s(x) = r P(x) ≥ 0.
    accept_probs : ndarray, shape (V,)
        b = a / p where p > 0, and 0 where p = 0 (never drafted).
    output_law : ndarray, shape (V,)
        a + s.
    status : str
        ``"optimal"`` or cvxpy's ``"optimal_inaccurate"``.
    message : str
    method : str
        ``"highs"`` or ``"cvxpy:<SOLVER>"``.
    """

    value: float
    rejection: float
    accepted: np.ndarray
    resampled: np.ndarray
    accept_probs: np.ndarray
    output_law: np.ndarray
    status: str
    message: str
    method: str


def min_bias(draft, target, rejection: float, method: str = "highs", *, solver: str | None = None) -> ParetoResult:
    r"""Least bias TV(P_A, q) over verifiers that reject with probability exactly r: Theorem 5 of [1] as an LP.

    Its value is the Pareto front max{0, TV(p, q) − r}; the LP also returns a verifier on it.

    .. math::
        \min_{a, s, t \in \mathbb R^V}\ \tfrac12 \sum_x t(x) \quad \text{s.t.} \quad
        0 \le a \le p,\ \ s \ge 0,\ \ \sum_x a(x) = 1 - r,\ \ \sum_x s(x) = r,\ \
        -t \le a + s - q \le t.

    a = p b is the accepted mass, s = r P the resampled mass, a + s = P_A the output law.
    Always feasible for r ∈ [0, 1] (Σ p = 1 ≥ 1 − r). The value equals
    :func:`pareto_front` (Theorem 5): at most Σ min(p, q) = 1 − TV of the accepted mass
    fits under q, so Σ (a + s − q)_+ ≥ Σ (a − q)_+ ≥ (1 − r) − (1 − TV).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q (validated with :func:`~otspec.distributions.validate_probs`).
    rejection : float
        r in [0, 1].
    method : {"highs", "cvxpy"}, default "highs"
        ``"highs"``: ``scipy.optimize.linprog(method="highs-ds")`` with presolve off.
        ``"cvxpy"``: the same LP through cvxpy (default solver HIGHS with presolve off, else CLARABEL).
    solver : str, optional
        cvxpy solver name; default None.

    Returns
    -------
    ParetoResult
        ``value`` (the least bias), ``rejection`` and the optimal verifier: ``accepted``,
        ``resampled``, ``accept_probs`` and ``output_law``, each of shape (V,).

    Raises
    ------
    ValueError
        Invalid rows, vocabulary mismatch, r outside [0, 1], unknown method;
        :class:`~otspec.errors.SizeLimitError` for V above :data:`MAX_TOKEN_LP_VOCAB`.
    ParetoSolveError
        The solver fails, or its a, s violate the constraints by more than
        :data:`PARETO_RESIDUAL_TOL` (×1e3 for cvxpy).

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    p = (0.5, 0.5), q = (0.75, 0.25), TV(p, q) = 0.25: rejecting half as often as speculative
    decoding leaves half its bias, and rejecting as often (r = TV) leaves none.

    >>> round(min_bias([0.5, 0.5], [0.75, 0.25], 0.125).value, 9)  # max(0, 0.25 - 0.125)
    0.125
    >>> round(min_bias([0.5, 0.5], [0.75, 0.25], 0.25).value, 9)
    0.0
    """
    p, q = row_pair(draft, target)
    r = check_fraction(rejection, "rejection")
    check_method(method)
    V = p.size
    if V > MAX_TOKEN_LP_VOCAB:
        raise SizeLimitError(f"the token-level Pareto LP for V = {V:,} tokens is above MAX_TOKEN_LP_VOCAB = "
                             f"{MAX_TOKEN_LP_VOCAB:,}; the front max(0, TV - r) is pareto_front", size=V,
                             limit=MAX_TOKEN_LP_VOCAB)
    eye = sp.identity(V, format="csr")
    zero_row = sp.csr_array((1, V))
    ones = sp.csr_array(np.ones((1, V)))
    c = np.concatenate([np.zeros(2 * V), 0.5 * np.ones(V)])
    # a + s - t <= q and -a - s - t <= -q
    A_ub = sp.vstack([sp.hstack([eye, eye, -eye]), sp.hstack([-eye, -eye, -eye])]).tocsr()
    b_ub = np.concatenate([q, -q])
    A_eq = sp.vstack([sp.hstack([ones, zero_row, zero_row]), sp.hstack([zero_row, ones, zero_row])]).tocsr()
    b_eq = np.array([1.0 - r, r])
    bounds = [(0.0, float(pi)) for pi in p] + [(0.0, None)] * (2 * V)
    x, status, message, label = solve_lp(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                                         backend=LPBackend(method, solver), error=ParetoSolveError,
                                         what=f"token-level Pareto LP (V={V}, r={r:g})")
    a = np.clip(x[:V], 0.0, p)
    s = np.maximum(x[V:2 * V], 0.0)
    tol = PARETO_RESIDUAL_TOL * (1.0 if method == "highs" else 1e3)
    resid = max(abs(a.sum() - (1.0 - r)), abs(s.sum() - r), float(np.abs(x[:V] - a).max()),
                float(np.abs(x[V:2 * V] - s).max()))
    if not np.isfinite(resid) or resid > tol:
        raise ParetoSolveError(f"{label} reported success ({message}) but its solution misses the constraints by "
                               f"{resid:.3g} > {tol:g}")
    law = a + s
    b = np.divide(a, p, out=np.zeros(V), where=p > 0)
    return ParetoResult(float(total_variation(law, q)), float(s.sum()), a, s, np.minimum(b, 1.0), law,
                        status, message, label)
