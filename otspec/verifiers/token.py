"""TokenVerify: standard speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

Spec: ``shared/reference/token_and_block_verification.md`` §3.

Position i is accepted with probability a_i = min{1, q(X_i|X^{i-1}) / p(X_i|X^{i-1})},
verification stops at the first rejection, and the extra token is drawn from
the residual (q − p)_+ / TV at the first rejected position (eq. (2)), or from
q(·|X^L) when the whole block is accepted (bonus token). Law of τ: eq. (3).
"""

from __future__ import annotations

from ..distributions import namespace
from .base import Outcome, Verifier, VerifierLaw, gather_tokens
from .kernels import correction_law, draw_correction, first_rejection_law, first_rejection_sample

__all__ = ["TokenVerify", "acceptance_ratios"]


def acceptance_ratios(draft_tokens, draft_probs, target_probs):
    """a_i = min{1, q(X_i|X^{i-1}) / p(X_i|X^{i-1})}, shape (B, L) (spec §3, line 3)."""
    xp = namespace(draft_probs, target_probs)
    p_x = gather_tokens(draft_probs, draft_tokens)
    q_x = gather_tokens(target_probs, draft_tokens)
    return xp.minimum(q_x / p_x, 1.0)


class TokenVerify(Verifier):
    """Token-by-token speculative sampling; lossless, next iteration uses the plain target."""

    name = "token"
    label = "token verification"
    style = {"marker": "o", "color": "C0"}

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate)
        a = acceptance_ratios(d.tokens, d.draft_probs, d.target_probs)  # (B, L)
        return VerifierLaw(first_rejection_law(a), correction_law(d.draft_probs, d.target_probs))  # eq. (3)

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate)
        tau = first_rejection_sample(acceptance_ratios(d.tokens, d.draft_probs, d.target_probs), rng)
        return Outcome(tau, draw_correction(tau, d.draft_probs, d.target_probs, rng))
