"""The exact optimum over a draft tree (otspec.solvers.tree_ot): chains, every tree verifier below it, limits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import markov_pairs

from otspec.drafts import DraftTree
from otspec.engine.tree import tree_law
from otspec.errors import SizeLimitError
from otspec.solvers.block_ot import block_laws, block_ot_value
from otspec.solvers.tree_ot import drafted_tree_law, tree_optimum
from otspec.sources import IIDSource, random_markov
from otspec.verifiers import (
    KSeq,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    OTMVerify,
)
from otspec.verifiers.traversal import TraversalVerify


@settings(max_examples=15, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.integers(1, 3))
def test_a_chain_is_block_level_ot(pair, L):
    """k = 1 at every depth: the coupling LP over drafted chains is eq. (8), sum over prefixes of min{p, q}."""
    draft, target, _ = pair
    if target.horizon is not None and target.horizon < L:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=L, sparsity=0.3)
    opt = tree_optimum(draft, target, DraftTree.chain(L))
    p, q = block_laws(draft, target, L)
    assert abs(opt.value - block_ot_value(p, q, draft.vocab_size, L)) < 1e-8
    assert abs(opt.value - opt.per_level_sum) < 1e-8  # for chains one coupling serves every depth


def test_drafted_tree_law_by_hand():
    """p = (0.5, 0.3, 0.2) IID, tree 2x1 with replacement: the root draws 2 i.i.d. tokens; each distinct child draws
    as many tokens as tree nodes spell it."""
    trees, probs = drafted_tree_law(IIDSource([0.5, 0.3, 0.2]), DraftTree((2, 1)))
    assert abs(probs.sum() - 1) < 1e-12 and all(len({len(x) for x in t}) == 2 for t in trees)
    # the tree {0, 00} needs both root draws 0 and both children draws 0 (the node spelled twice draws 2): 0.5**4
    assert abs(probs[trees.index(frozenset({(0,), (0, 0)}))] - 0.5**4) < 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_every_tree_verifier_is_at_or_below_the_optimum(seed):
    draft, target = random_markov(3, 0.7, seed=seed, sparsity=0.2)
    for config, replacement, verifiers, rules in [
        ((2, 1), True, (KSeq(), MultiRound(), NaiveMultiCandidate(), OTMVerify()), ("match", "accepted")),
        ((2, 2), True, (KSeq(), MultiRound(), NaiveMultiCandidate()), ("match", "accepted")),
        ((3,), False, (MultiRoundWithoutReplacement(), NaiveMultiCandidate(), OTMVerify(False)), ("match",)),
        ((2, 1), False, (MultiRoundWithoutReplacement(), TraversalVerify()), ("match",)),
        ((1, 1, 1), False, (TraversalVerify(),), ("match",)),
    ]:
        tree = DraftTree(config, replacement)
        opt = tree_optimum(draft, target, tree)
        assert opt.value <= opt.per_level_sum + 1e-9 and opt.per_level[0] <= 1 + 1e-12
        for verifier in verifiers:
            for rule in rules:
                got = tree_law(draft, target, verifier, tree, rule).expected_accepted
                assert got <= opt.value + 1e-8, (verifier.name, config, rule, got, opt.value)
    # one step: the OTM-k verifier reaches the optimum (the per-step optimum is the whole optimum at L = 1)
    opt = tree_optimum(draft, target, DraftTree((3,), False))
    assert abs(tree_law(draft, target, OTMVerify(False), DraftTree((3,), False)).expected_accepted - opt.value) < 1e-7


def test_sizes_are_refused_before_enumerating():
    big = IIDSource(np.full(50, 1 / 50))
    with pytest.raises(SizeLimitError, match="MAX_TREE_DRAWS"):
        tree_optimum(big, big, DraftTree((4, 2)))
    with pytest.raises(ValueError, match="k-config"):
        tree_optimum(big, big, "2x1")


def test_per_depth_optima_are_not_reached_at_once_on_trees():
    """Nested per-step optima overstate a tree: here no coupling reaches every depth's own optimum at once, so the
    whole-tree LP is the exact optimum and the per-depth sum only a bound (for chains they agree, above)."""
    draft, target = random_markov(2, 3.0, seed=38, sparsity=0.3)
    opt = tree_optimum(draft, target, DraftTree((2, 1)))
    assert opt.per_level_sum - opt.value > 1e-3


def test_on_a_chosen_tree_the_naive_verifier_is_optimal():
    """EAGLE-2's tree is one tree of probability 1: the optimum is Q(paths), which the naive verifier reaches."""
    from otspec.drafts import ConfidenceTree
    from otspec.engine.confidence import grow_on_source
    from otspec.solvers.tree_ot import coupling_optimum

    draft, target = random_markov(3, 0.7, seed=2, sparsity=0.2)
    for tree in (ConfidenceTree(2, 2, 4), ConfidenceTree(3, 2, 5)):
        trie = grow_on_source(draft, tree)
        paths = frozenset(tuple(trie.token[j] for j in trie.path_to(n)) for n in range(1, len(trie)))
        opt = coupling_optimum([paths], [1.0], target, tree.depth)
        naive = tree_law(draft, target, NaiveMultiCandidate(), tree).expected_accepted
        assert opt.trees == 1 and abs(opt.value - naive) < 1e-8 and abs(opt.value - opt.per_level_sum) < 1e-8
