"""EAGLE-2's confidence-ordered draft trees: the grown tree, the exact law, the sampler, the verifier it needs.

The decoded tokens' law against the target's is test_engine_tree.py's ``test_decode_output_follows_target_law``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import full_depth_tokens, markov_pairs

from otspec.drafts import ConfidenceTree, DraftTree, parse_tree
from otspec.engine.confidence import grow_confidence, top_tokens
from otspec.engine.tree import generate_tree, tree_law
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import KSeq, MultiRound, NaiveMultiCandidate

P, Q = [0.5, 0.3, 0.2], [0.2, 0.3, 0.5]


@settings(max_examples=30, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.integers(1, 3), st.integers(1, 3), st.integers(1, 9))
def test_confidence_tree_iteration_is_lossless(pair, depth, top_k, nodes):
    draft, target, _ = pair
    if target.horizon is not None and target.horizon < depth + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=depth + top_k, sparsity=0.3)
    res = tree_law(draft, target, NaiveMultiCandidate(), ConfidenceTree(depth, top_k, nodes))
    assert res.max_deviation <= 1e-12


@pytest.mark.parametrize("nodes, accepted", [
    # IID rows p, q; top-2 at depth 2: confidences 0: .5, 1: .3, 00: .25, 01: .15, 10: .15, 11: .09, and the
    # walk reaches a kept node with the product of q over its path: E[accepted] = sum over kept nodes
    (1, 0.2),
    (2, 0.2 + 0.3),
    (3, 0.2 + 0.3 + 0.2 * 0.2),
    (4, 0.2 + 0.3 + 0.2 * 0.2 + 0.2 * 0.3),  # 01 before 10 (equal confidence): drafted first
    (5, 0.2 + 0.3 + 0.2 * 0.2 + 0.2 * 0.3 + 0.3 * 0.2),
    (6, 0.2 + 0.3 + 0.2 * 0.2 + 0.2 * 0.3 + 0.3 * 0.2 + 0.3 * 0.3),
])
def test_kept_nodes_and_expected_length_by_hand(nodes, accepted):
    res = tree_law(IIDSource(P), IIDSource(Q), NaiveMultiCandidate(), ConfidenceTree(2, 2, nodes))
    assert abs(res.expected_accepted - accepted) < 1e-12 and res.max_deviation <= 1e-12


def test_expansion_feeds_only_the_most_confident_nodes_of_each_level():
    rows = {(): [0.6, 0.3, 0.1, 0.0], (0,): [0.1, 0.1, 0.1, 0.7], (1,): [0.0, 0.0, 0.5, 0.5],
            (0, 3): [1.0, 0.0, 0.0, 0.0], (1, 2): [0.25, 0.25, 0.25, 0.25], (1, 3): [0.0, 1.0, 0.0, 0.0]}
    paths = []

    def feed(items):
        out = []
        for token, parent in items[0]:
            paths.append((paths[parent] if parent >= 0 else ()) + (token,))
            out.append(rows[paths[-1]])
        return [np.array(out)]

    (trie,), calls = grow_confidence(ConfidenceTree(3, 2, 6), np.array([rows[()]]), feed, [3])
    # level 1: 0 (.6), 1 (.3) fed; level 2: 03 (.42), 12 (.15), 13 (.15), 00 (.06), 01 (.06); 03 and 12 fed
    assert paths == [(0,), (1,), (0, 3), (1, 2)] and calls.tolist() == [2]
    kept = sorted(tuple(trie.token[j] for j in trie.path_to(n)) for n in range(1, len(trie.token)))
    # level 3: 030 (.42), 120..123 (.0375 each); keep the 6 most confident: 0, 030, 03, 1, 12, 13
    assert kept == [(0,), (0, 3), (0, 3, 0), (1,), (1, 2), (1, 3)]
    assert trie.cands[0].tolist() == [0, 1] and len(trie) == 7
    assert top_tokens(np.array([0.0, 0.2, 0.2, 0.6]), 5).tolist() == [3, 1, 2]  # positive mass only, ties by id


def test_decode_matches_exact_on_iid_pair():
    """Tokens per full-depth iteration against the exact law (96,000 tokens a tree in 400 sequences of 240; see
    :func:`strategies.full_depth_tokens`)."""
    d, t = IIDSource(P), IIDSource(Q)
    for tree in (ConfidenceTree(2, 2, 4), ConfidenceTree(3, 2, 6), ConfidenceTree(1, 3, 3)):
        exact = tree_law(d, t, NaiveMultiCandidate(), tree).expected_tokens_per_iteration
        run = generate_tree(d, t, NaiveMultiCandidate(), tree, 240, n_sequences=400, seed=1, progress=False)
        per_iteration = full_depth_tokens(run, tree.depth)
        assert per_iteration.contains(exact), (str(tree), exact, per_iteration)


def test_a_verifier_for_drawn_candidates_is_biased_on_chosen_ones():
    """The named bug (top-k candidates verified as if drawn from the draft row): the exact law sees it."""
    d, t = IIDSource(P), IIDSource(Q)
    for verifier in (MultiRound(), KSeq()):
        verifier.any_candidates = True  # bypass the check to show what it guards against
        assert tree_law(d, t, verifier, ConfidenceTree(2, 2, 4)).max_deviation > 0.01


def test_specs_and_errors():
    tree = parse_tree("eagle2:4:3:12")
    assert tree == ConfidenceTree(4, 3, 12) and str(tree) == "eagle2:4:3:12" and tree.num_tokens == 12
    assert tree.branching == (3, 3, 3, 3) and parse_tree("2x2") == DraftTree((2, 2))
    assert parse_tree("iid:3:2") == DraftTree((3, 1))
    for bad in ("eagle2:4:3", "eagle2:a:3:4", "eagle2:0:3:4"):
        with pytest.raises(ValueError, match="eagle2|depth"):
            parse_tree(bad)
    d, t = random_markov(3, seed=0)
    with pytest.raises(ValueError, match="chooses them"):
        tree_law(d, t, KSeq(), ConfidenceTree(2, 2, 4))
    with pytest.raises(ValueError, match="chooses them"):
        generate_tree(d, t, MultiRound(), ConfidenceTree(2, 2, 4), 4, progress=False)


def test_top_tokens_equals_a_full_stable_sort_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(500):
        row = rng.integers(0, 4, int(rng.integers(1, 12))) / 3.0  # many ties and zeros
        k = int(rng.integers(1, 8))
        pos = np.flatnonzero(row > 0)
        assert top_tokens(row, k).tolist() == pos[np.argsort(-row[pos], kind="stable")[:k]].tolist()
