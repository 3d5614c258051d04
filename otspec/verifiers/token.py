"""TokenVerify: standard speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

Spec: ``docs/token_and_block_verification.md`` §3.

Position i is accepted with probability a_i = min{1, q(X_i|X^{i-1}) / p(X_i|X^{i-1})},
verification stops at the first rejection, and the extra token is drawn from
the residual (q − p)_+ / TV at the first rejected position (eq. (2)), or from
q(·|X^L) when the whole block is accepted (bonus token). Law of τ: eq. (3).
Ragged batches (``lengths``): a row's padded positions have a = 0, so τ stops at
its length at the latest, and the bonus row there is its own q(·|X^{L_b}).
"""

from __future__ import annotations

from ..distributions import namespace
from ..theory.blocks import expected_accepted_token
from .base import Outcome, Verifier, VerifierLaw
from .kernels import (
    correction_law,
    drafted_probs,
    draw_correction,
    first_rejection_law,
    first_rejection_sample,
)
from .registry import ClosedForm, register

__all__ = ["TokenVerify", "acceptance_ratios"]


def acceptance_ratios(draft_tokens, draft_probs, target_probs, lengths=None):
    """a_i = min{1, q(X_i|X^{i-1}) / p(X_i|X^{i-1})}, shape (B, L) (spec §3, line 3); 0 past ``lengths``."""
    xp = namespace(draft_probs, target_probs)
    p_x, q_x = drafted_probs(draft_tokens, draft_probs, target_probs, lengths)
    return xp.minimum(q_x / p_x, 1.0)


@register
class TokenVerify(Verifier):
    """Token-by-token speculative sampling; lossless, next iteration uses the plain target."""

    name = "token"
    label = "token verification"
    style = {"marker": "o", "color": "C0"}
    ragged = True
    closed_form = ClosedForm.TOKEN

    def expected_accepted(self, draft, target, length):
        """Eq. (4) (:func:`otspec.theory.expected_accepted_token`)."""
        return expected_accepted_token(draft, target, length)

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        a = acceptance_ratios(d.tokens, d.draft_probs, d.target_probs, d.lengths)  # (B, L)
        return VerifierLaw(first_rejection_law(a),  # eq. (3)
                           correction_law(d.draft_probs, d.target_probs, lengths=d.lengths))

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        a = acceptance_ratios(d.tokens, d.draft_probs, d.target_probs, d.lengths)  # a = 0 past a row's length
        tau = first_rejection_sample(a, rng)
        return Outcome(tau, draw_correction(tau, d.draft_probs, d.target_probs, rng, lengths=d.lengths))
