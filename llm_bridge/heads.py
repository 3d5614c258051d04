"""Feature-level draft heads: drafters that read the target's own hidden states (EAGLE- and Medusa-style).

The strongest drafts of the field are not separate small models but heads on the target's last
features (the hidden state after its final norm, which its output head turns into a row):

* :class:`EagleHead` (EAGLE, Li et al. 2024) — one decoder layer of the target's architecture over
  ``fc([feature, token embedding])``. Pair j is (the target's feature whose row gave token j, token j);
  the layer's output predicts the next feature, and the output head turns it into the next row. While
  drafting it runs on its own predicted features; after each verification its cache drops them and
  re-reads the committed tokens with the target's true features. With ``fuse`` layers (EAGLE-3, Li et
  al. 2025) the target's feature is a learned map of its states after a low and a middle layer
  (each RMS-normalised) and its last feature, concatenated; the head's own predictions stay one feature.
* :class:`MedusaHeads` (Medusa, Cai et al. 2024) — k residual blocks on the feature that gave the
  last committed token; block i proposes the token i + 1 places after it, whatever was drafted before.
  With ``hydra`` (Hydra, Ankner et al. 2024) block i also reads the embeddings of the last committed
  token and of the i tokens drafted after it, so each proposal depends on the draft before it.

Either head may draft over a *reduced vocabulary* (the N most frequent tokens of the target's own
samples, as FR-Spec and EAGLE-3 do): its output head is the target's output rows of those N tokens,
and its rows are full-vocabulary rows that are 0 elsewhere. Speculative sampling allows any draft
row, so every otspec verifier runs unchanged and stays exact. The heads' sessions
(:mod:`llm_bridge.head_sessions`) take the target's features through the session
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

from .cache import cache_kwargs
from .kernels import few_row_linears, few_row_product, int8_packed, int8_product
from .models import output_size

__all__ = ["HEAD_DIRS", "HEAD_KINDS", "EagleHead", "MedusaHeads", "build_head", "eagle_unrolled", "load_head",
           "int8_head", "save_head", "target_features"]

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
        """Logits over the head's vocabulary (..., N) (int8 rows after :func:`int8_head`)."""
        packed = getattr(self, "out_packed", None)
        return few_row_product(h, self.out_rows) if packed is None else int8_product(h, packed)

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
    fuse : tuple of int
        Indices of the target's ``hidden_states`` (0: the embeddings, i: after layer i) fused with its last
        feature (EAGLE-3); empty: the last feature alone (EAGLE). The fusion starts as "the last feature".
    layers : int
        Decoder layers of the head (1 as in EAGLE; more cost a layer each per draft call), initialised from the
        target's last ``layers`` layers.
    """

    kind = "eagle"

    def __init__(self, target_model, vocab, fuse=(), layers: int = 1):
        super().__init__()
        deepest = target_model.config.num_hidden_layers
        if isinstance(layers, bool) or int(layers) != layers or not 1 <= layers <= deepest:
            raise ValueError(f"an EAGLE head's layers: expected 1 <= layers <= {deepest} (the target's), got "
                             f"{layers!r}")
        layers = int(layers)
        config = copy.deepcopy(target_model.config)
        config.num_hidden_layers = layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[-layers:]
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
            for layer, source in zip(self.body.layers, base.layers[-layers:], strict=True):
                layer.load_state_dict(source.state_dict())
                for name, module in layer.named_modules():  # the residual branches' last projections start at zero
                    if name.endswith(("o_proj", "down_proj")):
                        module.weight.zero_()
            self.body.norm.load_state_dict(base.norm.state_dict())
        self.body.embed_tokens.requires_grad_(False)
        self.register_buffer("embed_rows", base.get_input_embeddings().weight.detach(), persistent=False)
        self._setup_output(target_model, vocab)
        self.fuse_layers = _check_fuse(fuse, target_model.config.num_hidden_layers)
        if self.fuse_layers:
            k = len(self.fuse_layers)
            self.fuse = torch.nn.Linear((k + 1) * H, H, bias=False).to(self.body.dtype)
            with torch.no_grad():
                self.fuse.weight.zero_()
                self.fuse.weight[:, k * H:].copy_(torch.eye(H))

    def fused(self, features):
        """``features`` as the layer's input reads them: a target's fused states (…, (k + 1)·H) mapped to one
        feature, the head's own predictions (…, H) as they are."""
        features = features.to(self.fc.weight.dtype)
        H = self.config.hidden_size
        if not self.fuse_layers or features.shape[-1] == H:
            return features
        *low, last = features.split(H, dim=-1)
        low = [x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) for x in low]
        return self.fuse(torch.cat([*low, last], dim=-1))

    def features(self, input_ids, features, **kwargs):
        """The head's predicted next features (B, m, H) for pairs (``features``, ``input_ids``)."""
        x = self.fc(torch.cat([self.fused(features), self.embed_rows[input_ids]], dim=-1))
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
    first proposes the target's own row at ``f``. With ``hydra`` block i reads ``[f, e_0, …, e_i]`` instead of
    ``f`` (``W_i`` is H × (i + 2)H): e_0 embeds the token ``f`` gave, e_1..e_i the tokens drafted after it.
    """

    kind = "medusa"

    def __init__(self, target_model, vocab, k: int = 4, hydra: bool = False):
        super().__init__()
        if int(k) != k or k < 1:
            raise ValueError(f"medusa: expected k >= 1 heads, got {k!r}")
        H, dtype = target_model.config.hidden_size, next(target_model.parameters()).dtype
        self.k, self.hydra = int(k), bool(hydra)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(H * (r + 2 if self.hydra else 1), H).to(dtype)
                                          for r in range(self.k))
        with torch.no_grad():
            for block in self.blocks:
                block.weight.zero_()
                block.bias.zero_()
        if self.hydra:
            self.register_buffer("embed_rows", target_model.get_input_embeddings().weight.detach(), persistent=False)
        self._setup_output(target_model, vocab)

    def forward(self, features):
        """Reduced logits (..., k, N) of every block on ``features`` (..., H) (Medusa only: Hydra's need tokens)."""
        return torch.stack([self.block_logits(features, r) for r in range(self.k)], dim=-2)

    def block_logits(self, features, r: int, tokens=None):
        """Reduced logits (..., N) of block ``r`` alone on ``features`` (..., H); Hydra's also read ``tokens``
        (..., r + 1): the token the feature gave, then the r drafted after it."""
        f = features.to(self.blocks[0].weight.dtype)
        x = f
        if self.hydra:
            if tokens is None or tokens.shape[-1] != r + 1:
                raise ValueError(f"Hydra block {r} reads {r + 1} tokens (the committed one, then {r} drafted)")
            x = torch.cat([f, self.embed_rows[tokens].flatten(-2).to(f.dtype)], dim=-1)
        return self.reduced_logits(f + torch.nn.functional.silu(self.blocks[r](x)))


def _check_fuse(fuse, layers: int) -> tuple:
    fuse = tuple(int(i) for i in fuse)
    if any(not 0 <= i < layers for i in fuse) or len(set(fuse)) != len(fuse):
        raise ValueError(f"fuse: expected distinct layer indices in [0, {layers}) (the last feature is always read), "
                         f"got {list(fuse)}")
    return fuse


def target_features(head, target_model, ids):
    """(the target's last features (B, T, H), the features ``head`` reads (B, T, ·)) from one full pass on ``ids``:
    for a head fusing layers, their states then the last ones (:func:`llm_bridge.cache.chosen_states`)."""
    fuse = getattr(head, "fuse_layers", ())
    out = target_model.base_model(input_ids=ids, output_hidden_states=bool(fuse))
    last = out.last_hidden_state
    return last, (torch.cat([out.hidden_states[i] for i in fuse] + [last], dim=-1) if fuse else last)


def eagle_unrolled(head, x, F, real, unroll: int) -> list:
    """The head's predicted features (B, T - 1, H) at drafting steps s = 1..``unroll`` over whole sequences at once.

    Pair i is (F[i], x[i + 1]) (F: the target's features as the head reads them). At step 1 every pair reads the
    target's feature; at step s pair i reads the step
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
        xin = head.fc(torch.cat([head.fused(feats), emb], dim=-1))
        prev = head.body(inputs_embeds=xin, attention_mask=mask, position_ids=positions,
                         **cache_kwargs(head.body, cache), use_cache=True).last_hidden_state
        out.append(prev)
    return out


def build_head(kind: str, target_model, vocab, **options):
    """A fresh head of ``kind`` (:data:`HEAD_KINDS`) for ``target_model``."""
    if kind == "eagle":
        return few_row_linears(EagleHead(target_model, vocab, **options))
    if kind == "medusa":
        return few_row_linears(MedusaHeads(target_model, vocab, **options))
    raise ValueError(f"head kind: expected one of {HEAD_KINDS}, got {kind!r}")


def int8_head(head):
    """``head`` (in place) multiplying by its output rows as int8 rows on CPU
    (:func:`llm_bridge.kernels.int8_product`): the largest product of a draft step reads a fourth of its float32
    bytes. Its rows move a little, so they are another draft's rows, verified as any other (the output law stays
    the target's); held-out acceptance of the shipped EAGLE head moved from 0.409 to 0.405 at the first position.
    The layers before stay float32 (their inputs have outlier channels one int8 scale cannot hold: int8 there cost
    0.07 acceptance). Inference only; returns ``head``."""
    head.out_packed = int8_packed(head.out_rows)
    head.compute = "int8 output rows"
    return head


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
              "fuse_layers": list(getattr(head, "fuse_layers", ())), "hydra": bool(getattr(head, "hydra", False)),
              "head_layers": len(head.body.layers) if head.kind == "eagle" else None,
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
    options = ({"k": meta["medusa_heads"], "hydra": meta.get("hydra", False)} if meta["kind"] == "medusa"
               else {"fuse": meta.get("fuse_layers", []), "layers": meta.get("head_layers") or 1})
    head = build_head(meta["kind"], target_model, vocab, **options)
    weights = dequantize_rows(stored)
    own = _trained(head)
    if set(weights) != set(own):
        raise ValueError(f"{folder}: weights {sorted(set(weights) ^ set(own))[:3]} do not fit a {meta['kind']} head")
    head.load_state_dict({k: v.to(own[k].dtype) for k, v in weights.items()}, strict=False)
    return head.to(next(target_model.parameters()).device).eval(), meta
