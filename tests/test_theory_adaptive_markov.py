"""Adaptive draft length on stationary Markov pairs: the exact average-cost optimum against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from otspec.engine import generate
from otspec.errors import SizeLimitError
from otspec.sources import IIDSource, MarkovSource, random_markov
from otspec.theory.adaptive import fixed_length_latency, optimal_stopping
from otspec.theory.adaptive_markov import (
    markov_optimal_stopping,
    markov_policy_latency,
    markov_rule_latency,
)
from otspec.verifiers import TokenVerify


def brute_force(P, Q, K, t_draft, t_target):
    """min over every deterministic history-dependent rule of the stationary latency, by recursion over paths."""
    V = P.shape[0]
    res = np.maximum(Q - P, 0.0)
    res = np.where(res.sum(1, keepdims=True) > 0, res / np.where(res.sum(1, keepdims=True) > 0,
                                                                 res.sum(1, keepdims=True), 1), Q)
    nodes = [(s,) + xs for s in range(V) for n in range(1, K) for xs in itertools.product(range(V), repeat=n)]
    best = np.inf
    for bits in itertools.product((False, True), repeat=len(nodes)):
        go = dict(zip(nodes, bits, strict=True))
        cost, reward, nxt = np.zeros(V), np.zeros(V), np.zeros((V, V))

        def walk(path, prob, pi, acc, ylaw, go=go, cost=cost, reward=reward, nxt=nxt):  # path = (s, x_1..x_j)
            s, j = path[0], len(path) - 1
            if j < K and go[path]:
                for x in range(V):
                    if P[path[-1], x] > 0:
                        a = min(1.0, Q[path[-1], x] / P[path[-1], x])
                        walk(path + (x,), prob * P[path[-1], x], pi * a, acc + pi * a,
                             ylaw + pi * (1 - a) * res[path[-1]], go, cost, reward, nxt)
                return
            cost[s] += prob * (t_draft * j + t_target)
            reward[s] += prob * (1 + acc)
            nxt[s] += prob * (ylaw + pi * Q[path[-1]])

        for s in range(V):
            for x in range(V):
                if P[s, x] > 0:
                    a = min(1.0, Q[s, x] / P[s, x])
                    walk((s, x), P[s, x], a, a, (1 - a) * res[s])
        vals, vecs = np.linalg.eig(nxt.T)
        mu = np.real(vecs[:, np.argmin(np.abs(vals - 1))])
        mu = mu / mu.sum()
        best = min(best, float(mu @ cost / (mu @ reward)))
    return best


@pytest.mark.parametrize(("seed", "K"), [(0, 2), (1, 2), (2, 3), (3, 3)])
def test_optimum_equals_brute_force_over_all_rules(seed, K):
    draft, target = random_markov(2, 0.5, seed=seed)
    P, Q = draft.matrix(1), target.matrix(1)
    opt = markov_optimal_stopping(draft, target, K, 0.15)
    assert opt.latency == pytest.approx(brute_force(P, Q, K, 0.15, 1.0), rel=1e-10)
    assert opt.latency <= min(markov_policy_latency(draft, target, k, 0.15) for k in range(1, K + 1)) + 1e-12


def test_iid_sources_give_the_iid_optimum():
    p, q = [0.3, 0.7], [0.6, 0.4]
    opt = markov_optimal_stopping(IIDSource(p), IIDSource(q), 6, 0.1)
    assert opt.latency == pytest.approx(optimal_stopping(p, q, 6, 0.1).latency, rel=1e-12)
    assert markov_policy_latency(IIDSource(p), IIDSource(q), 4, 0.1) == pytest.approx(
        fixed_length_latency(p, q, 4, 0.1), rel=1e-12)


def test_fixed_length_latency_is_what_the_decode_loop_measures():
    draft, target = random_markov(3, 1.0, seed=2)
    res = generate(draft, target, TokenVerify(), 3, 20_000, n_sequences=16, seed=0, progress=False)
    assert res.cost(0.1).latency == pytest.approx(markov_policy_latency(draft, target, 3, 0.1), rel=0.01)


def _best_threshold_latency(draft, target, K, t_draft):
    """The best rule that continues at step j iff Π_j exceeds a threshold θ_j, by search over every θ."""
    values = {}

    def collect(j, accepted, paths):
        values[j] = np.unique(accepted)
        return np.ones(accepted.size, dtype=bool)

    assert markov_rule_latency(draft, target, K, t_draft, rule=collect) == pytest.approx(
        markov_policy_latency(draft, target, K, t_draft), rel=1e-12)  # always continuing: fixed length K
    grid = [np.concatenate([[-1.0], values[j]]) for j in range(1, K)]
    return min(markov_rule_latency(draft, target, K, t_draft, rule=lambda j, acc, paths, th=th: acc > th[j - 1])
               for th in itertools.product(*grid))


@pytest.mark.parametrize(("t_draft", "threshold"), [(0.05, True), (0.1, False), (0.2, False)])
def test_theorem_4_3_threshold_structure_on_a_markov_pair(t_draft, threshold):
    """Whether the optimal rule is a threshold on P(some draft rejected) among the paths it reaches: where it says
    so, the best per-step threshold rule attains the optimum; where it gives a counterexample, every threshold
    rule is strictly worse (so the counterexample is not on a path the rule never drafts)."""
    draft, target = random_markov(3, 1.0, seed=2)
    opt = markov_optimal_stopping(draft, target, 3, t_draft)
    best = _best_threshold_latency(draft, target, 3, t_draft)
    assert opt.is_threshold_policy is threshold
    if threshold:
        assert opt.counterexample is None and best == pytest.approx(opt.latency, rel=1e-12)
        below = [t["continue_below"] for t in opt.thresholds]  # the reported thresholds are that rule
        rule = markov_rule_latency(draft, target, 3, t_draft, rule=lambda j, acc, paths: np.full(acc.size, False)
                                   if below[j - 1] is None else 1.0 - acc < below[j - 1])
        assert rule == pytest.approx(opt.latency, rel=1e-12)
    else:
        assert best > opt.latency + 1e-5 and opt.thresholds is None
        ex = opt.counterexample
        assert ex["stops"]["rejection"] < ex["continues"]["rejection"]  # the likelier-accepted path stops
        assert len(ex["stops"]["path"]) == len(ex["continues"]["path"]) == ex["step"] + 1


def test_rule_latency_checks_the_rule():
    draft, target = random_markov(3, 1.0, seed=2)
    with pytest.raises(ValueError, match="bool array"):
        markov_rule_latency(draft, target, 3, 0.1, rule=lambda j, acc, paths: acc)


def test_errors():
    draft, target = random_markov(3, 1.0, horizon=4, seed=0)
    with pytest.raises(ValueError, match="stationary"):
        markov_optimal_stopping(draft, target, 2, 0.1)
    big = MarkovSource(np.full(20, 0.05), np.full((20, 20), 0.05))
    with pytest.raises(SizeLimitError, match="MAX_MARKOV_PATHS"):
        markov_optimal_stopping(big, big, 5, 0.1)
