r"""Adaptive draft length on a stationary Markov pair: the exact average-cost optimum.

Spec ``specdecpp.md`` §2–4 (p is the draft, q the target), on order-1 Markov chains. An
iteration starts from the last emitted token s, drafts X_1 ~ p(·|s), X_2 ~ p(·|X_1), … and
decides after each drafted token, from the whole drafted path, whether to draft one more (at
most K); token verification accepts τ tokens and emits Y — the residual Norm[(q − p)_+](·|X_τ)
at the first rejection or the bonus q(·|X_K) — and Y starts the next iteration. With
a_i = min{1, q(X_i|X_{i−1})/p(X_i|X_{i−1})} and Π_l = a_1⋯a_l: P(τ = l | j drafted) =
Π_l (1 − a_{l+1}) for l < j and Π_j for l = j.

The latency per generated token of a stopping rule is E_μ[C] / E_μ[R], C = t_draft·K + t_target,
R = τ + 1, μ the stationary law of the start token under the rule (:func:`markov_policy_latency`,
exact: a linear solve). :func:`markov_optimal_stopping` minimises it over all history-dependent
rules by Dinkelbach's method: for a ratio λ, relative value iteration on the start tokens with
per-iteration cost C − λR — each step an exact backward induction over every drafted path —
gives an optimal rule; λ becomes that rule's exact latency; the rule repeats after finitely many
steps and the last λ is the optimum. It reports whether the optimal rule is a threshold on
P(some drafted token rejected) = 1 − Π_j at each step (Theorem 4.3's structure) among the paths
the rule reaches (from start tokens of positive stationary probability, through steps where it
continued: what it would do elsewhere never happens) and, if not, a reachable counterexample (two
such paths of one step where the more likely accepted one stops and the other continues).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import MAX_DRAFT_LENGTH, check_size
from ..distributions import residual
from ..errors import SizeLimitError
from ..sources import IIDSource, MarkovSource
from .adaptive import step_threshold, stopping_costs

__all__ = ["MAX_MARKOV_ENTRIES", "MAX_MARKOV_PATHS", "MarkovAdaptiveOptimum", "longest_markov_length", "markov_optimal_stopping", "markov_policy_latency",
           "markov_rule_latency"]

#: Most drafted paths (start token × drafted tokens) of the exact computation: V·Σ_{j<=K} V^j.
MAX_MARKOV_PATHS = 2**18
#: Most drafted paths × V (each path keeps a row of the next start token's law): V = 500, max_length = 1
#: (1.25·10^8 entries) took 3 GB and 15 s; V = 60, max_length = 2 (1.3·10^7) 0.4 GB and 1.9 s.
MAX_MARKOV_ENTRIES = 2**24


def _matrices(draft, target) -> tuple[np.ndarray, np.ndarray]:
    """(P, Q): the (V, V) transition matrices of IID or stationary Markov sources."""
    out = []
    for role, src in (("draft", draft), ("target", target)):
        if isinstance(src, IIDSource):
            out.append(np.broadcast_to(src.probs, (src.vocab_size, src.vocab_size)).copy())
        elif isinstance(src, MarkovSource) and src.stationary:
            out.append(np.asarray(src.matrix(1), dtype=np.float64))
        else:
            raise ValueError(f"{role}: the Markov adaptive optimum needs an IID or stationary Markov source, "
                             f"got {src!r}")
    if out[0].shape != out[1].shape:
        raise ValueError(f"vocabulary mismatch: draft has {out[0].shape[0]} tokens, target has {out[1].shape[0]}")
    return out[0], out[1]


def longest_markov_length(vocab_size: int) -> int:
    """The largest ``max_length`` whose drafted paths the exact Markov computations of this module walk within
    :data:`MAX_MARKOV_PATHS` and :data:`MAX_MARKOV_ENTRIES` at ``vocab_size`` tokens (at most MAX_DRAFT_LENGTH; 0:
    none)."""
    V = check_size(vocab_size, "vocab_size")
    K, count = 0, V
    while K < MAX_DRAFT_LENGTH:
        nxt = count + V * V ** (K + 1)
        if nxt > MAX_MARKOV_PATHS or nxt * V > MAX_MARKOV_ENTRIES:
            break
        K, count = K + 1, nxt
    return K


class _Paths:
    """Every drafted path of length 0..K from every start token, level by level (arrays over paths)."""

    def __init__(self, P, Q, K):
        V = P.shape[0]
        count = V * sum(V**j for j in range(K + 1))
        if count > MAX_MARKOV_PATHS:
            raise SizeLimitError(f"the exact Markov adaptive policy for V={V}, max_length={K} walks {count:,} "
                                 f"drafted paths, above MAX_MARKOV_PATHS = {MAX_MARKOV_PATHS:,}",
                                 size=count, limit=MAX_MARKOV_PATHS)
        if count * V > MAX_MARKOV_ENTRIES:
            raise SizeLimitError(f"the exact Markov adaptive policy for V={V}, max_length={K} keeps {count:,} paths x "
                                 f"{V} tokens = {count * V:,} entries, above MAX_MARKOV_ENTRIES = "
                                 f"{MAX_MARKOV_ENTRIES:,}", size=count * V, limit=MAX_MARKOV_ENTRIES)
        res = residual(Q, P)  # row a: the correction law after a rejection in context a
        self.K = K
        self.start = [np.arange(V)]          # start token of each path
        self.last = [np.arange(V)]           # last token (the context of the next draft)
        self.parent = [None]                 # index of the parent path one level up
        self.cond = [np.ones(V)]             # p(x_j | x_{j-1})
        self.all_acc = [np.ones(V)]          # Π_j
        self.acc_sum = [np.zeros(V)]         # Σ_{l <= j} Π_l = E[τ | path]
        self.rejected = [np.zeros((V, V))]   # Σ_{l < j} Π_l (1 − a_{l+1}) res(·|x_l): Y-law mass of τ < j
        self.y_law = [None]                  # law of Y (the next start token) if the iteration stops here
        for _ in range(K):
            prev = self.last[-1]
            n = prev.size
            ratio = np.divide(Q[prev], P[prev], out=np.zeros((n, V)), where=P[prev] > 0)
            a = np.minimum(1.0, ratio)
            keep = P[prev] > 0  # only drafts of positive probability
            parent = np.broadcast_to(np.arange(n)[:, None], (n, V))[keep]
            x = np.broadcast_to(np.arange(V), (n, V))[keep]
            pi = (self.all_acc[-1][:, None] * a)[keep]
            rej = self.rejected[-1][parent] + (self.all_acc[-1][parent] * (1.0 - a[keep]))[:, None] * res[prev[parent]]
            self.start.append(self.start[-1][parent])
            self.last.append(x)
            self.parent.append(parent)
            self.cond.append(P[prev][keep])
            self.all_acc.append(pi)
            self.acc_sum.append(self.acc_sum[-1][parent] + pi)
            self.rejected.append(rej)
            self.y_law.append(rej + pi[:, None] * Q[x])

    def backward(self, lam, h, t_draft, t_target):
        """Values and continue masks of the rule optimal for cost C − λR + h(Y); returns (root values (V,), masks)."""
        value, masks = None, [None] * (self.K + 1)
        for j in range(self.K, 0, -1):
            stop = t_draft * j + t_target - lam * (1.0 + self.acc_sum[j]) + self.y_law[j] @ h
            if value is None:  # j = K: forced stop
                value, masks[j] = stop, np.zeros(stop.size, dtype=bool)
            else:
                cont = np.bincount(self.parent[j + 1], weights=self.cond[j + 1] * value, minlength=stop.size)
                masks[j] = cont < stop
                value = np.where(masks[j], cont, stop)
        root = np.bincount(self.parent[1], weights=self.cond[1] * value, minlength=self.start[0].size)
        return root, masks

    def evaluate(self, masks, t_draft, t_target):
        """Per start token: E[C], E[R] and the law of the next start token (V, V) under the rule ``masks``."""
        V = self.start[0].size
        reach = self.cond[1].copy()  # P(reach path | start) at level 1: the forced first draft
        cost, reward, nxt = np.zeros(V), np.zeros(V), np.zeros((V, V))
        for j in range(1, self.K + 1):
            go = masks[j] if j < self.K else np.zeros(reach.size, dtype=bool)
            stopping = reach * ~go
            s = self.start[j]
            cost += np.bincount(s, weights=stopping * (t_draft * j + t_target), minlength=V)
            reward += np.bincount(s, weights=stopping * (1.0 + self.acc_sum[j]), minlength=V)
            np.add.at(nxt, s, stopping[:, None] * self.y_law[j])
            if j < self.K:
                reach = (reach * go)[self.parent[j + 1]] * self.cond[j + 1]
        return cost, reward, nxt


def _stationary(M) -> np.ndarray:
    """The stationary law of the start-token chain M (rows sum to 1), by a least-squares solve."""
    V = M.shape[0]
    A = np.vstack([M.T - np.eye(V), np.ones((1, V))])
    b = np.zeros(V + 1)
    b[-1] = 1.0
    mu = np.linalg.lstsq(A, b, rcond=None)[0]
    mu = np.clip(mu, 0.0, None)
    return mu / mu.sum()


def _ratio(paths, masks, t_draft, t_target) -> tuple[float, float, float]:
    cost, reward, nxt = paths.evaluate(masks, t_draft, t_target)
    mu = _stationary(nxt)
    return float(mu @ cost / (mu @ reward)), float(mu @ cost), float(mu @ reward)


def _path_array(paths, j) -> np.ndarray:
    """Every drafted path of step j as rows (start token, x_1, …, x_j): shape (n_j, j + 1)."""
    cols, i = [paths.last[j]], np.arange(paths.last[j].size)
    for level in range(j, 1, -1):
        i = paths.parent[level][i]
        cols.append(paths.last[level - 1][i])
    cols.append(paths.start[j])
    return np.stack(cols[::-1], axis=1)


def markov_rule_latency(draft, target, max_length: int, t_draft: float, t_target: float = 1.0, *, rule) -> float:
    """Exact latency per generated token of any deterministic stopping rule on a stationary Markov pair.

    ``rule(j, accepted, paths)`` is called once per step j = 1..K−1 with Π_j of every drafted path of
    that step (``accepted``, shape (n,)) and the paths themselves (``paths``, (n, j + 1): start token,
    then the drafted tokens); it returns a bool array, True where the rule drafts one more token.
    Drafting stops at ``max_length`` = K in any case.
    """
    P, Q = _matrices(draft, target)
    K = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    t_draft, t_target = stopping_costs(t_draft, t_target)
    paths = _Paths(P, Q, K)
    masks = [None]
    for j in range(1, K):
        go = np.asarray(rule(j, paths.all_acc[j].copy(), _path_array(paths, j)))
        if go.shape != paths.all_acc[j].shape or go.dtype != bool:
            raise ValueError(f"rule: expected a bool array of shape {paths.all_acc[j].shape} at step {j}, got "
                             f"{go.dtype} of shape {go.shape}")
        masks.append(go)
    masks.append(np.zeros(paths.last[K].size, dtype=bool))
    return _ratio(paths, masks, t_draft, t_target)[0]


def markov_policy_latency(draft, target, length: int, t_draft: float, t_target: float = 1.0) -> float:
    """Exact latency per generated token of always drafting ``length`` tokens on a stationary Markov pair."""
    P, Q = _matrices(draft, target)
    K = check_size(length, "length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    t_draft, t_target = stopping_costs(t_draft, t_target)
    paths = _Paths(P, Q, K)
    masks = [None] + [np.ones(paths.last[j].size, dtype=bool) for j in range(1, K + 1)]
    return _ratio(paths, masks, t_draft, t_target)[0]


@dataclass(frozen=True)
class MarkovAdaptiveOptimum:
    """The optimal draft-length rule of a stationary Markov pair (:func:`markov_optimal_stopping`).

    Attributes
    ----------
    latency : float
        Its latency per generated token.
    is_threshold_policy : bool
        Whether at every step j the rule continues exactly on the paths with Π_j above a threshold,
        among the paths it reaches.
    counterexample : dict or None
        When it is not: a step and two reachable paths (start token and drafted tokens) with their
        P(some drafted token rejected), the one with the larger Π_j stopping, the other continuing.
    iterations : int
        Dinkelbach steps.
    thresholds : list of dict or None
        When it is a threshold rule: per step j = 1..K−1, ``continue_below`` (draft another token iff
        P(some drafted token rejected) < it; ``None``: always stop) and the interval ``[low, high]``
        of values that give the same rule on the reached paths, as :func:`otspec.theory.adaptive.optimal_stopping`.
    """

    latency: float
    is_threshold_policy: bool
    counterexample: dict | None
    iterations: int
    thresholds: list | None = None


def _reached(paths, masks, t_draft, t_target) -> list:
    """Per step j: which drafted paths the rule ``masks`` reaches with positive probability (start tokens of
    positive stationary probability under the rule, every earlier step continuing, drafts of positive probability)."""
    mu = _stationary(paths.evaluate(masks, t_draft, t_target)[2])
    out = [None, mu[paths.start[1]] > 0]
    for j in range(1, paths.K):
        out.append((out[j] & masks[j])[paths.parent[j + 1]])
    return out


def _path(paths, j, i) -> list[int]:
    out = []
    for level in range(j, 0, -1):
        out.append(int(paths.last[level][i]))
        i = paths.parent[level][i]
    return [int(paths.start[0][i])] + out[::-1]


def markov_optimal_stopping(draft, target, max_length: int, t_draft: float, t_target: float = 1.0,
                            *, tol: float = 1e-13) -> MarkovAdaptiveOptimum:
    """The exact optimal stopping rule of a stationary Markov pair under token verification (module docstring)."""
    P, Q = _matrices(draft, target)
    K = check_size(max_length, "max_length", limit=MAX_DRAFT_LENGTH, limit_name="MAX_DRAFT_LENGTH")
    t_draft, t_target = stopping_costs(t_draft, t_target)
    paths = _Paths(P, Q, K)
    V = P.shape[0]
    lam, h, seen, steps = t_target, np.zeros(V), None, 0
    while True:
        steps += 1
        for _ in range(100_000):  # relative value iteration, damped (aperiodic), on the start tokens
            root, masks = paths.backward(lam, h, t_draft, t_target)
            new = 0.5 * h + 0.5 * (root - root[0])
            done = np.max(np.abs(new - h)) < tol
            h = new
            if done:
                break
        key = np.concatenate([m for m in masks[1:K]]) if K > 1 else np.zeros(0, dtype=bool)
        lam_new = _ratio(paths, masks, t_draft, t_target)[0]
        if (seen is not None and np.array_equal(key, seen)) or steps > 100:
            lam = lam_new
            break
        seen, lam = key, lam_new
    ok, example, thresholds = True, None, []
    reached = _reached(paths, masks, t_draft, t_target)
    for j in range(1, K):
        cont, stop = masks[j] & reached[j], ~masks[j] & reached[j]  # a rule's choices off its own paths are moot
        thresholds.append(step_threshold(j, paths.all_acc[j][cont], paths.all_acc[j][stop]))
        if ok and cont.any() and stop.any() and paths.all_acc[j][stop].max() > paths.all_acc[j][cont].min() + 1e-12:
            ok = False
            i_stop = int(np.flatnonzero(stop)[np.argmax(paths.all_acc[j][stop])])
            i_cont = int(np.flatnonzero(cont)[np.argmin(paths.all_acc[j][cont])])
            example = {"step": j,
                       "stops": {"path": _path(paths, j, i_stop), "rejection": 1 - float(paths.all_acc[j][i_stop])},
                       "continues": {"path": _path(paths, j, i_cont),
                                     "rejection": 1 - float(paths.all_acc[j][i_cont])}}
            break
    if not ok:
        thresholds = None
    return MarkovAdaptiveOptimum(float(lam), ok, example, steps, thresholds)
