"""OTM-k without rows (issue 26, item 1): the score rule's selection law by exact integration over every candidate
tuple, the acceptance α_k and Y ~ q to rounding, the sampler against that law by a G-test (with a named bug it must
see), and the optimum at V = 32,000."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from scipy import stats

from otspec.engine import Backend, simulate_candidates
from otspec.engine.rowfree import RowProfile
from otspec.engine.rowfree_multi import candidate_sampler, has_row_free_candidates
from otspec.engine.rowfree_otm import otm_scores, otm_step_sampler
from otspec.solvers import otm_value
from otspec.sources import random_iid
from otspec.verifiers import OTMVerify
from tests.strategies import g_test


def pieces(sc, z):
    lo, hi = sc.first[z], sc.first[z + 1]
    return sc.start[lo:hi], sc.length[lo:hi]


def selection_given(sc, tokens, p):
    """P(position i is selected | candidates ``tokens``) = ∫ f_i Π_{j≠i} F_j dv: on each segment between the
    pieces' endpoints every density is constant and every CDF linear, so the integrand is a polynomial."""
    cuts = {0.0, 1.0}
    for z in set(tokens):
        s, ln = pieces(sc, z)
        cuts.update(s.tolist())
        cuts.update((s + ln).tolist())
    cuts = sorted(cuts)
    out = np.zeros(len(tokens))
    for u0, u1 in itertools.pairwise(cuts):
        mid = 0.5 * (u0 + u1)
        dens, cdf = [], []
        for z in tokens:
            s, ln = pieces(sc, z)
            cdf.append(float(np.clip(np.minimum(s + ln, u0) - s, 0.0, None).sum()) / p[z])
            dens.append(1.0 / p[z] if ((s <= mid) & (mid < s + ln)).any() else 0.0)
        for i in range(len(tokens)):
            if dens[i] == 0.0:
                continue
            poly = np.polynomial.Polynomial([dens[i]])
            for j in range(len(tokens)):
                if j != i:
                    poly = poly * np.polynomial.Polynomial([cdf[j], dens[j]])
            out[i] += poly.integ()(u1 - u0)
    return out


def exact_joint(sc, p, q, k):
    """(r by enumeration, P(accepted = a, Y = y) as 2V cells, rejected first) of the score sampler."""
    V = p.size
    accept = np.divide(q, sc.r, out=np.ones_like(q), where=sc.r > q)
    res = np.clip(q - sc.r, 0.0, None)
    res = res / res.sum() if res.sum() > 0 else res
    r = np.zeros(V)
    joint = np.zeros(2 * V)
    for tokens in itertools.product(np.flatnonzero(p > 0), repeat=k):
        prob = float(np.prod(p[list(tokens)]))
        drafted = np.isin(np.arange(V), tokens)
        for i, z in enumerate(selection_given(sc, tokens, p)):
            x = tokens[i]
            r[x] += prob * z
            joint[V + x] += prob * z * accept[x]
            miss = prob * z * (1.0 - accept[x]) * res
            joint[V:] += np.where(drafted, miss, 0.0)
            joint[:V] += np.where(drafted, 0.0, miss)
    return r, joint


CASES = [
    (np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4]), 2),
    (np.array([0.6, 0.0, 0.4, 0.0]), np.array([0.2, 0.3, 0.0, 0.5]), 3),  # zeros on both sides
    (np.array([0.97, 0.01, 0.01, 0.01]), np.array([0.01, 0.01, 0.01, 0.97]), 3),
    (np.full(4, 0.25), np.full(4, 0.25), 2),  # p = q: α = 1
    (np.array([0.7, 0.3]), np.array([0.2, 0.8]), 1),
    (np.array([0.2, 0.2, 0.2, 0.2, 0.2]), np.array([0.05, 0.1, 0.15, 0.3, 0.4]), 3),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_selection_law_and_the_optimum_by_enumeration(case):
    p, q, k = CASES[case]
    sc = otm_scores(p, q, k)
    r, joint = exact_joint(sc, p, q, k)
    assert np.abs(r - sc.r).max() < 1e-13  # the law the verifier uses is the law the scores produce
    assert abs(joint.sum() - 1.0) < 1e-13
    assert np.abs(joint[:p.size] + joint[p.size:] - q).max() < 1e-13  # lossless: Y ~ q
    assert abs(joint[p.size:].sum() - otm_value(p, q, k)) < 1e-13  # the optimum α_k
    start, length = sc.start, sc.length  # the score sets partition [0, 1]
    order = np.argsort(start)
    assert abs(length.sum() - 1.0) < 1e-13 and np.all(np.diff(start[order]) >= length[order][:-1] - 1e-15)
    assert sc.length.size <= 2 * p.size


def test_random_pairs_reach_the_optimum_by_enumeration():
    rng = np.random.default_rng(3)
    for _ in range(25):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        p, q = rng.dirichlet(np.ones(V) * rng.choice([0.3, 1.0, 3.0])), rng.dirichlet(np.ones(V) * rng.choice([0.3, 3.0]))
        if rng.random() < 0.3:
            q[rng.integers(V)] = 0.0
            q /= q.sum()
        if rng.random() < 0.3:
            p[rng.integers(V)] = 0.0
            p /= p.sum()
        sc = otm_scores(p, q, k)
        r, joint = exact_joint(sc, p, q, k)
        assert np.abs(r - sc.r).max() < 1e-13
        assert np.abs(joint[:V] + joint[V:] - q).max() < 1e-13
        assert abs(joint[V:].sum() - otm_value(p, q, k)) < 1e-13


def _p_value(sample, joint, V, n=200_000, seed=0):
    acc, y = sample(n, np.random.default_rng(seed))
    counts = np.bincount(acc * V + y, minlength=2 * V)
    assert counts[joint <= 1e-15].sum() == 0, "a cell of probability 0 was drawn"
    g, dof = g_test(counts, joint)
    return float(stats.chi2.sf(g, dof))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_sampler_follows_its_exact_law(case):
    p, q, k = CASES[case]
    _, joint = exact_joint(otm_scores(p, q, k), p, q, k)
    assert _p_value(candidate_sampler(OTMVerify(), p, q, k), joint, p.size, seed=case) > 1e-4


def test_the_g_test_sees_a_sampler_that_verifies_against_the_draft(monkeypatch):
    """Named bug: the selected candidate verified as if it were a plain draft from p (r = p), not against the law of
    the score rule. Y is no longer distributed as q; the same test rejects it."""
    p, q, k = CASES[0]
    _, joint = exact_joint(otm_scores(p, q, k), p, q, k)
    real = otm_scores

    def wrong(p_, q_, k_):
        sc = real(p_, q_, k_)
        sc.r = p_.copy()
        return sc

    monkeypatch.setattr("otspec.engine.rowfree_otm.otm_scores", wrong)
    assert _p_value(otm_step_sampler(RowProfile(p, q), p, q, k), joint, p.size) < 1e-6


def test_at_llm_vocabulary_the_estimate_holds_the_optimum():
    d, t = random_iid(32000, 1.0, seed=0)
    for k in (2, 4):
        t0 = time.perf_counter()
        res = simulate_candidates(d.probs, t.probs, OTMVerify(), k, 300_000, seed=1, progress=False, confidence=0.999)
        assert time.perf_counter() - t0 < 20.0  # the benchmark holds the goal; this guards against rows coming back
        exact = otm_value(d.probs, t.probs, k)
        assert res.accepted.low <= exact <= res.accepted.high, (k, exact, res.accepted)


def test_rows_and_row_free_estimate_the_same_acceptance():
    p, q, k = CASES[0]
    a, b = (simulate_candidates(p, q, OTMVerify(), k, 100_000, seed=3, progress=False, confidence=0.999,
                                backend=Backend(method=m))
            for m in ("rows", "row_free"))
    assert abs(a.accepted.value - b.accepted.value) < 3 * np.hypot(a.accepted.stderr, b.accepted.stderr) + 1e-12


def test_drafts_without_replacement_keep_the_plan():
    p, q, k = CASES[0]
    assert has_row_free_candidates(OTMVerify()) and not has_row_free_candidates(OTMVerify(replacement=False))
    assert candidate_sampler(OTMVerify(replacement=False), p, q, k) is None
    with pytest.raises(ValueError, match="row_free.*'otm'"):
        simulate_candidates(p, q, OTMVerify(replacement=False), k, 10, backend=Backend(method="row_free"))
