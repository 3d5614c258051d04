"""Drafter-invariant Gumbel coupling (Daliri et al.): the exact pair law against the race itself, the acceptance
bounds, losslessness of the exact law, the sampler against the law with power."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from strategies import markov_pairs

from otspec.distributions import total_variation
from otspec.engine import evaluate
from otspec.errors import SizeLimitError
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import GumbelCouplingVerify, TokenVerify
from otspec.verifiers.gumbel import gumbel_acceptance, gumbel_joint


@st.composite
def rows(draw):
    V = draw(st.integers(2, 6))
    out = []
    for _ in range(2):
        w = np.array(draw(st.lists(st.sampled_from([0.0, 0.05, 0.3, 1.0, 4.0]), min_size=V, max_size=V)))
        w[draw(st.integers(0, V - 1))] += 0.5  # never all zero
        out.append(w / w.sum())
    return out


@settings(max_examples=80, deadline=None)
@given(rows())
def test_the_pair_law_has_both_marginals_and_the_bounds(pair):
    """Rows p, q of gumbel_joint sum to p and q (each off-diagonal entry is a piecewise integral, so this checks
    them); the diagonal is gumbel_acceptance's O(V log V) form; (1 − TV)/(1 + TV) <= P(X = Y) <= 1 − TV."""
    p, q = pair
    J = gumbel_joint(p, q)
    assert np.abs(J.sum(axis=1) - p).max() < 1e-12 and np.abs(J.sum(axis=0) - q).max() < 1e-12
    assert J.min() >= 0 and abs(np.trace(J) - gumbel_acceptance(p, q)) < 1e-12
    tv = total_variation(p, q)
    assert (1 - tv) / (1 + tv) - 1e-12 <= np.trace(J) <= 1 - tv + 1e-12


def test_the_pair_law_is_the_race_s():
    """400,000 races E ~ Exp(1)^V, X = argmin E/p, Y = argmin E/q: the (X, Y) counts pass a G-test against
    gumbel_joint (an independent check of the integrals)."""
    p, q = np.array([0.45, 0.3, 0.15, 0.1]), np.array([0.1, 0.2, 0.3, 0.4])
    E = np.random.default_rng(0).exponential(size=(400_000, 4))
    counts = np.bincount(np.argmin(E / p, 1) * 4 + np.argmin(E / q, 1), minlength=16)
    J = gumbel_joint(p, q).ravel()
    live = J > 0
    assert counts[~live].sum() == 0 and live.sum() > 8
    assert stats.power_divergence(counts[live], 400_000 * J[live], lambda_="log-likelihood").pvalue > 1e-4


@settings(max_examples=20, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.integers(1, 3))
def test_lossless_by_exact_enumeration(pair, L):
    draft, target, _ = pair
    if target.horizon is not None and target.horizon < L + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=L, sparsity=0.3)
    res = evaluate(draft, target, GumbelCouplingVerify(), L)
    assert res.max_deviation < 1e-12
    assert res.expected_accepted <= TokenVerify().expected_accepted(draft, target, L) + 1e-12  # invariance costs


def test_iid_closed_form_and_the_sampler_with_power():
    """E[τ] of an IID pair is Σ α^l; the sampler's (τ, Y) on fixed drafts follows law() (G-test, 60,000 draws), and
    the test rejects a sampler whose target clocks ignore the draft's (Y ~ q independently)."""
    d, t = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    assert abs(GumbelCouplingVerify().expected_accepted(d, t, 3) - evaluate(d, t, GumbelCouplingVerify(), 3)
               .expected_accepted) < 1e-12
    rng, n = np.random.default_rng(3), 60_000
    tokens = np.array([[0, 1]])
    P, Q = np.array([[d.probs] * 2]), np.array([[t.probs] * 3])
    law = GumbelCouplingVerify().law(tokens, P, Q)
    cells = (np.asarray(law.accept_probs)[0][:, None] * np.asarray(law.correction_probs)[0]).ravel()
    out = GumbelCouplingVerify().sample(np.repeat(tokens, n, 0), np.repeat(P, n, 0), np.repeat(Q, n, 0), rng)
    counts = np.bincount(np.asarray(out.accepted_len) * 3 + np.asarray(out.token), minlength=cells.size)
    live = cells > 0
    assert counts[~live].sum() == 0
    assert stats.power_divergence(counts[live], n * cells[live], lambda_="log-likelihood").pvalue > 1e-4
    y = rng.choice(3, size=(n, 2), p=t.probs)  # the bug: fresh target clocks
    miss = y != tokens
    tau = np.where(miss.any(1), np.argmax(miss, 1), 2)
    tok = np.where(tau < 2, y[np.arange(n), np.minimum(tau, 1)], rng.choice(3, size=n, p=t.probs))
    wrong = np.bincount(tau * 3 + tok, minlength=cells.size)
    assert wrong[~live].sum() > 0 or stats.power_divergence(  # emits what the coupling never does, or biased
        wrong[live], n * cells[live], lambda_="log-likelihood").pvalue < 1e-6


def test_large_vocabularies_refuse_the_law_but_sample_and_evaluate():
    rng = np.random.default_rng(1)
    p, q = rng.dirichlet(np.ones(1000)), rng.dirichlet(np.ones(1000))
    with pytest.raises(SizeLimitError, match="MAX_GUMBEL_LAW_VOCAB"):
        gumbel_joint(p, q)
    alpha = gumbel_acceptance(p, q)
    tv = total_variation(p, q)
    assert (1 - tv) / (1 + tv) <= alpha <= 1 - tv
    out = GumbelCouplingVerify().sample(rng.choice(1000, size=(4000, 1), p=p), np.tile(p, (4000, 1, 1)),
                                        np.tile(q, (4000, 2, 1)), rng)
    assert abs(np.mean(np.asarray(out.accepted_len)) - alpha) < 5 * np.sqrt(alpha * (1 - alpha) / 4000)


def test_on_two_tokens_the_race_is_the_maximal_coupling(capsys):
    """V = 2: P(X = Y) = 1 − TV, so the Gumbel coupling accepts exactly what token verification does (calc block
    reports both)."""
    import json

    from otspec.cli import main

    d, t = IIDSource([0.3, 0.7]), IIDSource([0.75, 0.25])
    assert abs(gumbel_acceptance(d.probs, t.probs) - (1 - total_variation(d.probs, t.probs))) < 1e-15
    assert abs(GumbelCouplingVerify().expected_accepted(d, t, 4) - TokenVerify().expected_accepted(d, t, 4)) < 1e-12
    three = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    assert GumbelCouplingVerify().expected_accepted(*three, 2) < TokenVerify().expected_accepted(*three, 2) - 0.05
    assert main(["calc", "block", "--draft", "0.5,0.3,0.2", "--target", "0.2,0.3,0.5", "--L", "2", "--json"]) == 0
    assert abs(json.loads(capsys.readouterr().out)["gumbel"] - GumbelCouplingVerify().expected_accepted(*three, 2)) < 1e-12


def test_keep_probabilities_match_the_law():
    """keep_probs (O(V) per position, any V) is the law's P(Y = x | X = x), position by position."""
    d, t = random_markov(4, 0.5, seed=2, sparsity=0.2)
    rng = np.random.default_rng(0)
    P = np.stack([d.next_probs([[]])[0], d.next_probs([[1]])[0]])[None]
    Q = np.stack([t.next_probs([[]])[0], t.next_probs([[1]])[0], t.next_probs([[1, 2]])[0]])[None]
    for _ in range(5):
        x = np.array([[rng.choice(4, p=P[0, 0]), rng.choice(4, p=P[0, 1])]])
        law = GumbelCouplingVerify().law(x, P, Q)
        keep = GumbelCouplingVerify().keep_probs(x, P, Q)
        acc = np.asarray(law.accept_probs)[0]
        assert abs((1 - acc[0]) - keep[0, 0]) < 1e-12
        assert abs(GumbelCouplingVerify().expected_given_drafts(x, P, Q)[0]
                   - np.asarray(law.expected_accepted)[0]) < 1e-12
