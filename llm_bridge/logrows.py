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

from otspec.distributions import to_host
from otspec.sources.logged import LoggedRows, truncate_chunks

from .sampling import DEFAULT_SAMPLING, Sampling

__all__ = ["DEFAULT_LOG_MAX_KEPT", "DEFAULT_LOG_TOP_P", "check_loggable", "draft_rows_incremental",
           "draft_states_incremental", "record_rows"]

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
    for rows, _ in _incremental(drafter, prompts, continuations, sampling, batch_size, hidden=False):
        yield rows


def draft_states_incremental(drafter, prompts, continuations, sampling: Sampling = DEFAULT_SAMPLING,
                           batch_size: int | None = None):
    """The drafter's last hidden states along each continuation, fed as :func:`draft_rows_incremental` feeds it:
    one (T_i, H) float64 array per prompt, row t the state that row t of the draft is made from (at the token
    before ``continuation[t]``: the prompt's last at t = 0), which a learned draft-length head reads."""
    for _, states in _incremental(drafter, prompts, continuations, sampling, batch_size, hidden=True):
        yield states


def _incremental(drafter, prompts, continuations, sampling, batch_size, *, hidden: bool):
    """(rows (T_i, V), states (T_i, H) or None) per prompt: row t after ``continuation[:t]`` and the state at the
    token before it."""
    from .loop import cache_room, chunks

    for _, batch in chunks(list(zip(prompts, continuations, strict=True)), batch_size):
        heads = [np.asarray(p, dtype=np.int64) for p, _ in batch]
        tails = [np.asarray(c, dtype=np.int64) for _, c in batch]
        T, B = max(c.size for c in tails), len(batch)
        session = drafter.session(B, sampling, max_length=cache_room(heads, T, 2), hidden=hidden)
        session.start(heads)
        rows, states = [[] for _ in range(B)], [[] for _ in range(B)]
        none = np.zeros((B, 0), dtype=np.int64)
        for t in range(T):
            live = np.array([t < c.size for c in tails])
            scores = session.feed(none, np.zeros(B, dtype=np.int64))  # the row after each pending token
            for b in np.flatnonzero(live):
                rows[b].append(np.asarray(scores.rows[b, 0], dtype=np.float64))
                if hidden:
                    states[b].append(np.asarray(to_host(scores.features[b, 0]), dtype=np.float64))
            step = np.array([[c[t] if t < c.size else 0] for c in tails], dtype=np.int64)
            session.commit(step, live.astype(np.int64))
        del session
        for b in range(B):  # record_rows passes non-empty continuations only
            yield np.stack(rows[b]), (np.stack(states[b]) if hidden else None)


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
