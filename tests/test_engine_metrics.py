"""Serving-engine acceptance metrics (mean acceptance length, unconditional per-position rates) from a histogram."""

from __future__ import annotations

import json

import numpy as np
import pytest

from otspec.engine import generate
from otspec.engine.metrics import (
    conditional_from_unconditional,
    engine_metrics,
    synthetic_rates,
    unconditional_from_conditional,
)
from otspec.sources import IIDSource
from otspec.verifiers import TokenVerify


def test_metrics_of_a_hand_counted_histogram():
    # rows: drafted g = 0..3, columns: accepted τ; 2 iterations drafted nothing (sequence ends)
    hist = np.array([[2, 0, 0, 0],
                     [1, 3, 0, 0],
                     [0, 0, 0, 0],
                     [4, 2, 1, 5]])
    m = engine_metrics(hist)
    assert m.drafts == 16 and m.drafted_tokens == 4 + 36 and m.accepted_tokens == 3 + 2 + 2 + 15
    assert m.mean_acceptance_length == pytest.approx(1 + 22 / 16)
    # τ >= 1: 3 + 2 + 1 + 5 = 11; τ >= 2: 1 + 5 = 6; τ >= 3: 5 (of 16 drafts)
    assert m.acceptance_per_position_unconditional == pytest.approx([11 / 16, 6 / 16, 5 / 16])
    # reached position 1: every draft (16); position 2: g >= 2 and τ >= 1 (8); position 3: g = 3, τ >= 2 (6)
    assert m.acceptance_per_position_conditional == pytest.approx([11 / 16, 6 / 8, 5 / 6])
    assert m.draft_acceptance_rate == pytest.approx(22 / 40)
    assert m.draft_length_histogram == [2, 4, 0, 12]
    assert m.mean_acceptance_length == pytest.approx(1 + sum(m.acceptance_per_position_unconditional))
    json.dumps(m.as_dict())


def test_conversion_is_exact_at_a_fixed_draft_length():
    hist = np.zeros((5, 5), dtype=int)
    hist[4] = [7, 5, 3, 2, 9]  # every draft of length 4
    m = engine_metrics(hist)
    assert unconditional_from_conditional(m.acceptance_per_position_conditional) == pytest.approx(
        m.acceptance_per_position_unconditional, rel=1e-15)
    assert conditional_from_unconditional(m.acceptance_per_position_unconditional) == pytest.approx(
        m.acceptance_per_position_conditional, rel=1e-15)
    assert conditional_from_unconditional([0.5, 0.0, 0.0]) == [0.5, 0.0, None]


def test_token_verification_on_an_iid_pair_gives_beta_to_the_i():
    """Unconditional rate at position i = β^i (β = Σ min(p, q)) for token verification on an IID pair."""
    p, q = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5])
    beta = float(np.minimum(p, q).sum())  # 0.7
    res = generate(IIDSource(p), IIDSource(q), TokenVerify(), 3, 4000, n_sequences=32, seed=1, progress=False)
    m = engine_metrics(res.accept_hist)
    fixed = np.asarray(res.accept_hist)[3].sum() / m.drafts  # nearly all drafts have length 3
    assert fixed > 0.99
    for i, a in enumerate(m.acceptance_per_position_unconditional, start=1):
        se = np.sqrt(beta**i * (1 - beta**i) / m.drafts)
        assert abs(a - beta**i) < 5 * se + 0.01 * (1 - fixed) + 1e-3
    assert m.mean_acceptance_length == pytest.approx(1 + sum(beta**i for i in range(1, 4)), rel=0.02)


def test_synthetic_rates_and_errors():
    out = synthetic_rates([0.8, 0.6, 0.3], source="measured", verifier="token", L=3)
    assert out == {"verifier": "token", "L": 3, "source": "measured", "acceptance_rates": [0.8, 0.6, 0.3],
                   "mean_acceptance_length": pytest.approx(2.7)}
    with pytest.raises(ValueError, match="non-increasing"):
        synthetic_rates([0.5, 0.6], source="measured")
    for bad, match in ((np.zeros((2, 3)), "square"), (np.array([[1, 1], [0, 1]]), "above the diagonal"),
                       (np.array([[-1, 0], [0, 1]]), "non-negative"), (np.array([[0.5, 0], [0, 1]]), "integer")):
        with pytest.raises(ValueError, match=match):
            engine_metrics(bad)
    with pytest.raises(ValueError, match="non-increasing"):
        conditional_from_unconditional([0.2, 0.5])
    with pytest.raises(ValueError, match="probabilities"):
        unconditional_from_conditional([1.5])
