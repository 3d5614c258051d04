"""The engine's entry checks (otspec.engine.arguments): natural variations of the README's examples either work or
say which argument is wrong, what was expected and which function takes it."""

from __future__ import annotations

import numpy as np
import pytest

from otspec import IIDSource, theory
from otspec.drafts import DraftTree, parse_tree
from otspec.engine import (
    evaluate,
    generate,
    generate_tree,
    simulate,
    simulate_tree,
    tree_bound,
    tree_law,
)
from otspec.verifiers import BlockVerify, GreedyBlockVerify, KSeq, TokenVerify
from otspec.verifiers.traversal import TraversalVerify

P, Q = [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]
D, T = IIDSource(P), IIDSource(Q)


def test_probability_rows_stand_for_iid_sources_everywhere():
    """A row is the IID source of that row: the same numbers as with IIDSource, on every entry point."""
    assert evaluate(P, Q, BlockVerify(), 3).expected_accepted == evaluate(D, T, BlockVerify(), 3).expected_accepted
    assert abs(evaluate(np.array(P), Q, TokenVerify(), 4).expected_accepted
               - theory.expected_accepted_token(D, T, 4)) < 1e-12
    assert simulate(P, Q, TokenVerify(), 2, 1000, seed=1).accepted.value == \
        simulate(D, T, TokenVerify(), 2, 1000, seed=1).accepted.value
    assert generate(P, Q, TokenVerify(), 2, 40, n_sequences=4).generated == 160
    assert tree_law(P, Q, KSeq(), "2x1").expected_accepted == tree_law(D, T, KSeq(), parse_tree("2x1")).expected_accepted
    assert tree_bound(P, Q, "2x1").value == tree_bound(D, T, DraftTree.parse("2x1")).value
    assert simulate_tree(P, Q, KSeq(), "2x1", 500, progress=False).accept_counts.sum() == 500
    assert generate_tree(P, Q, KSeq(), "2x1", 20, n_sequences=2).generated == 40


@pytest.mark.parametrize("call", [evaluate, simulate, generate], ids=["evaluate", "simulate", "generate"])
@pytest.mark.parametrize("verifier,says", [(KSeq(), "k candidates at one position.*tree_law, simulate_tree"),
                                           (TraversalVerify(), "whole drafted tree.*DraftTree.chain"),
                                           (GreedyBlockVerify(), "whole drafted tree")])
def test_chain_functions_point_tree_verifiers_to_the_tree_functions(call, verifier, says):
    with pytest.raises(ValueError, match=says):
        call(D, T, verifier, 2) if call is evaluate else call(D, T, verifier, 2, 100)


@pytest.mark.parametrize("tree", [DraftTree.parse("2x1"), "2x1"])
def test_a_tree_given_as_draft_length_is_pointed_to_tree_law(tree):
    for call in (evaluate, simulate, generate):
        with pytest.raises(ValueError, match="draft_length: got the tree.*tree_law"):
            call(D, T, KSeq(), tree, 100) if call is not evaluate else call(D, T, BlockVerify(), tree)


def test_tree_functions_name_the_tree_and_the_draw_they_need():
    with pytest.raises(ValueError, match="replacement=False"):  # Traversal on a tree drawn with replacement
        tree_law(D, T, TraversalVerify(), "2x1")
    assert tree_law(D, T, TraversalVerify(), parse_tree("2x1", replacement=False)).max_deviation < 1e-12
    with pytest.raises(ValueError, match="BlockVerify verifies a chain.*draft_length=L"):
        tree_law(D, T, BlockVerify(), "2x1")
    with pytest.raises(ValueError, match="tree: got the integer 3.*DraftTree.chain"):
        tree_law(D, T, KSeq(), 3)
    with pytest.raises(ValueError, match="tree: expected a DraftTree.*got list"):
        simulate_tree(D, T, KSeq(), [2, 1], 100)


@pytest.mark.parametrize("bad,says", [
    ("abc", "draft: expected a Source.*got str"), (None, "draft: expected a Source.*got NoneType"),
    ([[0.5, 0.5]], r"draft: expected a Source or one probability row \(shape \(V,\)\), got an array of shape \(1, 2\)"),
    ([0.5, 0.6, 0.1], "draft: .*sums to 1.2"), ([0.5, np.nan, 0.5], "draft: .*finite"),
    ([0.5, 0.5], "vocabulary mismatch: draft has 2 tokens, target has 3"), (IIDSource, "draft: expected a Source"),
])
def test_sources_that_are_not_sources_are_named(bad, says):
    with pytest.raises(ValueError, match=says):
        evaluate(bad, T, TokenVerify(), 2)


@pytest.mark.parametrize("bad,says", [(TokenVerify, r"got the class TokenVerify; pass an instance, TokenVerify\(\)"),
                                      ("token", "expected an otspec verifier.*got str"),
                                      (None, "expected an otspec verifier.*got NoneType")])
def test_verifiers_that_are_not_verifiers_are_named(bad, says):
    for call in (lambda: evaluate(D, T, bad, 2), lambda: simulate(D, T, bad, 2, 10), lambda: tree_law(D, T, bad, "2x1")):
        with pytest.raises(ValueError, match=says):
            call()
