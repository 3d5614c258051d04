"""k-Seq (SpecTr Algorithm 2; spec ``multi_draft_otm.md`` §4): sequential selection with division factor ρ.

Spec: ``docs/multi_draft_otm.md``.
"""

from __future__ import annotations

import math
import numbers

from ..distributions import namespace
from ..theory.multidraft import KSeqParameters, kseq_acceptance, kseq_parameters
from .candidates import SequentialMultiDraftVerifier, gather_candidates
from .registry import register

__all__ = ["KSeq"]


@register
class KSeq(SequentialMultiDraftVerifier):
    """k-Seq: accept candidate X_i with probability min{1, q(X_i) / (ρ p(X_i))}, first accepted wins.

    If all k candidates are rejected, Y ~ res_ρ (eq. (9)). ρ defaults to ρ* (eq. (10)),
    computed per row by :func:`otspec.theory.multidraft.kseq_rho_star`. Lossless for
    candidates drawn i.i.d. from p; k is the row's number of real (non -1) candidates.

    Parameters
    ----------
    rho : float, optional
        Fixed division factor ρ ≥ 1 instead of ρ*. A ρ below ρ* makes the residual negative
        and the call raises ``ValueError``.
    """

    name = "kseq"
    label = "k-Seq at rho*"
    style = {"linestyle": "--", "color": "C1"}
    replacement = True

    def __init__(self, rho: float | None = None):
        if rho is not None and (isinstance(rho, bool) or not isinstance(rho, numbers.Real)):
            raise ValueError(f"rho: expected a finite division factor >= 1, got {rho!r} ({type(rho).__name__})")
        if rho is not None and not (float(rho) >= 1.0 and math.isfinite(float(rho))):
            raise ValueError(f"rho: expected a finite division factor >= 1, got {rho!r}")
        self.rho = None if rho is None else float(rho)

    def parameters(self, candidates, draft_probs, target_probs, *, validate: bool = True) -> KSeqParameters:
        """:func:`~otspec.theory.multidraft.kseq_parameters` with k = each row's number of real candidates
        (``validate=False``: nothing read back from a device)."""
        xp = namespace(draft_probs, target_probs)
        k = xp.sum(xp.astype(candidates >= 0, draft_probs.dtype), axis=-1)
        return kseq_parameters(draft_probs, target_probs, k, self.rho, check=validate, max_k=candidates.shape[-1])

    def acceptance_plan(self, candidates, draft_probs, target_probs, *, validate: bool = True):
        xp = namespace(draft_probs, target_probs)
        par = self.parameters(candidates, draft_probs, target_probs, validate=validate)
        p_x = gather_candidates(draft_probs, candidates)
        q_x = gather_candidates(target_probs, candidates)
        ok = (candidates >= 0) & (p_x > 0)
        ratio = q_x / (par.rho[:, None] * xp.where(ok, p_x, xp.ones_like(p_x)))
        return xp.where(ok, xp.minimum(ratio, 1.0), xp.zeros_like(p_x)), par.residual

    def expected_acceptance(self, draft, target, k: int) -> float:
        return kseq_acceptance(draft, target, k, self.rho)

    def __repr__(self):
        return "KSeq()" if self.rho is None else f"KSeq(rho={self.rho!r})"
