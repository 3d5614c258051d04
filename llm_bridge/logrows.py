"""Logged rows from a real pair: both models' processed rows along decoded continuations, top-p truncated.

``python -m llm_bridge.validate --log-rows FILE`` calls :func:`record_rows` on the plain-sampling
continuations of its prompts (target samples, which is what lossless speculative decoding emits).
The draft's rows are computed as the decode loop computes them: a KV-cache session over the run's
batches of prompts, fed one token per call (:func:`draft_rows_incremental`). A model whose rows depend on
the call's shape (the dynamically quantised ``int8`` drafter takes its activation ranges per call) would
otherwise be logged with rows the loop never sees: scored in one full-sequence pass, the int8 draft's
overlap with the target was 0.34 against 0.56 fed token by token, and the runs measured 0.53. The target
scores each prompt + continuation in one full forward pass (float rows of a call of any shape agree).
All rows go through the run's logit processing (:class:`~llm_bridge.sampling.Sampling`, the rows the
verifiers saw) and are truncated one prompt at a time (:func:`otspec.sources.logged.truncate_chunks`).
The file is read by ``otspec`` alone: sweeps (``kind = "logged"``) and ``python -m otspec simulate
--logged FILE`` run on real LLM distributions offline.
"""

from __future__ import annotations

import numpy as np

from otspec.sources import PositionalSource
from otspec.sources.logged import LoggedRows, truncate_chunks

from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["DEFAULT_LOG_MAX_KEPT", "DEFAULT_LOG_TOP_P", "NGRAM_METHOD", "check_loggable", "draft_rows_incremental",
           "ngram_pairs", "record_rows"]

DEFAULT_LOG_TOP_P = 0.95
#: At most this many tokens per row and model: a flat row at V = 49,152 would otherwise keep thousands
#: (the tail masses and their overlap are recorded whatever is cut).
DEFAULT_LOG_MAX_KEPT = 256


def _continuation_rows(model, prompt, continuation, sampling: Sampling) -> np.ndarray:
    """Processed rows of ``model`` for each token of ``continuation`` given prompt + what precedes it: (T, V)."""
    import torch

    device = next(model.parameters()).device
    ids = torch.as_tensor([list(prompt) + list(continuation)], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    start = len(prompt) - 1  # the row after the prompt's last token predicts the first generated token
    return sampling.rows(logits[start:start + len(continuation)])


def draft_rows_incremental(drafter, prompts, continuations, sampling: Sampling = DEFAULT_SAMPLING,
                           batch_size: int | None = None):
    """The drafter's processed rows along each continuation as the decode loop's draft calls compute them.

    The prompts go in batches of ``batch_size`` (the run's; default all at once) through one
    :meth:`~llm_bridge.drafters.ModelDrafter.session` each, prefilled together and then fed one token of every
    continuation per call (a finished continuation is fed nothing). Yields one (T_i, V) float64 array per prompt,
    in order: row t is p(· | prompt + continuation[:t])."""
    from .loop import cache_room, chunks

    for _, batch in chunks(list(zip(prompts, continuations, strict=True)), batch_size):
        heads = [np.asarray(p, dtype=np.int64) for p, _ in batch]
        tails = [np.asarray(c, dtype=np.int64) for _, c in batch]
        T, B = max(c.size for c in tails), len(batch)
        session = drafter.session(B, sampling, max_length=cache_room(heads, T, 2))
        session.start(heads)
        rows = [[] for _ in range(B)]
        none = np.zeros((B, 0), dtype=np.int64)
        for t in range(T):
            live = np.array([t < c.size for c in tails])
            scores = session.feed(none, np.zeros(B, dtype=np.int64)).rows  # the row after each pending token
            for b in np.flatnonzero(live):
                rows[b].append(np.asarray(scores[b, 0], dtype=np.float64))
            step = np.array([[c[t] if t < c.size else 0] for c in tails], dtype=np.int64)
            session.commit(step, live.astype(np.int64))
        del session
        yield from (np.stack(r) for r in rows)  # record_rows passes non-empty continuations only


def check_loggable(pair) -> None:
    """Raise ``ValueError`` unless the pair's drafter has probability rows to log (a model, not n-grams)."""
    if pair.drafter.deterministic:
        raise ValueError(f"logging rows needs a model drafter; {pair.drafter.name!r} has no probability rows")
    if pair.drafter.reads_target_features:
        raise ValueError(f"logging rows needs a draft model; the {pair.drafter.name!r} head's rows depend on the draft "
                         "depth (its predictions replay them by depth: llm_bridge.head_replays.head_replays)")


def record_rows(pair, prompts, continuations, *, sampling: Sampling = DEFAULT_SAMPLING,
                top_p: float = DEFAULT_LOG_TOP_P, max_kept: int | None = DEFAULT_LOG_MAX_KEPT,
                meta: dict | None = None, batch_size: int | None = None) -> LoggedRows:
    """A :class:`~otspec.sources.LoggedRows` of ``pair`` along ``continuations`` (one per prompt, token ids); the
    draft's rows as the loop computes them over batches of ``batch_size`` prompts (:func:`draft_rows_incremental`)."""
    check_loggable(pair)
    kept = [(list(p), np.asarray(c, dtype=np.int64)) for p, c in zip(prompts, continuations, strict=True)]
    kept = [(p, c) for p, c in kept if c.size]
    if not kept:
        raise ValueError("logging rows: no continuation has a token")
    drafted = draft_rows_incremental(pair.drafter, [p for p, _ in kept], [c for _, c in kept], sampling, batch_size)
    chunks = ((p_rows, _continuation_rows(pair.target.model, p, c, sampling))
              for p_rows, (p, c) in zip(drafted, kept, strict=True))
    arrays = truncate_chunks(chunks, top_p, max_kept)
    lengths = [c.size for _, c in kept]
    info = {"written_by": "llm_bridge.validate --log-rows", **pair.describe(), "top_p": top_p, "max_kept": max_kept,
            "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
            "draft_rows": "incremental: the loop's draft session, one token per call"
                          + (f", batches of {batch_size} prompts" if batch_size else ""),
            **(meta or {})}
    return LoggedRows(vocab_size=pair.target.vocab_size, path_offsets=np.concatenate([[0], np.cumsum(lengths)]),
                      tokens=np.concatenate([c for _, c in kept]), meta=info, **arrays)


#: How a prompt-lookup drafter's prediction is made, as records state it.
NGRAM_METHOD = ("decode engine on an independent plain-decoding run: per prompt, the n-gram drafter's proposal at each "
                "logged context (one-hot; no draft where it proposes nothing) and the target's probability of it "
                "there (rows lumped to {the proposal, the rest}), a positional pair (rows independent of the drafted "
                "tokens); interval: prediction interval for a run over the measured number of prompts (two-level "
                "paired bootstrap over prompts and their replays, percentile)")


def ngram_pairs(pair, prompts, continuations, *, sampling: Sampling = DEFAULT_SAMPLING) -> list:
    """Replays of a prompt-lookup drafter (``pair.drafter.propose``) along plain continuations, one per prompt.

    At step t of a continuation the drafter proposes x_t = propose(prompt + continuation[:t]) or nothing. Its row
    is one-hot, so every verifier's law depends on the target's row there only through q_t(x_t): the pair is lumped
    to two symbols, the proposal (0) and the rest (1): draft rows (1, 0), target rows (q_t(x_t), 1 - q_t(x_t)), and
    the draft source marks the steps without a proposal (:class:`~otspec.sources.PositionalSource` ``proposes``),
    where the decode loop stops drafting as the real one does. Returns [(draft, target)] for
    :func:`otspec.engine.predict.predict_from_pairs`; continuations of fewer than two tokens are left out."""
    if not pair.drafter.deterministic:
        raise ValueError(f"ngram_pairs: {pair.drafter.name!r} is not a prompt-lookup drafter (log its rows instead)")
    out = []
    for prompt, cont in zip(prompts, continuations, strict=True):
        prompt, cont = list(prompt), np.asarray(cont, dtype=np.int64)
        if cont.size < 2:
            continue
        history = np.asarray(prompt + cont.tolist(), dtype=np.int64)
        proposals = np.array([pair.drafter.propose(history[:len(prompt) + t]) for t in range(cont.size)])
        rows = _continuation_rows(pair.target.model, prompt, cont, sampling)
        q = np.clip(rows[np.arange(cont.size), np.maximum(proposals, 0)], 0.0, 1.0)
        q = np.where(proposals >= 0, q, 0.0)
        draft = PositionalSource(np.tile([1.0, 0.0], (cont.size, 1)), proposes=proposals >= 0)
        out.append((draft, PositionalSource(np.stack([q, 1.0 - q], axis=1))))
    if not out:
        raise ValueError("ngram_pairs: no continuation has the two tokens a replay needs")
    return out
