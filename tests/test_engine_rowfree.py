"""Row-free Monte Carlo (otspec.engine.rowfree): the same law as the verifiers on full rows."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from otspec.engine import simulate
from otspec.engine.rowfree import RowProfile, sample_block, sample_token
from otspec.sources import IIDSource, random_markov
from otspec.theory.iid import iid_block_values
from otspec.verifiers import BlockVerify, TokenVerify
from tests.strategies import g_test

PAIRS = {
    "dirichlet": (np.array([0.1, 0.4, 0.3, 0.2]), np.array([0.35, 0.05, 0.25, 0.35])),
    "zeros": (np.array([0.5, 0.0, 0.3, 0.2]), np.array([0.2, 0.6, 0.0, 0.2])),  # q outside supp p, p outside supp q
}


def exact_joint(verifier, p, q, L):
    """P(X^L = x, τ = l, Y = y) for every cell, from the verifier's law on the enumerated drafts."""
    V = p.size
    drafts = np.array(list(itertools.product(range(V), repeat=L)), dtype=np.int64).reshape(-1, L)
    prob = np.prod(p[drafts], axis=1)
    keep = prob > 0
    drafts, prob = drafts[keep], prob[keep]
    rows_p = np.broadcast_to(p, (len(drafts), L, V))
    rows_q = np.broadcast_to(q, (len(drafts), L + 1, V))
    law = verifier.law(drafts, rows_p, rows_q)
    joint = prob[:, None, None] * np.asarray(law.accept_probs)[..., None] * np.asarray(law.correction_probs)
    return drafts, joint  # (D, L+1, V)


@pytest.mark.parametrize("pair", sorted(PAIRS))
@pytest.mark.parametrize("verifier, sampler", [(TokenVerify(), sample_token), (BlockVerify(), sample_block)],
                         ids=["token", "block"])
def test_row_free_sampler_has_the_verifiers_joint_law(pair, verifier, sampler):
    p, q = PAIRS[pair]
    L, n = 3, 400_000
    drafts, joint = exact_joint(verifier, p, q, L)
    out = sampler(RowProfile(p, q), n, L, np.random.default_rng(3))
    V = p.size
    code = {tuple(d): i for i, d in enumerate(drafts.tolist())}
    idx = np.array([code[tuple(t)] for t in out.tokens.tolist()])  # a drafted path outside supp p fails here
    counts = np.bincount((idx * (L + 1) + out.accepted_len) * V + out.correction, minlength=joint.size)
    cells = joint.ravel()
    assert counts[cells == 0].sum() == 0  # never an impossible outcome
    g, dof = g_test(counts, cells)
    assert stats.chi2.sf(g, dof) > 1e-4
    # and the output is lossless: the first emitted token follows q
    first = np.where(out.accepted_len >= 1, out.tokens[:, 0], out.correction)
    g, dof = g_test(np.bincount(first, minlength=V), q)
    assert stats.chi2.sf(g, dof) > 1e-4


def test_surplus_tables_equal_direct_sums():
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.full(300, 0.3)), rng.dirichlet(np.full(300, 0.3))
    p[:20] = 0
    p /= p.sum()
    prof = RowProfile(p, q)
    w = np.concatenate([[0.0, 1.0, 1e-9], rng.random(200)])
    direct = np.clip(w[:, None] * q - p, 0, None).sum(axis=1)
    assert np.abs(prof.surplus_mass(w) - direct).max() <= 1e-13
    draws = prof.draw_surplus(np.full(200_000, 0.6), rng.random(200_000))
    law = np.clip(0.6 * q - p, 0, None)
    g, dof = g_test(np.bincount(draws, minlength=300), law / law.sum())
    assert np.bincount(draws, minlength=300)[law == 0].sum() == 0 and stats.chi2.sf(g, dof) > 1e-4


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
def test_simulate_row_free_at_llm_vocabulary_matches_the_exact_value(verifier):
    rng = np.random.default_rng(1)
    V, L = 32_000, 8
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    res = simulate(IIDSource(p), IIDSource(q), verifier, L, 400_000, seed=2, progress=False)
    exact = iid_block_values(p, q, L)
    value = (exact.token if verifier.name == "token" else exact.verification).value  # E[τ], certified to 1e-6
    assert res.accepted.low - 1e-6 <= value <= res.accepted.high + 1e-6
    rows = simulate(IIDSource(p), IIDSource(q), verifier, L, 3_000, seed=2, progress=False, method="rows")
    assert abs(rows.accepted.value - res.accepted.value) <= 5 * rows.accepted.stderr  # the two paths agree


def test_method_is_checked():
    d, t = random_markov(3, seed=0)
    with pytest.raises(ValueError, match="row_free"):
        simulate(d, t, TokenVerify(), 2, 10, method="row_free")
    with pytest.raises(ValueError, match="method"):
        simulate(IIDSource([0.5, 0.5]), IIDSource([0.2, 0.8]), TokenVerify(), 2, 10, method="fast")
