r"""Rejections versus distribution bias: the exact programmes (Yin et al. 2024, Theorems 4–5).

Spec ``yin_theory.md`` §7; closed forms in :mod:`otspec.theory.pareto`. A rejection-based
verifier at one position (prefix fixed) draws x̃ ~ p (the **draft**), accepts it with
probability b(x̃) and otherwise resamples from P. With accepted mass a(x) = p(x) b(x),
rejection probability r = 1 − Σ a and resampled mass s = r P, its output law is a + s and
its bias is TV(a + s, q) against the **target** q.

* :func:`min_bias` — the token-level LP (HiGHS or cvxpy), whose value is Theorem 5's front
  max{0, TV(p, q) − r} (:func:`otspec.theory.pareto.pareto_front`); it lives in
  :mod:`otspec.solvers.pareto_token` with its result type and error, all re-exported here;
* :func:`sequence_min_bias` — the exact LP over prefix-dependent rejection-based verifiers
  for a whole length-T response, in "flow" variables (not in the paper);
* :func:`sequence_pareto` — its value function against the straight line from
  (0, TV(p^{(T)}, q^{(T)})) to (E_SD[N_rej], 0), two per-step constructions (upper bounds)
  and the coupling lower bound max{0, TV_seq − R}.

Finding: the exact sequence front is convex and piecewise linear, starts with slope −1 (on
the lower bound) and lies strictly below the straight line — which is itself attainable by
randomising whole runs between SD and the pure draft — e.g. by about 0.090 (TV_seq = 0.601,
E_SD = 1.006) on the figure's default pair (maximum 0.0902 at R ≈ 0.42, between grid
points); the front is linear only when TV_seq = E_SD[N_rej] (the two bounds meet). Applying
the token-level front at every prefix (:func:`~otspec.theory.pareto.per_step_curve`) gives
feasible upper bounds: on the default pair the θ-mixture rule stays on or above the straight
line, while the ε rule (Decoding-OPT at every prefix) dips below it by up to 0.0026 for
R in about [0.87, 1.0] — still far above the exact front.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..checks import COUNT_CAP, capped_power, check_real, format_count, real_grid
from ..errors import SizeLimitError
from ..pairs import check_pair_horizon
from ..sources import Source
from ..theory.pareto import (
    level_rows,
    per_step_curve,
    sequence_expected_rejections_sd,
    sequence_laws,
)
from .lp import LPBackend, check_method, solve_lp
from .pareto_token import (
    MAX_TOKEN_LP_VOCAB,
    PARETO_RESIDUAL_TOL,
    ParetoResult,
    ParetoSolveError,
    min_bias,
)
from .rejections import min_rejection_lp

__all__ = [
    "MAX_SEQUENCE_CVXPY_VARIABLES",
    "MAX_SEQUENCE_LP_VARIABLES",
    "MAX_TOKEN_LP_VOCAB",
    "PARETO_RESIDUAL_TOL",
    "ParetoResult",
    "ParetoSolveError",
    "SequenceParetoResult",
    "min_bias",
    "sequence_min_bias",
    "sequence_pareto",
]

#: Most variables of the sequence LP (2 per prefix-tree node plus one per leaf) for HiGHS;
#: V = 3, T = 4 needs 321, V = 4, T = 6 about 15,000 (solved in well under a second).
MAX_SEQUENCE_LP_VARIABLES = 60_000
#: The same limit for the cvxpy route.
MAX_SEQUENCE_CVXPY_VARIABLES = 20_000


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


# ----------------------------------------------------------- sequence level
def _sequence_sizes(V: int, T: int) -> tuple[int, int]:
    nodes = min(sum(capped_power(V, n) for n in range(1, min(T, 64) + 1)), COUNT_CAP)
    return nodes, 2 * nodes + capped_power(V, T)


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
    r"""Least sequence-level bias TV(P_A^{(T)}, q^{(T)}) with E[N_rej] ≤ R: an exact LP (extends Theorem 5 of [1]).

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
    method : {"highs", "cvxpy"}, default "highs"
        As in :func:`min_bias`.
    solver : str, optional
        cvxpy solver name; default None.

    Returns
    -------
    SequenceParetoResult
        ``value`` (the least bias), ``rejections`` (E[N_rej] of the optimum), ``output_law`` of
        shape (V**T,), and the flows ``accepted`` / ``rejected``: lists of T arrays, level n of
        shape (V**n,).

    Raises
    ------
    ValueError
        On a vocabulary mismatch, a horizon beyond either source, a negative or NaN budget, an
        unknown method; :class:`~otspec.errors.SizeLimitError` above the variable limit.
    ParetoSolveError
        If the solver fails or its flows miss the constraints by more than
        :data:`PARETO_RESIDUAL_TOL` (×1e3 for cvxpy).

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    One position (T = 1) is the token-level front max{0, TV(p, q) − R}; here
    p = Ber(0.5), q = Ber(0.25), TV = 0.25, and R = 0 leaves the draft's law itself.

    >>> from otspec.sources import bernoulli
    >>> d, t = bernoulli(0.5), bernoulli(0.25)
    >>> round(sequence_min_bias(d, t, 1, 0.125).value, 9)  # 0.25 - 0.125
    0.125
    >>> round(sequence_min_bias(d, t, 1, 0.0).value, 9)  # TV(p, q)
    0.25
    """
    T = check_pair_horizon(draft, target, horizon)
    check_method(method)
    V = draft.vocab_size
    budget = None if rejections is None else check_real(rejections, "rejections", low=0.0, allow_inf=True)
    if budget is not None and math.isinf(budget):
        budget = None
    _, n_var = _sequence_sizes(V, T)
    limit = MAX_SEQUENCE_LP_VARIABLES if method == "highs" else MAX_SEQUENCE_CVXPY_VARIABLES
    if n_var > limit:
        raise SizeLimitError(f"the sequence LP for vocab {V}, horizon {T} has {format_count(n_var)} variables, above the {method} "
                             f"limit of {limit:,}; use a smaller vocabulary or horizon", size=n_var, limit=limit)
    prow = level_rows(draft, T)
    qT = target.enumerate(T).probs
    c, A_ub, b_ub, A_eq, b_eq, bounds, offs, sizes = _sequence_lp(prow, qT, V, T, budget)
    x, status, message, label = solve_lp(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                                         backend=LPBackend(method, solver), error=ParetoSolveError,
                                         what=f"sequence Pareto LP (V={V}, T={T}, R={budget})")
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


def _max_gap_below_line(draft: Source, target: Source, T: int, tv_seq: float, e_sd: float, method: str,
                        tol: float = 1e-9) -> tuple[float, float]:
    """max over R in [0, E_SD] of line(R) − v(R), and its argmax, by golden-section search.

    v (the LP value at budget R) is convex and piecewise linear in R (an LP's value as a
    function of one right-hand side), and the line is linear, so line − v is concave: the
    search converges to its maximum, which sits at a breakpoint of v between grid points.
    """
    if e_sd <= 0:
        return 0.0, 0.0

    def gap(R):
        return tv_seq * (1.0 - R / e_sd) - sequence_min_bias(draft, target, T, R, method).value

    lo, hi = 0.0, e_sd
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - inv_phi * (hi - lo), lo + inv_phi * (hi - lo)
    ga, gb = gap(a), gap(b)
    while hi - lo > tol * e_sd:
        if ga >= gb:
            hi, b, gb = b, a, ga
            a = hi - inv_phi * (hi - lo)
            ga = gap(a)
        else:
            lo, a, ga = a, b, gb
            b = lo + inv_phi * (hi - lo)
            gb = gap(b)
    R = a if ga >= gb else b
    return max(ga, gb, 0.0), R


def sequence_pareto(draft: Source, target: Source, horizon: int, rejections_grid, method: str = "highs") -> dict:
    """The sequence-level front: the LP value at each budget R against the natural straight lines.

    lp_bias(R) = :func:`sequence_min_bias` at budget R, compared with the straight line
    TV_seq (1 − R/E_SD)_+ from (0, TV(p^{(T)}, q^{(T)})) to (E_SD[N_rej], 0) (Theorem 5 of [1]
    applied to whole sequences), with the lower bound max{0, TV_seq − R} and with the per-step
    rules of :func:`~otspec.theory.pareto.per_step_curve` (upper bounds). E_SD[N_rej] is eq. (1).

    Parameters
    ----------
    draft, target : Source
        The draft model p and the target model q, over one vocabulary of V tokens.
    horizon : int
        T >= 1, within both horizons (the LP size limits of :func:`sequence_min_bias` apply).
    rejections_grid : array_like of float, shape (G,)
        Budgets R >= 0.
    method : {"highs", "cvxpy"}, default "highs"
        The LP route.

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
        ``max_deviation_from_line`` and ``max_deviation_at`` (the true maximum between grid
        points, by golden-section search on the concave line − LP),
        ``deviation_from_own_chord`` (the same against the chord through the LP's values at
        R = 0 and R = E_SD), ``is_linear`` (both below 1e-7), ``vocab``, ``horizon``. Grid-indexed
        entries are lists of length G.

    Raises
    ------
    ValueError
        On an empty, negative or non-finite grid, or as :func:`sequence_min_bias`.
    ParetoSolveError
        If a solver fails.

    References
    ----------
    .. [1] M. Yin, M. Chen, K. Huang, M. Wang, "A Theoretical Perspective for Speculative Decoding
       Algorithm", NeurIPS 2024, arXiv:2411.00841.

    Examples
    --------
    Identical models: SD never rejects (E_SD[N_rej] = 0) and every budget reaches bias 0, so the
    front is the point (0, 0). (A pair with E_SD > 0 adds a golden-section search of ~45 LPs; at
    T = 1 its front is the token-level line max{0, TV − R}.)

    >>> from otspec.sources import bernoulli
    >>> out = sequence_pareto(bernoulli(0.5), bernoulli(0.5), 2, [0.0, 0.5])
    >>> [round(b, 9) for b in out["lp_bias"]], out["sd_rejections"], out["is_linear"]
    ([0.0, 0.0], 0.0, True)
    """
    T = check_pair_horizon(draft, target, horizon)
    grid = real_grid(rejections_grid, "rejections_grid", low=0.0)  # '0.1' and True refused, not read as numbers
    pT, qT = sequence_laws(draft, target, T)
    tv_seq = float(0.5 * np.abs(pT - qT).sum())
    e_sd = sequence_expected_rejections_sd(draft, target, T)
    lp = [sequence_min_bias(draft, target, T, R, method) for R in grid]
    lp_bias = np.array([res.value for res in lp])
    v0 = sequence_min_bias(draft, target, T, 0.0, method).value
    v_sd = sequence_min_bias(draft, target, T, e_sd, method).value
    min_rej = min_rejection_lp(draft, target, T, method)[0]
    mix = per_step_curve(draft, target, T, grid, "mixture")
    eps = per_step_curve(draft, target, T, grid, "eps")
    line = tv_seq * np.maximum(0.0, 1.0 - grid / e_sd) if e_sd > 0 else np.zeros_like(grid)
    chord = v0 + (v_sd - v0) * np.minimum(grid / e_sd, 1.0) if e_sd > 0 else np.full_like(grid, v0)
    inside = grid <= e_sd
    dev_line = float(np.max(line[inside] - lp_bias[inside])) if inside.any() else 0.0
    dev_chord = float(np.max(np.abs(chord[inside] - lp_bias[inside]))) if inside.any() else 0.0
    max_dev, max_at = _max_gap_below_line(draft, target, T, tv_seq, e_sd, method)
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
        "max_deviation_from_line": max(max_dev, dev_line), "max_deviation_at": max_at,
        "is_linear": bool(dev_line < 1e-7 and dev_chord < 1e-7),
    }
