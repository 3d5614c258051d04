r"""Rejections versus distribution bias: exact Pareto fronts (Yin et al. 2024, Theorems 4–5).

Spec ``yin_theory.md`` §7. A rejection-based verifier at one position (prefix fixed) draws
x̃ ~ p (the **draft**), accepts it with probability b(x̃) and otherwise resamples from P.
With accepted mass a(x) = p(x) b(x), rejection probability r = 1 − Σ a and resampled
mass s = r P, its output law is a + s and its quality loss ("bias") is TV(a + s, q)
against the **target** q.

Token level
-----------
* :func:`min_bias` — the exact program

  .. math::
      \min_{a, s}\ \mathrm{TV}(a + s, q) \quad \text{s.t.} \quad 0 \le a \le p,\ \
      \textstyle\sum_x a(x) = 1 - r,\ \ s \ge 0,\ \ \sum_x s(x) = r,

  an LP once |·| is linearised, by HiGHS or cvxpy. Its value is Theorem 5's linear front
  :func:`pareto_front` = max{0, TV(p, q) − r} (eq. (8)).
* :func:`optimal_resampling` — Theorem 4 (eqs. (6)–(7)): for a given b the best P is
  Norm[(q − p b)_+] and the bias is Σ (p b − q)_+.
* :func:`over_acceptance` / :func:`family_curve` — the family b_ε = min{1, (q + ε)/p}
  (eq. (9)) with Decoding-OPT (P = P* = Norm[(q − p)_+], on the front) or Decoding-UNO
  (P = q, above the front).

Sequence level (not in the paper)
---------------------------------
:func:`sequence_min_bias` solves the exact LP over prefix-dependent rejection-based
verifiers for a whole length-T response, in "flow" variables (see its docstring), and
:func:`sequence_pareto` traces its value function against the straight line from
(0, TV(p^{(T)}, q^{(T)})) to (E_SD[N_rej], 0), two per-step constructions (upper bounds)
and the coupling lower bound max{0, TV_seq − R}. Finding: the exact front is convex and
piecewise linear, starts with slope −1 (on the lower bound) and lies strictly below the
straight line — which is itself attainable by randomising whole runs between SD and the
pure draft — e.g. by 0.090 (TV_seq = 0.601, E_SD = 1.006) on :func:`default_sequence_pair`;
the front is linear only when TV_seq = E_SD[N_rej] (the two bounds meet). Applying the
token-level front at every prefix does no better than the straight line there.

:func:`pareto_figure_data` / :func:`render_pareto` give a two-panel figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from ..distributions import check_same_vocab, total_variation, validate_probs
from ..sources import MarkovSource, Source, random_markov

__all__ = [
    "DEFAULT_DRAFT",
    "DEFAULT_TARGET",
    "MAX_SEQUENCE_LP_VARIABLES",
    "MAX_SEQUENCE_CVXPY_VARIABLES",
    "PARETO_RESIDUAL_TOL",
    "ParetoResult",
    "ParetoSolveError",
    "ResamplingResult",
    "SequenceParetoResult",
    "default_sequence_pair",
    "family_curve",
    "min_bias",
    "optimal_resampling",
    "over_acceptance",
    "pareto_figure_data",
    "pareto_front",
    "per_step_curve",
    "render_pareto",
    "sequence_expected_rejections_sd",
    "sequence_laws",
    "sequence_min_bias",
    "sequence_pareto",
]

#: The worked example of §7: draft p and target q (TV = 0.3).
DEFAULT_DRAFT = (0.5, 0.3, 0.2)
DEFAULT_TARGET = (0.2, 0.3, 0.5)
#: Most variables of the sequence LP (2 per prefix-tree node plus one per leaf) for HiGHS;
#: V = 3, T = 4 needs 321, V = 4, T = 6 about 15,000 (solved in well under a second).
MAX_SEQUENCE_LP_VARIABLES = 60_000
#: The same limit for the cvxpy route.
MAX_SEQUENCE_CVXPY_VARIABLES = 20_000
#: Largest constraint residual accepted from a solver's solution (HiGHS; cvxpy gets 1e3 times more).
PARETO_RESIDUAL_TOL = 1e-8
#: HiGHS dual simplex, presolve off (it misreports tiny masses), tight feasibility tolerances.
_HIGHS_OPTIONS = {"presolve": False, "primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


class ParetoSolveError(RuntimeError):
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


class ResamplingResult(NamedTuple):
    """Theorem 4's optimum; unpacks as ``(resampling, bias)``."""

    resampling: np.ndarray
    bias: float


@dataclass(frozen=True)
class SequenceParetoResult:
    """Minimal sequence-level bias under a rejection budget (:func:`sequence_min_bias`).

    Attributes
    ----------
    value : float
        min TV(W_T, q^{(T)}), recomputed from the returned leaf law.
    budget : float
        The budget R on E[N_rej] (``inf``: unconstrained).
    rejections : float
        E[N_rej] of the returned verifier (≤ budget).
    output_law : ndarray, shape (V**T,)
        W_T, the law of the algorithm's output, lexicographic.
    accepted, rejected : list of ndarray
        Level n (0-based list index n − 1) holds w_acc(x_{1:n}) and w_rej(x_{1:n}), shape (V**n,).
    status, message, method : str
        As in :class:`ParetoResult`.
    n_variables : int
    """

    value: float
    budget: float
    rejections: float
    output_law: np.ndarray
    accepted: list
    rejected: list
    status: str
    message: str
    method: str
    n_variables: int


# ------------------------------------------------------------------ checks
def _rows(draft, target) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(validate_probs(draft, "draft"), dtype=np.float64)
    q = np.asarray(validate_probs(target, "target"), dtype=np.float64)
    if p.ndim != 1 or q.ndim != 1:
        raise ValueError(f"draft and target: expected single rows of shape (V,), got shapes {p.shape} and {q.shape}")
    check_same_vocab(p, q)
    return p, q


def _check_fraction(value, name: str) -> float:
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a number in [0, 1], got {value!r}") from None
    if not math.isfinite(r) or not 0.0 <= r <= 1.0:
        raise ValueError(f"{name}: expected a rejection probability in [0, 1], got {value!r}")
    return r


def _check_method(method: str) -> None:
    if method not in ("highs", "cvxpy"):
        raise ValueError(f"method: expected 'highs' or 'cvxpy', got {method!r}")


def pareto_front(draft, target, rejection) -> float | np.ndarray:
    """Theorem 5, eq. (8): the least bias at rejection probability r, max{0, TV(p, q) − r}.

    ``rejection`` may be a scalar or an array of values in [0, 1] (the result has its shape).
    """
    p, q = _rows(draft, target)
    r = np.asarray(rejection, dtype=np.float64)
    if not np.all(np.isfinite(r)) or np.any((r < 0) | (r > 1)):
        raise ValueError(f"rejection: expected values in [0, 1], got {rejection!r}")
    out = np.maximum(0.0, float(total_variation(p, q)) - r)
    return float(out) if out.ndim == 0 else out


# ------------------------------------------------------------ token level LP
def _lp_solve(c, A_ub, b_ub, A_eq, b_eq, bounds, method, solver, what):
    """Minimise c·x over {A_ub x ≤ b_ub, A_eq x = b_eq, bounds}; returns (x, status, message, label)."""
    if method == "highs":
        res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs-ds",
                      options=dict(_HIGHS_OPTIONS))
        if res.status != 0 or res.x is None:
            raise ParetoSolveError(f"HiGHS failed on the {what}: status {res.status}: {res.message}")
        return np.asarray(res.x), "optimal", str(res.message), "highs"
    import cvxpy as cp  # lazily: cvxpy takes a second to import

    if solver is None:
        installed = cp.installed_solvers()
        solver = next((s for s in ("HIGHS", "CLARABEL") if s in installed), None)
    lo = np.array([b[0] for b in bounds], dtype=np.float64)
    hi = np.array([np.inf if b[1] is None else b[1] for b in bounds], dtype=np.float64)
    x = cp.Variable(c.size)
    cons = [x >= lo, A_eq @ x == b_eq]
    finite = np.isfinite(hi)
    if finite.any():
        cons.append(x[np.flatnonzero(finite)] <= hi[finite])
    if A_ub is not None:
        cons.append(A_ub @ x <= b_ub)
    problem = cp.Problem(cp.Minimize(c @ x), cons)
    options = {"presolve": "off", "primal_feasibility_tolerance": 1e-10,
               "dual_feasibility_tolerance": 1e-10} if solver == "HIGHS" else {}
    try:
        problem.solve(solver=solver, **options)
    except cp.error.SolverError as exc:
        raise ParetoSolveError(f"cvxpy solver {solver} failed on the {what}: {exc}") from exc
    label = f"cvxpy:{problem.solver_stats.solver_name}"
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or x.value is None:
        raise ParetoSolveError(f"{label} did not solve the {what}: status {problem.status!r}")
    return np.asarray(x.value), str(problem.status), f"cvxpy status {problem.status}", label


def min_bias(draft, target, rejection: float, method: str = "highs", *, solver: str | None = None) -> ParetoResult:
    r"""Least bias TV(P_A, q) over verifiers that reject with probability exactly r.

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
    rejection : float in [0, 1]
    method : {"highs", "cvxpy"}
        ``"highs"``: ``scipy.optimize.linprog(method="highs-ds")`` with presolve off.
        ``"cvxpy"``: the same LP through cvxpy (default solver HIGHS with presolve off, else CLARABEL).
    solver : str, optional
        cvxpy solver name.

    Raises
    ------
    ValueError
        Invalid rows, vocabulary mismatch, r outside [0, 1], unknown method.
    ParetoSolveError
        The solver fails, or its a, s violate the constraints by more than
        :data:`PARETO_RESIDUAL_TOL` (×1e3 for cvxpy).
    """
    p, q = _rows(draft, target)
    r = _check_fraction(rejection, "rejection")
    _check_method(method)
    V = p.size
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
    x, status, message, label = _lp_solve(c, A_ub, b_ub, A_eq, b_eq, bounds, method, solver,
                                          f"token-level Pareto LP (V={V}, r={r:g})")
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
    p, q = _rows(draft, target)
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


def _over_acceptance(p, q, e, mode) -> dict:
    a = np.minimum(p, q + e)  # p b_eps; equal to p where p = 0
    b = np.divide(a, p, out=np.ones_like(p), where=p > 0)
    r = max(0.0, 1.0 - float(a.sum()))
    if mode == "opt":
        P, _ = optimal_resampling(p, q, b)  # Norm[(q - p b_eps)_+] = Norm[(q - p)_+]
    else:
        P = q.copy()
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
    p, q = _rows(draft, target)
    return _over_acceptance(p, q, _check_eps(eps), _check_mode(mode))


def family_curve(draft, target, eps_grid, mode: str = "opt") -> dict:
    """:func:`over_acceptance` over a grid of ε: JSON-ready lists ``eps``, ``rejection``, ``bias``, ``front``."""
    p, q = _rows(draft, target)
    mode = _check_mode(mode)
    grid = [_check_eps(e) for e in np.atleast_1d(np.asarray(eps_grid, dtype=np.float64))]
    rows = [_over_acceptance(p, q, e, mode) for e in grid]
    return {"mode": mode, **{k: [row[k] for row in rows] for k in ("eps", "rejection", "bias", "front")}}


# ----------------------------------------------------------- sequence level
def _check_sources(draft: Source, target: Source, horizon) -> int:
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"vocabulary mismatch: draft has {draft.vocab_size} tokens, target has "
                         f"{target.vocab_size}; both models must share one vocabulary")
    if isinstance(horizon, bool) or not isinstance(horizon, int | np.integer) or horizon < 1:
        raise ValueError(f"horizon: expected an integer >= 1, got {horizon!r}")
    draft.check_length(int(horizon))
    target.check_length(int(horizon))
    return int(horizon)


def _sequence_sizes(V: int, T: int) -> tuple[int, int]:
    nodes = sum(V**n for n in range(1, T + 1))
    return nodes, 2 * nodes + V**T


def _level_rows(source: Source, T: int) -> list[np.ndarray]:
    """rows[n-1][k] = law of token n after the k-th prefix of length n − 1 (lexicographic), shape (V**(n-1), V)."""
    out = []
    for n in range(1, T + 1):
        prefixes = source.enumerate(n - 1).tokens
        out.append(np.asarray(source.next_probs(prefixes), dtype=np.float64).reshape(-1, source.vocab_size))
    return out


def sequence_laws(draft: Source, target: Source, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """The draft's and the target's laws of x_{1:T}, shape (V**T,) each, lexicographic."""
    T = _check_sources(draft, target, horizon)
    return draft.enumerate(T).probs, target.enumerate(T).probs


def sequence_expected_rejections_sd(draft: Source, target: Source, horizon: int) -> float:
    """Theorem 1, eq. (1): E_SD[N_rej] = Σ_n E_{x_{1:n−1} ~ q}[TV(p_n, q_n)(·|x_{1:n−1})]."""
    T = _check_sources(draft, target, horizon)
    prow, qrow = _level_rows(draft, T), _level_rows(target, T)
    total, qlaw = 0.0, np.ones(1)
    for n in range(T):
        total += float(qlaw @ total_variation(prow[n], qrow[n]))
        qlaw = (qlaw[:, None] * qrow[n]).reshape(-1)
    return total


def _sequence_lp(prow, qT, V, T, budget):
    """c, A_ub, b_ub, A_eq, b_eq, bounds of the flow LP; variables [acc_1, rej_1, …, acc_T, rej_T, t]."""
    sizes = [V**n for n in range(1, T + 1)]
    offs = np.cumsum([0] + [2 * m for m in sizes])  # acc_n at offs[n-1], rej_n at offs[n-1] + sizes[n-1]
    n_flow = int(offs[-1])
    n_var = n_flow + sizes[-1]
    eq_rows, eq_cols, eq_vals, b_eq = [], [], [], []
    ub_rows, ub_cols, ub_vals, b_ub = [], [], [], []
    n_eq = n_ub = 0
    for n in range(1, T + 1):
        m, acc, rej = sizes[n - 1], offs[n - 1], offs[n - 1] + sizes[n - 1]
        child = np.arange(m)
        parent = child // V
        # conservation: sum of children's (acc + rej) = parent's (acc + rej), or 1 at the root
        eq_rows += [n_eq + parent, n_eq + parent]
        eq_cols += [acc + child, rej + child]
        eq_vals += [np.ones(m), np.ones(m)]
        if n == 1:
            b_eq.append(np.ones(1))
        else:
            pacc, prej = offs[n - 2], offs[n - 2] + sizes[n - 2]
            up = np.arange(m // V)
            eq_rows += [n_eq + up, n_eq + up]
            eq_cols += [pacc + up, prej + up]
            eq_vals += [-np.ones(m // V), -np.ones(m // V)]
            b_eq.append(np.zeros(m // V))
            # accepted flow: acc_n(prefix, x) - p_n(x | prefix) W(prefix) <= 0
            pr = prow[n - 1].reshape(-1)  # p_n(x | prefix) at child index prefix * V + x
            ub_rows += [n_ub + child, n_ub + child, n_ub + child]
            ub_cols += [acc + child, pacc + parent, prej + parent]
            ub_vals += [np.ones(m), -pr, -pr]
            b_ub.append(np.zeros(m))
            n_ub += m
        n_eq += m // V
    # leaves: W_T - t <= q, -W_T - t <= -q
    m, acc, rej = sizes[-1], offs[-2], offs[-2] + sizes[-1]
    leaf = np.arange(m)
    for sign, rhs in ((1.0, qT), (-1.0, -qT)):
        ub_rows += [n_ub + leaf] * 3
        ub_cols += [acc + leaf, rej + leaf, n_flow + leaf]
        ub_vals += [np.full(m, sign), np.full(m, sign), -np.ones(m)]
        b_ub.append(rhs)
        n_ub += m
    if budget is not None:  # sum of all rejected flows <= R
        rej_cols = np.concatenate([offs[n - 1] + sizes[n - 1] + np.arange(sizes[n - 1]) for n in range(1, T + 1)])
        ub_rows.append(np.full(rej_cols.size, n_ub))
        ub_cols.append(rej_cols)
        ub_vals.append(np.ones(rej_cols.size))
        b_ub.append(np.array([budget]))
        n_ub += 1
    A_eq = sp.csr_array((np.concatenate(eq_vals), (np.concatenate(eq_rows), np.concatenate(eq_cols))),
                        shape=(n_eq, n_var))
    A_ub = sp.csr_array((np.concatenate(ub_vals), (np.concatenate(ub_rows), np.concatenate(ub_cols))),
                        shape=(n_ub, n_var))
    first = prow[0].reshape(-1)
    bounds = []
    for n in range(1, T + 1):
        ub_acc = first if n == 1 else [None] * sizes[n - 1]
        bounds += [(0.0, None if u is None else float(u)) for u in ub_acc] + [(0.0, None)] * sizes[n - 1]
    bounds += [(0.0, None)] * m
    c = np.zeros(n_var)
    c[n_flow:] = 0.5
    return c, A_ub, np.concatenate(b_ub), A_eq, np.concatenate(b_eq), bounds, offs, sizes


def sequence_min_bias(draft: Source, target: Source, horizon: int, rejections: float | None,
                      method: str = "highs", *, solver: str | None = None) -> SequenceParetoResult:
    r"""Least sequence-level bias TV(P_A^{(T)}, q^{(T)}) with E[N_rej] ≤ R: an exact LP.

    Verifiers: the rejection-based template of §5 with prefix-dependent b_n(·|x_{1:n−1})
    and P_n(·|x_{1:n−1}) (any randomisation over them too). Their laws are linear in the
    *flows* w_acc(x_{1:n}) = P(output prefix is x_{1:n} and token n was accepted) and
    w_rej(x_{1:n}) (… and token n was produced by a rejection); with
    W(x_{1:n}) = w_acc(x_{1:n}) + w_rej(x_{1:n}) and W(∅) = 1:

    .. math::
        \min_{w, t}\ \tfrac12 \sum_{x_{1:T}} t(x_{1:T}) \quad \text{s.t.} \quad
        \sum_{x} W(x_{1:n-1} x) = W(x_{1:n-1}),\quad
        0 \le w_{acc}(x_{1:n}) \le W(x_{1:n-1})\, p_n(x_n | x_{1:n-1}),\quad w_{rej} \ge 0,

    .. math::
        \sum_{n, x_{1:n}} w_{rej}(x_{1:n}) \le R, \qquad
        -t \le W(x_{1:T}) - q(x_{1:T}) \le t.

    The accepted-flow bound holds because the draft token at step n, given the output
    prefix, is p_n-distributed; conversely any feasible flow is realised by
    b_n = w_acc / (W(prefix) p_n) and P_n ∝ w_rej(prefix, ·). E[N_rej] is the total
    rejected flow. For R ≤ T the constraint "= R" has the same value (moving accepted
    flow to rejected flow leaves W unchanged). At R = 0 the output is the draft's law,
    and the value is 0 exactly from R = E_SD[N_rej] on (Theorems 1–2).

    Parameters
    ----------
    draft, target : Source
        Same vocabulary V, horizons ≥ T.
    horizon : int
        T ≥ 1; the LP has 2 Σ_{n≤T} V^n + V^T variables (at most
        :data:`MAX_SEQUENCE_LP_VARIABLES`, or :data:`MAX_SEQUENCE_CVXPY_VARIABLES` for cvxpy).
    rejections : float >= 0 or None
        The budget R (``None`` or ``inf``: no budget).
    method, solver
        As in :func:`min_bias`.
    """
    T = _check_sources(draft, target, horizon)
    _check_method(method)
    V = draft.vocab_size
    budget = None if rejections is None else float(rejections)
    if budget is not None and (math.isnan(budget) or budget < 0):
        raise ValueError(f"rejections: expected a budget >= 0 on E[N_rej], got {rejections!r}")
    if budget is not None and math.isinf(budget):
        budget = None
    _, n_var = _sequence_sizes(V, T)
    limit = MAX_SEQUENCE_LP_VARIABLES if method == "highs" else MAX_SEQUENCE_CVXPY_VARIABLES
    if n_var > limit:
        raise ValueError(f"the sequence LP for vocab {V}, horizon {T} has {n_var:,} variables, above the {method} "
                         f"limit of {limit:,}; use a smaller vocabulary or horizon")
    prow = _level_rows(draft, T)
    qT = target.enumerate(T).probs
    c, A_ub, b_ub, A_eq, b_eq, bounds, offs, sizes = _sequence_lp(prow, qT, V, T, budget)
    x, status, message, label = _lp_solve(c, A_ub, b_ub, A_eq, b_eq, bounds, method, solver,
                                          f"sequence Pareto LP (V={V}, T={T}, R={budget})")
    tol = PARETO_RESIDUAL_TOL * (1.0 if method == "highs" else 1e3)
    resid = max(float(np.abs(A_eq @ x - b_eq).max()), float(np.maximum(A_ub[:, :] @ x - b_ub, 0).max()),
                float(np.maximum(-x, 0).max()))
    if not np.isfinite(resid) or resid > tol:
        raise ParetoSolveError(f"{label} reported success ({message}) but its flows miss the constraints by "
                               f"{resid:.3g} > {tol:g}")
    x = np.maximum(x, 0.0)
    acc = [x[offs[n]:offs[n] + sizes[n]] for n in range(T)]
    rej = [x[offs[n] + sizes[n]:offs[n + 1]] for n in range(T)]
    law = acc[-1] + rej[-1]
    return SequenceParetoResult(float(0.5 * np.abs(law - qT).sum()), math.inf if budget is None else budget,
                                float(sum(r.sum() for r in rej)), law, acc, rej, status, message, label, n_var)


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
    a = np.minimum(p, q + eps)
    r = np.maximum(1.0 - a.sum(axis=1), 0.0)
    gap = np.maximum(q - p, 0.0)
    mass = gap.sum(axis=1, keepdims=True)
    P = np.divide(gap, mass, out=q.copy(), where=mass > 0)
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
    T = _check_sources(draft, target, horizon)
    prow, qrow = _level_rows(draft, T), _level_rows(target, T)
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


def sequence_pareto(draft: Source, target: Source, horizon: int, rejections_grid, method: str = "highs") -> dict:
    """The sequence-level front: the LP value at each budget R against the natural straight lines.

    Returns
    -------
    dict (JSON-ready)
        ``rejections`` (the grid), ``lp_bias`` (:func:`sequence_min_bias` at each R),
        ``lp_rejections`` (E[N_rej] used by the LP optimum), ``per_step`` (the better of
        :func:`per_step_curve`'s two rules, feasible hence ≥ ``lp_bias``), ``per_step_mixture``,
        ``per_step_eps``, ``straight_line`` (TV_seq (1 − R/E_SD)_+: attained by running SD with
        probability R/E_SD and the pure draft otherwise), ``lower_bound``
        (max{0, TV_seq − R}: a run differs from the pure draft run only after a rejection),
        ``tv_seq``, ``sd_rejections`` (eq. (1)), ``min_rejections_unbiased`` (the LP's least
        E[N_rej] with bias 0; Theorem 2 says it equals ``sd_rejections``),
        ``deviation_from_line`` (max over grid points R ≤ E_SD of line − LP),
        ``deviation_from_own_chord`` (the same against the chord through the LP's values at
        R = 0 and R = E_SD), ``is_linear`` (both below 1e-7), ``vocab``, ``horizon``.
    """
    T = _check_sources(draft, target, horizon)
    grid = np.atleast_1d(np.asarray(rejections_grid, dtype=np.float64))
    if grid.size == 0 or not np.all(np.isfinite(grid)) or np.any(grid < 0):
        raise ValueError("rejections_grid: expected a non-empty list of budgets >= 0")
    pT, qT = sequence_laws(draft, target, T)
    tv_seq = float(0.5 * np.abs(pT - qT).sum())
    e_sd = sequence_expected_rejections_sd(draft, target, T)
    lp = [sequence_min_bias(draft, target, T, R, method) for R in grid]
    lp_bias = np.array([res.value for res in lp])
    v0 = sequence_min_bias(draft, target, T, 0.0, method).value
    v_sd = sequence_min_bias(draft, target, T, e_sd, method).value
    min_rej = _min_rejections_unbiased(draft, target, T, method)
    mix = per_step_curve(draft, target, T, grid, "mixture")
    eps = per_step_curve(draft, target, T, grid, "eps")
    line = tv_seq * np.maximum(0.0, 1.0 - grid / e_sd) if e_sd > 0 else np.zeros_like(grid)
    chord = v0 + (v_sd - v0) * np.minimum(grid / e_sd, 1.0) if e_sd > 0 else np.full_like(grid, v0)
    inside = grid <= e_sd
    dev_line = float(np.max(line[inside] - lp_bias[inside])) if inside.any() else 0.0
    dev_chord = float(np.max(np.abs(chord[inside] - lp_bias[inside]))) if inside.any() else 0.0
    return {
        "vocab": int(draft.vocab_size), "horizon": T, "method": lp[0].method,
        "rejections": grid.tolist(), "lp_bias": lp_bias.tolist(),
        "lp_rejections": [res.rejections for res in lp],
        "per_step": np.minimum(mix["bias"], eps["bias"]).tolist(),
        "per_step_mixture": mix["bias"], "per_step_eps": eps["bias"],
        "straight_line": line.tolist(), "lower_bound": np.maximum(0.0, tv_seq - grid).tolist(),
        "tv_seq": tv_seq, "sd_rejections": e_sd, "lp_bias_at_zero": v0, "lp_bias_at_sd": v_sd,
        "min_rejections_unbiased": min_rej,
        "deviation_from_line": dev_line, "deviation_from_own_chord": dev_chord,
        "is_linear": bool(dev_line < 1e-7 and dev_chord < 1e-7),
    }


def _min_rejections_unbiased(draft: Source, target: Source, T: int, method: str) -> float:
    """min E[N_rej] subject to W_T = q^{(T)}: the flow LP with the objective and leaf constraints swapped."""
    V = draft.vocab_size
    prow = _level_rows(draft, T)
    qT = target.enumerate(T).probs
    c, A_ub, b_ub, A_eq, b_eq, bounds, offs, sizes = _sequence_lp(prow, qT, V, T, None)
    n_flow = int(offs[-1])
    c = np.zeros(n_flow)
    for n in range(T):
        c[offs[n] + sizes[n]:offs[n + 1]] = 1.0
    m = sizes[-1]
    leaf = sp.csr_array((np.ones(2 * m), (np.r_[np.arange(m), np.arange(m)],
                                          np.r_[offs[-2] + np.arange(m), offs[-2] + m + np.arange(m)])),
                        shape=(m, n_flow))
    A_ub = A_ub[:, :n_flow][: A_ub.shape[0] - 2 * m]  # drop the leaf |.| rows and the t columns
    b_ub = b_ub[: b_ub.size - 2 * m]
    A_eq = sp.vstack([A_eq[:, :n_flow], leaf]).tocsr()
    b_eq = np.concatenate([b_eq, qT])
    x, *_ = _lp_solve(c, A_ub if A_ub.shape[0] else None, b_ub if A_ub.shape[0] else None, A_eq, b_eq,
                      bounds[:n_flow], method, None, "unbiased minimal-rejection LP")
    return float(c @ np.maximum(x, 0.0))


# ------------------------------------------------------------------- figure
def default_sequence_pair(seed: int = 7) -> tuple[MarkovSource, MarkovSource]:
    """The sequence panel's default pair: ``random_markov(3, 1.0, horizon=3, seed=seed)``."""
    return random_markov(3, 1.0, horizon=3, seed=seed)


def pareto_figure_data(draft=None, target=None, *, scale: float = 1.0) -> dict:
    """JSON-ready data of the two-panel Pareto figure.

    Panel 1 (token level, default the §7 worked example p = (0.5, 0.3, 0.2),
    q = (0.2, 0.3, 0.5)): the front max{0, TV − r} for r ∈ [0, 1], the unattainable
    region below it, Decoding-UNO and Decoding-OPT over an ε grid, and LP optima
    (:func:`min_bias`) at several r. Panel 2: :func:`sequence_pareto` for
    :func:`default_sequence_pair` (V = 3, T = 3). ``scale`` multiplies the grid sizes.
    """
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: expected a positive number, got {scale!r}")
    p, q = _rows(DEFAULT_DRAFT if draft is None else draft, DEFAULT_TARGET if target is None else target)
    tv = float(total_variation(p, q))
    n_front = max(11, int(101 * scale))
    r_grid = np.linspace(0.0, 1.0, n_front)
    eps_max = max(float(np.max(np.maximum(p - q, 0.0))), 1e-12)
    eps_grid = np.linspace(0.0, eps_max, max(6, int(41 * scale)))
    lp_r = np.linspace(0.0, min(1.0, 1.5 * tv) if tv > 0 else 1.0, max(4, int(9 * scale)))
    lp_points = [min_bias(p, q, r) for r in lp_r]
    seq_draft, seq_target = default_sequence_pair()
    e_sd = sequence_expected_rejections_sd(seq_draft, seq_target, 3)
    seq_grid = np.linspace(0.0, 1.2 * e_sd, max(6, int(25 * scale)))
    return {
        "title": "Rejections vs distribution bias (Yin et al. 2024, Theorems 4-5)",
        "token": {
            "draft": p.tolist(), "target": q.tolist(), "tv": tv,
            "front": {"rejection": r_grid.tolist(), "bias": np.maximum(0.0, tv - r_grid).tolist()},
            "unattainable": (f"bias < max(0, TV - r) = max(0, {tv:.4g} - r): the region strictly below the line "
                             f"from (0, {tv:.4g}) to ({tv:.4g}, 0) (Theorem 5)"),
            "opt": family_curve(p, q, eps_grid, "opt"),
            "uno": family_curve(p, q, eps_grid, "uno"),
            "lp": {"rejection": lp_r.tolist(), "bias": [res.value for res in lp_points]},
        },
        "sequence": {"draft": seq_draft.to_json(), "target": seq_target.to_json(),
                     **sequence_pareto(seq_draft, seq_target, 3, seq_grid)},
    }


def render_pareto(data: dict):
    """Two-panel matplotlib Figure from :func:`pareto_figure_data`'s dict."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5), dpi=120)
    tok = data["token"]
    r, front = np.asarray(tok["front"]["rejection"]), np.asarray(tok["front"]["bias"])
    ax1.fill_between(r, 0.0, front, color="0.85", label="unattainable")
    ax1.plot(r, front, "k-", lw=1.5, label="front max(0, TV - r)")
    ax1.plot(tok["uno"]["rejection"], tok["uno"]["bias"], "o-", ms=3, color="C3", label="Decoding-UNO (P = q)")
    ax1.plot(tok["opt"]["rejection"], tok["opt"]["bias"], "s-", ms=3, color="C0", label="Decoding-OPT (P = P*)")
    ax1.plot(tok["lp"]["rejection"], tok["lp"]["bias"], "x", color="k", ms=7, label="LP optimum")
    ax1.set_xlim(0, max(1.5 * tok["tv"], 0.05))
    ax1.set_xlabel("rejection probability r")
    ax1.set_ylabel("bias TV(P_A, q)")
    ax1.set_title(f"token level: p = {np.round(tok['draft'], 3).tolist()}, q = {np.round(tok['target'], 3).tolist()}",
                  fontsize=9)
    seq = data["sequence"]
    R = np.asarray(seq["rejections"])
    lower = np.asarray(seq["lower_bound"])
    ax2.fill_between(R, 0.0, np.asarray(seq["lp_bias"]), color="0.85", label="unattainable")
    ax2.plot(R, seq["lp_bias"], "k-", lw=1.5, label="LP front (exact)")
    ax2.plot(R, seq["straight_line"], "--", color="C1", label="straight line (0, TV_seq)-(E_SD, 0)")
    ax2.plot(R, seq["per_step"], ":", color="C2", label="per-step token fronts")
    ax2.plot(R, lower, "-.", color="0.5", lw=1, label="max(0, TV_seq - R)")
    ax2.set_xlabel("expected rejections E[N_rej] (budget R)")
    ax2.set_ylabel("sequence bias TV(P_A, q)")
    ax2.set_title(f"sequence level: V = {seq['vocab']}, T = {seq['horizon']}, "
                  f"max dev. from line {seq['deviation_from_line']:.3g}", fontsize=9)
    for ax in (ax1, ax2):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(data.get("title", ""), fontsize=10)
    return fig
