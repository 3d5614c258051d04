"""Known failures of real speculative samplers, each re-created as a small faulty sampler on the chain protocol.

Every entry is ``module:function`` for the audit (``otspec.audit.catalogue:accept_all``) and carries its public
reference and the sample size at which the default audit flags it (:data:`CATALOGUE`; the tests check that it is
flagged there and that the lossless samplers pass at the same size). The re-creations are ours, written from the
issue descriptions: where a bug lived in a candidate generator rather than the verifier, it is re-created at the
first emitted token (the sampler reports the token it would have emitted as ``next_token`` with no draft kept).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..distributions import sample_categorical

__all__ = ["CATALOGUE", "Failure", "accept_all", "bf16_draft_rows", "draft_prob_one", "greedy_draft_full_row",
           "residual_from_target", "silent_greedy_target", "unsampled_draft_row"]


def _token_verification(x, p_used, q, rng, residual=None):
    """Token verification of drafts ``x`` (B, L) with acceptance rows ``p_used`` (B, L, V) and target rows q
    (B, L + 1, V); ``residual(p_used, q, tau)`` may replace the (q − p)_+ rows (B, V) of the correction."""
    B, L = x.shape
    rows = np.arange(B)
    px = np.take_along_axis(p_used, x[..., None], axis=-1)[..., 0]
    qx = np.take_along_axis(q[:, :L], x[..., None], axis=-1)[..., 0]
    a = np.minimum(1.0, qx / np.where(px > 0, px, 1.0))
    miss = rng.random((B, L)) >= a
    tau = np.where(miss.any(axis=1), np.argmax(miss, axis=1), L)
    at = np.minimum(tau, L - 1)
    res = np.maximum(q[rows, at] - p_used[rows, at], 0.0) if residual is None else residual(p_used, q, at)
    res = np.where(res.sum(axis=1, keepdims=True) > 0, res, q[rows, at])
    corr = np.asarray(sample_categorical(res / res.sum(axis=1, keepdims=True), rng), dtype=np.int64)
    bonus = np.asarray(sample_categorical(q[:, L], rng), dtype=np.int64)
    return tau, np.where(tau < L, corr, bonus)


def accept_all(draft_tokens, draft_probs, target_probs, rng):
    """Accepts every draft, then a bonus token from the target (transformers PR #28508)."""
    B, L = draft_tokens.shape
    return np.full(B, L), np.asarray(sample_categorical(target_probs[:, L], rng), dtype=np.int64)


def draft_prob_one(draft_tokens, draft_probs, target_probs, rng):
    """Top-k drafting with the draft probability taken as 1 (EAGLE #183, #221): the acceptance test reads
    q(x)/1 while the residual is (q − p)_+ of the real row. (With the residual (q − δ_x)_+ of the same one-hot row
    the chain would stay exact: accepting x with q(x) and else drawing q without x is lossless for any x.)"""
    one_hot = np.zeros_like(draft_probs)
    np.put_along_axis(one_hot, draft_tokens[..., None], 1.0, axis=-1)
    return _token_verification(draft_tokens, one_hot, target_probs, rng,
                               residual=lambda p, q, at: np.maximum(q[np.arange(q.shape[0]), at]
                                                                    - draft_probs[np.arange(q.shape[0]), at], 0.0))


def residual_from_target(draft_tokens, draft_probs, target_probs, rng):
    """After a rejection the token is drawn from q instead of the residual (q − p)_+: the skew of token probabilities
    that xLLM PR #2175 fixed, in its most common form."""
    return _token_verification(draft_tokens, draft_probs, target_probs, rng,
                               residual=lambda p, q, at: q[np.arange(q.shape[0]), at].copy())


def _bfloat16(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to bfloat16 (8 significant bits, round to nearest even), back in float64."""
    bits = np.frombuffer(np.ascontiguousarray(x, dtype=np.float32).tobytes(), dtype=np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).astype(np.uint32)
    return np.frombuffer(rounded.tobytes(), dtype=np.float32).reshape(x.shape).astype(np.float64)


def bf16_draft_rows(draft_tokens, draft_probs, target_probs, rng):
    """Drafts sampled in bfloat16 but accepted in float32 (DeepSpec #31): the rows the acceptance test reads are the
    softmax of the draft's logits rounded to bfloat16 (logits log p shifted to a largest logit of 24, as a model's
    are), not the rows the drafts were drawn from."""
    with np.errstate(divide="ignore"):
        logits = np.log(draft_probs)
    logits = logits - logits.max(axis=-1, keepdims=True) + 24.0
    p16 = np.where(draft_probs > 0, np.exp(_bfloat16(np.where(draft_probs > 0, logits, 0.0))), 0.0)
    return _token_verification(draft_tokens, p16 / p16.sum(axis=-1, keepdims=True), target_probs, rng)


def unsampled_draft_row(draft_tokens, draft_probs, target_probs, rng):
    """A candidate generator returning a row it did not sample from (transformers #47932): acceptance against the
    draft row sharpened to temperature 0.5 (the processed logits) while the drafts came from the raw row."""
    sharp = draft_probs**2
    return _token_verification(draft_tokens, sharp / sharp.sum(axis=-1, keepdims=True), target_probs, rng)


def greedy_draft_full_row(draft_tokens, draft_probs, target_probs, rng):
    """An assistant that drafted greedily while its full softmax was the draft row of the acceptance test
    (transformers #32867, reverted in #33534), at the first emitted token: the draft a = argmax p is kept with
    probability min{1, q(a)/p(a)}, else the residual (q − p)_+ is drawn."""
    B = draft_tokens.shape[0]
    greedy = np.argmax(draft_probs[:, :1], axis=-1)
    tau, token = _token_verification(greedy, draft_probs[:, :1], target_probs[:, :2], rng)
    return np.zeros(B, dtype=np.int64), np.where(tau >= 1, greedy[:, 0], token)


def silent_greedy_target(draft_tokens, draft_probs, target_probs, rng):
    """Temperature > 0 silently running greedy (SGLang #31214): drafts are kept while they equal the target's argmax,
    and the emitted token is that argmax."""
    B, L = draft_tokens.shape
    best = np.argmax(target_probs, axis=-1)
    miss = draft_tokens != best[:, :L]
    tau = np.where(miss.any(axis=1), np.argmax(miss, axis=1), L)
    return tau, best[np.arange(B), tau]


@dataclass(frozen=True)
class Failure:
    """A catalogue entry: the faulty sampler, its public reference, and the samples at which the default audit
    (synthetic rows) flags it."""

    name: str
    sampler: object
    reference: str
    flagged_at: int


CATALOGUE = {f.name: f for f in (
    Failure("accept_all", accept_all, "transformers PR #28508 (a sampler accepting every draft)", 2_000),
    Failure("draft_prob_one", draft_prob_one, "EAGLE issues #183, #221 (top-k drafts with probability 1)", 2_000),
    Failure("residual_from_target", residual_from_target, "xLLM PR #2175 (a residual that skewed token probabilities)",
            5_000),
    Failure("unsampled_draft_row", unsampled_draft_row, "transformers #47932 (a row the generator did not sample from)",
            5_000),
    Failure("greedy_draft_full_row", greedy_draft_full_row,
            "transformers #32867, reverted in #33534 (greedy drafts, full softmax as the draft row)", 5_000),
    Failure("silent_greedy_target", silent_greedy_target, "SGLang #31214 (temperature > 0 silently running greedy)",
            2_000),
    Failure("bf16_draft_rows", bf16_draft_rows, "DeepSpec #31 (drafts sampled in bf16, accepted in fp32)",
            3_000_000),
)}
