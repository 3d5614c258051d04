"""Feature-level draft heads (EAGLE- and Medusa-style) on tiny LLaMA models: rows, exactness, training, errors."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.drafters import Pair
from llm_bridge.head_drafter import HeadDrafter
from llm_bridge.head_replays import HeadSource, compact_rows, depth_rows
from llm_bridge.head_sessions import EagleSession, MedusaSession
from llm_bridge.heads import EagleHead, MedusaHeads, load_head, save_head
from llm_bridge.kernels import few_row_linears
from llm_bridge.loop import speculative_generate
from llm_bridge.lossless import first_token_law, two_sample_test
from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from llm_bridge.sessions import ModelSession, target_hidden
from otspec.verifiers import BackwardBlockVerify, BlockVerify, DecodingOPT, TokenVerify
from tests.llm_tiny import VOCAB, random_prompts, tiny_pair, torch

REDUCED = np.array([3, 4, 5, 7, 8, 11, 13, 17, 19, 23])  # a reduced draft vocabulary: rows are 0 elsewhere


def head_pair(kind: str, vocab=None, seed: int = 3, k: int = 3) -> Pair:
    """The tiny target with a randomly perturbed head of ``kind`` (so that it is neither the identity nor the target);
    ``eagle3``: an EAGLE head fusing the target's embeddings and first layer's states with its last feature;
    ``hydra``: Medusa blocks that also read the committed and drafted tokens; ``deep``: an EAGLE head of two decoder
    layers."""
    target = tiny_pair(sharpness=3.0).target
    torch.manual_seed(seed)
    ids = np.arange(VOCAB) if vocab is None else vocab
    head = few_row_linears(MedusaHeads(target.model, ids, k=k, hydra=kind == "hydra") if kind in ("medusa", "hydra") else
                           EagleHead(target.model, ids, fuse=(0, 1) if kind == "eagle3" else (),
                                     layers=2 if kind == "deep" else 1))
    with torch.no_grad():
        for p in head.parameters():
            if p.requires_grad:
                p.add_(0.3 * torch.randn_like(p))
    return Pair(target, HeadDrafter(head.eval()))


def _sessions(pair, prompts, sampling=None):
    sampling = sampling or Sampling()
    target = ModelSession(pair.target.model, len(prompts), sampling, hidden=target_hidden(pair.drafter), name="target")
    draft = pair.drafter.session(len(prompts), sampling)
    target.start(prompts)
    draft.start(prompts, features=target.prompt_features)
    return target, draft


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep", "medusa", "hydra"])
def test_head_session_rows_match_a_recomputation_without_cache(kind):
    """Drafting, a commit of an accepted draft and a correction, drafting again: every row equals the full recomputation."""
    pair = head_pair(kind, REDUCED)
    rng = np.random.default_rng(0)
    prompts = random_prompts(3, rng, low=2, high=6)
    target, draft = _sessions(pair, prompts)

    def reference(prefix, drafted):
        return HeadSource(pair.drafter.head, pair.target.model, prefix).next_probs(np.array([drafted]))[0]

    rows0 = draft.feed(np.zeros((3, 0), dtype=np.int64), np.zeros(3, dtype=np.int64)).rows
    x = np.array([[5], [7], [11]])
    rows1 = draft.feed(x, np.ones(3, dtype=np.int64)).rows
    for b, p in enumerate(prompts):
        np.testing.assert_allclose(rows0[b, 0], reference(p, []), atol=1e-12)
        np.testing.assert_allclose(rows1[b, 1], reference(p, [int(x[b, 0])]), atol=1e-12)
        assert rows1[b, 1][np.setdiff1d(np.arange(VOCAB), REDUCED)].max() == 0.0  # reduced vocabulary
    scored = target.feed(x, np.ones(3, dtype=np.int64))  # rows after the prompt and after the draft
    committed = np.array([[5, 3], [7, 4], [9, 0]])  # rows 0, 1 accept their draft then add a token; row 2 rejects
    counts = np.array([2, 2, 1])
    target.commit(committed, counts)
    draft.commit(committed, counts, features=scored.features[:, :2])
    rows2 = draft.feed(np.zeros((3, 0), dtype=np.int64), np.zeros(3, dtype=np.int64)).rows
    for b, p in enumerate(prompts):
        np.testing.assert_allclose(rows2[b, 0], reference(list(p) + committed[b, :counts[b]].tolist(), []), atol=1e-12)


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep", "medusa", "hydra"])
@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify()], ids=lambda v: v.name)
def test_head_first_token_law_is_the_target_row(kind, verifier):
    pair = head_pair(kind, REDUCED)
    law = first_token_law(pair, [1, 5, 9, 4], verifier, 2)
    assert law.max_deviation < 1e-12
    assert law.paths > 1


def test_head_loop_matches_plain_sampling_and_the_test_can_fail():
    pair = head_pair("eagle", REDUCED)
    assert two_sample_test(pair, [1, 6, 3], BackwardBlockVerify(), 3, n=600, tokens=2)["p_value"] > 1e-3
    assert two_sample_test(pair, [1, 6, 3], DecodingOPT(eps=np.inf), 3, n=600, tokens=2)["p_value"] < 1e-3


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep", "medusa", "hydra"])
def test_speculative_generate_with_a_head_on_ragged_batches(kind):
    pair = head_pair(kind, vocab=None)
    prompts = random_prompts(5, np.random.default_rng(1), low=2, high=7)
    run = speculative_generate(pair, prompts, TokenVerify(), 3, 12,
                               DecodeOptions(batch_size=2, seed=4, progress=False))
    assert [len(t) for t in run.tokens] == [12] * 5
    assert run.decode.block_efficiency.value >= 1.0
    assert run.decode.accepted > 0
    again = speculative_generate(pair, prompts, TokenVerify(), 3, 12,
                                 DecodeOptions(batch_size=2, seed=4, progress=False))
    assert all(np.array_equal(a, b) for a, b in zip(run.tokens, again.tokens, strict=True))


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep", "medusa", "hydra"])
def test_save_and_load_a_head(tmp_path, kind):
    pair = head_pair(kind, REDUCED)
    head = pair.drafter.head
    record = save_head(head, tmp_path, {"target": "tiny"})
    assert record["vocab_size"] == REDUCED.size
    assert record["kind"] == {"eagle3": "eagle", "deep": "eagle", "hydra": "medusa"}.get(kind, kind)
    assert record["fuse_layers"] == ([0, 1] if kind == "eagle3" else []) and record["hydra"] == (kind == "hydra")
    assert record["head_layers"] == {"deep": 2, "medusa": None, "hydra": None}.get(kind, 1)
    loaded, _ = load_head(tmp_path, pair.target.model)
    assert np.array_equal(loaded.vocab.numpy(), REDUCED)
    if record["head_layers"]:
        assert len(loaded.body.layers) == record["head_layers"]
    for (name, a), b in zip(head.named_parameters(), loaded.parameters(), strict=True):
        if a.requires_grad:  # int8 rows with a float16 scale per row: half a step, plus the scale's own rounding
            big = a.detach().abs().amax(dim=-1, keepdim=True) if a.ndim == 2 else a.detach().abs()
            bound = (big / 127 / 2 if a.ndim == 2 else 0) + big * 1e-3 + 1e-6
            assert (a.detach() - b.detach()).abs().le(bound).all(), name
    with pytest.raises(FileNotFoundError, match="train_head"):
        load_head(tmp_path / "missing", pair.target.model)


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep"])
def test_eagle_unrolled_training_steps_are_the_drafting_rows(kind):
    """Step s of the unrolled pass at pair i is the row the head drafts s tokens after committed pair i - s + 1."""
    from llm_bridge.heads import eagle_unrolled, target_features

    pair = head_pair(kind, REDUCED)
    head, model = pair.drafter.head, pair.target.model
    seq = [1, 9, 4, 12, 6, 3, 15, 8]
    with torch.no_grad():
        F, G = target_features(head, model, torch.as_tensor([seq]))
        assert G.shape[-1] == F.shape[-1] * (3 if kind == "eagle3" else 1)
        outs = eagle_unrolled(head, torch.as_tensor([seq]), G, torch.ones((1, len(seq)), dtype=torch.bool), 3)
    sampling = Sampling()
    for s, h in enumerate(outs, start=1):
        for i in range(s + 1, len(seq) - 1):
            cut = i - s + 3  # committed tokens x[0..i-s+2]; drafted x[i-s+3..i+1]
            want = HeadSource(head, model, seq[:cut]).next_probs(np.array([seq[cut:i + 2]]))[0]
            got = sampling.rows(head.full_logits(head.reduced_logits(h[0, i])))
            np.testing.assert_allclose(got, want, atol=1e-9, err_msg=f"step {s}, pair {i}")


def test_head_errors():
    pair = head_pair("eagle", REDUCED)
    session = pair.drafter.session(2)
    with pytest.raises(ValueError, match="features"):
        session.start([[1, 2], [1, 3]])
    with pytest.raises(ValueError, match="distinct token ids"):
        EagleHead(pair.target.model, [3, 3, 4])
    with pytest.raises(ValueError, match="distinct token ids"):
        MedusaHeads(pair.target.model, [0, VOCAB])
    with pytest.raises(ValueError, match="k >= 1"):
        MedusaHeads(pair.target.model, REDUCED, k=0)
    for layers in (0, 3, 1.5, True):  # the tiny target has two layers
        with pytest.raises(ValueError, match=r"1 <= layers <= 2"):
            EagleHead(pair.target.model, REDUCED, layers=layers)
    from llm_bridge.trees import tree_generate
    from otspec.verifiers import KSeq

    with pytest.raises(ValueError, match="draft chains"):
        tree_generate(head_pair("medusa", REDUCED), [[1, 4, 5]], KSeq(), "2x1", 4, DecodeOptions(progress=False))
    with pytest.raises(ValueError, match=">= 2 tokens"):
        HeadSource(pair.drafter.head, pair.target.model, [1])
    assert isinstance(session, EagleSession)
    assert isinstance(head_pair("medusa", REDUCED).drafter.session(2), MedusaSession)


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep", "medusa", "hydra"])
def test_head_replay_rows_are_the_drafting_rows_by_depth(kind):
    """The replay's row at continuation step t and draft depth d is the head's row after d drafted tokens."""
    pair = head_pair(kind, REDUCED)
    head, model = pair.drafter.head, pair.target.model
    prompt, cont = [1, 9, 4], [12, 6, 3, 15, 8]
    rows, q = depth_rows(head, model, prompt, cont, 3, Sampling())
    for d in range(3):
        for t in range(d, len(cont)):
            committed, drafted = prompt + cont[:t - d], cont[t - d:t]
            want = HeadSource(head, model, committed).next_probs(np.array([drafted]))[0]
            np.testing.assert_allclose(rows[d, t], want, atol=1e-12, err_msg=f"depth {d}, step {t}")
    with torch.no_grad():
        full = Sampling().rows(model(torch.as_tensor([prompt + cont])).logits[0, len(prompt) - 1:-1])
    np.testing.assert_allclose(q, full, atol=1e-12)


def test_head_replay_compaction_keeps_every_depths_overlap():
    rng = np.random.default_rng(5)
    p = rng.dirichlet(np.full(40, 0.3), size=(3, 6))
    q = rng.dirichlet(np.full(40, 0.3), size=6)
    cp, cq = compact_rows(p, q, top_p=0.6, max_kept=5)
    assert cp.shape[-1] < 40
    np.testing.assert_allclose(cp.sum(-1), 1.0, atol=1e-12)
    for d in range(3):
        np.testing.assert_allclose(np.minimum(cp[d], cq).sum(-1), np.minimum(p[d], q).sum(-1), atol=1e-12)


def test_depth_positional_replay_drafts_by_depth():
    """Depth 0 always matches the target and depth 1 never does: token verification with L = 2 accepts one per block."""
    from otspec.engine import generate
    from otspec.sources import DepthPositionalSource, PositionalSource

    T = 7
    target = PositionalSource(np.tile([1.0, 0.0, 0.0], (T, 1)))
    rows = np.stack([np.tile([1.0, 0.0, 0.0], (T, 1)), np.tile([0.0, 1.0, 0.0], (T, 1))])
    res = generate(DepthPositionalSource(rows), target, TokenVerify(), 2, 6, n_sequences=4, seed=0, progress=False)
    assert res.block_efficiency.value == 2.0
    flat = generate(PositionalSource(rows[0]), target, TokenVerify(), 2, 6, n_sequences=4, seed=0, progress=False)
    assert flat.block_efficiency.value == 3.0


def test_train_head_vocabulary_and_bad_arguments(capsys):
    from llm_bridge.train_head import frequent_tokens, main

    data = {"tokens": torch.as_tensor([[1, 2, 5, 5, 7, 0], [1, 3, 7, 7, 7, 5]]), "plens": torch.as_tensor([2, 2]),
            "lengths": torch.as_tensor([5, 6])}
    assert frequent_tokens(data, [0, 1], 2, 10).tolist() == [5, 7]  # continuation tokens only: 7 × 4, 5 × 3
    assert frequent_tokens(data, [0], 1, 10).tolist() == [5]  # counted on the given sequences only
    assert frequent_tokens(data, [0, 1], 0, 10).tolist() == list(range(10))  # 0: every token
    assert main(["--kind", "eagle", "--steps", "0"]) == 2
    assert "--steps" in capsys.readouterr().err
    assert main(["--kind", "eagle", "--prompts", "no_such_prompts.txt"]) == 2  # refused before any model loads
    assert "prompt file not found: no file" in (err := capsys.readouterr().err) and err.rstrip().endswith("no_such_prompts.txt")
    with pytest.raises(SystemExit):
        main(["--kind", "hydra"])


@pytest.mark.parametrize("kind", ["eagle", "eagle3", "deep", "medusa", "hydra"])
def test_train_head_acceptance_is_the_loops_overlap_and_training_lowers_the_loss(kind):
    """``evaluate``'s acceptance at draft position s is the mean Σ min(p, q) of the head's drafting rows (HeadSource)
    against the target's rows over the scored positions; a few optimiser steps lower the training loss."""
    from llm_bridge.heads import target_features
    from llm_bridge.train_head import TrainingBatch, evaluate, step_losses

    pair = head_pair(kind, REDUCED, k=2)
    head, model = pair.drafter.head, pair.target.model
    rng = np.random.default_rng(2)
    tokens = torch.as_tensor(rng.integers(3, VOCAB, size=(3, 9)))
    lengths, plens = torch.as_tensor([9, 7, 8]), torch.as_tensor([3, 2, 4])
    with torch.no_grad():  # causal: padding after a length changes nothing
        F, G = target_features(head, model, tokens)  # G: the fused layers' states, then F (an EAGLE-3 head's input)
        lse = torch.logsumexp(model.get_output_embeddings()(F), dim=-1)
    data = {"tokens": tokens, "lengths": lengths, "plens": plens, "features": F, "lse": lse,
            "argmax": model.get_output_embeddings()(F).argmax(-1), "extra": G[..., :G.shape[-1] - F.shape[-1]]}
    result = evaluate(head, data, np.arange(3), unroll=2)
    got, agreement = result["acceptance_per_position"], result["agreement_per_position_temperature_1"]
    sampling = Sampling()
    for s in range(2):  # depth s: s drafted tokens after the last committed one
        overlaps, agrees = [], []
        for b in range(3):
            seq, n, plen = tokens[b].tolist(), int(lengths[b]), int(plens[b])
            for t in range(max(plen + s, s + 2), n + 1):  # the row for token t; committed up to t - s >= plen
                p = HeadSource(head, model, seq[:t - s]).next_probs(np.array([seq[t - s:t]]))[0]
                with torch.no_grad():
                    q = sampling.rows(model(torch.as_tensor([seq[:t]])).logits[0, -1])
                overlaps.append(np.minimum(p, q).sum())
                agrees.append(p.argmax() == q.argmax())  # a greedy loop accepts the head's arg-max when it is q's
        assert got[s] == pytest.approx(np.mean(overlaps), abs=1e-9), f"draft position {s + 1}"
        assert agreement[s] == pytest.approx(np.mean(agrees), abs=1e-12)
        assert kind in ("medusa", "hydra", "deep") or 0 < np.mean(agrees) < 1  # Medusa blocks start one place early
    full = [float(c) for _, _, c, _ in step_losses(head, TrainingBatch(data, np.arange(3), head), 2, 0.1)]
    half = [float(c) for _, _, c, _ in step_losses(head, TrainingBatch(data, np.arange(3), head, score_fraction=0.5,
                                                                       rng=np.random.default_rng(0)), 2, 0.1)]
    assert all(0 < h < f for h, f in zip(half, full, strict=True))  # a share of the outputs scored
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-2)
    losses = []
    for _ in range(15):
        parts = step_losses(head, TrainingBatch(data, np.arange(3), head), 2, 0.1)
        loss = sum(ls / c for ls, _, c, _ in parts) / len(parts)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.95 * losses[0], losses


def test_eagle_tree_rows_equal_chain_drafting_and_tree_runs_keep_the_target_law():
    """The EAGLE head on a tree: a node's row (fed a level per call, reading its parent's predicted feature) equals
    the row of drafting its path as a chain; after a commit the head drafts on; a confidence-ordered tree run and a
    drawn-tree run with the head pass the two-sample test against plain sampling."""
    from llm_bridge.trees import tree_generate
    from otspec.verifiers import KSeq, NaiveMultiCandidate

    pair = head_pair("eagle", REDUCED)
    prompts = [np.array([1, 5, 9, 3]), np.array([2, 7, 4])]
    _, tree_session = _sessions(pair, prompts)
    level1 = tree_session.feed_tree(np.array([[11, 12], [13, 0]]), np.array([[-1, -1], [-1, -1]]), [2, 1]).rows
    level2 = tree_session.feed_tree(np.array([[14, 15, 16], [17, 0, 0]]), np.array([[0, 1, 1], [0, -1, -1]]),
                                    [3, 1]).rows
    paths = {0: [[11], [12], [11, 14], [12, 15], [12, 16]], 1: [[13], [13, 17]]}
    got = {0: [level1[0, 1], level1[0, 2], level2[0, 1], level2[0, 2], level2[0, 3]], 1: [level1[1, 1], level2[1, 1]]}
    for b, rows in got.items():
        for path, row in zip(paths[b], rows, strict=True):
            _, chain = _sessions(pair, prompts)
            tokens = np.zeros((2, len(path)), dtype=np.int64)
            tokens[b] = path
            want = chain.feed(tokens, [len(path) if i == b else 0 for i in range(2)]).rows[b, len(path)]
            np.testing.assert_allclose(row, want, atol=1e-12)
    np.testing.assert_allclose(level1[:, 0], _sessions(pair, prompts)[1].feed(np.zeros((2, 0), dtype=np.int64),
                                                                               [0, 0]).rows[:, 0], atol=1e-12)
    run = tree_generate(pair, random_prompts(3, np.random.default_rng(2)), NaiveMultiCandidate(), "eagle2:3:2:5", 12,
                        DecodeOptions(batch_size=3, progress=False), keep_tries=True)
    assert run.decode.generated == 36 and run.decode.accepted > 0
    for verifier, tree in ((NaiveMultiCandidate(), "eagle2:2:2:3"), (KSeq(), "2x1")):
        test = two_sample_test(pair, [1, 5, 9, 3], verifier, tree, DecodeOptions(sampling=Sampling(top_k=4), seed=5),
                               n=300, tokens=3)
        assert test["p_value"] > 1e-3, (tree, test)


def test_an_int8_output_head_drafts_near_its_float_rows_and_keeps_the_target_law():
    """int8_head: the output rows as int8 (each call's rows quantised to 8 bits) move the logits by about 1 % of their
    range, the session still drafts valid rows, and the first emitted token's law is the target's row."""
    from llm_bridge.heads import int8_head
    from llm_bridge.kernels import int8_ready

    pair = head_pair("eagle", REDUCED)
    pair.target.model.float()
    head = pair.drafter.head.float()
    if not int8_ready(head):
        pytest.skip("no fbgemm kernels on this machine")
    h = torch.randn(5, head.out_rows.shape[1])
    exact = (h @ head.out_rows.T).numpy()
    int8_head(head)
    got = head.reduced_logits(h).numpy()
    assert np.abs(got - exact).max() < 0.03 * np.abs(exact).max()
    assert np.abs(got - exact).max() > 0  # the int8 product, not the float one
    law = first_token_law(pair, [1, 5, 9, 4], TokenVerify(), 2)
    assert law.max_deviation < 1e-6 and law.paths > 1  # float32 rows: exact to their precision
