"""Batched building blocks shared by the single-draft verifiers.

All functions take arrays with the batch on the leading axis and work on numpy
or torch (array-API namespace of the inputs). Shapes: B drafts, L positions, V tokens.

Spec: ``docs/token_and_block_verification.md``.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..distributions import namespace, positive_part, residual, sample_categorical, uniform
from .base import gather_tokens

__all__ = [
    "drafted_mask",
    "drafted_probs",
    "first_rejection_law",
    "first_rejection_sample",
    "log_ratios",
    "ratio_scales",
    "last_pass_law",
    "last_pass_sample",
    "correction_law",
    "draw_correction",
]


def drafted_mask(lengths, like):
    """(B, L) bool: position i of row b was drafted (i < ``lengths[b]``); all True when ``lengths`` is None."""
    xp = namespace(like)
    L = like.shape[1]
    ids = xp.arange(L, device=array_api_compat.device(like))
    if lengths is None:
        return xp.ones(like.shape[:2], dtype=xp.bool, device=array_api_compat.device(like))
    return ids[None, :] < lengths[:, None]


def drafted_probs(draft_tokens, draft_probs, target_probs, lengths=None):
    """(p(X_i|X^{i-1}), q(X_i|X^{i-1})), shape (B, L) each; past a row's length (padding) 1 and 0.

    The ragged layout: a row that drafted ``lengths[b]`` < L tokens has arbitrary padding after
    them (zero rows included); its padded positions read as certain rejections of nothing.
    """
    xp = namespace(draft_probs, target_probs)
    p_x = gather_tokens(draft_probs, draft_tokens)
    q_x = gather_tokens(target_probs, draft_tokens)
    if lengths is None:
        return p_x, q_x
    mask = drafted_mask(lengths, p_x)
    return xp.where(mask, p_x, 1.0), xp.where(mask, q_x, 0.0)


def log_ratios(draft_tokens, draft_probs, target_probs, lengths=None):
    """log q(X_i|X^{i-1}) − log p(X_i|X^{i-1}), shape (B, L); −inf where the target gives 0 (and past ``lengths``).

    Drafted tokens have positive draft probability (checked by the protocol), so
    the result is never NaN.
    """
    xp = namespace(draft_probs, target_probs)
    p_x, q_x = drafted_probs(draft_tokens, draft_probs, target_probs, lengths)
    log_q = xp.where(q_x > 0, xp.log(xp.where(q_x > 0, q_x, 1.0)), -xp.inf)
    return log_q - xp.log(p_x)


def ratio_scales(log_ratio):
    """(A, B) = (min(ρ, 1), min(1/ρ, 1)) for ρ = exp(log_ratio), without overflow.

    ``(ρ q − p)_+`` and ``(A q − B p)_+`` differ by the positive factor
    max(ρ, 1), so residuals and ratios of residual masses can use (A, B) for
    any ρ in [0, ∞] — this is how joint block probabilities stay in log space.
    """
    xp = namespace(log_ratio)
    zero = xp.zeros_like(log_ratio)
    return xp.exp(xp.minimum(log_ratio, zero)), xp.exp(xp.minimum(-log_ratio, zero))


def first_rejection_law(a):
    """Law of τ = first i with η_i ≥ a_i (τ = L if none): P(τ = l) = (∏_{i<=l} a_i)(1 − a_{l+1}), shape (B, L+1).

    The stopping rule of token-by-token verification (spec eq. (3)) for per-position
    acceptance probabilities ``a`` (B, L).
    """
    xp = namespace(a)
    one = xp.ones((a.shape[0], 1), dtype=a.dtype, device=array_api_compat.device(a))
    reach = xp.cumulative_prod(a, axis=-1, include_initial=True)  # P(tau >= l), l = 0..L
    return reach * xp.concat([1.0 - a, one], axis=-1)  # P(reject at l+1 | reached l); 1 at l = L


def first_rejection_sample(a, rng):
    """Sample τ = first i with u_i ≥ a_i (L if none), shape (B,)."""
    xp = namespace(a)
    B, L = a.shape
    rejected = xp.concat([uniform(rng, (B, L), a) >= a,
                          xp.ones((B, 1), dtype=xp.bool, device=array_api_compat.device(a))], axis=-1)
    return xp.argmax(xp.astype(rejected, xp.int8), axis=-1)


def last_pass_law(h):
    """Law of τ = max{i : η_i ≤ h_i} with h_0 = 1: P(τ = i) = h_i ∏_{j>i} (1 − h_j).

    ``h`` has shape (B, L+1) and ``h[:, 0]`` must be 1. This is the stopping rule
    of both block verifiers (spec eq. (15); v1 Algorithm 3 read backwards).
    """
    xp = namespace(h)
    keep = xp.flip(1.0 - h, axis=-1)  # 1 - h_L, ..., 1 - h_0
    # survive[i] = prod_{j > i} (1 - h_j): exclusive cumulative product from the end
    survive = xp.flip(xp.cumulative_prod(keep, axis=-1, include_initial=True)[:, :-1], axis=-1)
    return h * survive


def last_pass_sample(h, rng):
    """Sample τ = max{i : u_i < h_i} (``h[:, 0] = 1``), shape (B,)."""
    xp = namespace(h)
    B, L1 = h.shape
    passed = uniform(rng, (B, L1), h) < h
    ids = xp.arange(L1, device=array_api_compat.device(h))
    return xp.max(xp.where(passed, ids, xp.zeros_like(ids)), axis=-1)


def correction_law(draft_probs, target_probs, target_scale=None, draft_scale=None, lengths=None):
    """Law of the extra token for every τ: shape (B, L+1, V).

    Row i < L is the residual (α_i q(·|X^i) − β_i p(·|X^i))_+ normalised, with
    per-position scales α = ``target_scale`` and β = ``draft_scale`` (shape (B, L),
    default 1); row L — or row ``lengths[b]`` of a ragged batch — is the bonus row q(·|X^L).
    """
    xp = namespace(draft_probs, target_probs)
    scaled_q = target_probs[:, :-1, :] if target_scale is None else target_scale[..., None] * target_probs[:, :-1, :]
    scaled_p = draft_probs if draft_scale is None else draft_scale[..., None] * draft_probs
    law = xp.concat([residual(scaled_q, scaled_p), target_probs[:, -1:, :]], axis=1)
    if lengths is None:
        return law
    ids = xp.arange(law.shape[1], device=array_api_compat.device(law))
    return xp.where((ids[None, :] == lengths[:, None])[..., None], target_probs, law)


def draw_correction(tau, draft_probs, target_probs, rng, target_scale=None, draft_scale=None, lengths=None):
    """One extra token per draft: from the scaled residual at τ < L (τ < ``lengths``), else the bonus row; shape (B,).

    The residual is sampled unnormalised (``sample_categorical`` scales by the
    row total). Where its mass is 0 — a rejection of probability 0 — the target
    row is used, as :func:`otspec.distributions.residual` does.
    """
    xp = namespace(draft_probs, target_probs)
    L = draft_probs.shape[1]
    rows = xp.arange(tau.shape[0], device=array_api_compat.device(tau))
    t_row = target_probs[rows, tau]
    if L == 0:
        return sample_categorical(t_row, rng, check=False)
    at = xp.minimum(tau, L - 1)
    p_row = draft_probs[rows, at]
    surplus = positive_part(t_row, p_row if draft_scale is None else draft_scale[rows, at][:, None] * p_row,
                            None if target_scale is None else target_scale[rows, at][:, None])
    use_residual = (tau < (L if lengths is None else lengths)) & (xp.sum(surplus, axis=-1) > 0)
    if isinstance(surplus, np.ndarray):  # this call's own temporary: the bonus rows go in place, no copy of the rest
        bonus = ~use_residual
        surplus[bonus] = t_row[bonus]
    else:
        surplus = xp.where(use_residual[:, None], surplus, t_row)
    # valid inputs give valid rows here, so the draw skips the check that would read back from a device
    return sample_categorical(surplus, rng, check=False)
