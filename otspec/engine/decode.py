"""Decode engine: end-to-end speculative generation with full accounting.

``generate`` runs B independent sequences in lock-step iterations. In each
iteration every unfinished sequence drafts up to L tokens (asking a draft-length
controller after each token whether to draft one more), makes one target call
that scores the drafted prefix, and lets the verifier decide. It counts

* target calls (one per iteration per sequence),
* draft calls (one per drafted token),
* accepted draft tokens, rejections (iterations with τ < drafted length),
  discarded draft tokens (drafted − accepted),

and reports block efficiency = generated tokens / target calls with a batch-means
interval. A sequence never drafts past its last position: with N tokens to
generate and ``pos`` already done, at most N − pos − 1 tokens are drafted, so
every sequence ends with exactly N tokens.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from ..distributions import sample_categorical
from ..sources import Source
from ..verifiers.base import Verifier
from ..verifiers.carry import ResidualWindows
from .stats import Estimate, ratio_estimate

__all__ = ["DecodeResult", "FixedDraftLength", "block_efficiency_estimate", "generate"]

#: Independent units used for the block-efficiency interval (sequences, or segments of them).
MIN_CI_UNITS = 32


class FixedDraftLength:
    """Draft-length controller that always drafts ``length`` tokens.

    A controller exposes ``max_length`` and ``keep_drafting(step, draft_rows)``,
    called after the ``step``-th drafted token (1-based) with the draft rows
    (n, V) that produced it; it returns a bool array (n,) saying which
    sequences draft one more token. Adaptive controllers (SpecDec++) plug in here.
    """

    def __init__(self, length: int):
        if int(length) < 1:
            raise ValueError(f"draft length must be >= 1, got {length}")
        self.max_length = int(length)

    def keep_drafting(self, step: int, draft_rows: np.ndarray) -> np.ndarray:
        return np.full(draft_rows.shape[0], step < self.max_length)

    def __repr__(self):
        return f"FixedDraftLength({self.max_length})"


@dataclass(frozen=True)
class DecodeResult:
    """Counts and rates from :func:`generate` (totals over all sequences).

    Attributes
    ----------
    tokens : ndarray, shape (B, N)
        The generated sequences.
    iterations, target_calls, draft_calls, accepted, rejected, discarded, generated : int
    block_efficiency : Estimate
        Generated tokens per target call, with a batch-means interval.
    accept_hist : ndarray, shape (L+1, L+1)
        ``accept_hist[g, t]``: iterations that drafted g tokens and accepted t.
    elapsed_s : float
    """

    tokens: np.ndarray
    iterations: int
    target_calls: int
    draft_calls: int
    accepted: int
    rejected: int
    discarded: int
    generated: int
    block_efficiency: Estimate
    accept_hist: np.ndarray
    elapsed_s: float

    def summary(self) -> dict:
        """JSON-friendly counts (without the token array)."""
        return {
            "sequences": int(self.tokens.shape[0]),
            "tokens_per_sequence": int(self.tokens.shape[1]),
            "iterations": self.iterations,
            "target_calls": self.target_calls,
            "draft_calls": self.draft_calls,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "discarded": self.discarded,
            "generated": self.generated,
            "block_efficiency": self.block_efficiency.as_dict(),
        }


def _score_carried(windows: ResidualWindows, q_rows, p_rows, toks, p0):
    """Carried-target rows along each drafted path.

    Returns (windows after 0..g draft tokens, as a list; cascade levels (n, g+1, D+1, V)).
    The residual at a drafted position depends on the ratio accumulated over the
    draft tokens before it, so windows advance along the path while scoring.
    """
    g = toks.shape[1]
    states, levels = [windows], []
    for j in range(g + 1):
        lv = states[-1].cascade(q_rows[:, j], p_rows[:, j], p0 + j)
        levels.append(lv)
        if j < g:
            states.append(states[-1].advance(lv, p_rows[:, j], p0 + j, toks[:, j]))
    return states, np.stack(levels, axis=1)


def _carry_forward(states, levels, p_rows, p0, g, tau, y, carry) -> ResidualWindows:
    """Windows after an iteration: the state after τ accepted tokens, advanced by Y,
    plus the verifier's new window (τ ≤ g − 2) covering the rest of the block."""
    rows = np.arange(len(tau))
    after = ResidualWindows(*(np.stack([getattr(s, f) for s in states], axis=1)[rows, tau]
                              for f in ("end", "log_ratio", "valid")))
    after = after.advance(levels[rows, tau], p_rows[rows, tau], p0 + tau, y)
    if carry is None:
        return after.push(np.zeros(len(tau), bool), 0, 0.0, p0 + tau + 1)
    return after.push(tau <= g - 2, p0 + g, carry, p0 + tau + 1)


def block_efficiency_estimate(rows, starts, emitted, n_sequences: int, n_tokens: int,
                              confidence: float = 0.95) -> Estimate:
    """Generated tokens per target call with a batch-means interval.

    ``rows``, ``starts``, ``emitted`` are per-iteration records (lists of arrays):
    the sequence, the position the iteration started at, and the tokens it
    emitted (each iteration is one target call). Each sequence is split into
    contiguous segments by start position so there are at least
    :data:`MIN_CI_UNITS` units for the interval.
    """
    rows, starts, emitted = (np.concatenate(x) for x in (rows, starts, emitted))
    segments = max(1, -(-MIN_CI_UNITS // n_sequences))
    unit = rows * segments + np.minimum(starts * segments // n_tokens, segments - 1)
    gen_u = np.bincount(unit, weights=emitted, minlength=n_sequences * segments)
    calls_u = np.bincount(unit, minlength=n_sequences * segments)
    used = calls_u > 0
    return ratio_estimate(gen_u[used], calls_u[used], confidence)


def _lengths(batch: int, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Prefix lengths for a full-buffer call: ``values`` at ``rows``, 0 elsewhere."""
    out = np.zeros(batch, dtype=np.int64)
    out[rows] = values
    return out


def generate(draft: Source, target: Source, verifier: Verifier, draft_length, n_tokens: int, *,
             n_sequences: int = 1, seed=0, progress: bool | None = None,
             confidence: float = 0.95) -> DecodeResult:
    """Generate ``n_sequences`` sequences of ``n_tokens`` tokens by speculative decoding.

    Parameters
    ----------
    draft, target : Source
    verifier : Verifier
        A single-draft verifier whose next iteration uses the plain target.
    draft_length : int or controller
        L, or a controller with ``max_length`` and ``keep_drafting`` (see
        :class:`FixedDraftLength`).
    n_tokens : int
        N, tokens generated per sequence (both sources must support N).
    n_sequences : int
        B independent sequences advanced together.
    seed : int or numpy Generator
    progress : bool, optional
        tqdm bar over generated tokens; ``None`` shows it only on a terminal.
    """
    ctrl = draft_length if hasattr(draft_length, "keep_drafting") else FixedDraftLength(draft_length)
    L, N, B = ctrl.max_length, int(n_tokens), int(n_sequences)
    if N < 1 or B < 1:
        raise ValueError(f"need n_tokens >= 1 and n_sequences >= 1, got {N} and {B}")
    if draft.vocab_size != target.vocab_size:
        raise ValueError(f"vocabulary mismatch: draft has {draft.vocab_size} tokens, target has {target.vocab_size}")
    target.check_length(N)
    if N > 1:
        draft.check_length(N - 1)
    V = target.vocab_size
    rng = np.random.default_rng(seed)
    buf = np.zeros((B, N), dtype=np.int64)
    pos = np.zeros(B, dtype=np.int64)
    hist = np.zeros((L + 1, L + 1), dtype=np.int64)
    draft_calls = 0
    windows = ResidualWindows.empty(B, L) if getattr(verifier, "carries_residual", False) else None
    trace_row, trace_start, trace_emit = [], [], []
    start = time.perf_counter()
    disable = None if progress is None else not progress
    with tqdm(total=B * N, unit="tok", unit_scale=True, disable=disable, leave=False,
              desc=f"decode ({verifier.name}, L={L})") as bar:
        while True:
            active = np.flatnonzero(pos < N)
            if active.size == 0:
                break
            limit = np.minimum(L, N - pos[active] - 1)
            drafted = np.zeros(active.size, dtype=np.int64)
            drafting = limit > 0
            draft_rows = np.zeros((active.size, max(L, 1), V))
            for i in range(L):
                if not drafting.any():
                    break
                rows_idx = active[drafting]
                rows = draft.next_probs(buf, _lengths(B, rows_idx, pos[rows_idx] + i))[rows_idx]
                buf[rows_idx, pos[rows_idx] + i] = sample_categorical(rows, rng)
                draft_rows[drafting, i] = rows
                drafted[drafting] += 1
                keep = np.zeros(active.size, dtype=bool)
                keep[drafting] = ctrl.keep_drafting(i + 1, rows)
                drafting &= keep & (drafted < limit)
            draft_calls += int(drafted.sum())
            for g in np.unique(drafted):
                sel = drafted == g
                rows_idx = active[sel]
                p0 = pos[rows_idx]
                toks = buf[rows_idx[:, None], p0[:, None] + np.arange(g)]
                q_rows = np.stack(
                    [target.next_probs(buf, _lengths(B, rows_idx, p0 + j))[rows_idx] for j in range(g + 1)], axis=1
                )
                carried = None
                if windows is not None:  # the current target is the carried residual cascade
                    p_last = draft.next_probs(buf, _lengths(B, rows_idx, p0 + g))[rows_idx]
                    p_rows = np.concatenate([draft_rows[sel, :g], p_last[:, None]], axis=1)
                    carried = _score_carried(windows.take(rows_idx), q_rows, p_rows, toks, p0)
                    q_rows = carried[1][:, :, -1]
                if g == 0:
                    tau = np.zeros(rows_idx.size, dtype=np.int64)
                    y = sample_categorical(q_rows[:, 0], rng)
                    carry = None
                else:
                    out = verifier.sample(toks, draft_rows[sel, :g], q_rows, rng, validate=False)
                    tau, y = np.asarray(out.accepted_len), np.asarray(out.correction)
                    carry = None if out.carry is None else np.asarray(out.carry)
                if carried is not None:
                    windows.put(rows_idx, _carry_forward(*carried, p_rows, p0, g, tau, y, carry))
                buf[rows_idx, p0 + tau] = y
                pos[rows_idx] += tau + 1
                hist[g] += np.bincount(tau, minlength=L + 1)
                trace_row.append(rows_idx)
                trace_start.append(p0)
                trace_emit.append(tau + 1)
                bar.update(int((tau + 1).sum()))
    elapsed = time.perf_counter() - start

    emit_all = np.concatenate(trace_emit)
    efficiency = block_efficiency_estimate(trace_row, trace_start, trace_emit, B, N, confidence)
    ells = np.arange(L + 1)
    accepted = int(hist.sum(axis=0) @ ells)
    drafted_total = int(hist.sum(axis=1) @ ells)
    rejected = int(sum(hist[g, :g].sum() for g in range(1, L + 1)))
    return DecodeResult(
        tokens=buf,
        iterations=int(emit_all.size),
        target_calls=int(emit_all.size),
        draft_calls=draft_calls,
        accepted=accepted,
        rejected=rejected,
        discarded=drafted_total - accepted,
        generated=int(emit_all.sum()),
        block_efficiency=efficiency,
        accept_hist=hist,
        elapsed_s=elapsed,
    )
