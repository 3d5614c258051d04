"""The tree loop on the device (otspec.engine.devicetree): k-config trees grown, scored and walked as tensors.

Oracles: plain sampling of the target (two-sample G-tests of the first tokens), the exact law of each verifier on
the host walk's trie of the same drafted tree (E[τ | trie] against the measured accepted length), and the layout's
arithmetic worked out by hand. The loop runs here on CPU tensors; a GPU runs the same code.
"""

from __future__ import annotations

import numpy as np
import pytest

from llm_bridge.lossless import two_sample_test
from llm_bridge.options import DecodeOptions
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
         (TraversalVerify(), "3x1x1", "match"), (NaiveMultiCandidate(), "eagle2:3:2:4", "match"),
         (NaiveMultiCandidate(), "eagle2:2:3:5", "match")]
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
    test = two_sample_test(pair, [1, 5, 9, 3], verifier, tree, DecodeOptions(sampling=TOP4, seed=5, host_rows=False),
                           n=300, tokens=3, rule=rule)
    assert test["p_value"] > 1e-3


def test_two_sample_test_rejects_a_biased_verifier_on_the_device():
    pair = tiny_pair(sharpness=2.0)
    test = two_sample_test(pair, [1, 5, 9, 3], FirstCandidate(), "2x1",
                           DecodeOptions(sampling=TOP4, seed=5, host_rows=False), n=300, tokens=2)
    assert test["p_value"] < 1e-6


@pytest.mark.parametrize("verifier,tree,rule", CASES, ids=IDS)
def test_device_walk_follows_the_exact_law_on_each_drafted_trie(verifier, tree, rule):
    """Per iteration the exact E[τ | trie] of the host walk on the same drafted tree (its trie built from the device
    tensors); their sum and the measured accepted tokens agree within four standard errors."""
    pair = tiny_pair(sharpness=2.0)
    run = tree_generate(pair, random_prompts(8, np.random.default_rng(6)), verifier, tree, 48,
                        DecodeOptions(sampling=TOP4, progress=False, host_rows=False, seed=3), rule=rule)
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
        run = tree_generate(pair, prompts, KSeq(), "3x2", 64,
                            DecodeOptions(sampling=TOP4, progress=False, host_rows=host, seed=9, record_law=False))
        hist = run.decode.accept_hist.sum(axis=0)
        tau = np.repeat(np.arange(hist.size), hist.astype(int))
        means.append(tau.mean())
        ses.append(tau.std() / np.sqrt(tau.size))
    assert abs(means[0] - means[1]) < 4 * np.hypot(*ses), (means, ses)


@pytest.mark.parametrize("kind", ["model", "eagle"])
def test_tree_parents_on_the_device_give_the_rows_of_host_parents(kind):
    """A session fed a tree whose parents are a tensor (chosen on the device) scores every node as with the same
    parents from the host, and commits the walked nodes given as ``nodes``."""
    import torch

    from llm_bridge.sessions import ModelSession
    from tests.test_host_syncs import _drafter

    pair = _drafter(kind)
    prompts = random_prompts(2, np.random.default_rng(4))
    tokens = [np.array([[3, 5], [7, 2]]), np.array([[4, 9, 1], [6, 6, 8]])]
    parents = [np.array([[-1, -1], [-1, -1]]), np.array([[0, 1, 1], [1, 0, 0]])]
    counts = [np.array([2, 2]), np.array([3, 2])]
    rows = []
    for on_device in (False, True):
        target = ModelSession(pair.target.model, 2, Sampling(), host_rows=False, hidden=kind == "eagle", name="t")
        session = target if kind == "model" else pair.drafter.session(2, Sampling(), host_rows=False)
        target.start(prompts)
        if session is not target:
            session.start(prompts, features=target.prompt_features)
        got = []
        for t, p, c in zip(tokens, parents, counts, strict=True):
            p = torch.as_tensor(p) if on_device else p
            got.append(session.feed_tree(torch.as_tensor(t), p, c).rows)
        rows.append(got)
        done = torch.as_tensor([[3, 1, 0], [2, 6, 0]])
        extra = {} if session is target else {"features": torch.zeros((2, 3, pair.target.model.config.hidden_size))}
        session.commit(done, np.array([3, 2]), nodes=[[0, 2], [1]], **extra)
    for host, device in zip(*rows, strict=True):
        np.testing.assert_allclose(device.numpy(), host.numpy(), atol=1e-6)


@pytest.mark.parametrize("verifier,tree", [(KSeq(), "2x2"), (NaiveMultiCandidate(), "eagle2:3:2:4")],
                         ids=["kseq-2x2", "naive-eagle2"])
def test_device_trees_on_static_caches_keep_the_target_law(verifier, tree):
    """The GPU's cache kind: a static cache whose tree mask is assembled on the device."""
    pair = tiny_pair(sharpness=2.0)
    test = two_sample_test(pair, [1, 5, 9, 3], verifier, tree,
                           DecodeOptions(sampling=TOP4, seed=7, host_rows=False, cache="static"), n=300, tokens=3)
    assert test["p_value"] > 1e-3


@pytest.mark.parametrize("host_rows", [True, False], ids=["host", "device"])
def test_slots_a_draw_without_replacement_could_not_fill_are_not_counted_as_drafted(host_rows):
    """A 6x1 tree drawn without replacement under top-4 sampling: at most 4 distinct children exist at a node, so
    an iteration drafts at most 4 + 4 tokens; counting the −1 slots (6 + 6) would overstate the discarded tokens.
    Both walks count the same way (the device one in its single read back)."""
    pair = tiny_pair(sharpness=2.0)
    run = tree_generate(pair, random_prompts(4, np.random.default_rng(2)), MultiRoundWithoutReplacement(), "6x1", 24,
                        DecodeOptions(sampling=TOP4, progress=False, host_rows=host_rows, seed=1))
    d = run.decode
    assert d.accepted + d.discarded <= 8 * d.iterations
    assert d.discarded > 0 and d.accepted + d.iterations == d.generated
