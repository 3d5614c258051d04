"""llm_bridge's decode loop on tiny LLaMA models: caches, rollback, batching, verifiers, controllers, losslessness."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.cache import CachedLM
from llm_bridge.drafters import NGramDrafter, Pair
from llm_bridge.loop import (
    PAIRINGS,
    Tick,
    interleave,
    plain_batches,
    plain_generate,
    speculative_batches,
    speculative_generate,
)
from llm_bridge.lossless import first_token_law, two_sample_test
from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from otspec.distributions import sample_categorical
from otspec.engine.controllers import FixedDraftLength, ThresholdController
from otspec.engine.heads import AcceptanceHead, LearnedHeadController
from otspec.verifiers import BackwardBlockVerify, BlockVerify, DecodingOPT, KSeq, TokenVerify
from tests.llm_tiny import VOCAB, random_prompts, tiny_llama, tiny_pair, torch


def _full_rows(model, seq, sampling):
    """Processed next-token row after ``seq`` by a full forward pass (no cache)."""
    with torch.no_grad():
        return sampling.rows(model(torch.as_tensor([list(seq)])).logits[0, -1])


def reference_generate(pair, prompts, verifier, L, N, sampling, seed):
    """The loop without KV caches: every row recomputed from the whole sequence, same order of draws (a token for
    every sequence at each drafting step, kept where it still drafts; then one verifier call on the ragged batch)."""
    rng, B = np.random.default_rng(seed), len(prompts)
    seqs, done = [list(p) for p in prompts], np.zeros(B, dtype=np.int64)
    while (done < N).any():
        active = done < N
        limit = np.where(active, np.minimum(L, N - done - 1), 0)
        drafts, p_rows = [[] for _ in range(B)], [[] for _ in range(B)]
        drafting = limit > 0
        for _ in range(L):
            idx = np.flatnonzero(drafting)
            if idx.size == 0:
                break
            rows = np.stack([_full_rows(pair.drafter.model, seqs[b] + drafts[b], sampling) for b in idx])
            x = sample_categorical(rows, rng, u=rng.random(B)[idx])  # the loop draws for every sequence
            for j, b in enumerate(idx):
                drafts[b].append(int(x[j]))
                p_rows[b].append(rows[j])
            drafting[idx] = np.array([len(drafts[b]) for b in idx]) < limit[idx]
        rows_idx = np.flatnonzero(active)  # one verifier call for the ragged batch, padded with zeros
        lengths = np.array([len(drafts[b]) for b in rows_idx])
        g = int(lengths.max())
        q = np.stack([[_full_rows(pair.target.model, seqs[b] + drafts[b][:min(j, len(drafts[b]))], sampling)
                       for j in range(g + 1)] for b in rows_idx])
        if g == 0:
            tau, y = np.zeros(rows_idx.size, dtype=np.int64), sample_categorical(q[:, 0], rng)
        else:
            toks = np.zeros((rows_idx.size, g), dtype=np.int64)
            p = np.zeros((rows_idx.size, g, q.shape[-1]))
            for j, b in enumerate(rows_idx):
                toks[j, :lengths[j]] = drafts[b]
                if lengths[j]:
                    p[j, :lengths[j]] = np.stack(p_rows[b])
            out = verifier.sample_ragged(toks, p, q, lengths, rng, validate=False)
            tau, y = np.asarray(out.accepted_len), np.asarray(out.correction)
        for j, b in enumerate(rows_idx):
            seqs[b] += drafts[b][:tau[j]] + [int(y[j])]
            done[b] += tau[j] + 1
    return [np.array(s[len(p):len(p) + N]) for s, p in zip(seqs, prompts, strict=True)]


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
@pytest.mark.parametrize("batch", [1, 3])
def test_loop_equals_reference_loop_without_caches(verifier, batch):
    pair = tiny_pair(sharpness=3.0)
    prompts = random_prompts(batch, np.random.default_rng(batch))
    sampling = Sampling(temperature=0.9, top_k=12)
    got = speculative_generate(pair, prompts, verifier, 3, 20,
                               DecodeOptions(sampling=sampling, seed=7, progress=False))
    want = reference_generate(pair, prompts, verifier, 3, 20, sampling, seed=7)
    for g, w in zip(got.tokens, want, strict=True):
        np.testing.assert_array_equal(g, w)
    d = got.decode
    assert d.generated == 20 * batch and d.accepted > 0 and d.rejected > 0  # both branches of rollback exercised
    assert d.accepted + d.discarded == sum(int(t) for t in [d.accept_hist.T @ np.arange(d.accept_hist.shape[0])][0])


@pytest.mark.parametrize("max_holes", [0, 5, 64])
def test_cache_with_holes_matches_full_forward(max_holes):
    """Rows after rollbacks equal a fresh forward pass whether holes are squeezed out at once (0), now and then (5),
    or left in place for the whole run (64)."""
    model = tiny_llama(3)
    rng = np.random.default_rng(0)
    seqs = random_prompts(3, rng, 1, 6)
    cache = CachedLM(model, 3, max_holes=max_holes)
    spare = []
    tokens = np.zeros((3, 6), dtype=np.int64)
    for b, s in enumerate(seqs):
        tokens[b, :len(s)] = s
    cache.feed(tokens, [len(s) for s in seqs])
    worst = 0.0
    for _ in range(25):
        counts = rng.integers(0, 4, size=3)
        new = rng.integers(3, VOCAB, size=(3, 3))
        logits, _ = cache.feed(new, counts)
        for b in range(3):
            seqs[b] = seqs[b] + list(new[b, :counts[b]])
            if counts[b]:
                with torch.no_grad():
                    ref = model(torch.as_tensor([seqs[b]])).logits[0, -counts[b]:]
                worst = max(worst, float((logits[b, :counts[b]] - ref).abs().max()))
        keep = [max(len(s) - int(rng.integers(0, 3)), 0) for s in seqs]
        cache.rollback(keep)
        seqs = [s[:k] for s, k in zip(seqs, keep, strict=True)]
        np.testing.assert_array_equal(cache.length, [len(s) for s in seqs])
        spare.append(cache.valid.shape[1] - max(len(s) for s in seqs))
        assert 0 <= spare[-1] <= max_holes  # holes beyond the budget are squeezed out
        assert (cache.valid.sum(axis=1) == cache.length).all()
    assert worst < 1e-12
    assert max(spare) > 0 if max_holes else max(spare) == 0


def test_single_sequence_rollback_is_a_crop():
    with pytest.raises(ValueError, match="max_holes"):
        CachedLM(tiny_llama(4), 1, max_holes=-1)
    cache = CachedLM(tiny_llama(4), 1, max_holes=0)
    cache.feed(np.array([[3, 4, 5, 6]]), [4])
    cache.rollback([2])
    assert cache.valid.shape == (1, 2) and bool(cache.valid.all())
    cache.rollback([5])  # more than it holds: nothing changes
    assert cache.length.tolist() == [2]
    with pytest.raises(ValueError, match="keep"):
        cache.rollback([-1])


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify()],
                         ids=["token", "block", "block_v1"])
@pytest.mark.parametrize("sampling", [Sampling(), Sampling(temperature=0.7, top_k=6, top_p=0.9)],
                         ids=["plain", "processed"])
def test_first_token_law_is_the_target_row(verifier, sampling):
    pair = tiny_pair(sharpness=2.0)
    law = first_token_law(pair, [1, 5, 9], verifier, 3 if sampling.top_k else 2, sampling=sampling)
    assert law.max_deviation < 1e-12
    assert law.paths > 1


def test_biased_verifier_first_token_law_deviates():
    law = first_token_law(tiny_pair(sharpness=4.0), [1, 5, 9], DecodingOPT(float("inf")), 2)
    assert law.max_deviation > 0.05


def test_two_sample_test_passes_lossless_and_rejects_biased():
    pair = tiny_pair(sharpness=4.0)
    sampling = Sampling(top_k=5)
    ok = [two_sample_test(pair, [1, 5, 9], v, 3, DecodeOptions(sampling=sampling, seed=s), n=300)["p_value"]
          for s, v in enumerate([TokenVerify(), BlockVerify(), BackwardBlockVerify()])]
    assert min(ok) > 1e-3
    # the negative control: the exact first-token law of the biased verifier is far from the target's,
    # so this test has power; it must reject
    assert first_token_law(pair, [1, 5, 9], DecodingOPT(float("inf")), 2, sampling=sampling).max_deviation > 0.2
    assert two_sample_test(pair, [1, 5, 9], DecodingOPT(float("inf")), 3, DecodeOptions(sampling=sampling, seed=9),
                           n=300)["p_value"] < 1e-4


def test_seeded_runs_repeat_and_differ_across_seeds():
    pair = tiny_pair()
    prompts = random_prompts(2, np.random.default_rng(5))
    a, b, c = (speculative_generate(pair, prompts, TokenVerify(), 4, 16, DecodeOptions(seed=s, progress=False)).tokens
               for s in (1, 1, 2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_batches_of_prompts_give_every_sequence_its_length():
    pair = tiny_pair()
    prompts = random_prompts(5, np.random.default_rng(6))
    run = speculative_generate(pair, prompts, BackwardBlockVerify(), 4, 13,
                               DecodeOptions(batch_size=2, progress=False))
    assert [len(t) for t in run.tokens] == [13] * 5
    assert run.decode.generated == 65 and run.decode.tokens.shape == (5, 13)
    plain = plain_generate(pair.target, prompts, 9, batch_size=3, progress=False)
    assert [len(t) for t in plain.tokens] == [9] * 5 and plain.timer.count("target") == 2 * 9


@pytest.mark.parametrize("pairing", PAIRINGS)
def test_interleaved_runs_take_turns_and_equal_the_sequential_runs(pairing):
    pair = tiny_pair()
    prompts = random_prompts(5, np.random.default_rng(7))
    alone = [plain_generate(pair.target, prompts, 9, seed=3, batch_size=2, progress=False),
             speculative_generate(pair, prompts, BlockVerify(), 3, 9,
                                  DecodeOptions(seed=3, batch_size=2, progress=False))]
    order = []
    together = interleave([plain_batches(pair.target, prompts, 9, seed=3, batch_size=2, progress=False),
                           speculative_batches(pair, prompts, BlockVerify(), 3, 9,
                                               DecodeOptions(seed=3, batch_size=2, progress=False))], on_round=order.append, pairing=pairing)
    if pairing == "batches":
        assert order == [0, 1, 1, 0, 0, 1]  # batch b of every run before batch b + 1 of any, the order rotating
    else:  # in steps too: a batch of every run ends before any run starts its next
        assert [sorted(order[i:i + 2]) for i in (0, 2, 4)] == [[0, 1]] * 3
    for a, b in zip(alone, together, strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a.tokens, b.tokens, strict=True))
        assert [g for g, _ in b.rounds] == [18, 18, 9] and sum(t for _, t in b.rounds) == pytest.approx(b.seconds)
    assert together[1].decode.iterations == alone[1].decode.iterations
    with pytest.raises(ValueError, match="verifies candidates"):  # checks run when the generator is first advanced
        interleave([speculative_batches(pair, prompts, KSeq(), 3, 9, DecodeOptions(progress=False))], pairing=pairing)


def _ticking(name, shares, log):
    """A *_batches stand-in: a Tick at each share (a round ends at each whole half), noting each step in ``log``."""
    for x in shares:
        log.append(name)
        yield Tick(x, round_end=x in (0.5, 1.0))
    return name


def test_steps_pairing_keeps_every_run_at_the_same_share_of_its_work():
    log, rounds = [], []
    out = interleave([_ticking("a", [0.25, 0.5, 0.75, 1.0], log), _ticking("b", [0.5, 1.0], log),
                      _ticking("c", [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0], log)],
                     on_round=rounds.append)
    assert out == ["a", "b", "c"]
    # always the run that has done least (of those at the same share: one still inside its round, then the first
    # listed); worked out by hand
    assert "".join(log) == "abcccaccabcccacc"
    assert rounds == [1, 0, 2, 1, 0, 2]  # every run's first round ends before any run's second begins


def test_turns_and_one_by_one_drive_loops_inside_a_generator():
    from llm_bridge.loop import finish, one_by_one, relay, turns

    def holder(drive, log):  # a generator holding three loops, as a calibration round does
        out = yield from relay(drive([_ticking(n, s, log) for n, s in (("a", [0.5, 1.0]), ("b", [1.0]),
                                                                       ("c", [0.25, 0.5, 0.75, 1.0]))]),
                               lambda step: Tick(step[1].done / 3))
        return out

    log = []
    assert finish(holder(turns, log)) == ["a", "b", "c"] and "".join(log) == "abccacc"  # worked out by hand
    log = []
    assert finish(holder(one_by_one, log)) == ["a", "b", "c"] and "".join(log) == "aabcccc"  # each whole in turn


def test_interleave_refuses_a_generator_that_yields_no_tick_and_an_unknown_pairing():
    def bare():
        yield

    with pytest.raises(TypeError, match="yields Tick"):
        interleave([bare()])
    with pytest.raises(ValueError, match="pairing must be one of"):
        interleave([bare()], pairing="prompts")


def test_greedy_speculative_equals_greedy_plain():
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(3, np.random.default_rng(8))
    greedy = Sampling(temperature=0.0)
    spec = speculative_generate(pair, prompts, TokenVerify(), 4, 15, DecodeOptions(sampling=greedy, progress=False))
    plain = plain_generate(pair.target, prompts, 15, sampling=greedy, progress=False)
    for a, b in zip(spec.tokens, plain.tokens, strict=True):
        np.testing.assert_array_equal(a, b)


def test_ngram_drafter_proposes_the_latest_continuation_and_is_lossless_greedy():
    drafter = NGramDrafter(VOCAB, 2)
    assert drafter.propose(np.array([5, 6, 7, 5, 6])) == 7
    assert drafter.propose(np.array([5, 6, 8, 9, 6])) == 8  # 1-gram fallback: after the last 6
    assert drafter.propose(np.array([3, 4])) == -1
    pair = tiny_pair(sharpness=2.0)
    ngram = Pair(pair.target, drafter)
    prompts = [[1, 5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6]]
    greedy = Sampling(temperature=0.0)
    spec = speculative_generate(ngram, prompts, TokenVerify(), 4, 20, DecodeOptions(sampling=greedy, progress=False))
    plain = plain_generate(pair.target, prompts, 20, sampling=greedy, progress=False)
    np.testing.assert_array_equal(spec.tokens[0], plain.tokens[0])


def test_learned_head_controller_on_hidden_states():
    pair = tiny_pair()
    rng = np.random.default_rng(0)
    head = AcceptanceHead().fit(rng.normal(size=(200, 32)), rng.uniform(0.3, 0.9, size=200))
    ctrl = LearnedHeadController(head, featurize=None, threshold=0.6, max_length=6)
    run = speculative_generate(pair, random_prompts(3, rng), TokenVerify(), ctrl, 24, DecodeOptions(progress=False))
    drafted = run.decode.accept_hist.sum(axis=1)
    assert run.decode.generated == 72
    assert drafted[1:6].sum() > 0  # the head stopped some drafts early
    # fixed length 6 drafts 6 unless a sequence is about to end
    fixed = speculative_generate(pair, random_prompts(3, rng), TokenVerify(), FixedDraftLength(6), 24,
                                 DecodeOptions(progress=False))
    assert fixed.decode.accept_hist.sum(axis=1)[6] > fixed.decode.accept_hist.sum(axis=1)[1:6].sum()


def test_refuses_oracles_and_multi_draft_verifiers():
    pair = tiny_pair()
    with pytest.raises(ValueError, match="oracle"):
        speculative_generate(pair, [[1, 2]], TokenVerify(), ThresholdController(0.5, 4), 4)
    with pytest.raises(ValueError, match="candidates"):
        speculative_generate(pair, [[1, 2]], KSeq(), 4, 4)
    with pytest.raises(ValueError, match="at least one token"):
        speculative_generate(pair, [[]], TokenVerify(), 4, 4)


def test_records_match_the_ledger():
    pair = tiny_pair(sharpness=2.0)
    run = speculative_generate(pair, random_prompts(2, np.random.default_rng(3)), TokenVerify(), 3, 30,
                               DecodeOptions(progress=False))
    d = run.decode
    assert len(run.tv) == 3 and all(np.all((v >= 0) & (v <= 1)) for v in run.tv)
    assert run.tv[0].size == d.accept_hist[1:].sum()  # one first-position TV per iteration that drafted
    for pa, qa, tv in zip(run.p_a, run.q_a, run.tv, strict=True):
        np.testing.assert_allclose(qa - pa, tv, atol=1e-12)  # the two-point reduction keeps TV
    # E[tau | drafts] averages to the measured accepted length within sampling error
    assert run.expected_accepted.size == d.iterations
    measured = d.accepted / d.iterations
    assert abs(run.expected_accepted.mean() - measured) < 5 * run.expected_accepted.std() / np.sqrt(
        run.expected_accepted.size) + 0.05
    assert run.timer.count("target") >= d.iterations / 2 and run.tokens_per_s > 0


def test_tree_scoring_equals_sequential_scoring_and_keeps_one_path():
    model = tiny_llama(6)
    prefixes = [[1, 5, 7, 9], [1, 4]]
    cache = CachedLM(model, 2)
    cache.feed(np.array([[1, 5, 7, 9], [1, 4, 0, 0]]), [4, 2])
    # row 0: a 4x2-like tree of 6 nodes; row 1: a chain of 3 nodes (padding after)
    tokens = np.array([[11, 12, 13, 14, 15, 16], [17, 18, 19, 0, 0, 0]])
    parents = np.array([[-1, -1, 0, 0, 1, 2], [-1, 0, 1, -1, -1, -1]])
    logits, _ = cache.feed_tree(tokens, parents, [6, 3])

    def path(b, j):
        out = []
        while j >= 0:
            out.append(int(tokens[b, j]))
            j = parents[b, j]
        return out[::-1]

    worst = 0.0
    for b, n in enumerate((6, 3)):
        for j in range(n):
            with torch.no_grad():
                ref = model(torch.as_tensor([prefixes[b] + path(b, j)])).logits[0, -1]
            worst = max(worst, float((logits[b, j] - ref).abs().max()))
    assert worst < 1e-12
    cache.keep_path([[0, 2, 5], [0, 1]])
    assert cache.length.tolist() == [7, 4]
    after, _ = cache.feed(np.array([[20], [21]]), [1, 1])
    for b, seq in enumerate([prefixes[0] + [11, 13, 16, 20], prefixes[1] + [17, 18, 21]]):
        with torch.no_grad():
            ref = model(torch.as_tensor([seq])).logits[0, -1]
        assert float((after[b, 0] - ref).abs().max()) < 1e-12
    with pytest.raises(ValueError, match="after its parent"):
        cache.feed_tree(np.array([[3, 4], [3, 4]]), np.array([[1, -1], [-1, 0]]), [2, 2])
