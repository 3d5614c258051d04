"""Block-level OT (spec §4–5): HiGHS LP, cvxpy LP, POT and the prefix-tree route agree with eq. (8)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import markov_pairs, table_pairs

from otspec.solvers import (
    MAX_CVXPY_VARIABLES,
    MAX_LP_VARIABLES,
    BlockOTSolveError,
    block_laws,
    block_ot_value,
    common_prefix_length,
    plan_expected_length,
    solve_block_lp,
    solve_block_lp_laws,
    solve_block_tree,
    solve_block_tree_laws,
)
from otspec.sources import IIDSource, random_markov

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_block_ot.py"

# V**L <= 64 for the LP (at most 4096 variables)
small_pairs = st.one_of(markov_pairs(max_vocab=4, max_length=3), table_pairs(max_vocab=3, max_length=3))


def joint(source, block) -> float:
    """p(x^l) as a product of conditionals, one next_probs call per position."""
    prob = 1.0
    for i, token in enumerate(block):
        prob *= source.next_probs(np.array(block[:i], dtype=np.int64).reshape(1, i))[0][token]
    return prob


def brute_force_optimum(draft, target, length: int) -> float:
    """Eq. (8) by looping over every prefix with itertools (independent of otspec)."""
    V = draft.vocab_size
    return sum(min(joint(draft, x), joint(target, x))
               for ell in range(1, length + 1) for x in itertools.product(range(V), repeat=ell))


def level_by_level_optimum(p, q, V, L) -> float:
    """Eq. (8) from block laws: prefix marginals by reshaping to (V**l, V**(L-l))."""
    return sum(float(np.minimum(p.reshape(V**ell, -1).sum(1), q.reshape(V**ell, -1).sum(1)).sum())
               for ell in range(1, L + 1))


def beta_matrix(V, L):
    blocks = list(itertools.product(range(V), repeat=L))
    beta = np.zeros((len(blocks), len(blocks)))
    for a, x in enumerate(blocks):
        for b, y in enumerate(blocks):
            beta[a, b] = next((i for i in range(L) if x[i] != y[i]), L)
    return beta


def check_plan(result, p, q, V, L, tol):
    plan = result.plan.tocsr()
    assert plan.shape == (V**L, V**L)
    assert plan.data.min() >= 0
    assert np.abs(plan.sum(axis=1) - p).max() <= tol
    assert np.abs(plan.sum(axis=0) - q).max() <= tol
    assert plan_expected_length(plan, V, L) == pytest.approx(result.value, abs=tol)


# ------------------------------------------------------------------ values
@settings(max_examples=40, deadline=None)
@given(small_pairs)
def test_highs_lp_equals_theorem_1(case):
    draft, target, L = case
    result = solve_block_lp(draft, target, L)
    assert result.status == "optimal" and result.method == "highs"
    assert result.n_variables == draft.vocab_size ** (2 * L)
    assert abs(result.value - brute_force_optimum(draft, target, L)) <= 1e-8
    p, q = block_laws(draft, target, L)
    check_plan(result, p, q, draft.vocab_size, L, 1e-8)


@settings(max_examples=40, deadline=None)
@given(small_pairs)
def test_tree_route_equals_lp_and_its_plan_is_an_optimal_coupling(case):
    draft, target, L = case
    V = draft.vocab_size
    tree = solve_block_tree(draft, target, L)
    assert abs(tree.value - solve_block_lp(draft, target, L).value) <= 1e-9
    p, q = block_laws(draft, target, L)
    check_plan(tree, p, q, V, L, 1e-12)
    assert tree.plan.nnz <= 2 * V**L
    assert solve_block_tree(draft, target, L, return_plan=False).plan is None
    assert block_ot_value(p, q, V, L) == pytest.approx(tree.value, abs=1e-15)


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")  # CLARABEL on seed 3
@pytest.mark.parametrize("seed, V, L", [(0, 2, 3), (1, 3, 2), (2, 4, 3), (3, 2, 5)])
def test_cvxpy_and_pot_agree_with_highs(seed, V, L):
    ot = pytest.importorskip("ot")
    draft, target = random_markov(V, concentration=2.0, seed=seed, sparsity=0.2)
    highs = solve_block_lp(draft, target, L)
    p, q = block_laws(draft, target, L)
    for solver in (None, "CLARABEL"):  # default (HiGHS inside cvxpy) and an interior-point solver
        res = solve_block_lp(draft, target, L, method="cvxpy", solver=solver)
        assert res.method.startswith("cvxpy:") and res.status in ("optimal", "optimal_inaccurate")
        assert abs(res.value - highs.value) <= 1e-6
        check_plan(res, p, q, V, L, 1e-6)
    cost = ot.emd2(p, q * (p.sum() / q.sum()), L - beta_matrix(V, L))
    assert abs((L - cost) - highs.value) <= 1e-9


def test_tiny_masses_do_not_break_the_lp():
    # masses near 1e-10 are where linprog's presolve went wrong; presolve is off here
    rng = np.random.default_rng(7)
    for _ in range(20):
        p, q = rng.dirichlet(np.full(8, 0.3)), rng.dirichlet(np.full(8, 0.3))
        p[rng.integers(0, 8, 3)] = 10.0 ** rng.uniform(-12, -9, 3)
        q[rng.integers(0, 8, 3)] = 10.0 ** rng.uniform(-12, -9, 3)
        p, q = p / p.sum(), q / q.sum()
        assert abs(solve_block_lp_laws(p, q, 2, 3).value - level_by_level_optimum(p, q, 2, 3)) <= 1e-9


def test_binary_example_is_twelve_ninths_by_every_route():
    draft, target = IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3])
    results = [solve_block_lp(draft, target, 2), solve_block_lp(draft, target, 2, method="cvxpy"),
               solve_block_tree(draft, target, 2)]
    for res in results:
        assert abs(res.value - 12 / 9) <= 1e-12, res.method
        assert abs(plan_expected_length(res.plan, 2, 2) - 12 / 9) <= 1e-12
    assert abs(brute_force_optimum(draft, target, 2) - 12 / 9) <= 1e-15


@pytest.mark.parametrize("route", ["highs", "cvxpy", "tree"])
def test_identical_models_give_L_and_disjoint_supports_give_zero(route):
    def solve(d, t, L):
        return solve_block_tree(d, t, L) if route == "tree" else solve_block_lp(d, t, L, method=route)

    draft, _ = random_markov(3, seed=5, sparsity=0.3)
    assert solve(draft, draft, 3).value == pytest.approx(3.0, abs=1e-9)
    disjoint = solve(IIDSource([0.5, 0.5, 0.0, 0.0]), IIDSource([0.0, 0.0, 0.25, 0.75]), 2)
    assert disjoint.value == pytest.approx(0.0, abs=1e-12)
    assert route == "tree" or disjoint.plan.nnz > 0


@pytest.mark.slow
def test_tree_route_scales_to_a_million_blocks():
    draft, target = random_markov(2, concentration=3.0, seed=11)
    V, L = 2, 20
    p, q = block_laws(draft, target, L)
    res = solve_block_tree_laws(p, q, V, L)
    expected = level_by_level_optimum(p, q, V, L)
    assert abs(res.value - expected) <= 1e-10
    assert res.plan.nnz <= 2 * V**L
    plan = res.plan.tocsr()
    assert np.abs(plan.sum(axis=1) - p).max() <= 1e-12
    assert np.abs(plan.sum(axis=0) - q).max() <= 1e-12
    assert abs(plan_expected_length(plan, V, L) - expected) <= 1e-10


# ------------------------------------------------------------------ helpers
def test_common_prefix_length_reads_base_v_digits():
    V, L = 3, 3
    x, y = np.meshgrid(np.arange(V**L), np.arange(V**L), indexing="ij")
    assert np.array_equal(common_prefix_length(x, y, V, L), beta_matrix(V, L))
    assert plan_expected_length(np.eye(V**L) / V**L, V, L) == pytest.approx(L)


def test_inputs_are_not_modified():
    p, q = np.full(4, 0.25), np.array([0.1, 0.2, 0.3, 0.4]) * (1 + 5e-10)
    q_before = q.copy()
    solve_block_tree_laws(p, q, 2, 2)
    solve_block_lp_laws(p, q, 2, 2)
    assert np.array_equal(q, q_before)


# ------------------------------------------------------------------- errors
def test_lp_refuses_oversized_problems_and_points_to_the_tree_route():
    n = 2**10
    law = np.full(n, 1.0 / n)
    with pytest.raises(ValueError, match=r"2\^20 = 1,048,576 variables.*highs limit of 600,000.*solve_block_tree"):
        solve_block_lp_laws(law, law, 2, 10)
    assert 3**12 <= MAX_LP_VARIABLES < n**2  # 729 blocks are accepted
    m = int(np.sqrt(MAX_CVXPY_VARIABLES)) * 2
    with pytest.raises(ValueError, match="cvxpy limit"):
        solve_block_lp_laws(np.full(m, 1.0 / m), np.full(m, 1.0 / m), m, 1, method="cvxpy")


@pytest.mark.parametrize("bad, match", [
    ([0.5, 0.5, 0.5, -0.5], r"target_law: negative probability -0.5 at index 3"),
    ([0.5, np.nan, 0.25, 0.25], r"target_law: contains NaN"),
    ([0.25, 0.25, 0.25, 0.2], r"target_law: sums to 0.95.*expected a probability vector summing to 1"),
    ([0.5, 0.5], r"target_law: expected a block law of shape \(4,\)"),
])
@pytest.mark.parametrize("solve", [solve_block_lp_laws, solve_block_tree_laws, block_ot_value])
def test_invalid_marginals_are_rejected(solve, bad, match):
    with pytest.raises(ValueError, match=match):
        solve(np.full(4, 0.25), bad, 2, 2)


def test_invalid_sizes_and_methods_are_rejected():
    law = np.full(4, 0.25)
    with pytest.raises(ValueError, match="draft_length: expected an integer >= 1"):
        solve_block_tree_laws(law, law, 4, 0)
    with pytest.raises(ValueError, match="vocab_size: expected an integer >= 1"):
        solve_block_tree_laws(law, law, 2.0, 2)
    with pytest.raises(ValueError, match="method: expected 'highs' or 'cvxpy'"):
        solve_block_lp_laws(law, law, 2, 2, method="simplex")


@pytest.mark.parametrize("solve", [solve_block_lp, solve_block_tree])
def test_vocabulary_mismatch_is_rejected(solve):
    with pytest.raises(ValueError, match="vocabulary mismatch: draft has 2 tokens, target has 3"):
        solve(IIDSource([0.5, 0.5]), IIDSource([0.2, 0.3, 0.5]), 2)


def test_failed_solve_raises_with_the_solver_status():
    draft, target = random_markov(3, seed=2)
    with pytest.raises(BlockOTSolveError, match=r"HiGHS failed.*status 1"):
        solve_block_lp(draft, target, 2, solver_options={"maxiter": 1})


# ---------------------------------------------------------------- benchmark
def test_block_ot_benchmark_runs():
    proc = subprocess.run([sys.executable, str(BENCH), "--scale", "0.02", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"machine", "lp", "tree", "goals", "ratios", "max_lp_variables"} <= set(out)
    assert all(r["seconds"] > 0 for r in out["lp"]) and out["tree"]
    assert all(r["plan_s"] > 0 and r["value_s"] > 0 for r in out["tree"])
