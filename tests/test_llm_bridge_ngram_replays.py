"""Prompt lookup replayed chain by chain (llm_bridge.ngram_replays): the chains the loop drafts, the target's
probabilities of them from one masked pass, and a replay that is exact where the run is deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.drafters import NGramDrafter, Pair
from llm_bridge.loop import plain_generate, speculative_generate
from llm_bridge.ngram_replays import chain_probs, ngram_pairs, prompt_lookup_chains
from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from otspec.engine.predict import ReplayPlan, predict_from_pairs
from otspec.sources import DepthPositionalSource, source_from_json
from otspec.verifiers import BlockVerify, TokenVerify
from tests.llm_tiny import VOCAB, tiny_pair, torch

HISTORY = [1, 5, 6, 7, 5, 6, 7, 5, 9, 5, 6]


def test_a_chain_keeps_copying_the_matched_passage():
    drafter = NGramDrafter(VOCAB, 2)
    chains = prompt_lookup_chains(drafter, HISTORY, 3, 4)
    assert len(chains) == len(HISTORY) - 3
    # after 1 5 6 7 5 6: (5, 6) recurs at 1 -> 7; then (6, 7) -> 5, (7, 5) -> 6, (5, 6) latest at 4 -> 7
    assert chains[3] == [7, 5, 6, 7]
    # the per-position replay would stop at the second token: the plain path goes 7 5 9 there
    assert drafter.propose(np.asarray(HISTORY[:8])) != 9 and chains[3][2] != HISTORY[8]
    assert prompt_lookup_chains(drafter, [3, 4], 1, 4) == [[]]  # a 1-token prefix proposes nothing


@pytest.mark.parametrize("start", [3, 5])
def test_chains_are_what_the_loops_session_drafts(start):
    drafter = NGramDrafter(VOCAB, 2)
    for s, chain in enumerate(prompt_lookup_chains(drafter, HISTORY, start, 3)):
        session = drafter.session(1)
        session.start([np.asarray(HISTORY[:start + s])])
        k = len(chain)
        scores = session.feed(np.asarray([chain + [0] * (3 - k)]), np.array([k]))
        assert scores.rows[0, np.arange(k)].argmax(axis=1).tolist() == chain
        assert scores.usable[0, :k].all() and (k == 3 or not scores.usable[0, k])


def test_one_masked_pass_scores_every_chain_as_separate_passes_do():
    model, sampling = tiny_pair().target.model, Sampling()
    start, chains = 4, [[3, 4], [], [5], [2, 2, 7], [9, 8], [], [6]]
    history = HISTORY[:start + len(chains)]
    rows, probs = chain_probs(model, history, start, chains, sampling)
    for s, chain in enumerate(chains):
        assert probs[s].shape == (len(chain),)
        for d in range(len(chain) + 1):
            with torch.no_grad():
                logits = model(input_ids=torch.as_tensor([history[:start + s] + chain[:d]])).logits[0, -1]
            row = sampling.rows(logits)
            if d == 0:
                np.testing.assert_allclose(rows[s], row, atol=1e-12)
            if d < len(chain):
                assert probs[s][d] == pytest.approx(row[chain[d]], abs=1e-12)
    with pytest.raises(ValueError, match="one chain per block start"):
        chain_probs(model, history, start, chains[:-1], sampling)


def test_depth_proposals_survive_json_and_are_checked():
    proposes = np.array([[True, False, True], [False, True, False]])
    draft = DepthPositionalSource(np.full((2, 3, 2), 0.5), proposes)
    again = source_from_json(draft.to_json())
    assert again.proposes(np.array([0, 1, 2]), np.array([0, 1, 1])).tolist() == [True, True, False]
    assert again.proposes(np.array([0, 1, 2])).tolist() == [True, False, True]  # no depths: depth 0
    with pytest.raises(ValueError, match="depth, position"):
        DepthPositionalSource(np.full((2, 3, 2), 0.5), proposes[:, :2])
    for bad in ([[True, False, True], [False, True]], [[True, 1, True], [False, True, False]], [True, [False]]):
        with pytest.raises(ValueError, match="one such list per depth, all as long"):
            source_from_json({**draft.to_json(), "proposes": bad})


def greedy_run(L, T):
    tiny = tiny_pair(sharpness=2.0)
    pair = Pair(tiny.target, NGramDrafter(VOCAB, 2))
    prompts = [[1, 5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6], [4, 9, 4, 9, 3, 4, 9], [7, 8, 7, 2, 2]]
    greedy = Sampling(temperature=0.0)
    conts = plain_generate(tiny.target, prompts, T, sampling=greedy, progress=False).tokens
    return pair, prompts, conts, greedy


@pytest.mark.parametrize("L", [2, 4])
def test_at_temperature_zero_the_replay_is_the_run(L):
    """Greedy decoding emits the plain path and every chain is accepted token for token while it agrees with it,
    so the chain replay must reproduce the run's histogram of (drafted, accepted) exactly, iteration by iteration."""
    T = 20
    pair, prompts, conts, greedy = greedy_run(L, T)
    replays = ngram_pairs(pair, prompts, conts, depth=L, sampling=greedy)
    for verifier in (TokenVerify(), BlockVerify()):
        run = speculative_generate(pair, prompts, verifier, L, T, DecodeOptions(sampling=greedy, progress=False))
        pred = predict_from_pairs(replays, verifier, L, ReplayPlan(sequences=2))
        np.testing.assert_array_equal(pred.accept_hist, 2 * run.decode.accept_hist)
        assert pred.block_efficiency == pytest.approx(run.decode.block_efficiency.value, abs=1e-12)
    assert run.decode.accept_hist[2:].sum() > 0  # chains longer than one token were drafted and judged


def test_replay_shape_and_refusals():
    pair, prompts, conts, greedy = greedy_run(3, 6)
    pairs = ngram_pairs(pair, prompts + [[2, 3]], [*conts, [4]], depth=3, sampling=greedy)
    assert len(pairs) == 3  # the 1-token continuation is left out
    draft, target = pairs[0]
    assert draft.by_depth.shape == (5, 6, 2) and target.by_depth.shape == (5, 6, 2)
    chains = prompt_lookup_chains(pair.drafter, list(prompts[0]) + list(conts[0]), len(prompts[0]), 3)
    for s, chain in enumerate(chains):
        depth = np.arange(min(len(chain) + 1, 6 - s))
        assert draft.proposes(s + depth, depth).tolist() == [d < len(chain) for d in depth]
    with pytest.raises(ValueError, match="not a prompt-lookup drafter"):
        ngram_pairs(tiny_pair(), prompts, conts, depth=3)
    with pytest.raises(ValueError, match="two tokens"):
        ngram_pairs(pair, [[1, 2]], [[3]], depth=2)
