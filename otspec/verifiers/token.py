"""TokenVerify: standard speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

Spec: ``shared/reference/token_and_block_verification.md`` §3.

Position i is accepted with probability a_i = min{1, q(X_i|X^{i-1}) / p(X_i|X^{i-1})},
verification stops at the first rejection, and the extra token is drawn from
the residual (q − p)_+ / TV at the first rejected position (eq. (2)), or from
q(·|X^L) when the whole block is accepted (bonus token). Law of τ: eq. (3).
"""

from __future__ import annotations

import array_api_compat

from ..distributions import namespace, uniform
from .base import Outcome, Verifier, VerifierLaw, check_single_draft, gather_tokens
from .kernels import correction_law, draw_correction

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

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True):
        draft_tokens, draft_probs, target_probs = check_single_draft(
            draft_tokens, draft_probs, target_probs, validate=validate
        )
        xp = namespace(draft_probs, target_probs)
        a = acceptance_ratios(draft_tokens, draft_probs, target_probs)  # (B, L)
        B = a.shape[0]
        one = xp.ones((B, 1), dtype=a.dtype, device=array_api_compat.device(a))
        reach = xp.cumulative_prod(a, axis=-1, include_initial=True)  # P(tau >= l), l = 0..L
        stop = xp.concat([1.0 - a, one], axis=-1)  # P(reject at l+1 | reached l); 1 at l = L
        accept_probs = reach * stop  # eq. (3)
        return VerifierLaw(accept_probs, correction_law(draft_probs, target_probs))

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True):
        draft_tokens, draft_probs, target_probs = check_single_draft(
            draft_tokens, draft_probs, target_probs, validate=validate
        )
        xp = namespace(draft_probs, target_probs)
        B, L = draft_tokens.shape
        a = acceptance_ratios(draft_tokens, draft_probs, target_probs)
        u = uniform(rng, (B, L), a)
        rejected = xp.concat([u >= a, xp.ones((B, 1), dtype=xp.bool, device=array_api_compat.device(a))], axis=-1)
        tau = xp.argmax(xp.astype(rejected, xp.int8), axis=-1)  # first rejection; L if none
        return Outcome(tau, draw_correction(tau, draft_probs, target_probs, rng))
