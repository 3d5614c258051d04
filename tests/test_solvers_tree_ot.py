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
    BackwardBlockVerify,
    BlockVerify,
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
    """k = 1 at every depth: the verifier LP (any one-iteration lossless verifier, off-path rows included) is
    published block verification, eq. (17) (Thomas & Pal's Thms 3.3-3.4; Traversal Verification's chain claim);
    the coupling bound is block-level OT, eq. (8), sum over prefixes of min{p, q}, reached only with a carry."""
    draft, target, _ = pair
    if target.horizon is not None and target.horizon < L + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=L, sparsity=0.3)
    opt = tree_optimum(draft, target, DraftTree.chain(L))
    p, q = block_laws(draft, target, L)
    assert abs(opt.coupling - block_ot_value(p, q, draft.vocab_size, L)) < 1e-8
    assert abs(opt.coupling - opt.per_level_sum) < 1e-8  # for chains one coupling serves every depth
    assert abs(opt.value - BlockVerify().expected_accepted(draft, target, L)) < 1e-9
    assert abs(opt.value - tree_law(draft, target, TraversalVerify(), DraftTree.chain(L)).expected_accepted) < 1e-9


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
        assert opt.value <= opt.coupling + 1e-9 <= opt.per_level_sum + 2e-9 and opt.per_level[0] <= 1 + 1e-12
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
    whole-tree coupling is below the per-depth sum (for chains they agree, above)."""
    draft, target = random_markov(2, 3.0, seed=38, sparsity=0.3)
    opt = tree_optimum(draft, target, DraftTree((2, 1)))
    assert opt.per_level_sum - opt.coupling > 1e-3


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
        assert opt.trees == 1 and abs(opt.value - naive) < 1e-8 and abs(opt.coupling - opt.per_level_sum) < 1e-8
        assert abs(opt.coupling - naive) < 1e-8


def _best_vertex(A: np.ndarray, b: np.ndarray, c: np.ndarray) -> float:
    """max c·x over {A x = b, x >= 0} by enumerating every basic solution (brute force, no LP solver)."""
    import itertools

    rank = np.linalg.matrix_rank(A)
    best = -np.inf
    for basis in itertools.combinations(range(A.shape[1]), rank):
        sub = A[:, basis]
        if np.linalg.matrix_rank(sub) < rank:
            continue
        x_b, *_ = np.linalg.lstsq(sub, b, rcond=None)
        if np.abs(sub @ x_b - b).max() > 1e-10 or x_b.min() < -1e-10:
            continue
        best = max(best, float(c[list(basis)] @ x_b))
    return best


@pytest.mark.parametrize("vocab,config,replacement", [(2, (1,), True), (2, (2,), True), (3, (1,), True),
                                                      (2, (2,), False)])
def test_the_verifier_lp_equals_brute_force_on_the_smallest_cases(vocab, config, replacement):
    """The verifier LP built independently here as a dense matrix, its optimum found by enumerating every vertex
    of the polytope (no solver), equals tree_optimum's HiGHS value; one step of k candidates is also the OTM-k
    optimum of the min-cut dual (a third, independent method)."""
    from otspec.solvers.otm_dual import otm_value

    draft, target = random_markov(vocab, 0.6, seed=vocab + len(config), sparsity=0.0)
    draft, target = IIDSource(draft.next_probs([[]])[0]), IIDSource(target.next_probs([[]])[0])
    tree = DraftTree(config, replacement)
    trees, probs = drafted_tree_law(draft, tree)
    p, q = draft.probs, target.probs
    cols, gain, owner = [], [], []
    for i, paths in enumerate(trees):
        for node in [(), *paths]:
            for y in range(vocab):
                col = np.zeros(vocab * vocab)  # blocks z = (z1, z2): emitting node·y, the target continues
                for z1 in range(vocab):
                    for z2 in range(vocab):
                        if node == () and z1 == y:
                            col[z1 * vocab + z2] = q[z2]
                        elif node == (z1,) and z2 == y:
                            col[z1 * vocab + z2] = 1.0
                cols.append(col)
                gain.append(len(node))
                owner.append(i)
    A = np.vstack([np.array(cols).T, np.array([[o == i for o in owner] for i in range(len(trees))], dtype=float)])
    b = np.concatenate([np.outer(q, q).ravel(), probs])
    brute = _best_vertex(A, b, np.array(gain, dtype=float))
    opt = tree_optimum(draft, target, tree)
    assert abs(opt.value - brute) < 1e-9
    assert abs(opt.value - otm_value(p, q, config[0], replacement=replacement)) < 1e-9


def test_the_coupling_bound_is_not_one_iterations_optimum():
    """On a chain the coupling (block-level OT, eq. (8)) exceeds the verifier LP (block verification, eq. (17)) by
    more than 0.05 tokens: one iteration cannot reach it; the v1 backward verifier does only by carrying a residual
    target into the next iteration."""
    draft, target = IIDSource([0.6, 0.4]), IIDSource([0.3, 0.7])
    opt = tree_optimum(draft, target, DraftTree.chain(2))
    assert opt.coupling - opt.value > 0.05
    assert abs(opt.coupling - BackwardBlockVerify().expected_accepted(draft, target, 2)) < 1e-9
