"""The biased over-acceptance family on the verifier protocol: Decoding-OPT and Decoding-UNO.

Spec ``yin_theory.md`` §7, eq. (9) (p is the draft, q the target). Token by token, drafted
X_i is accepted with probability b_ε(X_i) = min{1, (q(X_i) + ε)/p(X_i)} ≥ the lossless
min{1, q/p}; at the first rejection the token is resampled from P — Theorem 4's optimal
P* = Norm[(q − p b_ε)_+] (Decoding-OPT, on the rejection–bias front) or q itself
(Decoding-UNO, above it) — and a fully accepted block gets a bonus token from q(·|X^L).
ε = 0 with OPT is ordinary speculative sampling. These verifiers are *not* lossless: their
exact law (:meth:`law`, the exact engine) gives the bias, equal at one position to
:func:`otspec.theory.pareto.over_acceptance`.

Spec: ``docs/yin_theory.md``.
"""

from __future__ import annotations

import math
import numbers

import array_api_compat

from ..distributions import namespace, sample_categorical
from ..theory.pareto import over_acceptance_kernel
from .base import Outcome, Verifier, VerifierLaw
from .kernels import drafted_mask, drafted_probs, first_rejection_law, first_rejection_sample
from .registry import register

__all__ = ["DecodingOPT", "DecodingUNO", "OverAcceptance"]


class OverAcceptance(Verifier):
    """Over-acceptance b_ε with resampling ``mode`` "opt" (P = P*) or "uno" (P = q); see the module docstring."""

    name = "over_acceptance"
    lossless = False
    mode = "opt"

    def __init__(self, eps: float = 0.0):
        if isinstance(eps, bool | str) or not isinstance(eps, numbers.Real):  # '0.1' or True is not a parameter
            raise ValueError(f"eps: expected a number >= 0 (inf allowed), got {eps!r} ({type(eps).__name__})")
        eps = float(eps)
        if math.isnan(eps) or eps < 0:
            raise ValueError(f"eps: expected an over-acceptance parameter >= 0 (inf allowed), got {eps!r}")
        self.eps = eps

    ragged = True

    def _plan(self, d):
        """(acceptance b_ε at each drafted position (B, L), 0 past a row's length; the row of Y for every τ (B, L+1, V):
        the resampling law P below a row's length, the bonus row q(·|X^τ) at it)."""
        xp = namespace(d.draft_probs, d.target_probs)
        p_x, q_x = drafted_probs(d.tokens, d.draft_probs, d.target_probs, d.lengths)  # 1 and 0 past a length
        accept = xp.minimum((q_x + self.eps) / p_x, 1.0)  # drafted tokens have p > 0 (checked)
        resample = over_acceptance_kernel(d.draft_probs, d.target_probs[:, :-1, :], self.eps, self.mode)[2]
        rows = xp.concat([resample, d.target_probs[:, -1:, :]], axis=1)
        if d.lengths is None:
            return accept, rows
        accept = xp.where(drafted_mask(d.lengths, accept), accept, xp.zeros_like(accept))  # ε accepts no padding
        at = xp.arange(rows.shape[1], device=array_api_compat.device(rows))[None, :, None] == d.lengths[:, None, None]
        return accept, xp.where(at, d.target_probs, rows)

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        accept, rows = self._plan(d)
        return VerifierLaw(first_rejection_law(accept), rows)

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        xp = namespace(d.draft_probs, d.target_probs)
        accept, rows = self._plan(d)
        tau = first_rejection_sample(accept, rng)
        picked = xp.take_along_axis(rows, xp.astype(tau, xp.int64)[:, None, None], axis=1)[:, 0, :]
        return Outcome(tau, sample_categorical(picked, rng, check=validate))

    def __repr__(self):
        return f"{type(self).__name__}(eps={self.eps!r})"


@register
class DecodingOPT(OverAcceptance):
    """Over-acceptance with Theorem 4's optimal resampling P* (on the rejection–bias front)."""

    name = "decoding_opt"
    label = "Decoding-OPT (P = P*)"
    style = {"marker": "s", "color": "C0"}
    mode = "opt"


@register
class DecodingUNO(OverAcceptance):
    """Over-acceptance resampling from q (above the rejection–bias front)."""

    name = "decoding_uno"
    label = "Decoding-UNO (P = q)"
    style = {"marker": "o", "color": "C3"}
    mode = "uno"
