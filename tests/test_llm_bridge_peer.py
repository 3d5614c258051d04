"""The Hugging Face peer (llm_bridge.peer) on tiny LLaMA models: batch-by-batch runs, the choice of its draft, the
record entry and the paired round bootstrap."""

from __future__ import annotations

import functools
import json
import time

import numpy as np
import pytest

from llm_bridge.drafters import ModelDrafter, NGramDrafter, Pair
from llm_bridge.loop import PAIRINGS, finish, interleave, plain_batches
from llm_bridge.models import LoadedModel
from llm_bridge.options import DecodeOptions
from llm_bridge.peer import (
    PEER_DRAFTS,
    HFResult,
    choose_peer,
    hf_assisted,
    hf_batches,
    peer_record,
    round_bootstrap_ci,
)
from llm_bridge.runs import round_entries, round_speedups, timed_runs
from llm_bridge.sampling import Sampling
from tests.driving import drive_pausing
from tests.llm_tiny import VOCAB, random_prompts, tiny_llama, tiny_pair

SAMPLING = Sampling(1.0, 0, 1.0)
N = 6


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(sharpness=2.0)


@pytest.fixture(scope="module")
def prompts():
    return random_prompts(5, np.random.default_rng(7))


def test_the_candidate_drafts():
    assert PEER_DRAFTS == ("ngram", "int8", "distilled")


def test_hf_batches_ticks_after_every_prompt_and_chunk_and_its_rounds_sum_to_its_totals(pair, prompts):
    ticks, r = drive_pausing(hf_batches(pair, prompts, N, sampling=SAMPLING, seed=3, batch_size=2, cache="auto",
                                        progress=False, anything="else"), 0.0)  # timed_runs' extra keywords ignored
    # a batch's last prompt ends with the round-end tick, not with a second tick at the same share
    assert [(t.done, t.round_end) for t in ticks] == [(0.2, False), (0.4, True), (0.6, False), (0.8, True),
                                                      (1.0, True)]
    assert len(r.rounds) == 3  # 2 + 2 + 1 prompts
    assert [g for g, _ in r.rounds] == [2 * N, 2 * N, N]
    assert sum(g for g, _ in r.rounds) == r.generated == len(prompts) * N
    assert sum(s for _, s in r.rounds) == pytest.approx(r.seconds) and r.seconds > 0
    assert r.tokens_per_s == pytest.approx(r.generated / r.seconds)
    assert len(r.tokens) == len(prompts) and all(len(t) == N for t in r.tokens)
    assert all(((t >= 0) & (t < VOCAB)).all() for t in r.tokens)
    assert r.mode == "assistant model" and r.draft == pair.drafter.name
    assert 1 <= r.target_calls <= r.generated and r.draft_calls >= 1
    assert r.acceptance_rate == pytest.approx((r.generated - r.target_calls) / r.draft_calls)
    assert 0 <= r.acceptance_rate <= 1


def test_plain_hf_batches_calls_the_target_once_per_token_and_do_not_depend_on_the_batching(pair, prompts):
    chunked = finish(hf_batches(pair, prompts, N, sampling=SAMPLING, seed=3, batch_size=2, assisted=False))
    whole = finish(hf_batches(pair, prompts, N, sampling=SAMPLING, seed=3, assisted=False))
    assert chunked.mode == whole.mode == "plain" and chunked.draft is None
    assert chunked.target_calls == len(prompts) * N and chunked.draft_calls == 0 and chunked.acceptance_rate is None
    assert len(whole.rounds) == 1 and len(chunked.rounds) == 3
    for a, b in zip(chunked.tokens, whole.tokens, strict=True):  # prompt i is seeded with seed + i either way
        np.testing.assert_array_equal(a, b)


def test_prompt_lookup_runs_without_draft_calls(pair, prompts):
    lookup = Pair(pair.target, NGramDrafter(VOCAB))
    r = finish(hf_batches(lookup, prompts[:2], N, sampling=SAMPLING))
    assert r.mode == "prompt lookup" and r.draft == "ngram:3" and r.draft_calls == 0 and r.acceptance_rate is None
    assert r.generated == 2 * N and 1 <= r.target_calls <= r.generated


def test_hf_assisted_keeps_its_keys(pair, prompts):
    out = hf_assisted(pair, prompts[:2], N, sampling=SAMPLING)
    assert set(out) >= {"tokens_per_s", "acceptance_rate", "plain_tokens_per_s", "speedup", "target_calls",
                        "draft_calls", "generated", "mode", "seconds"}
    assert out["generated"] == 2 * N and out["mode"] == "assistant model"
    assert out["speedup"] == pytest.approx(out["tokens_per_s"] / out["plain_tokens_per_s"])


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_hf_batches_interleaves_with_plain_batches(pair, prompts, pairing):
    order = []
    plain, hf, hf_plain = interleave(
        [plain_batches(pair.target, prompts, N, sampling=SAMPLING, batch_size=2, progress=False),
         hf_batches(pair, prompts, N, sampling=SAMPLING, batch_size=2, progress=False, cache="auto"),
         hf_batches(pair, prompts, N, sampling=SAMPLING, batch_size=2, assisted=False)],
        on_round=order.append, pairing=pairing)
    if pairing == "batches":
        assert order == [0, 1, 2, 1, 2, 0, 2, 0, 1]  # ABC, BCA, CAB: one batch of each in turn, the order rotating
    else:  # a batch of every run ends before any run starts its next
        assert [sorted(order[i:i + 3]) for i in (0, 3, 6)] == [[0, 1, 2]] * 3
    assert len(plain.rounds) == len(hf.rounds) == len(hf_plain.rounds) == 3
    # otspec's loop between HF's batches is not counted as HF's target calls
    assert hf_plain.target_calls == len(prompts) * N
    ratios = round_speedups(hf, {"rounds": round_entries(plain.rounds)})
    assert len(ratios) == 3 and all(x > 0 for x in ratios)
    record = peer_record(hf, hf_plain, round_entries(plain.rounds))
    assert record["speedup_vs_baseline"] == pytest.approx(hf.tokens_per_s / plain.tokens_per_s)
    ci = record["speedup_vs_baseline_ci"]
    assert ci["low"] <= ci["high"] and "paired bootstrap" in ci["method"]


def test_hf_batches_runs_inside_timed_runs(pair, prompts):
    runs = [functools.partial(hf_batches, pair, prompts[:2], N),
            functools.partial(hf_batches, pair, prompts[:2], N, assisted=False)]
    timed = timed_runs(pair.target, prompts[:2], runs, N, DecodeOptions(sampling=SAMPLING, batch_size=1, progress=False))
    hf, hf_plain = timed.results
    assert isinstance(hf, HFResult) and len(hf.rounds) == len(hf_plain.rounds) == 2
    record = peer_record(hf, hf_plain, timed.baseline["rounds"])
    assert len(record["rounds"]) == 2 and record["speedup_vs_baseline"] > 0
    json.dumps(record)


# --- choose_peer -----------------------------------------------------------------------------------------------


def _slow_drafter(target, delay: float = 0.01):
    """A draft model that sleeps ``delay`` seconds in every forward call: a draft that makes generation slow."""
    model = tiny_llama(5, 1, sharpness=2.0)
    model.register_forward_pre_hook(lambda *_: time.sleep(delay))
    return ModelDrafter(LoadedModel(model, target.tokenizer, "slow", "cpu", target.dtype), "slow")


class _Head:
    name = "head"  # a feature-level head: no model of its own


def _make(name, target):
    if name == "fast":
        return NGramDrafter(target.vocab_size)
    if name == "slow":
        return _slow_drafter(target)
    if name == "head":
        return _Head()
    raise FileNotFoundError(f"no weights for {name}")


def test_choose_peer_picks_the_fastest_and_records_the_skipped(pair, prompts):
    chosen, info = choose_peer(pair, prompts[:2], N, sampling=SAMPLING, drafts=("slow", "missing", "fast", "head"),
                               make=_make)
    json.dumps(info)  # the record's object; the pair comes beside it
    cands = info["candidates"]
    assert list(cands) == ["slow", "missing", "fast", "head"]
    assert info["chosen"] == "fast" and isinstance(chosen.drafter, NGramDrafter) and chosen.target is pair.target
    assert cands["fast"]["tokens_per_s"] > cands["slow"]["tokens_per_s"]
    assert info["chosen"] == max((n for n in cands if not cands[n]["skipped"]), key=lambda n: cands[n]["tokens_per_s"])
    assert "no weights for missing" in cands["missing"]["skipped"] and cands["missing"]["tokens_per_s"] is None
    assert "no model of its own" in cands["head"]["skipped"]
    for name in ("fast", "slow"):
        c = cands[name]
        assert c["skipped"] is None
        assert c["speedup"] == pytest.approx(c["tokens_per_s"] / info["plain_tokens_per_s"])
        assert c["speedup_ci"]["low"] <= c["speedup_ci"]["high"]
    assert cands["slow"]["acceptance_rate"] is not None and cands["fast"]["mode"] == "prompt lookup"
    assert info["prompts"] == 2 and "in turn" in info["method"] and set(info["load_average"]) == {"start", "end"}


def test_choose_peer_with_the_default_drafts_skips_those_that_do_not_fit(pair, prompts):
    chosen, info = choose_peer(pair.target, prompts[:1], 4, sampling=SAMPLING, drafts=("ngram", "distilled"))
    assert info["chosen"] == "ngram" and chosen.drafter.name == "ngram:3"
    assert info["candidates"]["distilled"]["skipped"]  # made for SmolLM2's vocabulary, not the tiny one


def test_choose_peer_with_no_usable_draft(pair, prompts):
    chosen, info = choose_peer(pair, prompts[:1], 4, sampling=SAMPLING, drafts=("missing",), make=_make)
    assert chosen is None and info["chosen"] is None and info["candidates"]["missing"]["skipped"]
    with pytest.raises(ValueError, match="calibration prompt"):
        choose_peer(pair, [], 4, sampling=SAMPLING, make=_make)


# --- peer_record -----------------------------------------------------------------------------------------------


def _result(rounds, mode="assistant model", target_calls=10, draft_calls=12, draft="d"):
    tokens = [np.zeros(g, dtype=np.int64) for g, _ in rounds]
    return HFResult(tokens, list(rounds), target_calls, draft_calls, mode, draft)


def test_peer_record_from_two_runs():
    assisted = _result([(8, 1.0), (8, 0.5), (8, 0.8)], target_calls=12, draft_calls=20)
    plain = _result([(8, 2.0), (8, 1.2), (8, 1.5)], mode="plain", target_calls=24, draft_calls=0, draft=None)
    rec = peer_record(assisted, plain)
    assert rec["speedup"] == pytest.approx(4.7 / 2.3)
    assert rec["plain_tokens_per_s"] == pytest.approx(24 / 4.7) and rec["tokens_per_s"] == pytest.approx(24 / 2.3)
    assert rec["rounds"] == pytest.approx([2.0, 2.4, 1.875])
    assert rec["acceptance_rate"] == pytest.approx(12 / 20) and rec["draft"] == "d" and rec["prompts"] == 3
    ci = rec["speedup_ci"]
    assert 1.875 - 1e-9 <= ci["low"] <= rec["speedup"] <= ci["high"] <= 2.4 + 1e-9
    assert "speedup_vs_baseline" not in rec
    rec = peer_record(assisted, plain, [{"generated": 8, "seconds": 1.0}] * 3)
    assert rec["speedup_vs_baseline"] == pytest.approx(3.0 / 2.3)
    assert rec["speedup_vs_baseline_ci"]["low"] <= rec["speedup_vs_baseline"] <= rec["speedup_vs_baseline_ci"]["high"]
    rec = peer_record(assisted, plain, [{"generated": 8, "seconds": 1.0}] * 2)  # not decoded in turn
    assert rec["speedup_vs_baseline"] is None and "not decoded in turn" in rec["speedup_vs_baseline_skipped"]
    json.dumps(rec)
    with pytest.raises(ValueError, match="timing rounds"):
        peer_record(assisted, _result([(8, 1.0)]))


# --- round_bootstrap_ci ----------------------------------------------------------------------------------------


def test_equal_rounds_collapse_the_interval_to_the_point():
    ci = round_bootstrap_ci([(10, 0.5)] * 6, [(10, 1.0)] * 6)
    assert ci["low"] == pytest.approx(2.0) and ci["high"] == pytest.approx(2.0)
    assert ci["median"] == pytest.approx(2.0) and ci["point"] == pytest.approx(2.0) and ci["rounds"] == 6


def test_noisy_rounds_contain_the_ratio_of_sums_and_are_narrower_than_the_rounds():
    rng = np.random.default_rng(1)
    n = 30
    den = [(16, float(s)) for s in rng.uniform(0.8, 1.2, n)]
    num = [(16, s / float(x)) for (_, s), x in zip(den, rng.uniform(1.2, 2.0, n), strict=True)]
    ci = round_bootstrap_ci(num, den, seed=3)
    point = (sum(g for g, _ in num) / sum(s for _, s in num)) / (sum(g for g, _ in den) / sum(s for _, s in den))
    assert ci["point"] == pytest.approx(point)
    assert ci["low"] < point < ci["high"]
    per_round = [(ga / sa) / (gd / sd) for (ga, sa), (gd, sd) in zip(num, den, strict=True)]
    assert min(per_round) < ci["low"] and ci["high"] < max(per_round)
    assert (ci["high"] - ci["low"]) < 0.5 * (max(per_round) - min(per_round))
    assert round_bootstrap_ci(num, den, seed=3) == ci  # seeded
    assert "paired bootstrap" in ci["method"] and "4000 draws" in ci["method"]
    dicts = round_bootstrap_ci([{"generated": g, "seconds": s} for g, s in num], den, seed=3)
    assert dicts == ci  # record entries work as well as pairs


def test_the_bootstrap_pairs_the_rounds():
    """A slow window slows both runs alike: paired, the speedup is the same in every round and the interval is a
    point; the rounds' own speeds vary fivefold."""
    den = [(10, s) for s in (1.0, 5.0, 2.0, 3.0)]
    num = [(10, s / 2) for _, s in den]
    ci = round_bootstrap_ci(num, den)
    assert ci["low"] == pytest.approx(2.0) and ci["high"] == pytest.approx(2.0)


@pytest.mark.parametrize("num, den, match", [
    ([], [], "num_rounds is empty"),
    ([(1, 1.0)], [], "den_rounds is empty"),
    ([(1, 1.0), (1, 1.0)], [(1, 1.0)], "2 rounds and den_rounds 1"),
    ([(1, 0.0)], [(1, 1.0)], "positive seconds"),
    ([(1, 1.0)], [(1, -2.0)], "positive seconds"),
    ([(0, 1.0)], [(1, 1.0)], "positive number of tokens"),
    ([(1, float("nan"))], [(1, 1.0)], "finite"),
    ([(1, 1.0, 3)], [(1, 1.0)], "pair"),
])
def test_bad_rounds_raise(num, den, match):
    with pytest.raises(ValueError, match=match):
        round_bootstrap_ci(num, den)


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="confidence"):
        round_bootstrap_ci([(1, 1.0)], [(1, 1.0)], confidence=1.0)
    with pytest.raises(ValueError, match="draws"):
        round_bootstrap_ci([(1, 1.0)], [(1, 1.0)], draws=0)

