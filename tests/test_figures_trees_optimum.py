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


def test_the_otm_curve_follows_the_canonical_plan_the_best_optimal_plan_for_the_2x1_tree():
    # optimal first-level plans differ in P(both drafts equal Y) = P2, and the 2x1 tree then accepts
    # α_2 + (α_2 − P2)·α_1 + P2·α_2 on i.i.d. rows: the canonical plan takes the largest P2 (interval ends by LP)
    import scipy.sparse as sp
    from scipy.optimize import linprog

    from otspec.drafts.laws import draft_tuple_law, tuple_membership
    from otspec.solvers.otm import CANONICAL_PLAN
    from otspec.solvers.otm_dual import otm_value

    data = trees_optimum_data(vocab=4, points=3)
    assert data["otm_plan"] == CANONICAL_PLAN
    (tree,) = [t for t in data["trees"] if "otm" in t["verifiers"]]
    q = np.array(data["q"])
    widths = []
    for lam, got in zip(data["lambdas"], tree["verifiers"]["otm"], strict=True):
        p = (1 - lam) * q + lam * np.array(data["r"])
        tuples, probs = draft_tuple_law(p, 2, True)
        M, V = probs.size, p.size
        member = tuple_membership(tuples, V).ravel().astype(float)
        both = (tuples[:, 0] == tuples[:, 1])[:, None] & (np.arange(V) == tuples[:, :1])
        A = sp.vstack([sp.kron(sp.eye(M), np.ones((1, V))), sp.kron(np.ones((1, M)), sp.eye(V)), member[None, :]])
        a1, a2 = otm_value(p, q, 1), otm_value(p, q, 2)
        b = np.concatenate([probs, q, [a2]])
        low, high = (s * linprog(s * both.ravel(), A_eq=A, b_eq=b, method="highs").fun for s in (1, -1))
        value = [a2 + (a2 - p2) * a1 + p2 * a2 for p2 in (low, high)]
        assert abs(got - value[1]) <= 1e-9, (lam, got, value)
        widths.append(value[1] - value[0])
    assert max(widths) > 0.01  # the plan matters here: the spread of the tree value over optimal plans
