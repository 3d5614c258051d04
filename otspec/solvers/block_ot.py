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
base-V digits x_1 … x_L (most significant first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..checks import MAX_DRAFT_LENGTH, capped_power, check_size, format_count
from ..errors import SizeLimitError, SolveError
from ..pairs import check_pair
from ..sources import Source
from .lp import check_method, cvxpy_settings, solve_lp

#: Most LP variables (V**(2L)) the HiGHS route accepts: up to 3**6 = 729 blocks. Measured on
#: a 2-core machine (``benchmarks/bench_block_ot.py``, random Markov pairs): 256 blocks
#: (65,536 variables) ≈ 0.2 s, 512 blocks ≈ 1.3–2 s, 729 blocks ≈ 3.5–7 s, while 1024
#: blocks (1,048,576 variables, refused) take 13–15 s. The tree route has no such limit.
MAX_LP_VARIABLES = 600_000
#: Most variables the cvxpy route accepts: 512 blocks take ≈ 2 s with HiGHS but
#: ≈ 70 s with CLARABEL through cvxpy.
MAX_CVXPY_VARIABLES = 2**18
#: Largest accepted |sum(law) − 1| of a block law.
BLOCK_LAW_TOL = 1e-9
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


@dataclass(frozen=True)
class BlockOTResult:
    """Optimal block coupling.

    Attributes
    ----------
    value : float
        Maximal expected accepted length E_π[β] (not the cost L − β).
    plan : scipy.sparse.coo_array, shape (V**L, V**L), or None
        π(x^L, y^L): rows are draft blocks, columns target blocks, lexicographic.
        ``None`` when the tree route was asked for the value only.
    status : str
        ``"optimal"``, or ``"optimal_inaccurate"`` when a cvxpy solver says so
        (its plan still met the marginals to :data:`CVXPY_RESIDUAL_TOL`; the
        value may be off by ~1e-7). Failures raise :class:`BlockOTSolveError`.
    message : str
        The solver's message.
    method : str
        ``"highs"``, ``"cvxpy:<SOLVER>"`` or ``"tree"``.
    n_variables : int
        LP routes: V**(2L) coupling variables. Tree route: Σ_{ℓ=1..L} V**ℓ
        prefix-tree nodes, the number of minima in eq. (8).
    """

    value: float
    plan: sp.coo_array | None
    status: str
    message: str
    method: str
    n_variables: int


# ------------------------------------------------------------------ checks
def _check_shape(vocab_size, draft_length) -> tuple[int, int, int]:
    V = check_size(vocab_size, "vocab_size")
    L = check_size(draft_length, "draft_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    return V, L, capped_power(V, L)  # a count beyond every limit stays a small integer


def _check_law(law, name: str, n: int, V: int, L: int) -> np.ndarray:
    arr = np.array(law, dtype=np.float64)  # a copy: callers' arrays are never modified
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected a block law of shape ({n},) = (vocab_size**draft_length,) "
                         f"for vocab_size={V}, draft_length={L}; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite entries (first at index "
                         f"{int(np.flatnonzero(~np.isfinite(arr))[0])}); expected finite probabilities")
    if np.any(arr < 0):
        k = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name}: negative probability {float(arr[k])!r} at index {k}; expected entries >= 0")
    total = float(arr.sum())
    if abs(total - 1.0) > BLOCK_LAW_TOL:
        raise ValueError(f"{name}: sums to {total!r}; expected a probability vector summing to 1 "
                         f"(tolerance {BLOCK_LAW_TOL:g})")
    return arr


def _validated(draft_law, target_law, vocab_size, draft_length):
    """(p, q, V, L, N) with q rescaled to p's total, so that the LP is exactly feasible."""
    V, L, n = _check_shape(vocab_size, draft_length)
    p = _check_law(draft_law, "draft_law", n, V, L)
    q = _check_law(target_law, "target_law", n, V, L)
    q *= p.sum() / q.sum()
    return p, q, V, L, n


def block_laws(draft: Source, target: Source, draft_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Both models' laws of their first ``draft_length`` tokens, shape (V**L,) each.

    Raises
    ------
    ValueError
        On a vocabulary mismatch, or (from :meth:`~otspec.sources.Source.enumerate`)
        when V**L exceeds :data:`~otspec.sources.MAX_ENUMERATION` or a horizon.
    """
    check_pair(draft, target)
    _check_shape(draft.vocab_size, draft_length)
    return draft.enumerate(draft_length).probs, target.enumerate(draft_length).probs


# --------------------------------------------------------------- evaluation
def common_prefix_length(draft_blocks, target_blocks, vocab_size: int, draft_length: int) -> np.ndarray:
    """β of block pairs given by their lexicographic indices (broadcast together).

    Two blocks agree on their first ℓ tokens iff their indices agree after integer
    division by V**(L−ℓ); β counts the ℓ = 1..L for which they do.

    Parameters
    ----------
    draft_blocks, target_blocks : int array_like, broadcastable shapes
        Block indices in [0, V**L).

    Returns
    -------
    ndarray of int64, the broadcast shape
    """
    V, L, _ = _check_shape(vocab_size, draft_length)
    x, y = np.broadcast_arrays(np.asarray(draft_blocks, dtype=np.int64), np.asarray(target_blocks, dtype=np.int64))
    beta = np.zeros(x.shape, dtype=np.int64)
    for ell in range(1, L + 1):  # L passes over the arrays, none over their entries
        scale = V ** (L - ell)
        beta += (x // scale) == (y // scale)
    return beta


def plan_expected_length(plan, vocab_size: int, draft_length: int) -> float:
    """E_π[β] = Σ π(x, y) β(x, y) of any plan.

    Parameters
    ----------
    plan : scipy sparse matrix/array or array_like, shape (V**L, V**L)
        Rows are draft blocks, columns target blocks, lexicographic.
    """
    V, L, n = _check_shape(vocab_size, draft_length)
    coo = sp.coo_array(plan)
    if coo.shape != (n, n):
        raise ValueError(f"plan: expected shape ({n}, {n}) for vocab_size={V}, draft_length={L}; got {coo.shape}")
    beta = common_prefix_length(coo.row, coo.col, V, L)
    return float(np.dot(coo.data, beta))


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
    r"""Solve the block OT linear program (6)–(7) for two block laws.

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
    method : {"highs", "cvxpy"}
        ``"highs"``: ``scipy.optimize.linprog`` with HiGHS dual simplex, presolve
        off (it declares some feasible instances with masses near 1e-8 infeasible)
        and feasibility tolerances 1e-10 (the default 1e-7 lets the value drift by ~1e-7);
        at most :data:`MAX_LP_VARIABLES` variables. ``"cvxpy"``: the same LP
        written in cvxpy; at most :data:`MAX_CVXPY_VARIABLES` variables.
    solver : str, optional
        cvxpy solver name; default HIGHS if installed (with presolve off and tolerances
        1e-10, as above), else CLARABEL, else cvxpy's choice.
    solver_options : dict, optional
        Extra keyword arguments for ``Problem.solve`` (cvxpy) or ``linprog``'s options (highs).

    Returns
    -------
    BlockOTResult
        ``value`` = Σ β π of the returned plan (a sparse view of the solution).

    Raises
    ------
    ValueError
        On invalid laws or sizes, or more variables than the method's limit.
    BlockOTSolveError
        If the solver reports no optimum (cvxpy's ``optimal_inaccurate`` is
        accepted, and shown in ``status``), or its plan misses the marginals
        by more than :data:`HIGHS_RESIDUAL_TOL` / :data:`CVXPY_RESIDUAL_TOL`.
    """
    p, q, V, L, n = _validated(draft_law, target_law, vocab_size, draft_length)
    check_method(method)
    limit = MAX_LP_VARIABLES if method == "highs" else MAX_CVXPY_VARIABLES
    if n * n > limit:
        raise SizeLimitError(f"the block LP for vocab_size={V}, draft_length={L} has {V}^{2 * L} = {format_count(n * n)} variables, "
                             f"above the {method} limit of {limit:,}; use solve_block_tree (exact, O(V^L) plan) instead",
                             size=n * n, limit=limit)
    beta, A = _lp_data(n, V, L)
    if method == "highs":
        x, status, message, label = solve_lp(-beta, A_eq=A, b_eq=np.concatenate([p, q]), options=solver_options,
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
    """:func:`solve_block_lp_laws` on the sources' block laws (see :func:`block_laws`)."""
    p, q = block_laws(draft, target, draft_length)
    return solve_block_lp_laws(p, q, draft.vocab_size, draft_length, method,
                               solver=solver, solver_options=solver_options)


# ---------------------------------------------------------------- tree route
def _tree_value(p: np.ndarray, q: np.ndarray, V: int, L: int) -> float:
    total = 0.0
    for _ in range(L):  # depth L, L-1, ..., 1: prefix laws by summing the V children of each node
        total += float(np.minimum(p, q).sum())
        p, q = p.reshape(-1, V).sum(axis=1), q.reshape(-1, V).sum(axis=1)
    return total


def block_ot_value(draft_law, target_law, vocab_size: int, draft_length: int) -> float:
    r"""Eq. (8) from two block laws: Σ_{ℓ=1..L} Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ)), in O(V^L) work.

    Parameters as in :func:`solve_block_tree_laws`; no size limit beyond memory.
    """
    p, q, V, L, _ = _validated(draft_law, target_law, vocab_size, draft_length)
    return _tree_value(p, q, V, L)


def _run_cumsum(node: np.ndarray, mass: np.ndarray, n_nodes: int):
    """Within runs of equal (sorted) ``node``: exclusive and inclusive cumulative sums, and run totals."""
    if node.size == 0:
        return np.zeros(0), np.zeros(0), np.zeros(n_nodes)
    cs = np.cumsum(mass)
    start = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    run_len = np.diff(np.r_[start, node.size])
    base = np.where(start > 0, cs[start - 1], 0.0)
    end = cs - np.repeat(base, run_len)  # monotone within a run (cs is, the shift is constant)
    begin = np.empty_like(end)
    begin[1:] = end[:-1]
    begin[start] = 0.0
    total = np.zeros(n_nodes)
    last = start + run_len - 1
    total[node[last]] = end[last]  # exactly the last inclusive sum, so capping at min(D, T) is exact
    return begin, end, total


def _match_level(d_node, d_mass, t_node, t_mass, n_nodes):
    """North-west-corner matching inside every node of one level at once.

    Returns (draft item idx, target item idx, mass) of the matched pieces and
    the remaining draft and target masses (0 for items fully used).
    """
    d_begin, d_end, D = _run_cumsum(d_node, d_mass, n_nodes)
    t_begin, t_end, T = _run_cumsum(t_node, t_mass, n_nodes)
    M = np.minimum(D, T)  # mass matched in each node
    hi = np.cumsum(M)  # node k occupies [lo[k], hi[k]] = [hi[k-1], hi[k]] on one global axis,
    lo = np.r_[0.0, hi[:-1]]  # so the positions below are sorted across nodes as well as inside them

    def lay_out(node, mass, begin, end):
        m = M[node]
        on = np.flatnonzero(begin < m)  # items with some mass inside their node's matched amount
        full = end[on] >= m[on]  # the node's last matched item ends exactly at hi[node]
        pos = np.where(full, hi[node[on]], np.minimum(lo[node[on]] + end[on], hi[node[on]]))
        # used up if it ends inside the matched amount, else it keeps what lies beyond m
        remaining = np.where(end <= m, 0.0, mass - np.maximum(m - begin, 0.0))
        return on, pos, remaining

    d_on, d_pos, d_rem = lay_out(d_node, d_mass, d_begin, d_end)
    t_on, t_pos, t_rem = lay_out(t_node, t_mass, t_begin, t_end)
    if d_on.size == 0 or t_on.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), d_rem, t_rem
    # both sides tile [0, hi[-1]] in node order; cut at every end of either side
    cuts = np.sort(np.concatenate([d_pos, t_pos]), kind="stable")
    pieces = np.diff(cuts, prepend=0.0)
    keep = pieces > 0
    cuts = cuts[keep]
    i = np.minimum(np.searchsorted(d_pos, cuts, side="left"), d_pos.size - 1)
    j = np.minimum(np.searchsorted(t_pos, cuts, side="left"), t_pos.size - 1)
    return d_on[i], t_on[j], pieces[keep], d_rem, t_rem


def solve_block_tree_laws(draft_law, target_law, vocab_size: int, draft_length: int,
                          *, return_plan: bool = True) -> BlockOTResult:
    r"""Exact block OT by greedy matching on the prefix tree.

    The cost L − β(x, y) is a tree metric: on the prefix tree (root = empty
    prefix, node x^ℓ at depth ℓ, leaves = blocks) it is half the path length
    between two leaves, L − depth of their deepest common ancestor. The greedy
    bottom-up matching is optimal:

    1. at every leaf match min(p, q) with itself (β = L); pass the draft
       surplus (p − q)_+ and the target surplus (q − p)_+ up;
    2. at a node x^ℓ (ℓ = L−1, …, 0) match as much of the draft mass passed up
       by its children as possible with their target mass (β = ℓ: the pieces
       come from different children, since each child passes up one side only),
       and pass the rest (again one-sided) up.

    *Why it attains eq. (8).* By induction from the leaves, the mass matched
    inside the subtree of x^ℓ is min(p(x^ℓ), q(x^ℓ)) and the rest leaves it
    one-sided: with children c, Σ_c min(p_c, q_c) + min(Σ_c (p_c − q_c)_+,
    Σ_c (q_c − p_c)_+) = min(Σ_c p_c, Σ_c q_c). Pairs matched inside that subtree
    are exactly those with X^ℓ = Y^ℓ = x^ℓ, so P(β ≥ ℓ) = Σ_{x^ℓ} min(p(x^ℓ), q(x^ℓ))
    and E[β] = Σ_{ℓ≥1} P(β ≥ ℓ) is eq. (8). *Why nothing does better.* For any
    coupling P(X^ℓ = Y^ℓ = x^ℓ) ≤ min(p(x^ℓ), q(x^ℓ)), so every term P(β ≥ ℓ)
    is bounded by the same sum (v1 Lemma 1); greedy meets all L bounds at once.
    At the root all mass is matched (the totals agree), so π is a coupling.

    Implementation: the value is eq. (8) from prefix laws (V children summed
    per level). The plan is built level by level in one numpy pass per level:
    inside every node the leftover draft and target pieces are matched
    north-west-corner style, by laying all nodes' matched amounts end to end on
    one axis and cutting it at every cumulative end of either side; pieces
    partially used keep their remainder, and node ids are divided by V.

    Parameters
    ----------
    draft_law, target_law : array_like, shape (V**L,)
        p and q, lexicographic; finite, non-negative, each summing to 1 within
        :data:`BLOCK_LAW_TOL` (q is rescaled to p's total).
    vocab_size, draft_length : int
        V and L.
    return_plan : bool
        Build the plan (O(V^L L log V^L) time) or only the value (O(V^L)).

    Returns
    -------
    BlockOTResult
        ``plan`` has at most 2·V**L non-zeros (one diagonal entry per block, and
        each off-diagonal piece ends by using up a leftover); marginals hold up
        to a few ulps of 1, and E_plan[β] = ``value`` to the same accuracy.
    """
    p, q, V, L, n = _validated(draft_law, target_law, vocab_size, draft_length)
    value = _tree_value(p, q, V, L)
    n_nodes = sum(V**ell for ell in range(1, L + 1))
    message = "greedy matching on the prefix tree (exact for the tree metric L - beta)"
    if not return_plan:
        return BlockOTResult(value, None, "optimal", message, "tree", n_nodes)
    diag = np.minimum(p, q)
    leaves = np.flatnonzero(diag > 0)
    rows, cols, data = [leaves], [leaves], [diag[leaves]]
    d_leaf = np.flatnonzero(p > q)
    t_leaf = np.flatnonzero(q > p)
    d_mass, t_mass = (p - q)[d_leaf], (q - p)[t_leaf]
    d_node, t_node = d_leaf.copy(), t_leaf.copy()
    for depth in range(L - 1, -1, -1):
        if d_leaf.size == 0 or t_leaf.size == 0:
            break  # one side is empty: the other holds only rounding residue
        d_node //= V
        t_node //= V
        i, j, mass, d_mass, t_mass = _match_level(d_node, d_mass, t_node, t_mass, V**depth)
        rows.append(d_leaf[i])
        cols.append(t_leaf[j])
        data.append(mass)
        d_keep, t_keep = np.flatnonzero(d_mass > 0), np.flatnonzero(t_mass > 0)
        d_leaf, d_node, d_mass = d_leaf[d_keep], d_node[d_keep], d_mass[d_keep]
        t_leaf, t_node, t_mass = t_leaf[t_keep], t_node[t_keep], t_mass[t_keep]
    plan = sp.coo_array((np.concatenate(data), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))
    return BlockOTResult(value, plan, "optimal", message, "tree", n_nodes)


def solve_block_tree(draft: Source, target: Source, draft_length: int, *, return_plan: bool = True) -> BlockOTResult:
    """:func:`solve_block_tree_laws` on the sources' block laws (V**L up to ``MAX_ENUMERATION``)."""
    p, q = block_laws(draft, target, draft_length)
    return solve_block_tree_laws(p, q, draft.vocab_size, draft_length, return_plan=return_plan)
