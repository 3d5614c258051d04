"""The sessions of the feature-level heads of :mod:`llm_bridge.heads`: :class:`EagleSession` (a KV cache over the
head's own decoder layer) and :class:`MedusaSession` (Medusa's and Hydra's blocks on the last committed feature). Both
read the target's features through the session protocol (``reads_target_features``: ``start(prompts,
features=...)``, ``commit(..., features=...)``) and return full-vocabulary rows, 0 outside a reduced vocabulary."""

from __future__ import annotations

import numpy as np
import torch

from otspec.distributions import to_device
from otspec.engine.session import Scores, Session, as_prompts

from .cache import make_cache
from .sampling import DEFAULT_SAMPLING
from .sessions import concat_tokens, padded, row_tokens
from .treemask import slot_lookup

__all__ = ["EagleSession", "MedusaSession"]


def _tokens_of(tokens, counts, b: int):
    """Row b's committed tokens: a view of a device tensor (nothing read back), or int64 numpy."""
    return row_tokens(tokens, counts, b)


class _FeatureSession(Session):
    """What both head sessions share: target features in, full-vocabulary rows out."""

    reads_target_features = True

    def _features(self, features, b: int, count: int | None = None):
        """Sequence b's features (first ``count`` rows) as a float tensor on the head's device."""
        f = features[b] if count is None else features[b, :count]
        return torch.as_tensor(f, device=self.device).to(self.dtype)

    def _need(self, features, what: str):
        if features is None:
            raise ValueError(f"{type(self).__name__}.{what}: the head reads the target's features; pass features=")

    def feed_tree(self, tokens, parents, counts) -> Scores:
        raise ValueError(f"{type(self).__name__} drafts chains; the tree loop needs a draft model or the EAGLE head")

    def _out(self, rows, feats, usable) -> Scores:
        if self.host_rows:
            rows = rows.cpu().numpy()
            feats = None if feats is None else feats.cpu().numpy()
        return Scores(rows, feats, usable)


class EagleSession(_FeatureSession):
    """An :class:`EagleHead` with a KV cache over B sequences (see the module docstring)."""

    def __init__(self, head, batch: int, sampling=DEFAULT_SAMPLING, *, hidden: bool = False, cache: str = "auto",
                 max_length: int | None = None, host_rows: bool = True):
        self.head, self.batch, self.sampling, self.hidden = head, int(batch), sampling, bool(hidden)
        self.vocab_size = head.vocab_size
        self.cache = make_cache(head, self.batch, hidden=True, kind=cache, max_length=max_length)
        self.device, self.dtype = self.cache.device, head.fc.weight.dtype
        self.host_rows = bool(host_rows)
        self.rows_device = None if self.host_rows else self.device
        self.started = False

    def start(self, prompts, features=None) -> None:
        self._need(features, "start")
        prompts = as_prompts(prompts)
        if len(prompts) != self.batch:
            raise ValueError(f"start: {len(prompts)} prompts for a session of batch {self.batch}")
        if self.started:
            raise RuntimeError("EagleSession.start: a session serves one batch of prompts; open a new one")
        self.started = True
        B, H = self.batch, self.head.config.hidden_size
        self.base = np.zeros(B, dtype=np.int64)  # committed pairs in the cache
        self.pending = [(p[1:].copy(), self._features(features, b)) for b, p in enumerate(prompts)]
        for b, (toks, feats) in enumerate(self.pending):
            if feats.shape[0] != toks.size:
                raise ValueError(f"start: prompt {b} has {toks.size + 1} tokens and {feats.shape[0]} target features "
                                 f"(expected one per token but the last)")
        self.last_logits = self.head.full_logits(torch.zeros((B, self.head.vocab.numel()), device=self.device,
                                                             dtype=self.dtype))
        self.last_h = torch.zeros((B, H), device=self.device, dtype=self.dtype)
        self.has_last = np.zeros(B, dtype=bool)
        self._nodes = None  # a pending tree: per row, the cache's index of each node; the features of every column

    def _run(self, tokens, counts, feats) -> None:
        """One head call on pairs (feats, tokens) of ``counts[b]`` per row; the last real output becomes each row's state."""
        logits, h = self.cache.feed(tokens, counts, features=feats)
        rows = np.flatnonzero(counts > 0)
        at = to_device(counts[rows] - 1, self.device)
        sel = to_device(rows, self.device)
        self.last_logits[sel] = logits[sel, at]
        self.last_h[sel] = h[sel, at]
        self.has_last[rows] = True

    def _feed_pending(self) -> None:
        u = np.array([len(t) for t, _ in self.pending], dtype=np.int64)
        if u.max(initial=0) == 0:
            return
        tokens, _ = padded([t for t, _ in self.pending])
        width = self.pending[0][1].shape[-1]  # the target's features (fused layers: wider than the head's own)
        feats = torch.zeros((self.batch, tokens.shape[1], width), device=self.device, dtype=self.dtype)
        for b, (_, f) in enumerate(self.pending):
            feats[b, :f.shape[0]] = f
        self._run(tokens, u, feats)
        self.base += u
        self.pending = [(t[:0], f[:0]) for t, f in self.pending]

    def feed(self, tokens, counts) -> Scores:
        counts = np.asarray(counts, dtype=np.int64)
        tokens = tokens if torch.is_tensor(tokens) else np.asarray(tokens, dtype=np.int64)  # a tensor stays put
        self._feed_pending()
        logits, feats = [self.last_logits.clone()], [self.last_h.clone()]
        for j in range(tokens.shape[1]):  # each drafted token's pair reads the feature the head predicted before it
            step = (counts > j).astype(np.int64)
            if step.any():
                self._run(tokens[:, j:j + 1], step, self.last_h[:, None])
            logits.append(self.last_logits.clone())
            feats.append(self.last_h.clone())
        rows = self.sampling.probs(torch.stack(logits, dim=1))
        usable = np.repeat(self.has_last[:, None], len(logits), axis=1)
        return self._out(rows, torch.stack(feats, dim=1).double() if self.hidden else None, usable)

    def feed_tree(self, tokens, parents, counts) -> Scores:
        """Tree nodes (the session protocol's numbering: per row, the nodes fed since the last commit, -1 for a child of
        the committed tokens) in one head call: each node's pair reads the feature the head predicted at its parent
        (the last committed token's for -1), so a node's row equals drafting its path as a chain."""
        counts = np.asarray(counts, dtype=np.int64)
        on_device = torch.is_tensor(parents)  # a tree shaped on the device (by confidence): parents stay there
        parents = parents if on_device else np.asarray(parents, dtype=np.int64)
        tokens = tokens if torch.is_tensor(tokens) else np.asarray(tokens, dtype=np.int64)  # a tensor stays put
        B, m = tokens.shape
        if self._nodes is None:
            self._feed_pending()
            self._nodes = ([[] for _ in range(B)], self.last_h.new_zeros((B, 0, self.last_h.shape[1])))
        slots, node_h = self._nodes
        first = node_h.shape[1]  # the cache numbers pending nodes by column, padding included
        par = np.full((B, m), -1, dtype=np.int64)
        for b in np.flatnonzero(counts):
            for j in range(0 if on_device else int(counts[b])):
                parent = int(parents[b, j])
                if not -1 <= parent < len(slots[b]):
                    raise ValueError(f"feed_tree: parent {parent} of row {b} is not a node fed before it")
                if parent >= 0:
                    par[b, j] = slots[b][parent]
            slots[b].extend(first + j for j in range(int(counts[b])))
        if on_device:  # each node's column from the slot table, looked up on the device; padding has no parent
            real = to_device(np.arange(m)[None, :] < counts[:, None], self.device)
            par = torch.where(real, slot_lookup(slots, parents, -1, self.device), -1)
        par_dev = par if on_device else to_device(par, self.device)
        # each node's pair reads the feature predicted at its parent (the last committed token's for -1): one gather
        at = par_dev.clamp(min=0)
        from_nodes = node_h[torch.arange(B, device=self.device)[:, None], at] if first else self.last_h[:, None]
        feats = torch.where((par_dev >= 0)[..., None], from_nodes, self.last_h[:, None])
        logits, h = self.cache.feed_tree(tokens, par, counts, features=feats)
        self._nodes = (slots, torch.cat([node_h, h], dim=1))
        rows = self.sampling.probs(torch.cat([self.last_logits[:, None], logits], dim=1))
        return self._out(rows, None, np.repeat(self.has_last[:, None], m + 1, axis=1))

    def commit(self, tokens, counts, features=None, *, nodes=None) -> None:
        """Commit the tokens (their target features re-read by the head); ``nodes`` (a tree's walked nodes) changes
        nothing here: a drafted tree's nodes ran on predicted features, so none is kept."""
        self._need(features, "commit")
        counts = np.asarray(counts, dtype=np.int64)
        if self._nodes is not None:  # a drafted tree: none of its nodes stays (the target's features replace them)
            self.cache.keep_path([[] for _ in range(self.batch)])
            self._nodes = None
        self.cache.rollback(self.base)  # drafted pairs ran on predicted features: re-read them with the target's
        for b in np.flatnonzero(counts):
            toks, feats = self.pending[b]
            new = _tokens_of(tokens, counts, b)
            self.pending[b] = (concat_tokens(toks, new), torch.cat([feats, self._features(features, b, int(counts[b]))]))


class MedusaSession(_FeatureSession):
    """:class:`MedusaHeads` over B sequences: the row at draft position i is block i's on the last committed feature
    (Hydra's blocks also on the last committed token and the i tokens drafted after it)."""

    def __init__(self, head, batch: int, sampling=DEFAULT_SAMPLING, *, host_rows: bool = True):
        self.head, self.batch, self.sampling = head, int(batch), sampling
        self.vocab_size = head.vocab_size
        self.device = head.vocab.device
        self.dtype = head.blocks[0].weight.dtype
        self.host_rows = bool(host_rows)
        self.rows_device = None if self.host_rows else self.device

    def start(self, prompts, features=None) -> None:
        self._need(features, "start")
        prompts = as_prompts(prompts)
        H = self.head.out_rows.shape[-1]  # (a Hydra block reads more than the feature)
        self.last = torch.zeros((self.batch, H), device=self.device, dtype=self.dtype)
        self.has = np.zeros(self.batch, dtype=bool)
        for b, p in enumerate(prompts):
            f = self._features(features, b)
            if f.shape[0] != p.size - 1:
                raise ValueError(f"start: prompt {b} has {p.size} tokens and {f.shape[0]} target features")
            if f.shape[0]:
                self.last[b], self.has[b] = f[-1], True
        self.drafted = np.zeros(self.batch, dtype=np.int64)
        self._rows = None
        # Hydra: per row, the last committed token then the drafted ones a block reads (k at most)
        self.hist = None  # Medusa's blocks read no tokens: no history kept
        if self.head.hydra:
            self.hist = torch.zeros((self.batch, self.head.k), dtype=torch.int64, device=self.device)
            self.hist[:, 0] = torch.as_tensor([int(p[-1]) for p in prompts], device=self.device)

    def _hydra_rows(self, tokens, counts, at):
        """Hydra's rows (B, m + 1, V) at block indices ``at`` (B, m + 1), the drafted ``tokens`` written first."""
        k = self.head.k
        tokens = tokens if torch.is_tensor(tokens) else torch.as_tensor(np.asarray(tokens, dtype=np.int64))
        b, j = np.nonzero(np.arange(tokens.shape[1])[None, :] < counts[:, None])
        pos = self.drafted[b] + 1 + j
        keep = pos < k
        if keep.any():
            self.hist[to_device(b[keep], self.device), to_device(pos[keep], self.device)] = \
                tokens.to(self.device)[to_device(b[keep], self.device), to_device(j[keep], self.device)]
        r = np.minimum(at, k - 1)
        logits = None
        with torch.no_grad():
            for block in np.unique(r):
                rb, rj = np.nonzero(r == block)
                got = self.head.block_logits(self.last[to_device(rb, self.device)], int(block),
                                             self.hist[to_device(rb, self.device), :block + 1])
                if logits is None:
                    logits = got.new_zeros((*r.shape, got.shape[-1]))
                logits[to_device(rb, self.device), to_device(rj, self.device)] = got
        return self.sampling.probs(self.head.full_logits(logits))

    def feed(self, tokens, counts) -> Scores:
        counts = np.asarray(counts, dtype=np.int64)
        if self.head.hydra:
            at = self.drafted[:, None] + np.minimum(np.arange(tokens.shape[1] + 1)[None, :], counts[:, None])
            rows = self._hydra_rows(tokens, counts, at)
            self.drafted += counts
            return self._out(rows, None, self.has[:, None] & (at < self.head.k))
        if self._rows is None:  # every block's row on every sequence's last committed feature: one call
            with torch.no_grad():
                self._rows = self.sampling.probs(self.head.full_logits(self.head(self.last)))  # (B, k, V)
        at = self.drafted[:, None] + np.minimum(np.arange(tokens.shape[1] + 1)[None, :], counts[:, None])
        usable = self.has[:, None] & (at < self.head.k)
        index = to_device(np.minimum(at, self.head.k - 1), self.device)
        rows = torch.gather(self._rows, 1, index[..., None].expand(-1, -1, self._rows.shape[-1]))
        self.drafted += counts
        return self._out(rows, None, usable)

    def commit(self, tokens, counts, features=None) -> None:
        self._need(features, "commit")
        counts = np.asarray(counts, dtype=np.int64)
        for b in np.flatnonzero(counts):
            self.last[b] = self._features(features, b, int(counts[b]))[-1]
            self.has[b] = True
            if self.head.hydra:  # the last committed token (Medusa's blocks never read it: no read-back)
                self.hist[b, 0] = int(_tokens_of(tokens, counts, b)[-1])
        self.drafted[:] = 0
        self._rows = None
