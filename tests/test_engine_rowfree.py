"""Row-free Monte Carlo (otspec.engine.rowfree): the same law as the verifiers on full rows."""

from __future__ import annotations

import importlib.util
import itertools

import numpy as np
import pytest
from scipy import stats

from otspec.engine import Backend, evaluate, simulate, simulate_logged
from otspec.engine.rowfree import RowProfile, RowTables, sample_block, sample_token
from otspec.sources import TAIL_MODES, IIDSource, PositionalSource, log_rows, random_markov
from otspec.theory import positional_window_values
from otspec.theory.iid import iid_block_values
from otspec.verifiers import BackwardBlockVerify, BlockVerify, TokenVerify
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
    rows = simulate(IIDSource(p), IIDSource(q), verifier, L, 3_000, seed=2, progress=False,
                    backend=Backend(method="rows"))
    assert abs(rows.accepted.value - res.accepted.value) <= 5 * rows.accepted.stderr  # the two paths agree


def test_method_is_checked():
    d, t = random_markov(3, seed=0)
    with pytest.raises(ValueError, match="row_free"):
        simulate(d, t, TokenVerify(), 2, 10, backend=Backend(method="row_free"))
    with pytest.raises(ValueError, match="method"):
        simulate(IIDSource([0.5, 0.5]), IIDSource([0.2, 0.8]), TokenVerify(), 2, 10, backend=Backend(method="fast"))


# ----------------------------------------------------------------- many row pairs (logged rows), numpy and torch
# Four steps on their own supports (tokens of a 6-token vocabulary), zeros on both sides.
SEGMENTS = [
    ([0, 2, 3], [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]),
    ([1, 2, 4, 5], [0.1, 0.0, 0.6, 0.3], [0.4, 0.3, 0.3, 0.0]),
    ([0, 5], [0.7, 0.3], [0.1, 0.9]),
    ([2, 3, 4], [0.2, 0.5, 0.3], [0.2, 0.5, 0.3]),  # p = q
]
DEVICES = [None, pytest.param("cpu", marks=pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                                             reason="torch is not installed"))]


def packed():
    offsets = np.concatenate([[0], np.cumsum([len(s[0]) for s in SEGMENTS])])
    ids, p, q = (np.concatenate([np.asarray(s[i], dtype=float if i else np.int64) for s in SEGMENTS]) for i in range(3))
    return offsets, ids, p, q


def dense(i):
    p, q = np.zeros(6), np.zeros(6)
    p[SEGMENTS[i][0]], q[SEGMENTS[i][0]] = SEGMENTS[i][1], SEGMENTS[i][2]
    return p, q


def exact_window_joint(verifier, start, L):
    """P(X^L = x, τ = l, Y = y) for a window whose position i has the rows of segment start + i."""
    rows = [dense(start + i) for i in range(L + 1)]
    drafts = np.array(list(itertools.product(range(6), repeat=L)), dtype=np.int64)
    prob = np.prod([rows[i][0][drafts[:, i]] for i in range(L)], axis=0)
    keep = prob > 0
    drafts, prob = drafts[keep], prob[keep]
    rows_p = np.broadcast_to(np.stack([r[0] for r in rows[:L]]), (len(drafts), L, 6))
    rows_q = np.broadcast_to(np.stack([r[1] for r in rows]), (len(drafts), L + 1, 6))
    law = verifier.law(drafts, rows_p, rows_q)
    return drafts, prob[:, None, None] * np.asarray(law.accept_probs)[..., None] * np.asarray(law.correction_probs)


def _rng(device, seed):
    if device is None:
        return np.random.default_rng(seed)
    import torch

    return torch.Generator(device=device).manual_seed(seed)


@pytest.mark.parametrize("device", DEVICES, ids=["numpy", "torch"])
@pytest.mark.parametrize("start", [0, 1])
@pytest.mark.parametrize("verifier, sampler", [(TokenVerify(), sample_token), (BlockVerify(), sample_block)],
                         ids=["token", "block"])
def test_row_tables_sample_each_windows_joint_law(device, start, verifier, sampler):
    L, n = 2, 300_000
    tables = RowTables(*packed(), device=device)
    xp = tables.xp
    at = xp.full((n,), start, dtype=xp.int64, device=None if device is None else device)
    out = sampler(tables, n, L, _rng(device, 5), at=at)
    tau, tokens, y = (np.asarray(x.cpu()) if device else x for x in (out.accepted_len, out.tokens, out.correction))
    drafts, joint = exact_window_joint(verifier, start, L)
    code = {tuple(d): i for i, d in enumerate(drafts.tolist())}
    idx = np.array([code[tuple(t)] for t in tokens.tolist()])  # a drafted path outside supp p fails here
    counts = np.bincount((idx * (L + 1) + tau) * 6 + y, minlength=joint.size)
    assert counts[joint.ravel() == 0].sum() == 0
    g, dof = g_test(counts, joint.ravel())
    assert stats.chi2.sf(g, dof) > 1e-4


@pytest.mark.parametrize("device", DEVICES, ids=["numpy", "torch"])
def test_row_tables_surplus_equals_direct_sums_per_segment(device):
    tables = RowTables(*packed(), device=device)
    xp = tables.xp
    w = np.array([0.0, 1e-9, 0.3, 0.55, 0.9, 1.0] * 4)
    seg = np.repeat(np.arange(4), 6)
    direct = np.array([np.clip(wi * dense(s)[1] - dense(s)[0], 0, None).sum() for wi, s in zip(w, seg, strict=True)])
    as_x = (lambda a: a) if device is None else (lambda a: xp.asarray(a, device=device))
    got = tables.surplus_mass(as_x(w), as_x(seg))
    np.testing.assert_allclose(np.asarray(got.cpu()) if device else got, direct, rtol=0, atol=1e-15)
    u = np.random.default_rng(0).random(200_000)
    draws = tables.draw_surplus(as_x(np.full(u.size, 0.9)), as_x(u), as_x(np.ones(u.size, dtype=np.int64)))
    draws = tables.tokens_of(draws)
    draws = np.asarray(draws.cpu()) if device else draws
    law = np.clip(0.9 * dense(1)[1] - dense(1)[0], 0, None)  # two tokens of segment 1
    counts = np.bincount(draws, minlength=6)
    g, dof = g_test(counts, law / law.sum())
    assert counts[law == 0].sum() == 0 and stats.chi2.sf(g, dof) > 1e-4


def test_row_tables_refuse_empty_segments():
    with pytest.raises(ValueError, match="offsets"):
        RowTables([0, 2, 2], [0, 1], [0.5, 0.5], [0.5, 0.5])


@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
def test_torch_row_free_simulate_matches_the_exact_value(verifier):
    pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    V, L = 500, 4
    p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
    res = simulate(IIDSource(p), IIDSource(q), verifier, L, 200_000, seed=1, progress=False,
                   backend=Backend(device="cpu"))
    exact = iid_block_values(p, q, L)
    value = (exact.token if verifier.name == "token" else exact.verification).value
    assert res.accepted.low - 1e-9 <= value <= res.accepted.high + 1e-9
    with pytest.raises(ValueError, match="device"):
        simulate(IIDSource(p), IIDSource(q), verifier, L, 10, backend=Backend(device="tpu:7"))


@pytest.fixture(scope="module")
def small_log():
    d, t = random_markov(5, 0.5, seed=3)
    return log_rows(d, t, 3, 6, top_p=0.8, seed=4)  # tails of mass up to 0.2: all three tail symbols occur


def window_exact(log, verifier, L, tail):
    """E[τ] by enumeration (otspec.engine.evaluate) on each window's positional rows, averaged over windows."""
    values = []
    for path in range(log.n_paths):
        d, t = log.path_pair(path, tail)
        a, b = log.path_offsets[path], log.path_offsets[path + 1]
        for s in range(0, b - a - L):
            rows = slice(s, s + L + 1)
            values.append(evaluate(PositionalSource(d.rows[rows]), PositionalSource(t.rows[rows]), verifier,
                                   L).expected_accepted)
    return float(np.mean(values))


@pytest.mark.parametrize("device", DEVICES, ids=["numpy", "torch"])
@pytest.mark.parametrize("tail", TAIL_MODES)
@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify()], ids=["token", "block"])
def test_simulate_logged_matches_enumeration_over_the_windows(small_log, device, tail, verifier):
    L = 2
    exact = window_exact(small_log, verifier, L, tail)
    res = simulate_logged(small_log, verifier, L, 300_000, tail=tail, seed=7, progress=False,
                          backend=Backend(device=device))
    assert res.accepted.low <= exact <= res.accepted.high
    W = small_log.windows(L)
    token, high = positional_window_values(small_log.overlaps(tail)[W[:, None] + np.arange(L)])
    assert token - 1e-12 <= exact <= high + 1e-12  # the closed form and the bound hold around the enumeration
    if verifier.name == "token":
        assert abs(token - exact) <= 1e-12
    assert res.first_token_counts.size == small_log.vocab(tail)


def test_simulate_logged_refuses_what_it_cannot_sample(small_log):
    with pytest.raises(ValueError, match="token and block"):
        simulate_logged(small_log, BackwardBlockVerify(), 2, 10)
    with pytest.raises(ValueError, match="no path has"):
        simulate_logged(small_log, TokenVerify(), 6, 10)
