"""Couplings induced by the verifiers are feasible for the block-OT LP and attain their E[accepted]."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import markov_pairs

from otspec.engine import evaluate
from otspec.engine.branching import coupling_law
from otspec.solvers import block_laws, plan_expected_length, solve_block_lp
from otspec.verifiers import BackwardBlockVerify, BlockVerify, TokenVerify

VERIFIERS = (TokenVerify(), BlockVerify(), BackwardBlockVerify())


@settings(max_examples=40)
@given(markov_pairs(max_vocab=3, max_length=3))
def test_induced_couplings_are_feasible_and_attain_expected_accepted(pair):
    draft, target, L = pair
    V = target.vocab_size
    p_law, q_law = block_laws(draft, target, L)
    lp = solve_block_lp(draft, target, L).value
    for verifier in VERIFIERS:
        pi = coupling_law(draft, target, verifier, L)
        assert pi.min() >= 0
        assert np.abs(pi.sum(axis=1) - p_law).max() <= 1e-12  # rows: draft blocks
        assert np.abs(pi.sum(axis=0) - q_law).max() <= 1e-12  # columns: target blocks
        value = plan_expected_length(pi, V, L)
        accepted = evaluate(draft, target, verifier, L).expected_accepted
        # the correction never repeats the rejected draft token, so E_pi[lcp] = E[tau]. For the
        # published algorithm: mass of (w_tau q - p)_+ on X_{tau+1} means w_{tau+1} = 1, and then
        # h = 1 at the next position where the rows differ (or h_L = w_L = 1), so tau > tau.
        assert abs(value - accepted) <= 1e-12
        assert value <= lp + 1e-8
    assert abs(plan_expected_length(coupling_law(draft, target, VERIFIERS[-1], L), V, L) - lp) <= 1e-8


@pytest.mark.parametrize("verifier", VERIFIERS, ids=lambda v: v.name)
def test_binary_example_couplings(verifier):
    from otspec.sources import IIDSource

    d, t = IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3])
    expected = {"token": 10 / 9, "block": 11 / 9, "block_v1": 12 / 9}[verifier.name]
    assert abs(plan_expected_length(coupling_law(d, t, verifier, 2), 2, 2) - expected) < 1e-14
