"""Sequence-level multi-draft decoding (SpecTr Algorithm 3, MCSD trees): exact and end to end."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from strategies import full_depth_tokens, markov_pairs

from otspec import theory
from otspec.drafts import DraftTree, parse_tree
from otspec.engine import loop
from otspec.engine.predict import IterationTrace
from otspec.engine.runstate import LoopHooks
from otspec.engine.session import SourceSession
from otspec.engine.tree import generate_tree, tree_law
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import (
    KSeq,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
)
from otspec.verifiers.traversal import TraversalVerify

SETUPS = [
    (KSeq(), "2x1", True, "match"),
    (KSeq(), "2x2", True, "match"),
    (MultiRound(), "2x2", True, "accepted"),
    (MultiRound(), "3x1", True, "match"),
    (MultiRoundWithoutReplacement(), "2x2", False, "accepted"),
    (MultiRoundWithoutReplacement(), "3x1", False, "match"),
    (NaiveMultiCandidate(), "2x2", True, "accepted"),
    (OTMVerify(), "2x1", True, "match"),
    (NaiveMultiCandidate(), "eagle2:3:2:4", False, "match"),  # EAGLE-2's chosen tree (test_engine_confidence.py)
    (TraversalVerify(), "2x2", False, "match"),  # a whole-tree verifier (test_verifiers_traversal.py)
]


@settings(max_examples=25)
@given(markov_pairs(max_vocab=3, max_length=1), st.sampled_from(range(len(SETUPS))))
def test_tree_iteration_is_lossless(pair, which):
    draft, target, _ = pair
    verifier, config, replacement, rule = SETUPS[which]
    tree = parse_tree(config, replacement)
    if target.horizon is not None and target.horizon < tree.depth + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=which, sparsity=0.3)
    res = tree_law(draft, target, verifier, tree, rule)
    assert res.max_deviation <= 1e-12


def test_chain_tree_equals_token_verification():
    d, t = random_markov(3, 1.0, seed=2, sparsity=0.2)
    res = tree_law(d, t, MultiRound(), DraftTree.chain(3), "accepted")
    assert abs(res.expected_accepted - theory.expected_accepted_token(d, t, 3)) < 1e-12


def test_more_drafts_accept_more():
    d, t = random_markov(3, 0.5, seed=5)
    values = [tree_law(d, t, KSeq(), DraftTree.spectr_iid(K, 2), "match").expected_tokens_per_iteration
              for K in (1, 2, 4)]
    assert values[0] < values[1] < values[2]


def test_decode_matches_exact_on_iid_pair():
    """IID sources: every iteration that drafts its whole tree is a draw of the exact one-iteration law, so the
    tokens per full-depth iteration estimate E[tokens per iteration] (96,000 tokens a setup, in 400 sequences of
    240: few loop steps, no end effect; :func:`strategies.full_depth_tokens`). The run's own block efficiency, which
    averages the short last iterations too, contains it on long sequences (one setup: the same ledger serves all)."""
    d, t = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    for verifier, config, replacement, rule in SETUPS[:5]:
        tree = DraftTree.parse(config, replacement)
        exact = tree_law(d, t, verifier, tree, rule).expected_tokens_per_iteration
        run = generate_tree(d, t, verifier, tree, 240, rule=rule, n_sequences=400, seed=1, progress=False)
        per_iteration = full_depth_tokens(run, tree.depth)
        assert per_iteration.contains(exact), (verifier.name, config, rule, exact, per_iteration)
        assert per_iteration.high - per_iteration.low < 0.02
    verifier, config, replacement, rule = SETUPS[0]
    tree = DraftTree.parse(config, replacement)
    exact = tree_law(d, t, verifier, tree, rule).expected_tokens_per_iteration
    run = generate_tree(d, t, verifier, tree, 3000, rule=rule, n_sequences=32, seed=1, progress=False)
    assert run.block_efficiency.contains(exact), (exact, run.block_efficiency)


@pytest.mark.parametrize("which", [1, 4, 8, 9])
def test_decode_output_follows_target_law(which):
    verifier, config, replacement, rule = SETUPS[which]
    d, t = random_markov(2, 0.5, horizon=4, seed=8, sparsity=0.2)
    res = generate_tree(d, t, verifier, parse_tree(config, replacement), 4, rule=rule,
                        n_sequences=60_000, seed=3, progress=False)
    idx = res.tokens @ np.array([8, 4, 2, 1])
    law = t.enumerate(4).probs
    counts = np.bincount(idx, minlength=16)
    assert counts[law == 0].sum() == 0
    assert stats.chisquare(counts[law > 0], counts.sum() * law[law > 0]).pvalue > 1e-4
    assert res.generated == 60_000 * 4 and res.target_calls == res.iterations
    assert res.accept_hist.sum() == res.iterations and res.accepted + res.iterations == res.generated


def test_draft_tree_shapes():
    tree = DraftTree.parse("4x2x2x1")
    assert tree.depth == 4 and tree.leaves == 16 and tree.num_tokens == 4 + 8 + 16 + 16
    assert DraftTree.spectr_iid(8, 4).branching == (8, 1, 1, 1)
    with pytest.raises(ValueError, match="k-config"):
        DraftTree.parse("4xx2")
    with pytest.raises(ValueError, match="every k_i >= 1"):
        DraftTree((2, 0))


def test_errors():
    d, t = random_markov(3, seed=0)
    with pytest.raises(ValueError, match="without replacement"):
        tree_law(d, t, MultiRoundWithoutReplacement(), DraftTree.parse("2x1"), "match")
    with pytest.raises(ValueError, match="rule must be one of"):
        tree_law(d, t, KSeq(), DraftTree.parse("2x1"), "first")


@pytest.mark.parametrize("kind", ["table", "markov", "time-varying", "positional"])
def test_source_session_scores_a_tree_as_whole_paths(kind):
    """Rows of tree nodes equal the source's rows after prefix + path, whatever prefix tokens the source reads
    (all of them, the last one, or none but the length)."""
    from otspec.engine.session import SourceSession
    from otspec.sources import PositionalSource, TableSource

    rng = np.random.default_rng(5)
    V, T = 4, 9
    if kind == "table":
        source = TableSource(lambda prefix: np.roll(np.arange(1.0, V + 1), sum(prefix) % V) / (V * (V + 1) / 2), V, T)
    elif kind == "markov":
        source = random_markov(V, 1.0, seed=1)[1]
    elif kind == "time-varying":
        source = random_markov(V, 1.0, horizon=T, seed=1)[1]
    else:
        source = PositionalSource(rng.dirichlet(np.ones(V), size=T))
    assert source.context == {"table": None, "markov": 1, "time-varying": 1, "positional": 0}[kind]
    session = SourceSession(source, 2, T)
    session.start([np.array([2, 1, 3]), np.array([0])])
    tokens = np.array([[1, 2, 3, 0], [3, 3, 0, 0]])
    parents = np.array([[-1, -1, 0, 2], [-1, 0, -1, -1]])
    rows = session.feed_tree(tokens, parents, np.array([4, 2])).rows
    paths = {(0, 0): [1], (0, 1): [2], (0, 2): [1, 3], (0, 3): [1, 3, 0], (1, 0): [3], (1, 1): [3, 3]}
    prefixes = ([2, 1, 3], [0])
    for (b, j), path in paths.items():
        seq = np.array([prefixes[b] + path])
        np.testing.assert_allclose(rows[b, j + 1], source.next_probs(seq)[0], atol=0, rtol=0)
    np.testing.assert_allclose(rows[1, 3], rows[1, 0])  # padding: the root's row


@pytest.mark.parametrize("which", [0, 5, 8, 9])
def test_simulate_tree_matches_the_exact_law_of_one_iteration(which):
    """simulate_tree: the interval of E[accepted] holds tree_law's value (one iteration from the empty
    context, not the decode loop's later iterations), and the first emitted token follows the target's row."""
    from otspec.engine import simulate_tree

    verifier, config, replacement, rule = SETUPS[which]
    d, t = random_markov(3, 0.5, seed=4, sparsity=0.2)
    tree = parse_tree(config, replacement)
    exact = tree_law(d, t, verifier, tree, rule).expected_accepted
    res = simulate_tree(d, t, verifier, tree, 40_000, rule=rule, seed=2, confidence=0.999, progress=False)
    assert res.accepted.low <= exact <= res.accepted.high, (config, exact, res.accepted)
    assert res.accept_counts.sum() == 40_000 and res.accept_counts.size == tree.depth + 1
    q0 = t.next_probs([[]])[0]
    assert stats.chisquare(res.first_token_counts[q0 > 0], 40_000 * q0[q0 > 0]).pvalue > 1e-4
    assert res.first_token_counts[q0 == 0].sum() == 0


def test_simulate_tree_has_power_against_counting_every_iteration():
    """The estimate is of one iteration: averaging every iteration of a decode run of depth + 1 tokens (the
    bug simulate_tree had while written) lands far outside the interval."""
    from otspec.engine import simulate_tree

    d, t = random_markov(3, 1.0, seed=1)
    tree = parse_tree("2x1")
    res = simulate_tree(d, t, KSeq(), tree, 20_000, seed=1, progress=False)
    run = generate_tree(d, t, KSeq(), tree, tree.depth + 1, n_sequences=20_000, seed=1, progress=False)
    every = (run.accept_hist.sum(axis=0) @ np.arange(tree.depth + 1)) / run.accept_hist.sum()
    assert abs(every - res.accepted.value) > 10 * res.accepted.stderr


class _TrieSession(SourceSession):
    """A toy source walked as a model on the host is: one merged trie per sequence (the reference walk)."""

    fixed_shape_trees = False


@pytest.mark.parametrize("which", [1, 4, 8, 9])
def test_trie_walk_and_array_walk_give_the_target_law(which):
    """Toy sources take the fixed-shape walk (:mod:`otspec.engine.devicetree`); the trie walk that models on the host
    take is the reference. Both emit 4 tokens whose law is the target's (a chi-square test each, 8,000 sequences)."""
    verifier, config, replacement, rule = SETUPS[which]
    d, t = random_markov(2, 0.5, horizon=4, seed=8, sparsity=0.2)
    law = t.enumerate(4).probs
    tree, n = parse_tree(config, replacement), 8_000
    for kind in (SourceSession, _TrieSession):
        sessions = (kind(d, n, 5, max_prefix=2), kind(t, n, 5, max_prefix=3))
        assert loop._walks_arrays(*sessions, verifier, tree, batch=n) is (kind is SourceSession)
        assert loop._walks_arrays(*sessions, verifier, tree, batch=1) is False  # one sequence: a trie costs less
        # a prediction's trace reads the merged trie's widths (a model on the host feeds those): tries for it
        assert loop._walks_arrays(*sessions, verifier, tree, LoopHooks(observers=[IterationTrace(n)]), n) is False
        run = loop.tree_loop(*sessions, verifier, tree, 4, np.random.default_rng(which), rule=rule, batch=n)
        counts = np.bincount(run.tokens @ np.array([8, 4, 2, 1]), minlength=16)
        assert counts[law == 0].sum() == 0
        assert stats.chisquare(counts[law > 0], n * law[law > 0]).pvalue > 1e-4, kind.__name__


def test_every_tree_verifier_runs_in_the_loop_at_a_batch_that_walks_arrays():
    """Every registered multi-draft and whole-tree verifier, on a 2x2 tree drawn as it needs, in simulate_tree at
    4,000 trials (arrays at 16 sequences and more; OTM, whose plan needs exactly k candidates, on tries): the 99.9 %
    interval holds tree_law's exact E[accepted] (OTM's -1 padding once made it fail there)."""
    from otspec.engine import simulate_tree
    from otspec.verifiers.registry import registered

    d, t = IIDSource([0.2, 0.3, 0.5]), IIDSource([0.5, 0.3, 0.2])
    ran = []
    for name, cls in sorted(registered(layouts=("candidates", "tree")).items()):
        verifier = cls()
        for draw in (True, False, "greedy", "hub"):
            tree = parse_tree("2x1" if name == "gbv" else "2x2", replacement=draw)
            try:
                exact = tree_law(d, t, verifier, tree).expected_accepted
            except ValueError:  # not the draw this verifier is lossless for
                continue
            res = simulate_tree(d, t, verifier, tree, 4_000, seed=5, confidence=0.999, progress=False)
            assert res.accepted.low <= exact <= res.accepted.high, (name, draw, exact, res.accepted)
            ran.append(name)
            break
    assert {"kseq", "otm", "naive", "traversal", "gbv", "spechub", "greedy"} <= set(ran)
