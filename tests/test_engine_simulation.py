"""Monte Carlo and decode engines against exact values and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from otspec import theory
from otspec.engine import Backend, FixedDraftLength, evaluate, generate, simulate
from otspec.engine.stats import mean_estimate, proportion_intervals, ratio_estimate
from otspec.sources import IIDSource, bernoulli, random_markov
from otspec.verifiers import TokenVerify


def test_montecarlo_matches_exact_on_markov_pair():
    d, t = random_markov(3, 1.0, seed=21, sparsity=0.2)
    exact = evaluate(d, t, TokenVerify(), 4)
    mc = simulate(d, t, TokenVerify(), 4, 400_000, seed=1, progress=False)
    assert mc.accepted.contains(exact.expected_accepted)
    # first emitted token follows the target's first row (lossless)
    counts = mc.first_token_counts
    assert counts[t.initial == 0].sum() == 0
    live = t.initial > 0
    assert stats.chisquare(counts[live], counts.sum() * t.initial[live]).pvalue > 1e-4
    # per-length acceptance frequencies agree with the exact law
    assert stats.chisquare(mc.accept_counts[exact.accept_dist > 0],
                           mc.n_blocks * exact.accept_dist[exact.accept_dist > 0]).pvalue > 1e-4


def test_montecarlo_is_reproducible_and_chunking_invariant_in_law():
    d, t = bernoulli(0.3), bernoulli(0.6)
    a = simulate(d, t, TokenVerify(), 3, 50_000, seed=7, progress=False)
    b = simulate(d, t, TokenVerify(), 3, 50_000, seed=7, progress=False)
    assert np.array_equal(a.accept_counts, b.accept_counts)
    c = simulate(d, t, TokenVerify(), 3, 50_000, seed=7, progress=False, backend=Backend(batch_size=999))
    assert c.accepted.contains(theory.bernoulli_expected_accepted_token(0.3, 0.6, 3))


def test_decode_block_efficiency_matches_closed_form():
    # IID pair: long-run block efficiency = E[tau] + 1 = sum_{l=0}^{L} (1 - TV)^l
    d, t = bernoulli(0.3), bernoulli(0.7)
    L = 4
    res = generate(d, t, TokenVerify(), L, 20_000, n_sequences=32, seed=3, progress=False)
    closed = theory.tokens_per_iteration(theory.bernoulli_expected_accepted_token(0.3, 0.7, L))
    assert res.block_efficiency.contains(closed)
    assert res.block_efficiency.high - res.block_efficiency.low < 0.02


def test_decode_accounting_identities():
    d, t = random_markov(3, 2.0, seed=4)
    B, N, L = 16, 500, 3
    res = generate(d, t, TokenVerify(), L, N, n_sequences=B, seed=0, progress=False)
    assert res.tokens.shape == (B, N)
    assert res.generated == B * N
    assert res.target_calls == res.iterations
    assert res.accepted + res.iterations == res.generated  # each iteration emits tau + 1
    assert res.discarded == res.draft_calls - res.accepted
    assert res.rejected <= res.iterations
    assert res.accept_hist.sum() == res.iterations


def test_decode_output_follows_target_law():
    # the generated first three tokens of many sequences follow the target's law
    d, t = random_markov(2, 0.5, horizon=3, seed=8)
    res = generate(d, t, TokenVerify(), 2, 3, n_sequences=60_000, seed=5, progress=False)
    idx = res.tokens @ np.array([4, 2, 1])
    law = t.enumerate(3).probs
    counts = np.bincount(idx, minlength=8)
    assert counts[law == 0].sum() == 0
    assert stats.chisquare(counts[law > 0], counts.sum() * law[law > 0]).pvalue > 1e-4


def test_decode_respects_horizon_and_controller():
    d, t = random_markov(3, 1.0, horizon=10, seed=2)
    res = generate(d, t, TokenVerify(), 4, 10, n_sequences=8, seed=0, progress=False)
    assert res.tokens.shape == (8, 10)
    with pytest.raises(ValueError, match="at most 10 tokens"):
        generate(d, t, TokenVerify(), 4, 11, progress=False)

    class StopAfterOne(FixedDraftLength):
        def keep_drafting(self, step, rows):
            return np.zeros(rows.shape[0], dtype=bool)

    # p = q: every iteration drafts 1 token, accepts it and emits 2; with N = 201 each sequence
    # ends with one iteration at position 200 that may draft nothing (a plain target step)
    res = generate(bernoulli(0.5), bernoulli(0.5), TokenVerify(), StopAfterOne(5), 201, n_sequences=4,
                   progress=False)
    assert res.iterations == 4 * 101
    assert res.draft_calls == res.iterations - 4
    assert res.rejected == 0 and res.accepted == 4 * 100
    with pytest.raises(ValueError, match="draft_length: expected an integer >= 1"):
        FixedDraftLength(0)


def test_stats_helpers():
    est = mean_estimate(total=50.0, total_sq=50.0, n=100)  # Bernoulli(0.5) sample
    assert abs(est.value - 0.5) < 1e-15 and est.low < 0.5 < est.high
    r = ratio_estimate([10, 12, 11, 9], [5, 6, 5, 5])
    assert abs(r.value - 42 / 21) < 1e-15 and r.low < r.value < r.high
    ci = proportion_intervals([0, 50, 100], 100)
    assert ci[0, 0] == pytest.approx(0.0, abs=1e-15) and ci[2, 1] == pytest.approx(1.0)


def test_vocab_mismatch_errors():
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        simulate(IIDSource([0.5, 0.5]), IIDSource([1 / 3] * 3), TokenVerify(), 2, 10)
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        generate(IIDSource([0.5, 0.5]), IIDSource([1 / 3] * 3), TokenVerify(), 2, 10)


@pytest.mark.parametrize("name", ["kseq", "multiround", "multiround_without_replacement", "otm", "naive"])
def test_simulate_candidates_estimates_the_closed_form_and_emits_the_target(name):

    from otspec.engine import simulate_candidates
    from otspec.verifiers import MULTI_DRAFT_REGISTRY, REGISTRY
    from tests.strategies import g_test

    p, q = np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])
    verifier = MULTI_DRAFT_REGISTRY[name]()
    res = simulate_candidates(p, q, verifier, 3, 200_000, seed=4, progress=False)
    exact = verifier.expected_acceptance(p, q, 3)
    assert res.accepted.low <= exact <= res.accepted.high
    g, dof = g_test(res.first_token_counts, q)  # lossless: Y follows the target row
    assert stats.chi2.sf(g, dof) > 1e-4
    with pytest.raises(ValueError, match="multi-draft"):
        simulate_candidates(p, q, REGISTRY["token"](), 3, 10)


def test_a_backend_is_checked_where_it_is_made_and_where_it_is_used():
    """Chunk sizes and methods are refused by ``Backend`` itself (a negative chunk once looped forever, 0 meant
    the default); each simulator refuses the methods and devices it does not offer, naming them."""
    from otspec.drafts import DraftTree
    from otspec.engine import simulate_logged, simulate_tree
    from otspec.engine.chunking import MAX_CHUNK
    from otspec.sources import log_rows
    from otspec.verifiers import KSeq

    for bad in (0, -5, 2.5, True, MAX_CHUNK + 1):
        with pytest.raises(ValueError, match="batch_size"):
            Backend(batch_size=bad)
    with pytest.raises(ValueError, match="method"):
        Backend(method="fast")
    d, t = bernoulli(0.3), bernoulli(0.6)
    with pytest.raises(ValueError, match="backend: expected an otspec Backend"):
        simulate(d, t, TokenVerify(), 2, 10, backend="rows")
    with pytest.raises(ValueError, match=r"simulate_tree: method 'compiled' is not offered.*\('auto', 'rows'\)"):
        simulate_tree(d, t, KSeq(), DraftTree((2, 1)), 10, backend=Backend(method="compiled"))
    with pytest.raises(ValueError, match="simulate_tree runs on numpy"):
        simulate_tree(d, t, KSeq(), DraftTree((2, 1)), 10, backend=Backend(device="cpu"))
    log = log_rows(*random_markov(4, 0.5, seed=3), 2, 4, top_p=0.8, seed=4)
    with pytest.raises(ValueError, match="simulate_logged: method 'rows' is not offered"):
        simulate_logged(log, TokenVerify(), 1, 10, backend=Backend(method="rows"))


def test_a_decode_result_gives_its_interval_at_any_level_without_rerunning():
    d, t = bernoulli(0.3), bernoulli(0.7)
    res = generate(d, t, TokenVerify(), 3, 2_000, n_sequences=8, seed=5, progress=False)
    assert res.block_efficiency.confidence == 0.95
    levels = [res.at_confidence(c).block_efficiency for c in (0.5, 0.95, 0.999)]
    assert [e.value for e in levels] == [res.block_efficiency.value] * 3
    assert levels[1] == res.block_efficiency  # the same units and the same formula as the run's own interval
    assert levels[0].high - levels[0].low < levels[1].high - levels[1].low < levels[2].high - levels[2].low
    for bad in (0.0, 1.0, float("nan")):
        with pytest.raises(ValueError, match="confidence"):
            res.at_confidence(bad)
