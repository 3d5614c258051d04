"""Rejections vs bias (yin_theory.md §7): Theorem 4, Theorem 5's front, b_eps family, sequence-level LP."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog
from strategies import markov_chain, prob_rows

from otspec.figures.pareto import (
    DEFAULT_DRAFT,
    DEFAULT_TARGET,
    default_sequence_pair,
    pareto_figure_data,
    render_pareto,
)
from otspec.solvers.pareto import (
    MAX_SEQUENCE_LP_VARIABLES,
    ParetoResult,
    min_bias,
    sequence_min_bias,
    sequence_pareto,
)
from otspec.sources import IIDSource, TableSource, random_markov
from otspec.theory.pareto import (
    check_fraction,
    family_curve,
    optimal_resampling,
    over_acceptance,
    pareto_front,
    per_step_curve,
    sequence_expected_rejections_sd,
    sequence_laws,
)

R_GRID = (0.0, 1e-3, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0)


@st.composite
def row_pairs(draw, max_vocab: int = 6):
    V = draw(st.integers(1, max_vocab))
    return draw(prob_rows(V)), draw(prob_rows(V))


def tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a) - np.asarray(b)).sum())


# ------------------------------------------------------------------ Theorem 5
_DISJOINT = (np.array([0.7816153257870219, 0.21838467421297827, 0.0, 0.0]),
             np.array([0.0, 0.0, 0.9632991963561205, 0.036700803643879475]))  # ½ Σ|p − q| = 1 + 2e-16 unclipped


@settings(max_examples=60)
@given(row_pairs())
@example(_DISJOINT)
@example((np.array([0.0, 0.0, 0.0, 1.0, 0.0]), np.array([0.0, 0.1, 0.2, 0.0, 0.7])))  # p = e_4, q on {2, 3, 5}
def test_min_bias_highs_equals_linear_front(pair):
    p, q = pair
    for r in R_GRID + (tv(p, q),):
        res = min_bias(p, q, r)
        assert isinstance(res, ParetoResult)
        assert abs(res.value - max(0.0, tv(p, q) - r)) <= 1e-9
        assert abs(res.value - pareto_front(p, q, r)) <= 1e-9
        assert np.all(res.accepted >= 0) and np.all(res.accepted <= p + 1e-12)
        assert np.all(res.resampled >= 0)
        assert abs(res.accepted.sum() - (1 - r)) <= 1e-9 and abs(res.rejection - r) <= 1e-9
        assert np.allclose(res.output_law, res.accepted + res.resampled)
        assert np.all((res.accept_probs >= 0) & (res.accept_probs <= 1))
        assert np.allclose(res.accept_probs * p, res.accepted, atol=1e-12)


@settings(max_examples=8)
@given(row_pairs(max_vocab=4))
def test_min_bias_cvxpy_equals_linear_front(pair):
    p, q = pair
    for r in (0.0, 0.1, 0.5, 1.0):
        res = min_bias(p, q, r, method="cvxpy")
        assert res.method.startswith("cvxpy:")
        assert abs(res.value - max(0.0, tv(p, q) - r)) <= 1e-9


def test_min_bias_cvxpy_clarabel_agrees():
    p, q = DEFAULT_DRAFT, DEFAULT_TARGET
    for r in (0.0, 0.1, 0.2, 0.6):
        assert abs(min_bias(p, q, r, "cvxpy", solver="CLARABEL").value - max(0.0, 0.3 - r)) <= 1e-6


def test_pareto_front_vectorised():
    out = pareto_front(DEFAULT_DRAFT, DEFAULT_TARGET, [0.0, 0.1, 0.3, 0.9])
    np.testing.assert_allclose(out, [0.3, 0.2, 0.0, 0.0], atol=1e-15)


# ------------------------------------------------------------------ Theorem 4
def lp_over_resampling(p, q, b) -> float:
    """min_P TV(p b + r P, q) by an independent LP in (P, t)."""
    V = p.size
    a = p * b
    r = 1 - a.sum()
    c = np.r_[np.zeros(V), 0.5 * np.ones(V)]
    eye = np.eye(V)
    A_ub = np.block([[r * eye, -eye], [-r * eye, -eye]])
    b_ub = np.r_[q - a, a - q]
    A_eq = np.r_[np.ones(V), np.zeros(V)][None]
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=[1.0], bounds=[(0, None)] * (2 * V),
                  method="highs-ds", options={"presolve": False, "primal_feasibility_tolerance": 1e-10})
    assert res.status == 0
    return float(res.fun)


@settings(max_examples=80)
@given(row_pairs(), st.data())
def test_optimal_resampling_matches_lp(pair, data):
    p, q = pair
    V = p.size
    if data.draw(st.integers(0, 2)) == 0:  # a third from the b_eps family
        eps = data.draw(st.floats(0, 1))
        b = over_acceptance(p, q, eps)["accept_probs"]
    else:
        b = np.asarray(data.draw(st.lists(st.one_of(st.just(0.0), st.just(1.0), st.floats(0, 1)),
                                          min_size=V, max_size=V)))
    P, bias = optimal_resampling(p, q, b)
    assert abs(bias - np.maximum(p * b - q, 0).sum()) <= 1e-15
    assert abs(bias - lp_over_resampling(p, q, b)) <= 1e-9
    assert abs(P.sum() - 1) <= 1e-12 and np.all(P >= 0)
    r = 1 - (p * b).sum()
    assert abs(tv(p * b + r * P, q) - bias) <= 1e-12  # P* attains it


def test_optimal_resampling_sd_is_unbiased():
    p, q = np.array(DEFAULT_DRAFT), np.array(DEFAULT_TARGET)
    P, bias = optimal_resampling(p, q, np.minimum(1, q / p))
    assert bias == 0.0
    np.testing.assert_allclose(P, np.maximum(q - p, 0) / np.maximum(q - p, 0).sum())


# ---------------------------------------------------------- b_eps family
TABLE = [  # eps, rejection, bias UNO, bias OPT (yin_theory.md §7)
    (0.0, 0.30, 0.150, 0.000),
    (0.05, 0.25, 0.175, 0.050),
    (0.1, 0.20, 0.200, 0.100),
    (0.2, 0.10, 0.250, 0.200),
    (0.3, 0.00, 0.300, 0.300),
]


@pytest.mark.parametrize(("eps", "rej", "uno", "opt"), TABLE)
def test_worked_table(eps, rej, uno, opt):
    o = over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, eps, "opt")
    u = over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, eps, "uno")
    assert o["rejection"] == pytest.approx(rej, abs=1e-12)
    assert u["rejection"] == pytest.approx(rej, abs=1e-12)
    assert o["bias"] == pytest.approx(opt, abs=1e-12)
    assert u["bias"] == pytest.approx(uno, abs=1e-12)
    assert o["bias"] == pytest.approx(o["front"], abs=1e-12)


def test_family_curve_table():
    eps = [row[0] for row in TABLE]
    for mode, col in (("uno", 2), ("opt", 3)):
        curve = family_curve(DEFAULT_DRAFT, DEFAULT_TARGET, eps, mode)
        json.dumps(curve)
        np.testing.assert_allclose(curve["rejection"], [row[1] for row in TABLE], atol=1e-12)
        np.testing.assert_allclose(curve["bias"], [row[col] for row in TABLE], atol=1e-12)


@settings(max_examples=60)
@given(row_pairs(), st.floats(0, 1.5))
def test_opt_on_front_uno_above(pair, eps):
    p, q = pair
    o, u = over_acceptance(p, q, eps, "opt"), over_acceptance(p, q, eps, "uno")
    T = tv(p, q)
    r = T - np.minimum(np.maximum(p - q, 0), eps).sum()  # eq. (9)
    assert abs(o["rejection"] - r) <= 1e-12 and abs(u["rejection"] - r) <= 1e-12
    assert abs(o["bias"] - max(0.0, T - r)) <= 1e-12  # exactly on the front
    assert u["bias"] >= o["bias"] - 1e-12  # UNO never below
    assert abs(o["bias"] - min_bias(p, q, o["rejection"]).value) <= 1e-9
    gap = np.maximum(q - p, 0)
    if gap.sum() > 0:  # P* = the standard SD residual for this family
        np.testing.assert_allclose(o["resampling"], gap / gap.sum(), atol=1e-12)
    np.testing.assert_allclose(o["output_law"].sum(), 1.0, atol=1e-12)


def test_uno_strictly_above_front_on_worked_example():
    for eps in (0.0, 0.05, 0.1, 0.2):
        assert over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, eps, "uno")["bias"] > 0.3 - (0.3 - eps) + 1e-3


def test_infinite_eps_accepts_everything():
    o = over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, np.inf)
    assert o["rejection"] == 0.0 and o["bias"] == pytest.approx(0.3)


# ------------------------------------------------------------- sequence level
def crisp_pair():
    """yin_theory.md §4: T = 2, E_SD[N_rej] = 0.9."""
    draft = TableSource({(): [0.9, 0.1], (0,): [1.0, 0.0], (1,): [0.5, 0.5]}, 2, 2)
    target = TableSource({(): [0.1, 0.9], (0,): [0.0, 1.0], (1,): [0.5, 0.5]}, 2, 2)
    return draft, target


def test_sd_rejections_crisp_example():
    d, t = crisp_pair()
    assert sequence_expected_rejections_sd(d, t, 2) == pytest.approx(0.9, abs=1e-15)


def check_flows(res, draft, T):
    """The flows are a verifier: conservation, 0 <= b <= 1, and the rejection count."""
    V = draft.vocab_size
    parent = np.ones(1)
    for n in range(T):
        acc, rej = res.accepted[n], res.rejected[n]
        W = acc + rej
        np.testing.assert_allclose(W.reshape(-1, V).sum(axis=1), parent, atol=1e-9)
        p = draft.next_probs(draft.enumerate(n).tokens).reshape(-1)
        assert np.all(acc <= np.repeat(parent, V) * p + 1e-9)
        parent = W
    assert res.rejections <= res.budget + 1e-9
    assert res.rejections == pytest.approx(sum(r.sum() for r in res.rejected))


@pytest.mark.parametrize(("seed", "T", "V"), [(0, 2, 2), (1, 3, 3), (2, 4, 3), (3, 4, 2)])
def test_sequence_lp_endpoints_monotone_convex(seed, T, V):
    d, t = random_markov(V, 1.0, horizon=T, seed=seed)
    pT, qT = sequence_laws(d, t, T)
    e_sd = sequence_expected_rejections_sd(d, t, T)
    r0 = sequence_min_bias(d, t, T, 0.0)
    assert r0.value == pytest.approx(tv(pT, qT), abs=1e-9)  # no rejection: the draft's law
    np.testing.assert_allclose(r0.output_law, pT, atol=1e-9)
    for R in (e_sd, e_sd + 0.1, T, None):
        assert sequence_min_bias(d, t, T, R).value <= 1e-9
    grid = np.linspace(0, e_sd, 11)
    vals = np.array([sequence_min_bias(d, t, T, R).value for R in grid])
    assert np.all(np.diff(vals) <= 1e-9)  # non-increasing
    assert np.all(vals[:-2] - 2 * vals[1:-1] + vals[2:] >= -1e-8)  # convex on an even grid
    check_flows(sequence_min_bias(d, t, T, 0.4 * e_sd), d, T)


def test_sequence_lp_cvxpy_agrees_with_highs():
    d, t = random_markov(3, 1.0, horizon=3, seed=4)
    e_sd = sequence_expected_rejections_sd(d, t, 3)
    for R in (0.0, 0.3 * e_sd, 0.7 * e_sd):
        h = sequence_min_bias(d, t, 3, R)
        c = sequence_min_bias(d, t, 3, R, "cvxpy")
        assert c.method.startswith("cvxpy:")
        assert abs(h.value - c.value) <= 1e-8
        assert abs(h.value - sequence_min_bias(d, t, 3, R, "cvxpy", solver="CLARABEL").value) <= 1e-6


@settings(max_examples=15)
@given(st.data())
def test_sequence_horizon_one_is_token_front(data):
    V = data.draw(st.integers(1, 4))
    p, q = data.draw(prob_rows(V)), data.draw(prob_rows(V))
    for R in (0.0, 0.1, 0.4, 1.0):
        val = sequence_min_bias(IIDSource(p), IIDSource(q), 1, R).value
        assert abs(val - max(0.0, tv(p, q) - R)) <= 1e-9


@settings(max_examples=10)
@given(markov_chain(2, 3), markov_chain(2, 3))
def test_sequence_pareto_bounds_hypothesis(draft, target):
    e_sd = sequence_expected_rejections_sd(draft, target, 3)
    out = sequence_pareto(draft, target, 3, np.linspace(0, max(e_sd, 1e-3), 6))
    lp = np.array(out["lp_bias"])
    assert np.all(np.array(out["lower_bound"]) <= lp + 1e-8)
    assert np.all(lp <= np.array(out["per_step"]) + 1e-8)  # per-step constructions are feasible
    assert np.all(lp <= np.array(out["straight_line"]) + 1e-8)  # convex below its chord
    assert out["min_rejections_unbiased"] == pytest.approx(e_sd, abs=1e-8)  # Theorem 2, sequence level


def test_sequence_front_not_linear_on_default_pair():
    d, t = default_sequence_pair()
    e_sd = sequence_expected_rejections_sd(d, t, 3)
    out = sequence_pareto(d, t, 3, np.linspace(0, e_sd, 21))
    json.dumps(out)
    assert out["lp_bias_at_zero"] == pytest.approx(out["tv_seq"], abs=1e-9)
    assert out["lp_bias_at_sd"] <= 1e-9
    assert out["min_rejections_unbiased"] == pytest.approx(out["sd_rejections"], abs=1e-8)
    assert out["deviation_from_line"] > 0.01 and not out["is_linear"]
    assert out["tv_seq"] < out["sd_rejections"]


def test_sequence_front_linear_when_bounds_meet():
    """Crisp example: TV_seq = E_SD = 0.9, so the front is the line max(0, 0.9 − R)."""
    d, t = crisp_pair()
    out = sequence_pareto(d, t, 2, np.linspace(0, 1.2, 13))
    assert out["tv_seq"] == pytest.approx(0.9)
    np.testing.assert_allclose(out["lp_bias"], np.maximum(0, 0.9 - np.linspace(0, 1.2, 13)), atol=1e-9)
    assert out["is_linear"]


def test_per_step_curve_hits_budget():
    d, t = random_markov(3, 1.0, horizon=3, seed=2)
    e_sd = sequence_expected_rejections_sd(d, t, 3)
    for rule in ("mixture", "eps"):
        c = per_step_curve(d, t, 3, [0.0, 0.5 * e_sd, e_sd, 2 * e_sd], rule)
        np.testing.assert_allclose(c["rejections"][:3], [0.0, 0.5 * e_sd, e_sd], atol=1e-9)
        assert c["bias"][2] <= 1e-12 and c["bias"][3] <= 1e-12
        assert c["bias"][0] == pytest.approx(tv(*sequence_laws(d, t, 3)), abs=1e-12)


# -------------------------------------------------------------------- errors
@pytest.mark.parametrize(("draft", "match"), [([0.5, -0.1, 0.6], "negative"), ([0.5, np.nan, 0.5], "NaN"),
                                              ([0.5, 0.3, 0.3], "sums to")])
def test_invalid_rows(draft, match):
    with pytest.raises(ValueError, match=match):
        min_bias(draft, DEFAULT_TARGET, 0.1)
    with pytest.raises(ValueError, match=match):
        over_acceptance(draft, DEFAULT_TARGET, 0.1)


def test_vocab_mismatch_names_sizes():
    with pytest.raises(ValueError, match="draft has 2 tokens, target has 3"):
        min_bias([0.5, 0.5], DEFAULT_TARGET, 0.1)
    d2, _ = random_markov(2, 1.0, horizon=2, seed=0)
    _, t3 = random_markov(3, 1.0, horizon=2, seed=0)
    with pytest.raises(ValueError, match="draft has 2 tokens, target has 3"):
        sequence_min_bias(d2, t3, 2, 0.1)


@pytest.mark.parametrize("r", [-0.1, 1.1, np.nan, np.inf, "x"])
def test_rejection_outside_unit_interval(r):
    with pytest.raises(ValueError, match="rejection"):
        min_bias(DEFAULT_DRAFT, DEFAULT_TARGET, r)


def test_other_argument_errors():
    with pytest.raises(ValueError, match="method"):
        min_bias(DEFAULT_DRAFT, DEFAULT_TARGET, 0.1, method="glpk")
    with pytest.raises(ValueError, match="eps"):
        over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, -0.1)
    with pytest.raises(ValueError, match="eps"):
        over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, np.nan)
    with pytest.raises(ValueError, match="mode"):
        over_acceptance(DEFAULT_DRAFT, DEFAULT_TARGET, 0.1, "standard")
    with pytest.raises(ValueError, match="accept_probs"):
        optimal_resampling(DEFAULT_DRAFT, DEFAULT_TARGET, [0.5, 1.5, 0.0])
    with pytest.raises(ValueError, match="accept_probs"):
        optimal_resampling(DEFAULT_DRAFT, DEFAULT_TARGET, [0.5, 0.5])
    d, t = random_markov(3, 1.0, horizon=3, seed=0)
    with pytest.raises(ValueError, match="rejections"):
        sequence_min_bias(d, t, 3, -1.0)
    with pytest.raises(ValueError, match="horizon"):
        sequence_min_bias(d, t, 0, 0.1)
    with pytest.raises(ValueError, match="horizon"):
        sequence_min_bias(d, t, 4, 0.1)  # beyond the sources' horizon
    with pytest.raises(ValueError, match="rejections_grid"):
        sequence_pareto(d, t, 3, [])


def test_sequence_size_limit():
    d, t = random_markov(8, 1.0, seed=0)  # stationary: any horizon
    with pytest.raises(ValueError, match=f"{MAX_SEQUENCE_LP_VARIABLES:,}"):
        sequence_min_bias(d, t, 6, 0.1)


# -------------------------------------------------------------------- figure
def test_figure_data_and_render():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = pareto_figure_data(scale=0.1)
    json.loads(json.dumps(data))
    tok = data["token"]
    assert tok["tv"] == pytest.approx(0.3)
    np.testing.assert_allclose(tok["lp"]["bias"], np.maximum(0, 0.3 - np.array(tok["lp"]["rejection"])), atol=1e-9)
    np.testing.assert_allclose(tok["opt"]["bias"], tok["opt"]["front"], atol=1e-12)
    assert all(u >= o for u, o in zip(tok["uno"]["bias"], tok["opt"]["bias"], strict=True))
    assert "unattainable" in tok and not data["sequence"]["is_linear"]
    fig = render_pareto(data)
    assert len(fig.axes) == 2
    plt.close(fig)
    with pytest.raises(ValueError, match="scale"):
        pareto_figure_data(scale=0)


def test_front_gap_is_reported_at_its_true_maximum_and_per_step_claims_hold():
    """REPORT quotes the largest gap between the straight line and the exact front, not a grid value;
    on the default pair the per-step ε rule dips below the line, the θ-mixture rule never does."""
    d, t = default_sequence_pair()
    res = sequence_pareto(d, t, 3, np.linspace(0.0, 1.2, 25))
    e_sd, tv_seq = res["sd_rejections"], res["tv_seq"]
    fine = np.linspace(0.0, e_sd, 401)
    gaps = tv_seq * (1 - fine / e_sd) - np.array([sequence_min_bias(d, t, 3, R).value for R in fine])
    assert res["max_deviation_from_line"] >= gaps.max() - 1e-12
    assert res["max_deviation_from_line"] >= res["deviation_from_line"]
    assert res["max_deviation_from_line"] - gaps.max() < 1e-3  # a maximum, not a runaway
    line = tv_seq * (1 - fine / e_sd)
    eps = line - np.array(per_step_curve(d, t, 3, fine, "eps")["bias"])
    mix = line - np.array(per_step_curve(d, t, 3, fine, "mixture")["bias"])
    assert 0.002 < eps.max() < 0.003 and 0.85 < fine[eps.argmax()] < 1.0
    assert mix.max() <= 1e-9


def test_rejection_probabilities_tolerate_rounding_at_the_bounds():
    """A TV of 1 + 2e-16 (disjoint supports, float sums) is a rejection probability of 1; 1 + 1e-9 is an error."""
    p, q = _DISJOINT
    assert float(0.5 * np.abs(p - q).sum()) > 1.0  # the rounding this guards against
    assert check_fraction(1.0 + 2e-16, "r") == 1.0 and check_fraction(-1e-17, "r") == 0.0
    assert pareto_front(p, q, 1.0 + 2e-16) == 0.0
    res = min_bias(p, q, 0.5 * np.abs(p - q).sum())
    assert res.value <= 1e-9 and abs(res.rejection - 1.0) <= 1e-12
    for bad in (1.0 + 1e-9, -1e-9, float("nan")):
        with pytest.raises(ValueError, match="rejection"):
            check_fraction(bad, "rejection")
        with pytest.raises(ValueError, match="rejection"):
            pareto_front(p, q, bad)
