r"""Block-level optimal transport between the draft's and the target's block laws.

Spec ``token_and_block_verification.md`` §4–5. For blocks of L tokens over a
vocabulary Ω (V = |Ω|, N = V**L blocks), β(x^L, y^L) is the length of the
longest common prefix, and the optimal coupling solves (eqs. (6)–(7))

.. math::
    \max_{\pi \ge 0} \sum_{x^L, y^L} \pi(x^L, y^L)\, \beta(x^L, y^L)
    \quad \text{s.t.} \quad \sum_{y^L} \pi(x^L, y^L) = p(x^L), \quad
    \sum_{x^L} \pi(x^L, y^L) = q(y^L),

with p the draft's (rows) and q the target's (columns) block law; equivalently
minimise the transport cost L − β. Theorem 1 (eq. (8)) gives the optimum

.. math::
    \max_\pi E_\pi[\beta] = \sum_{\ell=1}^{L} \sum_{x^\ell \in \Omega^\ell} \min\{p(x^\ell), q(x^\ell)\}.

Three routes, one :class:`BlockOTResult`:

* :func:`solve_block_lp` / :func:`solve_block_lp_laws` with ``method="highs"`` —
  the LP with N² variables and a sparse 2N × N² constraint matrix, solved by
  HiGHS dual simplex (presolve off, tight tolerances) through ``scipy.optimize.linprog``.
* the same with ``method="cvxpy"`` — a second formulation through cvxpy.
* :func:`solve_block_tree` / :func:`solve_block_tree_laws` — the exact greedy
  solution on the prefix tree, O(N L) work and an O(N)-entry sparse plan, for
  millions of blocks. :func:`block_ot_value` returns only its value (eq. (8)).

Block laws are vectors of length V**L in lexicographic order (token 0 first),
as :meth:`otspec.sources.Source.enumerate` returns them, so block index k has
base-V digits x_1 … x_L (most significant first). Their checks, β, E_π[β], the value alone
and :class:`BlockOTResult` live in :mod:`otspec.solvers.block_prefix`, the tree route in
:mod:`otspec.solvers.block_tree`; both are re-exported here.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..checks import format_count
from ..errors import SizeLimitError, SolveError
from ..sources import Source
from .block_prefix import (
    BLOCK_LAW_TOL,
    BlockOTResult,
    block_laws,
    block_ot_value,
    common_prefix_length,
    plan_expected_length,
    validated_block_laws,
)
from .block_tree import solve_block_tree, solve_block_tree_laws
from .lp import LPBackend, check_method, cvxpy_settings, solve_lp

#: Most LP variables (V**(2L)) the HiGHS route accepts: up to 3**6 = 729 blocks. Measured on
#: a 2-core machine (``benchmarks/bench_block_ot.py``, random Markov pairs): 256 blocks
#: (65,536 variables) ≈ 0.2 s, 512 blocks ≈ 1.3–2 s, 729 blocks ≈ 3.5–7 s, while 1024
#: blocks (1,048,576 variables, refused) take 13–15 s. The tree route has no such limit.
MAX_LP_VARIABLES = 600_000
#: Most variables the cvxpy route accepts: 512 blocks take ≈ 2 s with HiGHS but
#: ≈ 70 s with CLARABEL through cvxpy.
MAX_CVXPY_VARIABLES = 2**18
#: Largest marginal residual accepted from the HiGHS and cvxpy solutions.
HIGHS_RESIDUAL_TOL = 1e-8
CVXPY_RESIDUAL_TOL = 1e-6

__all__ = [
    "BLOCK_LAW_TOL",
    "CVXPY_RESIDUAL_TOL",
    "HIGHS_RESIDUAL_TOL",
    "MAX_CVXPY_VARIABLES",
    "MAX_LP_VARIABLES",
    "BlockOTResult",
    "BlockOTSolveError",
    "block_laws",
    "block_ot_value",
    "common_prefix_length",
    "plan_expected_length",
    "solve_block_lp",
    "solve_block_lp_laws",
    "solve_block_tree",
    "solve_block_tree_laws",
]


class BlockOTSolveError(SolveError):
    """An LP solver failed or returned a plan that violates the marginals."""


# ------------------------------------------------------------------ LP routes
def _lp_data(n: int, V: int, L: int) -> tuple[np.ndarray, sp.csc_array]:
    """β of every pair (flattened row-major, π[x, y] at x*n + y) and the 2n × n² marginal matrix."""
    k = np.arange(n * n, dtype=np.int64)
    x, y = k // n, k % n
    beta = common_prefix_length(x, y, V, L).astype(np.float64)
    # column k has a 1 in row x (draft marginal) and in row n + y (target marginal)
    indices = np.empty(2 * n * n, dtype=np.int64)
    indices[0::2], indices[1::2] = x, n + y
    indptr = np.arange(0, 2 * n * n + 1, 2, dtype=np.int64)
    return beta, sp.csc_array((np.ones(2 * n * n), indices, indptr), shape=(2 * n, n * n))


#: Both LP routes use :func:`~otspec.errors.highs_options`: presolve declares some feasible
#: block LPs infeasible (masses near 1e-8..1e-10; e.g. ``random_markov(2, 2.0, seed=3,
#: sparsity=0.2)`` at L = 5), and the default feasibility tolerance 1e-7 moves the value by up
#: to ~1e-7; 1e-10 is the smallest HiGHS accepts.


def _checked_plan(x: np.ndarray, p: np.ndarray, q: np.ndarray, tol: float, who: str, message: str):
    n = p.size
    x = np.maximum(np.asarray(x, dtype=np.float64).reshape(n, n), 0.0)
    resid = max(float(np.abs(x.sum(axis=1) - p).max()), float(np.abs(x.sum(axis=0) - q).max()))
    if not np.isfinite(resid) or resid > tol:
        raise BlockOTSolveError(f"{who} reported success ({message}) but its plan misses the marginals by "
                                f"{resid:.3g} > {tol:g}; refusing to return it")
    return x


def solve_block_lp_laws(draft_law, target_law, vocab_size: int, draft_length: int, method: str = "highs",
                        *, solver: str | None = None, solver_options: dict | None = None) -> BlockOTResult:
    r"""Solve the block OT linear program (6)–(7) of [1] for two block laws, by a general LP solver.

    max over π ≥ 0 of Σ_{x,y} β(x, y) π(x, y) subject to Σ_y π(x, y) = p(x) and
    Σ_x π(x, y) = q(y), over all N = V**L draft blocks x and target blocks y; β is the common
    prefix length. Its value is eq. (8), Σ_ℓ Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)) (Theorem 1 of [1]);
    this route checks that theorem and returns one optimal plan.

    .. math::
        \max_{\pi \in \mathbb{R}_{\ge 0}^{N \times N}} \sum_{x,y} \beta(x, y)\, \pi(x, y)
        \quad \text{s.t.} \quad \pi \mathbf 1 = p, \quad \pi^\top \mathbf 1 = q, \qquad N = V^L.

    Parameters
    ----------
    draft_law, target_law : array_like, shape (V**L,)
        p and q, lexicographic; finite, non-negative, each summing to 1 within
        :data:`BLOCK_LAW_TOL`. q is rescaled to p's total before solving.
    vocab_size, draft_length : int
        V and L.
    method : {"highs", "cvxpy"}, default "highs"
        ``"highs"``: ``scipy.optimize.linprog`` with HiGHS dual simplex [2], presolve
        off (it declares some feasible instances with masses near 1e-8 infeasible)
        and feasibility tolerances 1e-10 (the default 1e-7 lets the value drift by ~1e-7);
        at most :data:`MAX_LP_VARIABLES` variables. ``"cvxpy"``: the same LP
        written in cvxpy; at most :data:`MAX_CVXPY_VARIABLES` variables.
    solver : str, optional
        cvxpy solver name; default None: HIGHS if installed (with presolve off and tolerances
        1e-10, as above), else CLARABEL, else cvxpy's choice.
    solver_options : dict, optional
        Extra keyword arguments for ``Problem.solve`` (cvxpy) or ``linprog``'s options (highs).

    Returns
    -------
    BlockOTResult
        ``value`` = Σ β π of the returned plan; ``plan`` a sparse (V**L, V**L) view of the
        solution (rows draft blocks, columns target blocks); ``n_variables`` = V**(2L).

    Raises
    ------
    ValueError
        On invalid laws or sizes; :class:`~otspec.errors.SizeLimitError` (a ValueError) for more
        variables than the method's limit.
    BlockOTSolveError
        If the solver reports no optimum (cvxpy's ``optimal_inaccurate`` is
        accepted, and shown in ``status``), or its plan misses the marginals
        by more than :data:`HIGHS_RESIDUAL_TOL` / :data:`CVXPY_RESIDUAL_TOL`.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.
    .. [2] Q. Huangfu, J. A. J. Hall, "Parallelizing the dual revised simplex method",
       Mathematical Programming Computation 10(1):119–142, 2018.

    Examples
    --------
    For L = 1 the LP is the token-level maximal coupling (4 variables here):

    >>> res = solve_block_lp_laws([0.5, 0.5], [0.75, 0.25], 2, 1)
    >>> round(res.value, 9), res.method  # 1 - TV(p, q) = 1 - 0.25
    (0.75, 'highs')

    Ber(0.25) against Ber(0.75) blocks of length 2 (16 variables); eq. (8) gives 0.5 + 0.5:

    >>> p = [0.5625, 0.1875, 0.1875, 0.0625]
    >>> q = [0.0625, 0.1875, 0.1875, 0.5625]
    >>> round(solve_block_lp_laws(p, q, 2, 2).value, 9)
    1.0
    """
    p, q, V, L, n = validated_block_laws(draft_law, target_law, vocab_size, draft_length)
    check_method(method)
    limit = MAX_LP_VARIABLES if method == "highs" else MAX_CVXPY_VARIABLES
    if n * n > limit:
        raise SizeLimitError(f"the block LP for vocab_size={V}, draft_length={L} has {V}^{2 * L} = {format_count(n * n)} variables, "
                             f"above the {method} limit of {limit:,}; use solve_block_tree (exact, O(V^L) plan) instead",
                             size=n * n, limit=limit)
    beta, A = _lp_data(n, V, L)
    if method == "highs":
        x, status, message, label = solve_lp(-beta, A_eq=A, b_eq=np.concatenate([p, q]),
                                             backend=LPBackend(options=solver_options),
                                             what="block LP", error=BlockOTSolveError)
        x = _checked_plan(x, p, q, HIGHS_RESIDUAL_TOL, "HiGHS", message)
    else:
        import cvxpy as cp  # imported lazily: cvxpy takes a second to import

        solver, options = cvxpy_settings(solver)
        P = cp.Variable((n, n), nonneg=True)
        problem = cp.Problem(cp.Maximize(cp.sum(cp.multiply(beta.reshape(n, n), P))),
                             [cp.sum(P, axis=1) == p, cp.sum(P, axis=0) == q])
        options.update(solver_options or {})
        try:
            problem.solve(solver=solver, **options)
        except cp.error.SolverError as exc:
            raise BlockOTSolveError(f"cvxpy solver {solver} failed on the block LP: {exc}") from exc
        label = f"cvxpy:{problem.solver_stats.solver_name}"
        if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or P.value is None:
            raise BlockOTSolveError(f"{label} did not solve the block LP: status {problem.status!r}")
        status = str(problem.status)
        message = f"cvxpy status {status} after {problem.solver_stats.num_iters} iterations"
        x = _checked_plan(P.value, p, q, CVXPY_RESIDUAL_TOL, label, message)
    value = float(np.dot(beta, x.reshape(-1)))
    plan = sp.coo_array(x)  # keeps only the non-zero entries
    return BlockOTResult(value, plan, status, str(message), label, n * n)


def solve_block_lp(draft: Source, target: Source, draft_length: int, method: str = "highs",
                   *, solver: str | None = None, solver_options: dict | None = None) -> BlockOTResult:
    """The block OT linear program (6)–(7) of [1] for two sources: :func:`solve_block_lp_laws` on their block laws.

    The marginals are the laws of the first L tokens, p(x^L) = Π_i p(x_i | x^{i−1}) and the same
    for q (:func:`block_laws`); the optimum is eq. (8), Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    draft_length : int
        L >= 1, within both horizons; V**(2L) must stay within the method's variable limit.
    method, solver, solver_options : {"highs", "cvxpy"}, str or None, dict or None
        As in :func:`solve_block_lp_laws` (defaults "highs", None, None).

    Returns
    -------
    BlockOTResult
        ``value`` = E_π[β] of the optimal plan π, a sparse matrix of shape (V**L, V**L).

    Raises
    ------
    ValueError, BlockOTSolveError
        As :func:`solve_block_lp_laws`, and on a vocabulary mismatch.

    References
    ----------
    .. [1] Z. Sun, J. H. Ro, A. Beirami, A. T. Suresh, "Optimal Block-Level Draft Verification for
       Accelerating Speculative Decoding", arXiv:2403.10444v1, 2024.

    Examples
    --------
    Bernoulli sources (P(token 1) = 0.25 and 0.75), L = 2: eq. (11b) gives
    (1 − TV(Bin(1, ·))) + (1 − TV(Bin(2, ·))) = 0.5 + 0.5.

    >>> from otspec.sources import bernoulli
    >>> round(solve_block_lp(bernoulli(0.25), bernoulli(0.75), 2).value, 9)
    1.0
    """
    p, q = block_laws(draft, target, draft_length)
    return solve_block_lp_laws(p, q, draft.vocab_size, draft_length, method,
                               solver=solver, solver_options=solver_options)
