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
* :func:`otm_maxflow` — route (b): the bipartite max-flow (source → draft multiset → token → sink),
  solved exactly in integers by networkx's network simplex; its plan meets both marginals to rounding
  whatever the solver's tolerance, and it is canonical: the one optimal plan defined in its docstring
  (:data:`CANONICAL_PLAN`), the same in every run, so :class:`~otspec.verifiers.otm.OTMVerify` samples it.
  The LP's plan is whichever optimal vertex HiGHS returns.

Route (c), the value alone at V = 32,000, is :func:`otspec.solvers.otm_dual.otm_value`.

Spec: ``docs/multi_draft_otm.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..checks import real_array
from ..distributions import row_pair
from ..drafts.laws import check_k, draft_tuple_law, tuple_count, tuple_membership
from ..errors import SizeLimitError, SolveError
from .lp import LPBackend, solve_lp

#: Most LP variables (tuples × V) :func:`otm_lp` accepts. Measured on a 2-core machine
#: (``benchmarks/bench_otm.py``, Dirichlet(1) rows, HiGHS dual simplex, presolve off):
#: 65,536 variables (V = 16, k = 3) ≈ 0.5–1.2 s, 160,000 (V = 20, k = 3) ≈ 2.6 s, while
#: 248,832 (V = 12, k = 4) take ≈ 13 s, 262,144 (V = 8, k = 5) ≈ 30 s and 531,441
#: (V = 9, k = 5) ≈ 60 s. :func:`otm_maxflow` solves all of these in about 1 s.
MAX_OTM_LP_VARIABLES = 200_000
#: Most edges (distinct draft multisets × their tokens) :func:`otm_maxflow` accepts. Its network simplex on
#: exact integer costs of ~n bits grows about as n²: on a 2-core machine 4,200 edges (V = 20, k = 3) take
#: ≈ 0.6–1.1 s, 7,200 (V = 24, k = 3) ≈ 3 s, 16,896 (V = 32, k = 3) ≈ 24 s and 32,800 (V = 40, k = 3) ≈ 100 s.
MAX_FLOW_EDGES = 20_000
#: Most entries (tuples × V) of a dense plan :func:`otm_maxflow` builds (8 bytes each).
MAX_PLAN_ENTRIES = 2**24
#: Largest marginal residual accepted from the HiGHS plan.
OTM_RESIDUAL_TOL = 1e-9

__all__ = [
    "CANONICAL_PLAN",
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
        ``"highs"`` or ``"maxflow:network_simplex"``.
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
    plan = real_array(plan, "plan")
    if plan.size and plan.min() < 0:
        raise ValueError(f"plan: expected non-negative masses, got {float(plan.min())!r}")
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
                                backend=LPBackend(options=solver_options), what="OTM LP", error=OTMSolveError)
    plan = np.maximum(x.reshape(M, V), 0.0)
    resid = max(float(np.abs(plan.sum(axis=1) - probs).max()), float(np.abs(plan.sum(axis=0) - q).max()))
    if not np.isfinite(resid) or resid > OTM_RESIDUAL_TOL:
        raise OTMSolveError(f"HiGHS reported success ({message}) but its plan misses the marginals by "
                            f"{resid:.3g} > {OTM_RESIDUAL_TOL:g}; refusing to return it")
    value = float(plan[member].sum())
    return OTMResult(value, (tuples, plan), "optimal", message, "highs", n)


# ------------------------------------------------------------- max-flow route
#: Capacities are scaled by 2^50 and rounded to integers, so the flow is solved in exact integer arithmetic; the
#: rounding moves the value by at most (#edges)·2^-51.
_FLOW_SCALE = 2**50
#: The plan :func:`otm_maxflow` returns among the optimal plans (also recorded by figures that follow it).
CANONICAL_PLAN = ("among the plans of optimal acceptance alpha_k: the greatest E[number of drafts equal to Y], "
                  "then the accepted flows of the (draft multiset, token) pairs lexicographically greatest with "
                  "multisets in the order of their first tuple (lexicographic tuple order) and tokens ascending; "
                  "a multiset's flow split over its tuples in proportion to P_D, the unaccepted masses coupled "
                  "independently")


def _draft_classes(tuples, probs, V: int):
    """The draft multisets: counts (C, V) (copies of each token), class of each tuple (M,), mass (C,).

    Classes are listed in the order of their first tuple in ``tuples`` (the order of :func:`draft_tuple_law`)."""
    M = probs.size
    counts = np.zeros((M, V), dtype=np.int64)
    for col in np.asarray(tuples, dtype=np.int64).T:
        real = np.flatnonzero(col >= 0)
        np.add.at(counts, (real, col[real]), 1)
    classes, first, inverse = np.unique(counts, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    inverse = rank[inverse.reshape(-1)]
    return classes[order], inverse, np.bincount(inverse, weights=probs, minlength=order.size)


def otm_maxflow(draft, target, k: int, replacement: bool = True) -> OTMResult:
    r"""Route (b): OTM-k as a bipartite flow (spec §3) solved exactly by network simplex [2]; a canonical optimal plan.

    Its value is the optimum α_k = max_π P_π(Y ∈ S(X)) of SpecTr's problem (3) [1]. Many plans attain it, and
    which one a verifier follows moves what a draft tree accepts below the first level (SpecTr's rule continues
    with every candidate equal to Y), so this route returns one plan defined by the rows alone
    (:data:`CANONICAL_PLAN`):

    1. its accepted part attains α_k;
    2. among those, it maximises E[m(X, Y)], m(x, y) the number of drafts in x equal to y: the tree nodes the
       match rule continues with (on a 2 × 1 tree of i.i.d. rows the second level then accepts α_m, and
       α_2 ≥ α_1, so this plan gives the greatest tree value of all optimal first-level plans);
    3. among those, its accepted flows f(c, y) from draft multisets c to tokens y ∈ c are lexicographically
       greatest, the pairs (c, y) ordered by c's first tuple in the order of :func:`draft_tuple_law`
       (lexicographic, for i.i.d. drafts and without replacement), then by y.

    Network: source → multiset c (capacity P_D(multiset c)), c → y for y ∈ c (uncapacitated),
    y → sink (capacity q(y)), and source → sink (a bypass carrying what is not accepted). The n pairs c → y in
    the order of 3. (rank r = 0, …, n − 1) cost −(B + m(c, y)·2^n + 2^(n−1−r)), with B = (k·n + 2)·2^n,
    and the bypass 0: as exact Python integers, the three terms rank the objectives 1. > 2. > 3. Every
    cycle of the network has a non-zero cost (the ±2^(n−1−r) of its pairs cannot cancel), so the minimum-cost
    flow is unique: any exact solver returns the same one, whatever the process, hash seed or networkx release.
    A multiset's flow is split over its tuples in proportion to P_D (tuples that are reorderings of each other
    get the same row up to scale), and the unaccepted masses r(x) = P_D(x) − Σ_y flow(x, y),
    c(y) = q(y) − Σ_x flow(x, y) are coupled independently, π += r cᵀ / Σ c: at a maximum flow no r(x) c(y) > 0
    has y ∈ S(x) (an augmenting path source → x → y → sink), so the completion adds no acceptance.

    Capacities are multiplied by 2^50 and rounded to integers: the flow is then exact, the definition above
    holds for the rounded capacities, and the value is off by at most (number of edges)·2^-51 from the float
    problem's.

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
        ``value`` = accepted flow / 2^50; ``plan = (tuples, matrix)`` of shapes (M, k) and (M, V), as in
        :func:`otm_lp`.

    Raises
    ------
    ValueError
        As :func:`otm_lp`; :class:`~otspec.errors.SizeLimitError` above :data:`MAX_FLOW_EDGES`
        multiset → token edges or :data:`MAX_PLAN_ENTRIES` plan entries (tuples × V).

    References
    ----------
    .. [1] Z. Sun, A. T. Suresh, J. H. Ro, A. Beirami, H. Jain, F. Yu, "SpecTr: Fast Speculative
       Decoding via Optimal Transport", NeurIPS 2023, arXiv:2310.15141.
    .. [2] R. K. Ahuja, T. L. Magnanti, J. B. Orlin, "Network Flows: Theory, Algorithms, and Applications",
       Prentice Hall, 1993, ch. 11 (network simplex).

    Examples
    --------
    The Bernoulli pair of :func:`otm_lp` (eq. (14): 0.4375 + 0.25), and one draft, where the
    optimum is the maximal coupling 1 − TV(p, q) = 1 − 0.5:

    >>> round(otm_maxflow([0.75, 0.25], [0.25, 0.75], 2).value, 12)
    0.6875
    >>> round(otm_maxflow([0.75, 0.25], [0.25, 0.75], 1).value, 12)
    0.5

    p = q uniform on three tokens, k = 2: every plan whose Y is always a draft is optimal (α_2 = 1). The
    canonical one sends (a, a) to a (forced), then by 3. gives {0, 1} all it can of token 0 (the 2/9 that
    (0, 0) leaves), so {0, 2} must give its 2/9 to token 2 and {1, 2} to token 1 — the output of each tuple:

    >>> otm_maxflow(np.full(3, 1 / 3), np.full(3, 1 / 3), 2).plan[1].argmax(axis=1).tolist()
    [0, 0, 2, 0, 1, 1, 2, 1, 2]
    """
    import networkx as nx

    p, q, k, tuples, probs, _ = _plan_inputs(draft, target, k, replacement, MAX_PLAN_ENTRIES,
                                             "MAX_PLAN_ENTRIES", "plan", "entries")
    V = p.size
    counts, inverse, class_mass = _draft_classes(tuples, probs, V)
    useful = (counts > 0) & (q > 0)[None, :]
    n_edges = int(useful.sum())
    if n_edges > MAX_FLOW_EDGES:
        raise SizeLimitError(f"the OTM flow network for V={V}, k={k} has {n_edges:,} multiset -> token edges, above "
                             f"MAX_FLOW_EDGES = {MAX_FLOW_EDGES:,}; use otm_value (exact, no plan) instead",
                             size=n_edges, limit=MAX_FLOW_EDGES)
    # Integer node labels (source 0, sink 1, token y at 2 + y, multiset i at 2 + V + i) and integer costs: the
    # optimum is unique (see the docstring), so neither insertion order nor hash seeds can change it.
    source, sink = 0, 1
    total = round(float(probs.sum()) * _FLOW_SCALE)
    G = nx.DiGraph()
    G.add_node(source, demand=-total)
    G.add_node(sink, demand=total)
    G.add_edge(source, sink, capacity=total, weight=0)
    for y in np.flatnonzero(q > 0):
        G.add_edge(2 + int(y), sink, capacity=round(float(q[y]) * _FLOW_SCALE), weight=0)
    n, rank = n_edges, 0
    base = (k * n + 2) << n
    for i, ys in enumerate(useful):
        ys = np.flatnonzero(ys)
        if ys.size == 0:
            continue
        G.add_edge(source, 2 + V + i, capacity=round(float(class_mass[i]) * _FLOW_SCALE), weight=0)
        for y in ys:  # no capacity attribute: infinite
            G.add_edge(2 + V + i, 2 + int(y), weight=-(base + (int(counts[i, y]) << n) + (1 << (n - 1 - rank))))
            rank += 1
    _, flow = nx.network_simplex(G)
    set_flow = np.zeros(counts.shape, dtype=np.float64)
    for i in range(counts.shape[0]):
        for node, f in flow.get(2 + V + i, {}).items():
            set_flow[i, node - 2] = f / _FLOW_SCALE
    accepted = total - flow[source][sink]
    share = probs / class_mass[inverse]
    plan = set_flow[inverse] * share[:, None]
    r = np.maximum(probs - plan.sum(axis=1), 0.0)
    c = np.maximum(q * (probs.sum() / q.sum()) - plan.sum(axis=0), 0.0)
    if c.sum() > 0:
        plan += np.outer(r, c / c.sum())
    value = accepted / _FLOW_SCALE
    message = (f"canonical max flow {accepted} / 2^50 over {counts.shape[0]} draft multisets, "
               f"{n_edges} multiset -> token edges")
    return OTMResult(float(value), (tuples, plan), "optimal", message, "maxflow:network_simplex", n_edges)
