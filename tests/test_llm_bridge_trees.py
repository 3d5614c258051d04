"""Multi-draft and tree decoding of real models (llm_bridge.trees) on tiny LLaMA models."""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge import trees
from llm_bridge.cache import CachedLM
from llm_bridge.drafters import NGramDrafter, Pair
from llm_bridge.loop import plain_generate
from llm_bridge.lossless import root_token_law, two_sample_test
from llm_bridge.options import DecodeOptions
from llm_bridge.sampling import Sampling
from llm_bridge.trees import parse_tree, tree_generate
from otspec.distributions import namespace
from otspec.drafts import DraftTree
from otspec.errors import SizeLimitError
from otspec.verifiers import (
    KSeq,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
    TokenVerify,
)
from otspec.verifiers.candidates import MultiDraftVerifier, membership_law, membership_outcome
from tests.llm_tiny import VOCAB, random_prompts, tiny_llama, tiny_pair, torch

TOP4 = Sampling(top_k=4)


def _full_row(model, seq, sampling):
    with torch.no_grad():
        return sampling.rows(model(torch.as_tensor([list(seq)])).logits[0, -1])


class FirstCandidate(MultiDraftVerifier):
    """A biased control: always emits the first candidate (the draft's law, not the target's); numpy or torch."""

    name = "first"
    lossless = False

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        kernel = np.eye(draft_probs.shape[1])[np.asarray(candidates)[:, 0]]
        return membership_law(np.asarray(candidates), kernel)

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        first = candidates[:, 0]
        return membership_outcome(candidates, first * (first >= 0))


def test_grown_tree_equals_sequential_scoring_float32():
    """A tree grown a level per call (drafting) and scored whole (verification) both equal sequential scoring."""
    model = tiny_llama(3, dtype=torch.float32)
    prefixes = [[1, 5, 7], [1, 9, 4, 6, 8]]
    grown, whole = CachedLM(model, 2), CachedLM(model, 2)
    for cache in (grown, whole):
        cache.feed(np.array([[1, 5, 7, 0, 0], [1, 9, 4, 6, 8]]), [3, 5])
    # level 1: two children of the root (row 1: one); level 2: children of pending nodes 0 and 1
    first, _ = grown.feed_tree(np.array([[11, 12], [13, 0]]), np.array([[-1, -1], [-1, -1]]), [2, 1])
    second, _ = grown.feed_tree(np.array([[14, 15, 16], [17, 18, 0]]), np.array([[0, 0, 1], [0, 2, -1]]), [3, 2])
    assert grown.pending == 5
    tokens = np.array([[11, 12, 14, 15, 16], [13, 17, 18, 0, 0]])
    parents = np.array([[-1, -1, 0, 0, 1], [-1, 0, 1, -1, -1]])
    at_once, _ = whole.feed_tree(tokens, parents, [5, 3])
    paths = {0: [[11], [12], [11, 14], [11, 15], [12, 16]], 1: [[13], [13, 17], [13, 17, 18]]}
    rows = {0: [first[0, 0], first[0, 1], second[0, 0], second[0, 1], second[0, 2]],
            1: [first[1, 0], second[1, 0], second[1, 1]]}
    for b in (0, 1):
        for j, path in enumerate(paths[b]):
            with torch.no_grad():
                ref = model(torch.as_tensor([prefixes[b] + path])).logits[0, -1]
            assert float((rows[b][j] - ref).abs().max()) < 1e-5
            assert float((at_once[b, j] - ref).abs().max()) < 1e-5
    with pytest.raises(RuntimeError, match="pending"):
        grown.feed(np.array([[3], [3]]), [1, 1])
    with pytest.raises(ValueError, match="root-first chain"):
        grown.keep_path([[1, 2], []])  # node 2 (14) hangs below node 0, not node 1
    grown.keep_path([[0, 2], [0, 2, 3]])  # 11 → 14, and 13 → 17 → 18 (pending columns: row 1's 17 is column 2)
    assert grown.length.tolist() == [5, 8]
    after, _ = grown.feed(np.array([[20], [21]]), [1, 1])
    for b, seq in enumerate([prefixes[0] + [11, 14, 20], prefixes[1] + [13, 17, 18, 21]]):
        with torch.no_grad():
            ref = model(torch.as_tensor([seq])).logits[0, -1]
        assert float((after[b, 0] - ref).abs().max()) < 1e-5


@pytest.mark.parametrize("verifier,tree,rule", [(KSeq(), "2x2x1", "match"), (MultiRound(), "iid:3:2", "accepted"),
                                                (MultiRoundWithoutReplacement(), "2x2", "match")],
                         ids=["kseq-2x2x1", "multiround-iid", "multiround-wor"])
def test_every_trie_row_equals_a_full_forward_pass(verifier, tree, rule):
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(2, np.random.default_rng(4))
    run = tree_generate(pair, prompts, verifier, tree, 12, DecodeOptions(batch_size=2, progress=False), rule=rule,
                        keep_tries=True)
    assert run.decode.generated == 24 and len(run.tries) == run.decode.iterations
    checked = 0
    for b, committed, trie in run.tries:
        for node in range(len(trie.token)):
            path = committed.tolist() + [trie.token[j] for j in trie.path_to(node)]
            np.testing.assert_allclose(trie.q[node], _full_row(pair.target.model, path, Sampling()), atol=1e-12)
            if node in trie.p:
                np.testing.assert_allclose(trie.p[node], _full_row(pair.drafter.model, path, Sampling()), atol=1e-12)
            checked += 1
        assert committed[:len(prompts[b])].tolist() == list(prompts[b])
    assert checked > 3 * run.decode.iterations
    # the emitted tokens are the committed prefixes that follow
    for b in range(2):
        last = [c for i, c, _ in run.tries if i == b][-1]
        assert run.tokens[b][:last.size - len(prompts[b])].tolist() == last[len(prompts[b]):].tolist()


@pytest.mark.parametrize("verifier,k", [(KSeq(), 2), (MultiRound(), 3), (MultiRoundWithoutReplacement(), 3),
                                        (NaiveMultiCandidate(), 2), (OTMVerify(), 2), (OTMVerify(False), 2)],
                         ids=["kseq", "multiround", "multiround-wor", "naive", "otm", "otm-wor"])
def test_root_token_law_is_the_target_row(verifier, k):
    pair = tiny_pair()
    law = root_token_law(pair, [1, 5, 9, 3], verifier, k, sampling=TOP4)
    assert law.paths > 1
    assert law.max_deviation < 1e-12
    assert abs(law.law.sum() - 1) < 1e-12


def test_biased_root_law_deviates():
    law = root_token_law(tiny_pair(), [1, 5, 9, 3], FirstCandidate(), 2, sampling=TOP4)
    assert law.max_deviation > 0.05


@pytest.mark.parametrize("verifier,tree,rule", [(KSeq(), "2x2", "match"), (MultiRoundWithoutReplacement(), "2x2",
                                                                             "accepted"), (OTMVerify(), "iid:2:2",
                                                                                           "match")],
                         ids=["kseq", "multiround-wor", "otm"])
def test_tree_loop_passes_two_sample_test(verifier, tree, rule):
    pair = tiny_pair(sharpness=2.0)
    test = two_sample_test(pair, [1, 5, 9, 3], verifier, tree, DecodeOptions(sampling=TOP4, seed=5), n=300, tokens=3,
                           rule=rule)
    assert test["p_value"] > 1e-3


def test_two_sample_test_rejects_a_biased_tree_verifier():
    pair = tiny_pair(sharpness=2.0)
    test = two_sample_test(pair, [1, 5, 9, 3], FirstCandidate(), "2x1", DecodeOptions(sampling=TOP4, seed=5), n=300,
                           tokens=2)
    assert test["p_value"] < 1e-6


@pytest.mark.parametrize("rule", ["match", "accepted"])
def test_expected_length_given_the_trie_matches_the_measured_one(rule):
    pair = tiny_pair(sharpness=2.0)
    run = tree_generate(pair, random_prompts(4, np.random.default_rng(6)), KSeq(), "3x2x1", 40,
                        DecodeOptions(sampling=TOP4, progress=False), rule=rule)
    d = run.decode
    assert run.expected_accepted.size == d.iterations
    measured = d.accepted / d.iterations
    se = run.expected_accepted.std() / np.sqrt(d.iterations)
    assert abs(run.expected_accepted.mean() - measured) < 5 * se + 0.1
    # records: one go-on probability per verified node; the optimum bounds the closed form node by node
    assert run.go_on[0].size == (d.accept_hist.sum(axis=1)[1:]).sum()
    for acc, opt in zip(run.acceptance, run.optimum, strict=True):
        assert np.all(acc <= opt + 1e-9)
    # closed forms over the first nodes of each depth only
    assert [a.size for a in run.acceptance] == [min(g.size, trees.MAX_CLOSED_FORM_NODES) for g in run.go_on]
    assert run.go_on[0].size > trees.MAX_CLOSED_FORM_NODES
    assert run.tree == DraftTree((3, 2, 1)) and run.target_nodes.size == d.iterations


def test_greedy_tree_decoding_equals_greedy_plain():
    pair = tiny_pair()
    prompts = random_prompts(3, np.random.default_rng(8))
    greedy = Sampling(temperature=0)
    tree = tree_generate(pair, prompts, KSeq(), "2x2x2", 15, DecodeOptions(sampling=greedy, progress=False))
    plain = plain_generate(pair.target, prompts, 15, sampling=greedy, progress=False)
    for a, b in zip(tree.tokens, plain.tokens, strict=True):
        assert a.tolist() == b.tolist()


def test_tree_arguments_are_checked():
    pair = tiny_pair()
    with pytest.raises(ValueError, match="multi-draft verifier"):
        tree_generate(pair, [[1, 2]], TokenVerify(), "2x2", 4)
    with pytest.raises(ValueError, match="rule"):
        tree_generate(pair, [[1, 2]], KSeq(), "2x2", 4, rule="first")
    with pytest.raises(ValueError, match="model draft"):
        tree_generate(Pair(pair.target, NGramDrafter(VOCAB)), [[1, 2]], KSeq(), "2x2", 4)
    with pytest.raises(ValueError, match="k-config"):
        parse_tree("2xx")
    with pytest.raises(ValueError, match="iid:K:L"):
        parse_tree("iid:4")
    assert parse_tree("iid:4:3", False) == DraftTree((4, 1, 1), False)
    with pytest.raises(SizeLimitError, match="joint support"):  # the OTM plan on full rows: refused, not attempted
        tree_generate(pair, [[1, 2, 3]], OTMVerify(), "3x1", 4, DecodeOptions(progress=False))


def test_otm_plan_on_the_joint_support_equals_the_plan_on_compressed_rows():
    rng = np.random.default_rng(2)
    V, support = 40, np.array([3, 7, 8, 21, 30])
    p, q = np.zeros((1, V)), np.zeros((1, V))
    p[0, support[:4]] = rng.dirichlet(np.ones(4))
    q[0, support[1:]] = rng.dirichlet(np.ones(4))
    cands = np.array([[7, 3], [21, 21], [8, 3]])
    wide = OTMVerify().law(cands, np.repeat(p, 3, 0), np.repeat(q, 3, 0))
    index = {int(t): i for i, t in enumerate(support)}
    narrow = OTMVerify().law(np.vectorize(index.get)(cands), np.repeat(p[:, support], 3, 0),
                             np.repeat(q[:, support], 3, 0))
    xp = namespace(p)
    np.testing.assert_allclose(xp.asarray(wide.accepted)[:, support], narrow.accepted, atol=1e-12)
    np.testing.assert_allclose(xp.asarray(wide.rejected)[:, support], narrow.rejected, atol=1e-12)
    assert float(np.asarray(wide.accepted).sum() + np.asarray(wide.rejected).sum()) == pytest.approx(3.0)


def test_deferred_closed_forms_equal_the_ones_computed_while_decoding():
    from llm_bridge.loop import finish
    from otspec.verifiers import MultiRoundWithoutReplacement

    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(2, np.random.default_rng(7))
    now = tree_generate(pair, prompts, MultiRoundWithoutReplacement(), "2x2x1", 12,
                        DecodeOptions(sampling=TOP4, progress=False))
    later = finish(trees.tree_batches(pair, prompts, MultiRoundWithoutReplacement(), "2x2x1", 12,
                                      DecodeOptions(sampling=TOP4, progress=False), defer_closed_forms=True))
    assert later.acceptance == [] and later.optimum == [] and later.pending is not None
    kept = [row for nodes in later.pending.closed for p, q, _ in nodes for row in (p, q)]
    assert kept and all(row.base is None for row in kept)  # own copies, not views that hold each call's whole rows
    later.closed_forms()
    assert later.pending is None and len(later.acceptance) == len(now.acceptance) > 0
    for a, b, x, y in zip(now.acceptance, later.acceptance, now.optimum, later.optimum, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(x, y)
        assert np.all(b <= y + 1e-12)  # the verifier's acceptance never beats the optimum on the same node


def test_eagle2_trees_on_models_score_every_node_like_a_full_pass_and_keep_the_target_law():
    """EAGLE-2's confidence-ordered tree with a draft model: the kept nodes' rows are the models' own rows, each
    node's candidates are the top tokens of its draft row, E[τ | trie] matches the measured length, and a
    two-sample test against plain sampling passes (the same test rejects a biased verifier above)."""
    from otspec.drafts import ConfidenceTree
    from otspec.engine.confidence import top_tokens

    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(3, np.random.default_rng(4))
    run = tree_generate(pair, prompts, NaiveMultiCandidate(), "eagle2:3:2:5", 20,
                        DecodeOptions(sampling=TOP4, batch_size=3, progress=False), keep_tries=True)
    assert run.tree == ConfidenceTree(3, 2, 5) and run.decode.generated == 60
    for _, committed, trie in run.tries:
        assert len(trie) - 1 <= 5
        for node in range(len(trie.token)):
            path = committed.tolist() + [trie.token[j] for j in trie.path_to(node)]
            np.testing.assert_allclose(trie.q[node], _full_row(pair.target.model, path, TOP4), atol=1e-12)
            if node in trie.cands:  # an internal node was fed: its row, and its kept children among its top 2
                np.testing.assert_allclose(trie.p[node], _full_row(pair.drafter.model, path, TOP4), atol=1e-12)
                assert set(trie.cands[node].tolist()) <= set(top_tokens(trie.p[node], 2).tolist())
    d = run.decode
    se = run.expected_accepted.std() / np.sqrt(d.iterations)
    assert abs(run.expected_accepted.mean() - d.accepted / d.iterations) < 5 * se + 0.1
    assert all(np.isnan(a).all() for a in run.acceptance)  # closed forms are for drawn candidates
    test = two_sample_test(pair, [1, 5, 9, 3], NaiveMultiCandidate(), "eagle2:2:2:3",
                           DecodeOptions(sampling=TOP4, seed=5), n=300, tokens=3)
    assert test["p_value"] > 1e-3
    with pytest.raises(ValueError, match="chooses them"):
        tree_generate(pair, prompts, KSeq(), "eagle2:2:2:3", 6, DecodeOptions(progress=False))
