"""The tree loop on the device (otspec.engine.devicetree): k-config trees grown, scored and walked as tensors.

Oracles: plain sampling of the target (two-sample G-tests of the first tokens), the exact law of each verifier on
the host walk's trie of the same drafted tree (E[τ | trie] against the measured accepted length), and the layout's
arithmetic worked out by hand. The loop runs here on CPU tensors; a GPU runs the same code.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.lossless import two_sample_test
from llm_bridge.sampling import Sampling
from llm_bridge.trees import tree_generate
from otspec.engine.devicetree import TreeLayout
from otspec.verifiers import (
    GreedyBlockVerify,
    GreedyDraftVerify,
    KSeq,
    MultiRound,
    MultiRoundWithoutReplacement,
    NaiveMultiCandidate,
    SpecHubVerify,
    TraversalVerify,
)
from tests.llm_tiny import random_prompts, tiny_pair
from tests.test_llm_bridge_trees import FirstCandidate

TOP4 = Sampling(top_k=4)
CASES = [(KSeq(), "2x2", "match"), (KSeq(), "3x2x1", "accepted"), (MultiRound(), "iid:3:2", "match"),
         (MultiRoundWithoutReplacement(), "2x2", "accepted"), (NaiveMultiCandidate(), "iid:2:2", "match"),
         (GreedyDraftVerify(), "3x1", "match"), (SpecHubVerify(), "2x2", "match"),
         (GreedyBlockVerify(), "iid:3:2", "match"), (TraversalVerify(), "2x2", "match"),
         (TraversalVerify(), "3x1x1", "match")]
IDS = [f"{v.name}-{t}-{r}" for v, t, r in CASES]


def test_layout_numbers_levels_and_parents():
    layout = TreeLayout((3, 2))
    assert layout.sizes == [1, 3, 6] and layout.offsets == [0, 1, 4]
    assert layout.parent.tolist() == [-1, 0, 0, 0, 1, 1, 2, 2, 3, 3]
    assert layout.level.tolist() == [0, 1, 1, 1, 2, 2, 2, 2, 2, 2]
    assert layout.nodes_to(0) == 0 and layout.nodes_to(1) == 3 and layout.nodes_to(2) == 9
    assert layout.fed_parents(1).tolist() == [-1, -1, -1] and layout.fed_parents(2).tolist() == [0, 0, 1, 1, 2, 2]


@pytest.mark.parametrize("verifier,tree,rule", CASES, ids=IDS)
def test_device_tree_loop_keeps_the_target_law(verifier, tree, rule):
    pair = tiny_pair(sharpness=2.0)
    test = two_sample_test(pair, [1, 5, 9, 3], verifier, tree, n=300, tokens=3, sampling=TOP4, seed=5, rule=rule,
                           host_rows=False)
    assert test["p_value"] > 1e-3


def test_two_sample_test_rejects_a_biased_verifier_on_the_device():
    pair = tiny_pair(sharpness=2.0)
    test = two_sample_test(pair, [1, 5, 9, 3], FirstCandidate(), "2x1", n=300, tokens=2, sampling=TOP4, seed=5,
                           host_rows=False)
    assert test["p_value"] < 1e-6


@pytest.mark.parametrize("verifier,tree,rule", CASES, ids=IDS)
def test_device_walk_follows_the_exact_law_on_each_drafted_trie(verifier, tree, rule):
    """Per iteration the exact E[τ | trie] of the host walk on the same drafted tree (its trie built from the device
    tensors); their sum and the measured accepted tokens agree within four standard errors."""
    pair = tiny_pair(sharpness=2.0)
    run = tree_generate(pair, random_prompts(8, np.random.default_rng(6)), verifier, tree, 48, rule=rule,
                        sampling=TOP4, progress=False, host_rows=False, seed=3)
    d = run.decode
    expected = run.expected_accepted
    assert expected.size == d.iterations > 60
    depth = run.tree.depth
    spread = np.sqrt(d.iterations) * max(float(np.std(np.repeat(np.arange(depth + 1), d.accept_hist.sum(axis=0)[:depth + 1]
                                                                 .astype(int)))), 0.05)
    assert abs(d.accepted - expected.sum()) < 4 * spread, (d.accepted, expected.sum(), spread)


def test_device_and_host_loops_agree_on_the_accepted_length():
    """The same law two ways: the device walk (sets of equal candidates) and the host walk (a merged trie) give
    accepted lengths whose means agree within four standard errors."""
    pair = tiny_pair(sharpness=2.0)
    prompts = random_prompts(8, np.random.default_rng(2))
    means, ses = [], []
    for host in (True, False):
        run = tree_generate(pair, prompts, KSeq(), "3x2", 64, sampling=TOP4, progress=False, host_rows=host, seed=9,
                            record_law=False)
        hist = run.decode.accept_hist.sum(axis=0)
        tau = np.repeat(np.arange(hist.size), hist.astype(int))
        means.append(tau.mean())
        ses.append(tau.std() / np.sqrt(tau.size))
    assert abs(means[0] - means[1]) < 4 * np.hypot(*ses), (means, ses)
