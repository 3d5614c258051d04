"""OTM-k's canonical plan (otm_maxflow, the plan OTMVerify follows): its definition checked by independent LPs,
and the same plan, and tree value, in every process."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from otspec.drafts.laws import draft_tuple_law, tuple_membership
from otspec.solvers.otm import CANONICAL_PLAN, otm_maxflow
from otspec.solvers.otm_dual import otm_value


def _copies(tuples, V):
    """(M, V): how many drafts of each tuple equal each token (-1 pads)."""
    return (np.asarray(tuples)[:, :, None] == np.arange(V)).sum(axis=1)


def _classes(tuples, V):
    """Class (draft multiset) of each tuple, classes numbered in the order of their first tuple."""
    keys = [tuple(row) for row in _copies(tuples, V)]
    order = list(dict.fromkeys(keys))
    return np.array([order.index(key) for key in keys]), len(order)


def _lexicographic_by_lp(p, q, k, replacement):
    """The canonical accepted flows by its definition, stage by stage with HiGHS over the tuple-level plan:
    α_k, then max E[copies of Y among the drafts], then each (multiset, token) flow maximised in turn."""
    tuples, probs = draft_tuple_law(p, k, replacement)
    V, M = p.size, probs.size
    member = tuple_membership(tuples, V).astype(float)
    A_eq = sp.vstack([sp.kron(sp.eye(M), np.ones((1, V))), sp.kron(np.ones((1, M)), sp.eye(V))]).tocsr()
    b_eq = np.concatenate([probs, q * probs.sum() / q.sum()])
    cls, C = _classes(tuples, V)
    rows, bounds, tol = [], [], 1e-11

    def best(objective):  # max objective·π over the plans meeting every earlier stage
        res = linprog(-objective, A_ub=np.array(rows) if rows else None, b_ub=np.array(bounds) if rows else None,
                      A_eq=A_eq, b_eq=b_eq, method="highs")
        assert res.status == 0, res.message
        rows.append(-objective)
        bounds.append(res.fun + tol)
        return -res.fun

    stages = [best(member.ravel()), best((member * _copies(tuples, V)).ravel())]
    flows = np.zeros((C, V))
    for c in range(C):
        for y in range(V):
            if q[y] > 0 and member[cls == c][0, y]:
                objective = np.zeros((M, V))
                objective[cls == c, y] = 1.0
                flows[c, y] = best(objective.ravel())
    return stages, flows


def _canonical_flows(p, q, k, replacement):
    res = otm_maxflow(p, q, k, replacement)
    tuples, plan = res.plan
    V = p.size
    cls, C = _classes(tuples, V)
    member = tuple_membership(tuples, V)
    accepted = np.where(member, plan, 0.0)
    flows = np.zeros((C, V))
    np.add.at(flows, cls, accepted)
    return res, tuples, plan, flows


def _rows(name):
    rng = np.random.default_rng(4)
    q, r = rng.dirichlet(np.ones(4)), rng.dirichlet(0.5 * np.ones(4))
    return {"uniform3": (np.full(3, 1 / 3), np.full(3, 1 / 3)),
            "uniform4": (np.full(4, 0.25), np.full(4, 0.25)),
            "figure": (r, q),  # the trees_optimum figure's rows at λ = 1: the copies stage matters there
            "zeros": (np.array([0.5, 0.0, 0.3, 0.2]), np.array([0.1, 0.4, 0.0, 0.5])),
            "dirichlet": tuple(np.random.default_rng(11).dirichlet(np.ones(4), size=2))}[name]


@pytest.mark.parametrize("name, k, replacement", [
    ("uniform3", 2, True), ("uniform3", 3, True), ("uniform4", 2, True), ("uniform4", 2, False),
    ("figure", 2, True), ("figure", 3, True), ("zeros", 2, True), ("dirichlet", 2, False), ("dirichlet", 3, True),
])
def test_the_plan_is_the_one_its_definition_names(name, k, replacement):
    p, q = _rows(name)
    res, tuples, plan, flows = _canonical_flows(p, q, k, replacement)
    (alpha, copies), by_lp = _lexicographic_by_lp(p, q, k, replacement)
    assert abs(res.value - otm_value(p, q, k, replacement)) <= 1e-12 and abs(res.value - alpha) <= 1e-9
    assert abs(np.where(tuple_membership(tuples, p.size), plan * _copies(tuples, p.size), 0).sum() - copies) <= 1e-9
    assert np.abs(flows - by_lp).max() <= 1e-8, (flows, by_lp)
    cls, _ = _classes(tuples, p.size)  # reorderings of a tuple share one conditional law
    law = plan / plan.sum(axis=1, keepdims=True)
    for c in np.unique(cls):
        assert np.abs(law[cls == c] - law[cls == c][0]).max() <= 1e-12


def test_the_copies_stage_is_not_vacuous_on_the_figure_rows():
    # the figure's rows at λ = 1: optimal plans differ in P(both drafts equal Y) from 0.057 to 0.168
    p, q = _rows("figure")
    tuples, probs = draft_tuple_law(p, 2, True)
    V, M = p.size, probs.size
    member = tuple_membership(tuples, V).ravel().astype(float)
    both = (_copies(tuples, V) == 2).ravel().astype(float)
    A_eq = sp.vstack([sp.kron(sp.eye(M), np.ones((1, V))), sp.kron(np.ones((1, M)), sp.eye(V)), member[None, :]])
    b_eq = np.concatenate([probs, q, [otm_value(p, q, 2)]])
    low, high = (s * linprog(s * both, A_eq=A_eq, b_eq=b_eq, method="highs").fun for s in (1, -1))
    _, tuples, plan, _ = _canonical_flows(p, q, 2, True)
    got = float((plan * (_copies(tuples, V) == 2)).sum())
    assert high - low > 0.1 and abs(got - high) <= 1e-9


_DIGEST = """
import hashlib, numpy as np
from otspec.drafts import DraftTree
from otspec.engine.tree import tree_law
from otspec.solvers.otm import otm_maxflow
from otspec.sources import IIDSource
from otspec.verifiers import OTMVerify
digest = hashlib.sha256()
rng = np.random.default_rng(4)
q, r = rng.dirichlet(np.ones(4)), rng.dirichlet(0.5 * np.ones(4))
for p, t in [(np.full(4, 0.25), np.full(4, 0.25)), (r, q), (0.5 * (q + r), q)]:
    for k, replacement in [(2, True), (3, True), (2, False)]:
        digest.update(otm_maxflow(p, t, k, replacement).plan[1].tobytes())
value = tree_law(IIDSource(r), IIDSource(q), OTMVerify(), DraftTree((2, 1), True)).expected_accepted
print(digest.hexdigest(), repr(value))
"""


def test_the_plan_and_the_tree_value_are_the_same_in_every_process():
    outputs = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _DIGEST], env=env, capture_output=True, text=True, check=True)
        outputs.add(out.stdout.strip())
    assert len(outputs) == 1, outputs


def test_the_definition_is_stated():
    assert "E[number of drafts equal to Y]" in CANONICAL_PLAN and "lexicographically" in CANONICAL_PLAN
    assert "CANONICAL_PLAN" in otm_maxflow.__doc__
