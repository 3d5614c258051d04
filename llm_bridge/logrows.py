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

from otspec.sources.logged import LoggedRows, truncate_chunks

from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["DEFAULT_LOG_MAX_KEPT", "DEFAULT_LOG_TOP_P", "check_loggable", "record_rows"]

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
