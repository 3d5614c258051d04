r"""Verifiers of structured multi-draft draws: Hu et al.'s greedy drafts and SpecHub's hub pair.

Both draws (:data:`otspec.drafts.laws.DRAWS`) hold a fixed set T of candidates and one random token J:

* greedy drafts (Hu et al., "Towards Optimal Multi-draft Speculative Decoding", ICLR 2025, arXiv 2502.18779):
  T = the top k − 1 tokens of p, J ~ p' = p restricted to the other tokens, renormalised;
* SpecHub (Sun et al., EMNLP 2024, arXiv 2411.05289), k = 2: X_1 ~ p, and X_2 = a = argmax p (the hub) when
  X_1 ≠ a, else X_2 ~ p'. As a set {a, J} with J ~ p': the greedy draw at k = 2, in another order.

:class:`GreedyDraftVerify` is token verification of J against p': accept J with probability
min{1, q(J)/p'(J)}, else draw Y from (q − p')_+ (where p' = 0 on T, so the residual keeps T's target mass);
Y counts as accepted when it is a candidate. Averaged over J, Y ~ q, and P(Y ∈ candidates) reaches the optimum
α_k = q(T) + Σ_{x∉T} min{q(x), p'(x)} of :func:`otspec.solvers.otm_dual.structured_value`.

:class:`SpecHubVerify` is SpecHub's own staged rule, as its public code implements it (the paper's text was not
at hand): with the drawn pair (X_1, X_2), q_1 = (q − p)_+ off the hub and q_1(a) = q(a),
Q(y) = p(a) p(y)/(1 − p(a)) the mass of the pair (a, y), R = Σ_{y≠a} (p(y) − q(y))_+ and
S = Σ_{y≠a} (Q(y) − q_1(y))_+:

1. a pair (j, a) keeps j with probability min{1, q(j)/p(j)}; a pair (a, j) keeps j with min{1, q_1(j)/Q(j)};
2. then the hub: a pair (a, j) keeps a with min{1, q(a)/S}; a pair (j, a) with min{1, q'_a/R},
   q'_a = (q(a) − S)_+;
3. otherwise Y from the residual r(y) = (q_1(y) − Q(y))_+ off the hub, r(a) = (q'_a − R)_+, normalised.

Its exact law is computed per pair; the tests check that it keeps the target's law and reaches α_2.
"""

from __future__ import annotations

import numpy as np

from ..distributions import sample_categorical
from ..drafts.laws import one_hot
from ..solvers.otm_dual import structured_value
from .candidates import MultiDraftVerifier, membership, membership_law, membership_outcome

__all__ = ["GreedyDraftVerify", "SpecHubVerify", "greedy_kernel", "spechub_kernel"]


def _normalise(rows: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    mass = rows.sum(axis=1, keepdims=True)
    return np.where(mass > 0, rows / np.where(mass > 0, mass, 1.0), fallback)


def _take(rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return np.take_along_axis(rows, np.maximum(tokens, 0)[:, None], axis=1)[:, 0]


def greedy_kernel(candidates, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Law of Y given greedy candidates (B, k) (T = the first k − 1, J the last), rows p, q (B, V)."""
    candidates = np.asarray(candidates, dtype=np.int64)
    top, last = candidates[:, :-1], candidates[:, -1]
    rest = p * (1.0 - membership(top, p))
    p_rest = _normalise(rest, np.zeros_like(p))
    pj = _take(p_rest, last)
    accept = np.where((last >= 0) & (pj > 0), np.minimum(1.0, _take(q, last) / np.where(pj > 0, pj, 1.0)), 0.0)
    residual = _normalise(np.maximum(q - p_rest, 0.0), q)
    return accept[:, None] * one_hot(last, p.shape[1], p) + (1.0 - accept)[:, None] * residual


def spechub_kernel(candidates, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Law of Y given SpecHub pairs (B, 2) in drawing order, rows p, q (B, V) (the module docstring's stages)."""
    candidates = np.asarray(candidates, dtype=np.int64)
    V = p.shape[1]
    if candidates.shape[1] == 1:  # one child: token verification
        return greedy_kernel(candidates, p, q)
    first, second = candidates[:, 0], candidates[:, 1]
    hub = np.argmax(p, axis=1)
    is_hub = np.arange(V) == hub[:, None]
    pa, qa = _take(p, hub), _take(q, hub)
    off = ~is_hub
    q1 = np.where(off, np.maximum(q - p, 0.0), q)
    pair = np.where(off & (pa < 1)[:, None], pa[:, None] * p / np.where(pa < 1, 1.0 - pa, 1.0)[:, None], 0.0)
    R = np.where(off, np.maximum(p - q, 0.0), 0.0).sum(axis=1)
    S = np.where(off, np.maximum(pair - q1, 0.0), 0.0).sum(axis=1)
    qa_left = np.maximum(qa - S, 0.0)
    residual = np.where(off, np.maximum(q1 - pair, 0.0), np.maximum(qa_left - R, 0.0)[:, None])
    residual = _normalise(residual, q)

    def ratio(num, den):
        return np.where(den > 0, np.minimum(1.0, num / np.where(den > 0, den, 1.0)), 1.0)

    hub_first = first == hub  # the pair (a, j); otherwise (j, a)
    j = np.where(hub_first, second, first)
    keep_j = np.where(hub_first, ratio(_take(q1, j), _take(pair, j)), ratio(_take(q, j), _take(p, j)))
    keep_j = np.where(j >= 0, keep_j, 0.0)
    keep_a = np.where(hub_first, ratio(qa, S), ratio(qa_left, R))
    single = second < 0  # p(a) = 1: the pair is (a, -1), token verification of a
    keep_a = np.where(single, np.minimum(1.0, qa / np.where(pa > 0, pa, 1.0)), keep_a)
    residual = np.where(single[:, None], _normalise(np.maximum(q - p, 0.0), q), residual)
    rest = (1.0 - keep_j) * (1.0 - keep_a)
    return (keep_j[:, None] * one_hot(j, V, p) + ((1.0 - keep_j) * keep_a)[:, None] * one_hot(hub, V, p)
            + rest[:, None] * residual)


class _KernelVerify(MultiDraftVerifier):
    """Y from a per-draft kernel, accepted when it is a candidate (numpy rows)."""

    kernel = staticmethod(greedy_kernel)

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        p, q = np.asarray(d.draft_probs, dtype=float), np.asarray(d.target_probs, dtype=float)
        return membership_law(np.asarray(d.tokens), self.kernel(d.tokens, p, q))

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        p, q = np.asarray(d.draft_probs, dtype=float), np.asarray(d.target_probs, dtype=float)
        y = np.asarray(sample_categorical(self.kernel(d.tokens, p, q), rng), dtype=np.int64)
        return membership_outcome(np.asarray(d.tokens, dtype=np.int64), y)


class GreedyDraftVerify(_KernelVerify):
    """Hu et al.'s greedy drafts (top k − 1 tokens of p, then one from the rest) verified at their optimum."""

    name = "greedy"
    label = "greedy drafts (Hu et al.)"
    style = {"linestyle": "-", "color": "C8"}
    replacement = "greedy"

    def expected_acceptance(self, draft, target, k: int) -> float:
        return structured_value(draft, target, k, "greedy")

    def __repr__(self) -> str:
        return "GreedyDraftVerify()"


class SpecHubVerify(_KernelVerify):
    """SpecHub's hub pair (k <= 2) with its staged verification rule."""

    name = "spechub"
    label = "SpecHub (Sun et al.)"
    style = {"linestyle": "-", "color": "C9"}
    replacement = "hub"
    kernel = staticmethod(spechub_kernel)

    def expected_acceptance(self, draft, target, k: int) -> float:
        return structured_value(draft, target, k, "hub")

    def __repr__(self) -> str:
        return "SpecHubVerify()"

