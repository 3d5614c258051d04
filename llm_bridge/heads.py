"""Feature-level draft heads: drafters that read the target's own hidden states (EAGLE- and Medusa-style).

The strongest drafts of the field are not separate small models but heads on the target's last
features (the hidden state after its final norm, which its output head turns into a row):

* :class:`EagleHead` (EAGLE, Li et al. 2024) — one decoder layer of the target's architecture over
  ``fc([feature, token embedding])``. Pair j is (the target's feature whose row gave token j, token j);
  the layer's output predicts the next feature, and the output head turns it into the next row. While
  drafting it runs on its own predicted features; after each verification its cache drops them and
  re-reads the committed tokens with the target's true features.
* :class:`MedusaHeads` (Medusa, Cai et al. 2024) — k residual blocks on the feature that gave the
  last committed token; block i proposes the token i + 1 places after it, whatever was drafted before.

Either head may draft over a *reduced vocabulary* (the N most frequent tokens of the target's own
samples, as FR-Spec and EAGLE-3 do): its output head is the target's output rows of those N tokens,
and its rows are full-vocabulary rows that are 0 elsewhere. Speculative sampling allows any draft
row, so every otspec verifier runs unchanged and stays exact. The heads' sessions
(:class:`EagleSession`, :class:`MedusaSession`) take the target's features through the session
protocol (``reads_target_features``: ``start(prompts, features=...)``, ``commit(..., features=...)``).

:mod:`llm_bridge.head_replays` holds their exact sources and the replays their predictions run on.
Weights come from ``python -m llm_bridge.train_head`` and live in a folder holding ``drafter.json``
(kind, sizes, recipe, held-out acceptance), ``drafter.safetensors`` (trained matrices in int8 with a
float16 scale per row, the vocabulary as int32) and ``train_log.json``; the shipped ones are
``llm_bridge/weights/eagle`` and ``llm_bridge/weights/medusa`` (drafters ``"eagle"`` and ``"medusa"``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import torch

from otspec.distributions import to_device
from otspec.engine.session import Scores, Session, as_prompts

from .cache import cache_kwargs, make_cache
from .kernels import few_row_linears, few_row_product
from .models import output_size
from .sampling import DEFAULT_SAMPLING
from .sessions import concat_tokens, padded, row_tokens
from .treemask import slot_lookup

__all__ = ["HEAD_DIRS", "HEAD_KINDS", "EagleHead", "EagleSession", "MedusaHeads", "MedusaSession",
           "build_head", "eagle_unrolled", "load_head", "save_head"]

HEAD_KINDS = ("eagle", "medusa")
#: Where ``python -m llm_bridge.train_head --kind K`` writes the shipped head of each kind.
HEAD_DIRS = {kind: Path(__file__).parent / "weights" / kind for kind in HEAD_KINDS}


def _output_rows(target_model, vocab):
    """The target's output-head rows of the ``vocab`` tokens (N, H), detached (not trained, not shipped)."""
    weight = target_model.get_output_embeddings().weight.detach()
    return weight[torch.as_tensor(vocab, device=weight.device)].clone()


def _check_vocab(vocab, vocab_size: int):
    vocab = np.asarray(vocab, dtype=np.int64).reshape(-1)
    if vocab.size == 0 or vocab.min() < 0 or vocab.max() >= vocab_size or np.unique(vocab).size != vocab.size:
        raise ValueError(f"a head's vocabulary must be distinct token ids in [0, {vocab_size}), got {vocab.size} ids "
                         f"in [{vocab.min(initial=0)}, {vocab.max(initial=0)}]")
    return np.sort(vocab)


class _ReducedOutput:
    """What both heads share: the reduced output head and full-vocabulary logits (−inf outside the vocabulary)."""

    def _setup_output(self, target_model, vocab) -> None:
        self.vocab_size = output_size(target_model)
        vocab = _check_vocab(vocab, self.vocab_size)
        self.register_buffer("vocab", torch.as_tensor(vocab, dtype=torch.int64))
        self.register_buffer("out_rows", _output_rows(target_model, vocab), persistent=False)

    def reduced_logits(self, h):
        """Logits over the head's vocabulary (..., N)."""
        return few_row_product(h, self.out_rows)

    def full_logits(self, reduced):
        """(..., N) logits spread over the full vocabulary, −inf outside the head's tokens."""
        out = reduced.new_full((*reduced.shape[:-1], self.vocab_size), -torch.inf)
        return out.index_copy_(-1, self.vocab, reduced)


class EagleHead(torch.nn.Module, _ReducedOutput):
    """One decoder layer of the target's architecture over ``fc([target feature, token embedding])``.

    Parameters
    ----------
    target_model : Hugging Face causal LM
        Gives the architecture (one layer of it), the token embedding and the output rows (both shared,
        not trained) and the initial weights (its last decoder layer and final norm).
    vocab : int array
        The tokens the head drafts (all of them: ``np.arange(V)``).
    """

    kind = "eagle"

    def __init__(self, target_model, vocab):
        super().__init__()
        config = copy.deepcopy(target_model.config)
        config.num_hidden_layers = 1
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[-1:]
        config.vocab_size, config.pad_token_id = 1, None  # its own embedding is never used
        base = target_model.base_model
        self.config = config
        self.body = type(base)(config).to(dtype=next(target_model.parameters()).dtype)
        H = config.hidden_size
        self.fc = torch.nn.Linear(2 * H, H, bias=True).to(self.body.dtype)
        with torch.no_grad():  # start as "the feature itself": its row is the target's own row at the feature
            w = base.norm.weight.detach()  # features are norm(r) * w: dividing by w makes the final norm give f back
            self.fc.weight.zero_()
            self.fc.weight[:, :H].copy_(torch.diag(1.0 / torch.where(w.abs() > 1e-3, w, torch.full_like(w, 1e-3))))
            self.fc.bias.zero_()
            layer = self.body.layers[0]
            layer.load_state_dict(base.layers[-1].state_dict())
            for name, module in layer.named_modules():  # the residual branches' last projections start at zero
                if name.endswith(("o_proj", "down_proj")):
                    module.weight.zero_()
            self.body.norm.load_state_dict(base.norm.state_dict())
        self.body.embed_tokens.requires_grad_(False)
        self.register_buffer("embed_rows", base.get_input_embeddings().weight.detach(), persistent=False)
        self._setup_output(target_model, vocab)

    def features(self, input_ids, features, **kwargs):
        """The head's predicted next features (B, m, H) for pairs (``features``, ``input_ids``)."""
        x = self.fc(torch.cat([features.to(self.fc.weight.dtype), self.embed_rows[input_ids]], dim=-1))
        return self.body(inputs_embeds=x, **kwargs).last_hidden_state

    def forward(self, input_ids, features, attention_mask=None, position_ids=None, past_key_values=None,
                use_cache=False, output_hidden_states=False, **_):
        """The model interface :class:`~llm_bridge.cache.CachedLM` calls: full-vocabulary logits and the features."""
        from transformers.modeling_outputs import CausalLMOutputWithPast

        # a ModelOutput, which torch.compile traces into the graph (a SimpleNamespace broke it)

        h = self.features(input_ids, features, attention_mask=attention_mask, position_ids=position_ids,
                          **cache_kwargs(self.body, past_key_values), use_cache=use_cache)
        return CausalLMOutputWithPast(logits=self.full_logits(self.reduced_logits(h)), hidden_states=(h,))


class MedusaHeads(torch.nn.Module, _ReducedOutput):
    """k residual blocks ``f + SiLU(W_i f + b_i)`` on a target feature, each followed by the reduced output head.

    Block i proposes the token i + 1 places after the token that ``f`` gave. Blocks start at zero, so each
    first proposes the target's own row at ``f``.
    """

    kind = "medusa"

    def __init__(self, target_model, vocab, k: int = 4):
        super().__init__()
        if int(k) != k or k < 1:
            raise ValueError(f"medusa: expected k >= 1 heads, got {k!r}")
        H, dtype = target_model.config.hidden_size, next(target_model.parameters()).dtype
        self.k = int(k)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(H, H).to(dtype) for _ in range(self.k))
        with torch.no_grad():
            for block in self.blocks:
                block.weight.zero_()
                block.bias.zero_()
        self._setup_output(target_model, vocab)

    def forward(self, features):
        """Reduced logits (..., k, N) of every block on ``features`` (..., H)."""
        return torch.stack([self.block_logits(features, r) for r in range(self.k)], dim=-2)

    def block_logits(self, features, r: int):
        """Reduced logits (..., N) of block ``r`` alone on ``features`` (..., H)."""
        f = features.to(self.blocks[0].weight.dtype)
        return self.reduced_logits(f + torch.nn.functional.silu(self.blocks[r](f)))


def eagle_unrolled(head, x, F, real, unroll: int) -> list:
    """The head's predicted features (B, T - 1, H) at drafting steps s = 1..``unroll`` over whole sequences at once.

    Pair i is (F[i], x[i + 1]). At step 1 every pair reads the target's feature; at step s pair i reads the step
    s − 1 output at i − 1 (the head's own prediction) and its attention sees the step-1 keys of pairs ≤ i − s + 1
    and the step-r keys of pair i − s + r (r = 2..s): exactly what drafting s tokens after committed pair
    i − s + 1 computes, so one pass per step trains every draft position ("training-time test").
    """
    from transformers import DynamicCache

    B, T = x.shape
    n = T - 1
    real = real[:, 1:]
    emb = head.embed_rows[x[:, 1:]]
    cache, out, prev = DynamicCache(config=head.config), [], None
    positions = torch.arange(n, device=x.device)[None].expand(B, -1)
    i = torch.arange(n, device=x.device)
    for s in range(1, unroll + 1):
        if s == 1:
            feats, mask = F[:, :-1], real.long()
        else:  # pair i reads the step s-1 output at i - 1; it sees true keys <= i - s + 1 and step r keys at i - s + r
            feats = torch.cat([torch.zeros_like(prev[:, :1]), prev[:, :-1]], dim=1)
            sees = torch.zeros((B, n, s * n), dtype=torch.bool, device=x.device)
            sees[:, :, :n] = (i[None, :] <= (i[:, None] - s + 1))[None] & real[:, None, :]
            for r in range(2, s + 1):
                j = i - s + r
                ok = j >= 0
                sees[:, i[ok], (r - 1) * n + j[ok]] = real[:, j[ok]]
            sees[:, i, (s - 1) * n + i] = True  # every query sees itself (no empty softmax row)
            mask = sees[:, None]
        xin = head.fc(torch.cat([feats, emb], dim=-1))
        prev = head.body(inputs_embeds=xin, attention_mask=mask, position_ids=positions,
                         **cache_kwargs(head.body, cache), use_cache=True).last_hidden_state
        out.append(prev)
    return out


def build_head(kind: str, target_model, vocab, **options):
    """A fresh head of ``kind`` (:data:`HEAD_KINDS`) for ``target_model``."""
    if kind == "eagle":
        return few_row_linears(EagleHead(target_model, vocab))
    if kind == "medusa":
        return few_row_linears(MedusaHeads(target_model, vocab, **options))
    raise ValueError(f"head kind: expected one of {HEAD_KINDS}, got {kind!r}")


def _trained(head) -> dict:
    return {name: p for name, p in head.named_parameters() if p.requires_grad}


def save_head(head, folder: Path, record: dict) -> dict:
    """Write the head's trained weights (int8 rows) and ``record`` (plus sizes) to ``folder``; returns the record."""
    from safetensors.torch import save_file

    from .int8 import quantize_rows

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stored = quantize_rows(_trained(head))
    stored["vocab"] = head.vocab.to(torch.int32).cpu().contiguous()
    save_file(stored, folder / "drafter.safetensors")
    record = {**record, "kind": head.kind, "vocab_size": int(head.vocab.numel()),
              "target_vocab_size": int(head.vocab_size), "medusa_heads": getattr(head, "k", None),
              "trained_parameters": int(sum(p.numel() for p in _trained(head).values())),
              "file_bytes": (folder / "drafter.safetensors").stat().st_size}
    (folder / "drafter.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def load_head(folder: Path, target_model):
    """The head saved in ``folder`` for ``target_model`` (weights as shipped: int8 rows dequantised)."""
    from safetensors.torch import load_file

    from .int8 import dequantize_rows

    folder = Path(folder)
    meta_path = folder / "drafter.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"no draft head at {folder} (make one with: python -m llm_bridge.train_head)")
    meta = json.loads(meta_path.read_text())
    V = output_size(target_model)
    if meta["target_vocab_size"] != V:
        raise ValueError(f"{folder}: the head was trained for a vocabulary of {meta['target_vocab_size']:,}; this "
                         f"target has {V:,}")
    stored = load_file(folder / "drafter.safetensors")
    vocab = stored.pop("vocab").long().numpy()
    options = {"k": meta["medusa_heads"]} if meta["kind"] == "medusa" else {}
    head = build_head(meta["kind"], target_model, vocab, **options)
    weights = dequantize_rows(stored)
    own = _trained(head)
    if set(weights) != set(own):
        raise ValueError(f"{folder}: weights {sorted(set(weights) ^ set(own))[:3]} do not fit a {meta['kind']} head")
    head.load_state_dict({k: v.to(own[k].dtype) for k, v in weights.items()}, strict=False)
    return head.to(next(target_model.parameters()).device).eval(), meta


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
        feats = torch.zeros((self.batch, tokens.shape[1], self.last_h.shape[1]), device=self.device, dtype=self.dtype)
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
    """:class:`MedusaHeads` over B sequences: the row at draft position i is block i's on the last committed feature."""

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
        H = self.head.blocks[0].weight.shape[1]
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

    def feed(self, tokens, counts) -> Scores:
        counts = np.asarray(counts, dtype=np.int64)
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
        self.drafted[:] = 0
        self._rows = None
