"""Replays and exact sources for the feature-level heads of :mod:`llm_bridge.heads`.

* :class:`HeadSource` — a head's draft rows after a prompt and any drafted prefix, from full passes
  without a cache: otspec's exact engines check a head's losslessness with it
  (:func:`llm_bridge.lossless.first_token_law`).
* :func:`head_replays` — per prompt, the head's rows at every draft depth and the target's rows along an
  independent plain continuation, as a :class:`~otspec.sources.DepthPositionalSource` pair: what
  ``llm_bridge.validate`` predicts a head's runs from (:data:`HEAD_METHOD`).
"""

from __future__ import annotations

import numpy as np
import torch

from otspec.sources import Source

from .heads import eagle_unrolled, target_features
from .sampling import DEFAULT_SAMPLING

__all__ = ["HEAD_METHOD", "HeadSource", "compact_rows", "depth_rows", "head_replays"]


class HeadSource(Source):
    """A head's draft rows after ``prompt`` followed by any drafted prefix, from full passes without a cache.

    The prompt's pairs read the target's features (one full target pass); each drafted token's pair
    reads the feature the head predicted before it (EAGLE), or the rows are the blocks' on the prompt's
    last feature (Medusa). Slow, but exactly the rows the decode loop drafts from after this prompt, so
    otspec's exact engines (:func:`otspec.engine.first_token.first_token_law`) check a head's losslessness.
    """

    def __init__(self, head, target_model, prompt, sampling=DEFAULT_SAMPLING):
        self.head, self.sampling = head, sampling
        self.prompt = [int(t) for t in prompt]
        if len(self.prompt) < 2:
            raise ValueError("HeadSource: a head drafts from the target's features of the prompt; give >= 2 tokens")
        self.vocab_size = head.vocab_size
        device = head.vocab.device
        with torch.no_grad():
            ids = torch.as_tensor([self.prompt], device=device)
            last, read = target_features(head, target_model, ids)  # [0, j]: the state after token j
            self.features = (last if head.kind == "medusa" else read)[0, :-1]

    def to_json(self) -> dict:
        raise NotImplementedError("a head source is not serialised: it is a head, a target, a prompt and a processing")

    def _row(self, drafted: list) -> np.ndarray:
        head = self.head
        with torch.no_grad():
            if head.kind == "medusa":
                r = min(len(drafted), head.k - 1)
                seen = torch.as_tensor([self.prompt[-1], *[int(t) for t in drafted[:r]]], device=self.features.device)
                logits = head.block_logits(self.features[-1], r, seen if head.hydra else None)
                return self.sampling.rows(head.full_logits(logits))
            tokens, feats = list(self.prompt[1:]), head.fused(self.features)  # per pair: fused before own ones join
            h = head.features(torch.as_tensor([tokens], device=feats.device), feats[None])[0]
            for t in drafted:  # the pair of a drafted token reads the head's own last prediction
                tokens.append(int(t))
                feats = torch.cat([feats, h[-1:]])
                h = head.features(torch.as_tensor([tokens], device=feats.device), feats[None])[0]
            return self.sampling.rows(head.full_logits(head.reduced_logits(h[-1])))

    def _rows(self, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        self._check_tokens(tokens)
        return np.stack([self._row(tokens[b, :n].tolist()) for b, n in enumerate(lengths.tolist())]) \
            if tokens.shape[0] else np.zeros((0, self.vocab_size))


#: How a head's prediction is made, as records state it.
HEAD_METHOD = ("decode engine on the head's rows at every draft depth and the target's rows along an independent "
               "plain-decoding run (a positional pair per prompt whose draft row also depends on the draft depth, "
               "as the head drafts); interval: prediction interval for a run over the measured number of prompts "
               "(two-level paired bootstrap over prompts and their replays, percentile)")


def depth_rows(head, target_model, prompt, continuation, depth: int, sampling, *, states: bool = False):
    """(draft rows (depth, T, V) by draft depth, target rows (T, V)) predicting each continuation token; with
    ``states`` also the head's state (depth, T, H) that each EAGLE draft row is made from (a learned draft-length
    head reads it)."""
    n, T = len(prompt), len(continuation)
    x = torch.as_tensor([list(prompt) + list(continuation)], device=head.vocab.device)
    with torch.no_grad():
        F, G = target_features(head, target_model, x)  # F[0, j]: the state after token j; G: as the head reads it
        q = sampling.rows(target_model.get_output_embeddings()(F[0, n - 1:n - 1 + T]))
        rows, kept = np.empty((depth, T, q.shape[-1])), []
        if head.kind == "eagle":  # pair i = (F[i], x[i + 1]); the row for token n + t is step d + 1 at pair n + t - 2
            outs = eagle_unrolled(head, x, G, torch.ones_like(x, dtype=torch.bool), depth)
            for d in range(depth):
                h = torch.stack([outs[min(d, k)][0, n + k - 2] for k in range(T)])  # depth d needs d drafted tokens
                rows[d] = sampling.rows(head.full_logits(head.reduced_logits(h)))
                kept.append(h.double().cpu().numpy())
        elif states:
            raise ValueError("depth_rows: the Medusa heads have no state of their own for a learned draft-length head")
        else:  # block d on the feature that gave the last committed token x[n + t - d - 1]: F[n + t - d - 2]
            for d in range(depth):
                at = [n + k - min(d, k) - 2 for k in range(T)]
                r = min(d, head.k - 1)  # Hydra: the token F[at] gave, then the r drafted after it
                seen = x[0, [[min(a + 1 + i, x.shape[1] - 1) for i in range(r + 1)] for a in at]] if head.hydra else None
                logits = head.block_logits(F[0, at], r, seen)
                rows[d] = sampling.rows(head.full_logits(logits))
    return (rows, q, np.stack(kept)) if states else (rows, q)


def compact_rows(rows_p, q, top_p: float, max_kept: int | None):
    """Per position: the union of every row's top-p set, relabelled 0..k-1, and three tail symbols.

    Tail symbols k, k + 1, k + 2: shared (the target puts max_d o_d there, depth d puts its own tail overlap
    o_d = Σ_outside min(p_d, q)), draft only, target only; each depth's TV to the target is then exact.
    Returns (draft rows (D, T, W), target rows (T, W)), W = the widest position's k + 3.
    """
    from otspec.distributions import top_p_mask

    D, T, _ = rows_p.shape
    keep = top_p_mask(q, top_p, max_kept)
    for d in range(D):
        keep |= top_p_mask(rows_p[d], top_p, max_kept)
    W = int(keep.sum(axis=1).max()) + 3
    out_p, out_q = np.zeros((D, T, W)), np.zeros((T, W))
    for t in range(T):
        ids = np.flatnonzero(keep[t])
        k = ids.size
        out_q[t, :k] = q[t, ids]
        tail_q = max(1.0 - out_q[t, :k].sum(), 0.0)
        outside = ~keep[t]
        overlaps = np.minimum(rows_p[:, t, outside], q[t, outside]).sum(axis=1)  # o_d per depth
        shared = float(overlaps.max(initial=0.0))
        out_q[t, k], out_q[t, k + 2] = shared, max(tail_q - shared, 0.0)
        for d in range(D):
            out_p[d, t, :k] = rows_p[d, t, ids]
            tail_p = max(1.0 - out_p[d, t, :k].sum(), 0.0)
            out_p[d, t, k], out_p[d, t, k + 1] = overlaps[d], max(tail_p - overlaps[d], 0.0)
    out_p /= out_p.sum(axis=-1, keepdims=True)
    out_q /= out_q.sum(axis=-1, keepdims=True)
    return out_p, out_q


def head_replays(pair, prompts, continuations, depth: int, *, sampling=DEFAULT_SAMPLING, top_p: float = 0.95,
                 max_kept: int | None = 256, states: list | None = None) -> list:
    """(draft, target) sources per prompt along ``continuations`` (an independent plain run) for otspec's predictions.

    The draft is a :class:`~otspec.sources.DepthPositionalSource`: its row at step t and draft depth d is the
    head's row for that token after d drafted tokens (the continuation's own tokens standing in for the drafted
    ones), so the replay drafts as the head does; the target is a :class:`~otspec.sources.PositionalSource`.
    Each position keeps the union of the rows' top-p sets (at most ``max_kept`` tokens each), relabelled per
    position (a positional pair's laws do not depend on the labels), plus three tail symbols that keep every
    depth's TV to the target exact. ``states``: a list that gets each prompt's EAGLE head states by depth (D, T, H)
    (:func:`depth_rows`), for a learned draft-length rule's replay.
    """
    from otspec.sources import DepthPositionalSource, PositionalSource

    out = []
    for prompt, cont in zip(prompts, continuations, strict=True):
        cont = list(np.asarray(cont, dtype=np.int64))
        if len(prompt) < 2 or not cont:
            raise ValueError("head_replays: every prompt needs >= 2 tokens and every continuation >= 1")
        p, q, *kept = depth_rows(pair.drafter.head, pair.target.model, list(prompt), cont, depth, sampling,
                                 states=states is not None)
        if kept:
            states.append(kept[0])
        p, q = compact_rows(p, q, top_p, max_kept)
        out.append((DepthPositionalSource(p), PositionalSource(q)))
    return out
