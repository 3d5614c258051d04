"""Compiled Monte Carlo (issue 26, item 4): the numba kernels of token and block verification have the verifiers'
law of (τ, first emitted token), seen by G-tests whose power against the classic correction bug is shown; the alias
tables draw their rows exactly (never a token of mass 0); the compiled OTM-k cut recursion equals the Python one."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from otspec.engine import Backend, simulate
from otspec.engine.compiled import AliasTable, available, block_counts, token_counts
from otspec.engine.rowfree import RowProfile
from otspec.sources import IIDSource, random_iid, random_markov
from otspec.theory.iid import iid_block_values
from otspec.verifiers import BlockVerify, TokenVerify
from tests.strategies import g_test
from tests.test_engine_rowfree import PAIRS, exact_joint

pytestmark = pytest.mark.skipif(not available(), reason="numba is not installed")


def first_token_law(verifier, p, q, L) -> np.ndarray:
    """P(τ = l, first emitted token = x), (L + 1, V): X_1 when τ >= 1, else the extra token Y."""
    drafts, joint = exact_joint(verifier, p, q, L)
    law = np.zeros((L + 1, p.size))
    law[0] = joint[:, 0, :].sum(axis=0)
    for tau in range(1, L + 1):
        np.add.at(law[tau], drafts[:, 0], joint[:, tau, :].sum(axis=1))
    return law


def kernel(name, p, q, L):
    return token_counts(p, q, L) if name == "token" else block_counts(RowProfile(p, q), p, q, L)


@pytest.mark.parametrize("pair", sorted(PAIRS) + ["bernoulli"])
@pytest.mark.parametrize("name", ["token", "block"])
@pytest.mark.parametrize("L", [1, 3])
def test_compiled_kernels_have_the_verifiers_law(pair, name, L):
    p, q = PAIRS[pair] if pair in PAIRS else (np.array([0.3, 0.7]), np.array([0.6, 0.4]))
    law = first_token_law(TokenVerify() if name == "token" else BlockVerify(), p, q, L)
    assert abs(law.sum() - 1) < 1e-12
    counts = np.zeros((L + 1, p.size), dtype=np.int64)
    tau, first = np.zeros(L + 1, dtype=np.int64), np.zeros(p.size, dtype=np.int64)
    kernel(name, p, q, L)(300_000, 11, tau, first, counts)
    assert np.array_equal(counts.sum(axis=1), tau) and np.array_equal(counts.sum(axis=0), first)
    assert counts[law == 0].sum() == 0  # never an impossible outcome
    g, dof = g_test(counts.ravel(), law.ravel())
    assert stats.chi2.sf(g, dof) > 1e-4


def test_the_g_test_sees_a_correction_drawn_from_the_target(monkeypatch):
    """Named bug: after a rejection the extra token drawn from q instead of the residual (q − p)_+."""
    p, q = PAIRS["dirichlet"]
    law = first_token_law(TokenVerify(), p, q, 3)
    monkeypatch.setattr("otspec.engine.compiled._residual_table", lambda p, q: AliasTable(q))
    counts = np.zeros((4, p.size), dtype=np.int64)
    token_counts(p, q, 3)(300_000, 11, np.zeros(4, dtype=np.int64), np.zeros(p.size, dtype=np.int64), counts)
    g, dof = g_test(counts.ravel(), law.ravel())  # an impossible outcome, or a rejected G-test, catches it
    assert counts[law == 0].sum() > 0 or stats.chi2.sf(g, dof) < 1e-6


def test_alias_tables_draw_their_row_and_never_a_zero():
    rng = np.random.default_rng(0)
    row = rng.dirichlet(np.full(300, 0.3))
    row[::7] = 0.0
    row /= row.sum()
    table = AliasTable(row)
    assert np.all(table.prob[row == 0] == 0) and np.all(row[table.alias[table.prob < 1]] > 0)
    # the exact law of one draw: column i with probability prob[i]/V, else its alias
    law = table.prob / row.size
    np.add.at(law, table.alias, (1.0 - table.prob) / row.size)
    assert np.abs(law - row).max() < 1e-15


def test_a_seed_fixes_the_result_and_the_methods_agree():
    d, t = IIDSource([0.1, 0.4, 0.3, 0.2]), IIDSource([0.35, 0.05, 0.25, 0.35])
    a, b = (simulate(d, t, BlockVerify(), 4, 100_000, seed=5, progress=False) for _ in range(2))
    assert np.array_equal(a.accept_counts, b.accept_counts)
    c = simulate(d, t, BlockVerify(), 4, 100_000, seed=5, progress=False, backend=Backend(method="row_free"))
    assert abs(a.accepted.value - c.accepted.value) < 4 * np.hypot(a.accepted.stderr, c.accepted.stderr)
    with pytest.raises(ValueError, match="compiled"):
        simulate(*random_markov(3, seed=0), TokenVerify(), 2, 10, backend=Backend(method="compiled"))


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
def test_compiled_estimates_at_llm_vocabulary_hold_the_certified_values(verifier):
    d, t = random_iid(32000, 1.0, seed=3)
    res = simulate(d, t, verifier, 8, 2_000_000, seed=1, progress=False, confidence=0.999,
                   backend=Backend(method="compiled"))
    exact = iid_block_values(d.probs, t.probs, 8)
    value = (exact.token if verifier.name == "token" else exact.verification).value
    assert res.accepted.low - 1e-6 <= value <= res.accepted.high + 1e-6


@pytest.mark.parametrize("V,k", [(2, 2), (7, 3), (60, 8), (3000, 4)])
def test_compiled_otm_cuts_equal_the_python_recursion(monkeypatch, V, k):
    import otspec.solvers.otm_dual as otm_dual

    rng = np.random.default_rng(V + k)
    p, q = rng.dirichlet(np.full(V, 0.4)), rng.dirichlet(np.full(V, 0.4))
    compiled = otm_dual.otm_min_cut(p, q, k, replacement=False)
    monkeypatch.setattr(otm_dual, "available", lambda: False)
    python = otm_dual.otm_min_cut(p, q, k, replacement=False)
    assert abs(compiled[0] - python[0]) <= 1e-13  # the value
    assert np.array_equal(compiled[1], python[1])  # and the minimising prefix (the compiled loop skips bounded ones)
