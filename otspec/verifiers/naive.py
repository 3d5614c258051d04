"""Naive multi-candidate sampling, MCNS (MCSD §4.3; spec ``multi_draft_otm.md`` §8)."""

from __future__ import annotations

from ..distributions import namespace, sample_categorical
from ..theory.multidraft import naive_acceptance
from .candidates import MultiDraftVerifier, membership_law, membership_outcome
from .registry import register

__all__ = ["NaiveMultiCandidate"]


@register
class NaiveMultiCandidate(MultiDraftVerifier):
    """Y ~ q independently of the candidates; accepted iff Y ∈ S(candidates).

    Y is exactly q-distributed whatever the law of the candidates, so it is lossless for
    i.i.d. and without-replacement drafts alike (``replacement = True`` is only the default
    pairing). Acceptance Σ_y q(y)·1{y ∈ S} (:func:`otspec.theory.multidraft.naive_acceptance`).
    """

    name = "naive"
    label = "naive (MCNS)"
    style = {"linestyle": "-", "color": "C7"}
    replacement = True
    #: Lossless whatever the candidates' law (the tree engines accept any draw mode).
    any_draw_mode = True
    #: ... and whatever chose them: Y ~ q is drawn without looking at the candidates, so chosen (top-k)
    #: candidates keep it exact; at fixed candidates C its acceptance q(C) is the most any lossless verifier gets.
    any_candidates = True

    def expected_acceptance(self, draft, target, k: int) -> float:
        return naive_acceptance(draft, target, k, self.replacement)

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        return membership_law(d.tokens, d.target_probs)

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        xp = namespace(d.target_probs)
        return membership_outcome(d.tokens, xp.astype(sample_categorical(d.target_probs, rng, check=validate), xp.int64))
