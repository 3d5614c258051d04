r"""Optimal acceptance for k drafts at one position, with its plan: OTM-k (SpecTr).

Spec ``multi_draft_otm.md`` §2–3. Draft distribution p, target distribution q (one row each
over a vocabulary Ω of V tokens). The candidates X = (X_1, …, X_k) have law P_D: i.i.d.
p^{⊗k} ("with replacement", the default) or k sequential draws without replacement
(:func:`otspec.drafts.draft_tuple_law`). S(x) is the set of distinct tokens of a tuple. The
optimal acceptance is

.. math::
    \alpha_k(P_D, q) = \max_{\pi \in \Pi(P_D, q)} P_\pi\big(Y \in S(X)\big),

the transport problem with membership cost 1{y ∉ S(x)} (eqs. (2)–(3)). Two routes return a
plan (:class:`OTMResult`):

* :func:`otm_lp` — route (a): the LP (3) over π(x, y) for every tuple of positive probability,
  HiGHS dual simplex (:func:`otspec.solvers.lp.solve_lp`);
* :func:`otm_maxflow` — route (b): the bipartite max-flow (source → tuple set → token → sink),
  solved exactly in integers by networkx; its plan meets both marginals to rounding whatever
  the solver's tolerance, so :class:`~otspec.verifiers.otm.OTMVerify` samples it.

Route (c), the value alone at V = 32,000, is :func:`otspec.solvers.otm_dual.otm_value`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..distributions import row_pair
from ..drafts.laws import check_k, draft_tuple_law, tuple_count, tuple_membership
from ..errors import SizeLimitError, SolveError
from .lp import solve_lp

#: Most LP variables (tuples × V) :func:`otm_lp` accepts. Measured on a 2-core machine
#: (``benchmarks/bench_otm.py``, Dirichlet(1) rows, HiGHS dual simplex, presolve off):
#: 65,536 variables (V = 16, k = 3) ≈ 0.5–1.2 s, 160,000 (V = 20, k = 3) ≈ 2.6 s, while
#: 248,832 (V = 12, k = 4) take ≈ 13 s, 262,144 (V = 8, k = 5) ≈ 30 s and 531,441
#: (V = 9, k = 5) ≈ 60 s. :func:`otm_maxflow` solves all of these in < 1 s.
MAX_OTM_LP_VARIABLES = 200_000
#: Most edges (distinct draft sets × their tokens) :func:`otm_maxflow` accepts.
MAX_FLOW_EDGES = 200_000
#: Most entries (tuples × V) of a dense plan :func:`otm_maxflow` builds (8 bytes each).
MAX_PLAN_ENTRIES = 2**24
#: Largest marginal residual accepted from the HiGHS plan.
OTM_RESIDUAL_TOL = 1e-9

__all__ = [
    "MAX_FLOW_EDGES",
    "MAX_OTM_LP_VARIABLES",
    "MAX_PLAN_ENTRIES",
    "OTM_RESIDUAL_TOL",
    "OTMResult",
    "OTMSolveError",
    "otm_lp",
    "otm_maxflow",
    "plan_acceptance",
]


class OTMSolveError(SolveError):
    """A solver failed or returned a plan that violates the marginals."""


@dataclass(frozen=True)
class OTMResult:
    """Optimal multi-draft coupling (or just its value).

    Attributes
    ----------
    value : float
        Optimal acceptance α_k = max_π P_π(Y ∈ S(X)) (not the cost 1 − α).
    plan : (tuples, matrix) or None
        ``tuples``: int array (M, k), the draft tuples of positive probability in
        lexicographic order (``-1`` pads tuples that exhausted the support, see the
        module notes); ``matrix``: float array (M, V) with ``matrix[m, y]`` =
        π(tuple m, y). Row sums are P_D(tuple m), column sums q.
    status : str
        ``"optimal"``; failures raise :class:`OTMSolveError`.
    message : str
        The solver's message.
    method : str
        ``"highs"`` or ``"maxflow:preflow_push"``.
    n_variables : int
        LP: M·V coupling variables. Max-flow: edges between draft sets and tokens.
    """

    value: float
    plan: tuple[np.ndarray, np.ndarray] | None
    status: str
    message: str
    method: str
    n_variables: int


def plan_acceptance(tuples, plan) -> float:
    """The acceptance of a multi-draft plan: P_π(Y ∈ S(X)) = Σ_{m,y} π(m, y)·1{y ∈ S(x_m)}.

    S(x_m) is the set of distinct tokens of tuple m; the output Y is accepted when it is one of the
    drafts, the objective of the OTM-k problem (3) of [1]. The marginals of π are not checked.

    Parameters
    ----------
    tuples : int array_like, shape (M, k)
        The draft tuples x_m (``-1`` pads tuples that exhausted the support).
    plan : array_like, shape (M, V)
        π(m, y) for tuple m and output token y.

    Returns
    -------
    float
        The accepted mass.

    Raises
    ------
    ValueError
        If ``plan`` is not two-dimensional with one row per tuple.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.

    Examples
    --------
    One draft (k = 1) over two tokens: the maximal coupling of p = (0.5, 0.5) and
    q = (0.75, 0.25) keeps 0.5 on (0, 0) and 0.25 on (1, 1), and moves 0.25 from draft 1 to output 0.

    >>> plan_acceptance([[0], [1]], [[0.5, 0.0], [0.25, 0.25]])  # 0.5 + 0.25 = 1 - TV(p, q)
    0.75
    """
    plan = np.asarray(plan, dtype=np.float64)
    tuples = np.asarray(tuples)
    if plan.ndim != 2 or plan.shape[0] != tuples.shape[0]:
        raise ValueError(f"plan: expected shape ({tuples.shape[0]}, V) to match tuples {tuples.shape}, "
                         f"got {plan.shape}")
    return float(plan[tuple_membership(tuples, plan.shape[1])].sum())


# ------------------------------------------------------------------ LP route
def _plan_inputs(draft, target, k, replacement, limit: int, limit_name: str, what: str, unit: str):
    """Validated rows, k, and the tuple law with membership, refusing plans above ``limit`` entries."""
    p, q = row_pair(draft, target)
    k = check_k(k)
    V, s = p.size, int(np.count_nonzero(p))
    n_tuples = tuple_count(s, k, replacement)
    if n_tuples * V > limit:
        raise SizeLimitError(f"the OTM {what} for V={V}, k={k} has {n_tuples:,} tuples x {V} tokens = "
                             f"{n_tuples * V:,} {unit}, above {limit_name} = {limit:,}; "
                             "use otm_value (exact, no plan) instead", size=n_tuples * V, limit=limit)
    tuples, probs = draft_tuple_law(p, k, replacement)
    return p, q, k, tuples, probs, tuple_membership(tuples, V)


def otm_lp(draft, target, k: int, replacement: bool = True, *, solver_options: dict | None = None) -> OTMResult:
    r"""Route (a): the OTM-k linear program (3) of [1], solved by HiGHS [2]; returns α_k and an optimal plan.

    α_k(P_D, q) = max over couplings π of the draft-tuple law P_D and the target q of
    P_π(Y ∈ S(X)), S(X) the set of distinct drafts (SpecTr's optimal transport with membership cost).

    .. math::
        \max_{\pi \ge 0} \sum_{m, y} \pi(m, y)\, 1\{y \in S(x_m)\}
        \quad \text{s.t.} \quad \sum_y \pi(m, y) = P_D(x_m), \quad \sum_m \pi(m, y) = q(y),

    over the M tuples x_m of positive probability (:func:`draft_tuple_law`) and
    all V tokens: M·V variables, M + V equality constraints, a sparse constraint
    matrix with two non-zeros per column. Solved with ``linprog(method="highs-ds")``,
    presolve off (it declares feasible instances with masses near 1e-10 infeasible),
    feasibility tolerances 1e-10. q is rescaled to P_D's total so the LP is exactly feasible.

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of drafts, >= 1.
    replacement : bool, default True
        i.i.d. drafts (True) or sampling without replacement.
    solver_options : dict, optional
        Extra ``linprog`` options (overriding the defaults above); default None.

    Returns
    -------
    OTMResult
        ``plan = (tuples, matrix)``, shapes (M, k) and (M, V); ``value`` is the acceptance of that plan.

    Raises
    ------
    ValueError
        On invalid rows or k, a vocabulary mismatch, more than :data:`MAX_DRAFT_TUPLES`
        tuples or more than :data:`MAX_OTM_LP_VARIABLES` variables
        (:class:`~otspec.errors.SizeLimitError`).
    OTMSolveError
        If HiGHS reports no optimum or its plan misses a marginal by more than
        :data:`OTM_RESIDUAL_TOL`.

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.
    .. [2] Q. Huangfu, J. A. J. Hall, "Parallelizing the dual revised simplex method",
       Mathematical Programming Computation 10(1):119–142, 2018.

    Examples
    --------
    Bernoulli rows, P(token 1) = 0.25 for the draft and 0.75 for the target, k = 2: SpecTr's
    eq. (14) gives min{0.75, 1 − 0.75²} + min{0.25, 1 − 0.25²} = 0.4375 + 0.25.

    >>> res = otm_lp([0.75, 0.25], [0.25, 0.75], 2)
    >>> round(res.value, 9)
    0.6875
    >>> res.plan[0].tolist()  # the four tuples of two i.i.d. drafts
    [[0, 0], [0, 1], [1, 0], [1, 1]]
    """
    p, q, k, tuples, probs, member = _plan_inputs(draft, target, k, replacement, MAX_OTM_LP_VARIABLES,
                                                  "MAX_OTM_LP_VARIABLES", "LP", "variables")
    V = p.size
    M = probs.size
    n = M * V
    q = q * (probs.sum() / q.sum())
    var = np.arange(n, dtype=np.int64)  # variable m*V + y: row m (draft marginal), row M + y (target)
    indices = np.empty(2 * n, dtype=np.int64)
    indices[0::2], indices[1::2] = var // V, M + var % V
    A = sp.csc_array((np.ones(2 * n), indices, np.arange(0, 2 * n + 1, 2, dtype=np.int64)), shape=(M + V, n))
    x, _, message, _ = solve_lp(-member.ravel().astype(np.float64), A_eq=A, b_eq=np.concatenate([probs, q]),
                                options=solver_options, what="OTM LP", error=OTMSolveError)
    plan = np.maximum(x.reshape(M, V), 0.0)
    resid = max(float(np.abs(plan.sum(axis=1) - probs).max()), float(np.abs(plan.sum(axis=0) - q).max()))
    if not np.isfinite(resid) or resid > OTM_RESIDUAL_TOL:
        raise OTMSolveError(f"HiGHS reported success ({message}) but its plan misses the marginals by "
                            f"{resid:.3g} > {OTM_RESIDUAL_TOL:g}; refusing to return it")
    value = float(plan[member].sum())
    return OTMResult(value, (tuples, plan), "optimal", message, "highs", n)


# ------------------------------------------------------------- max-flow route
#: Capacities are scaled by 2^50 and rounded to integers, so networkx's max-flow runs in
#: exact integer arithmetic; the rounding moves the value by at most (#edges)·2^-51.
_FLOW_SCALE = 2**50


def otm_maxflow(draft, target, k: int, replacement: bool = True) -> OTMResult:
    r"""Route (b): OTM-k as a bipartite max-flow (spec §3), solved exactly by networkx's preflow-push [2].

    Its value is the optimum α_k = max_π P_π(Y ∈ S(X)) of SpecTr's problem (3) [1].

    Network: source → draft tuple x (capacity P_D(x)), x → y (infinite capacity iff
    y ∈ S(x)), y → sink (capacity q(y)). A flow is exactly the accepted part of a
    coupling, so the max flow is α_k. Tuples with the same set S(x) have the same
    outgoing edges, so they are merged into one node per distinct set (capacity
    P_D(S(X) = S)); the flow of a set is split over its tuples in proportion to
    P_D. The unaccepted masses r(x) = P_D(x) − Σ_y flow(x, y) and
    c(y) = q(y) − Σ_x flow(x, y) are coupled independently, π += r cᵀ / Σ c: at a
    maximum flow no r(x) c(y) > 0 has y ∈ S(x) (that would be an augmenting path
    source → x → y → sink), so the completion adds no acceptance.

    Capacities are multiplied by 2^50 and rounded to integers: the max flow
    (``networkx.algorithms.flow.preflow_push``) is then exact, and the value is
    off by at most (number of edges)·2^-51 from the float problem's (float
    capacities make networkx's comparisons unreliable).

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
    OTMResult
        ``value`` = max flow / 2^50; ``plan = (tuples, matrix)`` of shapes (M, k) and (M, V), as in
        :func:`otm_lp`.

    Raises
    ------
    ValueError
        As :func:`otm_lp`; :class:`~otspec.errors.SizeLimitError` above :data:`MAX_FLOW_EDGES`
        set → token edges or :data:`MAX_PLAN_ENTRIES` plan entries (tuples × V).

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.
    .. [2] A. V. Goldberg, R. E. Tarjan, "A new approach to the maximum-flow problem",
       Journal of the ACM 35(4):921–940, 1988.

    Examples
    --------
    The Bernoulli pair of :func:`otm_lp` (eq. (14): 0.4375 + 0.25), and one draft, where the
    optimum is the maximal coupling 1 − TV(p, q) = 1 − 0.5:

    >>> round(otm_maxflow([0.75, 0.25], [0.25, 0.75], 2).value, 12)
    0.6875
    >>> round(otm_maxflow([0.75, 0.25], [0.25, 0.75], 1).value, 12)
    0.5
    """
    import networkx as nx
    from networkx.algorithms.flow import preflow_push

    p, q, k, tuples, probs, member = _plan_inputs(draft, target, k, replacement, MAX_PLAN_ENTRIES,
                                                  "MAX_PLAN_ENTRIES", "plan", "entries")
    V = p.size
    sets, inverse = np.unique(member, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    set_mass = np.bincount(inverse, weights=probs, minlength=sets.shape[0])
    useful = sets & (q > 0)[None, :]
    n_edges = int(useful.sum())
    if n_edges > MAX_FLOW_EDGES:
        raise SizeLimitError(f"the OTM flow network for V={V}, k={k} has {n_edges:,} set -> token edges, above "
                             f"MAX_FLOW_EDGES = {MAX_FLOW_EDGES:,}; use otm_value (exact, no plan) instead",
                             size=n_edges, limit=MAX_FLOW_EDGES)
    # Integer node labels: preflow-push keeps its active nodes in Python sets, whose order for labels holding a
    # string changes with each process's hash seed; with ints it is fixed, so the same rows give the same plan in
    # every run (the optimum is often not unique, and which optimal plan a tree verifier follows moves its deeper
    # acceptance). Nodes: source 0, sink 1, token y at 2 + y, draft set i at 2 + V + i.
    source, sink = 0, 1
    G = nx.DiGraph()
    G.add_node(source)
    G.add_node(sink)
    for y in np.flatnonzero(q > 0):
        G.add_edge(2 + int(y), sink, capacity=round(float(q[y]) * _FLOW_SCALE))
    for i in range(sets.shape[0]):
        ys = np.flatnonzero(useful[i])
        if ys.size == 0:
            continue
        G.add_edge(source, 2 + V + i, capacity=round(float(set_mass[i]) * _FLOW_SCALE))
        for y in ys:
            G.add_edge(2 + V + i, 2 + int(y))  # no capacity attribute: infinite
    flow_value, flow = nx.maximum_flow(G, source, sink, flow_func=preflow_push)
    set_flow = np.zeros(sets.shape, dtype=np.float64)
    for i in range(sets.shape[0]):
        for node, f in flow.get(2 + V + i, {}).items():
            set_flow[i, node - 2] = f / _FLOW_SCALE
    share = probs / set_mass[inverse]
    plan = set_flow[inverse] * share[:, None]
    r = np.maximum(probs - plan.sum(axis=1), 0.0)
    c = np.maximum(q * (probs.sum() / q.sum()) - plan.sum(axis=0), 0.0)
    if c.sum() > 0:
        plan += np.outer(r, c / c.sum())
    value = flow_value / _FLOW_SCALE
    message = (f"max flow {flow_value} / 2^50 over {sets.shape[0]} distinct draft sets, "
               f"{n_edges} set -> token edges")
    return OTMResult(float(value), (tuples, plan), "optimal", message, "maxflow:preflow_push", n_edges)
