"""Speculative decoding of real language models with otspec's verifiers, and plain sampling.

One iteration of :func:`speculative_generate` for a batch of prompts:

1. the drafter proposes up to L tokens per sequence (a controller may stop earlier; the first
   draft call also feeds what the draft has not seen yet: the last correction, maybe the last
   accepted draft token);
2. one target call scores the last emitted token and the drafted tokens: L + 1 rows;
3. otspec's verifier — the same object the exact and Monte Carlo engines use — decides τ and the
   next token Y from the processed rows (its carried state, e.g. BackwardBlockVerify's residual
   windows, goes through the protocol's hooks);
4. both caches roll back to the committed prefix + the τ accepted tokens; Y is fed next time.

Randomness comes from one ``numpy.random.Generator``: the draft tokens, then the verifier, in a
fixed order, so a run is reproducible from its seed. Everything the papers report is recorded:
the ledger of :mod:`otspec.engine.ledger` (block efficiency with its interval, accepted-length
histogram, calls), per-position TV and two-point pairs along the drafted paths, and every call's
wall-clock (:class:`~llm_bridge.measure.CallTimer`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from otspec.distributions import sample_categorical, total_variation
from otspec.engine.controllers import FixedDraftLength
from otspec.engine.ledger import DecodeResult, Ledger
from otspec.verifiers.base import Outcome, Verifier

from .cache import make_cache
from .measure import CallTimer, two_point
from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["BridgeResult", "plain_generate", "speculative_generate"]


@dataclass
class BridgeResult:
    """What a run produced and measured.

    Attributes
    ----------
    tokens : list of int arrays
        The generated continuation of each prompt.
    decode : DecodeResult or None
        The ledger (block efficiency, histogram, calls); ``None`` for plain sampling.
    timer : CallTimer
        Wall-clock of every draft / target / verifier call.
    seconds : float
        Wall-clock of the decode loop (prefill and the measurements of ``tv``, ``p_a``, ``q_a`` and
        ``expected_accepted`` excluded).
    tv, p_a, q_a : lists of float arrays, one per draft position
        TV(p_i, q_i) and the two-point pair at draft position i of every iteration that drafted it.
    expected_accepted : float array
        E[τ | draft] of every iteration (0 where nothing was drafted), from the verifier's exact law
        on the real rows.
    """

    tokens: list
    decode: DecodeResult | None
    timer: CallTimer
    seconds: float
    tv: list = field(default_factory=list)
    p_a: list = field(default_factory=list)
    q_a: list = field(default_factory=list)
    expected_accepted: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def generated(self) -> int:
        return int(sum(len(t) for t in self.tokens))

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.seconds


def _padded(rows: list) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad a list of 1-D token arrays: (tokens (B, m), counts (B,))."""
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    out = np.zeros((len(rows), max(int(counts.max()), 1)), dtype=np.int64)
    for b, r in enumerate(rows):
        out[b, :len(r)] = r
    return out, counts


def _unseen(seq: np.ndarray, length: np.ndarray, have: np.ndarray, active: np.ndarray):
    """Tokens ``seq[b, have[b]:length[b]]`` of active sequences (what a cache has not seen yet)."""
    return _padded([seq[b, have[b]:length[b]] if active[b] else seq[b, :0] for b in range(len(seq))])


def _start(prompts, n_new: int, sessions, timer: CallTimer):
    """Token buffer (B, P + N), prompt lengths, and every cache prefilled with all but each prompt's last token."""
    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    if lengths.min() < 1:
        raise ValueError("every prompt needs at least one token (a BOS or chat-template token)")
    seq = np.zeros((len(prompts), int(lengths.max()) + n_new), dtype=np.int64)
    for b, p in enumerate(prompts):
        seq[b, :len(p)] = p
    tokens, counts = _padded([np.asarray(p[:-1], dtype=np.int64) for p in prompts])
    for name, session in sessions:
        if counts.max() > 0:
            timer.call(f"{name}_prefill", int(counts.max()), session.feed, tokens, counts)
    return seq, lengths


def _room(prompts, n_new: int, width: int) -> int:
    """Slots a static cache needs: the longest prompt, the new tokens, and the widest call, with a margin."""
    return max(len(p) for p in prompts) + int(n_new) + int(width) + 2


def _chunks(prompts, batch_size):
    size = len(prompts) if batch_size is None else max(1, int(batch_size))
    return [(i, prompts[i:i + size]) for i in range(0, len(prompts), size)]


def plain_generate(target, prompts, max_new_tokens: int, *, sampling: Sampling = DEFAULT_SAMPLING, seed=0,
                   batch_size: int | None = None, progress: bool | None = None, cache: str = "auto") -> BridgeResult:
    """Sample ``max_new_tokens`` tokens per prompt from the target alone (the baseline), one call per token.

    Prompts go through in batches of ``batch_size`` (default: all at once); ``cache`` is a kind of
    :func:`~llm_bridge.cache.make_cache` (``auto``: compiled static caches on CUDA, dynamic on CPU)."""
    rng, timer, out, seconds = np.random.default_rng(seed), CallTimer(target.device), [], 0.0
    bar = tqdm(total=len(prompts) * max_new_tokens, desc="plain sampling", unit="tok", leave=False,
               disable=None if progress is None else not progress)
    for _, chunk in _chunks(prompts, batch_size):
        B = len(chunk)
        lm = make_cache(target.model, B, kind=cache, max_length=_room(chunk, max_new_tokens, 1))
        seq, plen = _start(chunk, max_new_tokens, [("target", lm)], timer)
        length, everyone = plen.copy(), np.ones(B, dtype=bool)
        t0 = time.perf_counter()
        for _ in range(max_new_tokens):
            tokens, counts = _unseen(seq, length, lm.length, everyone)
            logits, _ = timer.call("target", 1, lm.feed, tokens, counts)
            seq[np.arange(B), length] = sample_categorical(sampling.rows(logits[np.arange(B), counts - 1]), rng)
            length += 1
            bar.update(B)
        seconds += time.perf_counter() - t0
        out += [seq[b, plen[b]:length[b]].copy() for b in range(B)]
    bar.close()
    return BridgeResult(out, None, timer, seconds)


class _Records:
    """Per draft position: TV and two-point pairs; per iteration: E[τ | draft] from the verifier's law."""

    def __init__(self, L: int, verifier, with_law: bool):
        self.tv, self.p_a, self.q_a = ([[] for _ in range(L)] for _ in range(3))
        self.law, self.verifier, self.with_law = [], verifier, with_law

    def add(self, toks, p_rows, q_rows) -> None:
        for i in range(toks.shape[1]):
            self.tv[i].append(total_variation(p_rows[:, i], q_rows[:, i]))
            pa, qa = two_point(p_rows[:, i], q_rows[:, i])
            self.p_a[i].append(pa)
            self.q_a[i].append(qa)
        if self.with_law and toks.shape[1]:
            self.law.append(np.asarray(self.verifier.law(toks, p_rows, q_rows, validate=False).expected_accepted))
        elif self.with_law:  # nothing drafted: τ = 0 for sure
            self.law.append(np.zeros(toks.shape[0]))

    def columns(self):
        cat = [[np.concatenate(v) for v in lists if v] for lists in (self.tv, self.p_a, self.q_a)]
        return (*cat, np.concatenate(self.law) if self.law else np.zeros(0))


def speculative_generate(pair, prompts, verifier: Verifier, draft_length, max_new_tokens: int, *,
                         sampling: Sampling = DEFAULT_SAMPLING, seed=0, batch_size: int | None = None,
                         progress: bool | None = None, confidence: float = 0.95,
                         record_law: bool = True, cache: str = "auto") -> BridgeResult:
    """Generate ``max_new_tokens`` tokens for each prompt (token id lists) by speculative decoding.

    ``draft_length`` is L or a controller from :mod:`otspec.engine.controllers` /
    :mod:`otspec.engine.heads`; a learned head gets the draft's last hidden states as ``features``.
    Controllers that need the target's rows while drafting (oracles) are refused: a real system
    does not have them. Prompts go through in batches of ``batch_size`` (default: all at once);
    ``record_law`` also computes E[τ | draft] from the verifier's exact law; ``cache`` is a kind of
    :func:`~llm_bridge.cache.make_cache` for both models.
    """
    ctrl = draft_length if hasattr(draft_length, "keep_drafting") else FixedDraftLength(draft_length)
    if getattr(ctrl, "needs_target", False) or getattr(ctrl, "needs_lookahead", False):
        raise ValueError(f"{ctrl!r} is an oracle (it reads the target's rows while drafting); the real loop can run "
                         "FixedDraftLength or a LearnedHeadController on the draft's hidden states")
    if verifier.layout != "chain":
        raise ValueError(f"{type(verifier).__name__} verifies {verifier.layout}; this loop drafts chains")
    L, N = ctrl.max_length, int(max_new_tokens)
    rng, timer = np.random.default_rng(seed), CallTimer(pair.target.device)
    ledger, records, out, seconds = Ledger(len(prompts), N, L), _Records(L, verifier, record_law), [], 0.0
    bar = tqdm(total=len(prompts) * N, desc=f"{verifier.name} L={L}", unit="tok", leave=False,
               disable=None if progress is None else not progress)
    for offset, chunk in _chunks(prompts, batch_size):
        t0 = time.perf_counter()
        out += _decode(pair, chunk, offset, verifier, ctrl, N, sampling, rng, timer, ledger, records, bar, cache)
        seconds += time.perf_counter() - t0
    bar.close()
    seconds -= sum(timer.total(k) for k in ("records", "target_prefill", "draft_prefill"))
    buf = np.stack(out)
    return BridgeResult(list(buf), ledger.result(buf, confidence), timer, seconds, *records.columns())


def _decode(pair, prompts, offset, verifier, ctrl, N, sampling, rng, timer, ledger, records, bar, cache) -> list:
    """The loop of the module docstring for one batch of prompts; returns their continuations."""
    B, L = len(prompts), ctrl.max_length
    room = _room(prompts, N, L + 2)
    target = make_cache(pair.target.model, B, kind=cache, max_length=room)
    draft = pair.drafter.session(B, sampling, hidden=getattr(ctrl, "needs_context", False), cache=cache,
                                 max_length=room)
    seq, plen = _start(prompts, N, [("target", target), ("draft", draft)], timer)
    length, state = plen.copy(), verifier.start_state(B, L)
    while (length - plen < N).any():
        active = length - plen < N
        limit = np.where(active, np.minimum(L, N - (length - plen) - 1), 0)
        drafted, draft_rows = _draft(draft, ctrl, seq, length, limit, L, pair.target.vocab_size, rng, timer)
        # one target call: what it has not seen (the last emitted token) and the drafts; rows at the last g + 1
        tokens, counts = _padded([seq[b, target.length[b]:length[b] + drafted[b]] if active[b] else seq[b, :0]
                                  for b in range(B)])
        logits, _ = timer.call("target", int(counts.max()), target.feed, tokens, counts)
        start = length.copy()
        for g in np.unique(drafted[active]):  # verify sequences that drafted the same number of tokens together
            rows_idx = np.flatnonzero(active & (drafted == g))
            q_rows = sampling.rows(logits[rows_idx[:, None], counts[rows_idx, None] - g - 1 + np.arange(g + 1)])
            toks, p_rows = seq[rows_idx[:, None], start[rows_idx, None] + np.arange(g)], draft_rows[rows_idx, :g]
            out = timer.call("verify", g, _verify, draft, verifier, state, rows_idx, toks, p_rows, q_rows,
                             start - plen, seq, start, rng, timer)
            tau, y = np.asarray(out.accepted_len), np.asarray(out.correction)
            seq[rows_idx, start[rows_idx] + tau] = y
            length[rows_idx] = start[rows_idx] + tau + 1
            ledger.record(offset + rows_idx, start[rows_idx] - plen[rows_idx], g, tau, tau + 1, draft_calls=g,
                          drafted=g * rows_idx.size)
            timer.call("records", g, records.add, toks, p_rows, q_rows)  # measurement, not decoding: excluded
            bar.update(int((tau + 1).sum()))
        kept = start + np.where(active, length - start - 1, 0)  # committed prefix + accepted drafts
        target.rollback(kept)
        draft.rollback(kept)
    return [seq[b, plen[b]:plen[b] + N].copy() for b in range(B)]


def _draft(draft, ctrl, seq, length, limit, L, V, rng, timer):
    """Draft up to ``limit`` tokens per sequence into ``seq``; returns (drafted counts (B,), rows (B, L, V))."""
    B = len(seq)
    drafted, draft_rows, drafting = np.zeros(B, dtype=np.int64), np.zeros((B, max(L, 1), V)), limit > 0
    if hasattr(ctrl, "start"):
        ctrl.start(B)
    tokens, counts = _unseen(seq, length, draft.length, drafting)  # first call: what the draft has not seen
    for i in range(L):
        if not drafting.any():
            break
        rows, usable, features = timer.call("draft", int(counts.max()), draft.feed, tokens, counts)
        drafting &= usable
        idx = np.flatnonzero(drafting)
        if idx.size == 0:
            break
        x = sample_categorical(rows[idx], rng)
        seq[idx, length[idx] + i], draft_rows[idx, i] = x, rows[idx]
        drafted[idx] += 1
        keep = ctrl.keep_drafting(i + 1, rows[idx], which=idx, tokens=x, previous=seq[idx, length[idx] + i - 1],
                                  features=None if features is None else features[idx])
        drafting[idx] = np.asarray(keep, dtype=bool) & (drafted[idx] < limit[idx])
        tokens, counts = np.zeros((B, 1), dtype=np.int64), drafting.astype(np.int64)  # then x where drafting goes on
        tokens[idx, 0] = x
    return drafted, draft_rows


def _verify(draft, verifier, state, rows_idx, toks, p_rows, q_rows, position, seq, length, rng, timer) -> Outcome:
    """The verifier's decision for sequences ``rows_idx`` that drafted ``toks`` (n, g)."""
    g = toks.shape[1]

    def next_draft_row():  # the draft's row after the drafted tokens (v1 block verification asks for it)
        wanted = np.zeros(len(seq), dtype=bool)
        wanted[rows_idx] = True
        tokens, counts = _unseen(seq, length + g, draft.length, wanted)  # length = where the drafts start
        rows, _, _ = timer.call("draft", int(counts.max()), draft.feed, tokens, counts)
        return rows[rows_idx]

    q_rows, scratch = verifier.current_targets(state, rows_idx, toks, p_rows, q_rows, position[rows_idx],
                                               next_draft_row)
    if g == 0:  # nothing drafted (last position, or no n-gram match): the target's own draw
        out = Outcome(np.zeros(rows_idx.size, dtype=np.int64), sample_categorical(q_rows[:, 0], rng))
    else:
        out = verifier.sample(toks, p_rows, q_rows, rng, validate=False)
    verifier.advance_state(state, rows_idx, scratch, out, position[rows_idx], g)
    return out
