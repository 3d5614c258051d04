"""llm_bridge.replays: the one place that picks a drafter's replay (prompt lookup's chains, a head's rows by depth,
a draft model's logged rows), as the records' predictions, the frontier's and the benchmarks read it."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.drafters import NGramDrafter, Pair
from llm_bridge.head_replays import HEAD_METHOD, head_replays
from llm_bridge.logrows import record_rows
from llm_bridge.loop import plain_generate
from llm_bridge.ngram_replays import NGRAM_METHOD, ngram_pairs
from llm_bridge.replays import more_paths, replay_sources
from llm_bridge.sampling import Sampling
from otspec.engine.predict import METHOD, ReplayPlan, predict_from_log, predict_from_pairs
from otspec.verifiers import REGISTRY
from tests.llm_tiny import VOCAB, random_prompts, tiny_pair
from tests.test_llm_bridge_heads import REDUCED, head_pair

L = 2


def plain(pair, prompts, T=6):
    return plain_generate(pair.target, prompts, T, sampling=Sampling(), seed=3, progress=False).tokens


def rows(source):
    return source.by_depth if hasattr(source, "by_depth") else source.rows


def assert_same_pairs(got, want):
    assert len(got) == len(want)
    for (got_draft, got_target), (want_draft, want_target) in zip(got, want, strict=True):
        np.testing.assert_array_equal(rows(got_draft), rows(want_draft))
        np.testing.assert_array_equal(rows(got_target), rows(want_target))


def test_a_draft_model_is_replayed_from_its_logged_rows():
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(3, np.random.default_rng(0))
    conts = plain(pair, prompts)
    got = replay_sources(pair, prompts, conts, L, batch_size=2, meta={"use": "a test"})
    want = record_rows(pair, prompts, conts, batch_size=2)
    assert (got.kind, got.method, got.pairs) == ("log", METHOD, None)
    assert got.log.meta["use"] == "a test"
    np.testing.assert_array_equal(got.log.tokens, want.tokens)
    assert_same_pairs(got.path_pairs(), list(want.path_pairs()))
    assert_same_pairs(got.path_pairs(), got.path_pairs())  # fresh sources on every call, the same rows
    for name in ("token", "block_v1"):  # the pairs and the log itself predict the same
        a = predict_from_pairs(got.path_pairs(), REGISTRY[name](), L, ReplayPlan(sequences=4, seed=1))
        b = predict_from_log(got.log, REGISTRY[name](), L, ReplayPlan(sequences=4, seed=1))
        assert a.block_efficiency == pytest.approx(b.block_efficiency, abs=1e-12)


@pytest.mark.parametrize("kind", ["eagle", "medusa"])
def test_a_head_is_replayed_by_depth_one_row_past_the_longest_draft(kind):
    pair = head_pair(kind, REDUCED)
    prompts = random_prompts(2, np.random.default_rng(1))
    conts = plain(pair, prompts)
    states = [] if kind == "eagle" else None
    got = replay_sources(pair, prompts, conts, L, states=states)
    assert (got.kind, got.method, got.log) == ("head", HEAD_METHOD, None)
    assert_same_pairs(got.path_pairs(), head_replays(pair, prompts, conts, L + 1))
    assert all(draft.by_depth.shape[0] == L + 1 for draft, _ in got.pairs)  # v1 reads the row after the draft
    if states is not None:
        assert len(states) == len(prompts) and states[0].shape[0] == L + 1
    pred = predict_from_pairs(got.path_pairs(), REGISTRY["block_v1"](), L, ReplayPlan(sequences=2, seed=0))
    assert 1.0 <= pred.block_efficiency <= L + 1


def test_prompt_lookup_is_replayed_chain_by_chain():
    tiny = tiny_pair(sharpness=2.0)
    pair = Pair(tiny.target, NGramDrafter(VOCAB, 2))
    prompts = [[1, 5, 6, 7, 5, 6, 7, 5], [4, 9, 4, 9, 3, 4, 9]]
    conts = plain(pair, prompts, T=8)
    got = replay_sources(pair, prompts, conts, L)
    assert (got.kind, got.method, got.log) == ("ngram", NGRAM_METHOD, None)
    assert_same_pairs(got.path_pairs(), ngram_pairs(pair, prompts, conts, depth=L))


def test_a_longest_draft_below_one_is_refused_before_any_replay():
    pair = tiny_pair()
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="longest draft"):
            replay_sources(pair, [[1, 2]], [[3, 4]], bad)


def test_more_paths_decodes_other_plain_paths_of_every_prompt():
    """The given continuation first, then independent plain decodings of the same prompt (seed + 1, ...), one
    prompt's paths after another: the order ``predict_from_pairs(paths_per_prompt=...)`` pools."""
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(3, np.random.default_rng(4))
    first = plain(pair, prompts)
    got_prompts, got = more_paths(pair, prompts, first, 6, 3, sampling=Sampling(), seed=3)
    assert got_prompts == [p for p in prompts for _ in range(3)] and len(got) == 9
    again = [plain_generate(pair.target, prompts, 6, sampling=Sampling(), seed=s, progress=False).tokens
             for s in (4, 5)]
    for k in range(3):
        np.testing.assert_array_equal(got[3 * k], first[k])
        for g in (1, 2):
            np.testing.assert_array_equal(got[3 * k + g], again[g - 1][k])
    assert any(not np.array_equal(got[3 * k], got[3 * k + 1]) for k in range(3))  # other draws, not copies
    same_prompts, same = more_paths(pair, prompts, first, 6, 1)
    assert same_prompts == list(prompts) and all(a is b for a, b in zip(same, first, strict=True))
    pooled = predict_from_pairs(replay_sources(pair, got_prompts, got, L).path_pairs(), REGISTRY["token"](), L,
                                ReplayPlan(sequences=4, paths_per_prompt=3))
    assert pooled.as_dict()["prompts"] == 3 and pooled.replay_iterations.shape == (3, 12)
    with pytest.raises(ValueError, match="one per prompt"):
        more_paths(pair, prompts, first[:2], 6, 2)
    with pytest.raises(ValueError, match="paths"):
        more_paths(pair, prompts, first, 6, 0)
