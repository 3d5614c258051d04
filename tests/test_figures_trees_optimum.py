"""The trees-optimum figure: every verifier at or below the exact tree optimum, the draft equal to the target."""

from __future__ import annotations

import numpy as np

from otspec.figures.trees_optimum import trees_optimum_data


def test_verifiers_sit_below_the_tree_optimum_and_reach_it_when_the_draft_is_the_target():
    data = trees_optimum_data(vocab=3, points=3)
    assert data["tv"][0] == 0.0 and data["tv"][-1] > 0.1
    for tree in data["trees"]:
        opt = np.array(tree["optimum"])
        assert np.all(opt <= np.array(tree["coupling"]) + 1e-9)
        assert np.all(np.array(tree["coupling"]) <= np.array(tree["per_depth_sum"]) + 1e-9)
        assert abs(opt[0] - len(tree["config"])) < 1e-9  # p = q: every drafted token can be kept
        for name, values in tree["verifiers"].items():
            assert np.all(np.array(values) <= opt + 1e-8), (tree["label"], name)
        if tree["label"].startswith("chain"):  # block verification is the one-iteration optimum on a chain
            assert np.allclose(tree["verifiers"]["traversal"], opt, atol=1e-9)
        branching = max(tree["config"]) > 1
        lossless_at_equal = [v for n, v in tree["verifiers"].items() if n != "naive" and not (n == "gbv" and branching)]
        assert all(abs(v[0] - opt[0]) < 1e-9 for v in lossless_at_equal)  # they accept every draft when p = q
        if "gbv" in tree["verifiers"] and branching:  # GBV's chosen path is skewed away from q even when p = q
            assert tree["verifiers"]["gbv"][0] < opt[0] - 0.05
