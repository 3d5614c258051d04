"""``python -m llm_bridge.corpus``: the target's own text in resumable shards, on a tiny model (no download)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llm_tiny import tiny_llama, tiny_tokenizer, torch

from llm_bridge.corpus import (
    HELDOUT_EVERY,
    CorpusRecipe,
    build_corpus,
    load_corpus,
    main,
    user_messages,
)
from llm_bridge.models import LoadedModel


@pytest.fixture()
def tiny_target(monkeypatch):
    target = LoadedModel(tiny_llama(0, 2, dtype=torch.float64), tiny_tokenizer(), "tiny-target", "cpu",
                         torch.float64)
    calls = []

    def load(name, **_):
        calls.append(name)
        return target

    monkeypatch.setattr("llm_bridge.models.load_model", load)
    monkeypatch.setattr("llm_bridge.train_head.load_model", load)
    return target, calls


RECIPE = dict(target="tiny", tokens=100, shard_messages=3, samples=2, greedy=1, length=6, message_tokens=40)


def test_corpus_shards_hold_the_targets_own_continuations(tmp_path, tiny_target):
    target, _ = tiny_target
    recipe = CorpusRecipe(**RECIPE)
    assert recipe.shard_tokens == 3 * 3 * 6 and recipe.shards == 2
    index = build_corpus(recipe, tmp_path, progress=False)
    assert [s["index"] for s in index["shards"]] == [0, 1] and index["tokens"] == sum(s["tokens"] for s in
                                                                                      index["shards"])
    c = load_corpus(tmp_path)
    assert len(c) == sum(s["sequences"] for s in index["shards"]) and c.vocab_size == 24
    assert np.all(c.lengths - c.plens == 6)
    # per message: two samples at temperature 1 and one greedy continuation, all after the same prompt
    for m in np.unique(c.prompt):
        rows = np.flatnonzero(c.prompt == m)
        assert sorted(c.temperature[rows]) == [0.0, 1.0, 1.0]
        prompts = {tuple(c.tokens[r, :c.plens[r]]) for r in rows}
        assert len(prompts) == 1
    # a greedy continuation is the target's arg-max chain (recomputed here without a cache)
    r = int(np.flatnonzero(c.temperature == 0)[0])
    seq = c.tokens[r, :c.lengths[r]]
    with torch.no_grad():
        logits = target.model(torch.as_tensor(seq[None])).logits[0]
    np.testing.assert_array_equal(logits[c.plens[r] - 1:-1].argmax(-1).numpy(), seq[c.plens[r]:])
    # messages open with BOS (no chat template) and end before EOS: a prompt holds no EOS
    assert all(2 not in c.tokens[b, 1:c.plens[b]] for b in range(len(c)))
    assert not c.heldout.any() and HELDOUT_EVERY > 2


def test_corpus_resumes_extends_and_refuses_another_recipe(tmp_path, tiny_target):
    _, calls = tiny_target
    recipe = CorpusRecipe(**RECIPE)
    build_corpus(recipe, tmp_path, progress=False)
    first = (tmp_path / "shard-00000.npz").read_bytes()
    second = tmp_path / "shard-00001.npz"
    mtime = second.stat().st_mtime_ns
    (tmp_path / "shard-00000.npz").unlink()  # an interrupted build: the missing shard is made again, the same
    build_corpus(recipe, tmp_path, progress=False)
    assert (tmp_path / "shard-00000.npz").read_bytes() == first and second.stat().st_mtime_ns == mtime
    n = len(calls)
    build_corpus(recipe, tmp_path, progress=False)  # nothing to do: the model is not even loaded
    assert len(calls) == n
    index = build_corpus(CorpusRecipe(**{**RECIPE, "tokens": 200}), tmp_path, progress=False)
    assert [s["index"] for s in index["shards"]] == [0, 1, 2, 3]
    assert len(load_corpus(tmp_path, max_tokens=54)) == json.loads((tmp_path / "corpus.json").read_text())[
        "shards"][0]["sequences"]
    with pytest.raises(ValueError, match="another recipe"):
        build_corpus(CorpusRecipe(**{**RECIPE, "length": 7}), tmp_path, progress=False)


def test_damaged_corpora_are_refused(tmp_path, tiny_target):
    build_corpus(CorpusRecipe(**RECIPE), tmp_path, progress=False)
    path = tmp_path / "shard-00001.npz"
    with np.load(path) as z:
        arrays = dict(z)
    arrays["tokens"] = arrays["tokens"].copy()
    arrays["tokens"][3] = 30  # outside the vocabulary of 24
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        load_corpus(tmp_path)
    path.unlink()
    with pytest.raises(FileNotFoundError, match="corpus shard .listed in corpus.json. not found"):
        load_corpus(tmp_path)
    with pytest.raises(FileNotFoundError, match="no corpus.json"):
        load_corpus(tmp_path / "nothing")


def test_user_messages_are_new_long_enough_and_not_validation_prompts(tiny_target):
    target, _ = tiny_target
    first = user_messages(target, 4, seed=3, max_tokens=40)
    assert len(first) == 4 and len(set(first)) == 4
    assert all(len(m.split()) >= 3 for m in first)
    again = user_messages(target, 4, seed=3, max_tokens=40, exclude=first[:2])
    assert not set(again) & set(first[:2])


@pytest.mark.parametrize("flag", ["--tokens=0", "--length=100000", "--samples=-1", "--greedy=-1", "--seed=-1",
                                  "--shard-messages=0", "--out="])
def test_corpus_command_refuses_bad_flags_before_loading(flag, capsys, tiny_target):
    _, calls = tiny_target
    try:
        code = main([flag])
    except SystemExit as stop:  # argparse's own refusals (an empty path)
        code = stop.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and flag.split("=")[0] in err and not calls


def test_train_head_on_a_corpus_holds_out_whole_shards_and_nests_training_sets(tmp_path, tiny_target, monkeypatch):
    """train_head --corpus: features recomputed by teacher forcing (the arg-max is the target's greedy token), the
    held-out sequences are those of shard 9 only, --train-tokens keeps a prefix of the training shards, and the
    record reports greedy agreement on the greedy continuations."""
    from llm_bridge.head_data import corpus_split, corpus_training_data
    from llm_bridge.train_head import HeadRecipe, train_head

    target, _ = tiny_target
    monkeypatch.setenv("OTSPEC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "corpus"
    build_corpus(CorpusRecipe(**{**RECIPE, "tokens": 10 * 2 * 2 * 5, "shard_messages": 2, "samples": 1,
                                 "length": 5}), folder, progress=False)
    data = corpus_training_data(target, target_name="tiny", folder=folder, progress=False)
    with torch.no_grad():
        b = 3
        seq = data["tokens"][b, :data["lengths"][b]]
        logits = target.model(seq[None]).logits[0]
    np.testing.assert_array_equal(data["argmax"][b, :len(seq)].numpy(), logits.argmax(-1).numpy())
    np.testing.assert_allclose(data["lse"][b, :len(seq)].numpy(), torch.logsumexp(logits, -1).numpy(), atol=1e-2)
    shard = np.repeat(np.arange(10), 4)
    assert np.array_equal(data["heldout"], shard == 9)
    cached = sorted((tmp_path / "cache" / "heads").glob("features-*.pt"))
    assert len(cached) == 10  # one file per shard: a corpus that grows costs only its new shards
    again = corpus_training_data(target, target_name="tiny", folder=folder, progress=False)
    assert all(torch.equal(data[k], again[k]) for k in ("features", "lse", "argmax", "tokens"))
    assert sorted((tmp_path / "cache" / "heads").glob("features-*.pt")) == cached
    fused = corpus_training_data(target, target_name="tiny", folder=folder, extra=(0, 1), progress=False)
    with torch.no_grad():
        states = target.model.base_model(input_ids=seq[None], output_hidden_states=True).hidden_states
    np.testing.assert_allclose(fused["extra"][b, :len(seq)].float().numpy(),
                               torch.cat([states[0][0], states[1][0]], -1).numpy(), atol=2e-3, rtol=2e-3)
    assert len(list((tmp_path / "cache" / "heads").glob("features-*.pt"))) == 30  # each layer a file of its own
    one = corpus_training_data(target, target_name="tiny", folder=folder, extra=(1,), progress=False)
    assert torch.equal(one["extra"], fused["extra"][..., target.model.config.hidden_size:])  # reused, not recomputed
    assert torch.equal(one["features"], data["features"])
    assert len(list((tmp_path / "cache" / "heads").glob("features-*.pt"))) == 30
    recipe = HeadRecipe(kind="eagle", target="tiny", corpus=folder, vocab=0, steps=2, batch=2, unroll=2,
                        progress=False, out=tmp_path / "head", log_every=1)
    val, train, _ = corpus_split(data, folder, 0, 256)
    assert set(val) == set(np.flatnonzero(shard == 9))
    small = corpus_split(data, folder, 0, 256, train_tokens=12)[1]
    assert sorted(small) == [0, 1, 2] and set(small) < set(train)  # whole sequences in shard order up to 12 tokens
    record = train_head(recipe)
    assert record["recipe"]["train_sequences"] == 36 and record["recipe"]["heldout_sequences"] == 4
    held = record["heldout"]
    assert len(held["acceptance_per_position"]) == 2 and len(held["greedy_agreement_per_position"]) == 2
    log = json.loads((tmp_path / "head" / "train_log.json").read_text())
    assert len(log) == 2 and "heldout_greedy" in log[0]
    with pytest.raises(ValueError, match="--train-tokens"):
        HeadRecipe(kind="eagle", train_tokens=5)


def test_head_curve_trains_each_point_once_on_nested_sets(tmp_path, tiny_target, monkeypatch, capsys):
    from llm_bridge.head_curve import main as curve_main
    from llm_bridge.head_curve import run_curve

    monkeypatch.setenv("OTSPEC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "corpus"
    build_corpus(CorpusRecipe(**{**RECIPE, "tokens": 10 * 2 * 2 * 5, "shard_messages": 2, "samples": 1,
                                 "length": 5}), folder, progress=False)
    settings = {"target": "tiny", "corpus": str(folder), "steps": 2, "batch": 2, "lr": 1e-3, "vocab": 0,
                "fuse": [1], "heldout_sequences": 4, "seed": 0, "progress": False}
    out = tmp_path / "curve.json"
    record = run_curve(["eagle3", "hydra"], [12, 40], settings, out, tmp_path / "heads")
    points = record["points"]
    assert [(p["head"], p["train_tokens_asked"]) for p in points] == [("eagle3", 12), ("eagle3", 40), ("hydra", 12),
                                                                      ("hydra", 40)]
    assert [p["train_tokens"] for p in points[:2]] == [15, 40]  # whole sequences of 5 tokens, up to the size asked
    assert all(len(p["greedy_agreement_per_position"]) == len(p["acceptance_per_position"]) for p in points)
    assert out.with_suffix(".png").stat().st_size > 0
    mtime = out.stat().st_mtime_ns
    assert run_curve(["eagle3", "hydra"], [12, 40], settings, out, tmp_path / "heads") == record  # nothing retrained
    assert out.stat().st_mtime_ns == mtime
    for argv, flag in ((["--heads", "eagle,hydra9"], "--heads"), (["--train-tokens", "0"], "--train-tokens"),
                       (["--corpus", str(tmp_path / "none")], "--corpus"), (["--steps", "0"], "--steps")):
        try:
            code = curve_main(argv)
        except SystemExit as stop:
            code = stop.code
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and flag in err, (argv, err)


def test_train_head_resumes_a_stopped_run_to_the_same_head(tmp_path, tiny_target, monkeypatch, capsys):
    """A run stopped after its step-2 checkpoint and rerun ends with the head of a run never stopped (same weights,
    same log); a checkpoint of another recipe is set aside, not read; a curve reuses a head finished in its folder
    instead of training it again."""
    import llm_bridge.train_head as th
    from llm_bridge.head_checkpoint import CHECKPOINT
    from llm_bridge.head_curve import finished_head

    monkeypatch.setenv("OTSPEC_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "corpus"
    build_corpus(CorpusRecipe(**{**RECIPE, "tokens": 10 * 2 * 2 * 5, "shard_messages": 2, "samples": 1,
                                 "length": 5}), folder, progress=False)
    common = dict(kind="eagle", target="tiny", corpus=folder, vocab=0, steps=4, batch=2, unroll=2, progress=False,
                  log_every=1, checkpoint_every=2, score_fraction=0.5)
    whole = th.train_head(th.HeadRecipe(**common, out=tmp_path / "whole"))
    assert not (tmp_path / "whole" / CHECKPOINT).exists()  # a finished run leaves no checkpoint

    real, calls = th.step_losses, []

    def stop_at_step_3(*args):
        calls.extend([1] if torch.is_grad_enabled() else [])  # a training step, not a held-out measurement
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(th, "step_losses", stop_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        th.train_head(th.HeadRecipe(**common, out=tmp_path / "stopped"))
    assert (tmp_path / "stopped" / CHECKPOINT).is_file() and not (tmp_path / "stopped" / "drafter.json").exists()
    monkeypatch.setattr(th, "step_losses", real)
    capsys.readouterr()
    resumed = th.train_head(th.HeadRecipe(**common, out=tmp_path / "stopped"))
    assert "resuming from step 2 of 4" in capsys.readouterr().err
    assert resumed["heldout"] == whole["heldout"] and resumed["heldout_before"] == whole["heldout_before"]
    assert ((tmp_path / "stopped" / "drafter.safetensors").read_bytes()
            == (tmp_path / "whole" / "drafter.safetensors").read_bytes())
    logs = [json.loads((tmp_path / d / "train_log.json").read_text()) for d in ("whole", "stopped")]
    assert [{k: v for k, v in e.items() if k != "seconds"} for e in logs[0]] == [
        {k: v for k, v in e.items() if k != "seconds"} for e in logs[1]]

    # a checkpoint of another recipe (another learning rate) is set aside and training starts afresh
    monkeypatch.setattr(th, "step_losses", stop_at_step_3)
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        th.train_head(th.HeadRecipe(**{**common, "lr": 5e-3}, out=tmp_path / "other"))
    monkeypatch.setattr(th, "step_losses", real)
    capsys.readouterr()
    again = th.train_head(th.HeadRecipe(**common, out=tmp_path / "other"))
    assert "set aside" in capsys.readouterr().err and (tmp_path / "other" / (CHECKPOINT + ".stale")).is_file()
    assert again["heldout"] == whole["heldout"]

    point = finished_head(th.HeadRecipe(**common, out=tmp_path / "whole"), "eagle", 1)
    assert point["acceptance_per_position"] == whole["heldout"]["acceptance_per_position"]
    assert finished_head(th.HeadRecipe(**{**common, "steps": 5}, out=tmp_path / "whole")) is None
    assert finished_head(th.HeadRecipe(**common, out=tmp_path / "none")) is None


def test_messages_can_start_with_openers_the_target_continues(tmp_path, tiny_target):
    """--openers: each message starts with an opener drawn at random and the target writes at least two more words;
    a corpus made without openers keeps its recipe's identity (an older corpus.json still extends)."""
    target, calls = tiny_target
    openers = ["w5 w6", "w7 w8 w9"]
    got = user_messages(target, 4, seed=3, max_tokens=40, openers=openers)
    assert got and all(any(m.startswith(o + " ") for o in openers) for m in got)
    assert all(len(m.split()) >= len(o.split()) + 2 for m in got for o in openers if m.startswith(o + " "))
    assert {m.split()[0] for m in user_messages(target, 8, seed=4, max_tokens=40, openers=openers)} == {"w5", "w7"}
    assert "openers" not in CorpusRecipe(**RECIPE).identity()
    path = tmp_path / "openers.txt"
    path.write_text("# kinds\nw5 w6\n\nw7 w8 w9\n")
    recipe = CorpusRecipe(**{**RECIPE, "openers": str(path)})
    assert recipe.identity()["openers"] == str(path) and recipe.opener_lines() == openers
    index = build_corpus(recipe, tmp_path / "c", progress=False)
    messages = np.load(tmp_path / "c" / index["shards"][0]["file"])["messages"]
    assert all(str(m).split()[0] in ("w5", "w7") for m in messages)
    with pytest.raises(ValueError, match="another recipe"):  # not extended with whole messages
        build_corpus(CorpusRecipe(**RECIPE), tmp_path / "c", progress=False)
    calls.clear()
    assert main(["--openers", str(tmp_path / "none.txt")]) == 2 and not calls  # refused before the model loads


def test_a_head_trains_on_two_corpora_each_holding_out_its_own_shards(tmp_path, tiny_target, monkeypatch, capsys):
    """train_head --corpus a,b: the union of two corpora (a self-written one and an openers one, say), corpus j's
    shard i numbered j·MAX_SHARDS + i so that each keeps its every-10th held-out shards, messages numbered apart."""
    from llm_bridge.corpus import MAX_SHARDS, joined
    from llm_bridge.train_head import main as train_main

    monkeypatch.setenv("OTSPEC_CACHE", str(tmp_path / "cache"))
    small = {**RECIPE, "tokens": 10 * 2 * 2 * 5, "shard_messages": 2, "samples": 1, "length": 5}
    build_corpus(CorpusRecipe(**small), tmp_path / "a", progress=False)
    build_corpus(CorpusRecipe(**{**small, "seed": 1, "tokens": 20 * 2 * 2 * 5}), tmp_path / "b", progress=False)
    a, b = load_corpus(tmp_path / "a"), load_corpus(tmp_path / "b")
    both = load_corpus([tmp_path / "a", tmp_path / "b"])
    assert len(both) == len(a) + len(b) and both.heldout.sum() == a.heldout.sum() + b.heldout.sum() == 4 + 8
    assert set(both.shard[len(a):]) == {MAX_SHARDS + i for i in range(20)}
    assert both.prompt[len(a):].min() > a.prompt.max() and len(both.files) == 30
    np.testing.assert_array_equal(both.tokens[len(a):, :b.tokens.shape[1]], b.tokens)
    with pytest.raises(ValueError, match="no corpus folder"):
        joined([])
    out = tmp_path / "head"
    assert train_main(["--kind", "eagle", "--target", "tiny", "--corpus", f"{tmp_path / 'a'},{tmp_path / 'b'}",
                       "--vocab", "0", "--steps", "2", "--batch", "2", "--unroll", "2", "--out", str(out),
                       "--log-every", "1"]) == 0
    capsys.readouterr()
    record = json.loads((out / "drafter.json").read_text())
    assert record["recipe"]["heldout_sequences"] == 12 and record["recipe"]["train_sequences"] == 108
    assert record["recipe"]["corpus"].count(",") == 1
    assert train_main(["--kind", "eagle", "--corpus", f"{tmp_path / 'a'},"]) == 2
