"""Exact engine: E[accepted] equals spec eq. (4) computed independently; limits and errors."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from strategies import brute_force_token_value, markov_pairs, table_pairs

from otspec import theory
from otspec.engine import evaluate
from otspec.engine.exact import MAX_EXACT_ENTRIES
from otspec.sources import IIDSource, bernoulli, random_markov
from otspec.verifiers import TokenVerify


@given(markov_pairs(max_vocab=4, max_length=4))
def test_expected_accepted_equals_eq4_markov(pair):
    draft, target, L = pair
    res = evaluate(draft, target, TokenVerify(), L)
    ref = brute_force_token_value(draft, target, L)
    assert abs(res.expected_accepted - ref) <= 1e-12
    assert abs(theory.expected_accepted_token(draft, target, L) - ref) <= 1e-12
    assert abs(res.expected_tokens_per_iteration - res.expected_accepted - 1) < 1e-15
    assert abs(res.accept_dist.sum() - 1) < 1e-12


@given(table_pairs())
def test_expected_accepted_equals_eq4_context_dependent(pair):
    draft, target, L = pair
    ref = brute_force_token_value(draft, target, L)
    assert abs(evaluate(draft, target, TokenVerify(), L).expected_accepted - ref) <= 1e-12
    assert abs(theory.expected_accepted_token(draft, target, L) - ref) <= 1e-12


def test_bernoulli_table_of_spec_section6():
    # spec §6 table, "token (11a)" column, q1 = 0.75 (4 decimals in the spec)
    table = {(0.25, 1): 0.5000, (0.25, 2): 0.7500, (0.25, 4): 0.9375, (0.25, 8): 0.9961,
             (0.5, 2): 1.3125, (0.5, 4): 2.0508, (0.5, 8): 2.6997,
             (0.9, 2): 1.5725, (0.9, 4): 2.7086, (0.9, 8): 4.1226}
    for (p, L), value in table.items():
        closed = theory.bernoulli_expected_accepted_token(p, 0.75, L)
        assert abs(closed - value) < 5e-5
        assert abs(evaluate(bernoulli(p), bernoulli(0.75), TokenVerify(), L).expected_accepted - closed) < 1e-13


def test_binary_example_fraction():
    p = [Fraction(2, 3), Fraction(1, 3)]
    q = [Fraction(1, 3), Fraction(2, 3)]
    exact = sum(
        np.prod([min(p[x], q[x]) for x in prefix], dtype=object)
        for ell in (1, 2) for prefix in itertools.product(range(2), repeat=ell)
    )
    assert exact == Fraction(10, 9)
    res = evaluate(IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3]), TokenVerify(), 2)
    assert abs(res.expected_accepted - float(exact)) < 1e-15


def test_sequences_index_output_law():
    d, t = random_markov(2, 1.0, seed=0)
    res = evaluate(d, t, TokenVerify(), 2)
    assert res.sequences.shape == (8, 3)
    assert np.allclose(res.target_law, t.enumerate(3).probs, atol=1e-16)


def test_long_block_stays_finite():
    d, t = random_markov(2, 5.0, seed=1)
    res = evaluate(d, t, TokenVerify(), 16)
    assert np.isfinite(res.expected_accepted) and res.max_deviation < 1e-12


def test_errors():
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        evaluate(IIDSource([0.5, 0.5]), IIDSource([0.2, 0.3, 0.5]), TokenVerify(), 2)
    with pytest.raises(ValueError, match="draft_length: expected an integer >= 1"):
        evaluate(bernoulli(0.2), bernoulli(0.3), TokenVerify(), 0)
    with pytest.raises(ValueError, match="MAX_EXACT_ENTRIES"):
        V = 64
        L = int(np.ceil(np.log(MAX_EXACT_ENTRIES) / np.log(V)))
        evaluate(IIDSource(np.ones(V) / V), IIDSource(np.ones(V) / V), TokenVerify(), L)
    d, t = random_markov(2, horizon=3, seed=0)
    with pytest.raises(ValueError, match="at most 3 tokens"):
        evaluate(d, t, TokenVerify(), 3)
