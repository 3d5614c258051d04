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

import array_api_compat
import numpy as np

from ..distributions import namespace, sample_categorical
from ..drafts.laws import one_hot
from ..solvers.otm_dual import structured_value
from .candidates import MultiDraftVerifier, membership, membership_law, membership_outcome
from .registry import register

__all__ = ["GreedyDraftVerify", "SpecHubVerify", "greedy_kernel", "spechub_kernel"]


def _normalise(rows, fallback):
    xp = namespace(rows)
    mass = xp.sum(rows, axis=1, keepdims=True)
    return xp.where(mass > 0, rows / xp.where(mass > 0, mass, xp.ones_like(mass)), fallback)


def _take(rows, tokens):
    xp = namespace(rows)
    return xp.take_along_axis(rows, xp.clip(tokens, min=0)[:, None], axis=1)[:, 0]


def _ids(candidates, like):
    """Candidates as int64 of ``like``'s kind (numpy in, numpy out; a tensor stays on its device)."""
    if isinstance(like, np.ndarray):
        return np.asarray(candidates, dtype=np.int64)
    return namespace(like).astype(candidates, namespace(like).int64)


def greedy_kernel(candidates, p, q):
    """Law of Y given greedy candidates (B, k) (T = the first k − 1, J the last), rows p, q (B, V) (numpy or torch)."""
    xp = namespace(p, q)
    candidates = _ids(candidates, p)
    top, last = candidates[:, :-1], candidates[:, -1]
    rest = p * (1.0 - membership(top, p))
    p_rest = _normalise(rest, xp.zeros_like(p))
    pj = _take(p_rest, last)
    accept = xp.where((last >= 0) & (pj > 0), xp.minimum(_take(q, last) / xp.where(pj > 0, pj, xp.ones_like(pj)), 1.0),
                      xp.zeros_like(pj))
    residual = _normalise(xp.clip(q - p_rest, min=0.0), q)
    return accept[:, None] * one_hot(last, p.shape[1], p) + (1.0 - accept)[:, None] * residual


def spechub_kernel(candidates, p, q):
    """Law of Y given SpecHub pairs (B, 2) in drawing order, rows p, q (B, V) (the module docstring's stages; numpy
    or torch)."""
    xp = namespace(p, q)
    candidates = _ids(candidates, p)
    V = p.shape[1]
    if candidates.shape[1] > 2:  # its law would use the first two and count the others as never drafted
        raise ValueError(f"SpecHub verifies its hub pair: at most 2 candidates a node (k <= 2), got k = "
                         f"{candidates.shape[1]}")
    if candidates.shape[1] == 1:  # one child: token verification
        return greedy_kernel(candidates, p, q)
    first, second = candidates[:, 0], candidates[:, 1]
    hub = xp.astype(xp.argmax(p, axis=1), xp.int64)
    is_hub = xp.arange(V, device=array_api_compat.device(p))[None, :] == hub[:, None]
    pa, qa = _take(p, hub), _take(q, hub)
    off = ~is_hub
    zero, one = xp.zeros_like(p), xp.ones_like(pa)
    q1 = xp.where(off, xp.clip(q - p, min=0.0), q)
    pair = xp.where(off & (pa < 1)[:, None], pa[:, None] * p / xp.where(pa < 1, 1.0 - pa, one)[:, None], zero)
    R = xp.sum(xp.where(off, xp.clip(p - q, min=0.0), zero), axis=1)
    S = xp.sum(xp.where(off, xp.clip(pair - q1, min=0.0), zero), axis=1)
    qa_left = xp.clip(qa - S, min=0.0)
    residual = xp.where(off, xp.clip(q1 - pair, min=0.0), xp.clip(qa_left - R, min=0.0)[:, None])
    residual = _normalise(residual, q)

    def ratio(num, den):
        return xp.where(den > 0, xp.minimum(num / xp.where(den > 0, den, xp.ones_like(den)), 1.0), xp.ones_like(den))

    hub_first = first == hub  # the pair (a, j); otherwise (j, a)
    j = xp.where(hub_first, second, first)
    keep_j = xp.where(hub_first, ratio(_take(q1, j), _take(pair, j)), ratio(_take(q, j), _take(p, j)))
    keep_j = xp.where(j >= 0, keep_j, xp.zeros_like(keep_j))
    keep_a = xp.where(hub_first, ratio(qa, S), ratio(qa_left, R))
    single = second < 0  # p(a) = 1: the pair is (a, -1), token verification of a
    keep_a = xp.where(single, xp.minimum(qa / xp.where(pa > 0, pa, one), 1.0), keep_a)
    residual = xp.where(single[:, None], _normalise(xp.clip(q - p, min=0.0), q), residual)
    rest = (1.0 - keep_j) * (1.0 - keep_a)
    return (keep_j[:, None] * one_hot(j, V, p) + ((1.0 - keep_j) * keep_a)[:, None] * one_hot(hub, V, p)
            + rest[:, None] * residual)


class _KernelVerify(MultiDraftVerifier):
    """Y from a per-draft kernel, accepted when it is a candidate (numpy rows, or torch rows on their device)."""

    kernel = staticmethod(greedy_kernel)

    @staticmethod
    def _rows(d):
        if isinstance(d.draft_probs, np.ndarray) or isinstance(d.target_probs, np.ndarray):
            return np.asarray(d.draft_probs, dtype=float), np.asarray(d.target_probs, dtype=float)
        return d.draft_probs, d.target_probs

    def _kernel_or_target(self, candidates, p, q):
        """The law of Y; with no candidate (k = 0) nothing can be accepted and Y is drawn from q."""
        return q if candidates.shape[1] == 0 else self.kernel(candidates, p, q)

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        p, q = self._rows(d)
        return membership_law(_ids(d.tokens, p), self._kernel_or_target(d.tokens, p, q))

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        p, q = self._rows(d)
        xp = namespace(p)
        y = xp.astype(sample_categorical(self._kernel_or_target(d.tokens, p, q), rng, check=validate), xp.int64)
        return membership_outcome(_ids(d.tokens, p), y)


@register
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


@register
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

