"""Traversal Verification: the exact law of every drafted tree of small sources is the target's; on a chain it is
the published block verification."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import markov_pairs

from otspec import theory
from otspec.drafts import draft_tuple_law
from otspec.sources import random_markov
from otspec.verifiers.traversal import OrderedTree, traversal_law


def _drafted_trees(draft, target, branching):
    """Every drafted tree (siblings drawn without replacement, in drawing order) with its probability."""
    def grow(tree, frontier, d, mass):
        if d == len(branching):
            yield mass, tree
            return
        tuples = [draft_tuple_law(tree.p[j], branching[d], replacement=False) for j in frontier]
        for pick in itertools.product(*(range(len(probs)) for _, probs in tuples)):
            m = mass * float(np.prod([tuples[i][1][k] for i, k in enumerate(pick)]))
            new = _copy(tree)
            below = []
            for j, (cands, _), k in zip(frontier, tuples, pick, strict=True):
                for x in cands[k][cands[k] >= 0].tolist():
                    path = new.path(j) + (x,)
                    below.append(new.add(j, x, target.row_after(path), draft.row_after(path)))
            yield from grow(new, below, d + 1, m)

    yield from grow(OrderedTree(target.row_after(()), draft.row_after(())), [0], 0, 1.0)


def _copy(tree):
    out = OrderedTree(tree.q[0], tree.p[0])
    for j in range(1, len(tree.token)):
        out.add(tree.parent[j], tree.token[j], tree.q[j], tree.p[j])
    return out


def _output_law(target, outcomes, length):
    """Law over V**length of the emitted tokens (path, then the bonus token) continued by the target."""
    V = target.vocab_size
    law = np.zeros(V**length)
    for mass, path, bonus in outcomes:
        for y in np.flatnonzero(bonus > 0):
            prefix, m = list(path) + [int(y)], mass * bonus[y]
            stack = [(prefix, m)]
            while stack:
                seq, w = stack.pop()
                if len(seq) == length:
                    law[int(np.ravel_multi_index(seq, (V,) * length))] += w
                    continue
                row = target.row_after(seq)
                stack += [(seq + [z], w * row[z]) for z in np.flatnonzero(row > 0)]
    return law


def _check(draft, target, branching):
    L = len(branching)
    outcomes, accepted = [], 0.0
    for mass, tree in _drafted_trees(draft, target, branching):
        law = traversal_law(tree)
        assert abs(sum(w for _, w, _ in law) - 1) < 1e-12
        outcomes += [(mass * w, path, bonus) for path, w, bonus in law if w > 0]
        accepted += mass * sum(w * len(path) for path, w, _ in law)
    return np.abs(_output_law(target, outcomes, L + 1) - target.enumerate(L + 1).probs).max(), accepted


@settings(max_examples=20, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.integers(1, 3))
def test_on_a_chain_it_is_block_verification(pair, L):
    draft, target, _ = pair
    if target.horizon is not None and target.horizon < L + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=L, sparsity=0.3)
    deviation, accepted = _check(draft, target, (1,) * L)
    assert deviation < 1e-12
    assert abs(accepted - theory.expected_accepted_block(draft, target, L)) < 1e-12


@settings(max_examples=20, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.sampled_from([(2,), (2, 1), (1, 2), (2, 2), (3, 1)]))
def test_every_drafted_tree_keeps_the_target_law(pair, branching):
    draft, target, _ = pair
    if target.horizon is not None and target.horizon < len(branching) + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=len(branching), sparsity=0.3)
    deviation, _ = _check(draft, target, branching)
    assert deviation < 1e-12


def test_the_sampler_follows_the_exact_law_and_the_test_sees_a_wrong_residual():
    """Outcomes (accepted path, bonus token) of the sampler on fixed drafted trees against traversal_law (G-test);
    the same test rejects a sampler that draws the bonus token from q instead of the residual."""
    from scipy import stats

    from otspec.verifiers.traversal import traversal_sample

    draft, target = random_markov(3, 1.0, seed=3, sparsity=0.2)
    trees = [tree for _, tree in itertools.islice(_drafted_trees(draft, target, (2, 1)), 0, 40, 7)]
    rng, n, biased = np.random.default_rng(0), 4000, []
    for tree in trees:
        law = {}
        for path, w, bonus in traversal_law(tree):
            for y in np.flatnonzero(bonus * w > 0):
                law[path + (int(y),)] = law.get(path + (int(y),), 0.0) + w * bonus[y]
        keys = sorted(law)
        expected = n * np.array([law[k] for k in keys])
        draws = [traversal_sample(tree, rng) for _ in range(n)]
        seen = [tuple(tree.token[j] for j in p) + (y,) for p, y in draws]
        assert set(seen) <= set(keys)
        if len(keys) < 2:  # one possible outcome: nothing to test beyond the support
            continue
        counts = np.array([seen.count(k) for k in keys])
        assert stats.power_divergence(counts, expected, lambda_="log-likelihood").pvalue > 1e-4
        wrong = [tuple(tree.token[j] for j in p) + (int(rng.choice(3, p=tree.q[p[-1] if p else 0])),) for p, _ in draws]
        if set(wrong) <= set(keys):
            counts = np.array([wrong.count(k) for k in keys])
            biased.append(stats.power_divergence(counts, expected, lambda_="log-likelihood").pvalue)
        else:
            biased.append(0.0)  # a token the exact law never emits
    assert min(biased) < 1e-6



def test_in_the_tree_loop_and_the_exact_engine():
    """tree_law enumerates every drafted tree for the whole-tree verifier; on a chain it is block verification; the
    decode loop's block efficiency contains the exact value; trees drawn with replacement are refused."""
    import pytest

    from otspec.drafts import DraftTree
    from otspec.engine.tree import generate_tree, tree_law
    from otspec.sources import IIDSource
    from otspec.verifiers.traversal import TraversalVerify

    draft, target = random_markov(3, 0.8, seed=5, sparsity=0.2)
    chain = tree_law(draft, target, TraversalVerify(), DraftTree.chain(3))
    assert chain.max_deviation < 1e-12
    assert abs(chain.expected_accepted - theory.expected_accepted_block(draft, target, 3)) < 1e-12
    d, t = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    for config in ((2, 1), (1, 1, 1)):
        tree = DraftTree(config, False)
        exact = tree_law(d, t, TraversalVerify(), tree).expected_tokens_per_iteration
        run = generate_tree(d, t, TraversalVerify(), tree, 3000, n_sequences=32, seed=2, progress=False)
        assert run.block_efficiency.contains(exact), (config, exact, run.block_efficiency)
    with pytest.raises(ValueError, match="without replacement"):
        tree_law(d, t, TraversalVerify(), DraftTree((2, 1), True))
