"""Row-free Monte Carlo of one multi-draft step (issue 26, item 1): the joint law of (accepted, Y) of each sampler
against the verifier's exact law summed over every candidate tuple, with the G-test's power shown against named
bugs; the closed forms at V = 32,000; rows and row-free agreeing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from otspec.drafts.laws import draft_tuple_law
from otspec.engine import Backend, simulate_candidates
from otspec.engine.rowfree_multi import ROW_FREE_CANDIDATES, candidate_sampler
from otspec.sources import random_iid
from otspec.verifiers import MULTI_DRAFT_REGISTRY
from tests.strategies import g_test

NAMES = ["naive", "kseq", "multiround", "multiround_without_replacement"]
PAIRS = [
    (np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])),
    (np.array([0.6, 0.0, 0.4, 0.0]), np.array([0.2, 0.3, 0.0, 0.5])),  # zeros on both sides
    (np.array([0.97, 0.01, 0.01, 0.01]), np.array([0.01, 0.01, 0.01, 0.97])),  # drafted mass near 1
    (np.full(4, 0.25), np.full(4, 0.25)),  # p = q: every residual has mass 0
    (np.array([0.7, 0.3]), np.array([0.2, 0.8])),
]


def exact_joint(verifier, p, q, k) -> np.ndarray:
    """P(accepted = a, Y = y) as 2V cells (rejected first), by enumerating every candidate tuple."""
    tuples, probs = draft_tuple_law(p, k, verifier.replacement)
    n = len(tuples)
    law = verifier.law(tuples, np.broadcast_to(p, (n, p.size)), np.broadcast_to(q, (n, q.size)))
    return np.concatenate([probs @ np.asarray(law.rejected), probs @ np.asarray(law.accepted)])


def p_value(sample, p, q, joint, n=100_000, seed=0) -> float:
    acc, y = sample(n, np.random.default_rng(seed))
    counts = np.bincount(acc * p.size + y, minlength=2 * p.size)
    assert counts[joint == 0].sum() == 0, "a cell of probability 0 was drawn"
    g, dof = g_test(counts, joint)
    return float(stats.chi2.sf(g, dof))


@pytest.mark.parametrize("name,engine", [(n, "default") for n in NAMES] + [("multiround_without_replacement", "numpy")])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("pair", range(len(PAIRS)))
def test_row_free_candidates_follow_the_exact_joint_law(name, engine, k, pair, monkeypatch):
    """Every sampler (multi-round without replacement: the compiled kernel by default, and the numpy recursion)."""
    if engine == "numpy":
        monkeypatch.setattr("otspec.engine.rowfree_multi.available", lambda: False)
    p, q = PAIRS[pair]
    verifier = MULTI_DRAFT_REGISTRY[name]()
    joint = exact_joint(verifier, p, q, k)
    assert abs(joint.sum() - 1) < 1e-12 and np.allclose(joint[:p.size] + joint[p.size:], q, atol=1e-12)
    assert p_value(candidate_sampler(verifier, p, q, k), p, q, joint, seed=k + 10 * pair) > 1e-4


@settings(max_examples=25)
@given(data=st.data())
def test_row_free_candidates_on_random_pairs(data):
    V = data.draw(st.integers(2, 6))
    seed = data.draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
    if data.draw(st.booleans()):  # exact zeros
        p[rng.integers(V)] = 0.0
        p /= p.sum()
    name, k = data.draw(st.sampled_from(NAMES)), data.draw(st.integers(1, 4))
    verifier = MULTI_DRAFT_REGISTRY[name]()
    joint = exact_joint(verifier, p, q, k)
    assert p_value(candidate_sampler(verifier, p, q, k), p, q, joint, n=50_000, seed=seed) > 1e-5


def test_the_g_test_sees_a_round_that_forgets_the_drafted_mass(monkeypatch):
    """Named bug: without replacement, round i's acceptance taken against p instead of p / Z_i (the draft law of the
    tokens not drafted yet). The same test that passes the sampler rejects it."""
    p, q = PAIRS[0]
    verifier = MULTI_DRAFT_REGISTRY["multiround_without_replacement"]()
    joint = exact_joint(verifier, p, q, 3)
    monkeypatch.setattr("otspec.engine.rowfree_multi.available", lambda: False)  # the numpy recursion
    monkeypatch.setattr("otspec.engine.rowfree_multi._acceptance_without",
                        lambda r, bb, Z, S: np.clip((r - bb) / np.where(S > 0, S, 1.0), 0.0, 1.0))
    assert p_value(candidate_sampler(verifier, p, q, 3), p, q, joint) < 1e-6


def test_the_g_test_sees_k_seq_without_its_division_factor(monkeypatch):
    """Named bug: k-Seq accepting with min(1, q/p) (ρ = 1) but keeping the residual of ρ*."""
    import dataclasses

    from otspec.theory.multidraft import kseq_parameters

    p, q = PAIRS[0]
    good = MULTI_DRAFT_REGISTRY["kseq"]()
    joint = exact_joint(good, p, q, 3)
    monkeypatch.setattr("otspec.engine.rowfree_multi.kseq_parameters",
                        lambda *a: dataclasses.replace(kseq_parameters(*a), rho=np.ones(1)))
    assert p_value(candidate_sampler(good, p, q, 3), p, q, joint) < 1e-6


def test_at_llm_vocabulary_the_estimates_hold_the_closed_forms():
    d, t = random_iid(32000, 1.0, seed=0)
    for name, k in [("naive", 4), ("kseq", 2), ("multiround", 4), ("multiround_without_replacement", 2)]:
        verifier = MULTI_DRAFT_REGISTRY[name]()
        res = simulate_candidates(d.probs, t.probs, verifier, k, 200_000, seed=1, progress=False, confidence=0.999)
        exact = verifier.expected_acceptance(d.probs, t.probs, k)
        assert res.accepted.low <= exact <= res.accepted.high, (name, exact, res.accepted)


def test_rows_and_row_free_estimate_the_same_acceptance():
    p, q = PAIRS[0]
    for name in NAMES:
        verifier = MULTI_DRAFT_REGISTRY[name]()
        a, b = (simulate_candidates(p, q, verifier, 3, 100_000, seed=3, progress=False, confidence=0.999,
                                    backend=Backend(method=m))
                for m in ("rows", "row_free"))
        assert abs(a.accepted.value - b.accepted.value) < 3 * np.hypot(a.accepted.stderr, b.accepted.stderr) + 1e-12


def test_verifiers_without_a_row_free_sampler_are_refused_by_name():
    p, q = PAIRS[0]
    assert {cls.name for cls in ROW_FREE_CANDIDATES} == {*NAMES, "otm"}  # OTM: tests/test_engine_rowfree_otm.py
    otm_without = MULTI_DRAFT_REGISTRY["otm"](replacement=False)
    assert candidate_sampler(otm_without, p, q, 2) is None
    with pytest.raises(ValueError, match="row_free.*'otm'"):
        simulate_candidates(p, q, otm_without, 2, 10, backend=Backend(method="row_free"))
    with pytest.raises(ValueError, match="method"):
        simulate_candidates(p, q, MULTI_DRAFT_REGISTRY["kseq"](), 2, 10, backend=Backend(method="fast"))
