"""Multi-round rejection sampling (SpecInfer; MCSD Algorithms 1–2; spec ``multi_draft_otm.md`` §8).

Residual targets t ← q and draft law d ← p; for each candidate X_i in order: accept with
probability min{1, t(X_i)/d(X_i)}, else t ← Norm[(t − d)_+]; after k rejections Y ~ t. With
replacement d stays p (Algorithm 1); without replacement d becomes p restricted to the tokens
not drafted yet, renormalised (Algorithm 2). The acceptance probability is
:func:`otspec.theory.multidraft.multiround_acceptance`.
"""

from __future__ import annotations

import numpy as np

from ..distributions import namespace, residual
from ..drafts.laws import one_hot
from ..theory.multidraft import multiround_acceptance
from .candidates import SequentialMultiDraftVerifier, gather_candidates, stack_columns
from .registry import register

__all__ = ["MultiRound", "MultiRoundWithoutReplacement", "multiround_plan"]


def _accept(t_x, d_x, valid, xp):
    """min{1, t(x)/d(x)} at the candidates (any shape), 0 at a -1 slot or where d(x) = 0."""
    ok = valid & (d_x > 0)
    return xp.where(ok, xp.minimum(t_x / xp.where(ok, d_x, xp.ones_like(d_x)), 1.0), xp.zeros_like(d_x))


def multiround_plan(candidates, draft_probs, target_probs, *, without_replacement: bool = False):
    """(a (B, k), final residual t (B, V)) of multi-round rejection sampling, row-wise."""
    xp = namespace(draft_probs, target_probs)
    p = draft_probs
    t, d = target_probs, p
    drafted = xp.zeros_like(p)
    a = []
    k = candidates.shape[1]
    for i in range(k):
        c = candidates[:, i: i + 1]
        valid = c[:, 0] >= 0
        a.append(_accept(gather_candidates(t, c)[:, 0], gather_candidates(d, c)[:, 0], valid, xp))
        moved = residual(t, d)
        if not without_replacement and i + 1 < k and isinstance(p, np.ndarray) and np.array_equal(moved, t):
            # the residual reached its fixed point (t = Norm[(t - p)_+]: a point mass, or nothing left to move): every
            # later round has the same t and d, so their acceptances come in one gather (a merged node's thousands
            # of rounds were each a pass over the rows). Numpy only: the test would read back from a device.
            rest = candidates[:, i + 1:]
            a.extend(np.moveaxis(_accept(gather_candidates(t, rest), gather_candidates(d, rest), rest >= 0, xp), 1, 0))
            return stack_columns(a, p), t
        t = xp.where(valid[:, None], moved, t)
        if without_replacement:
            drafted = xp.clip(drafted + one_hot(c[:, 0], p.shape[1], p), max=1.0)
            left = p * (1.0 - drafted)  # recomputed from p each round: no accumulated rounding
            mass = xp.sum(left, axis=-1, keepdims=True)
            d = xp.where(mass > 0, left / xp.where(mass > 0, mass, xp.ones_like(mass)), xp.zeros_like(p))
    return stack_columns(a, p), t


@register
class MultiRound(SequentialMultiDraftVerifier):
    """Multi-round rejection sampling with replacement (MCSD Algorithm 1); lossless for i.i.d. candidates."""

    name = "multiround"
    label = "multi-round (SpecInfer / MCSD)"
    style = {"linestyle": "-", "color": "C2"}
    replacement = True

    def expected_acceptance(self, draft, target, k: int) -> float:
        return multiround_acceptance(draft, target, k, self.replacement)

    def acceptance_plan(self, candidates, draft_probs, target_probs, *, validate: bool = True):
        return multiround_plan(candidates, draft_probs, target_probs)


@register
class MultiRoundWithoutReplacement(SequentialMultiDraftVerifier):
    """Multi-round rejection sampling without replacement (MCSD Algorithm 2).

    Lossless for candidates drawn sequentially without replacement (-1 slots after the
    support is exhausted are skipped). With ``validate=True`` a repeated candidate is an error.
    """

    name = "multiround_without_replacement"
    label = "multi-round w/o replacement (MCSD)"
    style = {"linestyle": ":", "color": "C2"}
    replacement = False

    def expected_acceptance(self, draft, target, k: int) -> float:
        return multiround_acceptance(draft, target, k, self.replacement)
    distinct_candidates = True

    def acceptance_plan(self, candidates, draft_probs, target_probs, *, validate: bool = True):
        return multiround_plan(candidates, draft_probs, target_probs, without_replacement=True)
