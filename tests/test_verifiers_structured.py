"""Hu et al.'s greedy drafts and SpecHub's hub pair: the draws' exact laws, both verifiers lossless and at the
optimum of their draw (closed form = the OTM-k LP over the draw), samplers with power, trees, Hu's comparison."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from strategies import markov_pairs

from otspec.drafts import DraftTree, draft_tuple_law, sample_candidates
from otspec.engine import simulate_candidates, simulate_tree, tree_bound, tree_law
from otspec.solvers.otm import otm_lp
from otspec.solvers.otm_dual import otm_value, structured_value
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import GreedyDraftVerify, KSeq, NaiveMultiCandidate, SpecHubVerify
from otspec.verifiers.structured import greedy_kernel


def _rows(draw):
    """A probability row with zeros from hypothesis."""
    weights = draw(st.lists(st.sampled_from([0.0, 0.05, 0.2, 0.5, 1.0, 3.0]), min_size=2, max_size=6))
    w = np.array(weights)
    if w.sum() == 0:
        w[0] = 1.0
    return w / w.sum()


@st.composite
def row_pairs(draw):
    p = _rows(draw)
    q = draw(st.lists(st.sampled_from([0.0, 0.1, 0.4, 1.0, 2.0]), min_size=p.size, max_size=p.size))
    q = np.array(q)
    if q.sum() == 0:
        q[-1] = 1.0
    return p, q / q.sum()


def test_the_draws_by_hand():
    """p = (0.1, 0.4, 0.3, 0.2): greedy k = 3 keeps tokens 1, 2 and draws the last from {0, 3} as 1:2; the hub
    is token 1, pairs (j, 1) with p(j) and (1, j) with 0.4·p(j)/0.6; the samplers follow these laws (G-test)."""
    p = np.array([0.1, 0.4, 0.3, 0.2])
    tuples, probs = draft_tuple_law(p, 3, "greedy")
    assert tuples.tolist() == [[1, 2, 0], [1, 2, 3]] and np.allclose(probs, [1 / 3, 2 / 3])
    tuples, probs = draft_tuple_law(p, 2, "hub")
    expect = {(0, 1): 0.1, (2, 1): 0.3, (3, 1): 0.2, (1, 0): 0.4 * 0.1 / 0.6, (1, 2): 0.4 * 0.3 / 0.6,
              (1, 3): 0.4 * 0.2 / 0.6}
    assert {tuple(t): w for t, w in zip(tuples.tolist(), probs, strict=True)} == pytest.approx(expect, abs=1e-15)
    rng = np.random.default_rng(0)
    for k, draw in ((3, "greedy"), (2, "hub")):
        tuples, probs = draft_tuple_law(p, k, draw)
        drawn = sample_candidates(np.tile(p, (30_000, 1)), k, rng, replacement=draw)
        index = {tuple(t): i for i, t in enumerate(tuples.tolist())}
        counts = np.bincount([index[tuple(t)] for t in drawn.tolist()], minlength=len(tuples))
        assert stats.power_divergence(counts, 30_000 * probs, lambda_="log-likelihood").pvalue > 1e-4
    with pytest.raises(ValueError, match="k <= 2"):
        draft_tuple_law(p, 3, "hub")


@settings(max_examples=60, deadline=None)
@given(row_pairs(), st.sampled_from([(GreedyDraftVerify(), 2), (GreedyDraftVerify(), 3), (SpecHubVerify(), 2),
                                     (SpecHubVerify(), 1)]))
def test_lossless_and_at_the_optimum_of_the_draw(pair, setup):
    """Averaged over the draw's exact tuple law, Y follows q to 1e-12; P(Y is a candidate) equals the closed form
    q(T) + Σ_{x∉T} min{q, p'}, which equals the OTM-k LP over the same tuple law (HiGHS, another route)."""
    p, q = pair
    verifier, k = setup
    draw = verifier.replacement
    tuples, probs = draft_tuple_law(p, k, draw)
    law = verifier.law(tuples, np.broadcast_to(p, (len(tuples), p.size)), np.broadcast_to(q, (len(tuples), p.size)))
    joint = np.asarray(law.accept_probs)[:, :, None] * np.asarray(law.correction_probs)
    assert np.abs(probs @ joint.sum(axis=1) - q).max() < 1e-12
    accepted = float(probs @ np.asarray(law.accept_probs)[:, 1])
    closed = verifier.expected_acceptance(p, q, k)
    assert abs(accepted - closed) < 1e-12
    assert abs(closed - otm_lp(p, q, k, draw).value) < 1e-8


def test_spechub_is_the_greedy_draw_at_two_drafts_and_hu_orders_the_draws():
    """SpecHub's pair is, as a set, Hu et al.'s greedy draw at k = 2 (same optimum, to the last bit, on random rows);
    at the optimum, drafting without replacement is never below i.i.d. drafting (Hu et al.'s finding), here on 400
    random rows for k = 2, 3, 4."""
    rng = np.random.default_rng(3)
    for _ in range(400):
        V = int(rng.integers(2, 8))
        p, q = rng.dirichlet(np.full(V, rng.choice([0.2, 1.0, 5.0]))), rng.dirichlet(np.full(V, rng.choice([0.2, 1.0])))
        assert structured_value(p, q, 2, "hub") == structured_value(p, q, 2, "greedy")
        for k in (2, 3, 4):
            assert otm_value(p, q, k, False) >= otm_value(p, q, k, True) - 1e-12


def _greedy_against_p(candidates, p, q):
    """The EAGLE #183-style bug for greedy drafts: verify the random draft against p, not the p' it was drawn from."""
    candidates = np.asarray(candidates)
    fake = np.concatenate([np.full_like(candidates[:, :-1], -1), candidates[:, -1:]], axis=1)
    return greedy_kernel(fake, p, q)


def test_the_samplers_follow_their_laws_and_the_test_sees_the_wrong_draft_row():
    """sample() on every tuple of the draw against law() (G-test on (tuple, Y), 40,000 draws); the same test
    rejects verifying the greedy draft against p instead of p', and SpecHub's pair in the wrong order (both biased
    outputs, shown exactly too)."""
    p, q = np.array([0.45, 0.25, 0.2, 0.1]), np.array([0.1, 0.3, 0.2, 0.4])
    rng, n = np.random.default_rng(1), 40_000
    for verifier, k in ((GreedyDraftVerify(), 3), (SpecHubVerify(), 2)):
        tuples, probs = draft_tuple_law(p, k, verifier.replacement)
        pick = rng.choice(len(tuples), size=n, p=probs)
        P, Q = np.broadcast_to(p, (n, 4)), np.broadcast_to(q, (n, 4))
        out = verifier.sample(tuples[pick], P, Q, rng)
        law = verifier.law(tuples, P[:len(tuples)], Q[:len(tuples)])
        cell_probs = (probs[:, None] * (np.asarray(law.accept_probs)[:, :, None]
                                        * np.asarray(law.correction_probs)).sum(axis=1)).ravel()
        counts = np.bincount(pick * 4 + np.asarray(out.token), minlength=cell_probs.size)
        live = cell_probs > 0
        assert counts[~live].sum() == 0
        assert stats.power_divergence(counts[live], n * cell_probs[live], lambda_="log-likelihood").pvalue > 1e-4
        if verifier.name == "spechub":  # the port pitfall: a pair verified in the other order (children reordered)
            swapped = verifier.law(tuples[:, ::-1], P[:len(tuples)], Q[:len(tuples)])
            bad = probs @ (np.asarray(swapped.accept_probs)[:, :, None] * np.asarray(swapped.correction_probs)).sum(1)
            assert np.abs(bad - q).max() > 0.02  # exactly biased
            y = np.asarray(verifier.sample(tuples[pick][:, ::-1], P, Q, rng).token)
            counts = np.bincount(pick * 4 + y, minlength=cell_probs.size)
            assert counts[~live].sum() > 0 or stats.power_divergence(
                counts[live], n * cell_probs[live], lambda_="log-likelihood").pvalue < 1e-6
        if verifier.name == "greedy":
            bad = _greedy_against_p(tuples, np.broadcast_to(p, (len(tuples), 4)), np.broadcast_to(q, (len(tuples), 4)))
            assert np.abs(probs @ bad - q).max() > 0.02  # exactly biased
            y = np.array([rng.choice(4, p=bad[i]) for i in pick])
            counts = np.bincount(pick * 4 + y, minlength=cell_probs.size)
            assert counts[~live].sum() > 0 or stats.power_divergence(
                counts[live], n * cell_probs[live], lambda_="log-likelihood").pvalue < 1e-6


@settings(max_examples=15, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.sampled_from([("greedy", (2, 1)), ("greedy", (3, 1)),
                                                                 ("hub", (2, 2)), ("hub", (1, 2))]))
def test_trees_of_structured_draws_keep_the_target_law(pair, setup):
    """tree_law with greedy or hub children (match rule): the output law is the target's to 1e-12; the greedy
    verifier is at or below the tree optimum, and the naive verifier keeps the law on these draws too."""
    draft, target, _ = pair
    draw, config = setup
    if target.horizon is not None and target.horizon < len(config) + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=len(config), sparsity=0.3)
    tree = DraftTree(config, draw)
    verifier = GreedyDraftVerify() if draw == "greedy" else SpecHubVerify()
    res = tree_law(draft, target, verifier, tree)
    assert res.max_deviation < 1e-12
    assert res.expected_accepted <= tree_bound(draft, target, tree).value + 1e-8
    assert tree_law(draft, target, NaiveMultiCandidate(), tree).max_deviation < 1e-12


def test_monte_carlo_and_refusals():
    """One step and one tree iteration by Monte Carlo contain the closed form / exact value; a verifier of another
    draw on a greedy tree is refused with the reason."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    for verifier, k in ((GreedyDraftVerify(), 3), (SpecHubVerify(), 2)):
        res = simulate_candidates(p, q, verifier, k, 50_000, seed=2, progress=False, confidence=0.999)
        assert res.accepted.low <= verifier.expected_acceptance(p, q, k) <= res.accepted.high
    d, t = IIDSource(p), IIDSource(q)
    tree = DraftTree((2, 2), "greedy")
    exact = tree_law(d, t, GreedyDraftVerify(), tree).expected_accepted
    sim = simulate_tree(d, t, GreedyDraftVerify(), tree, 20_000, seed=4, progress=False, confidence=0.999)
    assert sim.accepted.low <= exact <= sim.accepted.high
    with pytest.raises(ValueError, match="greedy drafts"):
        tree_law(d, t, KSeq(), tree)
    with pytest.raises(ValueError, match="k <= 2"):
        DraftTree((3, 1), "hub")
