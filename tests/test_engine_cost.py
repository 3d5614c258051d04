"""The SpecDec++ cost model of the decode loops: T_total and its decomposition (specdecpp.md §2, Lemma 3.1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import markov_pairs

from otspec.drafts import DraftTree
from otspec.engine import generate, generate_tree
from otspec.engine.controllers import DraftLengthController
from otspec.sources import bernoulli
from otspec.verifiers import BackwardBlockVerify, BlockVerify, MultiRound, TokenVerify


class CoinController(DraftLengthController):
    """Draft one more token with probability 1/2 (a random, history-free draft length in 1..max_length)."""

    def __init__(self, max_length, seed):
        self.max_length, self.rng = max_length, np.random.default_rng(seed)

    def keep_drafting(self, step, draft_rows, **_):
        return (self.rng.random(draft_rows.shape[0]) < 0.5) & (step < self.max_length)


def _check_identity(res, t_draft, t_target):
    cost = res.cost(t_draft, t_target)
    N = res.generated
    # (2): every iteration drafts g tokens and makes one target call; it emits tau + 1 and discards g - tau
    assert res.draft_calls + res.target_calls == N + res.discarded and cost.decomposition_holds
    # (1) = (3): T_total = T_0 + t_draft N_discarded + (t_target - t_draft) N_target
    assert cost.total_time == pytest.approx(t_draft * res.draft_calls + t_target * res.target_calls, rel=1e-12)
    assert cost.total_time == pytest.approx(cost.oracle_time + cost.discard_time + cost.verification_time,
                                            rel=1e-12, abs=1e-12)
    # (4): latency per token
    assert cost.latency == pytest.approx(t_draft + t_draft * cost.discard_rate
                                         + (t_target - t_draft) * cost.verification_rate, rel=1e-12)
    assert cost.discard_rate == res.discarded / N and cost.verification_rate == res.target_calls / N


@settings(max_examples=25, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=4), st.sampled_from([TokenVerify, BlockVerify, BackwardBlockVerify]),
       st.booleans(), st.floats(0.0, 2.0), st.floats(0.1, 3.0), st.integers(0, 2**16))
def test_cost_identity_holds_on_every_chain_run(pair, cls, adaptive, t_draft, t_target, seed):
    draft, target, L = pair
    length = CoinController(L, seed) if adaptive else L
    N = min(12, target.horizon or 12, (draft.horizon or 12) + 1)
    res = generate(draft, target, cls(), length, N, n_sequences=3, seed=seed, progress=False)
    _check_identity(res, t_draft, t_target)


def test_cost_by_hand_on_a_bernoulli_pair():
    res = generate(bernoulli(0.3), bernoulli(0.6), TokenVerify(), 3, 400, n_sequences=8, seed=1, progress=False)
    cost = res.cost(0.1)  # t_target defaults to 1
    assert cost.total_time == pytest.approx(0.1 * res.draft_calls + res.target_calls)
    assert cost.speedup == pytest.approx(res.generated / cost.total_time)
    _check_identity(res, 0.1, 1.0)
    with pytest.raises(ValueError, match="t_draft"):
        res.cost(-1.0)
    with pytest.raises(ValueError, match="t_target"):
        res.cost(0.1, 0.0)


def test_trees_report_total_time_but_not_the_chain_decomposition():
    draft, target = bernoulli(0.3), bernoulli(0.6)
    res = generate_tree(draft, target, MultiRound(), DraftTree((3, 1)), 200, rule="accepted", n_sequences=4,
                        seed=0, progress=False)
    cost = res.cost(0.2, 1.0)
    assert cost.total_time == pytest.approx(0.2 * res.draft_calls + res.target_calls)
    assert not cost.decomposition_holds  # three candidates per draft pass: (2) is a chain identity
    chain = generate_tree(draft, target, MultiRound(), DraftTree.chain(2), 200, rule="accepted", n_sequences=4,
                          seed=0, progress=False)
    _check_identity(chain, 0.2, 1.0)


def test_hindsight_oracle_discards_only_unavoidable_first_drafts():
    """Theorem 4.1 on greedy decoding: no drafted token past an iteration's first one is ever discarded."""
    from otspec.engine import FixedDraftLength, HindsightOracle
    from otspec.sources import GreedySource, random_markov

    base_d, base_t = random_markov(4, 1.0, seed=5)
    draft, target = GreedySource(base_d), GreedySource(base_t)
    N, B = 300, 4
    res = generate(draft, target, TokenVerify(), HindsightOracle(64), N, n_sequences=B, seed=0, progress=False)
    toks = res.tokens
    # lossless with one-hot target rows: the output is the target's greedy sequence
    for i in range(N):
        assert np.array_equal(toks[:, i], np.argmax(target.next_probs(toks[:, :i]), axis=1))
    g = np.arange(res.accept_hist.shape[0])
    assert res.accept_hist[2:][g[2:, None] > g[None, :]].sum() == 0  # drafted >= 2: every draft accepted
    assert res.discarded == res.accept_hist[1, 0]  # the only discards: a rejected first draft
    mismatches = sum(int(np.sum(np.argmax(draft.next_probs(toks[:, :i]), axis=1) != toks[:, i])) for i in range(N))
    assert res.target_calls <= mismatches + B  # each call but the last of a sequence ends at a mismatch (eq. (5))
    fixed = generate(draft, target, TokenVerify(), FixedDraftLength(8), N, n_sequences=B, seed=0, progress=False)
    assert res.discarded < fixed.discarded and res.target_calls <= fixed.target_calls
