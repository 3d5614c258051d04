"""The biased over-acceptance family and batch SD on the one verifier protocol."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from scipy import stats
from strategies import markov_pairs

from otspec.drafts import DraftTree
from otspec.engine import evaluate, generate, generate_tree, simulate, tree_law
from otspec.sources import IIDSource, random_markov
from otspec.theory import over_acceptance
from otspec.verifiers import (
    BatchVerify,
    DecodingOPT,
    DecodingUNO,
    MultiRound,
    TokenVerify,
    Verifier,
)

P, Q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])  # yin_theory.md §7, TV = 0.3


def first_token_law(result, V):
    return result.output_law.reshape(V, -1).sum(axis=1)


@pytest.mark.parametrize("cls, mode", [(DecodingOPT, "opt"), (DecodingUNO, "uno")])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.1, 0.3, np.inf])
def test_one_position_law_is_the_closed_form(cls, mode, eps):
    exact = evaluate(IIDSource(P), IIDSource(Q), cls(eps), 1)
    ref = over_acceptance(P, Q, eps, mode)
    np.testing.assert_allclose(first_token_law(exact, 3), ref["output_law"], atol=1e-12)
    assert exact.accept_dist[0] == pytest.approx(ref["rejection"], abs=1e-12)
    assert 0.5 * np.abs(first_token_law(exact, 3) - Q).sum() == pytest.approx(ref["bias"], abs=1e-12)
    assert not cls.lossless and isinstance(cls(eps), Verifier)


@settings(max_examples=30)
@given(markov_pairs(max_vocab=3, max_length=3))
def test_decoding_opt_at_zero_is_speculative_sampling(pair):
    draft, target, L = pair
    opt, token = evaluate(draft, target, DecodingOPT(0.0), L), evaluate(draft, target, TokenVerify(), L)
    assert opt.max_deviation < 1e-12
    np.testing.assert_allclose(opt.output_law, token.output_law, atol=1e-13)
    np.testing.assert_allclose(opt.accept_dist, token.accept_dist, atol=1e-13)


def test_over_acceptance_accepts_more_and_is_biased():
    draft, target = random_markov(3, 1.0, seed=4)
    base = evaluate(draft, target, TokenVerify(), 3)
    for cls in (DecodingOPT, DecodingUNO):
        biased = evaluate(draft, target, cls(0.1), 3)
        assert biased.expected_accepted > base.expected_accepted + 1e-3
        assert biased.max_deviation > 1e-4  # the bias is real


def test_sampler_matches_the_exact_law():
    draft, target = IIDSource(P), IIDSource(Q)
    for verifier in (DecodingOPT(0.1), DecodingUNO(0.1)):
        exact = first_token_law(evaluate(draft, target, verifier, 1), 3)
        counts = simulate(draft, target, verifier, 1, 60_000, seed=3, progress=False).first_token_counts
        _, pvalue = stats.chisquare(counts, exact * counts.sum())
        assert pvalue > 1e-4
        assert generate(draft, target, verifier, 3, 200, n_sequences=4, seed=1, progress=False).generated == 800


def test_bad_eps():
    for bad in (-0.1, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            DecodingOPT(bad)


@pytest.mark.parametrize("M", [1, 2, 3])
def test_batch_verify_is_lossless_and_is_multiround_on_its_tree(M):
    draft, target = random_markov(3, 1.0, seed=M)
    verifier = BatchVerify(M)
    tree = verifier.tree(2)
    assert tree == DraftTree((M, 1)) and verifier.rule == "accepted"
    law = tree_law(draft, target, verifier, tree, rule=verifier.rule)
    assert law.max_deviation < 1e-12
    ref = tree_law(draft, target, MultiRound(), tree, rule="accepted")
    np.testing.assert_allclose(law.output_law, ref.output_law, atol=1e-15)
    res = generate_tree(draft, target, verifier, tree, 300, rule=verifier.rule, n_sequences=4, seed=0,
                        progress=False)
    assert res.generated == 1200
    with pytest.raises(ValueError, match="M: expected"):
        BatchVerify(0)
