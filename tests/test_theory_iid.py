"""IID-pair expected accepted lengths (otspec.theory.iid) against independent references.

References: brute-force sums over all V^l blocks (numpy broadcasting, written here), the Bernoulli
table of spec §6, Binomial TVs from scipy.stats.binom (eq. (10)-(11)), and the spec §7 example.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from otspec.errors import SizeLimitError
from otspec.theory.iid import (
    MAX_CLASS_WORK,
    IIDBlockValue,
    iid_block_optimum,
    iid_block_values,
    iid_block_verification,
    iid_token_value,
)

#: Gap documented for V = 50,000, L = 16 (Dirichlet(1) rows and close rows), default step.
DOCUMENTED_GAP = 1e-6
#: The brute force itself is float arithmetic; containment is checked up to this rounding.
ROUND = 1e-13


def brute_force(p, q, L):
    """Per-length terms (token (4), BV (17), optimum (8)) by summing over all V^l blocks."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    P = Q = W = T = np.ones(())
    token, bv, opt = [], [], []
    for _ in range(L):
        P, Q = P[..., None] * p, Q[..., None] * q
        W = np.minimum(P, W[..., None] * q)  # W_l = min{p(x^l), q(x_l) W_{l-1}}
        T = T[..., None] * np.minimum(p, q)  # product of minima
        token.append(T.sum())
        bv.append(W.sum())
        opt.append(np.minimum(P, Q).sum())
    return np.array(token), np.array(bv), np.array(opt)


def random_row(rng, V, zero_prob=0.35):
    w = rng.dirichlet(np.ones(V))
    w[rng.random(V) < zero_prob] = 0.0
    if w.sum() == 0:
        w[rng.integers(V)] = 1.0
    return w / w.sum()


def small_cases(n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        V = int(rng.integers(2, 5))
        yield random_row(rng, V), random_row(rng, V), int(rng.integers(1, 6))


@pytest.mark.parametrize("seed", range(4))
def test_exact_route_equals_brute_force(seed):
    for p, q, L in small_cases(30, seed):
        token, bv, opt = brute_force(p, q, L)
        v = iid_block_values(p, q, L, route="exact")
        assert v.token.value == pytest.approx(token.sum(), abs=1e-12)
        assert v.verification.value == pytest.approx(bv.sum(), abs=1e-12)
        assert v.optimum.value == pytest.approx(opt.sum(), abs=1e-12)
        np.testing.assert_allclose(v.verification.terms, bv, rtol=0, atol=1e-12)
        np.testing.assert_allclose(v.optimum.terms, opt, rtol=0, atol=1e-12)
        assert v.verification.gap == v.optimum.gap == 0.0
        assert v.optimum.method == ("closed form" if L == 1 else "ratio classes (exact)")


@pytest.mark.parametrize("step", [None, 0.7, 0.05, 1e-3])
def test_lattice_bounds_contain_brute_force(step):
    for p, q, L in small_cases(40, seed=11):
        _, bv, opt = brute_force(p, q, L)
        v = iid_block_values(p, q, L, route="lattice", step=step)
        for res, ref in ((v.verification, bv), (v.optimum, opt)):
            assert res.low - ROUND <= ref.sum() <= res.high + ROUND, (p, q, L, res)
            assert np.all(np.array(res.terms_low) - ROUND <= ref)
            assert np.all(ref <= np.array(res.terms_high) + ROUND)
            assert res.low <= res.value <= res.high
            if L > 1:
                assert res.method.startswith("log-ratio lattice, certified bounds (step")


def test_lattice_bounds_many_classes_and_extreme_ratios():
    rng = np.random.default_rng(5)
    cases = [(np.array([1e-300, 0.5, 0.5 - 1e-300, 0.0]), np.array([0.4, 1e-280, 0.3, 0.3]), 5),
             (np.array([5e-324, 0.25, 0.75]), np.array([0.5, 0.5, 0.0]), 4),
             (np.array([0.2, 0.8]), np.array([1e-200, 1.0 - 1e-200]), 5)]
    cases += [(random_row(rng, 8, 0.2), random_row(rng, 8, 0.2), 6) for _ in range(6)]
    for p, q, L in cases:
        exact = iid_block_values(p, q, L, route="exact")
        for step in (None, 0.4, 0.01):
            lat = iid_block_values(p, q, L, route="lattice", step=step)
            for e, b in ((exact.verification, lat.verification), (exact.optimum, lat.optimum)):
                assert b.low - ROUND <= e.value <= b.high + ROUND, (p, q, L, step, e, b)
        if p.size == 4:  # brute force too
            _, bv, opt = brute_force(p, q, L)
            assert exact.verification.value == pytest.approx(bv.sum(), abs=1e-12)
            assert exact.optimum.value == pytest.approx(opt.sum(), abs=1e-12)


def test_lattice_gap_is_small_and_shrinks_with_the_step():
    rng = np.random.default_rng(3)
    p, q = rng.dirichlet(np.ones(50)), rng.dirichlet(np.ones(50))  # 50 classes: lattice only
    coarse = iid_block_values(p, q, 6, route="lattice", step=0.02)
    fine = iid_block_values(p, q, 6, route="lattice", step=0.005)
    for c, f in ((coarse.verification, fine.verification), (coarse.optimum, fine.optimum)):
        assert f.gap < c.gap / 4  # second order in h
        assert max(c.low, f.low) <= min(c.high, f.high)
        assert f.gap < 1e-5


# spec §6 table, q1 = 0.75: (p1, gamma, token (11a), BV (17), optimum (11b))
BERNOULLI_TABLE = [
    (0.25, 1, 0.5000, 0.5000, 0.5000), (0.25, 2, 0.7500, 0.8750, 1.0000),
    (0.25, 4, 0.9375, 1.3203, 1.6250), (0.25, 8, 0.9961, 1.7253, 2.3213),
    (0.5, 2, 1.3125, 1.3750, 1.4375), (0.5, 4, 2.0508, 2.3984, 2.6680),
    (0.5, 8, 2.6997, 3.8651, 4.6720), (0.9, 2, 1.5725, 1.5875, 1.6025),
    (0.9, 4, 2.7086, 2.8305, 2.9557), (0.9, 8, 4.1226, 4.7893, 5.3977),
]


@pytest.mark.parametrize(("p1", "gamma", "token", "bv", "opt"), BERNOULLI_TABLE)
def test_bernoulli_table(p1, gamma, token, bv, opt):
    p, q = [1 - p1, p1], [0.25, 0.75]
    v = iid_block_values(p, q, gamma)
    for res, ref in ((v.token, token), (v.verification, bv), (v.optimum, opt)):
        assert res.gap == 0.0
        assert round(res.value, 4) == pytest.approx(ref, abs=1e-12)
    binom_opt = sum(1 - 0.5 * np.abs(stats.binom.pmf(np.arange(i + 1), i, p1)
                                     - stats.binom.pmf(np.arange(i + 1), i, 0.75)).sum()
                    for i in range(1, gamma + 1))
    assert v.optimum.value == pytest.approx(binom_opt, abs=1e-12)
    assert v.token.value == pytest.approx(sum((1 - abs(p1 - 0.75)) ** i for i in range(1, gamma + 1)), abs=1e-14)


@pytest.mark.parametrize("gamma", [3, 12, 40])
@pytest.mark.parametrize("p1", [0.1, 0.5, 0.75, 0.97])
def test_bernoulli_optimum_is_binomial_tv(p1, gamma):
    ref = sum(1 - 0.5 * np.abs(stats.binom.pmf(np.arange(i + 1), i, p1) - stats.binom.pmf(np.arange(i + 1), i, 0.3)).sum()
              for i in range(1, gamma + 1))
    assert iid_block_optimum([1 - p1, p1], [0.7, 0.3], gamma).value == pytest.approx(ref, abs=1e-11)


def test_spec_binary_example_fractions():
    v = iid_block_values([2 / 3, 1 / 3], [1 / 3, 2 / 3], 2)
    for res, ref in ((v.token, Fraction(10, 9)), (v.verification, Fraction(11, 9)), (v.optimum, Fraction(12, 9))):
        assert res.value == pytest.approx(float(ref), abs=1e-15)


@pytest.mark.parametrize(("d", "dq"), [(1, 1), (2, 1), (3, 2), (4, 4), (4, 1), (4, 3)])
def test_uniform_pairs_small(d, dq):
    V = 4
    p, q = np.zeros(V), np.zeros(V)
    p[:d], q[:dq] = 1 / d, 1 / dq
    for L in (1, 2, 4):
        token, bv, opt = brute_force(p, q, L)
        v = iid_block_values(p, q, L)
        assert v.verification.value == pytest.approx(bv.sum(), abs=1e-12)
        assert v.optimum.value == pytest.approx(opt.sum(), abs=1e-12)
        assert v.token.value == pytest.approx(token.sum(), abs=1e-12)
        if L > 1:
            assert v.optimum.method == "ratio classes (exact)"


def test_uniform_pairs_large_are_exact_two_classes():
    V, d, dq, L = 50_000, 1000, 300, 16
    p, q = np.zeros(V), np.zeros(V)
    p[:d], q[:dq] = 1 / d, 1 / dq
    v = iid_block_values(p, q, L)
    ref = sum((dq / d) ** i for i in range(1, L + 1))  # nested supports: all three coincide
    for res in (v.token, v.verification, v.optimum):
        assert res.value == pytest.approx(ref, rel=1e-13)
    assert v.optimum.method == v.verification.method == "ratio classes (exact)"


def test_identical_rows_give_L():
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(30_000))
    v = iid_block_values(p, p, 8)
    for res in (v.token, v.verification, v.optimum):
        assert res.value == pytest.approx(8.0, abs=1e-12)
    lat = iid_block_values(p, p.copy(), 8, route="lattice")
    assert lat.optimum.low <= 8.0 + ROUND and lat.optimum.high >= 8.0 - ROUND


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_ordering_token_bv_optimum(V, L, seed):
    rng = np.random.default_rng(seed)
    p, q = random_row(rng, V), random_row(rng, V)
    v = iid_block_values(p, q, L)
    assert v.token.value <= v.verification.value + 1e-12  # eq. (18)
    assert v.verification.value <= v.optimum.value + 1e-12
    assert v.optimum.value <= L + 1e-12
    lat = iid_block_values(p, q, L, route="lattice", step=0.05)
    assert v.verification.low - ROUND <= v.verification.value <= lat.verification.high + ROUND
    assert lat.verification.low <= lat.optimum.high and v.token.value <= lat.verification.high + ROUND


def test_single_function_entry_points_agree():
    p, q = [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]
    v = iid_block_values(p, q, 5)
    assert iid_token_value(p, q, 5) == v.token
    assert iid_block_verification(p, q, 5) == v.verification
    assert iid_block_optimum(p, q, 5) == v.optimum
    assert isinstance(v.optimum, IIDBlockValue) and len(v.optimum.terms) == 5
    with pytest.raises(AttributeError):
        v.optimum.value = 0.0  # frozen


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"draft": [[0.5, 0.5]]}, "draft"),
    ({"target": [0.5, 0.25, 0.25]}, "differ in length"),
    ({"draft": [0.5, float("nan")]}, "draft"),
    ({"target": [1.5, -0.5]}, "target"),
    ({"draft": [0.5, 0.6]}, "draft"),
    ({"target": []}, "target"),
    ({"draft_length": True}, "draft_length"),
    ({"draft_length": 2.7}, "draft_length"),
    ({"draft_length": 2.0}, "draft_length"),
    ({"draft_length": -1}, "draft_length"),
    ({"draft_length": 0}, "draft_length"),
    ({"draft_length": "3"}, "draft_length"),
    ({"draft_length": 10**6}, "MAX_DRAFT_LENGTH"),
    ({"route": "fast"}, "route"),
    ({"step": 0.0}, "step"),
    ({"step": float("inf")}, "step"),
    ({"step": True}, "step"),
])
def test_bad_inputs(kwargs, match):
    args = {"draft": [0.5, 0.5], "target": [0.25, 0.75], "draft_length": 3} | kwargs
    with pytest.raises(ValueError, match=match):
        iid_block_values(args.pop("draft"), args.pop("target"), args.pop("draft_length"), **args)


def test_size_limits_refused_before_allocating():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(1000)), rng.dirichlet(np.ones(1000))
    with pytest.raises(SizeLimitError, match="MAX_CLASS_WORK") as err:
        iid_block_values(p, q, 16, route="exact")
    assert err.value.limit == MAX_CLASS_WORK and err.value.size > MAX_CLASS_WORK
    with pytest.raises(SizeLimitError, match="MAX_LATTICE_POINTS"):
        iid_block_values(p, q, 16, route="lattice", step=1e-9)


@pytest.mark.parametrize("close", [False, True])
def test_vocab_50000_length_16(close):
    rng = np.random.default_rng(2025)
    V, L = 50_000, 16
    q = rng.dirichlet(np.ones(V))
    p = q * np.exp(0.1 * rng.standard_normal(V)) if close else rng.dirichlet(np.ones(V))
    v = iid_block_values(p / p.sum(), q, L)
    for res in (v.verification, v.optimum):
        assert res.method.startswith("log-ratio lattice")
        assert res.low <= res.value <= res.high
        assert res.gap < DOCUMENTED_GAP
    assert v.token.value <= v.verification.high and v.verification.low <= v.optimum.high
