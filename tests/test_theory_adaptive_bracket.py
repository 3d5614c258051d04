"""The SpecDec++ optimum at any vocabulary size: one threshold for every step, and a certified latency bracket.

Three independent routes: the backward induction over class counts (Dinkelbach, exact at toy sizes), an
enumeration of every drafted prefix with a minimum over threshold rules (written here), and the lattice bracket.
"""

from __future__ import annotations

import itertools
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otspec.errors import SizeLimitError
from otspec.sources import random_iid
from otspec.theory.adaptive import fixed_length_latency, optimal_stopping
from otspec.theory.adaptive_bracket import bracket_latency


def enumerated_optimum(p, q, K, t_draft, t_target):
    """min over c of the latency of "draft another iff Π_j > c", every drafted prefix of length < K enumerated.

    Returns the latency and the ranges (low, high) of E[K] and E[R] over the rules within 1e-12 of it (ties and
    Π_j so small that they do not change a rounded ratio).
    """
    live = p > 0
    with np.errstate(over="ignore"):
        p, a = p[live], np.minimum(1.0, q[live] / p[live])
    beta = float(p @ a)
    mass, value = [np.ones(1)], [np.ones(1)]
    for _ in range(1, K):  # Π_j over all j-tuples, j = 1..K-1
        mass.append(np.outer(mass[-1], p).ravel())
        value.append(np.outer(value[-1], a).ravel())
    w, v = np.concatenate([np.zeros(0), *mass[1:]]), np.concatenate([np.zeros(0), *value[1:]])
    order = np.argsort(-v, kind="stable")
    w, v = w[order], v[order]
    # group equal values: a rule cannot split an atom of Π
    ends = np.flatnonzero(np.r_[np.diff(v) != 0, True]) if v.size else np.zeros(0, dtype=int)
    cw = np.r_[0.0, np.cumsum(w)[ends]]
    cm = np.r_[0.0, np.cumsum(w * v)[ends]]
    ratio = (t_target + t_draft * (1 + cw)) / (1 + beta * (1 + cm))
    best = float(ratio.min())
    near = np.flatnonzero(ratio <= best * (1 + 1e-12))
    return best, (1.0 + cw[near[0]], 1.0 + cw[near[-1]]), (1.0 + beta * (1.0 + cm[near[0]]),
                                                           1.0 + beta * (1.0 + cm[near[-1]]))


def _pair(rows):
    p, q = np.array(rows[0]), np.array(rows[1])
    p = p / p.sum() if p.sum() > 0 else np.ones_like(p) / p.size
    q = q / q.sum() if q.sum() > 0 else np.ones_like(q) / q.size
    return p, q


ROWS = st.integers(2, 6).flatmap(lambda V: st.tuples(
    st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0]) | st.floats(0.0, 1.0), min_size=V, max_size=V),
    st.lists(st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0]) | st.floats(0.0, 1.0), min_size=V, max_size=V)))


@settings(max_examples=60, deadline=None)
@given(ROWS, st.integers(1, 4), st.sampled_from([0.0, 0.01, 0.1, 0.3, 1.0, 3.0]) | st.floats(0.0, 2.0),
       st.floats(0.2, 3.0))
def test_the_induction_the_enumeration_and_the_bracket_agree(rows, K, t_draft, t_target):
    """Ties, zero rows, q = 0 on drafted tokens (dead drafts), q >= p everywhere (sure drafts), free drafting."""
    p, q = _pair(rows)
    induction = optimal_stopping(p, q, K, t_draft, t_target, method="induction")
    enum, drafted, tokens = enumerated_optimum(p, q, K, t_draft, t_target)
    assert induction.latency == pytest.approx(enum, rel=1e-12, abs=1e-14)
    bracket = optimal_stopping(p, q, K, t_draft, t_target, method="bracket")
    low, high = bracket.latency_bounds
    assert low - 1e-13 <= induction.latency <= high + 1e-13
    assert abs(bracket.latency - induction.latency) <= 1e-9 * t_target
    for (got_lo, got_hi), (lo, hi) in ((drafted, bracket.expected_drafted_bounds),
                                       (tokens, bracket.expected_tokens_bounds)):
        assert lo - 1e-12 <= got_hi and got_lo <= hi + 1e-12  # some optimal rule is inside the bounds


@settings(max_examples=40, deadline=None)
@given(ROWS, st.integers(2, 5), st.floats(0.01, 1.0))
def test_one_threshold_serves_every_step(rows, K, t_draft):
    """Myopic optimality: the backward induction's per-step intervals all hold h = 1 - t_draft / (λ* β)."""
    p, q = _pair(rows)
    opt = optimal_stopping(p, q, K, t_draft, method="induction")
    beta = float(np.minimum(p, q).sum())
    if beta == 0:
        return
    h = 1.0 - t_draft / (opt.latency * beta)
    for step in opt.thresholds:
        if step["continue_below"] is not None:
            assert step["low"] - 1e-9 <= h <= step["high"] + 1e-9


@pytest.mark.parametrize("V, K, t_draft", [(700, 3, 0.1), (700, 3, 0.02), (90, 4, 0.2)])
def test_the_bracket_holds_where_the_lattice_is_dense(V, K, t_draft):
    """Hundreds of thousands of distinct Π_j near the threshold: the FFT lattice is what is tested here."""
    d, t = random_iid(V, 1.0, seed=V + K)
    exact, drafted, tokens = enumerated_optimum(d.probs, t.probs, K, t_draft, 1.0)
    opt = optimal_stopping(d.probs, t.probs, K, t_draft, method="bracket")
    assert opt.latency_bounds[0] <= exact <= opt.latency_bounds[1]
    assert abs(opt.latency - exact) <= 1e-9
    assert opt.expected_drafted_bounds[0] <= drafted[0] <= drafted[1] <= opt.expected_drafted_bounds[1]
    assert opt.expected_tokens_bounds[0] <= tokens[0] <= tokens[1] <= opt.expected_tokens_bounds[1]
    assert opt.expected_drafted_bounds[1] - opt.expected_drafted_bounds[0] < 1e-2


def test_llm_vocabulary_within_a_second_and_between_its_policy_bounds():
    d, t = random_iid(32000, 1.0, seed=0)
    t0 = time.perf_counter()
    opt = optimal_stopping(d.probs, t.probs, 8, 0.1)  # auto: the bracket
    assert time.perf_counter() - t0 < 5.0  # the benchmark holds the 1 s goal; this guards against a cliff
    assert opt.method == "bracket" and opt.latency_bounds[1] - opt.latency_bounds[0] <= 1e-9
    beta = float(np.minimum(d.probs, t.probs).sum())
    best_fixed = min(fixed_length_latency(d.probs, t.probs, k, 0.1) for k in range(1, 9))
    assert opt.latency_bounds[1] <= best_fixed  # every fixed length is a policy
    assert opt.latency_bounds[0] >= 1.1 / (1 + sum(beta**ell for ell in range(1, 9)))  # E[K] >= 1, E[R] <= 1 + Σβ^l
    assert 1.0 < opt.expected_drafted_bounds[0] <= opt.expected_drafted_bounds[1] < 8.0
    # E[K] and E[R] of the rule are consistent with its latency
    lo = (0.1 * opt.expected_drafted_bounds[0] + 1.0) / opt.expected_tokens_bounds[1]
    hi = (0.1 * opt.expected_drafted_bounds[1] + 1.0) / opt.expected_tokens_bounds[0]
    assert lo <= opt.latency <= hi
    h = {step["continue_below"] for step in opt.thresholds}
    assert len(h) == 1 and 0 < h.pop() < 1


def test_a_looser_tolerance_gives_a_wider_bracket_around_the_same_optimum():
    d, t = random_iid(5000, 0.5, seed=3)
    tight = optimal_stopping(d.probs, t.probs, 6, 0.05, method="bracket", tol=1e-10)
    loose = optimal_stopping(d.probs, t.probs, 6, 0.05, method="bracket", tol=1e-5)
    assert loose.latency_bounds[0] <= tight.latency_bounds[0] <= tight.latency_bounds[1] <= loose.latency_bounds[1]
    assert tight.latency_bounds[1] - tight.latency_bounds[0] < loose.latency_bounds[1] - loose.latency_bounds[0]


def test_closed_form_corners():
    p = np.array([0.2, 0.3, 0.5])
    same = optimal_stopping(p, p, 6, 0.1, method="bracket")  # every draft accepted: draft all six
    assert same.latency_bounds[0] <= 1.6 / 7 <= same.latency_bounds[1] <= same.latency_bounds[0] + 1e-9
    free = optimal_stopping(p, [0.5, 0.5, 0.0], 5, 0.0, method="bracket")  # drafting is free: draft all five
    beta = 0.2 + 0.3
    assert free.latency == 1.0 / (1 + sum(beta**ell for ell in range(1, 6)))  # closed form, no lattice
    dead = optimal_stopping([1.0, 0.0], [0.0, 1.0], 4, 0.2, method="bracket")
    assert dead.latency == pytest.approx(1.2) and dead.expected_drafted == 1.0
    dear = optimal_stopping(p, [0.25, 0.35, 0.4], 4, 5.0, method="bracket")  # a draft costs more than it can save
    assert dear.latency == pytest.approx(6.0 / (1 + 0.2 + 0.3 + 0.4)) and dear.expected_drafted == 1.0
    one = optimal_stopping(p, [0.25, 0.35, 0.4], 1, 0.1, method="bracket")
    assert one.latency == pytest.approx(fixed_length_latency(p, [0.25, 0.35, 0.4], 1, 0.1))


def test_errors_and_the_induction_limit():
    with pytest.raises(ValueError, match="method"):
        optimal_stopping([0.5, 0.5], [0.5, 0.5], 3, 0.1, method="lp")
    with pytest.raises(ValueError, match="tol"):
        optimal_stopping([0.5, 0.5], [0.5, 0.5], 3, 0.1, tol=0.0)
    with pytest.raises(ValueError, match="vocabular|length"):
        optimal_stopping([0.5, 0.5], [0.2, 0.3, 0.5], 3, 0.1)
    d, t = random_iid(2000, 1.0, seed=0)
    with pytest.raises(SizeLimitError, match="MAX_ADAPTIVE"):
        optimal_stopping(d.probs, t.probs, 3, 0.1, method="induction")
    assert optimal_stopping(d.probs, t.probs, 3, 0.1).method == "bracket"  # auto never refuses an IID pair


def test_an_unreachable_tolerance_warns_and_still_returns_valid_bounds():
    d, t = random_iid(300, 1.0, seed=1)
    exact = enumerated_optimum(d.probs, t.probs, 3, 0.1, 1.0)[0]
    with pytest.warns(RuntimeWarning, match="bracket"):
        opt = optimal_stopping(d.probs, t.probs, 3, 0.1, method="bracket", tol=1e-16)
    assert opt.latency_bounds[0] <= exact <= opt.latency_bounds[1]


def test_the_bracket_is_direct_about_its_inputs():
    """bracket_latency on acceptance probabilities: a pair whose drafts are all sure."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        b = bracket_latency(np.array([0.5, 0.5]), np.array([1.0, 1.0]), 4, 0.1, 1.0)
    assert b.latency[0] <= 1.4 / 5 <= b.latency[1] <= b.latency[0] + 1e-9
    assert b.drafted[0] <= 4.0 <= b.drafted[1]


def test_every_prefix_enumeration_matches_a_direct_sum():
    """The test's own enumeration, against a literal loop over prefixes on a small pair."""
    p, q = np.array([0.6, 0.4]), np.array([0.3, 0.7])
    a = np.minimum(1, q / p)
    beta = float(p @ a)
    best = np.inf
    for c in [0.0, 0.2, 0.45, 0.5, 0.7, 1.0, 2.0]:
        drafted, reward = 1.0, 1.0 + beta
        for j in (1, 2):
            for h in itertools.product(range(2), repeat=j):
                pi, pr = np.prod(a[list(h)]), np.prod(p[list(h)])
                if pi > c:
                    drafted += pr
                    reward += pr * pi * beta
        best = min(best, (0.1 * drafted + 1.0) / reward)
    assert enumerated_optimum(p, q, 3, 0.1, 1.0)[0] == pytest.approx(best, rel=1e-12)


def test_a_threshold_at_one_up_to_rounding_is_a_tie_not_a_lattice():
    """t_draft = λ_1 β in exact arithmetic, c_min = 1 - 1 ulp in floating point (found by hypothesis): the bracket
    takes the tie branch instead of a lattice of width 1e-16, and agrees with the induction."""
    p, q = np.array([0.5, 0.5]), np.array([0.0, 1.0])
    exact = optimal_stopping(p, q, 2, 0.1, 0.2, method="induction")
    bracket = optimal_stopping(p, q, 2, 0.1, 0.2, method="bracket")
    low, high = bracket.latency_bounds
    assert low - 1e-13 <= exact.latency <= high + 1e-13 and abs(bracket.latency - exact.latency) <= 1e-12
    assert bracket.expected_drafted_bounds[0] <= exact.expected_drafted <= bracket.expected_drafted_bounds[1] + 1e-12
