"""The one cost model (otspec.theory.CallCosts) and the chain verifiers' own closed forms."""

from __future__ import annotations

import numpy as np
import pytest

import otspec
from otspec.engine import evaluate, generate
from otspec.theory import CallCosts, predicted_speedup
from otspec.verifiers import REGISTRY, DecodingOPT


@pytest.mark.parametrize("name", list(REGISTRY))
@pytest.mark.parametrize("seed", range(3))
def test_chain_verifiers_carry_their_closed_form(name, seed):
    """E[τ] from the verifier's closed form equals the exact engine's enumeration of the same verifier."""
    draft, target = otspec.random_markov(vocab=3, concentration=1.5, seed=seed, sparsity=0.2)
    verifier = REGISTRY[name]()
    for L in (1, 2, 3):
        assert verifier.expected_accepted(draft, target, L) == pytest.approx(
            evaluate(draft, target, verifier, L).expected_accepted, abs=1e-12)
    assert verifier.closed_form in ("token", "block", "optimal")
    with pytest.raises(NotImplementedError, match="no closed-form"):
        DecodingOPT(eps=0.1).expected_accepted(draft, target, 2)


def test_cost_model_forms_agree():
    costs = CallCosts(t_draft=0.2, t_target={1: 1.0, 3: 1.3}, overhead=0.05)
    assert costs.target(3) == 1.3 and costs.target(1) == 1.0
    assert costs.iteration_time(2, 3) == pytest.approx(2 * 0.2 + 1.3 + 0.05)
    assert costs.speedup(2.5, 2, 3) == pytest.approx(2.5 / (0.4 + 1.3 + 0.05))
    assert costs.latency(2.5, 2, 3) == pytest.approx((0.4 + 1.3 + 0.05) / 2.5)
    assert CallCosts(0.1, lambda n: 1 + 0.1 * n).target(4) == pytest.approx(1.4)
    # the closed-form speedup (E[tau] + 1) / (1 + c L)
    assert predicted_speedup(1.5, 0.1, 4) == pytest.approx(2.5 / 1.4)


def test_run_cost_is_the_one_cost_model():
    """A decode run's Lemma-3.1 decomposition adds up (eq. (3)) and equals CallCosts.decomposition."""
    draft, target = otspec.random_markov(vocab=3, concentration=2.0, seed=4)
    run = generate(draft, target, REGISTRY["token"](), 3, 400, n_sequences=8, seed=1, progress=False)
    cost = run.cost(0.25, 1.0)
    parts = CallCosts(0.25).decomposition(run.generated, run.draft_calls, run.target_calls, run.discarded)
    assert cost.total_time == pytest.approx(parts["total_time"]) and parts["holds"]
    assert cost.oracle_time + cost.discard_time + cost.verification_time == pytest.approx(cost.total_time)
    assert cost.speedup == pytest.approx(1.0 / cost.latency)
    np.testing.assert_allclose(cost.latency, cost.total_time / run.generated)
