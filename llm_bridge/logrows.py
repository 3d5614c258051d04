"""Logged rows from a real pair: both models' processed rows along decoded continuations, top-p truncated.

``python -m llm_bridge.validate --log-rows FILE`` calls :func:`record_rows` on the plain-sampling
continuations of its prompts (target samples, which is what lossless speculative decoding emits):
each prompt + continuation is scored in one full forward pass per model, the rows at the generated
positions go through the run's logit processing (:class:`~llm_bridge.sampling.Sampling`, the rows
the verifiers saw) and are truncated one prompt at a time (:func:`otspec.sources.logged.truncate_chunks`).
The file is read by ``otspec`` alone: sweeps (``kind = "logged"``) and ``python -m otspec simulate
--logged FILE`` run on real LLM distributions offline.
"""

from __future__ import annotations

import numpy as np

from otspec.sources import PositionalSource
from otspec.sources.logged import LoggedRows, truncate_chunks

from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["DEFAULT_LOG_MAX_KEPT", "DEFAULT_LOG_TOP_P", "NGRAM_METHOD", "check_loggable", "ngram_pairs", "record_rows"]

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


def check_loggable(pair) -> None:
    """Raise ``ValueError`` unless the pair's drafter has probability rows to log (a model, not n-grams)."""
    if pair.drafter.deterministic:
        raise ValueError(f"logging rows needs a model drafter; {pair.drafter.name!r} has no probability rows")


def record_rows(pair, prompts, continuations, *, sampling: Sampling = DEFAULT_SAMPLING,
                top_p: float = DEFAULT_LOG_TOP_P, max_kept: int | None = DEFAULT_LOG_MAX_KEPT,
                meta: dict | None = None) -> LoggedRows:
    """A :class:`~otspec.sources.LoggedRows` of ``pair`` along ``continuations`` (one per prompt, token ids)."""
    check_loggable(pair)
    kept = [(list(p), np.asarray(c, dtype=np.int64)) for p, c in zip(prompts, continuations, strict=True)]
    kept = [(p, c) for p, c in kept if c.size]
    if not kept:
        raise ValueError("logging rows: no continuation has a token")
    chunks = ((_continuation_rows(pair.drafter.model, p, c, sampling),
               _continuation_rows(pair.target.model, p, c, sampling)) for p, c in kept)
    arrays = truncate_chunks(chunks, top_p, max_kept)
    lengths = [c.size for _, c in kept]
    info = {"written_by": "llm_bridge.validate --log-rows", **pair.describe(), "top_p": top_p, "max_kept": max_kept,
            "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p},
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
