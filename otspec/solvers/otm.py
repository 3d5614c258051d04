r"""Optimal acceptance for k drafts at one position: OTM-k (SpecTr) and its baselines.

Spec ``multi_draft_otm.md`` §2–8. Draft distribution p, target distribution q
(one row each over a vocabulary Ω of V tokens). The drafts X = (X_1, …, X_k) have
law P_D: either i.i.d. p^{⊗k} ("with replacement", the default) or k sequential
draws *without* replacement (each from p renormalised over the tokens not drawn
yet). S(x) is the set of distinct tokens of a tuple. The optimal acceptance is

.. math::
    \alpha_k(P_D, q) = \max_{\pi \in \Pi(P_D, q)} P_\pi\big(Y \in S(X)\big),

the optimal transport problem with membership cost 1{y ∉ S(x)} (eqs. (2)–(3)).

Three routes to α_k, one :class:`OTMResult` for the two that return a plan:

* :func:`otm_lp` — route (a): the LP (3) over π(x, y) for every tuple of positive
  probability, solved by HiGHS dual simplex (presolve off, tolerances 1e-10).
* :func:`otm_maxflow` — route (b): the same problem as a bipartite max-flow
  (source → tuple set → token → sink) solved exactly in integers by networkx.
* :func:`otm_value` — route (c): the min-cut formula (4)–(5) minimised over the
  V + 1 prefixes of the tokens sorted by q/p (eq. (6)); O(V log V) with
  replacement, O(V·k·nodes) without (exponential-race quadrature, eq. (7)).
  :func:`otm_value_bruteforce` minimises (4) over all 2^V subsets.

Plus SpecTr's Lemma 3 bound (12) (:func:`lemma3_upper_bound`), the closed forms
(14)–(15), the k-Seq quantities (8)–(10) and the acceptance of the multi-round
(§8, MCSD Alg. 1–2) and naive (MCNS) schemes.

Tuples without replacement
--------------------------
When p has fewer than k tokens of positive mass, drawing without replacement
stops once the support is exhausted: every tuple then lists the whole support
in some order, and is padded with ``-1`` on the right to length k. Tuples are
therefore always int arrays of shape (M, k) whose entries are token ids or -1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ..distributions import check_same_vocab, validate_probs
from ..verifiers.multi import RHO_TOL
from ..verifiers.multi import kseq_rho_star as _batched_rho_star  # one bisection, batched over rows

#: Most tuples :func:`draft_tuple_law` enumerates (with replacement s^k, without
#: s!/(s−k)!, s = number of tokens with p > 0): 2^20 tuples of k int64 entries.
MAX_DRAFT_TUPLES = 2**20
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
#: Largest vocabulary :func:`otm_value_bruteforce` and :func:`lemma3_upper_bound` accept.
MAX_BRUTEFORCE_VOCAB = 16
#: Most (subset, tuple) pairs :func:`lemma3_upper_bound` evaluates.
MAX_LEMMA3_TERMS = 2**24
#: Most draft paths :func:`multiround_acceptance` explores without replacement.
MAX_MULTIROUND_PATHS = 2**18
#: Most numbers (tokens × (k+1) × quadrature nodes) held by the leave-one-out race
#: computation of :func:`draft_inclusion_probs` without replacement (8 bytes each).
MAX_RACE_CELLS = 2**24
#: Largest marginal residual accepted from the HiGHS plan.
OTM_RESIDUAL_TOL = 1e-9
#: Most negative entry accepted in the unnormalised k-Seq residual (9).
KSEQ_RESIDUAL_TOL = 1e-12
#: Step of the trapezoid rule in v = log t for the exponential-race integral (7).
#: The integrand is analytic in a strip around the real v axis and decays
#: double-exponentially (t → ∞) and like e^{(k+1)v} (t → 0), so the rule converges
#: geometrically in 1/h: against the exact permutation sum (random rows, V <= 7, masses
#: down to 1e-14) the worst error was 1.4e-14 at h = 0.1, 4e-15 at h = 0.2, 2e-12 at h = 0.3.
RACE_STEP = 0.1

__all__ = [
    "KSEQ_RESIDUAL_TOL",
    "MAX_BRUTEFORCE_VOCAB",
    "MAX_DRAFT_TUPLES",
    "MAX_FLOW_EDGES",
    "MAX_LEMMA3_TERMS",
    "MAX_MULTIROUND_PATHS",
    "MAX_OTM_LP_VARIABLES",
    "MAX_PLAN_ENTRIES",
    "MAX_RACE_CELLS",
    "OTM_RESIDUAL_TOL",
    "RACE_STEP",
    "RHO_TOL",
    "OTMResult",
    "OTMSolveError",
    "bernoulli_alpha",
    "draft_inclusion_probs",
    "draft_tuple_law",
    "kseq_acceptance",
    "kseq_beta",
    "kseq_residual",
    "kseq_rho_star",
    "lemma3_upper_bound",
    "multiround_acceptance",
    "naive_acceptance",
    "otm_lp",
    "otm_maxflow",
    "otm_min_cut",
    "otm_value",
    "otm_value_bruteforce",
    "plan_acceptance",
    "prob_drafts_within",
    "tuple_membership",
    "uniform_alpha",
]


class OTMSolveError(RuntimeError):
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


# ------------------------------------------------------------------ checks
def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k: expected an integer number of drafts >= 1, got {k!r}")
    return int(k)


def _row(probs, name: str) -> np.ndarray:
    arr = validate_probs(probs, name)
    if hasattr(arr, "cpu"):  # a torch tensor: these solvers are numpy-only
        arr = arr.cpu().numpy()
    arr = np.array(arr, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected one probability row of shape (V,), got shape {arr.shape}")
    return arr


def _rows(draft, target) -> tuple[np.ndarray, np.ndarray]:
    p, q = _row(draft, "draft"), _row(target, "target")
    check_same_vocab(p, q)
    return p, q


def _n_tuples(s: int, k: int, replacement: bool) -> int:
    if replacement:
        return s**k
    return math.perm(s, min(k, s))


# ------------------------------------------------------------------ draft law
def _tuple_law(p: np.ndarray, k: int, replacement: bool) -> tuple[np.ndarray, np.ndarray]:
    supp = np.flatnonzero(p > 0)
    s = supp.size
    n = _n_tuples(s, k, replacement)
    if n > MAX_DRAFT_TUPLES:
        mode = "with" if replacement else "without"
        raise ValueError(f"the draft law {mode} replacement of k={k} drafts over {s} tokens of positive "
                         f"probability has {n:,} tuples, above MAX_DRAFT_TUPLES = {MAX_DRAFT_TUPLES:,}; "
                         "use otm_value (no enumeration) instead")
    if replacement:
        idx = np.indices((s,) * k).reshape(k, -1).T  # C order = lexicographic
        tuples = supp[idx]
        probs = np.prod(p[tuples], axis=1)
        return tuples.astype(np.int64), probs
    # level by level: the remaining mass of every prefix is summed over the tokens not
    # drawn yet (no cancellation in 1 − Σ drawn), children in increasing token order
    kk = min(k, s)
    ps = p[supp]
    prefix = np.zeros((1, 0), dtype=np.int64)  # positions in supp
    probs = np.ones(1)
    avail = np.ones((1, s), dtype=bool)
    for _ in range(kk):
        rem = (ps[None, :] * avail).sum(axis=1)
        row, col = np.nonzero(avail)
        probs = probs[row] * ps[col] / rem[row]
        prefix = np.concatenate([prefix[row], col[:, None]], axis=1)
        avail = avail[row]
        avail[np.arange(row.size), col] = False
    tuples = np.full((prefix.shape[0], k), -1, dtype=np.int64)
    tuples[:, :kk] = supp[prefix]
    return tuples, probs


def draft_tuple_law(draft, k: int, replacement: bool = True) -> tuple[np.ndarray, np.ndarray]:
    r"""The law P_D of the draft tuple: every tuple of positive probability, exactly.

    With replacement P_D(x) = ∏_i p(x_i). Without replacement

    .. math::
        P_D(x) = \prod_{i=1}^{k} \frac{p(x_i)}{\sum_{z \notin \{x_1..x_{i-1}\}} p(z)},
        \qquad x_i \text{ distinct},

    where each remaining mass is summed over the tokens not drawn yet (no
    cancellation when the drawn tokens carry almost all the mass). If p has
    s < k tokens of positive mass, the draws stop after s: tuples list the whole
    support and are padded with ``-1``.

    Parameters
    ----------
    draft : array_like, shape (V,)
        p, a probability row.
    k : int
        Number of drafts, >= 1.
    replacement : bool
        i.i.d. drafts (True) or sequential sampling without replacement.

    Returns
    -------
    tuples : ndarray of int64, shape (M, k)
        Lexicographic order (by token id, -1 padding last).
    probs : ndarray, shape (M,)
        P_D of each tuple; all positive, summing to 1 up to rounding.

    Raises
    ------
    ValueError
        On an invalid row or k, or more than :data:`MAX_DRAFT_TUPLES` tuples.
    """
    return _tuple_law(_row(draft, "draft"), _check_k(k), bool(replacement))


def tuple_membership(tuples, vocab_size: int) -> np.ndarray:
    """Boolean matrix (M, V): entry [m, y] is True iff token y appears in tuple m (-1 = padding)."""
    tuples = np.asarray(tuples, dtype=np.int64)
    if tuples.ndim != 2:
        raise ValueError(f"tuples: expected an int array of shape (M, k), got shape {tuples.shape}")
    V = int(vocab_size)
    if tuples.size and (tuples.max() >= V or tuples.min() < -1):
        raise ValueError(f"tuples: entries must be token ids in [0, {V}) or -1 (padding)")
    member = np.zeros((tuples.shape[0], V + 1), dtype=bool)  # column V collects the -1 padding
    member[np.arange(tuples.shape[0])[:, None], tuples] = True
    return member[:, :V]


def plan_acceptance(tuples, plan) -> float:
    """P_π(Y ∈ S(X)) = Σ_{m,y} π(m, y)·1{y ∈ S(tuple m)} of a plan (M, V) on ``tuples`` (M, k)."""
    plan = np.asarray(plan, dtype=np.float64)
    tuples = np.asarray(tuples)
    if plan.ndim != 2 or plan.shape[0] != tuples.shape[0]:
        raise ValueError(f"plan: expected shape ({tuples.shape[0]}, V) to match tuples {tuples.shape}, "
                         f"got {plan.shape}")
    return float(plan[tuple_membership(tuples, plan.shape[1])].sum())


# ------------------------------------------------------------------ LP route
#: HiGHS settings (see ``block_ot``): presolve wrongly reports infeasibility on tiny masses
#: (spec §2 implementation note), and the default tolerance 1e-7 lets the value drift.
_HIGHS_OPTIONS = {"presolve": False, "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def _plan_inputs(draft, target, k, replacement, limit: int, limit_name: str, what: str, unit: str):
    """Validated rows, k, and the tuple law with membership, refusing plans above ``limit`` entries."""
    p, q = _rows(draft, target)
    k = _check_k(k)
    V, s = p.size, int(np.count_nonzero(p))
    n_tuples = _n_tuples(s, k, bool(replacement))
    if n_tuples * V > limit:
        raise ValueError(f"the OTM {what} for V={V}, k={k} has {n_tuples:,} tuples x {V} tokens = "
                         f"{n_tuples * V:,} {unit}, above {limit_name} = {limit:,}; "
                         "use otm_value (exact, no plan) instead")
    tuples, probs = _tuple_law(p, k, bool(replacement))
    return p, q, k, tuples, probs, tuple_membership(tuples, V)


def otm_lp(draft, target, k: int, replacement: bool = True, *, solver_options: dict | None = None) -> OTMResult:
    r"""Route (a): the OTM-k linear program (3), solved by HiGHS.

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
    replacement : bool
        i.i.d. drafts (True) or sampling without replacement.
    solver_options : dict, optional
        Extra ``linprog`` options (overriding the defaults above).

    Returns
    -------
    OTMResult
        ``plan = (tuples, matrix)``; ``value`` is the acceptance of that plan.

    Raises
    ------
    ValueError
        On invalid rows or k, a vocabulary mismatch, more than :data:`MAX_DRAFT_TUPLES`
        tuples or more than :data:`MAX_OTM_LP_VARIABLES` variables.
    OTMSolveError
        If HiGHS reports no optimum or its plan misses a marginal by more than
        :data:`OTM_RESIDUAL_TOL`.
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
    options = {**_HIGHS_OPTIONS, **(solver_options or {})}
    res = linprog(-member.ravel().astype(np.float64), A_eq=A, b_eq=np.concatenate([probs, q]), bounds=(0, None),
                  method="highs-ds", options=options)
    if res.status != 0 or res.x is None:
        raise OTMSolveError(f"HiGHS failed on the OTM LP ({n:,} variables): status {res.status}: {res.message}")
    plan = np.maximum(res.x.reshape(M, V), 0.0)
    resid = max(float(np.abs(plan.sum(axis=1) - probs).max()), float(np.abs(plan.sum(axis=0) - q).max()))
    if not np.isfinite(resid) or resid > OTM_RESIDUAL_TOL:
        raise OTMSolveError(f"HiGHS reported success ({res.message}) but its plan misses the marginals by "
                            f"{resid:.3g} > {OTM_RESIDUAL_TOL:g}; refusing to return it")
    value = float(plan[member].sum())
    return OTMResult(value, (tuples, plan), "optimal", str(res.message), "highs", n)


# ------------------------------------------------------------- max-flow route
#: Capacities are scaled by 2^50 and rounded to integers, so networkx's max-flow runs in
#: exact integer arithmetic; the rounding moves the value by at most (#edges)·2^-51.
_FLOW_SCALE = 2**50


def otm_maxflow(draft, target, k: int, replacement: bool = True) -> OTMResult:
    r"""Route (b): OTM-k as a bipartite max-flow (spec §3), solved by networkx.

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

    Parameters and errors as :func:`otm_lp`; refuses more than :data:`MAX_FLOW_EDGES`
    set → token edges or :data:`MAX_PLAN_ENTRIES` plan entries (tuples × V).

    Returns
    -------
    OTMResult
        ``value`` = max flow / 2^50; ``plan = (tuples, matrix)`` as in :func:`otm_lp`.
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
        raise ValueError(f"the OTM flow network for V={V}, k={k} has {n_edges:,} set -> token edges, above "
                         f"MAX_FLOW_EDGES = {MAX_FLOW_EDGES:,}; use otm_value (exact, no plan) instead")
    G = nx.DiGraph()
    G.add_node("source")
    G.add_node("sink")
    for y in np.flatnonzero(q > 0):
        G.add_edge(("y", int(y)), "sink", capacity=round(float(q[y]) * _FLOW_SCALE))
    for i in range(sets.shape[0]):
        ys = np.flatnonzero(useful[i])
        if ys.size == 0:
            continue
        G.add_edge("source", ("S", i), capacity=round(float(set_mass[i]) * _FLOW_SCALE))
        for y in ys:
            G.add_edge(("S", i), ("y", int(y)))  # no capacity attribute: infinite
    flow_value, flow = nx.maximum_flow(G, "source", "sink", flow_func=preflow_push)
    set_flow = np.zeros(sets.shape, dtype=np.float64)
    for i in range(sets.shape[0]):
        for node, f in flow.get(("S", i), {}).items():
            set_flow[i, node[1]] = f / _FLOW_SCALE
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


# ------------------------------------------------ P_D(S(X) ⊆ A): exponential race
def _race_nodes(k: int, s_min: float) -> tuple[np.ndarray, float]:
    """Nodes t = e^v of the trapezoid rule in v for ∫ s e^{-st} P(N_A(t) >= k) dt, all s >= s_min.

    Below v_lo the integrand (in v) is at most s t^{k+1}/k! (P(N >= k) <= (p(A)t)^k/k!),
    whose integral is < 1e-18; above v_hi the weight's tail e^{-s t} is < 1e-19.
    """
    h = RACE_STEP
    v_lo = math.log(1e-18) / (k + 1) - 1.0
    v_hi = math.log(45.0 / s_min) + 1.0
    v = np.arange(v_lo, v_hi + h, h)
    return np.exp(v), h


def _race_weights(s, t: np.ndarray, h: float) -> np.ndarray:
    """h · s t e^{-s t}: the trapezoid weights of the density s e^{-st} dt = s t e^{-st} dv."""
    st = np.multiply.outer(np.asarray(s, dtype=np.float64), t)
    return h * st * np.exp(-st)


def _add_item(dp: np.ndarray, rate: float, t: np.ndarray) -> None:
    """Poisson-binomial DP, in place: dp[i] = P(N = i) (i < k), dp[k] = P(N >= k), one more item."""
    b = -np.expm1(-rate * t)  # P(arrived by t)
    c = np.exp(-rate * t)
    k = dp.shape[0] - 1
    moved = dp[:k] * b
    dp[:k] *= c
    dp[1:] += moved


def _race_within(inside: np.ndarray, s: float, k: int) -> float:
    """P_D(S ⊆ A) without replacement from A's positive masses and s = p(outside A), eq. (7)."""
    if s <= 0:
        return 1.0
    if inside.size < k:
        return 0.0
    t, h = _race_nodes(k, s)
    dp = np.zeros((k + 1, t.size))
    dp[0] = 1.0
    for rate in inside:
        _add_item(dp, float(rate), t)
    return float(min(1.0, _race_weights(s, t, h) @ dp[k]))


def _enumerated_within(p: np.ndarray, A: np.ndarray, k: int, replacement: bool) -> float:
    tuples, probs = _tuple_law(p, k, replacement)
    inside = np.zeros(p.size + 1, dtype=bool)
    inside[A] = True
    inside[-1] = True  # padding
    return float(probs[inside[tuples].all(axis=1)].sum())


def prob_drafts_within(draft, subset, k: int, replacement: bool = True, method: str = "race") -> float:
    r"""P_D(S(X) ⊆ A): the probability that every draft lies in the token set A.

    With replacement this is p(A)^k. Without replacement (spec eq. (7)), draw
    order = order of independent arrival times T_x ~ Exp(p(x)) (an exponential
    race), so S ⊆ A iff the k-th arrival in A precedes the first arrival outside
    A, which is Exp(s) with s = p(Ω∖A):

    .. math::
        P_D(S \subseteq A) = \int_0^\infty s e^{-st}\, P(N_A(t) \ge k)\, dt,

    N_A(t) Poisson-binomial with success probabilities 1 − e^{−p(x) t}, x ∈ A
    (O(|A|·k) DP per node). s = 0 gives 1. The integral is taken by the trapezoid
    rule in v = log t with step :data:`RACE_STEP` on a range covering the weight
    and the lower tail (errors <= 1e-14 against the permutation sum).

    Parameters
    ----------
    draft : array_like, shape (V,)
        p.
    subset : array_like of int or bool mask of shape (V,)
        The token set A.
    k : int
        Number of drafts.
    replacement : bool
        i.i.d. drafts or sampling without replacement.
    method : {"race", "enumerate"}
        Without replacement: the integral above, or the exact sum over all
        tuples of :func:`draft_tuple_law` (at most :data:`MAX_DRAFT_TUPLES`).

    Returns
    -------
    float
    """
    p = _row(draft, "draft")
    k = _check_k(k)
    A = np.asarray(subset)
    if A.dtype == bool:
        if A.shape != p.shape:
            raise ValueError(f"subset: a boolean mask must have shape {p.shape}, got {A.shape}")
        A = np.flatnonzero(A)
    A = np.unique(A.astype(np.int64).reshape(-1))
    if A.size and (A.min() < 0 or A.max() >= p.size):
        raise ValueError(f"subset: token ids must lie in [0, {p.size})")
    if method not in ("race", "enumerate"):
        raise ValueError(f"method: expected 'race' or 'enumerate', got {method!r}")
    if replacement:
        return float(p[A].sum()) ** k
    if method == "enumerate":
        return _enumerated_within(p, A, k, False)
    mask = np.zeros(p.size, dtype=bool)
    mask[A] = True
    inside = p[mask & (p > 0)]
    return _race_within(inside, float(p[~mask].sum()), k)


# ------------------------------------------------------------ sorted prefixes
def _hit(s, k: int):
    """1 − (1 − s)^k, accurate for small s (s = 1 gives 1)."""
    with np.errstate(divide="ignore"):
        return -np.expm1(k * np.log1p(-np.minimum(s, 1.0)))


def _sorted_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    ratio = np.divide(q, p, out=np.full(p.size, np.inf), where=p > 0)
    return np.argsort(ratio)


def _prefix_cuts_iid(p: np.ndarray, q: np.ndarray, k: int, order: np.ndarray) -> np.ndarray:
    """Cut values q(A_j) + 1 − p(A_j)^k for j = 0..V (eq. (6) with replacement)."""
    ps, qs = p[order], q[order]
    head = np.concatenate([[0.0], np.cumsum(ps)])  # p(A_j)
    tail = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])  # p(Ω ∖ A_j), accurate when small
    # 1 − p(A)^k: directly while p(A) < 1/2; via the tail mass s as −expm1(k log1p(−s)) beyond
    split = int(np.searchsorted(head, 0.5))  # head is non-decreasing
    miss = np.empty(head.size)
    miss[:split] = 1.0 - head[:split] ** k
    miss[split:] = _hit(tail[split:], k)
    return np.concatenate([[0.0], np.cumsum(qs)]) + miss


def _prefix_cuts_wor(p: np.ndarray, q: np.ndarray, k: int, order: np.ndarray) -> np.ndarray:
    """Cut values q(A_j) + 1 − P_D(S ⊆ A_j), j = 0..V, without replacement (eqs. (6)–(7)).

    One Poisson-binomial DP over quadrature nodes grows with the prefix (a token
    per step), so all prefixes cost O(V·k·nodes) together.
    """
    ps, qs = p[order], q[order]
    V = p.size
    n_supp = int(np.count_nonzero(ps))  # zero-mass tokens come last in `order`
    tail = np.concatenate([np.cumsum(ps[::-1])[::-1], [0.0]])
    within = np.zeros(V + 1)
    within[n_supp:] = 1.0  # the support is inside A_j: every draft is
    kk = min(k, n_supp)  # draws stop when the support is exhausted
    if kk < n_supp:  # otherwise only A ⊇ supp has P_D(S ⊆ A) > 0
        s_min = float(tail[n_supp - 1])
        t, h = _race_nodes(kk, s_min)
        dp = np.zeros((kk + 1, t.size))
        dp[0] = 1.0
        chunk = max(1, min(512, (1 << 22) // t.size))
        rows, idx = [], []

        def flush():
            if rows:
                j = np.asarray(idx)
                within[j] = np.minimum(1.0, np.einsum("jn,jn->j", _race_weights(tail[j], t, h), np.asarray(rows)))
                rows.clear()
                idx.clear()

        for j in range(1, n_supp):  # prefix A_j = first j sorted tokens, all of positive mass
            _add_item(dp, float(ps[j - 1]), t)
            if j >= kk:
                rows.append(dp[kk].copy())
                idx.append(j)
                if len(rows) >= chunk:
                    flush()
        flush()
    return np.concatenate([[0.0], np.cumsum(qs)]) + (1.0 - within)


def otm_min_cut(draft, target, k: int, replacement: bool = True) -> tuple[float, np.ndarray]:
    """α_k and a minimising token set A of eq. (4), found among the sorted prefixes (6).

    Returns
    -------
    value : float
        α_k, as :func:`otm_value`.
    subset : ndarray of int64
        Tokens of the minimising prefix A_j (sorted ids); empty when the trivial cut
        A = ∅ (value 1) is optimal. The bound α ≤ q(A) + P_D(S ⊄ A) is tight here, so
        (complementary slackness) an optimal plan accepts every output Y ∈ A, and
        accepts every tuple with S(X) ⊄ A with an output outside A.
    """
    p, q = _rows(draft, target)
    k = _check_k(k)
    order = _sorted_order(p, q)
    cuts = (_prefix_cuts_iid if replacement else _prefix_cuts_wor)(p, q, k, order)
    j = int(np.argmin(cuts))
    return float(min(1.0, max(0.0, cuts[j]))), np.sort(order[:j])


def otm_value(draft, target, k: int, replacement: bool = True) -> float:
    r"""Route (c): α_k from the min-cut dual, minimised over sorted prefixes (eqs. (4)–(6)).

    By max-flow/min-cut on the network of :func:`otm_maxflow` (any draft law P_D)

    .. math::
        \alpha_k = \min_{A \subseteq \Omega} \big[ q(A) + 1 - P_D(S(X) \subseteq A) \big]
        \qquad (4),

    and with replacement P_D(S ⊆ A) = p(A)^k, so α_k = 1 − max_A [p(A)^k − q(A)] (5).
    Sort the tokens by r(x) = q(x)/p(x) ascending (p(x) = 0 ⇒ r = +∞, last; ties
    in any order) and let A_j be the first j tokens. Then (6)

    .. math::
        \alpha_k = \min_{0 \le j \le V} \big[ q(A_j) + 1 - P_D(S(X) \subseteq A_j) \big].

    **Why sorting by q/p suffices** (our proof [D]; the spec lists (6) as derived
    and verified numerically; it is also checked against the 2^V brute force in
    the tests). Write G(A) = P_D(S ⊆ A), Φ(A) = G(A) − q(A) (maximise Φ), and
    for z ∉ A with p(z) > 0 the marginal gain per unit draft mass
    μ(A, z) = [G(A ∪ z) − G(A)] / p(z).

    *Lemma.* For disjoint A, x, y (p(x), p(y) > 0): μ(A ∪ x, y) ≥ μ(A, x).

    *Lemma ⇒ (6).* Zero-mass tokens never enter S(X), so removing them from A does
    not lower Φ; consider optimal sets of positive-mass tokens. Let A be optimal,
    x ∈ A, y ∉ A with r(y) ≤ r(x). Optimality gives G(A) − G(A∖x) ≥ q(x), i.e.
    μ(A∖x, x) ≥ r(x), and G(A∪y) − G(A) ≤ q(y), i.e. μ(A, y) ≤ r(y). With the lemma
    (base A∖x): r(y) ≥ μ(A, y) ≥ μ(A∖x, x) ≥ r(x) ≥ r(y), so all are equal and
    Φ(A ∪ y) = Φ(A): A ∪ y is optimal too. Hence an optimal set of maximal size
    has r(y) > r(x) for every x ∈ A and every positive-mass y ∉ A: it is a union of
    whole ratio classes, the first j tokens in the sorted order for any tie order
    (or A = ∅, j = 0).

    *Lemma, with replacement.* μ(A, z) = ((P + p_z)^k − P^k)/p_z with P = p(A) lies
    between the slopes k P^{k−1} and k (P + p_z)^{k−1} of the convex t ↦ t^k, so
    μ(A ∪ x, y) ≥ k (P + p_x)^{k−1} ≥ μ(A, x). (Equivalently: a supporting line of
    t^k at p(A*) shows the linear maximiser {x : q(x) < λ p(x)}, λ = k p(A*)^{k−1},
    is at least as good as an optimal A* — a lower level set of q/p.)

    *Lemma, without replacement* (exponential race, see :func:`prob_drafts_within`).
    Let a_1 ≤ a_2 ≤ … be the arrival times of A's tokens (a_0 = 0, a_j = ∞ if A
    has fewer than j tokens) and s = p(Ω ∖ (A ∪ z)). z joins the first k draws,
    with the other k−1 from A, iff T_z < a_k and max(T_z, a_{k−1}) precedes the
    first arrival outside A ∪ z, so

        μ(A, z) = E ∫_0^{a_k} e^{−p_z t} e^{−s·max(t, a_{k−1})} dt
                = E[ ∫_0^{a_{k−1}} e^{−σ a_{k−1} + p_z (a_{k−1} − t)} dt + ∫_{a_{k−1}}^{a_k} e^{−σ t} dt ],

    σ = s + p_z = p(Ω∖A). For fixed A this is non-decreasing in p_z, so with
    A' = A ∪ x, s' = p(Ω∖A'): μ(A', y) ≥ L(A') := E ∫_0^{a'_k} e^{−s' max(t, a'_{k−1})} dt,
    where a'_j are the arrivals of A'. Condition L(A') on T_x = u: for u ≥ a_k the
    first k arrivals of A' are A's, giving I := ∫_0^{a_k} g with
    g(t) = e^{−s' max(t, a_{k−1})}; for u < a_k they are x and a_1..a_{k−1}, giving
    J(u) = ∫_0^{max(u, a_{k−1})} e^{−s' max(t, max(min(u, a_{k−1}), a_{k−2}))} dt.
    Writing e^{−p_x t} = e^{−p_x a_k} + ∫_t^{a_k} p_x e^{−p_x u} du in μ(A, x) gives
    L(A') − μ(A, x) = E ∫_0^{a_k} p_x e^{−p_x u} [J(u) − ∫_0^u g] du, and
    J(u) ≥ ∫_0^u g: equality if u ≥ a_{k−1}; if u < a_{k−1}, J integrates over
    [0, a_{k−1}] ⊇ [0, u] an integrand ≥ e^{−s' a_{k−1}} = g(t) on t ≤ u. (If p has
    fewer than k tokens the draws stop, i.e. k is replaced by the support size.)
    The lemma was also checked numerically on 68,000 random (A, x, y).

    Cost: with replacement one argsort and cumulative sums, O(V log V) — 3–4 ms
    for V = 32,000, k = 8 on 2 cores (``benchmarks/bench_otm.py``; goal 20 ms).
    Without replacement one Poisson-binomial DP over ≈ (log(45/s_min) + 42/(k+1))/0.1
    quadrature nodes grows one token per prefix: O(V·k·nodes), s_min the smallest
    tail mass p(Ω∖A_j) > 0; memory O(k·nodes). V = 32,000, k = 8: ≈ 0.7 s for
    Dirichlet(1) rows, ≈ 2.6 s for Dirichlet(0.05) rows (masses down to 1e-300
    stretch the node range).

    Parameters
    ----------
    draft, target : array_like, shape (V,)
        p and q, probability rows over the same vocabulary.
    k : int
        Number of drafts, >= 1.
    replacement : bool
        i.i.d. drafts (True) or sampling without replacement.

    Returns
    -------
    float
        α_k in [0, 1].
    """
    return otm_min_cut(draft, target, k, replacement)[0]


# ------------------------------------------------------------- brute force
def _subset_masses(w: np.ndarray) -> np.ndarray:
    """Σ_{x ∈ A} w(x) for every bitmask A (bit x = token x), by adding one token at a time."""
    out = np.zeros(1)
    for x in range(w.size):
        out = np.concatenate([out, out + w[x]])
    return out


def _wor_within_all(p: np.ndarray, k: int) -> np.ndarray:
    """P_D(S ⊆ A) without replacement for every bitmask A, exactly (no quadrature).

    P(first j draws form the set T) = Σ_{x∈T} P(T∖x) p(x)/p(Ω∖(T∖x)), layer by layer,
    then a subset-sum transform over A ⊇ T.
    """
    V = p.size
    n = 1 << V
    bits = np.arange(n)
    rem = _subset_masses(p)[(n - 1) ^ bits]  # mass of the complement, summed directly
    popcount = np.zeros(n, dtype=np.int64)
    for x in range(V):
        popcount += (bits >> x) & 1
    kk = min(k, int(np.count_nonzero(p)))
    P = np.zeros(n)
    P[0] = 1.0
    for j in range(1, kk + 1):
        layer = bits[popcount == j]
        for x in np.flatnonzero(p > 0):
            T = layer[(layer >> x) & 1 == 1]
            prev = T ^ (1 << x)
            ok = rem[prev] > 0
            P[T[ok]] += P[prev[ok]] * p[x] / rem[prev[ok]]
    g = np.where(popcount == kk, P, 0.0)
    for x in range(V):  # g[A] = Σ_{T ⊆ A} f[T]
        has = (bits >> x) & 1 == 1
        g[bits[has]] += g[bits[has] ^ (1 << x)]
    return g


def otm_value_bruteforce(draft, target, k: int, replacement: bool = True) -> float:
    """α_k as the minimum of eq. (4) over all 2^V token sets A (for tests; V <= 16).

    With replacement P_D(S ⊆ A) = p(A)^k; without replacement it is computed
    exactly for every A by a recursion over the set of drawn tokens (no
    quadrature, no tuple enumeration).
    """
    p, q = _rows(draft, target)
    k = _check_k(k)
    if p.size > MAX_BRUTEFORCE_VOCAB:
        raise ValueError(f"otm_value_bruteforce enumerates 2^V subsets; V={p.size} is above "
                         f"MAX_BRUTEFORCE_VOCAB = {MAX_BRUTEFORCE_VOCAB}; use otm_value")
    within = _subset_masses(p) ** k if replacement else _wor_within_all(p, k)
    cuts = _subset_masses(q) + 1.0 - within
    return float(min(1.0, max(0.0, cuts.min())))


def lemma3_upper_bound(draft, target, k: int, replacement: bool = True) -> float:
    r"""SpecTr's Lemma 3 upper bound ᾱ_k (eq. (12)), by brute force over Ω₀ ⊆ Ω.

    .. math::
        \bar\alpha_k = \min_{\Omega_0 \subseteq \Omega} \Big\{ \sum_{y \in \Omega_0}
        \min\{q(y), 1 - (1 - p(y))^k\} + \sum_{x \in \Omega^k} \min\Big\{\prod_i p(x_i),
        \sum_{y \in S(x) \setminus \Omega_0} q(y)\Big\}\Big\}.

    With ``replacement=False`` the same bound for sampling without replacement:
    ∏ p(x_i) becomes P_D(x) and 1 − (1 − p(y))^k becomes P_D(y ∈ S(X)); the proof
    (split the acceptance into Y ∈ Ω₀ and Y ∉ Ω₀) is unchanged. Ω₀ = Ω∖A gives
    every cut value of (4), so ᾱ_k = α_k (spec §5).

    Raises
    ------
    ValueError
        If V > :data:`MAX_BRUTEFORCE_VOCAB` or 2^V × tuples > :data:`MAX_LEMMA3_TERMS`.
    """
    p, q = _rows(draft, target)
    k = _check_k(k)
    V = p.size
    if V > MAX_BRUTEFORCE_VOCAB:
        raise ValueError(f"lemma3_upper_bound enumerates 2^V sets; V={V} is above "
                         f"MAX_BRUTEFORCE_VOCAB = {MAX_BRUTEFORCE_VOCAB}")
    tuples, probs = _tuple_law(p, k, bool(replacement))
    if (1 << V) * probs.size > MAX_LEMMA3_TERMS:
        raise ValueError(f"lemma3_upper_bound needs 2^{V} x {probs.size:,} terms, above "
                         f"MAX_LEMMA3_TERMS = {MAX_LEMMA3_TERMS:,}")
    member = tuple_membership(tuples, V)
    if replacement:
        hit = _hit(p, k)  # 1 − (1 − p(y))^k
    else:
        hit = probs @ member
    first = _subset_masses(np.minimum(q, hit))  # Σ_{y ∈ Ω0} min(q, P(y ∈ S))
    qmask = _subset_masses(q)
    set_code = member.astype(np.int64) @ (1 << np.arange(V, dtype=np.int64))
    full = (1 << V) - 1
    best, step = np.inf, max(1, (1 << 22) // probs.size)
    for start in range(0, 1 << V, step):
        omega0 = np.arange(start, min(1 << V, start + step))
        outside = set_code[None, :] & (full ^ omega0)[:, None]  # S(x) ∖ Ω0
        second = np.minimum(probs[None, :], qmask[outside]).sum(axis=1)
        best = min(best, float((first[omega0] + second).min()))
    return best


# --------------------------------------------------------------- closed forms
def _check_unit(x, name: str) -> float:
    try:
        val = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {x!r}") from None
    if not (0.0 <= val <= 1.0):
        raise ValueError(f"{name}: expected a probability in [0, 1], got {x!r}")
    return val


def bernoulli_alpha(draft_p: float, target_p: float, k: int) -> float:
    """Eq. (14): α_k(Ber p₁, Ber q₁) = min{q₁, 1 − (1−p₁)^k} + min{1 − q₁, 1 − p₁^k}.

    ``draft_p`` = p₁ = P(draft token = 1), ``target_p`` = q₁ = P(target token = 1).
    """
    p1, q1, k = _check_unit(draft_p, "draft_p"), _check_unit(target_p, "target_p"), _check_k(k)
    return min(q1, 1.0 - (1.0 - p1) ** k) + min(1.0 - q1, 1.0 - p1**k)


def uniform_alpha(r: float, k: int) -> float:
    """Eq. (15): α_k = 1 − (1 − 1/r)^k for draft p = U(d) and target q = U(d/r), r >= 1."""
    k = _check_k(k)
    try:
        r = float(r)
    except (TypeError, ValueError):
        raise ValueError(f"r: expected a real ratio >= 1, got {r!r}") from None
    if not (math.isfinite(r) and r >= 1.0):
        raise ValueError(f"r: expected a finite ratio d/d_q >= 1, got {r!r}")
    return 1.0 - (1.0 - 1.0 / r) ** k


def _kseq_terms(p: np.ndarray, q: np.ndarray, rho: float) -> tuple[np.ndarray, float, float]:
    """min{p, q/ρ}, β(ρ) and 1 − β(ρ) = Σ (p − q/ρ)_+ (summed directly, no cancellation)."""
    m = np.minimum(p, q / rho)
    return m, float(m.sum()), float(np.maximum(p - q / rho, 0.0).sum())


def _check_rho(rho) -> float:
    try:
        val = float(rho)
    except (TypeError, ValueError):
        raise ValueError(f"rho: expected a real division factor >= 1, got {rho!r}") from None
    if not (math.isfinite(val) and val >= 1.0):
        raise ValueError(f"rho: expected a finite division factor >= 1, got {rho!r}")
    return val


def kseq_beta(draft, target, rho: float) -> float:
    """Eq. (8): β(ρ) = Σ_x min{p(x), q(x)/ρ}."""
    p, q = _rows(draft, target)
    return _kseq_terms(p, q, _check_rho(rho))[1]


def kseq_rho_star(draft, target, k: int) -> float:
    r"""ρ*: the root of eq. (10), f(ρ) = 1 − (1 − β(ρ))^k − ρ β(ρ), by bisection to :data:`RHO_TOL`.

    f is non-increasing on [1, ∞) (β(ρ) decreases, ρβ(ρ) = Σ min(ρp, q) increases),
    f(1) = 1 − (1−β)^k − β ≥ 0 and f(k) ≤ 0 by Bernoulli's inequality. SpecTr's
    Lemma 4 also places ρ* below max_x q(x)/p(x); that holds when supp q ⊆ supp p
    but **not in general**: with target mass outside the draft's support, e.g.
    p = (½, ½, 0), q = (0.6, 0, 0.4), k = 2: f(1.2) = 0.15 > 0 and ρ* = 1.6325 > max q/p = 1.2
    (and if max q/p < 1, ρ* > 1 is still needed for a non-negative residual). So the
    bracket is [1, min(k, max q/p)] only when f is ≤ 0 at its right end, else [1, k].
    The returned value is the bracket's right end, where f ≤ 0: the residual (9) is
    then non-negative (Theorem 1 needs ρ ≥ ρ*).

    Edge cases: TV(p, q) = 0 (f(1) = 0) and k = 1 give 1; disjoint supports
    (β ≡ 0, f ≡ 0) give 1.
    """

    p, q = _rows(draft, target)
    return float(_batched_rho_star(p[None, :], q[None, :], _check_k(k))[0])


def kseq_acceptance(draft, target, k: int, rho: float | None = None) -> float:
    """k-Seq's p_acc = 1 − (1 − β(ρ))^k (eq. (8)) at ρ (default ρ* of :func:`kseq_rho_star`).

    This is P(some draft is accepted); the coupling's P(Y ∈ S(X)) can be larger,
    since the residual draw may hit a drafted token (spec (11)).
    """
    p, q = _rows(draft, target)
    k = _check_k(k)
    rho = kseq_rho_star(p, q, k) if rho is None else _check_rho(rho)
    gap = _kseq_terms(p, q, rho)[2]
    return 1.0 - gap**k


def kseq_residual(draft, target, k: int, rho: float) -> np.ndarray:
    r"""The k-Seq residual (eq. (9)) at division factor ρ:

    .. math::
        \mathrm{res}_\rho(x) = \frac{q(x) - \min\{p(x), q(x)/\rho\}\, p_{acc}/\beta(\rho)}{1 - p_{acc}}.

    The numerator is q(x) − P(Y = x, some draft accepted); it is ≥ 0 for ρ ≥ ρ*
    (Theorem 1). Entries of the numerator below −:data:`KSEQ_RESIDUAL_TOL` raise
    ValueError (ρ too small); smaller negative rounding is clipped to 0 and the row
    renormalised. When nothing is ever rejected (p_acc = 1, i.e. p = q and ρ = 1)
    or nothing is ever accepted (β = 0, disjoint supports) the residual is q itself.
    """
    p, q = _rows(draft, target)
    k = _check_k(k)
    rho = _check_rho(rho)
    m, beta, gap = _kseq_terms(p, q, rho)
    reject = gap**k
    if beta <= 0.0 or reject <= 0.0:
        return q
    num = q - m * ((1.0 - reject) / beta)
    worst = float(num.min())
    if worst < -KSEQ_RESIDUAL_TOL:
        x = int(np.argmin(num))
        raise ValueError(f"kseq_residual: rho={rho!r} gives a negative residual mass {worst:.3g} at token {x}; "
                         f"rho must be >= rho* = {kseq_rho_star(p, q, k)!r} (spec eq. (10))")
    num = np.maximum(num, 0.0)
    return num / num.sum()


def multiround_acceptance(draft, target, k: int, replacement: bool = True) -> float:
    r"""P(some draft accepted) under multi-round rejection sampling (spec §8; MCSD Alg. 1/2).

    *With replacement* (Alg. 1). The residual targets t_0 = q,
    t_i = Norm[(t_{i−1} − p)_+] do not depend on the drafts, and draft X_i is
    independent of the earlier rejections, so given that i−1 drafts were rejected
    the i-th is accepted with probability Σ_x p(x) min{1, t_{i−1}(x)/p(x)} =
    Σ_x min{p(x), t_{i−1}(x)} and rejected with ρ_i = Σ_x (p(x) − t_{i−1}(x))_+:

    .. math::
        P(\text{accept}) = 1 - \prod_{i=1}^{k} \rho_i,
        \qquad \rho_i = \sum_x \big(p(x) - t_{i-1}(x)\big)_+ .

    (If a normaliser Σ(t − p)_+ is 0, rejection has probability 0 from then on.)

    *Without replacement* (Alg. 2): the draft law d changes along the path
    (rejected tokens are removed, d renormalised) while t_i = Norm[(t_{i−1} − d_{i−1})_+]
    uses the current d; exact recursion over all draft paths,
    acc(t, d) = Σ_x min{d(x), t(x)} + Σ_x (d(x) − t(x))_+ · acc(t', d_{−x}), stopping
    after k drafts or when the support is exhausted. At most
    :data:`MAX_MULTIROUND_PATHS` paths.

    The final residual draw can land on a drafted token; it is not counted (the
    table of spec §6 counts acceptance the same way).
    """
    p, q = _rows(draft, target)
    k = _check_k(k)
    if replacement:
        t = q.copy()
        reject = 1.0
        for _ in range(k):
            reject *= float(np.maximum(p - t, 0.0).sum())  # P(this draft rejected | earlier ones were)
            pos = np.maximum(t - p, 0.0)
            if reject <= 0.0 or pos.sum() <= 0.0:
                break  # rejection has (numerically) zero probability from here on
            t = pos / pos.sum()
        return 1.0 - reject
    s = int(np.count_nonzero(p))
    paths = sum(math.perm(s, i) for i in range(min(k, s)))
    if paths > MAX_MULTIROUND_PATHS:
        raise ValueError(f"multiround_acceptance without replacement explores {paths:,} draft paths for "
                         f"{s} tokens and k={k}, above MAX_MULTIROUND_PATHS = {MAX_MULTIROUND_PATHS:,}")

    def acc(t: np.ndarray, d: np.ndarray, depth: int) -> float:
        accept = float(np.minimum(d, t).sum())
        if depth == k:
            return accept
        rej = np.maximum(d - t, 0.0)
        pos = np.maximum(t - d, 0.0)
        if pos.sum() <= 0.0:
            return accept
        t_next = pos / pos.sum()
        total = accept
        for x in np.flatnonzero(rej > 0):
            d_next = d.copy()
            d_next[x] = 0.0
            if d_next.sum() <= 0.0:
                continue  # support exhausted: no further draft
            total += float(rej[x]) * acc(t_next, d_next / d_next.sum(), depth + 1)
        return total

    return acc(q, p, 1)


def draft_inclusion_probs(draft, k: int, replacement: bool = True) -> np.ndarray:
    r"""P_D(y ∈ S(X)) for every token y.

    With replacement 1 − (1 − p(y))^k. Without replacement
    P(y ∉ S) = P_D(S ⊆ Ω∖{y}) by the race formula (7) with s = p(y), the
    Poisson-binomial law of the other tokens obtained by combining prefix and
    suffix DPs (leave-one-out): O(V·k·nodes) time and at most
    :data:`MAX_RACE_CELLS` stored numbers.
    """
    p = _row(draft, "draft")
    k = _check_k(k)
    if replacement:
        return _hit(p, k)
    supp = np.flatnonzero(p > 0)
    n = supp.size
    out = np.zeros(p.size)
    if n <= k:  # every token of the support is drawn
        out[supp] = 1.0
        return out
    ps = p[supp]
    t, h = _race_nodes(k, float(ps.min()))
    if (n + 1) * (k + 1) * t.size > MAX_RACE_CELLS:
        raise ValueError(f"draft_inclusion_probs without replacement would hold {(n + 1) * (k + 1) * t.size:,} "
                         f"numbers for {n} tokens, above MAX_RACE_CELLS = {MAX_RACE_CELLS:,}")
    pre = np.zeros((n + 1, k + 1, t.size))
    pre[0, 0] = 1.0
    for i in range(n):
        pre[i + 1] = pre[i]
        _add_item(pre[i + 1], float(ps[i]), t)
    suf = np.zeros((k + 1, t.size))
    suf[0] = 1.0
    for i in range(n - 1, -1, -1):  # suf: tokens after i; pre[i]: tokens before i
        tail = np.cumsum(suf[::-1], axis=0)[::-1]  # tail[c] = P(N_suffix >= c)
        at_least_k = np.einsum("an,an->n", pre[i], tail[::-1])  # Σ_a P(pre = a) P(suf >= k − a)
        out[supp[i]] = 1.0 - float(_race_weights(ps[i], t, h) @ at_least_k)
        _add_item(suf, float(ps[i]), t)
    return np.clip(out, 0.0, 1.0)


def naive_acceptance(draft, target, k: int, replacement: bool = True) -> float:
    """MCNS acceptance (spec §8): Y ~ q independent of the drafts, accepted iff Y ∈ S(X).

    Σ_y q(y) P_D(y ∈ S(X)) (:func:`draft_inclusion_probs`); with replacement
    Σ_y q(y) (1 − (1 − p(y))^k).
    """
    p, q = _rows(draft, target)
    return float(q @ draft_inclusion_probs(p, k, replacement))

