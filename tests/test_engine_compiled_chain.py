"""The compiled chain loop (otspec.engine.compiled_chain): the same law as the Python loop, taken only where it serves.

Oracles independent of the kernel: the accepted length of token verification on IID rows is a truncated geometric of
α = 1 − TV(p, q) (eq. (4)); a lossless loop emits the target's law (IID: its row; Markov: its initial row and
transition matrix), tested by G-tests whose power against a named bias is computed; and the Python loop of
otspec.engine.loop, run beside it, agrees within intervals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2, ncx2
from strategies import g_test, pearson_noncentrality

from otspec.distributions import total_variation
from otspec.engine import compiled_chain, generate
from otspec.engine.controllers import FixedDraftLength, ThresholdController
from otspec.engine.lookup import lookup_table
from otspec.engine.observers import Observer
from otspec.sources import MarkovSource, random_iid, random_markov
from otspec.theory.iid import iid_token_value
from otspec.verifiers import BlockVerify, TokenVerify

pytestmark = pytest.mark.skipif(not compiled_chain.available(), reason="numba is not installed")


class Watching(Observer):
    """An observer that does nothing: a run it watches takes the Python loop."""


def test_the_accepted_length_is_the_truncated_geometric_of_eq_4():
    draft, target = random_iid(vocab=8, concentration=1.0, seed=3)
    L, N, B = 4, 20_000, 4
    result = generate(draft, target, TokenVerify(), L, N, n_sequences=B, seed=1, progress=False)
    alpha = 1.0 - total_variation(draft.probs, target.probs)
    law = np.array([alpha**t * (1 - alpha) for t in range(L)] + [alpha**L])
    stat, dof = g_test(result.accept_hist[L], law)
    assert stat < chi2.ppf(0.999, dof)
    # power: a verifier accepting with 1 - TV + 0.02 would be seen (G-test, alpha 0.001) with probability > 0.99
    shifted = alpha + 0.02
    alt = np.array([shifted**t * (1 - shifted) for t in range(L)] + [shifted**L])
    n = int(result.accept_hist[L].sum())
    assert ncx2.sf(chi2.ppf(0.999, dof), dof, pearson_noncentrality(n, law, alt)) > 0.99
    expected = 1 + iid_token_value(draft.probs, target.probs, L).value  # tokens per iteration where L is drafted
    be = result.block_efficiency
    assert be.low - 0.01 < expected < be.high + 0.01  # sequence ends draft fewer: a hair below eq. (4)
    assert result.generated == B * N and result.draft_calls == result.accept_hist.sum(axis=1) @ np.arange(L + 1)
    tokens, iterations = result.per_sequence
    assert (tokens == N).all() and iterations.sum() == result.iterations


def test_iid_output_is_the_target_row():
    draft, target = random_iid(vocab=6, concentration=0.7, seed=11)
    result = generate(draft, target, TokenVerify(), 3, 30_000, n_sequences=2, seed=5, progress=False)
    counts = np.bincount(result.tokens.ravel(), minlength=6)
    stat, dof = g_test(counts, target.probs)
    assert stat < chi2.ppf(0.999, dof)
    biased = 0.9 * target.probs + 0.1 * draft.probs  # 10 % of the draft's law leaking through
    lam = pearson_noncentrality(int(counts.sum()), target.probs, biased)
    assert ncx2.sf(chi2.ppf(0.999, dof), dof, lam) > 0.99


@pytest.mark.parametrize("stationary", [True, False])
def test_markov_output_follows_the_target_chain(stationary):
    rng = np.random.default_rng(7)
    V, N, B = 5, 40, 3000
    if stationary:
        draft, target = random_markov(vocab=V, seed=4)
    else:  # a time-varying chain: a different matrix for each step
        mats = rng.dirichlet(np.ones(V), size=(N - 1, V))
        target = MarkovSource(rng.dirichlet(np.ones(V)), mats)
        draft = MarkovSource(rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V), size=(N - 1, V)))
    result = generate(draft, target, TokenVerify(), 3, N, n_sequences=B, seed=2, progress=False)
    tokens = result.tokens
    stat, dof = g_test(np.bincount(tokens[:, 0], minlength=V), target.initial)
    assert stat < chi2.ppf(0.999, dof)
    steps = [1, N // 2, N - 1]
    for step in steps:  # token step given token step - 1, pooled over the previous token's value
        matrix = target.matrix(step)
        stats = dofs = 0
        for a in range(V):
            came = tokens[:, step - 1] == a
            s, d = g_test(np.bincount(tokens[came, step], minlength=V), matrix[a])
            stats, dofs = stats + s, dofs + d
        assert stats < chi2.ppf(0.999, dofs), step


def test_the_compiled_and_python_loops_agree():
    draft, target = random_markov(vocab=8, seed=3)
    fast = generate(draft, target, TokenVerify(), 4, 400, n_sequences=32, seed=3, progress=False)
    slow = generate(draft, target, TokenVerify(), 4, 400, n_sequences=32, seed=3, progress=False,
                    observers=[Watching()])
    a, b = fast.block_efficiency, slow.block_efficiency
    assert abs(a.value - b.value) < 3.5 * np.hypot(a.stderr, b.stderr)
    for r in (fast, slow):  # the same ledger: drafted depth min(L, N - n - 1), every sequence N tokens long
        assert r.generated == 32 * 400 and r.accept_hist.shape == (5, 5)
        assert r.accept_hist[:, :].sum() == r.iterations and r.cost(0.1).decomposition_holds
    assert not np.array_equal(fast.tokens, slow.tokens)  # different draws: the compiled loop did run


def test_a_seed_fixes_the_result():
    draft, target = random_iid(vocab=8, seed=1)
    one = generate(draft, target, TokenVerify(), 2, 500, n_sequences=3, seed=42, progress=False)
    two = generate(draft, target, TokenVerify(), 2, 500, n_sequences=3, seed=42, progress=False)
    assert np.array_equal(one.tokens, two.tokens) and one.block_efficiency == two.block_efficiency


def test_only_runs_it_serves_take_the_compiled_loop(monkeypatch):
    calls = []
    real = compiled_chain.decode_chains
    monkeypatch.setattr(compiled_chain, "decode_chains", lambda *a: calls.append(1) or real(*a))
    draft, target = random_iid(vocab=4, seed=2)

    class MyToken(TokenVerify):
        """A subclass may change what it accepts: not the kernel's algorithm."""

    class StopEarly(FixedDraftLength):
        def keep_drafting(self, step, draft_rows, **_):
            return np.full(draft_rows.shape[0], step < 1)

    generate(draft, target, TokenVerify(), 3, 50, seed=0, progress=False)
    assert calls == [1]
    for verifier, length, observers in ((TokenVerify(), 3, [Watching()]), (MyToken(), 3, ()),
                                        (BlockVerify(), 3, ()), (TokenVerify(), StopEarly(3), ()),
                                        (TokenVerify(), ThresholdController(0.5, 3), ())):
        generate(draft, target, verifier, length, 50, seed=0, progress=False, observers=observers)
    assert calls == [1]
    markov = random_markov(vocab=4, seed=1)
    generate(*markov, TokenVerify(), 3, 50, seed=0, progress=False)
    assert calls == [1, 1]


def test_an_iid_pair_at_a_large_vocabulary_keeps_one_row():
    """An IID source is one row: the tables hold (1, 1, V), never a (V, V) copy (at V = 32,000 that was 8 GB and a
    sweep's worker was killed)."""
    import tracemalloc

    draft, target = random_iid(vocab=32_000, concentration=3000.0, seed=0)
    table = lookup_table(draft)
    assert table.stack.shape == (1, 1, 32_000) and not table.markov
    generate(draft, target, TokenVerify(), 4, 16, seed=0, progress=False)  # compiled (cached) before measuring
    tracemalloc.start()
    result = generate(draft, target, TokenVerify(), 4, 128, n_sequences=8, seed=0, progress=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20 and result.generated == 8 * 128
