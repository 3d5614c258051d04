"""Language models behind otspec's session protocol: a KV-cache session and an n-gram lookup.

:class:`ModelSession` puts a causal LM with a KV cache (:mod:`llm_bridge.cache`) behind
:class:`otspec.engine.session.Session`, so the chain and tree loops of :mod:`otspec.engine.loop`
drive a real model exactly as they drive a toy source. It owns what the cache has not seen: the
committed tokens it still has to feed (at least the last one, whose row the next call needs) are
fed at the start of the next call, and a commit keeps the scored speculative tokens that spell the
committed ones (a crop or a tree path) and drops the rest. Logits become probability rows through
the loop's :class:`~llm_bridge.sampling.Sampling` on the model's device; ``host_rows`` hands them
over as float64 numpy (the CPU default) or keeps them as float64 tensors on the device.

:class:`NGramSession` is prompt lookup: one-hot rows of the token that followed the latest earlier
occurrence of the last n-gram, and ``usable`` False where nothing recurs.
"""

from __future__ import annotations

import numpy as np

from otspec.distributions import on_device, to_device
from otspec.engine.observers import to_host
from otspec.engine.session import Scores, Session, as_prompts

from .cache import make_cache
from .models import output_size
from .treemask import slot_lookup

__all__ = ["ModelSession", "NGramSession", "concat_tokens", "padded", "row_tokens", "splice", "target_hidden"]


def target_hidden(drafter):
    """The ``hidden`` of the target's session under ``drafter``: False (it reads no target features), True (the last
    hidden states), or a head's fused layers (a tuple of ``hidden_states`` indices: those layers' states, then the
    last ones, concatenated; see :func:`llm_bridge.cache.chosen_states`)."""
    if not drafter.reads_target_features:
        return False
    return tuple(getattr(drafter, "target_layers", ())) or True


def _is_tensor(x) -> bool:
    return type(x).__module__.startswith("torch")


def padded(rows: list, device=None):
    """Right-pad a list of 1-D token arrays: (tokens (B, m), counts (B,)); a tensor on ``device`` when any row is one."""
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    width = max(int(counts.max(initial=0)), 1)
    if any(_is_tensor(r) for r in rows):
        import torch

        out = torch.zeros((len(rows), width), dtype=torch.int64, device=device)
        for b, r in enumerate(rows):
            if len(r):
                out[b, :len(r)] = on_device(r, device)
        return out, counts
    out = np.zeros((len(rows), width), dtype=np.int64)
    for b, r in enumerate(rows):
        out[b, :len(r)] = r
    return out, counts


def splice(a, a_len, b, b_from, b_len):
    """Per row r: ``a[r, :a_len[r]]`` then ``b[r, b_from[r]:b_from[r] + b_len[r]]``, right-padded with 0, in one
    gather (a tensor on the device when either is one: no per-row operations). Returns ((B, W) tokens, lengths (B,)),
    W at least 1."""
    a_len, b_from, b_len = (np.asarray(x, dtype=np.int64) for x in (a_len, b_from, b_len))
    n = a_len + b_len
    width = max(int(n.max(initial=0)), 1)
    A, M = a.shape[1], b.shape[1]
    col = np.arange(width)[None, :]
    idx = np.where(col < a_len[:, None], col,
                   np.where(col < n[:, None], A + b_from[:, None] + col - a_len[:, None], A + M))
    if _is_tensor(a) or _is_tensor(b):
        import torch

        device = a.device if _is_tensor(a) else b.device
        both = torch.cat([on_device(a, device).long(), on_device(b, device).long(),
                          torch.zeros((a.shape[0], 1), dtype=torch.int64, device=device)], dim=1)
        return torch.gather(both, 1, to_device(idx, device)), n
    both = np.concatenate([np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64),
                           np.zeros((a.shape[0], 1), dtype=np.int64)], axis=1)
    return np.take_along_axis(both, idx, axis=1), n


def row_tokens(tokens, counts, b: int):
    """Row b's real tokens (a view: numpy, or a tensor left on its device)."""
    row = tokens[b, :int(counts[b])]
    return row if _is_tensor(row) else np.asarray(row, dtype=np.int64)


def _ids(tokens):
    """Token ids: a tensor stays on its device, anything else becomes an int64 numpy array."""
    return tokens if _is_tensor(tokens) else np.asarray(tokens, dtype=np.int64)


def concat_tokens(a, b):
    """Two 1-D token arrays end to end (a tensor when either is one)."""
    if _is_tensor(a) or _is_tensor(b):
        import torch

        device = a.device if _is_tensor(a) else b.device
        return torch.cat([on_device(a, device).long(), on_device(b, device).long()])
    return np.concatenate([a, b])


class ModelSession(Session):
    """A causal LM over B sequences with a KV cache (see the module docstring).

    Parameters
    ----------
    model : transformers causal LM
    batch : int
    sampling : Sampling
        Logit processing (temperature, top-k, top-p) of the rows.
    hidden : bool or tuple of int
        Also return the last hidden states as features (a learned draft-length head or a feature-level
        draft head reads them), and keep the prompt's as ``prompt_features`` after :meth:`start`; a tuple of
        layer indices puts those layers' states before them (:func:`target_hidden`).
    cache : str
        A kind of :func:`~llm_bridge.cache.make_cache`.
    max_length : int, optional
        The longest sequence a static cache holds.
    host_rows : bool
        Rows as float64 numpy arrays (True) or float64 tensors on the model's device.
    timer : CallTimer, optional
        Times the prefill as ``"<name>_prefill"``.
    name : str
    """

    def __init__(self, model, batch: int, sampling, *, hidden: bool = False, cache: str = "auto",
                 max_length: int | None = None, host_rows: bool = True, timer=None, name: str = "model"):
        self.cache = make_cache(model, batch, hidden=hidden, kind=cache, max_length=max_length)
        self.batch, self.sampling, self.hidden = int(batch), sampling, hidden
        self.vocab_size = output_size(model)
        self.device, self.host_rows, self.timer, self.name = self.cache.device, bool(host_rows), timer, name
        self.rows_device = None if self.host_rows else self.device
        self._reset()

    def _reset(self) -> None:
        B = self.batch
        self.base = np.zeros(B, dtype=np.int64)  # committed tokens the cache holds
        # committed tokens not fed yet and the speculative chain fed since the last commit: (B, width) arrays (on the
        # device when the tokens are) with their lengths on the host
        self.pending, self.pending_len = np.zeros((B, 0), dtype=np.int64), np.zeros(B, dtype=np.int64)
        self.spec, self.fed = np.zeros((B, 0), dtype=np.int64), np.zeros(B, dtype=np.int64)
        self._tree = None  # per row: (prefix slots, node tokens, node parents, node slots)
        self._last = None  # (logits (B, V), hidden (B, H) or None) after each row's current end
        self.prompt_features = None  # with hidden=True, after start: per sequence (n_b - 1, H)

    # ------------------------------------------------------------------ protocol
    def start(self, prompts) -> None:
        prompts = as_prompts(prompts)
        if len(prompts) != self.batch:
            raise ValueError(f"start: {len(prompts)} prompts for a session of batch {self.batch}")
        if min(p.size for p in prompts) < 1:
            raise ValueError("every prompt needs at least one token (a BOS or chat-template token)")
        self._reset()
        tokens, counts = padded([p[:-1] for p in prompts])
        hidden = None
        if counts.max() > 0:
            _, hidden = self._timed(f"{self.name}_prefill", int(counts.max()), self.cache.feed, tokens, counts)
        if self.hidden:  # the state after each prompt token but the last (a feature-reading drafter's context)
            if hidden is None:  # one-token prompts: no state before their last token
                import torch

                width = self.cache.model.config.hidden_size * (1 + (len(self.hidden) if isinstance(self.hidden, tuple)
                                                                    else 0))
                hidden = torch.zeros((self.batch, 0, width), device=self.device)
            self.prompt_features = [self._host(hidden[b, :c].double()) for b, c in enumerate(counts)]
        self.base = counts.copy()
        self.pending = np.array([p[-1:] for p in prompts], dtype=np.int64).reshape(self.batch, 1)
        self.pending_len = np.ones(self.batch, dtype=np.int64)
        self.fed[:] = 0

    def feed(self, tokens, counts) -> Scores:
        if self._tree is not None:
            raise RuntimeError("feed: tree nodes are pending; commit first")
        tokens, counts = _ids(tokens), np.asarray(counts, dtype=np.int64)
        m = tokens.shape[1]
        u = self.pending_len.copy()
        zero = np.zeros(self.batch, dtype=np.int64)
        inputs, n = splice(self.pending, u, tokens, zero, counts)
        if n.max() == 0:
            logits = hidden = None
        else:
            logits, hidden = self.cache.feed(inputs, n)
        self.spec, _ = splice(self.spec, self.fed, tokens, zero, counts)
        self.pending_len = zero
        self.fed = self.fed + counts
        self.base = self.base + u
        # logits row u_b - 1 + j is the row after new token j (j = 0: after the last pending token)
        at = np.minimum(u[:, None] - 1 + np.arange(m + 1)[None, :], np.maximum(n - 1, 0)[:, None])
        return self._scores(logits, hidden, at, n)

    def feed_tree(self, tokens, parents, counts) -> Scores:
        """Score tree nodes (the protocol's numbering). ``parents`` may be a tensor on the device (a tree whose shape
        was chosen there, e.g. by confidence): the cache's parents and the tree mask are then built there, and the
        commit needs ``nodes``."""
        if self.fed.any():
            raise RuntimeError("feed_tree: a speculative chain is pending; commit first")
        tokens, counts = _ids(tokens), np.asarray(counts, dtype=np.int64)
        shaped_on_device = _is_tensor(parents)
        parents = parents if shaped_on_device else np.asarray(parents, dtype=np.int64)
        B, m = tokens.shape
        if self._tree is None:
            self._tree = [([], [], [], []) for _ in range(B)]
        first = self.cache.pending  # cache slots are numbered across calls, padding included
        u = self.pending_len.copy()
        cache_parents, base = [], np.full(B, -1, dtype=np.int64)
        for b in range(B):
            prefix, node_tokens, node_parents, slots = self._tree[b]
            par = [first + i - 1 if i else (prefix[-1] if prefix else -1) for i in range(u[b])]
            prefix.extend(first + i for i in range(u[b]))
            base[b] = prefix[-1] if prefix else -1
            for j in range(int(counts[b])):
                if shaped_on_device:
                    node_parents.append(None)  # known on the device only
                else:
                    parent = int(parents[b, j])
                    if not -1 <= parent < len(node_parents):
                        raise ValueError(f"feed_tree: parent {parent} of row {b} is not a node fed before it")
                    par.append(slots[parent] if parent >= 0 else base[b])
                    node_parents.append(parent)
                slots.append(first + int(u[b]) + j)
            node_tokens.append(row_tokens(tokens, counts, b))  # read only to match a commit given no nodes
            cache_parents.append(par)
        # the committed tokens not fed yet, then the nodes (left where they are: nothing read back)
        inputs, n = splice(self.pending, u, tokens, np.zeros(B, dtype=np.int64), counts)
        self.pending_len = np.zeros(B, dtype=np.int64)
        par = np.full(inputs.shape, -1, dtype=np.int64)
        for b, p in enumerate(cache_parents):
            par[b, :len(p)] = p
        if shaped_on_device:
            par = self._device_parents(par, parents, u, counts, base)
        logits, hidden = self.cache.feed_tree(inputs, par, n) if n.max() > 0 else (None, None)
        at = np.minimum(u[:, None] - 1 + np.arange(m + 1)[None, :], np.maximum(n - 1, 0)[:, None])
        return self._scores(logits, hidden, at, n)

    def _device_parents(self, host_part, parents, u, counts, base):
        """The cache's parents (B, W) on the device: the pending chain's from the host, each node's the cache slot of
        its parent node (looked up on the device from the host's slot table) or the sequence's last token."""
        import torch

        node_par = slot_lookup([t[3] for t in self._tree], parents, base, self.device)
        col = np.arange(host_part.shape[1])[None, :] - u[:, None]  # the node index at each input column
        is_node = (col >= 0) & (col < counts[:, None])
        at = to_device(np.clip(col, 0, max(parents.shape[1] - 1, 0)), self.device)
        picked = torch.gather(node_par, 1, at) if parents.shape[1] else torch.zeros_like(at)
        return torch.where(to_device(is_node, self.device), picked, to_device(host_part, self.device))

    def commit(self, tokens, counts, *, nodes=None) -> None:
        """``nodes`` (after tree calls): per sequence, the fed tree nodes that spell its committed tokens from the
        root (indices in the order they were fed); without it they are found by comparing tokens (a read-back when
        the tokens are on a device)."""
        tokens, counts = _ids(tokens), np.asarray(counts, dtype=np.int64)
        paths, kept = [], np.zeros(self.batch, dtype=np.int64)
        if self._tree is None:  # a chain: the speculative tokens that spell the committed ones stay
            kept = np.minimum(self._agree(tokens, counts), np.maximum(counts - 1, 0))  # the last one stays unseen
            self.base += kept
        for b in range(self.batch if self._tree is not None else 0):  # a tree: the nodes on the committed path stay
            prefix, node_tokens, node_parents, slots = self._tree[b]
            if nodes is None:
                if any(p is None for p in node_parents):
                    raise ValueError("commit: this tree's parents were given on the device; pass nodes= (the fed "
                                     "nodes that spell the committed tokens)")
                fed = np.concatenate([to_host(t) for t in node_tokens]) if node_tokens else np.zeros(0, np.int64)
                kept_nodes = self._match_tree(fed.tolist(), node_parents, to_host(row_tokens(tokens, counts, b)[:-1]))
            else:
                kept_nodes = [int(j) for j in nodes[b]]
            paths.append(prefix + [slots[j] for j in kept_nodes])
            self.base[b] += len(prefix) + len(kept_nodes)
            kept[b] = len(kept_nodes)
        self.pending, self.pending_len = splice(self.pending, self.pending_len, tokens, kept, counts - kept)
        self.fed[:] = 0
        if self._tree is not None:
            self._tree = None
            self.cache.keep_path(paths)
        else:
            self.cache.rollback(self.base)

    # ------------------------------------------------------------------ helpers
    def _agree(self, tokens, counts) -> np.ndarray:
        """Per sequence, how many of the committed tokens the speculative chain fed since the last commit spells.

        On the host they are compared. Tokens on a device are taken to follow the chain for as far as both go (the
        chain loop commits accepted drafts, a prefix of what it fed): comparing them would read back from the
        device."""
        both = np.minimum(self.fed, counts)
        if _is_tensor(self.spec) or _is_tensor(tokens):
            return both
        k = min(self.spec.shape[1], tokens.shape[1])
        if k == 0:
            return np.zeros(self.batch, dtype=np.int64)
        same = (self.spec[:, :k] == np.asarray(tokens)[:, :k]) & (np.arange(k)[None, :] < both[:, None])
        return np.cumprod(same, axis=1).sum(axis=1).astype(np.int64)

    @staticmethod
    def _match_tree(node_tokens, node_parents, new) -> list:
        """Nodes of the pending tree that spell a prefix of ``new`` from the root, root first."""
        path, at = [], -1
        for x in new.tolist():
            child = next((j for j, (t, p) in enumerate(zip(node_tokens, node_parents, strict=True))
                          if p == at and t == x), None)
            if child is None:
                break
            path.append(child)
            at = child
        return path

    def _host(self, x):
        """A float64 feature tensor as the session hands rows over (numpy on the host, else left on the device)."""
        return x.cpu().numpy() if self.host_rows else x

    def _timed(self, kind, n, fn, *args):
        return fn(*args) if self.timer is None else self.timer.call(kind, n, fn, *args)

    def _scores(self, logits, hidden, at, n) -> Scores:
        """Rows (B, m + 1, V) at logits positions ``at``; rows of sequences fed nothing come from the last call."""
        import torch

        B = self.batch
        if logits is None:
            picked = self._last[0][:, None].expand(-1, at.shape[1], -1)
            feats = None if self._last[1] is None else self._last[1][:, None].expand(-1, at.shape[1], -1)
        else:
            index = to_device(np.maximum(at, 0), self.device)
            picked = torch.gather(logits, 1, index[..., None].expand(-1, -1, logits.shape[-1]))
            feats = None if hidden is None else torch.gather(hidden, 1, index[..., None].expand(-1, -1, hidden.shape[-1]))
            stale_b, stale_j = np.nonzero((at < 0) | (n[:, None] == 0))
            if self._last is not None and stale_b.size:  # rows at or before the end of a sequence fed nothing new:
                sb = to_device(stale_b, self.device)  # the last call's (host indices: no read-back)
                sj = to_device(stale_j, self.device)
                picked[sb, sj] = self._last[0][sb]  # picked and feats are this call's own gathers
                if feats is not None and self._last[1] is not None:
                    feats[sb, sj] = self._last[1][sb]
            end = to_device(np.maximum(n - 1, 0), self.device)
            last = logits[torch.arange(B, device=self.device), end]
            last_h = None if hidden is None else hidden[torch.arange(B, device=self.device), end]
            if self._last is not None and not (n > 0).all():
                fresh = to_device(n > 0, self.device)
                last = torch.where(fresh[:, None], last, self._last[0])
                if last_h is not None and self._last[1] is not None:
                    last_h = torch.where(fresh[:, None], last_h, self._last[1])
            self._last = (last, last_h)
        rows = self.sampling.probs(picked)
        if feats is not None:
            feats = feats.double()
        if self.host_rows:
            rows = rows.cpu().numpy()
            feats = None if feats is None else feats.cpu().numpy()
        return Scores(rows, feats)


class NGramSession(Session):
    """Prompt lookup over B sequences: rows are one-hot on the proposed token; ``usable`` says where one exists."""

    def __init__(self, drafter, batch: int):
        self.drafter, self.batch, self.vocab_size = drafter, int(batch), int(drafter.vocab_size)
        self.history = [np.zeros(0, dtype=np.int64) for _ in range(self.batch)]
        self.committed = np.zeros(self.batch, dtype=np.int64)

    def start(self, prompts) -> None:
        self.history = [p.copy() for p in as_prompts(prompts)]
        self.committed = np.array([h.size for h in self.history], dtype=np.int64)

    def feed(self, tokens, counts) -> Scores:
        tokens, counts = np.asarray(tokens, dtype=np.int64), np.asarray(counts, dtype=np.int64)
        m = tokens.shape[1]
        rows = np.zeros((self.batch, m + 1, self.vocab_size))
        usable = np.zeros((self.batch, m + 1), dtype=bool)
        for b in range(self.batch):
            end = self.history[b].size
            self.history[b] = np.concatenate([self.history[b], row_tokens(tokens, counts, b)])
            for j in range(m + 1):
                token = self.drafter.propose(self.history[b][:end + min(j, int(counts[b]))])
                usable[b, j] = token >= 0
                rows[b, j, max(token, 0)] = 1.0
        return Scores(rows, None, usable)

    def feed_tree(self, tokens, parents, counts) -> Scores:
        raise ValueError("the n-gram drafter proposes one token per position; a draft tree needs a model draft")

    def commit(self, tokens, counts) -> None:
        counts = np.asarray(counts, dtype=np.int64)
        self.history = [np.concatenate([h[:c], row_tokens(tokens, counts, b)])
                        for b, (h, c) in enumerate(zip(self.history, self.committed, strict=True))]
        self.committed = self.committed + counts
