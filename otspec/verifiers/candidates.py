"""Verifiers of k candidates at one position: the shared machinery of the multi-draft family.

Specs: ``multi_draft_otm.md`` §2–8 and ``mcsd.md`` §4 (p is the draft, q the target).
Candidates are an int (B, k) array (-1 = no candidate) with the draft and target rows (B, V)
at the node (the ``"candidates"`` layout of :class:`~otspec.drafts.Draft`). Each verifier is
lossless — Y is exactly q-distributed once the candidates are averaged over — provided the
candidates are drawn as its ``replacement`` attribute says (i.i.d. from p, or sequentially
without replacement; :func:`~otspec.drafts.sample_candidates` draws either way).

* :class:`MultiDraftVerifier` — the :class:`~otspec.verifiers.base.Verifier` protocol on the
  candidates layout;
* :class:`SequentialMultiDraftVerifier` — schemes that test candidates in order and return
  the first accepted one (k-Seq, multi-round);
* :func:`membership_law`, :func:`membership_outcome` — schemes that draw Y and accept iff
  Y is a candidate (naive MCNS, the OTM plan).

Spec: ``docs/multi_draft_otm.md``, ``docs/mcsd.md``.
"""

from __future__ import annotations

from abc import abstractmethod

import array_api_compat

from ..distributions import namespace, sample_categorical, uniform
from ..drafts.draft import CANDIDATES, gather_candidates
from ..drafts.laws import one_hot
from .base import Outcome, Verifier, VerifierLaw

__all__ = [
    "MultiDraftVerifier",
    "SequentialMultiDraftVerifier",
    "gather_candidates",
    "membership",
    "membership_law",
    "membership_outcome",
    "stack_columns",
]

def _device(x):
    return array_api_compat.device(x)


class MultiDraftVerifier(Verifier):
    """A verifier of k candidate tokens at one position (``layout = "candidates"``)."""

    layout = CANDIDATES
    name = "multi"

    def expected_acceptance(self, draft, target, k: int) -> float:
        """P(a candidate is accepted) for k candidates drawn as this verifier requires, in closed form.

        ``draft`` and ``target`` are one row each. Verifiers without a closed form raise
        ``NotImplementedError``."""
        raise NotImplementedError(f"{self.name}: no closed-form acceptance")


class SequentialMultiDraftVerifier(MultiDraftVerifier):
    """Verifiers that test candidates in order and return the first accepted one.

    Subclasses supply :meth:`acceptance_plan`: the probability a_i of accepting candidate i
    given that candidates 1..i-1 were rejected (0 for a -1 slot), and the residual row that Y
    is drawn from when every candidate is rejected. Then (spec eq. (9b))::

        P(return candidate i | x^k) = a_i ∏_{j<i} (1 − a_j),   P(all rejected | x^k) = ∏_j (1 − a_j)
    """

    @abstractmethod
    def acceptance_plan(self, candidates, draft_probs, target_probs, *, validate: bool = True):
        """(a, residual): acceptance probabilities (B, k) and the residual rows (B, V) (``validate=False``: no check
        that reads back from a device)."""

    def _plan(self, candidates, p, q, validate: bool):
        """:meth:`acceptance_plan`, or with no candidate (k = 0) none to accept and q as the residual."""
        if candidates.shape[1] == 0:
            return namespace(p).zeros((p.shape[0], 0), dtype=p.dtype, device=_device(p)), q
        return self.acceptance_plan(candidates, p, q, validate=validate)

    def law(self, candidates, draft_probs, target_probs, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        candidates, p = d.tokens, d.draft_probs
        xp = namespace(p, d.target_probs)
        a, res = self._plan(candidates, p, d.target_probs, True)
        B, V = p.shape
        survive = xp.ones((B,), dtype=p.dtype, device=_device(p))
        accepted = xp.zeros_like(p)
        for i in range(candidates.shape[1]):
            accepted = accepted + (survive * a[:, i])[:, None] * one_hot(candidates[:, i], V, p)
            survive = survive * (1.0 - a[:, i])
        return VerifierLaw.from_masses(accepted, survive[:, None] * res)

    def sample(self, candidates, draft_probs, target_probs, rng, *, validate=True):
        d = self.check(candidates, draft_probs, target_probs, validate=validate)
        candidates, p = d.tokens, d.draft_probs
        xp = namespace(p, d.target_probs)
        a, res = self._plan(candidates, p, d.target_probs, validate)
        B, k = candidates.shape
        y_res = xp.astype(sample_categorical(res, rng, check=validate), xp.int64)
        if k == 0:
            return Outcome.from_candidates(y_res, xp.zeros((B,), dtype=xp.bool, device=_device(p)),
                                           xp.full_like(y_res, -1))
        hit = uniform(rng, (B, k), p) < a  # a = 0 on -1 slots, so they never hit
        stop = xp.concat([hit, xp.ones((B, 1), dtype=xp.bool, device=_device(p))], axis=-1)
        first = xp.astype(xp.argmax(xp.astype(stop, xp.int8), axis=-1), xp.int64)  # k if none
        accepted = first < k
        chosen = xp.take_along_axis(xp.astype(candidates, xp.int64), xp.clip(first, max=k - 1)[:, None], axis=-1)[:, 0]
        return Outcome.from_candidates(xp.where(accepted, chosen, y_res), accepted,
                                       xp.where(accepted, first, xp.full_like(first, -1)))


def stack_columns(cols, like):
    """Stack (B,) columns into (B, k); an empty list gives (B, 0)."""
    xp = namespace(like)
    if not cols:
        return xp.zeros((like.shape[0], 0), dtype=like.dtype, device=_device(like))
    return xp.stack(cols, axis=1)


def membership(candidates, like):
    """1{y ∈ S(candidates)} as (B, V) rows of ``like``'s dtype."""
    xp = namespace(like)
    member = xp.zeros_like(like)
    for i in range(candidates.shape[1]):
        member = xp.maximum(member, one_hot(candidates[:, i], like.shape[-1], like))
    return member


def membership_law(candidates, kernel) -> VerifierLaw:
    """Law of "Y ~ kernel, accepted iff Y ∈ S(candidates)" for kernel rows (B, V)."""
    member = membership(candidates, kernel)
    return VerifierLaw.from_masses(kernel * member, kernel * (1.0 - member))


def membership_outcome(candidates, y) -> Outcome:
    """Outcome of "accepted iff Y ∈ S": index = first position holding Y."""
    xp = namespace(y)
    B, k = candidates.shape
    if k == 0:
        return Outcome.from_candidates(y, xp.zeros((B,), dtype=xp.bool, device=_device(y)), xp.full_like(y, -1))
    match = xp.astype(candidates, xp.int64) == y[:, None]
    accepted = xp.any(match, axis=-1)
    first = xp.astype(xp.argmax(xp.astype(match, xp.int8), axis=-1), xp.int64)
    return Outcome.from_candidates(y, accepted, xp.where(accepted, first, xp.full_like(first, -1)))
