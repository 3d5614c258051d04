"""SpecDec++ on real models (llm_bridge.adaptive) with tiny LLaMA models: head data, the lagged head in the loop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llm_bridge import adaptive
from llm_bridge.cache import CachedLM
from llm_bridge.loop import speculative_generate
from llm_bridge.options import DecodeOptions
from otspec.engine.heads import AcceptanceHead, LearnedHeadController
from otspec.plot import main as plot_main
from otspec.verifiers import TokenVerify
from tests.llm_tiny import random_prompts, tiny_llama, tiny_pair, tiny_tokenizer, torch


def test_hidden_states_from_the_cache_equal_a_full_forward_pass():
    model = tiny_llama(2)
    cache = CachedLM(model, 2, hidden=True)
    cache.feed(np.array([[1, 5, 7], [1, 4, 0]]), [3, 2])
    _, hidden = cache.feed(np.array([[9, 3], [6, 0]]), [2, 1])
    for b, (seq, last) in enumerate((([1, 5, 7, 9, 3], 1), ([1, 4, 6], 0))):
        with torch.no_grad():
            ref = model(torch.as_tensor([seq]), output_hidden_states=True).hidden_states[-1][0, -1]
        assert float((hidden[b, last] - ref).abs().max()) < 1e-12


def test_head_data_follows_the_papers_construction():
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(5, np.random.default_rng(1))
    data = adaptive.head_training_data(pair, prompts, 12, mix=0.25, seed=3, progress=False)
    n = data.labels.size
    assert data.features.shape == (n, 32) and np.all((data.labels >= 0) & (data.labels <= 1))
    assert 0.5 * 60 < n < 60  # about (1 − r) of the 5 × 12 positions
    assert set(np.unique(data.prompt)) == set(range(5))
    assert data.labels.mean() < 1.0  # the tiny pair disagrees somewhere
    train, test = data.split(0.4)
    assert set(np.unique(train.prompt)) == {0, 1, 2} and set(np.unique(test.prompt)) == {3, 4}
    none = adaptive.head_training_data(pair, prompts[:1], 6, mix=1.0, seed=0, progress=False)
    assert none.labels.size == 0  # every position mixed in from the target: no row
    with pytest.raises(ValueError, match="mix"):
        adaptive.head_training_data(pair, prompts, 4, mix=1.5)


def test_trained_head_runs_in_the_loop_lagged():
    pair = tiny_pair(sharpness=2.0)
    data = adaptive.head_training_data(pair, random_prompts(8, np.random.default_rng(2)), 16, seed=1, progress=False)
    head, report = adaptive.train_head(data, w_rej=1.0, held_out=0.25)  # unweighted: the loss is the KL + const
    assert report["rows"]["train"] + report["rows"]["test"] == data.labels.size
    assert report["binary_kl"]["train"] <= report["binary_kl_constant"]["train"] + 1e-9
    assert report["weighted_loss"]["train"] <= report["weighted_loss_constant"]["train"] + 1e-7  # θ = 0 is feasible
    seen = []

    class Recording(LearnedHeadController):
        def keep_drafting(self, step, draft_rows, **kw):
            seen.append((step, kw["features"].shape))
            return super().keep_drafting(step, draft_rows, **kw)

    ctrl = Recording(head, None, 0.5, 6, lagged=True)
    run = speculative_generate(pair, random_prompts(3, np.random.default_rng(4)), TokenVerify(), ctrl, 30,
                               DecodeOptions(progress=False))
    drafted = run.decode.accept_hist.sum(axis=1)
    assert run.decode.generated == 90
    assert drafted[1] == 0 or drafted[1] <= 3  # the lagged rule never stops after one token (ends of sequences aside)
    assert all(shape[1] == 32 for _, shape in seen) and any(step > 1 for step, _ in seen)
    eager = LearnedHeadController(head, None, 1e-9, 6)  # not lagged, threshold ~0: stops at the first token
    one = speculative_generate(pair, random_prompts(2, np.random.default_rng(4)), TokenVerify(), eager, 10,
                               DecodeOptions(progress=False))
    assert one.decode.accept_hist.sum(axis=1)[2:].sum() == 0


def test_unlagged_head_reads_the_state_at_the_drafted_token():
    """Lagged (Algorithm 1): the features at step 1 are the draft's last hidden state at the context's last token;
    unlagged: at the drafted token itself, fed before the rule decides (one more draft call per round)."""
    pair = tiny_pair(sharpness=2.0)
    rng = np.random.default_rng(0)
    head = AcceptanceHead().fit(rng.normal(size=(100, 32)), rng.uniform(0.3, 0.9, size=100))
    seen = []

    class Recording(LearnedHeadController):
        def keep_drafting(self, step, draft_rows, **kw):
            seen.append((step, np.array(kw["tokens"]), np.array(kw["features"])))
            return super().keep_drafting(step, draft_rows, **kw)

    prompt = random_prompts(1, np.random.default_rng(4))
    calls = {}
    for lagged in (True, False):
        seen.clear()
        run = speculative_generate(pair, prompt, TokenVerify(), Recording(head, None, 1e-9, 4, lagged=lagged), 12,
                                   DecodeOptions(progress=False))
        step, tokens, features = seen[0]  # the first round's first drafted token x_1
        assert step == 1
        context = list(prompt[0]) + ([] if lagged else [int(tokens[0])])
        with torch.no_grad():
            hidden = pair.drafter.model(input_ids=torch.as_tensor([context]), output_hidden_states=True)
        np.testing.assert_allclose(features[0], hidden.hidden_states[-1][0, -1].double().numpy(), atol=1e-5)
        calls[lagged] = (run.timer.count("draft"), run.decode.iterations, run.decode.accept_hist.sum(axis=1))
    lagged_hist, unlagged_hist = calls[True][2], calls[False][2]
    assert lagged_hist[1] == 0 or lagged_hist[1] <= 1  # threshold ~0: the lagged rule still drafts 2 (ends aside)
    assert unlagged_hist[2:].sum() == 0 and unlagged_hist[1] > 0  # the unlagged rule stops after 1
    assert calls[False][0] == 2 * (calls[False][1] - unlagged_hist[0])  # 2 draft calls per drafting round
    with pytest.raises(ValueError, match="unlagged head"):
        from otspec.verifiers import BackwardBlockVerify

        speculative_generate(pair, prompt, BackwardBlockVerify(), LearnedHeadController(head, None, 0.5, 4), 6,
                             DecodeOptions(progress=False))


def test_saved_head_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    head = AcceptanceHead(w_rej=2.0).fit(rng.normal(size=(50, 4)), rng.uniform(size=50))
    path = adaptive.save_head(head, tmp_path / "head.json", {"w_acc": 1.0, "w_rej": 2.0, "features": 4})
    again, meta = adaptive.load_head(path)
    x = rng.normal(size=(7, 4))
    np.testing.assert_array_equal(again.predict(x), head.predict(x))
    assert meta["features"] == 4
    with pytest.raises(FileNotFoundError, match="no acceptance head"):
        adaptive.load_head(tmp_path / "missing.json")


def test_cli_writes_the_frontier(tmp_path):
    root = tmp_path / "pair"
    for name, seed, layers in (("target", 0, 2), ("draft", 1, 1)):
        tiny_llama(seed, layers, dtype=torch.float32).save_pretrained(root / name)
        tiny_tokenizer().save_pretrained(root / name)
    out = tmp_path / "figs"
    args = ["--target", str(root / "target"), "--draft", str(root / "draft"), "--device", "cpu", "--train-prompts", "4",
            "--train-tokens", "10", "--thresholds", "0.3", "--fixed", "1,3", "--max-length", "5", "--prompts", "2",
            "--max-new-tokens", "10", "--name", "tiny", "--out-dir", str(out), "--save-head", str(tmp_path / "h.json")]
    assert adaptive.main(args) == 0
    record = json.loads((out / "llm_adaptive_tiny.json").read_text())
    assert [r["value"] for r in record["fixed"]] == [1, 3] and [r["value"] for r in record["threshold"]] == [0.3]
    assert [r["value"] for r in record["threshold_unlagged"]] == [0.3] and set(record["rules"]) == {
        "threshold", "threshold_unlagged"}
    assert record["timing"]["baseline_after_ms_per_token"] > 0
    for r in record["fixed"] + record["threshold"] + record["threshold_unlagged"]:
        assert r["block_efficiency"]["unit"] == "prompt" and "interleaved" in r["speedup_interval"]["method"]
        assert {"discard_rate", "verification_rate", "tokens_per_s", "speedup", "block_efficiency"} <= set(r)
        rates = r["acceptance_per_position_unconditional"]  # the engine-style metrics, as in validate's records
        assert r["mean_acceptance_length"] >= 1 and all(a >= b - 1e-12 for a, b in zip(rates, rates[1:], strict=False))
        assert 0 <= r["draft_acceptance_rate"] <= 1 and r["engine_metrics"]["mean_acceptance_length"] == \
            r["mean_acceptance_length"]
        assert 0 < r["verification_rate"] <= 1 and r["discard_rate"] >= 0
    assert record["fixed"][0]["discard_rate"] <= record["fixed"][1]["discard_rate"] + 0.5
    settings = record["settings"]  # predictions on other prompts than the measured ones
    assert settings["prompt_ids"] == [0, 1] and settings["prediction_prompt_ids"] == [2, 3]
    assert record["profile"]["interleaved_with_runs"] is True  # measured in turn with the frontier's runs
    assert record["profile"]["kind"] == "cost_profile" and set(record["profile"]["configs"]) == {
        "token:L=1", "token:L=3", "token:threshold=0.3", "token:threshold_unlagged=0.3"}
    for r in record["fixed"]:  # fixed K predicted from the rows logged along plain decoding of the prediction prompts
        pi = r["predicted_block_efficiency_interval"]
        assert pi["low"] <= r["predicted_block_efficiency"] <= pi["high"] <= r["value"] + 1
        assert "decode engine" in r["prediction_method"] and r["prediction"]["paths"] == 2
        sp = r["speedup_prediction"]
        assert sp["source"] == "cost_profile" and sp["profile_config"] == f"token:L={r['value']}"
        assert r["predicted_speedup_interval"]["low"] <= r["predicted_speedup"] <= r["predicted_speedup_interval"]["high"]
        assert r["latency_ms"] is None and "model_speedup" not in r  # batch 8: no per-sequence cost model
        assert r["speedup_ci"]["rounds"] == 1
    for r in record["threshold"] + record["threshold_unlagged"]:  # the learned rule replayed on the draft's states
        pi = r["predicted_block_efficiency_interval"]
        assert pi["low"] <= r["predicted_block_efficiency"] <= pi["high"] <= 13
        assert "learned head's rule replayed" in r["prediction_method"] and r["prediction"]["paths"] == 2
        assert r["speedup_prediction"]["source"] == "cost_profile" and r["predicted_speedup"] > 0
    assert plot_main(["record", str(out / "llm_adaptive_tiny.json")]) == 0
    summary = (out / "llm_adaptive_tiny.md").read_text()
    assert "threshold h = 0.3 (lagged)" in summary and "threshold h = 0.3 (unlagged)" in summary
    assert "Best unlagged threshold" in summary and "like for like with fixed K = 1" in summary
    assert "*Predicted* (fixed K and the threshold rules): decode engine" in summary
    assert (out / "llm_adaptive_tiny.png").stat().st_size > 10_000
    hf = record["hf_assisted"]  # the peer: chosen on the prediction prompts, then decoding the measured ones in turn
    assert settings["hf_prompts"] == 2 and hf["choice"]["prompts"] == 2 and hf["prompts"] == 2
    assert hf["choice"]["chosen"] in hf["choice"]["candidates"] and len(hf["rounds"]) == 1
    assert hf["speedup_vs_baseline"] > 0 and "Hugging Face assisted generation (" in summary
    # a saved head is reused without training; --no-hf leaves the peer out
    assert adaptive.main(args[:6] + ["--head", str(tmp_path / "h.json"), "--no-hf"] + args[16:-2]) == 0
    again = json.loads((out / "llm_adaptive_tiny.json").read_text())
    assert "hf_assisted" not in again and again["settings"]["hf_prompts"] is None
    assert adaptive.main(args[:6] + ["--thresholds", "1.5"]) == 2


def test_ridge_penalty_is_chosen_on_held_out_prompts():
    rng = np.random.default_rng(5)
    n, d = 400, 64
    prompt = np.repeat(np.arange(20), n // 20)
    noise = rng.standard_normal((n, d))
    labels = rng.random(n)  # unrelated to the features: a light penalty only fits noise
    l2, scores = adaptive.choose_l2(adaptive.HeadData(noise, labels, prompt), w_rej=1.0)
    assert l2 >= 0.1 and scores[l2] < scores[1e-4]
    theta = np.zeros(d)
    theta[0] = 3.0
    signal = 1 / (1 + np.exp(-(noise @ theta)))  # labels a function of one feature: a light penalty wins
    l2, scores = adaptive.choose_l2(adaptive.HeadData(noise, signal, prompt), w_rej=1.0)
    assert l2 <= 1e-2 and scores[l2] < scores[1.0]
    data = adaptive.HeadData(noise, signal, prompt)
    _, report = adaptive.train_head(data, w_rej=1.0)
    assert report["l2"] == adaptive.choose_l2(data.split(0.2)[0], w_rej=1.0)[0]  # the test prompts stay unseen
    assert set(report["l2_validation_loss"]) == {str(x) for x in adaptive.L2_GRID}
    with pytest.raises(ValueError, match="two prompts"):
        adaptive.choose_l2(adaptive.HeadData(noise[:5], labels[:5], np.zeros(5)))
    assert AcceptanceHead(1.0, 1.0).fit(noise, signal).loss(noise, signal) < AcceptanceHead(1.0, 1.0, 1.0).fit(
        noise, signal).loss(noise, signal)


def test_a_feature_head_runs_the_confidence_rule(tmp_path):
    """``--draft head:FOLDER``: the dynamic rule is the head's own confidence (no acceptance head is trained), fixed K
    is predicted from the head's rows replayed by draft depth, and the summary names the rule."""
    from llm_bridge.heads import EagleHead, save_head

    root = tmp_path / "target"
    tiny_llama(0, 2, dtype=torch.float32).save_pretrained(root)
    tiny_tokenizer().save_pretrained(root)
    target = tiny_llama(0, 2, dtype=torch.float32)
    torch.manual_seed(0)
    head = EagleHead(target, np.arange(3, 20))
    with torch.no_grad():
        for p in head.parameters():
            if p.requires_grad:
                p.add_(0.2 * torch.randn_like(p))
    save_head(head, tmp_path / "eagle", {"target": "tiny"})
    out = tmp_path / "figs"
    args = ["--target", str(root), "--draft", f"head:{tmp_path / 'eagle'}", "--device", "cpu", "--thresholds",
            "0.0,0.5,1.0", "--fixed", "1,3", "--max-length", "3", "--prompts", "2", "--max-new-tokens", "8",
            "--name", "tinyhead", "--out-dir", str(out), "--batch-size", "1", "--prediction-paths", "2"]
    assert adaptive.main(args) == 0
    record = json.loads((out / "llm_adaptive_tinyhead.json").read_text())
    assert record["head"]["rule"] == "confidence" and set(record["rules"]) == {"threshold"}
    assert "threshold_unlagged" not in record
    by_h, by_k = {r["value"]: r for r in record["threshold"]}, {r["value"]: r for r in record["fixed"]}
    for h, K in ((0.0, 3), (1.0, 1)):  # h = 0 always drafts K_max; h = 1 stops after one token (no row is one-hot)
        for key in ("mean_draft_length", "block_efficiency", "discard_rate"):
            assert by_h[h][key] == by_k[K][key], (h, key)
    assert by_k[1]["mean_draft_length"] <= by_h[0.5]["mean_draft_length"] <= by_k[3]["mean_draft_length"]
    assert record["settings"]["prediction_paths"] == 2
    for r in record["fixed"] + record["threshold"]:  # two plain paths of each of the two prediction prompts
        assert "draft depth" in r["prediction_method"] and r["prediction"]["paths"] == 4
        assert r["prediction"]["prompts"] == 2
    assert plot_main(["record", str(out / "llm_adaptive_tinyhead.json")]) == 0
    summary = (out / "llm_adaptive_tinyhead.md").read_text()
    assert "confidence h = 0.5" in summary and "Rule: confidence" in summary and "lagged" not in summary


def test_on_policy_rows_pair_each_drafted_token_with_its_own_label():
    """A drafter that is the target accepts every token: every label min{1, q/p} is 1, at every depth (a row read
    one position off would not be). The rows cover every prompt, one per drafted token."""
    from llm_bridge.drafters import ModelDrafter, Pair

    pair = tiny_pair(sharpness=2.0)
    same = Pair(pair.target, ModelDrafter(pair.target))
    prompts = random_prompts(3, np.random.default_rng(8))
    data = adaptive.head_training_data_on_policy(same, prompts, 9, draft_length=3, batch_size=2)
    np.testing.assert_allclose(data.labels, 1.0, atol=1e-12)
    assert data.features.shape == (data.labels.size, 32)
    # 9 tokens per prompt at K = 3, all accepted: two rounds of 3 drafts + the bonus token, then the target's own
    assert np.bincount(data.prompt).tolist() == [6, 6, 6]
    other = adaptive.head_training_data_on_policy(pair, prompts, 9, draft_length=3, batch_size=2)
    assert 0.0 <= other.labels.min() and other.labels.max() <= 1.0 and other.labels.min() < 1.0


def test_an_eagle_head_trains_the_specdecpp_rule_on_its_own_states():
    """``--rule specdecpp`` with a feature head: the acceptance head is fitted on the head's states along its own
    drafting (width = the head's hidden size), and both threshold rules run in the frontier."""
    from tests.test_llm_bridge_heads import head_pair

    pair = head_pair("eagle")
    prompts = random_prompts(4, np.random.default_rng(9))
    data = adaptive.head_training_data_on_policy(pair, prompts, 10, draft_length=2, batch_size=2)
    assert data.features.shape[1] == pair.drafter.head.config.hidden_size
    head, report = adaptive.train_head(data, l2=0.1, held_out=0.25)
    assert report["rows"]["train"] + report["rows"]["test"] == data.labels.size
    for lagged in (True, False):
        ctrl = LearnedHeadController(head, None, 0.5, 3, lagged=lagged)
        run = speculative_generate(pair, prompts, TokenVerify(), ctrl, 8,
                                   DecodeOptions(progress=False, record_law=False))
        assert [len(t) for t in run.tokens] == [8] * 4
