"""Block verification (published and v1): exact unbiasedness, closed forms, sampler, torch, long blocks."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from scipy import stats
from strategies import (
    brute_force_block_value,
    brute_force_optimum,
    brute_force_token_value,
    g_test,
    markov_pairs,
    table_pairs,
)

from otspec import theory
from otspec.distributions import residual
from otspec.engine import evaluate, generate, simulate
from otspec.sources import IIDSource, bernoulli, random_markov
from otspec.verifiers import BackwardBlockVerify, BlockVerify, TokenVerify
from otspec.verifiers.block import block_weights
from otspec.verifiers.carry import ResidualWindows, carry_forward, score_carried

BINARY = (IIDSource([2 / 3, 1 / 3]), IIDSource([1 / 3, 2 / 3]))


# ------------------------------------------------------------ exactness
@given(markov_pairs(max_vocab=4, max_length=4))
def test_published_block_verify_is_lossless_and_attains_eq17(pair):
    draft, target, L = pair
    res = evaluate(draft, target, BlockVerify(), L)
    assert res.max_deviation <= 1e-12
    ref = brute_force_block_value(draft, target, L)
    assert abs(res.expected_accepted - ref) <= 1e-12
    assert abs(theory.expected_accepted_block(draft, target, L) - ref) <= 1e-12


@given(markov_pairs(max_vocab=4, max_length=4))
def test_backward_block_verify_one_iteration_attains_optimum(pair):
    draft, target, L = pair
    res = evaluate(draft, target, BackwardBlockVerify(), L)
    assert res.max_deviation <= 1e-12  # (X^tau, Y) continued by the carried residual chain ~ q
    ref = brute_force_optimum(draft, target, L)
    assert abs(res.expected_accepted - ref) <= 1e-12
    assert abs(theory.expected_accepted_optimal(draft, target, L) - ref) <= 1e-12


@settings(max_examples=40)
@given(markov_pairs(max_vocab=3, max_length=3, iterations=2))
def test_backward_block_verify_two_consecutive_iterations_lossless(pair):
    """The v1 correction reaches into the next iteration: follow two iterations exactly."""
    draft, target, L = pair
    res = evaluate(draft, target, BackwardBlockVerify(), L, iterations=2)
    assert res.max_deviation <= 1e-12
    assert abs(res.output_law.sum() - 1) <= 1e-12


@pytest.mark.parametrize("vocab, length", [(4, 2), (2, 4)])
def test_backward_two_iterations_larger_instances(vocab, length):
    for seed in range(3):
        d, t = random_markov(vocab, 1.0, seed=seed, sparsity=0.25)
        assert evaluate(d, t, BackwardBlockVerify(), length, iterations=2).max_deviation <= 1e-12


@settings(max_examples=30)
@given(markov_pairs(max_vocab=3, max_length=3, iterations=2))
def test_token_and_published_two_iterations_lossless(pair):
    draft, target, L = pair
    for verifier in (TokenVerify(), BlockVerify()):
        assert evaluate(draft, target, verifier, L, iterations=2).max_deviation <= 1e-12


@given(table_pairs())
def test_context_dependent_models(pair):
    draft, target, L = pair
    bv = evaluate(draft, target, BlockVerify(), L)
    v1 = evaluate(draft, target, BackwardBlockVerify(), L)
    assert bv.max_deviation <= 1e-12 and v1.max_deviation <= 1e-12
    assert abs(v1.expected_accepted - brute_force_optimum(draft, target, L)) <= 1e-12
    # ordering eq. (18): token <= published <= optimum
    token = brute_force_token_value(draft, target, L)
    assert token <= bv.expected_accepted + 1e-12 <= v1.expected_accepted + 2e-12


def test_identical_models_accept_everything():
    d, _ = random_markov(3, 1.0, seed=4, sparsity=0.3)
    for verifier in (BlockVerify(), BackwardBlockVerify()):
        assert abs(evaluate(d, d, verifier, 3).expected_accepted - 3) < 1e-12


# ------------------------------------------------------- binary example §7
def test_binary_example_values():
    values = {v.name: evaluate(*BINARY, v, 2).expected_accepted for v in (TokenVerify(), BlockVerify(),
                                                                          BackwardBlockVerify())}
    assert abs(values["token"] - float(Fraction(10, 9))) < 1e-14
    assert abs(values["block"] - float(Fraction(11, 9))) < 1e-14
    assert abs(values["block_v1"] - float(Fraction(12, 9))) < 1e-14
    assert abs(theory.expected_accepted_optimal(*BINARY, 2) - 12 / 9) < 1e-14
    assert abs(theory.expected_accepted_block(*BINARY, 2) - 11 / 9) < 1e-14


def test_binary_example_per_draft_table():
    # spec §7 table, drafts aa, ab, ba, bb (a = 0, b = 1)
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]])
    d, t = BINARY
    dp, tp = d.path_probs(x)[:, :2], t.path_probs(x)
    w = block_weights(x, dp, tp)
    assert np.allclose(w[:, 1:], [[1 / 2, 1 / 4], [1 / 2, 1], [1, 1 / 2], [1, 1]], atol=1e-15)
    law = BlockVerify().law(x, dp, tp)
    expected = [[3 / 4, 0, 1 / 4], [0, 0, 1], [0, 1 / 2, 1 / 2], [0, 0, 1]]
    assert np.allclose(law.accept_probs, expected, atol=1e-15)


def test_residual_of_published_algorithm():
    x = np.array([[0, 0]])
    d, t = BINARY
    dp, tp = d.path_probs(x)[:, :2], t.path_probs(x)
    law = BlockVerify().law(x, dp, tp)
    w = block_weights(x, dp, tp)
    for i in range(2):
        assert np.allclose(law.correction_probs[0, i], residual(w[0, i] * tp[0, i], dp[0, i]))
    assert np.allclose(law.correction_probs[0, 2], tp[0, 2])


# ------------------------------------------------------------- negative control
def test_cumulative_product_rule_is_not_lossless():
    """anchors.md §3: accepting position i when w_i >= prod_{j<=i} u_j biases the output.

    In the binary example it gives P(first token = b) = 0.479 instead of 2/3; our
    BlockVerify, sampled the same way, gives 2/3.
    """
    d, t = BINARY
    n = 400_000
    rng = np.random.default_rng(0)
    x = d.sample(n, 2, rng)
    dp, tp = d.path_probs(x)[:, :2], t.path_probs(x)
    w = block_weights(x, dp, tp)
    u = np.cumprod(rng.random((n, 2)), axis=1)
    legal = w[:, 1:] >= u
    tau = np.where(legal[:, 1], 2, np.where(legal[:, 0], 1, 0))
    rows = np.arange(n)
    at = np.minimum(tau, 1)
    res = residual(w[rows, tau][:, None] * tp[rows, tau], dp[rows, at])
    row = np.where((tau < 2)[:, None], res, tp[rows, tau])
    y = (row.cumsum(axis=1) <= rng.random(n)[:, None]).sum(axis=1)
    first = np.where(tau >= 1, x[:, 0], y)
    p_b = (first == 1).mean()
    assert abs(p_b - 0.479) < 0.005 and abs(p_b - 2 / 3) > 0.1
    out = BlockVerify().sample(x, dp, tp, np.random.default_rng(1))
    first_ok = np.where(out.accepted_len >= 1, x[:, 0], out.correction)
    assert abs((first_ok == 1).mean() - 2 / 3) < 0.005


# ------------------------------------------------------------------ sampler
@pytest.mark.parametrize("verifier", [BlockVerify(), BackwardBlockVerify()], ids=lambda v: v.name)
def test_sample_matches_law(verifier):
    draft, target = random_markov(3, 1.0, seed=7, sparsity=0.2)
    L, n_per = 3, 20_000
    enum = draft.enumerate(L)
    drafts = enum.tokens[enum.probs > 0]
    x = np.repeat(drafts, n_per, axis=0)
    dp, tp = draft.path_probs(x)[:, :L], target.path_probs(x)
    law = verifier.law(drafts, dp[::n_per], tp[::n_per])
    cells = np.asarray(law.accept_probs)[..., None] * np.asarray(law.correction_probs)
    out = verifier.sample(x, dp, tp, np.random.default_rng(11))
    tau, y = np.asarray(out.accepted_len), np.asarray(out.correction)
    idx = np.repeat(np.arange(len(drafts)), n_per) * (L + 1) * 3 + tau * 3 + y
    counts = np.bincount(idx, minlength=cells.size).reshape(len(drafts), -1)
    flat = cells.reshape(len(drafts), -1)
    assert counts[flat == 0].sum() == 0
    g = df = 0
    for k in range(len(drafts)):
        gk, dk = g_test(counts[k], flat[k])
        g, df = g + gk, df + dk
    assert stats.chi2.sf(g, df) > 1e-4
    if verifier.carries_residual:  # the sampled carry is the law's carry at (tau, Y)
        draft_of = np.repeat(np.arange(len(drafts)), n_per)
        expected = np.asarray(law.carry)[draft_of, tau, y]
        live = tau < L
        assert np.allclose(np.asarray(out.carry)[live], expected[live], rtol=0, atol=1e-12)


# -------------------------------------------------------------------- torch
@pytest.mark.parametrize("verifier", [BlockVerify(), BackwardBlockVerify()], ids=lambda v: v.name)
def test_torch_matches_numpy(verifier):
    torch = pytest.importorskip("torch")
    draft, target = random_markov(4, 0.5, seed=12, sparsity=0.3)
    x = draft.sample(64, 5, np.random.default_rng(2))
    dp, tp = np.ascontiguousarray(draft.path_probs(x)[:, :5]), np.ascontiguousarray(target.path_probs(x))
    ln = verifier.law(x, dp, tp)
    lt = verifier.law(torch.from_numpy(x), torch.from_numpy(dp), torch.from_numpy(tp))
    assert np.abs(lt.accept_probs.numpy() - ln.accept_probs).max() < 1e-12
    assert np.abs(lt.correction_probs.numpy() - ln.correction_probs).max() < 1e-12
    out = verifier.sample(torch.from_numpy(x), torch.from_numpy(dp), torch.from_numpy(tp),
                          torch.Generator().manual_seed(0))
    assert out.accepted_len.shape == (64,) and int(out.accepted_len.max()) <= 5


# -------------------------------------------------------------- long blocks
def _fraction_backward_h(draft_p, target_p, x):
    """v1 commit probabilities for an IID Bernoulli block, in exact rational arithmetic."""
    p = [1 - draft_p, draft_p]
    q = [1 - target_p, target_p]
    L = len(x)
    pj, qj = [Fraction(1)], [Fraction(1)]
    for tok in x:
        pj.append(pj[-1] * p[tok])
        qj.append(qj[-1] * q[tok])
    h = []
    for j in range(L):
        remain = sum(max(qj[j] * q[v] - pj[j] * p[v], 0) for v in (0, 1))
        reject = sum(max(pj[j] * p[v] - qj[j] * q[v], 0) for v in (0, 1))
        h.append(Fraction(1) if reject == 0 or j == 0 else min(Fraction(1), remain / reject))
    h.append(min(Fraction(1), qj[L] / pj[L]))
    return h


def test_long_blocks_match_exact_rational_arithmetic():
    L = 64
    dp1, tp1 = Fraction(3, 10), Fraction(3, 4)
    d, t = bernoulli(0.3), bernoulli(0.75)
    x = d.sample(3, L, np.random.default_rng(5))
    dp, tp = d.path_probs(x)[:, :L], t.path_probs(x)
    law = BackwardBlockVerify().law(x, dp, tp)
    for b in range(3):
        h = _fraction_backward_h(dp1, tp1, x[b].tolist())
        survive, ref = Fraction(1), [Fraction(0)] * (L + 1)
        for i in range(L, -1, -1):
            ref[i] = h[i] * survive
            survive *= 1 - h[i]
        assert np.abs(law.accept_probs[b] - np.array([float(r) for r in ref])).max() < 1e-12
    bv = BlockVerify().law(x, dp, tp)
    assert np.isfinite(bv.accept_probs).all() and np.allclose(bv.accept_probs.sum(-1), 1, atol=1e-12)


def test_long_blocks_with_underflowing_joints():
    # joint probabilities ~ (1e-7)^64 underflow; ratios must not (identical models accept all)
    V, L = 50, 64
    rng = np.random.default_rng(0)
    row = rng.dirichlet(np.ones(V) * 0.05)
    row = np.maximum(row, 1e-7)
    row /= row.sum()
    src = IIDSource(row)
    x = np.full((2, L), int(np.argmin(row)))
    dp, tp = src.path_probs(x)[:, :L], src.path_probs(x)
    assert np.prod(dp[0, np.arange(L), x[0]]) == 0.0  # the joint underflows in float64
    for verifier in (BlockVerify(), BackwardBlockVerify(), TokenVerify()):
        law = verifier.law(x, dp, tp)
        assert np.allclose(law.accept_probs[:, L], 1.0, atol=1e-12)


def test_long_block_monte_carlo_matches_closed_forms():
    d, t = bernoulli(0.6), bernoulli(0.75)
    L = 64
    v1 = simulate(d, t, BackwardBlockVerify(), L, 100_000, seed=3, progress=False)
    assert v1.accepted.contains(theory.bernoulli_expected_accepted_optimal(0.6, 0.75, L))
    tok = simulate(d, t, TokenVerify(), L, 100_000, seed=4, progress=False)
    assert tok.accepted.contains(theory.bernoulli_expected_accepted_token(0.6, 0.75, L))


# ------------------------------------------------------------------ decode
@pytest.mark.parametrize("verifier", [TokenVerify(), BlockVerify(), BackwardBlockVerify()], ids=lambda v: v.name)
def test_decode_output_follows_target_law(verifier):
    """End to end: 5-token sequences from the decode loop (L = 3, so v1 windows are carried
    across iterations) follow the target's law (chi-square, fixed seed)."""
    d, t = random_markov(2, 0.5, horizon=5, seed=8, sparsity=0.2)
    res = generate(d, t, verifier, 3, 5, n_sequences=100_000, seed=5, progress=False)
    idx = res.tokens @ np.array([16, 8, 4, 2, 1])
    law = t.enumerate(5).probs
    counts = np.bincount(idx, minlength=32)
    assert counts[law == 0].sum() == 0
    assert stats.chisquare(counts[law > 0], counts.sum() * law[law > 0]).pvalue > 1e-4


def test_carried_levels_are_shared_not_stacked():
    """The real-model loop scores v1's carried targets from unstacked cascade levels (a level no window changes is the
    array below it); the windows it carries forward equal those advanced from the stacked (B, D+1, V) cascade at each
    row's own accepted position."""
    rng = np.random.default_rng(0)
    n, D, V, g = 6, 4, 9, 3
    windows = ResidualWindows(rng.integers(3, 9, (n, D)), rng.normal(size=(n, D)), rng.random((n, D)) < 0.7)
    windows.valid[:, 2] = False  # window 2 covers nothing: its level is the one below, not a copy
    q, p = rng.dirichlet(np.ones(V), (n, g + 1)), rng.dirichlet(np.ones(V), (n, g + 1))
    toks, p0 = rng.integers(0, V, (n, g)), rng.integers(0, 3, n)
    states, levels = score_carried(windows, q, p, toks, p0)
    assert levels[0][3] is levels[0][2] and levels[0][2] is not levels[0][1]
    tau, y = rng.integers(0, g + 1, n), rng.integers(0, V, n)
    carry = rng.normal(size=n)
    got = carry_forward(states, levels, p, p0, g, tau, y, carry)
    for i in range(n):  # one row at a time, through the stacked cascade
        s = states[tau[i]].take([i])
        stacked = s.cascade(q[i:i + 1, tau[i]], p[i:i + 1, tau[i]], p0[i:i + 1] + tau[i])
        assert np.array_equal(stacked[0], np.stack(levels[tau[i]], axis=1)[i])
        want = s.advance(stacked, p[i:i + 1, tau[i]], p0[i:i + 1] + tau[i], y[i:i + 1])
        want = want.push(np.array([tau[i] <= g - 2]), p0[i:i + 1] + g, carry[i:i + 1], p0[i:i + 1] + tau[i] + 1)
        for f in ("end", "log_ratio", "valid"):
            assert np.array_equal(getattr(got, f)[i], getattr(want, f)[0])


def test_window_level_is_the_residual_where_active():
    """A carried window's level: residual(A·below, B·p) on its active rows (the normalised target where that mass is
    0), the row below elsewhere, to the last bit."""
    from otspec.verifiers.kernels import ratio_scales

    rng = np.random.default_rng(1)
    q, p = rng.dirichlet(np.full(50, 0.3), 7), rng.dirichlet(np.full(50, 0.3), 7)
    log_ratio = rng.normal(size=7)
    log_ratio[0] = -np.inf  # A = 0: no residual mass, residual's fallback row
    q[1], log_ratio[1] = p[1], 0.0  # q = p, A = B = 1: no mass either
    windows = ResidualWindows(np.full((7, 1), 10), log_ratio[:, None], (rng.random(7) < 0.6)[:, None])
    windows.valid[:2] = True
    a, b = ratio_scales(log_ratio)
    want = np.where(windows.valid, residual(a[:, None] * q, b[:, None] * p), q)
    assert np.array_equal(windows.cascade_levels(q, p, np.zeros(7, np.int64))[1], want)
