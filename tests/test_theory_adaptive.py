"""SpecDec++ adaptive draft length: the exact optimal stopping policy of an IID pair against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otspec.errors import SizeLimitError
from otspec.theory.adaptive import MAX_ADAPTIVE_STATES, fixed_length_latency, optimal_stopping


def brute_force(p, q, K, t_draft, t_target):
    """min over every deterministic history-dependent stopping policy of E[C] / E[R], by enumeration.

    A policy says, for every drafted token sequence shorter than K, whether to draft one more;
    C = t_draft K + t_target, R = 1 + Σ_{l <= K} ∏_{i <= l} min(1, q(x_i)/p(x_i)).
    """
    V = len(p)
    a = [min(1.0, q[x] / p[x]) if p[x] > 0 else 0.0 for x in range(V)]
    histories = [h for n in range(1, K) for h in itertools.product(range(V), repeat=n)
                 if all(p[x] > 0 for x in h)]
    best = np.inf
    for bits in itertools.product((False, True), repeat=len(histories)):
        go = dict(zip(histories, bits, strict=True))
        cost = reward = 0.0
        stack = [((x,), p[x]) for x in range(V) if p[x] > 0]
        while stack:
            h, prob = stack.pop()
            if len(h) < K and go[h]:
                stack += [(h + (x,), prob * p[x]) for x in range(V) if p[x] > 0]
                continue
            cost += prob * (t_draft * len(h) + t_target)
            reward += prob * (1.0 + sum(np.prod([a[x] for x in h[:ell]]) for ell in range(1, len(h) + 1)))
        best = min(best, cost / reward)
    return best


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 3).flatmap(lambda V: st.tuples(
    st.lists(st.floats(0.05, 1.0), min_size=V, max_size=V), st.lists(st.floats(0.0, 1.0), min_size=V, max_size=V))),
    st.integers(1, 3), st.floats(0.0, 0.6), st.floats(0.5, 2.0))
def test_optimum_equals_brute_force_over_all_policies(rows, K, t_draft, t_target):
    p, q = np.array(rows[0]), np.array(rows[1])
    if q.sum() <= 0:
        q = np.ones_like(q)
    p, q = p / p.sum(), q / q.sum()
    if 2 ** sum(len(p) ** n for n in range(1, K)) > 5000:
        K = 2
    opt = optimal_stopping(p, q, K, t_draft, t_target)
    assert opt.latency == pytest.approx(brute_force(p, q, K, t_draft, t_target), rel=1e-12, abs=1e-14)
    assert opt.is_threshold_policy
    best_fixed = min(fixed_length_latency(p, q, k, t_draft, t_target) for k in range(1, K + 1))
    assert opt.latency <= best_fixed + 1e-12  # fixed lengths are policies too
    assert opt.latency == pytest.approx((t_draft * opt.expected_drafted + t_target) / opt.expected_tokens)


def test_by_hand():
    # p = q: every draft is accepted, so the policy drafts the maximum: (0.1·4 + 1) / 5
    opt = optimal_stopping([0.5, 0.5], [0.5, 0.5], 4, 0.1)
    assert opt.latency == pytest.approx(1.4 / 5) and opt.expected_drafted == 4.0
    # disjoint supports: every draft is rejected, one draft per target call
    assert optimal_stopping([1.0, 0.0], [0.0, 1.0], 5, 0.2).latency == pytest.approx(1.2)
    assert fixed_length_latency([0.3, 0.7], [0.6, 0.4], 2, 0.1) == pytest.approx(1.2 / (1 + 0.7 + 0.49))


def test_adaptive_beats_fixed_and_thresholds_are_reported():
    opt = optimal_stopping([0.3, 0.7], [0.6, 0.4], 8, 0.1)
    fixed = [fixed_length_latency([0.3, 0.7], [0.6, 0.4], k, 0.1) for k in range(1, 9)]
    assert opt.latency < min(fixed) - 1e-3
    assert len(opt.thresholds) == 7 and all(t["low"] <= t["high"] for t in opt.thresholds if t["low"] is not None)


def test_errors():
    with pytest.raises(ValueError, match="t_draft"):
        optimal_stopping([0.5, 0.5], [0.5, 0.5], 3, -1.0)
    with pytest.raises(ValueError, match="max_length"):
        optimal_stopping([0.5, 0.5], [0.5, 0.5], 0, 0.1)
    rng = np.random.default_rng(0)
    p, q = rng.dirichlet(np.ones(40)), rng.dirichlet(np.ones(40))
    with pytest.raises(SizeLimitError, match="MAX_ADAPTIVE_STATES"):
        optimal_stopping(p, q, 16, 0.1, method="induction")
    assert MAX_ADAPTIVE_STATES == 2**21


def test_decode_loop_with_the_optimal_thresholds_attains_the_optimal_latency():
    """The exact optimum (Dinkelbach + backward induction) is what the decode loop measures with its policy."""
    from otspec.engine import ThresholdController, generate
    from otspec.sources import IIDSource
    from otspec.verifiers import TokenVerify

    p, q, K, t_draft = np.array([0.3, 0.7]), np.array([0.6, 0.4]), 6, 0.1
    opt = optimal_stopping(p, q, K, t_draft)
    ctrl = ThresholdController([t["continue_below"] for t in opt.thresholds], K)
    res = generate(IIDSource(p), IIDSource(q), TokenVerify(), ctrl, 20_000, n_sequences=16, seed=3, progress=False)
    fixed = min(fixed_length_latency(p, q, k, t_draft) for k in range(1, K + 1))
    latency = res.cost(t_draft).latency
    # the renewal ratio per iteration: drafted tokens and emitted tokens per target call
    assert res.draft_calls / res.target_calls == pytest.approx(opt.expected_drafted, rel=0.02)
    assert res.generated / res.target_calls == pytest.approx(opt.expected_tokens, rel=0.02)
    assert latency == pytest.approx(opt.latency, rel=0.02) and latency < fixed


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 5).flatmap(lambda V: st.tuples(
    st.lists(st.floats(0.05, 1.0), min_size=V, max_size=V), st.lists(st.floats(0.05, 1.0), min_size=V, max_size=V))),
    st.integers(1, 8), st.floats(0.0, 0.5))
def test_fixed_length_formula_and_optimum_below_every_threshold_rule(rows, K, t_draft):
    from otspec.theory.adaptive import threshold_policy_latency

    p, q = np.array(rows[0]) / sum(rows[0]), np.array(rows[1]) / sum(rows[1])
    alpha = float(np.minimum(p, q).sum())
    closed = (K * t_draft + 1.0) * (1 - alpha) / (1 - alpha ** (K + 1)) if alpha < 1 else (K * t_draft + 1) / (K + 1)
    assert fixed_length_latency(p, q, K, t_draft) == pytest.approx(closed, rel=1e-12)
    opt = optimal_stopping(p, q, K, t_draft).latency
    for h in np.linspace(0.0, 1.0, 11):
        assert opt <= threshold_policy_latency(p, q, K, t_draft, thresholds=float(h)) + 1e-12
    # h = 1 never stops early: the fixed length K; h = 0 stops after the first draft: K = 1
    assert threshold_policy_latency(p, q, K, t_draft, thresholds=1.0) == pytest.approx(
        fixed_length_latency(p, q, K, t_draft), rel=1e-12)
    assert threshold_policy_latency(p, q, K, t_draft, thresholds=0.0) == pytest.approx(
        fixed_length_latency(p, q, 1, t_draft), rel=1e-12)


def test_simulated_optimal_policy_lands_in_its_interval():
    from otspec.engine import ThresholdController, generate
    from otspec.sources import IIDSource
    from otspec.verifiers import TokenVerify

    rng = np.random.default_rng(7)
    p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
    opt = optimal_stopping(p, q, 8, 0.05)
    ctrl = ThresholdController([t["continue_below"] for t in opt.thresholds], 8)
    # 640,000 tokens in 160 sequences of 4,000: a fifth of the loop steps of 32 x 20,000 (width 0.0038 against 0.0034)
    res = generate(IIDSource(p), IIDSource(q), TokenVerify(), ctrl, 4_000, n_sequences=160, seed=11, progress=False)
    interval = res.cost(0.05, confidence=0.999).latency_interval  # one seeded run: a 0.1 % false-alarm rate
    assert interval.low <= opt.latency <= interval.high
