"""Block verification: the published forward algorithm and the v1 backward induction.

Spec: ``docs/token_and_block_verification.md`` §8 (v1 Algorithm 3)
and §9 (ICLR 2025 "Block Verification Accelerates Speculative Decoding").

Both decide τ by the same rule — τ = max{i : η_i ≤ h_i} with h_0 = 1, i.e.
P(τ = i) = h_i ∏_{j>i} (1 − h_j) (eq. (15)) — and draw the extra token from a
scaled residual (α_τ q − β_τ p)_+; they differ in h and in the scales.

* :class:`BlockVerify` (published, on-path): running weights
  w_i = min{1, w_{i−1} q(X_i|X^{i−1}) / p(X_i|X^{i−1})} (eq. (13)),
  h_i = m_i / (m_i + 1 − w_i) with m_i = Σ_x (w_i q(x|X^i) − p(x|X^i))_+ (eq. (14)),
  h_L = w_L, residual (w_τ q − p)_+ (eq. (16)); the next iteration uses the plain
  target. Expected accepted length: eq. (17).
* :class:`BackwardBlockVerify` (v1, full information): with ρ_j = q(X^j)/p(X^j)
  the block-part likelihood ratio, h_L = min{1, ρ_L} and
  h_j = min{1, p_remain(X^j) / p_rej(X^j)} (eqs. (12a)-(12b)), residual
  (ρ_τ q − p)_+ (eq. (12c)). Its correction reaches into the next iteration: the
  target of the rest of the block becomes the residual chain, described by the
  outcome's ``carry`` (see :mod:`otspec.verifiers.carry`). Expected accepted
  length: the block-OT optimum eq. (8).

Only on-path rows are needed by either verifier in the current iteration:
joint block probabilities are products of on-path conditionals, kept in log
space (``ratio_scales``), so long blocks (L = 64) neither underflow nor overflow.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from ..distributions import host_to_like, namespace, positive_part, to_host
from ..theory.blocks import expected_accepted_block, expected_accepted_optimal
from .base import Outcome, Verifier, VerifierLaw
from .carry import ResidualWindows, carry_forward, score_carried
from .kernels import (
    correction_law,
    draw_correction,
    last_pass_law,
    last_pass_sample,
    log_ratios,
    ratio_scales,
)
from .registry import ClosedForm, register

__all__ = ["BlockVerify", "BackwardBlockVerify", "backward_commit_probs", "block_weights", "commit_probs",
           "published_commit_probs", "running_weights"]


def _ones(xp, like, n):
    return xp.ones((like.shape[0], n), dtype=like.dtype, device=array_api_compat.device(like))


def _safe_log(xp, x):
    return xp.where(x > 0, xp.log(xp.where(x > 0, x, 1.0)), -xp.inf)


def _carried_log_ratio(xp, log_ratio, target_prob, draft_prob):
    """log T(X^τ, Y)/P(X^τ, Y) = s_τ + log q(Y|X^τ) − log p(Y|X^τ); +inf where p(Y|X^τ) = 0.

    (+inf makes the carried residual equal the target itself, the right limit;
    outcomes with q(Y|X^τ) = 0 have probability 0 and are never carried.)
    """
    safe_p = xp.where(draft_prob > 0, draft_prob, 1.0)
    return xp.where(draft_prob > 0, log_ratio + _safe_log(xp, target_prob) - xp.log(safe_p), xp.inf)


def running_weights(log_ratio):
    """w_0..w_L (eq. (13)) from the drafted tokens' log q/p ratios (B, L): w_i = min{1, w_{i−1} ρ_i}, in log space."""
    xp = namespace(log_ratio)
    logs = [xp.zeros_like(log_ratio[:, 0]) if log_ratio.shape[1] else
            xp.zeros((log_ratio.shape[0],), dtype=log_ratio.dtype, device=array_api_compat.device(log_ratio))]
    for i in range(log_ratio.shape[1]):
        logs.append(xp.minimum(logs[-1] + log_ratio[:, i], 0.0))
    return xp.exp(xp.stack(logs, axis=1))


def block_weights(draft_tokens, draft_probs, target_probs, lengths=None):
    """Running weights w_0..w_L (eq. (13)), shape (B, L+1), computed in log space (0 past ``lengths``)."""
    return running_weights(log_ratios(draft_tokens, draft_probs, target_probs, lengths))


def commit_probs(w, surplus):
    """h_0..h_L (eqs. (14a)-(14c)) from the weights w (B, L+1) and the surplus masses m_i = Σ_x (w_i q − p)_+ at
    positions 1..L−1 (B, L−1): h_0 = 1, h_i = m_i / (m_i + 1 − w_i), h_L = w_L."""
    xp = namespace(w)
    L = w.shape[1] - 1
    w_mid = w[:, 1:L]
    den = surplus + 1.0 - w_mid
    h_mid = xp.where(den > 0, surplus / xp.where(den > 0, den, 1.0), 0.0)
    return xp.concat([_ones(xp, w, 1), h_mid, w[:, max(L, 1):]], axis=1)  # h_L = w_L (nothing more when L = 0)


def published_commit_probs(draft_probs, target_probs, w, lengths=None):
    """h_0..h_L of the published algorithm (eqs. (14a)-(14c)), shape (B, L+1).

    In a ragged batch row b's last position is ``lengths[b]``: h there is w (eq. (14c)), and 0 past it.
    """
    xp = namespace(draft_probs, target_probs)
    L = draft_probs.shape[1]
    w_mid = w[:, 1:L]
    m = xp.sum(positive_part(target_probs[:, 1:L, :], draft_probs[:, 1:L, :], w_mid[..., None]), axis=-1)
    h = commit_probs(w, m)
    if lengths is None:
        return h
    ids = xp.arange(L + 1, device=array_api_compat.device(w))[None, :]
    return xp.where(ids < lengths[:, None], h, xp.where(ids == lengths[:, None], w, 0.0))


def backward_commit_probs(draft_tokens, draft_probs, target_probs, lengths=None):
    """(h, A, B, s) of v1 Algorithm 3.

    ``s`` (B, L+1) is log ρ_j = log q(X^j)/p(X^j); ``A, B`` = min(ρ_j, 1),
    min(1/ρ_j, 1); ``h_j`` = min{1, p_remain/p_rej} at X^j for j < L (1 when
    p_rej = 0, and exactly 1 at the root) and h_L = min{1, ρ_L}. In a ragged batch
    row b's last position is ``lengths[b]``: h there is min{1, ρ}, and 0 past it
    (``s`` is −inf past it).
    """
    xp = namespace(draft_probs, target_probs)
    lr = log_ratios(draft_tokens, draft_probs, target_probs, lengths)
    s = xp.cumulative_sum(lr, axis=-1, include_initial=True)
    a, b = ratio_scales(s)
    L = draft_probs.shape[1]
    diff = a[:, :L, None] * target_probs[:, :L, :] - b[:, :L, None] * draft_probs
    remain = xp.sum(xp.clip(diff, min=0.0), axis=-1)
    reject = xp.sum(xp.clip(-diff, min=0.0), axis=-1)
    h = xp.where(reject > 0, xp.minimum(remain / xp.where(reject > 0, reject, 1.0), 1.0), 1.0)
    # the root ratio is TV/TV = 1 exactly; rounding must not let tau = 0 fail
    h = xp.concat([_ones(xp, h, 1), h[:, 1:], a[:, max(L, 1):]], axis=1)  # h_L = min(1, ρ_L); just h_0 when L = 0
    if lengths is not None:
        ids = xp.arange(L + 1, device=array_api_compat.device(h))[None, :]
        h = xp.where(ids < lengths[:, None], h, xp.where(ids == lengths[:, None], a, xp.zeros_like(a)))
    return h, a, b, s


@register
class BlockVerify(Verifier):
    """Published block verification (ICLR 2025): optimal among on-path verifiers; lossless."""

    name = "block"
    label = "published block (on-path)"
    style = {"marker": "s", "color": "C1"}

    ragged = True
    closed_form = ClosedForm.BLOCK

    def expected_accepted(self, draft, target, length):
        """Eq. (17) (:func:`otspec.theory.expected_accepted_block`): optimal among on-path verifiers."""
        return expected_accepted_block(draft, target, length)

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        draft_tokens, draft_probs, target_probs = d.tokens, d.draft_probs, d.target_probs
        w = block_weights(draft_tokens, draft_probs, target_probs, d.lengths)
        h = published_commit_probs(draft_probs, target_probs, w, d.lengths)
        L = draft_probs.shape[1]
        return VerifierLaw(last_pass_law(h), correction_law(draft_probs, target_probs, target_scale=w[:, :L],
                                                            lengths=d.lengths))

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        draft_tokens, draft_probs, target_probs = d.tokens, d.draft_probs, d.target_probs
        w = block_weights(draft_tokens, draft_probs, target_probs, d.lengths)
        tau = last_pass_sample(published_commit_probs(draft_probs, target_probs, w, d.lengths), rng)
        L = draft_probs.shape[1]
        return Outcome(tau, draw_correction(tau, draft_probs, target_probs, rng, target_scale=w[:, :L],
                                            lengths=d.lengths))


@register
class BackwardBlockVerify(Verifier):
    """v1 Algorithm 3 (backward induction): attains the block-OT optimum eq. (8).

    Lossless in the sense of spec eq. (1): the emitted (X^τ, Y) continued by the
    carried residual chain is target-distributed. ``carry`` is the log ratio
    log T(X^τ, Y) / P(X^τ, Y) over the emitted block part (T = this iteration's
    target, P = draft); a window is carried when τ ≤ L − 2 and covers the block's
    remaining positions (see :class:`otspec.verifiers.carry.ResidualWindows`).
    In :meth:`law`, ``carry`` has shape (B, L+1, V) (entry [b, l, y] for τ = l,
    Y = y; the l = L slice is unused and 0); in :meth:`sample`, shape (B,).
    """

    name = "block_v1"
    label = "v1 block (backward, optimal)"
    style = {"marker": "^", "color": "C2"}
    carries_residual = True
    closed_form = ClosedForm.OPTIMAL

    def expected_accepted(self, draft, target, length):
        """The block-OT optimum eq. (8) (:func:`otspec.theory.expected_accepted_optimal`), which it attains."""
        return expected_accepted_optimal(draft, target, length)

    ragged = True

    def law(self, draft_tokens, draft_probs, target_probs, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        draft_tokens, draft_probs, target_probs = d.tokens, d.draft_probs, d.target_probs
        xp = namespace(draft_probs, target_probs)
        h, a, b, s = backward_commit_probs(draft_tokens, draft_probs, target_probs, d.lengths)
        L = draft_probs.shape[1]
        carry = _carried_log_ratio(xp, s[:, :L, None], target_probs[:, :L, :], draft_probs)
        if d.lengths is not None:  # carried only below a row's own length
            ids = xp.arange(L, device=array_api_compat.device(carry))[None, :, None]
            carry = xp.where(ids < d.lengths[:, None, None], carry, xp.zeros_like(carry))
        carry = xp.concat([carry, xp.zeros_like(target_probs[:, L:, :])], axis=1)
        corrections = correction_law(draft_probs, target_probs, target_scale=a[:, :L], draft_scale=b[:, :L],
                                     lengths=d.lengths)
        return VerifierLaw(last_pass_law(h), corrections, carry)

    def sample(self, draft_tokens, draft_probs, target_probs, rng, *, validate=True, lengths=None):
        d = self.check(draft_tokens, draft_probs, target_probs, validate=validate, lengths=lengths)
        draft_tokens, draft_probs, target_probs = d.tokens, d.draft_probs, d.target_probs
        xp = namespace(draft_probs, target_probs)
        h, a, b, s = backward_commit_probs(draft_tokens, draft_probs, target_probs, d.lengths)
        L = draft_probs.shape[1]
        tau = last_pass_sample(h, rng)
        y = draw_correction(tau, draft_probs, target_probs, rng, target_scale=a[:, :L], draft_scale=b[:, :L],
                            lengths=d.lengths)
        if L == 0:  # nothing drafted: Y is the target's draw and nothing is carried
            return Outcome(tau, y, xp.zeros(tau.shape, dtype=target_probs.dtype, device=array_api_compat.device(tau)))
        rows = xp.arange(tau.shape[0], device=array_api_compat.device(tau))
        at = xp.clip(tau, max=L - 1)
        carry = _carried_log_ratio(xp, s[rows, tau], target_probs[rows, tau, y], draft_probs[rows, at, y])
        last = L if d.lengths is None else d.lengths
        return Outcome(tau, y, xp.where(tau < last, carry, xp.zeros_like(carry)))

    # ---------------------------------------------------------- carried residual windows
    def start_state(self, batch, max_length):
        return ResidualWindows.empty(batch, max_length)

    def current_targets(self, state, rows, tokens, draft_probs, target_probs, start, lengths, next_draft_row):
        """The carried residual cascade along each drafted path (see :mod:`otspec.verifiers.carry`).

        On numpy the windows are handled one draft length at a time (``scratch`` keeps each group). On torch the
        ragged batch is scored in one pass on the rows' device, nothing read back: the draft row after each row's
        last drafted token (``next_draft_row()``) goes in at that row's own length."""
        if not isinstance(target_probs, np.ndarray):
            return self._current_targets_on_device(state, rows, tokens, draft_probs, target_probs, start, lengths,
                                                   next_draft_row)
        rows, lengths, start = to_host(rows), to_host(lengths), to_host(start)
        after, draft_host, target_host = to_host(next_draft_row()), to_host(draft_probs), to_host(target_probs)
        tokens = to_host(tokens)
        out = np.array(target_host, copy=True)
        scratch = []
        for g in np.unique(lengths).tolist():
            sel = np.flatnonzero(lengths == g)
            p_rows = np.concatenate([draft_host[sel, :g], after[sel, None]], axis=1)
            states, levels = score_carried(state.take(rows[sel]), target_host[sel, :g + 1], p_rows,
                                           tokens[sel, :g], start[sel])
            for j, lv in enumerate(levels):
                out[sel, j] = lv[-1]
            scratch.append((g, sel, states, levels, p_rows))
        return out, scratch

    @staticmethod
    def _current_targets_on_device(state, rows, tokens, draft_probs, target_probs, start, lengths, next_draft_row):
        xp = namespace(target_probs)
        state.to_like(target_probs)
        width = tokens.shape[1]
        g = host_to_like(lengths, target_probs)
        after = next_draft_row()
        ids = xp.arange(width + 1, device=array_api_compat.device(target_probs))[None, :, None]
        p_rows = xp.concat([draft_probs[:, :width], xp.zeros_like(target_probs[:, :1])], axis=1)
        p_rows = xp.where(ids == g[:, None, None], after[:, None, :], p_rows)
        states, levels = score_carried(state.take(rows), target_probs[:, :width + 1], p_rows, tokens[:, :width], start)
        out = xp.stack([lv[-1] for lv in levels], axis=1)
        return out, [(g, None, states, levels, p_rows)]

    def advance_state(self, state, rows, scratch, outcome, start, lengths):
        if scratch and scratch[0][1] is None:  # the device pass: one ragged group
            g, _, states, levels, p_rows = scratch[0]
            state.put(rows, carry_forward(states, levels, p_rows, start, g, outcome.accepted_len, outcome.correction,
                                          outcome.carry))
            return
        rows, start = to_host(rows), to_host(start)
        tau, y = to_host(outcome.accepted_len), to_host(outcome.correction)
        carry = None if outcome.carry is None else to_host(outcome.carry)
        for g, sel, states, levels, p_rows in scratch:
            state.put(rows[sel], carry_forward(states, levels, p_rows, start[sel], g, tau[sel], y[sel],
                                               None if carry is None else carry[sel]))
