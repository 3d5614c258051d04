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

import numpy as np
from tqdm.auto import tqdm

from ..checks import MAX_DECODE_ENTRIES, check_size
from ..distributions import sample_categorical
from ..errors import SizeLimitError
from ..pairs import check_pair
from ..sources import Source
from ..verifiers.base import Outcome, Verifier
from .controllers import FixedDraftLength
from .ledger import DecodeResult, Ledger, block_efficiency_estimate
from .stats import check_confidence

__all__ = ["DecodeResult", "FixedDraftLength", "block_efficiency_estimate", "generate"]


def check_buffer(n_tokens: int, n_sequences: int) -> None:
    """Refuse a token buffer of more than :data:`~otspec.checks.MAX_DECODE_ENTRIES` entries before allocating it."""
    if n_tokens * n_sequences > MAX_DECODE_ENTRIES:
        raise SizeLimitError(f"decoding {n_sequences:,} sequences x {n_tokens:,} tokens = {n_tokens * n_sequences:,} "
                             f"buffer entries is above MAX_DECODE_ENTRIES = {MAX_DECODE_ENTRIES:,}",
                             size=n_tokens * n_sequences, limit=MAX_DECODE_ENTRIES)


def _lengths(batch: int, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Prefix lengths for a full-buffer call: ``values`` at ``rows``, 0 elsewhere."""
    out = np.zeros(batch, dtype=np.int64)
    out[rows] = values
    return out


def _controller_inputs(ctrl, draft_next, target, buf, lengths, rows_idx, which, tokens) -> dict:
    """What a controller asked for beyond the draft rows: the tokens, the target's rows (an oracle head,
    ``needs_target``), the token before each drafted one (``needs_context``; -1 at a sequence start)."""
    out = {}
    if getattr(ctrl, "needs_target", False) or getattr(ctrl, "needs_context", False):
        out.update(which=which, tokens=tokens)
    if getattr(ctrl, "needs_target", False):
        out["target_rows"] = target.next_probs(buf, lengths)[rows_idx]
    if getattr(ctrl, "needs_context", False):
        at = lengths[rows_idx] - 1
        out["previous"] = np.where(at >= 0, buf[rows_idx, np.maximum(at, 0)], -1)
    if getattr(ctrl, "needs_lookahead", False):  # a hindsight oracle: rows one position after the drafted token
        ahead = lengths.copy()
        ahead[rows_idx] += 1  # drafts stop at position N − 2, so this stays inside the sequence
        out["next_rows"] = lambda: (draft_next(buf, ahead)[rows_idx], target.next_probs(buf, ahead)[rows_idx])
    return out


def _draft(draft: Source, target: Source, ctrl, buf, pos, active, limit, rng):
    """Draft up to ``limit`` (n,) tokens for the ``active`` sequences, asking ``ctrl`` after each.

    Writes the tokens into ``buf``; returns (drafted counts (n,), draft rows (n, L, V)). A
    controller with ``needs_target`` also gets the target's rows at the drafted prefixes.
    """
    if hasattr(ctrl, "start"):
        ctrl.start(active.size)
    B, L, V = buf.shape[0], ctrl.max_length, draft.vocab_size
    drafted = np.zeros(active.size, dtype=np.int64)
    drafting = limit > 0
    draft_rows = np.zeros((active.size, max(L, 1), V))
    for i in range(L):
        if not drafting.any():
            break
        rows_idx = active[drafting]
        lengths = _lengths(B, rows_idx, pos[rows_idx] + i)
        rows = draft.next_probs(buf, lengths)[rows_idx]
        tokens = sample_categorical(rows, rng)
        buf[rows_idx, pos[rows_idx] + i] = tokens
        draft_rows[drafting, i] = rows
        drafted[drafting] += 1
        keep = np.zeros(active.size, dtype=bool)
        keep[drafting] = ctrl.keep_drafting(i + 1, rows, **_controller_inputs(
            ctrl, draft.next_probs, target, buf, lengths, rows_idx, np.flatnonzero(drafting), tokens))
        drafting &= keep & (drafted < limit)
    return drafted, draft_rows


def _verify(draft: Source, target: Source, verifier: Verifier, state, buf, rows_idx, p0, g, p_rows, rng) -> Outcome:
    """Score ``g`` drafted tokens of sequences ``rows_idx`` with one target call and verify them."""
    B = buf.shape[0]
    toks = buf[rows_idx[:, None], p0[:, None] + np.arange(g)]
    q_rows = np.stack([target.next_probs(buf, _lengths(B, rows_idx, p0 + j))[rows_idx] for j in range(g + 1)], axis=1)
    q_rows, scratch = verifier.current_targets(
        state, rows_idx, toks, p_rows, q_rows, p0,
        lambda: draft.next_probs(buf, _lengths(B, rows_idx, p0 + g))[rows_idx])
    if g == 0:  # the last position of the sequence: the target's own draw
        out = Outcome(np.zeros(rows_idx.size, dtype=np.int64), sample_categorical(q_rows[:, 0], rng))
    else:
        out = verifier.sample(toks, p_rows, q_rows, rng, validate=False)
    verifier.advance_state(state, rows_idx, scratch, out, p0, g)
    return out


def generate(draft: Source, target: Source, verifier: Verifier, draft_length, n_tokens: int, *,
             n_sequences: int = 1, seed=0, progress: bool | None = None,
             confidence: float = 0.95) -> DecodeResult:
    """Generate ``n_sequences`` sequences of ``n_tokens`` tokens by speculative decoding.

    Parameters
    ----------
    draft, target : Source
    verifier : Verifier
        A single-draft (chain) verifier; carried state (v1 block verification) goes through
        the protocol's hooks.
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
    L, N, B = ctrl.max_length, check_size(n_tokens, "n_tokens"), check_size(n_sequences, "n_sequences")
    check_buffer(N, B)
    confidence = check_confidence(confidence)
    check_pair(draft, target)
    target.check_length(N)
    draft.check_length(N - 1)  # the last token is never drafted
    rng = np.random.default_rng(seed)
    buf, pos = np.zeros((B, N), dtype=np.int64), np.zeros(B, dtype=np.int64)
    ledger, state = Ledger(B, N, L), verifier.start_state(B, L)
    with tqdm(total=B * N, unit="tok", unit_scale=True, disable=None if progress is None else not progress,
              leave=False, desc=f"decode ({verifier.name}, L={L})") as bar:
        while (pos < N).any():
            active = np.flatnonzero(pos < N)
            drafted, draft_rows = _draft(draft, target, ctrl, buf, pos, active, np.minimum(L, N - pos[active] - 1),
                                         rng)
            for g in np.unique(drafted):
                sel = drafted == g
                rows_idx, p0 = active[sel], pos[active[sel]]
                out = _verify(draft, target, verifier, state, buf, rows_idx, p0, g, draft_rows[sel, :g], rng)
                tau, y = np.asarray(out.accepted_len), np.asarray(out.correction)
                buf[rows_idx, p0 + tau] = y
                pos[rows_idx] += tau + 1
                ledger.record(rows_idx, p0, g, tau, tau + 1, draft_calls=g, drafted=g * rows_idx.size)
                bar.update(int((tau + 1).sum()))
    return ledger.result(buf, confidence)
