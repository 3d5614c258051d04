"""KV caches for a batch of sequences of different lengths, with rollback after a rejection.

Speculative decoding feeds a model tokens that are later thrown away (rejected drafts), and in a
batch every sequence keeps a different number of them. :class:`CachedLM` holds one Hugging Face
``DynamicCache`` for B sequences whose slots are laid out *left-padded*: row b's n_b tokens sit in
the last n_b slots, the slots before them are holes masked out of attention. Each call

* :meth:`CachedLM.feed` appends ``counts[b]`` tokens to row b (the input is right-padded; padding
  slots are masked, positions come from each row's own length, so RoPE sees no holes), and
* :meth:`CachedLM.rollback` keeps the first ``keep[b]`` tokens of row b,

Rolled-back slots stay in the cache as holes (masked out of attention) until there are more than
``max_holes`` slots beyond the longest row; then the layout is restored: trailing holes are cropped
(views, no copy), and holes between tokens are squeezed out by one gather over the slot axis of
every layer. A decode step's rollback so touches no tensor most of the time (a crop or gather per
layer costs more Python than the few masked slots cost attention); ``max_holes=0`` restores the
layout after every call.

Token trees: :meth:`CachedLM.feed_tree` scores a tree of draft tokens per sequence in one forward
pass — each node attends to the sequence and to its own ancestors (a 4-D attention mask) at
position length + depth, so its row equals sequential scoring of its path — and
:meth:`CachedLM.keep_path` then keeps one root-first path of each tree and drops the other nodes.
"""

from __future__ import annotations

import functools
import inspect
import weakref

import numpy as np

from otspec.distributions import on_device

from .treemask import check_path, grow_tree, grow_tree_on_device

__all__ = ["CACHE_KINDS", "STATIC_BUCKET", "CachedLM", "StaticCachedLM", "cache_kwargs", "compiled_forward",
           "logits_and_features", "make_cache", "pooled_cache"]

#: ``dynamic``: :class:`CachedLM` (eager; the CPU default); ``static``: :class:`StaticCachedLM` eager;
#: ``compiled``: :class:`StaticCachedLM` with a ``torch.compile``-d forward (the CUDA default); ``auto``.
CACHE_KINDS = ("auto", "dynamic", "static", "compiled")
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
#: Compiled caches round their length up to a multiple of this, so that runs of different prompt
#: lengths, draft lengths and token counts share one slot count, and so one graph per call width.
STATIC_BUCKET = 256
#: Per model, the static caches made so far, by (batch, slots, dtype): a new session of the same size
#: reuses the tensors of one whose session has ended (their addresses are what a compiled graph holds).
_POOL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@functools.cache
def _cache_keyword(kind: type) -> str:
    params = inspect.signature(kind.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_kwargs(module, cache, inputs: dict | None = None) -> dict:
    """``inputs`` (default none) with ``cache`` under the keyword ``module``'s forward takes it by: ``cache`` where
    transformers has renamed ``past_key_values`` (deprecated from 5.24 on, to be removed), else ``past_key_values``
    (older releases, and modules of this package such as the EAGLE head)."""
    out = {k: v for k, v in (inputs or {}).items() if k not in ("cache", "past_key_values")}
    out[_cache_keyword(type(module))] = cache
    return out


def compiled_forward(model):
    """``torch.compile(model)`` once per model: CUDA graphs (``reduce-overhead``) on a GPU, inductor on a CPU.

    Two graphs per model: one for calls of 1 token, one whose width is symbolic for every wider call
    (L + 1 tokens, a shorter draft at the end of a run, a tree); :func:`make_cache` rounds the slot count
    up to :data:`STATIC_BUCKET` and the prefill runs eagerly, so nothing else varies; and the static
    cache's tensors keep their addresses (sessions of one size share them, see :func:`pooled_cache`),
    so the graphs are replayed, not rebuilt. The graph returns the logits and the last hidden states
    (:func:`logits_and_features`), so plain and feature-reading sessions of one width share it.
    """
    import torch

    forward = _COMPILED.get(model)
    if forward is None:
        cuda = next(model.parameters()).is_cuda
        forward = torch.compile(logits_and_features(model), mode="reduce-overhead" if cuda else None, dynamic=None)
        _COMPILED[model] = forward
    return forward


def logits_and_features(model):
    """A function of a forward call's keyword arguments returning (logits, last hidden states) of ``model``.

    A Hugging Face causal LM goes through its decoder and output head: asking it for its hidden states
    captures them with hooks, which break a compiled graph. Models whose output head does more than a
    linear map (a final logit soft-cap) and other modules (the EAGLE head) are called as they are.
    """
    if callable(getattr(model, "get_decoder", None)) and getattr(model.config, "final_logit_softcapping", None) is None:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
        key = _cache_keyword(type(decoder))  # resolved here, not in the traced step

        def step(cache=None, **inputs):
            h = decoder(**{**inputs, key: cache}).last_hidden_state
            return head(h), h
    else:
        key = _cache_keyword(type(model))

        def step(cache=None, **inputs):
            out = model(**{**inputs, key: cache}, output_hidden_states=True)
            return out.logits, out.hidden_states[-1]
    return step


def chosen_states(hidden_states, hidden):
    """The features a forward pass returns for ``hidden`` (see :class:`CachedLM`): None (False), the last hidden states
    (True), or the states after the layers of a tuple of ``hidden_states`` indices followed by the last ones,
    concatenated on the last axis (what a head fusing several target layers reads)."""
    if not hidden:
        return None
    if hidden is True:
        return hidden_states[-1]
    import torch

    return torch.cat([hidden_states[i] for i in hidden] + [hidden_states[-1]], dim=-1)


def make_cache(model, batch: int, *, hidden: bool = False, kind: str = "auto", max_length: int | None = None):
    """The KV cache of ``kind`` (:data:`CACHE_KINDS`) for ``batch`` sequences of at most ``max_length`` tokens."""
    if kind not in CACHE_KINDS:
        raise ValueError(f"cache: expected one of {CACHE_KINDS}, got {kind!r}")
    if kind == "auto":
        kind = "compiled" if next(model.parameters()).is_cuda else "dynamic"
    if kind == "dynamic":
        return CachedLM(model, batch, hidden=hidden)
    if max_length is None:
        raise ValueError(f"a {kind} cache needs max_length (the longest sequence it will hold)")
    if kind == "compiled":
        max_length = -(-int(max_length) // STATIC_BUCKET) * STATIC_BUCKET
    return StaticCachedLM(model, batch, max_length, hidden=hidden, pool=True,
                          forward=compiled_forward(model) if kind == "compiled" else None)


def pooled_cache(model, batch: int, max_length: int, owner):
    """A Hugging Face ``StaticCache`` for ``batch`` × ``max_length`` slots of ``model``, held by ``owner``.

    The cache of an earlier owner of the same size is handed on once that owner is gone (its slots are
    then free: a :class:`StaticCachedLM` masks every slot it has not written), else a new one is made.
    """
    from transformers import StaticCache

    dtype = next(model.parameters()).dtype
    caches = _POOL.setdefault(model, {}).setdefault((int(batch), int(max_length), dtype), [])
    for i, (cache, held_by) in enumerate(caches):
        if held_by() is None:
            caches[i] = (cache, weakref.ref(owner))
            return cache
    cache = StaticCache(config=model.config, max_cache_len=int(max_length))
    caches.append((cache, weakref.ref(owner)))
    return cache


def _ids(tokens):
    """Token ids as given when they are a tensor (kept on its device), else an int64 numpy array."""
    import torch

    return tokens if torch.is_tensor(tokens) else np.asarray(tokens, dtype=np.int64)


class _Pending:
    """What both caches share: rollback over the slot mask, and pending tree nodes
    (``_tree`` = (first slot, ancestor matrix, depths, real)) until :meth:`keep_path`."""

    _tree = None

    @property
    def pending(self) -> int:
        """Tree nodes (per row, padding included) scored since the last :meth:`keep_path`."""
        return 0 if self._tree is None else self._tree[1].shape[1]

    def keep_path(self, paths) -> None:
        """Keep pending nodes ``paths[b]`` (a root-first chain) of each tree as tokens of sequence b; drop the rest."""
        if self._tree is None:
            if any(len(path) for path in paths):
                raise ValueError("keep_path: no tree is pending (call feed_tree first)")
            return
        start, below, _, _ = self._tree
        for b, path in enumerate(paths):
            path = check_path(below, b, path)
            self.valid[b, [start + j for j in path]] = True  # host mask: no device round trip
            self.length[b] += len(path)
        self._tree = None
        self._settle()

    def _no_tree(self, what: str) -> None:
        if self._tree is not None:
            raise RuntimeError(f"{what}: tree nodes are pending; call keep_path first")

    def _add_nodes(self, parents, counts, first_slot: int):
        """Register m new pending nodes; returns (first pending slot, node mask (B, m, M + m), depths (B, m)).

        The mask says which pending nodes each new node sees: its ancestors and itself (padding
        nodes see themselves only, so no softmax row is empty); ``first_slot`` is where a new tree starts.
        """
        B, m = parents.shape
        start, below, depth, real = self._tree or (first_slot, np.zeros((B, 0, 0), dtype=bool),
                                                    np.zeros((B, 0), dtype=np.int64), np.zeros((B, 0), dtype=bool))
        M = below.shape[1]
        if isinstance(parents, np.ndarray) and isinstance(below, np.ndarray):
            grown, depth, real = grow_tree(below, depth, real, parents, counts)
            sees = grown[:, M:] & real[:, None, :]
        else:  # parents on the device (or an earlier call's were): the tree stays there
            import torch

            grown, depth, real = grow_tree_on_device(below, depth, real, on_device(parents, self.device), counts)
            sees = grown[:, M:] & on_device(real, self.device)[:, None, :]
            ids = torch.arange(m, device=self.device)
            sees[:, ids, M + ids] = True
            self._tree = (start, grown, depth, real)
            return start, sees, depth[:, M:]
        sees[:, np.arange(m), M + np.arange(m)] = True
        self._tree = (start, grown, depth, real)
        return start, sees, depth[:, M:]

    def rollback(self, keep) -> None:
        """Keep the first ``keep[b]`` tokens of sequence b (at most its length): their slots stay, the rest are freed."""

        self._no_tree("rollback")
        keep = np.minimum(np.asarray(keep, dtype=np.int64), self.length)
        if (keep < 0).any():
            raise ValueError(f"rollback: keep must be >= 0, got {keep.tolist()}")
        rank = np.cumsum(self.valid, axis=1)
        self.valid = self.valid & (rank <= keep[:, None])
        self.length = keep
        self._settle()


class CachedLM(_Pending):
    """A causal LM with a KV cache over ``batch`` sequences of different lengths.

    Attributes
    ----------
    length : int ndarray, shape (B,)
        Tokens of each sequence held in the cache.
    valid : bool ndarray, shape (B, slots)
        Which cache slots hold a token of their row (the rest are holes, masked out of attention).
    max_holes : int
        Slots beyond the longest row kept before the layout is restored (module docstring).
    calls : int
        Forward passes made so far.
    """

    def __init__(self, model, batch: int, *, hidden: bool = False, max_holes: int = 64):
        from transformers import DynamicCache

        if int(max_holes) < 0:
            raise ValueError(f"max_holes must be >= 0, got {max_holes}")
        self.model, self.hidden, self.max_holes = model, hidden, int(max_holes)
        self.device = next(model.parameters()).device
        self.cache = DynamicCache(config=model.config)
        self.valid = np.zeros((batch, 0), dtype=bool)  # (B, slots), on the host: the device gets copies
        self.length = np.zeros(batch, dtype=np.int64)
        self.calls = 0
        self._tree = None  # pending tree nodes: (first slot, ancestor matrix, depths, real) until keep_path

    def feed(self, tokens, counts, **inputs):
        """Append ``tokens[b, :counts[b]]`` to sequence b; one forward pass (``inputs``: more keyword inputs of the
        model, aligned with the tokens, e.g. a draft head's features).

        Parameters
        ----------
        tokens : int array, shape (B, m)
            Right-padded new tokens (entries past ``counts[b]`` are ignored).
        counts : int array, shape (B,)
            How many of row b's tokens are real (0 leaves the sequence unchanged).

        Returns
        -------
        logits : tensor (B, m, V)
            ``logits[b, j]`` is the next-token logit row after the j-th new token (meaningless
            for padding).
        hidden : tensor (B, m, H) or None
            The last hidden states at the same positions (when built with ``hidden=True``; with a tuple of layer
            indices, those layers' states then the last ones, concatenated: :func:`chosen_states`).
        """
        import torch

        self._no_tree("feed")
        tokens, counts = _ids(tokens), np.asarray(counts, dtype=np.int64)
        m = tokens.shape[1]
        new = np.arange(m)[None, :] < counts[:, None]
        mask = np.concatenate([self.valid, new], axis=1)
        positions = on_device(self.length[:, None] + np.arange(m)[None, :], self.device)
        with torch.no_grad():
            out = self.model(input_ids=on_device(tokens, self.device), attention_mask=on_device(mask, self.device).long(),
                             position_ids=positions, **cache_kwargs(self.model, self.cache), use_cache=True,
                             output_hidden_states=bool(self.hidden), **inputs)
        self.calls += 1
        self.valid, self.length = mask, self.length + counts
        self._compact()
        return out.logits, chosen_states(out.hidden_states, self.hidden)

    def feed_tree(self, tokens, parents, counts, **inputs):
        """Score ``counts[b]`` tree nodes per sequence in one forward pass; returns (logits (B, m, V), hidden (B, m, H)
        or None) as :meth:`feed` does (``inputs``: more keyword inputs aligned with the nodes, e.g. a head's features).

        ``tokens`` (B, m) are right-padded nodes, listed parents first; ``parents`` (B, m) gives each
        node's parent among the row's *pending* nodes — those of every :meth:`feed_tree` call since the
        last :meth:`keep_path`, numbered in order across calls — or -1 for a child of the sequence's
        last token. A tree can so be grown a level per call (drafting) or scored whole (verification).
        ``logits[b, j]`` is the next-token row after the path root → node j. Pending nodes belong to
        no sequence until :meth:`keep_path`.
        """
        import torch

        tokens, parents = _ids(tokens), _ids(parents)
        counts = np.asarray(counts, dtype=np.int64)
        B, m = tokens.shape
        start, sees, depths = self._add_nodes(parents, counts, self.valid.shape[1])
        prefix = np.broadcast_to(self.valid[:, None, :start], (B, m, start))
        if isinstance(sees, np.ndarray):
            mask = on_device(np.concatenate([prefix, sees], axis=2)[:, None], self.device)
        else:
            mask = torch.cat([on_device(np.ascontiguousarray(prefix), self.device), sees], dim=2)[:, None]
        positions = on_device(self.length[:, None], self.device) + on_device(depths, self.device)
        with torch.no_grad():
            out = self.model(input_ids=on_device(tokens, self.device), attention_mask=mask,
                             position_ids=positions, **cache_kwargs(self.model, self.cache), use_cache=True,
                             output_hidden_states=bool(self.hidden), **inputs)
        self.calls += 1
        self.valid = np.concatenate([self.valid, np.zeros((B, m), dtype=bool)], axis=1)
        return out.logits, chosen_states(out.hidden_states, self.hidden)

    def _settle(self) -> None:
        self._compact()

    def _compact(self) -> None:
        """Restore the left-padded layout (crop trailing holes, squeeze holes between tokens) once more than
        ``max_holes`` slots lie beyond the longest row."""
        import torch

        slots = int(self.length.max()) if self.length.size else 0
        if self.valid.shape[1] - slots <= self.max_holes:
            return
        as_int = self.valid.astype(np.int8)
        if not self.valid[:, slots:].any() and bool((as_int[:, 1:slots] >= as_int[:, :slots - 1]).all()):
            if self.valid.shape[1] > slots:  # left-padded with trailing holes only: a crop (views, no copy)
                for layer in self.cache.layers:
                    layer.keys, layer.values = layer.keys[:, :, :slots], layer.values[:, :, :slots]
                self.valid = self.valid[:, :slots]
            return
        # holes first, then each row's tokens in their order; the last `slots` columns are the new layout
        order = np.argsort(as_int, axis=1, kind="stable")[:, as_int.shape[1] - slots:]
        index_dev = on_device(order, self.device)
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                kv = getattr(layer, name)
                index = index_dev[:, None, :, None].expand(-1, kv.shape[1], -1, kv.shape[3])
                setattr(layer, name, torch.gather(kv, 2, index))
        self.valid = np.take_along_axis(self.valid, order, axis=1)


class StaticCachedLM(_Pending):
    """:class:`CachedLM`'s interface on a preallocated Hugging Face ``StaticCache`` (the CUDA path).

    Every sequence's keys and values live in ``max_length`` fixed slots; all rows write a call's
    tokens at the same slots (``ptr`` onwards) and a boolean slot mask (B, S) says which slots are
    real. Rollback is *position-based*: it only clears mask bits and moves the write pointer back
    (no tensor is copied or reallocated), so the cache tensors keep their addresses and a compiled
    forward (``torch.compile``, CUDA graphs) is reused across calls of the same width. Rows that
    kept different numbers of tokens leave holes; when the slots run out they are squeezed out in
    place (one gather per layer), and a sequence longer than ``max_length`` is a clear error.
    Positions come from each row's own length, so RoPE sees no holes. ``forward`` (e.g.
    :func:`compiled_forward`) runs calls of at most ``compile_width`` tokens into a cache that
    holds some already; the prefill (whose width changes with the prompts) and wider calls run
    eagerly on the same cache, and what a compiled call returns is copied out of the graph's
    buffers. ``pool``: take the cache tensors from :func:`pooled_cache`.
    """

    def __init__(self, model, batch: int, max_length: int, *, hidden: bool = False, forward=None,
                 compile_width: int = 64, pool: bool = False):
        from transformers import StaticCache

        self.model, self.hidden, self.max_length = model, hidden, int(max_length)
        self.device = next(model.parameters()).device
        self.cache = (pooled_cache(model, batch, self.max_length, self) if pool
                      else StaticCache(config=model.config, max_cache_len=self.max_length))
        self.forward = model if forward is None else forward
        self.compile_width = int(compile_width)
        self.valid = np.zeros((batch, self.max_length), dtype=bool)  # on the host: the device gets copies
        self.length = np.zeros(batch, dtype=np.int64)
        self.ptr, self.calls = 0, 0
        self._tree = None  # (first slot, ancestor matrix, depths, real) of pending tree nodes

    def _room(self, m: int) -> None:
        if self.ptr + m > self.max_length:
            self._squeeze()
        if self.ptr + m > self.max_length:
            raise ValueError(f"StaticCachedLM: {int(self.length.max()) + m} tokens do not fit max_length="
                             f"{self.max_length}; build the cache with a larger max_length")

    def _call(self, tokens, sees, positions, **inputs):
        """One forward pass writing ``tokens`` (B, m) at slots ptr..ptr+m−1; ``sees`` (B, m, S) is the attention mask.

        Returns (logits (B, m, V), last hidden states (B, m, H) or None)."""
        import torch

        for layer in self.cache.layers:
            layer.cumulative_length.fill_(self.ptr)  # where this call writes: the position-based rollback
        compiled = self.forward is not self.model and tokens.shape[1] <= self.compile_width and self.valid.any()
        compiled = compiled and not isinstance(self.hidden, tuple)  # the graph returns the last hidden states only

        width = tokens.shape[1]

        def put(x, axis=1):  # graphs are specialised on strides too: a compiled call gets fresh row-major tensors
            x = on_device(x, self.device)
            if not compiled:
                return x
            x = x.clone(memory_format=torch.contiguous_format)
            if width > 1:  # one graph for every call width above 1 (a draft of L tokens, its shorter tail)
                torch._dynamo.maybe_mark_dynamic(x, axis)
            return x

        args = {"input_ids": put(tokens), "attention_mask": put(sees[:, None], axis=2), "position_ids": put(positions),
                **{name: put(x) for name, x in inputs.items()}}
        with torch.no_grad():
            if compiled:  # a graph's outputs are overwritten by its next replay: copy them out
                logits, hidden = self.forward(cache=self.cache, use_cache=True, **args)
                logits, hidden = logits.clone(), (hidden.clone() if self.hidden else None)
            else:
                out = self.model(**cache_kwargs(self.model, self.cache), use_cache=True,
                                 output_hidden_states=bool(self.hidden), **args)
                logits, hidden = out.logits, chosen_states(out.hidden_states, self.hidden)
        self.calls += 1
        return logits, hidden

    def feed(self, tokens, counts, **inputs):
        """As :meth:`CachedLM.feed`: append ``tokens[b, :counts[b]]``; returns (logits (B, m, V), hidden or None)."""

        self._no_tree("feed")
        tokens, counts = _ids(tokens), np.asarray(counts, dtype=np.int64)
        m = tokens.shape[1]
        self._room(m)
        new = np.arange(m)[None, :] < counts[:, None]
        causal = np.tril(np.ones((m, m), dtype=bool))
        sees = np.repeat(self.valid[:, None, :], m, axis=1)
        sees[:, :, self.ptr:self.ptr + m] = (causal[None] & new[:, None, :]) | np.eye(m, dtype=bool)
        logits, hidden = self._call(tokens, sees, self.length[:, None] + np.arange(m)[None, :], **inputs)
        self.valid[:, self.ptr:self.ptr + m] = new
        self.ptr += m
        self.length = self.length + counts
        self._crop()
        return logits, hidden

    def feed_tree(self, tokens, parents, counts, **inputs):
        """As :meth:`CachedLM.feed_tree` (pending nodes numbered across calls until :meth:`keep_path`)."""

        tokens, parents = _ids(tokens), _ids(parents)
        counts = np.asarray(counts, dtype=np.int64)
        m = tokens.shape[1]
        if self._tree is None:
            self._room(m)
        elif self.ptr + m > self.max_length:
            raise ValueError(f"StaticCachedLM: the tree does not fit max_length={self.max_length}")
        start, tree, depths = self._add_nodes(parents, counts, self.ptr)
        if isinstance(tree, np.ndarray):
            sees = np.repeat(self.valid[:, None, :], m, axis=1)
            sees[:, :, start:start + tree.shape[2]] = tree
            positions = self.length[:, None] + depths
        else:  # a tree grown on the device: the mask is assembled there
            sees = on_device(self.valid, self.device)[:, None, :].repeat(1, m, 1)
            sees[:, :, start:start + tree.shape[2]] = tree
            positions = on_device(self.length[:, None], self.device) + depths
        logits, hidden = self._call(tokens, sees, positions, **inputs)
        self.ptr += m
        return logits, hidden

    def _settle(self) -> None:  # rollback is position-based here: mask bits cleared, the pointer moved back
        self._crop()

    def _crop(self) -> None:
        """Move the pointer to just after the last real slot of any row (trailing holes are free again)."""
        used = np.flatnonzero(self.valid.any(axis=0))
        self.ptr = int(used[-1]) + 1 if used.size else 0

    def _squeeze(self) -> None:
        """Move every row's tokens to its first slots, in order (in place: the tensors keep their addresses)."""
        import torch

        order = np.argsort((~self.valid).astype(np.int8), axis=1, kind="stable")  # real slots first
        index = on_device(order, self.device)
        for layer in self.cache.layers:
            if getattr(layer, "is_initialized", False):
                for kv in (layer.keys, layer.values):
                    kv.copy_(torch.gather(kv, 2, index[:, None, :, None].expand(-1, kv.shape[1], -1, kv.shape[3])))
        self.valid = np.take_along_axis(self.valid, order, axis=1)
        self._crop()
