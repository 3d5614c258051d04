"""The Theorem-2 linear programme of Yin et al. (2024): least rejections of an unbiased verifier.

Spec ``yin_theory.md`` §5, eq. (3). The closed forms are in :mod:`otspec.theory.rejections`.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from ..checks import COUNT_CAP, capped_power, format_count
from ..errors import SizeLimitError, SolveError
from ..pairs import check_pair_horizon
from ..sources import EMPTY_PREFIX, Source, extend_prefixes
from .lp import LPBackend, solve_lp

__all__ = ["MAX_LP_VARIABLES", "min_rejection_lp"]

#: Largest number of LP variables :func:`min_rejection_lp` builds.
MAX_LP_VARIABLES = 200_000


def min_rejection_lp(draft: Source, target: Source, horizon: int, method: str = "highs") -> tuple[float, str]:
    """Minimum E[N_rej] over *unbiased* members of the family F, as a linear programme (Theorem 2 of [1], eq. (3)).

    Its value is Σ_{n=1..T} E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})] = E_SD[N_rej]: speculative
    decoding rejects least among the unbiased rejection-based verifiers.

    Derivation. A member's output law is ∏_n K_n(x_n|x_{1:n−1}) with the step kernel
    K_n = p_n b_n + r_n P_n (see :func:`template_law`). Unbiasedness ∏_n K_n = q on V^T implies,
    by marginalising the last positions and dividing, K_n(·|x_{1:n−1}) = q_n(·|x_{1:n−1}) at
    every prefix with q(x_{1:n−1}) > 0; in particular the law of the prefix at step n is q, so
    E[N_rej] = Σ_n Σ_{x_{1:n−1}} q(x_{1:n−1}) r_n(x_{1:n−1}). Variables, per position n, prefix
    x_{1:n−1} and token x, in *joint* mass (weighted by the prefix's probability q(x_{1:n−1})
    under the algorithm):

    * A_n(x_{1:n−1}, x) = q(x_{1:n−1}) p_n(x) b_n(x) — accepted mass, 0 ≤ A ≤ q(x_{1:n−1}) p_n(x);
    * R_n(x_{1:n−1}, x) = q(x_{1:n−1}) r_n P_n(x) ≥ 0 — resampled mass;
    * unbiasedness: A_n + R_n = q(x_{1:n}) for every x (this forces Σ_x R_n = q(prefix)·r_n and
      A ≤ q(x_{1:n}); any feasible (A, R) defines b = A/(q(prefix) p) and P = R/ΣR);
    * objective: minimise Σ_n Σ R_n = E[N_rej].

    Every feasible point is a member, so the optimum is the family's minimum; it is
    Σ_n E_{x_{1:n−1}~q}[1 − Σ_x min(p_n, q_n)] = Σ_n E[TV(p_n, q_n)], eq. (3), attained by SD.
    Solved by :func:`~otspec.solvers.lp.solve_lp` (``method`` "highs" or "cvxpy"). Prefixes of
    target probability 0 are included (their variables are forced to 0).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both horizons; the LP has 2 V Σ_{n<T} V**n variables.
    method : {"highs", "cvxpy"}, default "highs"
        The LP route of :func:`~otspec.solvers.lp.solve_lp`.

    Returns
    -------
    (value, status) : (float, str)
        The optimal E[N_rej] and the solver's message.

    Raises
    ------
    ValueError
        Bad instance/horizon; :class:`~otspec.errors.SizeLimitError` above
        :data:`MAX_LP_VARIABLES` variables.
    SolveError
        If the solver does not report an optimum.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    An IID pair, p = Ber(0.5) and q = Ber(0.25): every position has TV = 0.25, so two positions
    need at least 2 × 0.25 rejections on average.

    >>> from otspec.sources import bernoulli
    >>> value, status = min_rejection_lp(bernoulli(0.5), bernoulli(0.25), 2)
    >>> round(value, 9)
    0.5
    """
    T = check_pair_horizon(draft, target, horizon)
    V = target.vocab_size
    n_prefix = min(sum(capped_power(V, k) for k in range(min(T, 64))), COUNT_CAP)
    nvar = 2 * n_prefix * V
    if nvar > MAX_LP_VARIABLES:
        raise SizeLimitError(f"min_rejection_lp: {format_count(nvar)} variables exceed MAX_LP_VARIABLES = {MAX_LP_VARIABLES:,}; "
                             "the LP is meant for small chains (e.g. V <= 3, T <= 3)", size=nvar, limit=MAX_LP_VARIABLES)
    ub_a, rhs = [], []
    tokens, qmass = EMPTY_PREFIX, np.ones(1)
    for _ in range(T):
        p = np.asarray(draft.next_probs(tokens), dtype=np.float64)
        q = np.asarray(target.next_probs(tokens), dtype=np.float64)
        ub_a.append((qmass[:, None] * p).reshape(-1))
        child = (qmass[:, None] * q).reshape(-1)
        rhs.append(child)
        tokens, qmass = extend_prefixes(tokens, V), child
    ub_a, rhs = np.concatenate(ub_a), np.concatenate(rhs)
    k = rhs.size  # variables: A (k) then R (k)
    eye = sparse.identity(k, format="csr")
    c = np.concatenate([np.zeros(k), np.ones(k)])
    x, _, message, _ = solve_lp(c, A_eq=sparse.hstack([eye, eye]).tocsr(), b_eq=rhs,
                                bounds=list(zip(np.zeros(2 * k), np.concatenate([ub_a, np.full(k, None)]), strict=True)),
                                backend=LPBackend(method), what="min_rejection_lp linear programme", error=SolveError)
    return float(c @ np.maximum(x, 0.0)), message
