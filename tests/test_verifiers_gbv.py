"""Greedy multi-path block verification (Thomas & Pal): lossless on every drafted set of K i.i.d. paths, block
verification at K = 1, at or below the exact tree optimum; the sampler against the exact law, with power."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from strategies import full_depth_tokens, markov_pairs

from otspec import theory
from otspec.drafts import DraftTree, parse_tree
from otspec.engine import generate_tree, simulate_tree, tree_bound, tree_law
from otspec.engine.trie import Trie
from otspec.sources import IIDSource, random_iid, random_markov
from otspec.verifiers import BlockVerify, GreedyBlockVerify, KSeq
from otspec.verifiers.gbv import gbv_law, gbv_sample, greedy_path, skewed_row


@settings(max_examples=25, deadline=None)
@given(markov_pairs(max_vocab=3, max_length=1), st.sampled_from([(1, 1), (1, 3), (2, 1), (2, 2), (3, 1), (3, 2)]))
def test_every_set_of_drafted_paths_keeps_the_target_law(pair, shape):
    """tree_law enumerates every draw of K i.i.d. paths (duplicates merged as the decode loop merges them) and
    GBV's exact law on each: the emitted tokens continued by the target follow the target's law to 1e-12."""
    draft, target, _ = pair
    K, L = shape
    if target.horizon is not None and target.horizon < L + 1:
        draft, target = random_markov(draft.vocab_size, 1.0, seed=L, sparsity=0.3)
    res = tree_law(draft, target, GreedyBlockVerify(), DraftTree.spectr_iid(K, L))
    assert res.max_deviation < 1e-12
    if K == 1:  # one path: published block verification, eq. (17)
        assert abs(res.expected_accepted - theory.expected_accepted_block(draft, target, L)) < 1e-12


@pytest.mark.parametrize("seed", range(4))
def test_at_or_below_the_tree_optimum_and_above_block_verification(seed):
    """The exact optimum of one iteration bounds GBV; more paths never lose to one path's block verification on
    these pairs, and GBV beats k-Seq on the same drafts."""
    draft, target = random_markov(3, 0.5, seed=seed, sparsity=0.2)
    for K, L in ((2, 1), (2, 2), (3, 2)):
        tree = DraftTree.spectr_iid(K, L)
        gbv = tree_law(draft, target, GreedyBlockVerify(), tree).expected_accepted
        assert gbv <= tree_bound(draft, target, tree).value + 1e-8
        assert gbv >= BlockVerify().expected_accepted(draft, target, L) - 1e-12
        assert gbv >= tree_law(draft, target, KSeq(), tree).expected_accepted - 1e-12


def test_the_chosen_path_law_is_the_maximum_of_k_draws():
    """p^Γ at the root by hand: p = (0.2, 0.3, 0.5), q = (0.4, 0.4, 0.2): q/p orders the tokens 2 < 1 < 0, so the
    maximum of two draws is token 0 unless both miss it: P(0) = 1 − 0.8², P(1) = 0.8² − 0.5², P(2) = 0.5²."""
    p, q = np.array([0.2, 0.3, 0.5]), np.array([0.4, 0.4, 0.2])
    from otspec.verifiers.gbv import ratio_ranks

    row, _, _ = skewed_row(p, ratio_ranks(p, q), 0.0, 2)
    assert np.allclose(row, [1 - 0.64, 0.64 - 0.25, 0.25], atol=1e-15)
    # the root's draws (2, 0): the walk takes token 0 (highest ratio) whatever the drafting order
    trie = _trie(IIDSource(p), IIDSource(q), [[2, 0]], [])
    nodes, _, _ = greedy_path(trie)
    assert [trie.token[j] for j in nodes] == [0]


def _trie(draft, target, root_draws, child_draws):
    """A drafted trie: root candidates, then one list of candidates per new child (in the order they are born)."""
    trie = Trie()
    trie.p[0] = draft.row_after(())
    born = trie.add_candidates(0, np.array(root_draws[0]))
    for node, cands in zip(born, child_draws, strict=False):
        path = (trie.token[node],)
        trie.p[node] = draft.row_after(path)
        trie.add_candidates(node, np.array(cands))
    trie.q = np.vstack([target.row_after(tuple(trie.token[j] for j in trie.path_to(n))) for n in range(len(trie))])
    return trie


def _plain_p_sample(trie, rng):
    """The bug the authors' fallback makes: verify the chosen path against the plain draft rows, not p^Γ."""
    nodes, _, target = greedy_path(trie)
    tokens = np.array([[trie.token[j] for j in nodes]], dtype=np.int64)
    plain = np.array([trie.p[0], *[trie.p[j] for j in nodes[:-1]]])
    out = BlockVerify().sample(tokens, plain[None], target[None], rng)
    tau = int(np.asarray(out.accepted_len)[0])
    return nodes[:tau], int(np.asarray(out.token)[0])


def test_the_sampler_follows_the_exact_law_and_the_test_sees_plain_p():
    """Outcomes (accepted path, next token) of gbv_sample on fixed drafted tries against gbv_law (G-test, 6,000 runs
    each); the same test rejects verifying the chosen path against p instead of p^Γ."""
    draft, target = random_markov(3, 0.5, seed=7, sparsity=0.0)
    tries = [_trie(draft, target, [[0, 1]], [[2], [0]]), _trie(draft, target, [[2, 1, 0]], [[1], [1], [2]]),
             _trie(draft, target, [[1, 1]], [[0, 2]])]
    rng, n, powers = np.random.default_rng(0), 6000, []
    for trie in tries:
        law = {}
        for path, w, row in gbv_law(trie):
            for y in np.flatnonzero(row * w > 0):
                law[path + (int(y),)] = law.get(path + (int(y),), 0.0) + w * row[y]
        keys = sorted(law)
        expected = n * np.array([law[k] for k in keys])
        assert abs(expected.sum() - n) < 1e-6
        for sampler, sink in ((gbv_sample, None), (_plain_p_sample, powers)):
            seen = [tuple(trie.token[j] for j in nodes) + (y,) for nodes, y in (sampler(trie, rng) for _ in range(n))]
            if not set(seen) <= set(keys):
                assert sink is not None  # only the faulty sampler may emit what the law never does
                sink.append(0.0)
                continue
            counts = np.array([seen.count(k) for k in keys])
            pvalue = stats.power_divergence(counts, expected, lambda_="log-likelihood").pvalue
            if sink is None:
                assert pvalue > 1e-4
            else:
                sink.append(pvalue)
    assert min(powers) < 1e-6


def test_in_the_decode_loop_and_monte_carlo():
    """The tree loop with GBV: block efficiency and one-iteration Monte Carlo contain the exact values; trees that
    are not K i.i.d. paths are refused with the reason."""
    d, t = IIDSource([0.5, 0.3, 0.2]), IIDSource([0.2, 0.3, 0.5])
    tree = parse_tree("iid:3:2")
    exact = tree_law(d, t, GreedyBlockVerify(), tree)
    run = generate_tree(d, t, GreedyBlockVerify(), tree, 240, n_sequences=400, seed=2, progress=False)
    assert full_depth_tokens(run, tree.depth).contains(exact.expected_tokens_per_iteration)  # (strategies.py)
    sim = simulate_tree(d, t, GreedyBlockVerify(), tree, 20_000, seed=3, progress=False, confidence=0.999)
    assert sim.accepted.low <= exact.expected_accepted <= sim.accepted.high
    for bad in (parse_tree("2x2"), parse_tree("2x1", replacement=False), parse_tree("eagle2:2:2:3")):
        with pytest.raises(ValueError, match="i.i.d. draft paths"):
            tree_law(d, t, GreedyBlockVerify(), bad)


def test_more_paths_can_lower_gbv_at_one_position():
    """A finding: at L = 1 the chosen token's law p^Γ sharpens toward the highest q/p as K grows, and GBV's
    acceptance can fall (0.944 at K = 2, 0.822 at K = 3 on this pair), whereas the OTM-k optimum only rises."""
    from otspec.solvers.otm_dual import otm_value

    d, t = random_iid(4, 5.0, seed=2, sparsity=0.0)
    two, three = (tree_law(d, t, GreedyBlockVerify(), DraftTree.spectr_iid(K, 1)).expected_accepted for K in (2, 3))
    assert three < two - 0.1
    assert otm_value(d.probs, t.probs, 3) >= otm_value(d.probs, t.probs, 2) > two


def test_one_position_closed_form_and_traversal_at_one_level():
    """GBV's one-step closed form Σ min{q, p^Γ} equals its exact law on the trees iid:k:1; Traversal Verification on
    one level of k children drawn without replacement is multi-round rejection sampling without replacement."""
    from otspec.verifiers import MultiRoundWithoutReplacement, TraversalVerify

    d, t = random_markov(4, 0.5, seed=11, sparsity=0.2)
    p, q = d.next_probs([[]])[0], t.next_probs([[]])[0]
    for k in (1, 2, 3):
        exact = tree_law(d, t, GreedyBlockVerify(), DraftTree.spectr_iid(k, 1)).expected_accepted
        assert abs(GreedyBlockVerify().expected_acceptance(p, q, k) - exact) < 1e-12
        level = DraftTree((k,), False)
        assert abs(tree_law(d, t, TraversalVerify(), level).expected_accepted
                   - MultiRoundWithoutReplacement().expected_acceptance(p, q, k)) < 1e-12
