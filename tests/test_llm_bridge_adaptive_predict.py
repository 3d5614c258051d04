"""The learned head's threshold rules replayed on a log (llm_bridge.adaptive_predict): where the rule drafts, as
the loop's controller decides it, the draft's states along a continuation, and the limits where the replay must
equal fixed K exactly."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.adaptive_predict import rule_pairs, rule_proposals
from llm_bridge.logrows import draft_states_incremental, record_rows
from llm_bridge.loop import plain_generate
from llm_bridge.sampling import Sampling
from otspec.engine.heads import AcceptanceHead, LearnedHeadController
from otspec.engine.predict import ReplayPlan, predict_from_log, predict_from_pairs
from otspec.verifiers import TokenVerify
from tests.llm_tiny import random_prompts, tiny_pair, torch


def logit_head() -> AcceptanceHead:
    """P-hat = sigmoid(feature): a one-feature head whose feature is the logit of the wanted probability."""
    head = AcceptanceHead(1.0, 1.0, 0.0)
    head.theta, head.bias = np.ones(1), 0.0
    return head


def controller_depths(P, threshold, max_length, lagged):
    """How deep the loop's controller drafts from every block start, fed the states the loop would hand it."""
    logits = np.log(P) - np.log1p(-P)
    depths = []
    for s in range(P.size):
        ctrl = LearnedHeadController(logit_head(), None, threshold, max_length, lagged=lagged)
        ctrl.start(1)
        d = 1
        while d < min(max_length, P.size - s):
            at = s + d - int(lagged)  # the state at token d (lagged: d - 1; step 1: unused) makes the row at s + d
            feature = np.array([[logits[min(at, P.size - 1)]]])
            if not ctrl.keep_drafting(d, np.ones((1, 2)) / 2, which=np.array([0]), features=feature)[0]:
                break
            d += 1
        depths.append(d)
    return depths


@pytest.mark.parametrize("lagged", [False, True])
@pytest.mark.parametrize("threshold", [0.05, 0.3, 0.6, 0.95])
def test_the_rule_drafts_where_the_loops_controller_does(lagged, threshold):
    P = np.random.default_rng(int(threshold * 100) + lagged).uniform(0.4, 0.999, size=23)
    out = rule_proposals(P, threshold, 6, lagged=lagged)
    assert out.shape == (6, 23) and out[0].all()
    depth = [int(np.sum([out[d, s + d] for d in range(min(6, 23 - s))])) for s in range(23)]
    assert depth == controller_depths(P, threshold, 6, lagged)
    # by depth: a (D, T) array whose rows agree is the same rule; the rule reads depth k where the state is
    np.testing.assert_array_equal(rule_proposals(np.tile(P, (3, 1)), threshold, 6, lagged=lagged), out)
    by_depth = np.ones((6, 23))
    by_depth[2] = 0.01  # only the state that makes a depth-2 row predicts rejection
    deep, last = rule_proposals(by_depth, 0.5, 6, lagged=lagged), 1 + int(lagged)  # lagged: read one token later
    assert deep[last, last:].all() and not deep[last + 1:].any()


def test_a_lagged_rule_drafts_at_least_two_tokens():
    out = rule_proposals(np.full(10, 0.01), 0.1, 4, lagged=True)
    assert out[1, 1:].all() and not out[2].any()
    assert not rule_proposals(np.full(10, 0.01), 0.1, 4, lagged=False)[1].any()


@pytest.fixture(scope="module")
def logged():
    pair, sampling = tiny_pair(sharpness=2.0), Sampling()
    prompts = random_prompts(3, np.random.default_rng(4))
    conts = plain_generate(pair.target, prompts, 12, sampling=sampling, progress=False).tokens
    return pair, prompts, conts, record_rows(pair, prompts, conts, sampling=sampling, batch_size=2)


def test_states_are_the_drafts_state_at_each_token(logged):
    pair, prompts, conts, _ = logged
    states = list(draft_states_incremental(pair.drafter, prompts, conts, Sampling(), batch_size=2))
    model = pair.drafter.loaded.model
    for prompt, cont, got in zip(prompts, conts, states, strict=True):
        assert got.shape == (len(cont), model.config.hidden_size)
        with torch.no_grad():
            out = model(input_ids=torch.as_tensor([list(prompt) + list(cont)]), output_hidden_states=True)
        np.testing.assert_allclose(got, out.hidden_states[-1][0, len(prompt) - 1:-1].numpy(), atol=1e-9)


def test_the_rules_limits_are_fixed_lengths_exactly(logged):
    """h = 1 never stops before max_length; h near 0 stops after 1 token (unlagged) or 2 (lagged): the replay must
    then be fixed K's, draw for draw."""
    *_, log = logged
    stops = [np.random.default_rng(i).uniform(0.3, 0.9, size=n) for i, n in enumerate(np.diff(log.path_offsets))]
    for threshold, lagged, K in ((1.0, False, 4), (1.0, True, 4), (1e-9, False, 1), (1e-9, True, 2)):
        ctrl = LearnedHeadController(logit_head(), None, threshold, 4, lagged=lagged)
        rule = predict_from_pairs(rule_pairs(log.path_pairs(), stops, ctrl), TokenVerify(), 4,
                                  ReplayPlan(sequences=8, seed=3))
        fixed = predict_from_log(log, TokenVerify(), K, ReplayPlan(sequences=8, seed=3))
        assert rule.block_efficiency == pytest.approx(fixed.block_efficiency, abs=1e-12), (threshold, lagged)
        np.testing.assert_array_equal(rule.accept_hist[:K + 1, :K + 1], fixed.accept_hist)
    ctrl = LearnedHeadController(logit_head(), None, 0.5, 4, lagged=False)
    middle = predict_from_pairs(rule_pairs(log.path_pairs(), stops, ctrl), TokenVerify(), 4,
                                ReplayPlan(sequences=8, seed=3)).block_efficiency
    assert predict_from_log(log, TokenVerify(), 1, ReplayPlan(sequences=8, seed=3)).block_efficiency < middle


def test_eagle_states_make_its_rows_and_the_rules_limits_are_fixed_lengths():
    from llm_bridge.head_replays import depth_rows, head_replays
    from tests.test_llm_bridge_heads import head_pair

    pair, sampling = head_pair("eagle"), Sampling()
    head, model = pair.drafter.head, pair.target.model
    prompt, cont = [1, 9, 4], [12, 6, 3, 15, 8, 2]
    rows, _, states = depth_rows(head, model, prompt, cont, 3, sampling, states=True)
    assert states.shape == (3, len(cont), head.config.hidden_size)
    with torch.no_grad():
        again = sampling.rows(head.full_logits(head.reduced_logits(torch.as_tensor(states, dtype=torch.float64))))
    np.testing.assert_allclose(again, rows, atol=1e-9)
    prompts = random_prompts(3, np.random.default_rng(2))
    conts = plain_generate(pair.target, prompts, 10, sampling=sampling, progress=False).tokens
    kept = []
    replays = head_replays(pair, prompts, conts, 4, sampling=sampling, states=kept)
    assert [S.shape[:2] for S in kept] == [(4, len(c)) for c in conts]
    stops = [np.random.default_rng(i).uniform(0.3, 0.9, size=S.shape[:2]) for i, S in enumerate(kept)]
    for threshold, lagged, K in ((1.0, True, 4), (1e-9, False, 1), (1e-9, True, 2)):
        ctrl = LearnedHeadController(logit_head(), None, threshold, 4, lagged=lagged)
        rule = predict_from_pairs(rule_pairs(replays, stops, ctrl), TokenVerify(), 4, ReplayPlan(sequences=8, seed=3))
        fixed = predict_from_pairs(replays, TokenVerify(), K, ReplayPlan(sequences=8, seed=3))
        assert rule.block_efficiency == pytest.approx(fixed.block_efficiency, abs=1e-12), (threshold, lagged)
    with pytest.raises(ValueError, match="no state of their own"):
        depth_rows(head_pair("medusa").drafter.head, model, prompt, cont, 2, sampling, states=True)
